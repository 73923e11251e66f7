//! Leader election among three instances of an axum service: one runs a
//! scheduled job, every one answers `GET /leader`, and when the leader's
//! process is killed another takes over within one lease.
//!
//! Run without `serve`, this example is the parent: it starts three
//! instances of itself, waits until they agree on a leader, SIGKILLs the
//! leader's process, and reports who took over, in which term, and how
//! long it took compared with the lease. It exits 1 if nobody took over
//! within three leases.
//!
//! ```sh
//! # File locks in a fresh temporary directory: runs on a bare machine.
//! cargo run -p distlock --example leader_election
//! # A server backend, by URL (or DISTLOCK_URL):
//! cargo run -p distlock --features redis --example leader_election -- redis://127.0.0.1:6379
//! # One instance by hand (it stops when its standard input closes):
//! DISTLOCK_URL=file:///tmp/locks cargo run -p distlock --example leader_election -- \
//!     serve --port 8081 --instance 1 --election scheduler --job-file /tmp/job.json
//! curl http://127.0.0.1:8081/leader
//! ```

mod instance;
mod instances;
mod job;
mod parent;
mod takeover;
mod wire;

use std::collections::HashMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// How many instances the parent starts.
const INSTANCES: usize = 3;

/// A short lease, so that the example runs quickly: a killed leader's
/// lease runs out within this on a store that needs it to.
const LEASE: Duration = Duration::from_secs(2);

/// How often the leader runs the scheduled job.
const TICK_EVERY: Duration = Duration::from_millis(200);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const USAGE: &str = "\
usage: leader_election [URL]
       leader_election serve --port P --instance N --election NAME --job-file PATH [--url URL]

Without `serve`, starts three instances and kills their leader. URL names the
backend (or set DISTLOCK_URL); without one, file locks in a fresh temporary
directory. `--port 0` lets the instance pick a free port; its first line of
output names it.";

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = match args.first().map(String::as_str) {
        Some("-h" | "--help") => {
            // Not println!, which panics when the reader has gone (`| head`).
            let _ = writeln!(std::io::stdout(), "{USAGE}");
            return ExitCode::SUCCESS;
        }
        Some("serve") => match serve_settings(&args[1..]) {
            Ok(settings) => instance::serve(settings).await.map(|()| true),
            Err(problem) => return usage(&problem),
        },
        Some(url) if args.len() == 1 => parent::run(Some(url.to_owned())).await,
        None => parent::run(std::env::var("DISTLOCK_URL").ok()).await,
        Some(_) => return usage("the parent takes at most one argument, the backend's URL"),
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("leader_election: {error}");
            ExitCode::FAILURE
        }
    }
}

fn usage(problem: &str) -> ExitCode {
    eprintln!("leader_election: {problem}\n\n{USAGE}");
    ExitCode::from(2)
}

/// Reads `serve`'s flags; the URL may come from `DISTLOCK_URL` instead,
/// which is how the parent passes it, so that credentials in it never
/// show in the process list.
fn serve_settings(args: &[String]) -> Result<instance::Settings, String> {
    const KNOWN: &[&str] = &["--port", "--instance", "--election", "--job-file", "--url"];
    let mut flags = HashMap::new();
    let mut rest = args.iter();
    while let Some(flag) = rest.next() {
        if !KNOWN.contains(&flag.as_str()) {
            return Err(format!("`serve` has no flag `{flag}`"));
        }
        let value = rest
            .next()
            .ok_or_else(|| format!("`{flag}` needs a value"))?;
        if flags.insert(flag.as_str(), value.as_str()).is_some() {
            return Err(format!("`{flag}` is given twice"));
        }
    }
    let required = |flag: &str| {
        flags
            .get(flag)
            .copied()
            .ok_or_else(|| format!("`serve` needs `{flag}`"))
    };
    let number = |flag: &str| -> Result<u64, String> {
        required(flag)?
            .parse()
            .map_err(|_| format!("`{flag}` takes a whole number"))
    };
    let url = match flags.get("--url") {
        Some(url) => (*url).to_owned(),
        None => std::env::var("DISTLOCK_URL")
            .map_err(|_| "`serve` needs `--url` or DISTLOCK_URL".to_owned())?,
    };
    Ok(instance::Settings {
        port: u16::try_from(number("--port")?)
            .map_err(|_| "`--port` takes a port, 0 to 65535".to_owned())?,
        instance: number("--instance")?,
        election: required("--election")?.to_owned(),
        job_file: PathBuf::from(required("--job-file")?),
        url,
    })
}
