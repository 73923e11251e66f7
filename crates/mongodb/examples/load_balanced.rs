//! The load-balanced scenario: one service, run as three instances on
//! different ports against one MongoDB, whose endpoint reads a report by
//! id, does something, and writes the report back under a named lock, then
//! answers with how long taking the lock took.
//!
//! Run without `serve`, this example is the driver: it starts three
//! instances of itself, fires concurrent requests at all three, first
//! without the lock and then with it, and shows whether updates were lost.
//!
//! ```sh
//! cargo run -p distlock-mongodb --example load_balanced -- mongodb://127.0.0.1:27017/
//! # one instance by hand:
//! cargo run -p distlock-mongodb --example load_balanced -- serve --port 8081 mongodb://127.0.0.1:27017/
//! curl -X POST 'http://127.0.0.1:8081/reports/r1/update'
//! ```
//!
//! The URL may also come from `DISTLOCK_MONGODB_URL`.

use std::net::{SocketAddr, TcpListener};
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use distlock_core::{LockClient, LockName, LockOptions};
use distlock_mongodb::mongodb::Collection;
use distlock_mongodb::mongodb::bson::{Document, doc};
use distlock_mongodb::{MongoBackend, MongoConfig};
use serde::{Deserialize, Serialize};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const INSTANCES: usize = 3;
const REQUESTS: usize = 60;
const DATABASE: &str = "distlock_examples";
/// The "do something" between reading the report and writing it back.
const WORK: Duration = Duration::from_millis(5);

fn usage() -> ExitCode {
    eprintln!(
        "load_balanced needs a MongoDB URL: pass it as the argument or set DISTLOCK_MONGODB_URL, e.g.\n  \
         cargo run -p distlock-mongodb --example load_balanced -- mongodb://127.0.0.1:27017/\n  \
         cargo run -p distlock-mongodb --example load_balanced -- serve --port 8081 mongodb://127.0.0.1:27017/"
    );
    ExitCode::from(2)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let url_from = |rest: &[String]| {
        rest.iter()
            .find(|arg| arg.starts_with("mongodb"))
            .cloned()
            .or_else(|| std::env::var("DISTLOCK_MONGODB_URL").ok())
    };
    let outcome = if args.first().map(String::as_str) == Some("serve") {
        let port = args
            .iter()
            .position(|arg| arg == "--port")
            .and_then(|at| args.get(at + 1))
            .and_then(|port| port.parse::<u16>().ok());
        let (Some(url), Some(port)) = (url_from(&args), port) else {
            return usage();
        };
        serve(&url, port).await.map(|()| true)
    } else {
        let Some(url) = url_from(&args) else {
            return usage();
        };
        drive(&url).await
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("load_balanced: {error}");
            ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------------------
// The service.

struct Service {
    instance: String,
    locks: LockClient,
    reports: Collection<Document>,
}

#[derive(Debug, Deserialize)]
struct UpdateQuery {
    /// `false` to skip the lock, to show what it prevents.
    lock: Option<bool>,
}

/// The endpoint's answer: what it wrote, and the timing of the lock.
#[derive(Debug, Serialize, Deserialize)]
struct Updated {
    instance: String,
    report: String,
    count: i64,
    locked: bool,
    fencing_token: Option<u64>,
    lock_acquire_ms: f64,
    total_ms: f64,
}

async fn serve(url: &str, port: u16) -> Result<(), BoxError> {
    let backend =
        MongoBackend::connect(MongoConfig::new(url).database(DATABASE).collection("locks")).await?;
    let client = distlock_mongodb::mongodb::Client::with_uri_str(url).await?;
    let service = Arc::new(Service {
        instance: format!("instance-{port}"),
        locks: LockClient::new(Arc::new(backend), LockOptions::default()),
        reports: client.database(DATABASE).collection("reports"),
    });
    let app = Router::new()
        .route("/health", get(|| async { "ok" }))
        .route("/reports/{id}", get(read_report))
        .route("/reports/{id}/update", post(update_report))
        .with_state(service);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    eprintln!("load_balanced: serving on http://127.0.0.1:{port}");
    axum::serve(listener, app).await?;
    Ok(())
}

/// A report as `GET /reports/{id}` shows it.
#[derive(Debug, Serialize, Deserialize)]
struct Report {
    report: String,
    count: i64,
}

async fn read_report(
    State(service): State<Arc<Service>>,
    Path(id): Path<String>,
) -> Result<Json<Report>, (StatusCode, String)> {
    let count = read_count(&service, &id).await?;
    Ok(Json(Report { report: id, count }))
}

/// Reads the report, does something, writes it back; under the named lock
/// `reports/<id>` unless `?lock=false`.
async fn update_report(
    State(service): State<Arc<Service>>,
    Path(id): Path<String>,
    Query(query): Query<UpdateQuery>,
) -> Result<Json<Updated>, (StatusCode, String)> {
    let started = Instant::now();
    let locked = query.lock.unwrap_or(true);
    let guard = if locked {
        let name = LockName::new(format!("reports/{id}")).map_err(internal)?;
        let guard = service
            .locks
            .acquire_with(&name, Duration::from_secs(10))
            .await
            .map_err(|error| (StatusCode::SERVICE_UNAVAILABLE, error.to_string()))?;
        Some(guard)
    } else {
        None
    };
    let lock_acquire = started.elapsed();

    // 1. Read the resource by id.
    let count = read_count(&service, &id).await?;
    // 2. Do something.
    tokio::time::sleep(WORK).await;
    // 3. Update the resource, unless the lock was lost meanwhile.
    if guard.as_ref().is_some_and(|guard| guard.is_lost()) {
        return Err((StatusCode::CONFLICT, "lost the lock; not written".into()));
    }
    service
        .reports
        .update_one(
            doc! { "_id": &id },
            doc! { "$set": { "count": count + 1, "lastInstance": &service.instance } },
        )
        .upsert(true)
        .await
        .map_err(internal)?;
    let fencing_token = guard.as_ref().map(|guard| guard.fencing_token());
    if let Some(guard) = guard {
        guard.release().await.map_err(internal)?;
    }
    Ok(Json(Updated {
        instance: service.instance.clone(),
        report: id,
        count: count + 1,
        locked,
        fencing_token,
        lock_acquire_ms: lock_acquire.as_secs_f64() * 1000.0,
        total_ms: started.elapsed().as_secs_f64() * 1000.0,
    }))
}

/// The count of report `id`, 0 for a report never written.
async fn read_count(service: &Service, id: &str) -> Result<i64, (StatusCode, String)> {
    Ok(service
        .reports
        .find_one(doc! { "_id": id })
        .await
        .map_err(internal)?
        .and_then(|report| report.get_i64("count").ok())
        .unwrap_or(0))
}

fn internal(error: impl std::fmt::Display) -> (StatusCode, String) {
    (StatusCode::INTERNAL_SERVER_ERROR, error.to_string())
}

// ---------------------------------------------------------------------------
// The driver.

/// The instances, stopped when dropped.
struct Instances {
    children: Vec<tokio::process::Child>,
    bases: Vec<String>,
}

async fn drive(url: &str) -> Result<bool, BoxError> {
    let instances = start_instances(url).await?;
    let http = reqwest::Client::new();
    println!(
        "load_balanced: {INSTANCES} instances ({}) against one MongoDB; \
         {REQUESTS} concurrent requests spread over all of them, each reading a report by id, \
         doing {WORK:?} of work and writing it back",
        instances.bases.join(", ")
    );
    let mut ok = true;
    for locked in [false, true] {
        let report = format!("report-{:08x}", rand::random::<u32>());
        let started = Instant::now();
        let requests: Vec<_> = (0..REQUESTS)
            .map(|i| {
                let url = format!(
                    "{}/reports/{report}/update?lock={locked}",
                    instances.bases[i % INSTANCES]
                );
                let http = http.clone();
                tokio::spawn(async move {
                    let reply = http.post(url).send().await?.error_for_status()?;
                    reply.json::<Updated>().await
                })
            })
            .collect();
        let mut answers = Vec::with_capacity(REQUESTS);
        let mut failures = 0;
        for request in requests {
            match request.await? {
                Ok(answer) => answers.push(answer),
                Err(error) => {
                    failures += 1;
                    eprintln!("load_balanced: a request failed: {error}");
                }
            }
        }
        let elapsed = started.elapsed();
        let stored: Report = http
            .get(format!("{}/reports/{report}", instances.bases[0]))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let count = stored.count;
        let lost = answers.len() as i64 - count;
        println!();
        println!(
            "{}: {} requests answered in {elapsed:.2?}, {failures} failed; report count {count}: {}",
            if locked {
                "with the named lock"
            } else {
                "without a lock"
            },
            answers.len(),
            if lost == 0 {
                "no update lost".to_owned()
            } else {
                format!("{lost} updates lost")
            }
        );
        for base in instances.bases.iter().filter(|_| locked) {
            let port = base.rsplit(':').next().unwrap_or_default();
            let mut waits: Vec<f64> = answers
                .iter()
                .filter(|answer| answer.instance.ends_with(port))
                .map(|answer| answer.lock_acquire_ms)
                .collect();
            waits.sort_by(f64::total_cmp);
            if waits.is_empty() {
                continue;
            }
            println!(
                "  instance-{port}: {:>2} requests, lock acquisition p50 {:>7.2} ms, max {:>7.2} ms",
                waits.len(),
                waits[waits.len() / 2],
                waits[waits.len() - 1],
            );
        }
        if locked {
            let mut tokens: Vec<u64> = answers.iter().filter_map(|a| a.fencing_token).collect();
            tokens.sort_unstable();
            tokens.dedup();
            let distinct = tokens.len() == answers.len();
            println!(
                "  fencing tokens: {} distinct of {}",
                tokens.len(),
                answers.len()
            );
            if let Some(answer) = answers.first() {
                println!("  one answer: {}", serde_json::to_string(answer)?);
            }
            ok &= lost == 0 && failures == 0 && distinct;
        }
    }
    drop(instances);
    println!();
    println!("result: {}", if ok { "ok" } else { "FAILED" });
    Ok(ok)
}

async fn start_instances(url: &str) -> Result<Instances, BoxError> {
    let me = std::env::current_exe()?;
    let mut instances = Instances {
        children: Vec::new(),
        bases: Vec::new(),
    };
    for _ in 0..INSTANCES {
        let port = free_port()?;
        let child = tokio::process::Command::new(&me)
            .args(["serve", "--port", &port.to_string(), url])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        instances.children.push(child);
        instances.bases.push(format!("http://127.0.0.1:{port}"));
    }
    let http = reqwest::Client::new();
    for base in &instances.bases {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let answer = http.get(format!("{base}/health")).send().await;
            if answer.is_ok_and(|answer| answer.status().is_success()) {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("{base} did not start within 30s").into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(instances)
}

fn free_port() -> std::io::Result<u16> {
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    Ok(listener.local_addr()?.port())
}
