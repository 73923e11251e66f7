//! R12: a password in the backend URL never shows in any output: the
//! `distlock` command's (at trace level), the library's errors and `Debug`
//! forms, and its logs.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use distlock::{BackendUrl, LockClient, LockName, LockOptions};
use tracing_subscriber::EnvFilter;

use super::Scenario;
use crate::campaign::Kind;
use crate::campaign::Server;
use crate::judge::Verdict;
use crate::outcome::Outcome;
use crate::report::{Row, ScenarioInfo, minimum};
use crate::scratch::unique;
use crate::settings::{ADMIN_LIMIT, Settings};

pub(super) const SCENARIO: Scenario = Scenario {
    info: ScenarioInfo {
        id: "R12",
        title: "Secrets stay out of output",
        what: "A password canary in the backend URL (`mongodb://alice:CANARY-p4ss@…`), against \
               a closed port, the real server with a user that does not exist, and a URL the \
               driver cannot parse (on Redis, which the campaign runs without authentication, \
               also a password alone: `redis://:CANARY-p4ss@…`); for memcached, whose protocol has no credentials, a \
               `memcache://u:CANARY-p4ss@…` URL; for the file backend, a `file://` URL with \
               user information. Each URL goes to the `distlock` command (`list`, `run`, \
               `release --force`, with `DISTLOCK_LOG=trace` and `RUST_LOG=trace`, by \
               `--backend` and by `DISTLOCK_URL`, and `--help` with `DISTLOCK_URL` set) and to \
               the library (`BackendUrl::parse`, `distlock::open`, each error's `Display`, \
               `Debug` and sources, the backend builders' and backends' `Debug`, and \
               everything it logs at trace level, where `distlock::open` names the URL it \
               opens and how that ended). Must hold: the canary appears in none of them, and \
               none of them is empty: an empty output searched nothing (until the library \
               logged its URL, its trace logs were empty on every backend but etcd).",
        untimed: true,
    },
    run,
};

/// The password in every URL.
const CANARY: &str = "CANARY-p4ss";

/// How long one `distlock` command may take before it is killed.
const COMMAND_LIMIT: Duration = Duration::from_secs(30);

fn run(server: &mut Server, settings: &Settings) -> Outcome<Vec<Row>> {
    let cli = settings.cli.clone().ok_or(
        "the `distlock` binary is not beside distlock-chaos: build it (cargo build -p \
         distlock-cli), R12 runs it",
    )?;
    let mut rows = Vec::new();
    for case in server.kind.secret_cases(server, CANARY)? {
        rows.push(check(server, &cli, case.label, &case.url, case.note)?);
    }
    Ok(rows)
}

/// One output that was searched for the canary.
struct Output {
    source: String,
    text: String,
}

fn check(server: &Server, cli: &Path, label: &str, url: &str, note: &str) -> Outcome<Row> {
    let started = Instant::now();
    let name = unique("r12");
    let mut outputs = Vec::new();
    let mut exits = Vec::new();
    let commands: [(&str, Vec<&str>); 3] = [
        ("list", vec!["list"]),
        ("run", vec!["run", &name, "--wait", "1s", "--", "true"]),
        ("release --force", vec!["release", &name, "--force"]),
    ];
    for (what, args) in &commands {
        let (code, text) = distlock(cli, args, Some(url), None)?;
        exits.push(format!("{what} {code}"));
        outputs.push(Output {
            source: format!("`distlock {what}` (--backend)"),
            text,
        });
    }
    let (code, text) = distlock(cli, &["list"], None, Some(url))?;
    exits.push(format!("list (DISTLOCK_URL) {code}"));
    outputs.push(Output {
        source: "`distlock list` (DISTLOCK_URL)".into(),
        text,
    });
    let (_, text) = distlock(cli, &["list", "--help"], None, Some(url))?;
    outputs.push(Output {
        source: "`distlock list --help` (DISTLOCK_URL)".into(),
        text,
    });

    let library = library(server.kind, url, &name)?;
    let opened = library.opened.clone();
    outputs.extend(library.outputs);

    let leaked: Vec<&Output> = outputs
        .iter()
        .filter(|output| output.text.contains(CANARY))
        .collect();
    let leaks = match leaked.first() {
        None => "no canary".to_owned(),
        Some(first) => format!(
            "the CANARY LEAKED in {} ({}), e.g. …{}…",
            leaked
                .iter()
                .map(|output| output.source.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            leaked.len(),
            around_canary(&first.text)
        ),
    };
    let silent: Vec<&str> = outputs
        .iter()
        .filter(|output| output.text.trim().is_empty())
        .map(|output| output.source.as_str())
        .collect();
    let searched: usize = outputs.iter().map(|output| output.text.len()).sum();
    Ok(Row {
        scenario: "R12",
        backend: server.kind.name(),
        kind: label.into(),
        // No holders: the counts stay zero, so the short form, which
        // judges only them, runs these checks without judging them; the
        // full form judges them (`passed`).
        verdict: Some(Verdict::default()),
        passed: leaked.is_empty(),
        detail: format!(
            "{note}{leaks}; {} outputs searched ({} KiB; exits: {}); `distlock::open`: \
             {opened}; took {}s",
            outputs.len(),
            searched.div_ceil(1024),
            exits.join(", "),
            started.elapsed().as_secs()
        ),
        overlaps_allowed: None,
        // An output that is empty searched nothing: a command that did
        // not run cannot leak.
        minimum: minimum(!outputs.is_empty() && silent.is_empty(), || {
            match silent.is_empty() {
                true => format!("{} outputs, none empty", outputs.len()),
                false => format!("{} outputs, empty: {}", outputs.len(), silent.join(", ")),
            }
        }),
        applies: true,
    })
}

/// Up to 60 characters either side of the first canary in `text`, with
/// the canary masked.
fn around_canary(text: &str) -> String {
    let at = text.find(CANARY).unwrap_or(0);
    let before: Vec<char> = text[..at].chars().rev().take(60).collect();
    let around: String = before
        .into_iter()
        .rev()
        .chain(text[at..].chars().take(CANARY.len() + 60))
        .collect();
    around
        .replace(CANARY, "[CANARY]")
        .escape_debug()
        .to_string()
}

/// Runs `distlock ARGS` with trace logs, the URL by `--backend` or by
/// `DISTLOCK_URL`; returns its exit code and its stdout and stderr.
fn distlock(
    cli: &Path,
    args: &[&str],
    backend: Option<&str>,
    env_url: Option<&str>,
) -> Outcome<(String, String)> {
    let mut command = Command::new(cli);
    match backend {
        // Before `--`, for `run`.
        Some(url) => {
            let at = args
                .iter()
                .position(|arg| *arg == "--")
                .unwrap_or(args.len());
            command
                .args(&args[..at])
                .args(["--backend", url])
                .args(&args[at..]);
        }
        None => {
            command.args(args);
        }
    }
    command.env_remove("DISTLOCK_URL");
    if let Some(url) = env_url {
        command.env("DISTLOCK_URL", url);
    }
    let mut child = command
        .env("DISTLOCK_LOG", "trace")
        .env("RUST_LOG", "trace")
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|error| format!("cannot start {}: {error}", cli.display()))?;
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let mut stderr = child.stderr.take().ok_or("no stderr")?;
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let started = Instant::now();
    let code = loop {
        if let Some(status) = child.try_wait()? {
            break status
                .code()
                .map_or_else(|| status.to_string(), |code| code.to_string());
        }
        if started.elapsed() > COMMAND_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break "killed".to_owned();
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut text = out.join().unwrap_or_default();
    text.push_str(&err.join().unwrap_or_default());
    Ok((code, text))
}

/// What the library showed.
struct Library {
    outputs: Vec<Output>,
    /// How `distlock::open` ended, for the report (the canary, if any, is
    /// masked).
    opened: String,
}

/// The library's answers to `url`, with everything it logged at trace
/// level, on a runtime of one thread that the capturing subscriber covers.
fn library(kind: Kind, url: &str, name: &str) -> Outcome<Library> {
    let logs = Arc::new(Mutex::new(Vec::<u8>::new()));
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new("trace"))
        .with_ansi(false)
        .with_writer(move || Capture(writer.clone()))
        .finish();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut library = tracing::subscriber::with_default(subscriber, || {
        runtime.block_on(library_answers(kind, url, name))
    })?;
    drop(runtime);
    let logged =
        String::from_utf8_lossy(&logs.lock().unwrap_or_else(PoisonError::into_inner)).into_owned();
    library.outputs.push(Output {
        source: "the library's trace logs".into(),
        text: logged,
    });
    Ok(library)
}

/// A `Write` into a shared buffer, for the capturing subscriber.
struct Capture(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An error's `Display`, `Debug`, and every source's `Display`.
fn error_text(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = format!("{error}\n{error:?}");
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(&format!("\n{cause}\n{cause:?}"));
        source = cause.source();
    }
    text
}

async fn library_answers(kind: Kind, url: &str, name: &str) -> Outcome<Library> {
    let mut outputs = Vec::new();
    let mut push = |source: &str, text: String| {
        outputs.push(Output {
            source: source.to_owned(),
            text,
        })
    };
    push(
        "`BackendUrl::parse`",
        match BackendUrl::parse(url) {
            Ok(parsed) => format!("{parsed:?}"),
            Err(error) => error_text(&error),
        },
    );
    if let Some((source, parsed)) = kind.parse_url(url) {
        push(
            source,
            match parsed {
                Ok(debug) => debug,
                Err(error) => error_text(&error),
            },
        );
    }
    let opened = match distlock::open(url).await {
        Err(error) => {
            let text = error_text(&error);
            let mut shown = error.to_string().replace(CANARY, "[CANARY]");
            if let Some((cut, _)) = shown.char_indices().nth(200) {
                shown.truncate(cut);
                shown.push('…');
            }
            push("`distlock::open`'s error", text);
            format!("refused: {shown}")
        }
        Ok(backend) => {
            push("the backend's `Debug`", format!("{backend:?}"));
            let client = LockClient::new(backend.clone(), LockOptions::default());
            push("the client's `Debug`", format!("{client:?}"));
            let lock = LockName::new(name)?;
            let taken = client.try_acquire(&lock).await;
            push(
                "`try_acquire`",
                match &taken {
                    Ok(guard) => format!("{guard:?}"),
                    Err(error) => error_text(error),
                },
            );
            push(
                "`list`",
                match backend.list(ADMIN_LIMIT).await {
                    Ok(list) => format!("{list:?}"),
                    Err(error) => error_text(&error),
                },
            );
            if let Ok(Some(guard)) = taken {
                push(
                    "`release`",
                    match guard.release().await {
                        Ok(released) => released.to_string(),
                        Err(error) => error_text(&error),
                    },
                );
            }
            "accepted".to_owned()
        }
    };
    Ok(Library { outputs, opened })
}
