//! A holder process: tasks that take the lock under test, work on the fenced
//! counter while they hold it, and release it, recording each holding on
//! the shared monotonic clock.
//!
//! The campaign starts workers as `distlock-chaos worker SPEC`, with the
//! spec as JSON, so that a scenario can pause or kill a holder's process.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use distlock::{AcquireOptions, Claim, LockClient, LockName, LockOptions, LossReason};
use serde::{Deserialize, Serialize};

use crate::clock::{instant_ns, now_ns};
use crate::fenced::FencedStore;
use crate::outcome::Outcome;

/// What a worker does.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Spec {
    pub(crate) url: String,
    pub(crate) name: String,
    pub(crate) claim: ClaimSpec,
    /// Tasks in the process, each taking the lock in turn with the others.
    pub(crate) tasks: usize,
    /// Holdings per task.
    pub(crate) cycles: usize,
    pub(crate) lease_ms: u64,
    /// How long a holding lasts, between the read and the write.
    pub(crate) hold_ms: u64,
    /// How long one acquisition may wait.
    pub(crate) wait_ms: u64,
    /// The fenced counter's directory.
    pub(crate) store: PathBuf,
    /// Where the events go (JSON lines, appended).
    pub(crate) events: PathBuf,
    /// Write even after `lost()` fired, as a holder that does not look
    /// would: the fenced counter must turn it away.
    pub(crate) write_when_lost: bool,
    /// After its work, wait up to this long for `lost()` before releasing,
    /// to see that it fires by itself.
    pub(crate) await_loss_ms: Option<u64>,
    /// Stop taking the lock once the monotonic clock passes this.
    pub(crate) stop_at_ns: Option<u64>,
    /// Where the worker keeps its grant's handle while it holds: it first
    /// takes up the grant a file there names (a restart after a kill),
    /// and removes the file once it released.
    #[serde(default)]
    pub(crate) resume_file: Option<PathBuf>,
}

/// The claim a worker takes, as a spec spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ClaimSpec {
    Exclusive,
    Shared,
    Permit { limit: u32 },
}

impl ClaimSpec {
    pub(crate) fn claim(self) -> Claim {
        match self {
            ClaimSpec::Exclusive => Claim::Exclusive,
            ClaimSpec::Shared => Claim::Shared,
            ClaimSpec::Permit { limit } => Claim::Permit { limit },
        }
    }
}

/// One line of a worker's record.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub(crate) enum Event {
    /// The process started: its wall clock (`SystemTime::now()`, which
    /// `faketime` shifts), in milliseconds since the Unix epoch, read at
    /// `at_ns` on the shared monotonic clock.
    Started { pid: u32, wall_ms: i64, at_ns: u64 },
    /// The holder asked for the lock; the grant, timeout or failure that
    /// follows for the same task answers this ask.
    Asked { pid: u32, task: usize, at_ns: u64 },
    /// A grant arrived.
    Acquired {
        pid: u32,
        task: usize,
        claim: ClaimSpec,
        token: u64,
        at_ns: u64,
        /// Whether the grant was taken up from a handle (`resume`), not
        /// granted anew.
        #[serde(default)]
        resumed: bool,
    },
    /// The holder stopped acting on the grant (just before it released).
    Ended {
        pid: u32,
        task: usize,
        token: u64,
        at_ns: u64,
        /// When `lost()` fired, if it did before the release.
        lost_ns: Option<u64>,
        /// Whether the fenced operations were accepted: the read, and the
        /// write if one was made.
        read_ok: bool,
        write_ok: Option<bool>,
        release: Release,
        /// When the release answered (on the shared monotonic clock).
        #[serde(default)]
        released_ns: Option<u64>,
        /// Why `lost()` fired (`Refused`, `Expired`, …), if it did.
        #[serde(default)]
        lost_reason: Option<String>,
        /// The holder's own deadline, as its guard last knew it
        /// (`LockGuard::valid_until`): past it, the holder could not
        /// count on the lease. `None` for a lock bound to its process.
        #[serde(default)]
        valid_until_ns: Option<u64>,
        /// Whether the holder wrote the unfenced witness (an exclusive
        /// holder still valid after its pause).
        #[serde(default)]
        witnessed: bool,
        /// When `at_risk()` first warned of a danger short of the loss
        /// (a failed extension, little of the lease left), if it did.
        #[serde(default)]
        warned_ns: Option<u64>,
    },
    /// An acquisition ended in an error (not a timeout).
    Failed {
        pid: u32,
        task: usize,
        at_ns: u64,
        error: String,
    },
    /// An acquisition timed out.
    TimedOut { pid: u32, task: usize, at_ns: u64 },
}

/// How a release went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Release {
    Released,
    NotOurs,
    Failed,
}

/// Reads a worker's events file; a file that does not exist is empty, and
/// a torn last line (the process was killed mid-write) is skipped.
///
/// # Errors
/// An I/O error, or a line that is not an event.
pub(crate) fn read_events(path: &Path) -> Outcome<Vec<Event>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error.into()),
    };
    let mut events = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    for (index, line) in lines.iter().enumerate() {
        match serde_json::from_str(line) {
            Ok(event) => events.push(event),
            Err(_) if index + 1 == lines.len() => {}
            Err(error) => return Err(format!("{}: {error}", path.display()).into()),
        }
    }
    Ok(events)
}

/// Runs a worker to the end of its cycles.
///
/// # Errors
/// A backend that cannot be opened within 30 s, or an I/O error.
pub(crate) async fn run(spec: Spec) -> Outcome<()> {
    record(
        &spec.events,
        &Event::Started {
            pid: std::process::id(),
            wall_ms: wall_ms(std::time::SystemTime::now()),
            at_ns: now_ns(),
        },
    )?;
    let backend = open_patiently(&spec.url).await?;
    let options = LockOptions::builder()
        .lease(Duration::from_millis(spec.lease_ms))
        .label("distlock-chaos")
        .build()?;
    let client = LockClient::new(backend, options);
    let spec = Arc::new(spec);
    let mut tasks = Vec::new();
    for task in 0..spec.tasks {
        let (client, spec) = (client.clone(), spec.clone());
        tasks.push(tokio::spawn(async move {
            hold_in_turn(&client, &spec, task).await
        }));
    }
    for task in tasks {
        task.await??;
    }
    close(&client).await;
    Ok(())
}

/// How long a worker that ends keeps trying to close its client.
const CLOSE_PATIENCE: Duration = Duration::from_secs(10);

/// Gives back what the backend keeps for this client, as a process that
/// ends should: etcd's session goes, and with it every key on it, a key
/// whose delete failed among them. Left to its TTL instead, such a key
/// would hold the name for as long as R1 restarts etcd (a new leader
/// restarts every etcd lease's TTL), and the other holders would wait for
/// it until their timeouts, again and again. So the close is tried
/// through the restarts, well past one operation timeout.
async fn close(client: &LockClient) {
    let started = std::time::Instant::now();
    loop {
        match client.close().await {
            Ok(()) => return,
            Err(error) if error.is_transient() && started.elapsed() < CLOSE_PATIENCE => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => {
                eprintln!("distlock-chaos worker: closing the client failed: {error}");
                return;
            }
        }
    }
}

/// The backend at `url`, once the server takes connections (PostgreSQL
/// listens a moment before it accepts them).
pub(crate) async fn open_patiently(url: &str) -> Outcome<Arc<dyn distlock::backend::Backend>> {
    let started = std::time::Instant::now();
    let (mutation, url) = match crate::mutants::undress(url)? {
        Some((mutation, inner)) => (Some(mutation), inner),
        None => (None, url),
    };
    loop {
        match distlock::open(url).await {
            Ok(backend) => {
                return Ok(match mutation {
                    Some(mutation) => crate::mutants::wrap(mutation, backend),
                    None => backend,
                });
            }
            Err(error) if error.is_transient() && started.elapsed() < Duration::from_secs(30) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => return Err(error.into()),
        }
    }
}

async fn hold_in_turn(client: &LockClient, spec: &Spec, task: usize) -> Outcome<()> {
    let name = LockName::new(&spec.name)?;
    let store = FencedStore::open(&spec.store)?;
    let witness = store.witness();
    let pid = std::process::id();
    for _ in 0..spec.cycles {
        if spec.stop_at_ns.is_some_and(|stop| now_ns() >= stop) {
            break;
        }
        let wait = Duration::from_millis(spec.wait_ms);
        record(
            &spec.events,
            &Event::Asked {
                pid,
                task,
                at_ns: now_ns(),
            },
        )?;
        let (guard, resumed) = match take(client, spec, &name, wait).await {
            Ok(taken) => taken,
            Err(distlock::Error::Timeout { .. }) => {
                record(
                    &spec.events,
                    &Event::TimedOut {
                        pid,
                        task,
                        at_ns: now_ns(),
                    },
                )?;
                continue;
            }
            Err(error) => {
                let at_ns = now_ns();
                let error = error.to_string();
                record(
                    &spec.events,
                    &Event::Failed {
                        pid,
                        task,
                        at_ns,
                        error,
                    },
                )?;
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let token = guard.fencing_token();
        let claim = spec.claim;
        record(
            &spec.events,
            &Event::Acquired {
                pid,
                task,
                claim,
                token,
                at_ns: now_ns(),
                resumed,
            },
        )?;
        if let Some(file) = &spec.resume_file {
            keep_handle(file, &guard)?;
        }
        let loss = watch_loss(&guard);

        let hold = Duration::from_millis(spec.hold_ms);
        let mut witnessed = false;
        let (read_ok, write_ok) = match spec.claim {
            ClaimSpec::Exclusive => {
                let seen = witness.read()?;
                let read = store.read(token)?;
                tokio::time::sleep(hold).await;
                // The witness is written only while the holder may act:
                // a lost update there is two holders acting at once.
                if still_valid(&guard) {
                    witness.write(seen + 1)?;
                    witnessed = true;
                }
                let write = match read {
                    Some(value) if spec.write_when_lost || !guard.is_lost() => {
                        Some(store.write(token, value + 1)?)
                    }
                    _ => None,
                };
                (read.is_some(), write)
            }
            ClaimSpec::Shared => {
                let read = store.shared_read(token)?;
                tokio::time::sleep(hold).await;
                (read.is_some(), None)
            }
            ClaimSpec::Permit { .. } => {
                tokio::time::sleep(hold).await;
                (true, None)
            }
        };
        if let Some(patience) = spec.await_loss_ms {
            let _ = tokio::time::timeout(Duration::from_millis(patience), guard.lost()).await;
        }
        if guard.is_lost() && loss.at.load(Ordering::SeqCst) == 0 {
            // Lost before its watcher task had its turn.
            loss.at.store(now_ns(), Ordering::SeqCst);
            let _ = loss.reason.set(guard.lost().await);
        }
        let at_ns = now_ns();
        let valid_until_ns = guard.valid_until().map(instant_ns);
        let release = match guard.release().await {
            Ok(true) => Release::Released,
            Ok(false) | Err(distlock::Error::Lost { .. }) => Release::NotOurs,
            Err(_) => Release::Failed,
        };
        let released_ns = Some(now_ns());
        if let Some(file) = &spec.resume_file {
            std::fs::remove_file(file)?;
        }
        let lost_ns = match loss.at.load(Ordering::SeqCst) {
            0 => None,
            at => Some(at),
        };
        let lost_reason = lost_ns.and_then(|_| loss.reason());
        let warned_ns = loss.warned_at();
        record(
            &spec.events,
            &Event::Ended {
                pid,
                task,
                token,
                at_ns,
                lost_ns,
                read_ok,
                write_ok,
                release,
                released_ns,
                lost_reason,
                valid_until_ns,
                witnessed,
                warned_ns,
            },
        )?;
    }
    Ok(())
}

/// The grant this worker's handle file names, taken up again, or else the
/// lock as `spec` asks for it, waiting at most `wait`; and whether it was
/// taken up.
async fn take(
    client: &LockClient,
    spec: &Spec,
    name: &LockName,
    wait: Duration,
) -> distlock::Result<(distlock::LockGuard, bool)> {
    let saved = spec
        .resume_file
        .as_ref()
        .and_then(|file| std::fs::read_to_string(file).ok());
    if let Some(text) = saved {
        let handle: distlock::ResumeHandle = text.parse()?;
        match client.resume(&handle).await {
            Ok(guard) => return Ok((guard, true)),
            Err(distlock::Error::Lost { .. }) => {}
            Err(error) => return Err(error),
        }
    }
    let options = AcquireOptions::new()
        .claim(spec.claim.claim())
        .timeout(wait);
    let guard = client.acquire_with(name, options).await?;
    Ok((guard, false))
}

/// Writes `guard`'s handle to `file` in one step (a file beside it renamed
/// over it), so that a kill leaves a whole handle or none.
fn keep_handle(file: &Path, guard: &distlock::LockGuard) -> Outcome<()> {
    let temp = file.with_extension("tmp");
    std::fs::write(&temp, guard.handle().to_string())?;
    std::fs::rename(&temp, file)?;
    Ok(())
}

/// Whether `guard`'s holder may still act on its lease: not lost, and
/// before its own deadline.
pub(crate) fn still_valid(guard: &distlock::LockGuard) -> bool {
    !guard.is_lost()
        && guard
            .valid_until()
            .is_none_or(|until| std::time::Instant::now() < until)
}

/// When a guard's `lost()` fired for a reason other than its release
/// (zero until then), and why; and when `at_risk()` first warned of a
/// danger short of the loss (zero until then).
pub(crate) struct Loss {
    at: Arc<AtomicU64>,
    reason: Arc<std::sync::OnceLock<LossReason>>,
    warned: Arc<AtomicU64>,
}

/// Watches `guard`'s `lost()` and `at_risk()` from tasks of their own.
pub(crate) fn watch_loss(guard: &distlock::LockGuard) -> Loss {
    let loss = Loss {
        at: Arc::new(AtomicU64::new(0)),
        reason: Arc::new(std::sync::OnceLock::new()),
        warned: Arc::new(AtomicU64::new(0)),
    };
    let signal = guard.lost_signal();
    let (seen, why) = (loss.at.clone(), loss.reason.clone());
    tokio::spawn(async move {
        let reason = signal.lost().await;
        if reason != LossReason::Released {
            let _ = why.set(reason);
            seen.store(now_ns(), Ordering::SeqCst);
        }
    });
    let risk = guard.risk_signal();
    let warned = loss.warned.clone();
    tokio::spawn(async move {
        if !matches!(risk.at_risk().await, distlock::RiskReason::Lost(_)) {
            warned.store(now_ns(), Ordering::SeqCst);
        }
    });
    loss
}

impl Loss {
    /// When `lost()` fired, once it has.
    pub(crate) fn at(&self) -> Option<u64> {
        match self.at.load(Ordering::SeqCst) {
            0 => None,
            at => Some(at),
        }
    }

    /// When `at_risk()` first warned, if it has.
    pub(crate) fn warned_at(&self) -> Option<u64> {
        match self.warned.load(Ordering::SeqCst) {
            0 => None,
            at => Some(at),
        }
    }

    /// Why `lost()` fired, as the records spell it, once it has.
    fn reason(&self) -> Option<String> {
        self.reason.get().map(|reason| format!("{reason:?}"))
    }
}

/// `time` in milliseconds since the Unix epoch, negative before it.
pub(crate) fn wall_ms(time: std::time::SystemTime) -> i64 {
    match time.duration_since(std::time::UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_millis()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

/// Appends `event` as one line, in one write, so that a process killed at
/// any moment leaves whole lines (and at most a torn last one).
fn record(path: &Path, event: &Event) -> Outcome<()> {
    let mut line = serde_json::to_vec(event)?;
    line.push(b'\n');
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?
        .write_all(&line)?;
    Ok(())
}
