//! The many-locks scenario: many locks held by one process for a while.

use std::time::{Duration, Instant};

use distlock::backend::BackendExt;
use distlock::{LockClient, LockName, LockOptions};
use futures::StreamExt;

use crate::commands::Counts;
use crate::counting::{Calls, counting};
use crate::names::bench_name;
use crate::outcome::Outcome;
use crate::target::Target;
/// Many locks held by one process for a while.
#[derive(Debug, Clone)]
pub(crate) struct HoldMany {
    pub(crate) locks: usize,
    pub(crate) held_for: Duration,
    pub(crate) lease: Duration,
    pub(crate) extend_every: Duration,
    pub(crate) acquire_time: Duration,
    pub(crate) extend_calls: u64,
    pub(crate) extended_leases: u64,
    /// Renewals of the client's session, for a backend that keeps one
    /// (etcd): each keeps every lease at once.
    pub(crate) session_renewals: u64,
    /// Server commands while the locks were held, where counted.
    pub(crate) commands: Option<Counts>,
    pub(crate) lost: usize,
    pub(crate) cpu: Duration,
    pub(crate) rss_before_kib: u64,
    pub(crate) rss_held_kib: u64,
}

impl HoldMany {
    pub(crate) fn per_second(&self, n: u64) -> f64 {
        n as f64 / self.held_for.as_secs_f64()
    }

    /// How many extension cadences fit in the hold.
    pub(crate) fn cadences(&self) -> f64 {
        self.held_for.as_secs_f64() / self.extend_every.as_secs_f64()
    }
}

/// How many acquisitions and releases the many-locks scenario keeps in
/// flight while it takes and gives back its locks.
const MANY_IN_FLIGHT: usize = 64;

/// Holds `locks` locks for `held_for` with a `lease`, counting the calls
/// core makes to keep them and the commands the server receives meanwhile.
pub(crate) async fn hold_many(
    target: &Target,
    locks: usize,
    held_for: Duration,
    lease: Duration,
) -> Outcome<HoldMany> {
    // A session backend (etcd) serves one lease length per session: give
    // this scenario's lease a backend, and a session, of its own.
    let backend = if target.backend.session().is_some() {
        distlock::open(&target.url)
            .await
            .map_err(|e| format!("{}: {e}", target.shown))?
    } else {
        target.backend.clone()
    };
    let (counting, calls) = counting(backend);
    let options = LockOptions::builder()
        .lease(lease)
        .build()
        .map_err(|e| e.to_string())?;
    let extend_every = options.extend_every();
    let client = LockClient::new(counting, options);
    let prefix = bench_name("many");
    let rss_before_kib = rss_kib();
    let started = Instant::now();
    let guards: Vec<_> = futures::stream::iter(0..locks)
        .map(|i| {
            let client = client.clone();
            let name = LockName::new(format!("{prefix}-{i}"));
            async move {
                let name = name.map_err(|e| e.to_string())?;
                client
                    .try_acquire(&name)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| "a fresh lock was held".to_owned())
            }
        })
        .buffer_unordered(MANY_IN_FLIGHT)
        .collect::<Vec<Outcome<_>>>()
        .await
        .into_iter()
        .collect::<Outcome<_>>()?;
    let acquire_time = started.elapsed();
    let (batches_before, leases_before, renewals_before) = (
        Calls::get(&calls.extend_batches),
        Calls::get(&calls.extended_leases),
        Calls::get(&calls.session_renewals),
    );
    // Counts published late would mix the acquisitions into the hold.
    let commands_before = if target.counts_published_late() {
        None
    } else {
        target.counts().await?
    };
    let cpu_before = cpu_time();
    tokio::time::sleep(held_for).await;
    let cpu = cpu_time().saturating_sub(cpu_before);
    let commands = match commands_before {
        Some(before) => target
            .counts()
            .await?
            .map(|after| target.counted_between(&before, &after)),
        None => None,
    };
    let extend_calls = Calls::get(&calls.extend_batches) - batches_before;
    let extended_leases = Calls::get(&calls.extended_leases) - leases_before;
    let session_renewals = Calls::get(&calls.session_renewals) - renewals_before;
    let rss_held_kib = rss_kib();
    let lost = guards.iter().filter(|guard| guard.is_lost()).count();
    futures::stream::iter(guards)
        .map(|guard| async move {
            let _ = guard.release().await;
        })
        .buffer_unordered(MANY_IN_FLIGHT)
        .collect::<Vec<()>>()
        .await;
    target.forget(prefix.as_str()).await;
    Ok(HoldMany {
        locks,
        held_for,
        lease,
        extend_every,
        acquire_time,
        extend_calls,
        extended_leases,
        session_renewals,
        commands,
        lost,
        cpu,
        rss_before_kib,
        rss_held_kib,
    })
}

/// This process's user plus system CPU time, from `/proc/self/stat`.
fn cpu_time() -> Duration {
    let ticks = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            // Fields after the parenthesised command name: utime and stime
            // are the 12th and 13th.
            let rest = &stat[stat.rfind(')')? + 2..];
            let fields: Vec<&str> = rest.split(' ').collect();
            Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0);
    Duration::from_secs_f64(ticks as f64 / rustix::param::clock_ticks_per_second() as f64)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}
