//! One instance of the service: it campaigns with its base URL, runs the
//! scheduled job while it leads, answers `GET /leader` for anyone, and
//! `GET /healthz` for an orchestrator: unhealthy while it holds a
//! leadership that has not been confirmed for longer than a lease past
//! its end (a stuck leader, which an orchestrator should restart).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use distlock::{AcquireOptions, Election, Error, LeaderHealth, LockClient, RiskReason, RiskSignal};
use tokio::sync::watch;

use crate::job::Job;
use crate::wire::{LeaderAnswer, Led};
use crate::{BoxError, LEASE, TICK_EVERY};

/// The first line an instance prints, before its base URL.
pub(crate) const LISTENING: &str = "listening on ";

/// What `serve` was told.
pub(crate) struct Settings {
    /// The port to serve on; 0 picks a free one.
    pub(crate) port: u16,
    pub(crate) instance: u64,
    pub(crate) election: String,
    pub(crate) job_file: PathBuf,
    pub(crate) url: String,
}

/// What `GET /leader` and `GET /healthz` need.
struct Service {
    instance: u64,
    election: Election,
    /// The health of the leadership this instance holds, while it leads.
    leading: Mutex<Option<LeaderHealth>>,
}

impl Service {
    fn set_leading(&self, health: Option<LeaderHealth>) {
        *self.leading.lock().unwrap_or_else(PoisonError::into_inner) = health;
    }
}

/// Serves until its standard input closes (the parent's way to stop it,
/// which also stops it if the parent dies), then resigns if it leads.
pub(crate) async fn serve(settings: Settings) -> Result<(), BoxError> {
    // The URL's query may set another lease; the builder's is the default.
    let client = distlock::connect_with(LockClient::builder().lease(LEASE), &settings.url).await?;
    let election = client.election(settings.election.as_str())?;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", settings.port)).await?;
    let base = format!("http://{}", listener.local_addr()?);
    println!("{LISTENING}{base}");

    let (stop, stopping) = watch::channel(false);
    // A thread, not a task: a read of stdin still blocked when `main`
    // returns (after an error) would keep the runtime from shutting down.
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        stop.send_replace(true);
    });

    let service = Arc::new(Service {
        instance: settings.instance,
        election: election.clone(),
        leading: Mutex::new(None),
    });
    let app = Router::new()
        .route("/leader", get(who_leads))
        .route("/healthz", get(healthz))
        .with_state(service.clone());
    let shutdown = stopped(stopping.clone());
    let server = async {
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(BoxError::from)
    };
    let job = Job::new(settings.job_file, settings.instance);
    tokio::try_join!(server, lead_when_elected(&service, &base, &job, stopping))?;
    Ok(())
}

/// Resolves once the instance is told to stop.
async fn stopped(mut stopping: watch::Receiver<bool>) {
    // A dropped sender is a stop too.
    let _ = stopping.wait_for(|stop| *stop).await;
}

/// How a term of this instance ended.
enum TermEnd {
    Lost(distlock::LossReason),
    FencedOff,
    Stopping,
}

/// Campaigns, runs the job for each term won, and campaigns again after a
/// term is lost, until the instance stops.
async fn lead_when_elected(
    service: &Service,
    base: &str,
    job: &Job,
    stopping: watch::Receiver<bool>,
) -> Result<(), BoxError> {
    loop {
        let cancel = stopped(stopping.clone());
        let leadership = match service
            .election
            .campaign(base, AcquireOptions::new().cancel_on(cancel))
            .await
        {
            Ok(leadership) => leadership,
            Err(Error::Cancelled { .. }) => return Ok(()),
            Err(error) => return Err(error.into()),
        };
        let term = leadership.term();
        println!("elected in term {term}: running the job every {TICK_EVERY:?}");
        // A lease's worth of tolerance: a leader stuck for longer than
        // that answers 503 on `GET /healthz`.
        service.set_leading(Some(leadership.health(LEASE)));
        tokio::spawn(report_dangers(term, leadership.risk_signal()));
        let end = tokio::select! {
            reason = leadership.lost() => TermEnd::Lost(reason),
            ran = job.run(term) => ran.map(|()| TermEnd::FencedOff)?,
            () = stopped(stopping.clone()) => TermEnd::Stopping,
        };
        service.set_leading(None);
        match end {
            TermEnd::Lost(reason) => println!("no longer leads (term {term}): {reason}"),
            TermEnd::FencedOff => {
                println!("the job's fence turned term {term} away: a later term wrote; resigning");
                leadership.resign().await?;
            }
            TermEnd::Stopping => {
                leadership.resign().await?;
                println!("resigned term {term} and stopped");
                return Ok(());
            }
        }
    }
}

/// Says when a term is in danger of being lost (an extension failed, or
/// went unanswered with little of the lease left), and when it is safe
/// again; ends with the term.
async fn report_dangers(term: u64, risk: RiskSignal) {
    loop {
        match risk.at_risk().await {
            RiskReason::Lost(_) => return,
            reason => println!("term {term} at risk: {reason}"),
        }
        if risk.safe_again().await.is_err() {
            return;
        }
        println!("term {term} confirmed again");
    }
}

/// `GET /healthz`: 503 while this instance holds a leadership that is
/// stale (see [`LeaderHealth`]), 200 otherwise.
async fn healthz(State(service): State<Arc<Service>>) -> (StatusCode, String) {
    let leading = service
        .leading
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    match leading.map(|health| health.check()) {
        None => (StatusCode::OK, "ok: not leading".into()),
        Some(Ok(())) => (StatusCode::OK, "ok: leading".into()),
        Some(Err(stale)) => (StatusCode::SERVICE_UNAVAILABLE, stale.to_string()),
    }
}

/// `GET /leader`: the current leader, read from the backend.
async fn who_leads(
    State(service): State<Arc<Service>>,
) -> Result<Json<LeaderAnswer>, (StatusCode, String)> {
    let leader = service
        .election
        .leader()
        .await
        .map_err(|error| (StatusCode::SERVICE_UNAVAILABLE, error.to_string()))?;
    Ok(Json(LeaderAnswer {
        instance: service.instance,
        leader: leader.map(|leader| Led {
            value: leader.value,
            term: leader.term,
            expires_in_ms: leader.expires_in.map(|left| left.as_millis()),
        }),
    }))
}
