//! The held-locks curve: many locks held by one process for a while, at
//! each point of the curve; the extension traffic and the keeper's CPU.

use std::time::{Duration, Instant};

use distlock::backend::BackendExt;
use distlock::{LockClient, LockOptions};

use super::taking::{release_all, take_all};
use crate::commands::Counts;
use crate::counting::{Calls, counting};
use crate::names::bench_name;
use crate::outcome::Outcome;
use crate::process_cpu::cpu_time;
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

    /// The server commands per minute at the default lease's cadence: the
    /// commands per cadence measured, times the cadences of a minute with
    /// the default lease. Keeping a lock costs per cadence, whatever the
    /// lease, so a short lease measures more cadences in a short window.
    pub(crate) fn commands_per_default_minute(&self) -> Option<f64> {
        let commands = self.commands.as_ref()?;
        Some(commands.total() as f64 / self.cadences() * default_cadences_per_minute())
    }

    /// The process's CPU time per minute at the default lease's cadence,
    /// scaled as [`commands_per_default_minute`](Self::commands_per_default_minute).
    pub(crate) fn cpu_per_default_minute(&self) -> Duration {
        self.cpu
            .div_f64(self.cadences())
            .mul_f64(default_cadences_per_minute())
    }
}

/// How many times a minute the keeper extends a lock with the default
/// lease (every third of it).
fn default_cadences_per_minute() -> f64 {
    let every = LockOptions::default().extend_every();
    60.0 / every.as_secs_f64()
}

/// Holds `locks` locks for `held_for` with a `lease`, counting the calls
/// core makes to keep them and the commands the server receives meanwhile.
/// Taking them may last `take_within`: a server too slow for that is
/// reported with how far it got.
pub(crate) async fn hold_many(
    target: &Target,
    locks: usize,
    held_for: Duration,
    lease: Duration,
    take_within: Duration,
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
    let guards = take_all(&client, &prefix, locks, take_within)
        .await
        .map_err(|error| {
            // A server that spends itself keeping the locks already taken
            // has little left to take more: say how much went to that.
            let extended = Calls::get(&calls.extended_leases);
            let seconds = started.elapsed().as_secs_f64();
            format!(
                "{error}; meanwhile the keeper extended {:.0} leases/s of those held",
                extended as f64 / seconds
            )
        })?;
    let acquire_time = started.elapsed();
    // The locks are given back whatever the measurement's outcome, so that
    // their releases do not run on into the next one.
    let measured = measure_hold(target, &calls, held_for).await;
    let lost = guards.iter().filter(|guard| guard.is_lost()).count();
    release_all(guards).await;
    target.forget(prefix.as_str()).await;
    let Held {
        extend_calls,
        extended_leases,
        session_renewals,
        commands,
        cpu,
        rss_held_kib,
    } = measured?;
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

/// What [`measure_hold`] saw while the locks were held.
struct Held {
    extend_calls: u64,
    extended_leases: u64,
    session_renewals: u64,
    commands: Option<Counts>,
    cpu: Duration,
    rss_held_kib: u64,
}

/// Waits `held_for` while the locks are kept, counting the calls core
/// makes (`calls`) and the commands the server receives.
async fn measure_hold(target: &Target, calls: &Calls, held_for: Duration) -> Outcome<Held> {
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
    Ok(Held {
        extend_calls: Calls::get(&calls.extend_batches) - batches_before,
        extended_leases: Calls::get(&calls.extended_leases) - leases_before,
        session_renewals: Calls::get(&calls.session_renewals) - renewals_before,
        commands,
        cpu,
        rss_held_kib: rss_kib(),
    })
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
