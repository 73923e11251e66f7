//! The parent: checks the backend, starts the instances, has the
//! takeover watched, and stops what is left.

use std::fmt::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use distlock::LockClient;

use crate::instances::{Launch, stop_all};
use crate::takeover::Watch;
use crate::{BoxError, INSTANCES, LEASE};

const ONE_PROCESS_ONLY: &str = "memory:// locks live in one process, and the instances are \
                                three: use file:///some/dir or a server's URL";

/// Runs the whole story on the backend `url` names, or on file locks in a
/// fresh temporary directory. Returns whether another instance took over
/// (having said why not, if not).
///
/// # Errors
/// A URL or backend that cannot be used, an instance that cannot start,
/// or an I/O error of the job's file.
pub(crate) async fn run(url: Option<String>) -> Result<bool, BoxError> {
    // The job's file, and the file locks when no URL is given.
    let scratch = tempfile::tempdir()?;
    let url = url.unwrap_or_else(|| file_url(&scratch.path().join("locks")));
    if url
        .get(.."memory:".len())
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("memory:"))
    {
        return Err(ONE_PROCESS_ONLY.into());
    }
    let job_file = scratch.path().join("job.json");

    // A bad URL, or a backend that cannot say who leads (memcached), is
    // refused here, before any instance starts.
    let client = distlock::connect_with(LockClient::builder().lease(LEASE), &url).await?;
    let lease = client.options().lease();
    let election = format!("examples/leader-election/{}", run_id());
    client.election(election.as_str())?.leader().await?;

    println!(
        "{INSTANCES} instances of one axum service elect a leader on {}, with a {lease:?} lease; \
         the leader runs a job every {:?}",
        distlock::redact(&url),
        crate::TICK_EVERY
    );
    let launch = Launch {
        url: &url,
        election: &election,
        job_file: &job_file,
    };
    let mut instances = Vec::with_capacity(INSTANCES);
    for number in 1..=INSTANCES as u64 {
        let instance = launch.start(number).await?;
        println!("instance {number} serves {}", instance.base);
        instances.push(instance);
    }
    let watch = Watch {
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()?,
        job_file: &job_file,
        lease,
    };
    let outcome = watch.kill_the_leader(&mut instances).await;
    stop_all(instances).await?;
    let ok = outcome?;
    println!("{}", if ok { "ok" } else { "FAILED" });
    Ok(ok)
}

/// A `file://` URL of `dir`, with every byte a URL could misread escaped.
fn file_url(dir: &Path) -> String {
    let mut url = String::from("file://");
    for &byte in dir.as_os_str().as_bytes() {
        if byte.is_ascii_alphanumeric() || b"/-._~".contains(&byte) {
            url.push(char::from(byte));
        } else {
            let _ = write!(url, "%{byte:02X}");
        }
    }
    url
}

/// A name for this run's election, so that runs sharing a server do not
/// meet: the wall clock is used for uniqueness only.
fn run_id() -> String {
    let since_epoch = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    format!("{}-{}", std::process::id(), since_epoch.as_nanos())
}
