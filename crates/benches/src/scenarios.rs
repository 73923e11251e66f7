//! The scenarios, each measured for one backend URL.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::{
    AcquireRequest, Attempt, Backend, Holder, Lease, LeaseId, LockClient, LockName, LockOptions,
};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::counting::{Calls, Counting};
use crate::timeline::{Contention, Hold};

/// Failures end the run with a message.
pub(crate) type Outcome<T> = Result<T, String>;

fn bench_name(scenario: &str) -> LockName {
    LockName::new(format!("bench-{scenario}-{:016x}", rand_u64())).expect("valid name")
}

fn rand_u64() -> u64 {
    // Distinct per run and process; no need for a random number generator.
    crate::timeline::now_ns() ^ (u64::from(std::process::id()) << 40)
}

/// Cycles per second of acquire-then-release on one name.
#[derive(Debug, Clone)]
pub(crate) struct Uncontended {
    pub(crate) client_cycles_per_second: f64,
    pub(crate) raw_cycles_per_second: f64,
}

/// How many alternating rounds the uncontended scenario splits its time
/// into, so that noise from the rest of the machine hits both sides alike.
const ROUNDS: u32 = 10;

/// Acquire and release one name, as fast as possible, through the client
/// and directly through the backend's two calls, in alternating rounds.
pub(crate) async fn uncontended(
    backend: Arc<dyn Backend>,
    seconds: Duration,
) -> Outcome<Uncontended> {
    let name = bench_name("uncontended");
    let round = seconds / (2 * ROUNDS);
    let client = LockClient::new(backend.clone(), LockOptions::default());
    let (mut raw, mut ours) = ((0u64, Duration::ZERO), (0u64, Duration::ZERO));
    for _ in 0..ROUNDS {
        let started = Instant::now();
        raw.0 += raw_cycles(&*backend, &name, round).await?;
        raw.1 += started.elapsed();
        let started = Instant::now();
        ours.0 += client_cycles(&client, &name, round).await?;
        ours.1 += started.elapsed();
    }
    Ok(Uncontended {
        client_cycles_per_second: ours.0 as f64 / ours.1.as_secs_f64(),
        raw_cycles_per_second: raw.0 as f64 / raw.1.as_secs_f64(),
    })
}

async fn client_cycles(client: &LockClient, name: &LockName, seconds: Duration) -> Outcome<u64> {
    let started = Instant::now();
    let mut cycles = 0;
    while started.elapsed() < seconds {
        let guard = client
            .try_acquire(name)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("an uncontended lock was held")?;
        guard.release().await.map_err(|e| e.to_string())?;
        cycles += 1;
    }
    Ok(cycles)
}

async fn raw_cycles(backend: &dyn Backend, name: &LockName, seconds: Duration) -> Outcome<u64> {
    let holder = Holder::this_process(Some("distlock-bench raw"));
    let lease = LockOptions::DEFAULT_LEASE;
    let started = Instant::now();
    let mut cycles = 0u64;
    while started.elapsed() < seconds {
        let request = AcquireRequest {
            name: name.clone(),
            lease_id: LeaseId::random(),
            lease,
            holder: holder.clone(),
        };
        let Attempt::Acquired { fencing_token } = backend
            .try_acquire(&request)
            .await
            .map_err(|e| e.to_string())?
        else {
            return Err("an uncontended lock was held".into());
        };
        let lease = Lease {
            name: name.clone(),
            id: request.lease_id,
            fencing_token,
            lease,
        };
        backend.release(&lease).await.map_err(|e| e.to_string())?;
        cycles += 1;
    }
    Ok(cycles)
}

/// Runs `processes` worker processes of `tasks` tasks each on one name for
/// `seconds`, and sums up their holds.
pub(crate) async fn contended(
    url: &str,
    processes: u32,
    tasks: u32,
    seconds: Duration,
) -> Outcome<Contention> {
    let name = bench_name("contended");
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let until_ns = crate::timeline::now_ns() + seconds.as_nanos() as u64 + 500_000_000;
    let started = Instant::now();
    let mut children = Vec::new();
    for _ in 0..processes {
        let child = Command::new(&exe)
            .args(["worker", "--backend", url, "--lock", name.as_str()])
            .args([
                "--tasks",
                &tasks.to_string(),
                "--until-ns",
                &until_ns.to_string(),
            ])
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start a worker: {e}"))?;
        children.push(child);
    }
    let mut holds = Vec::new();
    for mut child in children {
        let stdout = child.stdout.take().ok_or("worker without stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        while let Some(line) = lines.next_line().await.map_err(|e| e.to_string())? {
            holds.push(
                serde_json::from_str::<Hold>(&line)
                    .map_err(|e| format!("bad worker line {line:?}: {e}"))?,
            );
        }
        let status = child.wait().await.map_err(|e| e.to_string())?;
        if !status.success() {
            return Err(format!("a worker failed: {status}"));
        }
    }
    let elapsed = started.elapsed().min(seconds + Duration::from_millis(500));
    Ok(Contention::from_holds(holds, elapsed))
}

/// One worker process: `tasks` tasks sharing one client take the lock
/// until the deadline, each hold printed as a JSON line.
pub(crate) async fn worker(url: &str, lock: &str, tasks: u32, until_ns: u64) -> Outcome<()> {
    let backend = distlock::open(url).await.map_err(|e| e.to_string())?;
    let client = LockClient::new(backend, LockOptions::default());
    let name = LockName::new(lock).map_err(|e| e.to_string())?;
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (client, name) = (client.clone(), name.clone());
        handles.push(tokio::spawn(async move {
            let mut holds = Vec::new();
            loop {
                let now = crate::timeline::now_ns();
                if now >= until_ns {
                    return Ok::<_, String>(holds);
                }
                let left = Duration::from_nanos(until_ns - now);
                let guard = match client.acquire(&name, left).await {
                    Ok(guard) => guard,
                    Err(distlock::Error::Timeout { .. }) => return Ok(holds),
                    Err(e) => return Err(e.to_string()),
                };
                let acquired_at_ns = crate::timeline::now_ns();
                let token = guard.fencing_token();
                let released_at_ns = crate::timeline::now_ns();
                guard.release().await.map_err(|e| e.to_string())?;
                holds.push(Hold {
                    acquired_at_ns,
                    released_at_ns,
                    token,
                });
            }
        }));
    }
    for handle in handles {
        for hold in handle.await.map_err(|e| e.to_string())?? {
            println!(
                "{}",
                serde_json::to_string(&hold).map_err(|e| e.to_string())?
            );
        }
    }
    Ok(())
}

/// Many locks held by one process for a while.
#[derive(Debug, Clone)]
pub(crate) struct HoldMany {
    pub(crate) locks: usize,
    pub(crate) held_for: Duration,
    pub(crate) acquire_time: Duration,
    pub(crate) extend_calls_per_second: f64,
    pub(crate) extended_leases_per_second: f64,
    pub(crate) lost: usize,
    pub(crate) cpu: Duration,
    pub(crate) rss_growth_kib: u64,
}

/// Holds `locks` locks for `held_for` with a `lease`, counting the calls
/// core makes to keep them.
pub(crate) async fn hold_many(
    backend: Arc<dyn Backend>,
    locks: usize,
    held_for: Duration,
    lease: Duration,
) -> Outcome<HoldMany> {
    let counting = Arc::new(Counting::new(backend));
    let calls: Arc<Calls> = counting.calls.clone();
    let options = LockOptions::builder()
        .lease(lease)
        .build()
        .map_err(|e| e.to_string())?;
    let client = LockClient::new(counting, options);
    let prefix = bench_name("many");
    let rss_before = rss_kib();
    let started = Instant::now();
    let mut guards = Vec::with_capacity(locks);
    for i in 0..locks {
        let name = LockName::new(format!("{prefix}-{i}")).map_err(|e| e.to_string())?;
        let guard = client
            .try_acquire(&name)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("a fresh lock was held")?;
        guards.push(guard);
    }
    let acquire_time = started.elapsed();
    let (batches_before, leases_before) = (
        Calls::get(&calls.extend_batches),
        Calls::get(&calls.extended_leases),
    );
    let cpu_before = cpu_time();
    tokio::time::sleep(held_for).await;
    let cpu = cpu_time().saturating_sub(cpu_before);
    let batches = Calls::get(&calls.extend_batches) - batches_before;
    let leases = Calls::get(&calls.extended_leases) - leases_before;
    let rss_growth_kib = rss_kib().saturating_sub(rss_before);
    let lost = guards.iter().filter(|guard| guard.is_lost()).count();
    for guard in guards {
        let _ = guard.release().await;
    }
    Ok(HoldMany {
        locks,
        held_for,
        acquire_time,
        extend_calls_per_second: batches as f64 / held_for.as_secs_f64(),
        extended_leases_per_second: leases as f64 / held_for.as_secs_f64(),
        lost,
        cpu,
        rss_growth_kib,
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
