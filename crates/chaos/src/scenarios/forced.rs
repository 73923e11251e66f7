//! R14: an administrator releases a held lock by force; its holder must be
//! told.

use std::time::Duration;

use distlock::{LockClient, LockName, LockOptions};

use super::{Scenario, Settings, not_applicable, unique};
use crate::Outcome;
use crate::judge::Verdict;
use crate::report::{Row, ScenarioInfo, shortfall};
use crate::servers::Server;
use crate::worker::open_patiently;

pub(super) const SCENARIO: Scenario = Scenario {
    info: ScenarioInfo {
        id: "R14",
        title: "A lock released by force",
        what: "A client holds a lock while another releases it by force (`force_release`, \
               an administrator's `distlock release --force`), 10 times (short form: 3); \
               the holder then holds on for three leases. Must hold: every forced release \
               found the lock held, and every holder's `lost()` fired before it released. \
               The backends promise that a holder learns of a forced release at its next \
               extension; had it not, its keeper would give the lease up when it ran out \
               here, so an untold holder is a lock that hid a loss, whatever the timing. \
               A lock bound to its process has no extension to learn it at.",
        untimed: true,
    },
    run,
};

fn run(server: &mut Server, settings: &Settings) -> Outcome<Vec<Row>> {
    if server.kind.process_bound() {
        return Ok(vec![not_applicable(
            "R14",
            server,
            "exclusive",
            "its locks are bound to their process, which no extension keeps, so a forced \
             release cannot be learned at one",
        )]);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    Ok(vec![runtime.block_on(forced_releases(server, settings))?])
}

async fn forced_releases(server: &Server, settings: &Settings) -> Outcome<Row> {
    let runs = settings.pick(10, 3);
    let url = server.url();
    let options = LockOptions::builder().lease(settings.lease).build()?;
    let client = LockClient::new(open_patiently(&url).await?, options);
    let admin = open_patiently(&url).await?;
    let (mut forced, mut told) = (0, 0);
    for _ in 0..runs {
        let name = LockName::new(unique("r14"))?;
        let guard = client.acquire_with(&name, Duration::from_secs(30)).await?;
        forced += usize::from(admin.force_release(&name).await?);
        tokio::time::sleep(settings.lease * 3).await;
        told += usize::from(guard.is_lost());
        let _ = guard.release().await;
    }
    Ok(Row {
        scenario: "R14",
        backend: server.kind.name(),
        kind: "exclusive".into(),
        verdict: Some(Verdict {
            acquisitions: runs,
            losses: told,
            histories_checked: 0,
            ..Verdict::default()
        }),
        detail: format!(
            "{forced} of {runs} forced releases found the lock held; the holder was told in \
             {told} of {runs}"
        ),
        passed: forced == runs && told == runs,
        overlaps_allowed: None,
        shortfall: shortfall(forced == runs, || {
            format!("{forced} of {runs} forced releases found the lock held")
        }),
        applies: true,
    })
}
