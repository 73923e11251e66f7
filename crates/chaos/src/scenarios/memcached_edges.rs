//! R10: what memcached does to leases by itself: whole-second expiry
//! times, eviction, a holder that releases after its lease ran out, and
//! a restart that forgets every lock.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use distlock::backend::BackendExt;
use distlock::backend::{AcquireRequest, Attempt, Backend, Holder, Lease, WaitState};
use distlock::memcached::MemcachedBackend;
use distlock::{Claim, LockClient, LockGuard, LockName, LockOptions, LossReason};
use rustix::process::Signal;

use super::Scenario;
use super::network::{does_not_apply, runtime};
use crate::backends::MEMCACHED;
use crate::campaign::CampaignBackend;
use crate::campaign::Server;
use crate::fenced::FencedStore;
use crate::figures::ms;
use crate::holder::{Worker, spec};
use crate::judge::{OverlapCause, Verdict};
use crate::outcome::Outcome;
use crate::report::{Row, ScenarioInfo, minimum};
use crate::scratch::{run_dir, unique};
use crate::settings::Settings;
use crate::worker::{Event, Release};

pub(super) const SCENARIO: Scenario = Scenario {
    info: ScenarioInfo {
        id: "R10",
        title: "memcached: TTL rounding, eviction, stale release, restart",
        what: "memcached only. **Sub-second lease**: 10 grants of 300 ms (short form: 2), \
               taken through the backend itself and never released or extended; another \
               holder polls each name. Must hold: nobody is granted before 300 ms, and \
               everyone within 3 s (memcached reads an expiry of 0 as \"never\", so a lease \
               under a second must not become 0). **Eviction**: a memcached of its own with \
               1 MiB of memory; a holder keeps a lock while the cache is flooded until the \
               lock's key is evicted (items of the lock's own size: memcached evicts within a \
               slab class, and the holder's extensions rewrite its item every third of a \
               lease). Must hold: the holder's `lost()` fires, the key is then gone, and a new \
               holder can take the name, with a higher token. **Stale release**: A's lease runs out (taken through the \
               backend with 300 ms and left; or a holder process SIGSTOPped for 3 leases), B \
               takes the name, then A releases. Must hold: A's release says it was not \
               A's (`false`), B's key stays: a third holder cannot take the name while B \
               holds, and B's release returns `true`. **Restart**: the server restarts while A \
               holds. Must hold: A's `lost()` fires at its next extension (within the lease \
               in the full form), and the next grant's token is higher. 5 runs of each of the \
               last four (short form: 1). Overlaps between the moment memcached dropped a lock \
               and the holder's `lost()` are memcached's documented failure mode: reported, \
               allowed only when the loss was then detected.",
        untimed: false,
    },
    run,
};

/// The sub-second lease.
const SHORT_LEASE: Duration = Duration::from_millis(300);
/// The latest a sub-second lease may end: memcached is sent an expiry of
/// 2 s, which it ends between 1 s and 2 s later; one second more for its
/// clock's tick and the poll.
const SHORT_LEASE_BOUND: Duration = Duration::from_secs(3);
/// How long a lease is given to end, or a loss to be detected, before the
/// run counts it as never.
const NEVER: Duration = Duration::from_secs(10);
/// How often a waiter tries again.
const POLL: Duration = Duration::from_millis(20);

fn run(server: &mut Server, settings: &Settings) -> Outcome<Vec<Row>> {
    if let Err(why) = server.kind.expiry_edges() {
        return Ok(vec![does_not_apply("R10", server, why)]);
    }
    let runtime = runtime()?;
    let runs = settings.pick(5, 1);
    let mut rows = vec![runtime.block_on(sub_second(server, settings.pick(10, 2)))?];
    let mut eviction = Cases::default();
    let mut stale = Cases::default();
    let mut paused = Cases::default();
    let mut restart = Cases::default();
    for _ in 0..runs {
        eviction.add(runtime.block_on(evicted(settings))?);
        stale.add(runtime.block_on(stale_release(server))?);
        paused.add(paused_release(&runtime, server, settings)?);
        restart.add(runtime.block_on(restarted(server, settings))?);
    }
    rows.push(eviction.row("eviction", runs, true));
    rows.push(stale.row("stale release (lease left to run out)", runs, false));
    rows.push(paused.row("stale release (holder SIGSTOPped)", runs, false));
    rows.push(restart.row("restart", runs, true));
    Ok(rows)
}

/// The outcome of one run of a case.
#[derive(Default)]
struct Case {
    verdict: Verdict,
    /// Whether what must hold held, timings included.
    held: bool,
    /// Whether the fault did what the case is for: the lock's key evicted,
    /// or dropped by the restart, or the stale lease run out, and a next
    /// holder granted after it.
    fired: bool,
    /// Whether the loss that memcached caused was detected by its holder,
    /// so that the overlap before it is the documented one.
    detected: bool,
    /// What happened, in words that do not change from run to run.
    note: String,
    /// When memcached dropped the lock: how long until the next holder was
    /// granted, and until the holder's `lost()` fired, and why.
    granted: Option<Duration>,
    lost: Option<Duration>,
    reason: Option<LossReason>,
    /// How many items it took to evict the lock.
    flooded: Option<usize>,
}

/// The runs of one case.
#[derive(Default)]
struct Cases {
    verdict: Verdict,
    held: usize,
    fired: usize,
    undetected: usize,
    notes: Vec<String>,
    granted: Vec<Duration>,
    lost: Vec<Duration>,
    reasons: Vec<String>,
    flooded: Vec<usize>,
}

impl Cases {
    fn add(&mut self, case: Case) {
        self.verdict.add(&case.verdict);
        self.held += usize::from(case.held);
        self.fired += usize::from(case.fired);
        self.undetected += usize::from(!case.detected);
        self.notes.push(case.note);
        self.granted.extend(case.granted);
        self.lost.extend(case.lost);
        self.reasons
            .extend(case.reason.map(|reason| reason.to_string()));
        self.flooded.extend(case.flooded);
    }

    /// The row of `runs` runs; `overlaps_expected` when memcached dropping
    /// the lock makes an overlap until the holder detects it.
    fn row(mut self, kind: &str, runs: usize, overlaps_expected: bool) -> Row {
        for list in [&mut self.notes, &mut self.reasons] {
            list.sort();
            list.dedup();
        }
        let range = |values: &[Duration]| match (values.iter().min(), values.iter().max()) {
            (Some(min), Some(max)) if min == max => ms(*min),
            (Some(min), Some(max)) => format!("{} to {}", ms(*min), ms(*max)),
            _ => "never".into(),
        };
        let mut detail = format!(
            "{} of {runs} runs held; {}",
            self.held,
            self.notes.join("; ")
        );
        if let (Some(least), Some(most)) = (self.flooded.iter().min(), self.flooded.iter().max()) {
            detail.push_str(&format!("; evicted after {least} to {most} items stored"));
        }
        if overlaps_expected {
            detail.push_str(&format!(
                "; after memcached dropped the lock, the next holder was granted in {} and \
                 A's `lost()` fired in {} ({}), {} runs never",
                range(&self.granted),
                range(&self.lost),
                self.reasons.join(", "),
                self.undetected,
            ));
        }
        Row {
            scenario: "R10",
            backend: MEMCACHED.name(),
            kind: kind.into(),
            passed: self.held == runs,
            verdict: Some(self.verdict),
            detail,
            overlaps_allowed: (overlaps_expected && self.undetected == 0)
                .then_some(OverlapCause::MemcachedEdge),
            minimum: minimum(runs > 0 && self.fired == runs, || {
                format!(
                    "the fault did what this case is for, and a next holder was granted \
                     after it, in {} of {runs} runs",
                    self.fired
                )
            }),
            applies: true,
        }
    }
}

fn holder() -> Arc<Holder> {
    Arc::new(Holder::this_process(Some("distlock-chaos")))
}

/// A grant of `name` for `lease` through the backend itself, once.
async fn try_grant(
    backend: &Arc<dyn Backend>,
    name: &LockName,
    lease: Duration,
) -> Outcome<Option<Lease>> {
    let request = AcquireRequest::new(name.clone(), Claim::Exclusive, lease, holder());
    match backend.try_acquire(&request, &mut WaitState::new()).await? {
        Attempt::Acquired {
            fencing_token,
            state,
        } => Ok(Some(request.granted(fencing_token, state))),
        Attempt::Held { .. } => Ok(None),
    }
}

/// Tries [`try_grant`] until it is granted, or `limit` passes.
async fn grant_within(
    backend: &Arc<dyn Backend>,
    name: &LockName,
    lease: Duration,
    limit: Duration,
) -> Outcome<Option<Lease>> {
    let started = Instant::now();
    loop {
        if let Some(lease) = try_grant(backend, name, lease).await? {
            return Ok(Some(lease));
        }
        if started.elapsed() > limit {
            return Ok(None);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Leases of 300 ms, left to run out: each must end after 300 ms and
/// within [`SHORT_LEASE_BOUND`].
async fn sub_second(server: &Server, names: usize) -> Outcome<Row> {
    let backend = distlock::open(&server.url()).await?;
    let mut waits = Vec::new();
    for _ in 0..names {
        let name = LockName::new(unique("r10-ttl"))?;
        let first = try_grant(&backend, &name, SHORT_LEASE)
            .await?
            .ok_or("a fresh name was held")?;
        let granted = Instant::now();
        let backend = backend.clone();
        waits.push(tokio::spawn(async move {
            let next = grant_within(&backend, &name, Duration::from_secs(60), NEVER).await?;
            let after = granted.elapsed();
            let outcome = next.as_ref().map(|next| (after, next.fencing_token));
            if let Some(next) = next {
                backend.release(&next).await?;
            }
            Outcome::Ok((first.fencing_token, outcome))
        }));
    }
    let mut verdict = Verdict::default();
    let (mut early, mut late, mut never) = (0, 0, 0);
    let mut after = Vec::new();
    for wait in waits {
        let (first, next) = wait.await??;
        verdict.acquisitions += 1;
        match next {
            None => never += 1,
            Some((took, token)) => {
                verdict.acquisitions += 1;
                verdict.token_regressions += usize::from(token <= first);
                // Granted while the first lease could still have been valid.
                verdict.overlaps += usize::from(took < SHORT_LEASE);
                early += usize::from(took < SHORT_LEASE);
                late += usize::from(took > SHORT_LEASE_BOUND);
                after.push(took);
            }
        }
    }
    verdict.failed = never;
    let (min, max) = (after.iter().min(), after.iter().max());
    Ok(Row {
        scenario: "R10",
        backend: server.kind.name(),
        kind: "sub-second lease (300 ms)".into(),
        passed: early == 0 && late == 0 && never == 0 && verdict.token_regressions == 0,
        detail: format!(
            "expiry sent: {} s; granted again after {} to {} ({early} before 300 ms, {late} \
             after {}, {never} not within {})",
            distlock::memcached::lease_ttl(SHORT_LEASE)?,
            min.copied().map_or("—".into(), ms),
            max.copied().map_or("—".into(), ms),
            ms(SHORT_LEASE_BOUND),
            ms(NEVER),
        ),
        verdict: Some(verdict),
        overlaps_allowed: None,
        minimum: minimum(names > 0 && never == 0, || {
            format!("{} of {names} names granted again", names - never)
        }),
        applies: true,
    })
}

/// A lock client of its own on `url`, with the campaign's lease.
async fn client(url: &str, settings: &Settings) -> Outcome<LockClient> {
    let options = LockOptions::builder()
        .lease(settings.lease)
        .label("distlock-chaos")
        .build()?;
    Ok(LockClient::new(distlock::open(url).await?, options))
}

/// After memcached dropped A's lock at `dropped`: B takes the name, A's
/// `lost()` must fire within `bound` (checked in full), and B's token must
/// be above A's. Counts an overlap when B was granted before A knew.
async fn after_drop(
    guard: LockGuard,
    url: &str,
    name: &LockName,
    dropped: Instant,
    bound: Duration,
) -> Outcome<Case> {
    // When `lost()` fires, on a task of its own, so that it is seen at
    // once even while B is being granted.
    let signal = guard.lost_signal();
    let watch = tokio::spawn(async move {
        let reason = tokio::time::timeout(NEVER, signal.lost()).await.ok();
        reason.map(|reason| (reason, dropped.elapsed()))
    });
    let other: Arc<dyn Backend> = distlock::open(url).await?;
    let next = grant_within(&other, name, Duration::from_secs(30), NEVER).await?;
    let granted = next.as_ref().map(|_| dropped.elapsed());
    let seen = watch.await?;
    let (reason, lost) = (seen.map(|(reason, _)| reason), seen.map(|(_, after)| after));
    let mut verdict = Verdict {
        acquisitions: 1 + usize::from(next.is_some()),
        losses: usize::from(reason.is_some()),
        failed: usize::from(next.is_none()),
        ..Verdict::default()
    };
    if let Some(next) = &next {
        verdict.token_regressions = usize::from(next.fencing_token <= guard.fencing_token());
        // B was granted while A still held, as far as A knew.
        verdict.overlaps = usize::from(lost.is_none_or(|lost| granted < Some(lost)));
        other.release(next).await?;
    }
    let _ = guard.release().await;
    Ok(Case {
        fired: next.is_some(),
        held: next.is_some()
            && lost.is_some_and(|after| after <= bound)
            && verdict.token_regressions == 0,
        detected: reason.is_some(),
        verdict,
        note: format!(
            "`lost()` due within {} (a cadence and an operation timeout)",
            ms(bound)
        ),
        granted,
        lost,
        reason,
        flooded: None,
    })
}

/// Holds a lock on a memcached of 1 MiB while it is flooded with items
/// the size of the lock's, until the holder's `lost()` fires (or many
/// items later); then the lock's key must be gone.
async fn evicted(settings: &Settings) -> Outcome<Case> {
    // memcached refuses an item size above half its memory: 512 KiB items
    // in 1 MiB, its least.
    let small = Server::start_with(&MEMCACHED, &["-m", "1", "-I", "512k"])?;
    let url = small.url();
    let backend = MemcachedBackend::open(&url).await?;
    let name = LockName::new(unique("r10-evicted"))?;
    let key = backend.lock_key(&name);
    let holder = client(&url, settings).await?;
    let guard = holder.acquire_with(&name, Duration::from_secs(10)).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let flood = {
        let (address, key, stop) = (small.address(), key.clone(), stop.clone());
        tokio::task::spawn_blocking(move || flood(&address, &key, &stop))
    };
    let lost = tokio::time::timeout(NEVER, guard.lost()).await.ok();
    stop.store(true, Ordering::SeqCst);
    let flooded = flood.await??;
    let dropped = Instant::now();
    let mut stream = TcpStream::connect(small.address())?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let gone = request(&mut stream, format!("mg {key}\r\n").as_bytes())? == "EN\r\n";
    match (gone, lost) {
        (true, _) => {}
        (false, None) => {
            return Err(format!("{flooded} items did not evict the lock's key").into());
        }
        // The holder gave up without an eviction (a cache too slow to
        // answer, say): safe, but not what this case is for.
        (false, Some(reason)) => {
            let _ = guard.release().await;
            return Ok(Case {
                verdict: Verdict {
                    acquisitions: 1,
                    losses: 1,
                    ..Verdict::default()
                },
                detected: true,
                note: format!("`lost()` fired ({reason}) before the key was evicted"),
                flooded: Some(flooded),
                ..Case::default()
            });
        }
    }
    // Detected at the next extension, within a cadence and its answer:
    // here it already was, by construction, and the timings start there.
    let bound = settings.cadence() + settings.lease / 3;
    let mut case = after_drop(guard, &url, &name, dropped, bound).await?;
    case.note =
        "the holder's `lost()` fired while the cache was flooded (the flood stops then)".into();
    case.flooded = Some(flooded);
    Ok(case)
}

/// Stores items the size of `key`'s on the memcached at `address`, so
/// that they share its slab class (memcached evicts within a class), until
/// `stop` is set; returns how many.
fn flood(address: &str, key: &str, stop: &AtomicBool) -> Outcome<usize> {
    let mut stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let reply = request(&mut stream, format!("mg {key} s\r\n").as_bytes())?;
    let size: usize = reply
        .trim_end()
        .strip_prefix("HD s")
        .and_then(|size| size.parse().ok())
        .ok_or_else(|| format!("memcached answered {reply:?} to the size of {key}"))?;
    let value = vec![b'x'; size];
    let mut stored = 0;
    while !stop.load(Ordering::SeqCst) {
        if stored >= 5_000_000 {
            break;
        }
        let mut batch = Vec::new();
        for _ in 0..5_000 {
            let flood_key = format!(
                "{:f<width$}",
                format!("r10-flood-{stored}-"),
                width = key.len()
            );
            let _ = write!(batch, "set {flood_key} 0 0 {size} noreply\r\n");
            batch.extend_from_slice(&value);
            batch.extend_from_slice(b"\r\n");
            stored += 1;
        }
        stream.write_all(&batch)?;
        // Waits for memcached to have read the batch.
        request(&mut stream, b"mn\r\n")?;
    }
    Ok(stored)
}

/// Sends `command` (one line) on `stream` and reads its one-line answer.
fn request(stream: &mut TcpStream, command: &[u8]) -> Outcome<String> {
    stream.write_all(command)?;
    let mut reply = Vec::new();
    let mut byte = [0; 1];
    while !reply.ends_with(b"\r\n") {
        stream.read_exact(&mut byte)?;
        reply.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&reply).into_owned())
}

/// Sends `command` to the memcached at `address` and reads its answer up
/// to a line that `done` accepts.
///
/// # Errors
/// An I/O error, or no such line within 5 s.
pub(super) fn memcached_text(
    address: &str,
    command: &[u8],
    done: impl Fn(&str) -> bool,
) -> Outcome<String> {
    let mut stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(command)?;
    let mut reply = String::new();
    loop {
        let line = request(&mut stream, b"")?;
        reply.push_str(&line);
        if done(line.trim_end()) {
            return Ok(reply);
        }
    }
}

/// A's 300 ms grant, taken through the backend itself, runs out; B takes
/// the name; then A releases.
async fn stale_release(server: &Server) -> Outcome<Case> {
    let backend = distlock::open(&server.url()).await?;
    let name = LockName::new(unique("r10-stale"))?;
    let first = try_grant(&backend, &name, SHORT_LEASE)
        .await?
        .ok_or("a fresh name was held")?;
    let Some(second) = grant_within(&backend, &name, Duration::from_secs(30), NEVER).await? else {
        return Err(format!("a 300 ms lease did not end within {}", ms(NEVER)).into());
    };
    let extended = backend.extend(&first).await?;
    let released = backend.release(&first).await?;
    stale_outcome(
        &backend,
        &name,
        &second,
        first.fencing_token,
        Some(extended),
        released,
    )
    .await
}

/// After A's stale extension and release: a third holder must not get the
/// name while B holds it, and B's release must say it was B's.
async fn stale_outcome(
    backend: &Arc<dyn Backend>,
    name: &LockName,
    second: &Lease,
    first_token: u64,
    extended: Option<bool>,
    released: bool,
) -> Outcome<Case> {
    let third = try_grant(backend, name, Duration::from_secs(30)).await?;
    let mut verdict = Verdict {
        acquisitions: 2 + usize::from(third.is_some()),
        overlaps: usize::from(third.is_some()),
        token_regressions: usize::from(second.fencing_token <= first_token),
        ..Verdict::default()
    };
    if let Some(third) = &third {
        verdict.token_regressions += usize::from(third.fencing_token <= second.fencing_token);
        backend.release(third).await?;
    }
    let second_released = backend.release(second).await?;
    let held = !released
        && extended != Some(true)
        && third.is_none()
        && second_released
        && verdict.token_regressions == 0;
    let note = format!(
        "A's stale {}release answered {released}; a third holder was {}; B's release answered \
         {second_released}",
        match extended {
            Some(extended) => format!("extension answered {extended}, its "),
            None => String::new(),
        },
        if third.is_some() {
            "granted while B held"
        } else {
            "turned away"
        },
    );
    Ok(Case {
        verdict,
        held,
        // Both callers make B's grant after A's lease ran out, or fail.
        fired: true,
        detected: true,
        note,
        ..Case::default()
    })
}

/// A holder process is SIGSTOPped past its lease; B takes the name; A is
/// continued, and releases (without writing).
fn paused_release(
    runtime: &tokio::runtime::Runtime,
    server: &Server,
    settings: &Settings,
) -> Outcome<Case> {
    let name = unique("r10-paused");
    let dir = run_dir(server, &name)?;
    let mut first = spec(server, settings, &name, &dir, 0);
    // Its release is due as soon as it is continued.
    first.hold_ms = 2 * settings.lease.as_millis() as u64;
    let worker = Worker::spawn(settings, &first)?;
    let acquired = worker.wait_for(Duration::from_secs(60), |event| {
        matches!(event, Event::Acquired { .. })
    })?;
    let Event::Acquired {
        token: first_token, ..
    } = acquired
    else {
        unreachable!("the event was chosen for being a grant");
    };
    worker.stop_outside(&FencedStore::open(&dir.join("store"))?)?;
    std::thread::sleep(settings.lease * 3);
    let lock = LockName::new(&name)?;
    let backend = runtime.block_on(distlock::open(&server.url()))?;
    let second = runtime.block_on(grant_within(
        &backend,
        &lock,
        Duration::from_secs(30),
        NEVER,
    ))?;
    worker.signal(Signal::CONT);
    let Some(second) = second else {
        return Err(format!(
            "a holder paused for 3 leases still held the name {} later",
            ms(NEVER)
        )
        .into());
    };
    let events = worker.finish()?;
    let release = events.iter().find_map(|event| match event {
        Event::Ended { release, .. } => Some(*release),
        _ => None,
    });
    runtime.block_on(stale_outcome(
        &backend,
        &lock,
        &second,
        first_token,
        None,
        release == Some(Release::Released),
    ))
}

/// The server restarts while A holds.
async fn restarted(server: &mut Server, settings: &Settings) -> Outcome<Case> {
    let url = server.url();
    let name = LockName::new(unique("r10-restart"))?;
    let holder = client(&url, settings).await?;
    let guard = holder.acquire_with(&name, Duration::from_secs(10)).await?;
    server.restart()?;
    let restarted = Instant::now();
    // Detected at the next extension, within a cadence and its answer.
    let bound = settings.cadence() + settings.lease / 3;
    after_drop(guard, &url, &name, restarted, bound).await
}
