//! R7: fencing tokens keep increasing across releases, expiries, deleted
//! records and server restarts.

use std::sync::Arc;
use std::time::Duration;

use distlock::backend::{AcquireRequest, Holder, WaitState};
use distlock::{Claim, LockClient, LockName, LockOptions};

use super::Scenario;
use crate::campaign::Server;
use crate::judge::Verdict;
use crate::outcome::Outcome;
use crate::report::{Row, ScenarioInfo, minimum};
use crate::scratch::unique;
use crate::settings::Settings;

pub(super) const SCENARIO: Scenario = Scenario {
    info: ScenarioInfo {
        id: "R7",
        title: "Token monotonicity",
        what: "1,000 cycles on one name (short form: 100): most release; every tenth lets \
               its grant expire (granted by a client of its own that then vanishes, with a \
               200 ms lease, or the backend's shortest: etcd's is a second; in PostgreSQL's \
               advisory mode the lock ends as the vanished client's connection closes); every \
               tenth (another one) is followed by the deletion of the name's record (MongoDB: \
               the document; memcached: `flush_all`, which takes the token counters too; etcd: \
               the name's keys; PostgreSQL: the name's row, in advisory mode its token row; \
               Redis: `DEL` of the name's keys, its token counter among them, on every \
               server in quorum mode; file: a forced \
               release); the server restarts every 100th cycle (short form: \
               every 25th). Must hold: every token strictly greater than the one before.",
        untimed: false,
    },
    run,
};

/// How long a grant that is left to expire lasts.
const EXPIRING: Duration = Duration::from_millis(200);

fn run(server: &mut Server, settings: &Settings) -> Outcome<Vec<Row>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let row = runtime.block_on(cycles(server, settings))?;
    Ok(vec![row])
}

async fn cycles(server: &mut Server, settings: &Settings) -> Outcome<Row> {
    let cycles = settings.pick(1000, 100);
    let restart_every = settings.pick(100, 25);
    let name = LockName::new(unique("r7"))?;
    let backend = distlock::open(&server.url()).await?;
    let options = LockOptions::builder().lease(settings.lease).build()?;
    let client = LockClient::new(backend, options);
    let holder = Arc::new(Holder::this_process(Some("distlock-chaos")));
    let (mut previous, mut regressions, mut restarts) = (0, 0, 0);
    let (mut expired, mut deleted) = (0, 0);
    for cycle in 0..cycles {
        if cycle > 0 && cycle % restart_every == 0 && server.kind.has_server() {
            server.restart()?;
            restarts += 1;
        }
        let token = match cycle % 10 {
            // Granted by a backend of its own, dropped at once, so that no
            // keeper extends the grant and no session keeps it: left to
            // expire.
            3 => {
                let lease = EXPIRING.max(server.kind.min_lease());
                let request =
                    AcquireRequest::new(name.clone(), Claim::Exclusive, lease, holder.clone());
                let vanishing = distlock::open(&server.url()).await?;
                let token = loop {
                    match vanishing.try_acquire(&request, &mut WaitState::new()).await {
                        Ok(distlock::backend::Attempt::Acquired { fencing_token, .. }) => {
                            break fencing_token;
                        }
                        Ok(distlock::backend::Attempt::Held { .. }) => {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        Err(error) if error.is_transient() => {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        Err(error) => return Err(error.into()),
                    }
                };
                expired += 1;
                token
            }
            7 => {
                let guard = client.acquire_with(&name, Duration::from_secs(60)).await?;
                let token = guard.fencing_token();
                let _ = guard.release().await;
                server.kind.delete_record(server, &name).await?;
                deleted += 1;
                token
            }
            _ => {
                let guard = client.acquire_with(&name, Duration::from_secs(60)).await?;
                let token = guard.fencing_token();
                let _ = guard.release().await;
                token
            }
        };
        regressions += usize::from(token <= previous);
        previous = token;
    }
    let verdict = Verdict {
        acquisitions: cycles,
        token_regressions: regressions,
        ..Verdict::default()
    };
    Ok(Row {
        scenario: "R7",
        backend: server.kind.name(),
        kind: "exclusive".into(),
        passed: regressions == 0,
        verdict: Some(verdict),
        detail: format!(
            "{cycles} cycles: {expired} abandoned unreleased, {deleted} followed by deleting the \
             record; {restarts} server restarts; last token {previous}"
        ),
        overlaps_allowed: None,
        minimum: minimum(
            expired > 0 && deleted > 0 && (restarts > 0 || !server.kind.has_server()),
            || {
                format!(
                    "{expired} grants left to expire, {deleted} records deleted, {restarts} restarts"
                )
            },
        ),
        applies: true,
    })
}
