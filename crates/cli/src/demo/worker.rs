//! One demo worker: takes the lock again and again until the deadline, and
//! under it does the unsafe things the lock must make safe.
//!
//! Under the lock a worker:
//! 1. creates the marker file with `create_new`; if it already exists,
//!    another worker is inside too, an overlap;
//! 2. reads the counter file, pauses, and writes the counter plus one: a
//!    read-modify-write that loses updates unless the lock serialises it;
//! 3. fences that write: the counter file also keeps the highest fencing
//!    token that wrote it, and a write whose token is not greater is
//!    refused, as a real resource would turn away a stale holder;
//! 4. removes the marker and releases.
//!
//! Each hold becomes one JSON line on stdout.

use std::io;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock::{LockClient, LockName, LockOptions};

use super::{COUNTER_FILE, HoldReport, MARKER_FILE, now_ns, read_counter, write_counter};
use crate::cli::WorkerArgs;
use crate::exec::die_with_parent;
use crate::exit::Failure;
use crate::open;
use crate::text;

/// How long a worker pauses between reading and writing the counter, to
/// make a lost update likely if two workers were ever inside at once.
const PAUSE: Duration = Duration::from_millis(1);

/// Runs one worker; returns the exit code.
pub(crate) async fn work(args: WorkerArgs) -> Result<u8, Failure> {
    // A worker left behind by a killed demo would only add noise.
    die_with_parent(args.parent_pid).map_err(Failure::runtime)?;
    let worker = args.worker;
    let name = LockName::new(&args.lock)?;
    let url = open::url_or_default(args.backend.backend);
    let backend = open::open_backend(&url).await?;
    let options = LockOptions::builder()
        .label(format!("distlock demo worker {worker}"))
        .build()?;
    let client = LockClient::new(backend, options);
    let until = UNIX_EPOCH + Duration::from_millis(args.until_unix_ms);
    let counter = args.dir.join(COUNTER_FILE);
    let marker = args.dir.join(MARKER_FILE);
    let fail = |what: &str, error: io::Error| {
        Failure::runtime(format!("worker {worker}: {what}: {error}"))
    };

    while let Ok(left) = until.duration_since(SystemTime::now()) {
        let guard = match client.acquire_with(&name, left).await {
            Ok(guard) => guard,
            Err(distlock::Error::Timeout { .. }) => break,
            Err(error) => return Err(error.into()),
        };
        let acquired_at_ns = now_ns();
        let token = guard.fencing_token();
        let overlap = match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&marker)
        {
            Ok(_) => false,
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => true,
            Err(error) => return Err(fail("cannot create the marker file", error)),
        };
        let stale = update_counter(&counter, token)
            .await
            .map_err(|error| fail("cannot update the counter", error))?;
        // The marker of an overlapping holder is theirs to remove.
        if !overlap {
            std::fs::remove_file(&marker)
                .map_err(|error| fail("cannot remove the marker", error))?;
        }
        let released_at_ns = now_ns();
        let lost = !guard.release().await?;
        let hold = HoldReport {
            worker,
            acquired_at_ns,
            released_at_ns,
            token,
            overlap,
            stale,
            lost,
        };
        let line = serde_json::to_string(&hold)
            .map_err(|error| Failure::runtime(format!("worker {worker}: {error}")))?;
        text::print(&format!("{line}\n"))?;
    }
    Ok(0)
}

/// Adds one to the counter unless `token` is stale; returns whether it was.
async fn update_counter(path: &Path, token: u64) -> io::Result<bool> {
    let (value, highest) = read_counter(path)?;
    tokio::time::sleep(PAUSE).await;
    if token <= highest {
        return Ok(true);
    }
    write_counter(path, value + 1, token)?;
    Ok(false)
}
