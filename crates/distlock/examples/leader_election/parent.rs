//! The parent: starts the instances, waits until they agree on a leader,
//! kills the leader's process, and reports who took over and how soon.

use std::fmt::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use distlock::LockClient;
use distlock::file::fencing::FencedFile;

use crate::instances::{Instance, Launch, stop_all};
use crate::job::last_tick;
use crate::wire::{Led, Tick};
use crate::{BoxError, INSTANCES, LEASE};

/// How often the parent asks the instances who leads.
const ASK_EVERY: Duration = Duration::from_millis(50);

/// How many ticks the first leader's job runs before it is killed, so
/// that the report shows it running.
const TICKS_BEFORE_THE_KILL: u64 = 3;

/// Runs the whole story on the backend `url` names, or on file locks in a
/// fresh temporary directory. Returns whether another instance took over.
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
        return Err(
            "memory:// locks live in one process, and the instances are three: \
                    use file:///some/dir or a server's URL"
                .into(),
        );
    }
    let job_file = scratch.path().join("job.json");

    // A bad URL, or a backend that cannot say who leads (memcached), is
    // refused here, before any instance starts.
    let client = distlock::connect_with(LockClient::builder().lease(LEASE), &url).await?;
    let lease = client.options().lease();
    let election = format!("examples/leader-election/{}", run_id());
    client.election(election.as_str())?.leader().await?;
    // Three leases: generous, since one is the longest a takeover should take.
    let bound = lease * 3;

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
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?;

    let Some(first) = agreement(&http, &instances, None, bound).await? else {
        println!("FAILED: the instances did not agree on a leader within {bound:?}");
        return Ok(false);
    };
    let leader = number_of(&instances, &first)?;
    println!(
        "all {INSTANCES} agree (GET /leader): instance {leader} ({}) leads, term {}",
        first.value, first.term
    );
    let Some(tick) = job_in(&job_file, first.term, TICKS_BEFORE_THE_KILL, bound).await? else {
        println!(
            "FAILED: the leader's job did not run {TICKS_BEFORE_THE_KILL} ticks within {bound:?}"
        );
        return Ok(false);
    };
    println!(
        "the job runs on instance {}: tick {} of term {} in {}",
        tick.instance,
        tick.tick,
        tick.term,
        job_file.display()
    );

    let at = instances
        .iter()
        .position(|instance| instance.number == leader)
        .ok_or("the leader is not among the instances")?;
    let killed = instances.remove(at);
    let pid = killed
        .pid()
        .map_or("gone".to_owned(), |pid| pid.to_string());
    let killed_at = Instant::now();
    killed.kill().await?;
    println!("killed instance {leader} (pid {pid}), the leader, with SIGKILL: it could not resign");

    let Some(next) = agreement(&http, &instances, Some(first.term), bound).await? else {
        println!(
            "FAILED: no takeover: the other {} did not agree on a leader with a term above {} \
             within {bound:?} (three leases)",
            instances.len(),
            first.term
        );
        return Ok(false);
    };
    let took = killed_at.elapsed();
    let successor = number_of(&instances, &next)?;
    println!(
        "takeover: term {} -> term {}, instance {leader} -> instance {successor}, {:.2} s after \
         the kill: {:.2} of the {lease:?} lease",
        first.term,
        next.term,
        took.as_secs_f64(),
        took.as_secs_f64() / lease.as_secs_f64()
    );
    let Some(tick) = job_in(&job_file, next.term, 1, bound).await? else {
        println!(
            "FAILED: the job did not resume in term {} within {bound:?}",
            next.term
        );
        return Ok(false);
    };
    println!(
        "the job resumed on instance {}: tick {} of term {}",
        tick.instance, tick.tick, tick.term
    );
    // What the term is for: a tick the killed leader had in flight would
    // come with its old term, and the job's fence turns it away.
    let late = FencedFile::new(&job_file).write(first.term, b"{}")?;
    println!(
        "a late tick of term {}: {}",
        first.term,
        if late {
            "WRITTEN: the fence let a stale term through"
        } else {
            "turned away by the job's fence"
        }
    );

    stop_all(instances).await?;
    println!("{}", if late { "FAILED" } else { "ok" });
    Ok(!late)
}

/// Asks every instance who leads until all name the same leader, with a
/// term above `after` if given; `None` if they have not within `within`,
/// after printing what each said last.
async fn agreement(
    http: &reqwest::Client,
    instances: &[Instance],
    after: Option<u64>,
    within: Duration,
) -> Result<Option<Led>, BoxError> {
    let deadline = Instant::now() + within;
    loop {
        let mut said = Vec::with_capacity(instances.len());
        for instance in instances {
            said.push(match instance.ask(http).await {
                Ok(answer) => Ok(answer.leader),
                Err(error) => Err(error.to_string()),
            });
        }
        if let Some(Ok(Some(led))) = said.first()
            && said.iter().all(|other| {
                // The time left differs from one look to the next.
                matches!(other, Ok(Some(o)) if (&o.value, o.term) == (&led.value, led.term))
            })
            && after.is_none_or(|term| led.term > term)
        {
            return Ok(Some(led.clone()));
        }
        if Instant::now() >= deadline {
            for (instance, said) in instances.iter().zip(said) {
                println!("  instance {} said: {said:?}", instance.number);
            }
            return Ok(None);
        }
        tokio::time::sleep(ASK_EVERY).await;
    }
}

/// The instance whose base URL `led` campaigned with.
fn number_of(instances: &[Instance], led: &Led) -> Result<u64, BoxError> {
    instances
        .iter()
        .find(|instance| instance.base == led.value)
        .map(|instance| instance.number)
        .ok_or_else(|| {
            format!(
                "`{}` leads, which is none of this run's instances",
                led.value
            )
            .into()
        })
}

/// Waits until the job's file shows tick `ticks` or later of `term`;
/// `None` if it has not within `within`.
async fn job_in(
    path: &Path,
    term: u64,
    ticks: u64,
    within: Duration,
) -> Result<Option<Tick>, BoxError> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(tick) = last_tick(path)?
            && tick.term == term
            && tick.tick >= ticks
        {
            return Ok(Some(tick));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(ASK_EVERY).await;
    }
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
