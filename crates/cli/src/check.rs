//! `distlock check`: what a deployment needs before it relies on its locks,
//! checked one line at a time against the backend it names.
//!
//! Every check has a verdict: `ok`, `warn` (works, with a caveat) or `fail`.
//! Besides the checks every backend gets, each backend adds the features
//! of its deployment it relies on (change streams, an eviction policy, a
//! private directory, …): see [`distlock::backend::ServerInfo::features`].
//! The command exits 0 unless a check failed: then with the code of the
//! first failure (69 for a backend out of reach, 2 for configuration,
//! credentials or permissions, 1 otherwise). With `--json` it prints an
//! array of `{"check", "verdict", "detail"}` objects on stdout instead of
//! the lines.

use std::time::{Duration, Instant, SystemTime};

use distlock::backend::BackendExt;
use distlock::backend::{Backend, Capabilities, Feature, FeatureState};
use distlock::{Error, LockClient, LockOptions};
use serde::Serialize;

use crate::cli::CheckArgs;
use crate::exit::{self, Failure};
use crate::open;
use crate::text;

/// How far the server's clock may be from this machine's, beyond the
/// round trip, before the check warns: memcached gives whole seconds, from
/// a clock it updates once a second.
const CLOCK_TOLERANCE: Duration = Duration::from_secs(2);

/// How many take-and-release cycles measure the round trip.
const PROBES: usize = 20;

/// A check's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Verdict {
    Ok,
    Warn,
    Fail,
}

/// One check and what it found.
#[derive(Debug, Serialize)]
struct Finding {
    check: &'static str,
    verdict: Verdict,
    detail: String,
    /// The exit code a failure stands for.
    #[serde(skip)]
    code: u8,
}

impl Finding {
    fn ok(check: &'static str, detail: impl Into<String>) -> Self {
        Self::new(check, Verdict::Ok, detail, 0)
    }

    fn warn(check: &'static str, detail: impl Into<String>) -> Self {
        Self::new(check, Verdict::Warn, detail, 0)
    }

    fn fail(check: &'static str, failure: Failure) -> Self {
        Self::new(check, Verdict::Fail, failure.message, failure.code)
    }

    fn new(check: &'static str, verdict: Verdict, detail: impl Into<String>, code: u8) -> Self {
        Self {
            check,
            verdict,
            detail: text::printable(&detail.into()),
            code,
        }
    }
}

/// Runs `distlock check`; returns the exit code.
pub(crate) async fn check(args: CheckArgs) -> Result<u8, Failure> {
    let url = open::url_or_default(args.backend.backend);
    let mut options = LockOptions::builder().label("distlock check");
    if let Some(lease) = args.lease {
        options = options.lease(lease);
    }
    let options = options.build()?;
    let findings = run_checks(&url, options).await;
    if args.json {
        let json = serde_json::to_string_pretty(&findings)
            .map_err(|error| Failure::runtime(format!("cannot write JSON: {error}")))?;
        text::print(&format!("{json}\n"))?;
    } else {
        let mut lines = format!(
            "distlock check: {}\n",
            text::printable(&distlock::redact(&url))
        );
        for finding in &findings {
            let verdict = match finding.verdict {
                Verdict::Ok => "ok",
                Verdict::Warn => "warn",
                Verdict::Fail => "FAIL",
            };
            lines.push_str(&format!(
                "{verdict:<5} {:<13} {}\n",
                finding.check, finding.detail
            ));
        }
        text::print(&lines)?;
    }
    Ok(findings
        .iter()
        .find(|finding| finding.verdict == Verdict::Fail)
        .map_or(0, |failed| failed.code))
}

/// Every check, in order; a backend that cannot be opened ends them.
async fn run_checks(url: &str, options: LockOptions) -> Vec<Finding> {
    let mut findings = Vec::new();
    let opened = Instant::now();
    let backend = match open::open_backend(url).await {
        Ok(backend) => backend,
        Err(failure) => {
            findings.push(Finding::fail("reach", failure));
            return findings;
        }
    };
    findings.push(Finding::ok(
        "reach",
        format!("opened in {}", text::short_duration(opened.elapsed())),
    ));
    findings.extend(server(&*backend, SERVER_LIMIT).await);
    let capabilities = backend.capabilities();
    let wakeups = backend.wakeups().is_some();
    let client = LockClient::new(backend, options.clone());
    findings.extend(use_locks(&client, &options, capabilities, wakeups).await);
    // The probe's session (etcd) goes now, not a TTL after the check.
    if let Err(error) = client.close().await {
        tracing::warn!(%error, "could not close the backend; its session ends when it expires");
    }
    findings
}

/// Takes, releases and lists locks through `client`, and judges how long
/// it took against the lease.
async fn use_locks(
    client: &LockClient,
    options: &LockOptions,
    capabilities: Capabilities,
    wakeups: bool,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    let probe = format!("distlock-check-{}-{}", std::process::id(), rand_suffix());

    // Taking and releasing a lock needs every permission distlock needs.
    let mut cycles = Vec::with_capacity(PROBES);
    let mut tokens = Vec::with_capacity(PROBES);
    for _ in 0..PROBES {
        let started = Instant::now();
        match take_and_release(client, &probe).await {
            Ok(token) => {
                cycles.push(started.elapsed());
                tokens.push(token);
            }
            Err(finding) => {
                findings.push(finding);
                return findings;
            }
        }
    }
    findings.push(Finding::ok(
        "write",
        format!("took and released the probe lock {probe} {PROBES} times"),
    ));
    if tokens.windows(2).all(|pair| pair[0] < pair[1]) {
        findings.push(Finding::ok(
            "fencing",
            format!(
                "tokens increased on every grant ({} to {})",
                tokens[0],
                tokens[tokens.len() - 1]
            ),
        ));
    } else {
        findings.push(Finding::fail(
            "fencing",
            Failure::runtime(format!("fencing tokens did not increase: {tokens:?}")),
        ));
    }
    findings.push(match client.list().await {
        Ok(locks) if capabilities.lists_every_holder => {
            Finding::ok("list", format!("{} holders listed", locks.len()))
        }
        Ok(_) => Finding::warn(
            "list",
            "this backend lists only the locks of the process that lists them",
        ),
        Err(error) => Finding::fail("list", Failure::from(error)),
    });
    findings.push(if wakeups {
        Finding::ok("wake-ups", "a release wakes the waiters at once")
    } else {
        Finding::warn(
            "wake-ups",
            "the backend reports no releases: waiters poll, with the client's backoff",
        )
    });
    cycles.sort();
    let p50 = cycles[cycles.len() / 2];
    let p99 = cycles[(cycles.len() * 99 / 100).min(cycles.len() - 1)];
    findings.push(Finding::ok(
        "round trip",
        format!(
            "take and release: p50 {}, p99 {} over {PROBES} probes",
            text::short_duration(p50),
            text::short_duration(p99)
        ),
    ));
    findings.push(lease_fits(options, p99, capabilities.process_bound));
    findings
}

/// How long the check gives the server to say what it is: long enough for
/// a backend's slower findings (PostgreSQL's listening connection waits up
/// to half of what is left, at most 10 s, to show whether notifications
/// arrive), which a client's operation timeout would cut short.
const SERVER_LIMIT: Duration = Duration::from_secs(30);

/// What the server says of itself, asked within `limit`: its version, and
/// how far its clock is from this machine's.
async fn server(backend: &dyn Backend, limit: Duration) -> Vec<Finding> {
    let before = SystemTime::now();
    let asked = tokio::time::timeout(limit, backend.server_info(limit)).await;
    let info = match asked.unwrap_or(Err(Error::OperationTimeout {
        operation: "server info",
        after: limit,
    })) {
        Ok(info) => info,
        Err(error) => {
            return vec![Finding::warn(
                "server",
                format!(
                    "the server did not say its version: {}",
                    exit::with_causes(&error)
                ),
            )];
        }
    };
    let after = SystemTime::now();
    let mut findings = vec![match info.version {
        Some(version) => Finding::ok("server", version),
        None => Finding::ok("server", "this backend has no server to ask"),
    }];
    if let Some(clock) = info.clock {
        let round_trip = after.duration_since(before).unwrap_or_default();
        let here = before + round_trip / 2;
        let (gap, way) = match clock.duration_since(here) {
            Ok(ahead) => (ahead, "ahead of"),
            Err(behind) => (behind.duration(), "behind"),
        };
        // The server's reading is somewhere in the round trip, and some
        // servers give whole seconds.
        let tolerance = CLOCK_TOLERANCE + round_trip;
        let shown = text::short_duration(gap);
        findings.push(if gap <= tolerance {
            Finding::ok(
                "clock",
                format!("the server's clock is {shown} {way} this machine's"),
            )
        } else {
            Finding::warn(
                "clock",
                format!(
                    "the server's clock is {shown} {way} this machine's: leases are judged by \
                     the server's clock alone, so locks stay safe, but check that both keep \
                     time (NTP); a server clock that steps forward ends leases early"
                ),
            )
        });
    }
    findings.extend(info.features.into_iter().map(feature_finding));
    findings
}

/// A feature the backend relies on, as a check: one it cannot do without
/// is a failure of the deployment's configuration.
fn feature_finding(feature: Feature) -> Finding {
    match feature.state {
        FeatureState::Present => Finding::ok(feature.name, feature.detail),
        FeatureState::Degraded => Finding::warn(feature.name, feature.detail),
        _ => Finding::fail(feature.name, Failure::usage(feature.detail)),
    }
}

/// One grant of `probe` and its release; the grant's fencing token.
async fn take_and_release(client: &LockClient, probe: &str) -> Result<u64, Finding> {
    let guard = match client.acquire_with(probe, Duration::from_secs(10)).await {
        Ok(guard) => guard,
        Err(Error::Timeout {
            last_error: None, ..
        }) => {
            return Err(Finding::fail(
                "write",
                Failure::runtime(format!(
                    "the probe lock {probe} stayed held by someone else"
                )),
            ));
        }
        Err(error) => return Err(Finding::fail("write", Failure::from(error))),
    };
    let token = guard.fencing_token();
    match guard.release().await {
        Ok(true) => Ok(token),
        Ok(false) => Err(Finding::fail(
            "write",
            Failure::runtime(format!(
                "the probe lock {probe} was lost before its release"
            )),
        )),
        Err(error) => Err(Finding::fail("write", Failure::from(error))),
    }
}

/// Whether the lease leaves room for the measured round trip: an extension
/// that takes a large part of the safety margin risks a lease given up, or
/// lost, on an ordinary slow day.
fn lease_fits(options: &LockOptions, p99_cycle: Duration, process_bound: bool) -> Finding {
    if process_bound {
        return Finding::ok(
            "lease",
            "locks last as long as their holder: no lease to extend",
        );
    }
    // A cycle is two calls; an extension is one.
    let call = p99_cycle / 2;
    let margin = options.safety_margin();
    let lease = humantime::format_duration(options.lease());
    if call * 4 > margin {
        Finding::warn(
            "lease",
            format!(
                "a call's p99 ({}) is over a quarter of the safety margin ({}) of a {lease} \
                 lease: raise the lease (--lease, or lease= in the URL of your clients)",
                text::short_duration(call),
                text::short_duration(margin)
            ),
        )
    } else {
        Finding::ok(
            "lease",
            format!(
                "a {lease} lease with a {} safety margin leaves room for a call's p99 ({})",
                text::short_duration(margin),
                text::short_duration(call)
            ),
        )
    }
}

/// A short random suffix, so that two checks never share a probe lock.
fn rand_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.subsec_nanos());
    format!("{nanos:08x}")
}
