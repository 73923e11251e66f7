//! `distlock list`: the locks held now, as a table or as JSON.
//!
//! The JSON shape is stable: an array of objects, one per holder (a shared
//! lock or a semaphore has one per reader or permit), sorted by name, each
//!
//! ```json
//! {
//!   "name": "nightly-report",
//!   "kind": "semaphore",
//!   "permits": {"in_use": 2, "limit": 4},
//!   "holder": {"host": "web-1", "pid": 4242, "label": "distlock run make"},
//!   "fencing_token": 1718000000123,
//!   "expires_in_ms": 29500,
//!   "waiters": [
//!     {"kind": "exclusive", "holder": {"host": "web-2", "pid": 977, "label": null}, "waiting_for_ms": 3100}
//!   ],
//!   "waiters_complete": true
//! }
//! ```
//!
//! `kind` is `exclusive`, `shared` or `semaphore`; `permits` is `null`
//! except for a semaphore. `holder` and `fencing_token` are `null` when the
//! backend does not know them, `label` is `null` when the holder set none,
//! and `expires_in_ms` is `null` when the lock lasts as long as its
//! holder's process (the file backend). `waiters` lists who waits for the
//! lock, in the order they will be served (the same list for every holder
//! of one name; on Redis and PostgreSQL's lease mode without fair mode,
//! which keep no line, in the order they began), where the store keeps
//! its waiters (fair mode, Redis's and PostgreSQL's marks); it is
//! `null` where the store does not, which is not the same as `[]`, nobody
//! waiting. `waiters_complete` is `true` where every wait is listed
//! (etcd), `false` where only the waits for the whole lock are kept
//! (fair modes, marks: a reader or a permit may wait unlisted), and
//! `null` with `waiters`. A waiter's `holder` and `waiting_for_ms` are `null` where the
//! store does not record them. Names are exact (JSON escapes any control
//! characters).

use distlock::{LockClient, LockInfo, LockKind, LockName, LockOptions, Permits, Waiter, Waiters};
use serde::Serialize;

use crate::cli::ListArgs;
use crate::exit::Failure;
use crate::open;
use crate::text;

/// One lock in `--json` output.
#[derive(Debug, Serialize)]
struct Listed<'a> {
    name: &'a str,
    kind: LockKind,
    permits: Option<Permits>,
    holder: Option<ListedHolder<'a>>,
    fencing_token: Option<u64>,
    expires_in_ms: Option<u64>,
    /// `None` where the store does not keep its waiters.
    waiters: Option<Vec<ListedWaiter<'a>>>,
    /// Whether `waiters` lists every wait (`false`: only the waits for
    /// the whole lock, which keep a place in line); `None` with it.
    waiters_complete: Option<bool>,
}

/// One waiter, in `--json` output.
#[derive(Debug, Serialize)]
struct ListedWaiter<'a> {
    kind: LockKind,
    holder: Option<ListedHolder<'a>>,
    waiting_for_ms: Option<u64>,
}

/// Who holds a lock, in `--json` output.
#[derive(Debug, Serialize)]
struct ListedHolder<'a> {
    host: &'a str,
    pid: u32,
    label: Option<&'a str>,
}

impl<'a> From<&'a LockInfo> for Listed<'a> {
    fn from(info: &'a LockInfo) -> Self {
        Self {
            name: info.name.as_str(),
            kind: info.kind,
            permits: info.permits,
            holder: info.holder.as_ref().map(ListedHolder::from),
            fencing_token: info.fencing_token,
            expires_in_ms: info.expires_in.map(millis),
            waiters: info.waiters.listed().map(|waiters| {
                waiters
                    .iter()
                    .map(|waiter| ListedWaiter {
                        kind: waiter.kind,
                        holder: waiter.holder.as_ref().map(ListedHolder::from),
                        waiting_for_ms: waiter.waiting_for.map(millis),
                    })
                    .collect()
            }),
            waiters_complete: match info.waiters {
                Waiters::Unknown => None,
                Waiters::Known(_) => Some(true),
                Waiters::WholeLock(_) => Some(false),
            },
        }
    }
}

impl<'a> From<&'a distlock::Holder> for ListedHolder<'a> {
    fn from(holder: &'a distlock::Holder) -> Self {
        Self {
            host: &holder.host,
            pid: holder.pid,
            label: holder.label.as_deref(),
        }
    }
}

/// A duration in whole milliseconds.
fn millis(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Runs `distlock list`; returns the exit code.
pub(crate) async fn list(args: ListArgs) -> Result<u8, Failure> {
    let url = open::url_or_default(args.backend.backend);
    let backend = open::open_backend(&url).await?;
    let partial = !backend.capabilities().lists_every_holder;
    let in_order = backend
        .abilities()
        .waiters
        .is_none_or(|waiters| waiters.serves_in_order());
    let client = LockClient::new(backend, LockOptions::default());
    let locks = client.list().await?;
    if partial {
        text::say(
            "note: this backend can only list the locks held by the process that lists them, \
             so locks held by other processes are not shown",
        );
    }
    if args.json {
        let listed: Vec<Listed<'_>> = locks.iter().map(Listed::from).collect();
        let json = serde_json::to_string_pretty(&listed)
            .map_err(|error| Failure::runtime(format!("cannot write JSON: {error}")))?;
        text::print(&format!("{json}\n"))?;
    } else if locks.is_empty() {
        text::print("no locks are held\n")?;
    } else {
        text::print(&table(&locks))?;
        let waiting = waiters_table(&locks);
        if !waiting.is_empty() {
            text::print(&format!("\n{waiting}"))?;
        }
        if locks
            .iter()
            .any(|info| matches!(info.waiters, Waiters::WholeLock(_)))
        {
            text::say(
                "note: this store keeps only the waits for the whole lock (WAITING is n+): \
                 readers and permits may wait unlisted",
            );
        }
        if !in_order && locks.iter().any(|info| info.waiters.listed().is_some()) {
            text::say(
                "note: this store keeps no line: waiters are listed in the order they began, \
                 and whichever asks first after a release is served",
            );
        }
        if locks.iter().any(|info| info.waiters == Waiters::Unknown) {
            text::say(
                "note: this backend does not keep who waits for a lock (WAITING is ?): each \
                 waiter asks on its own; fair mode keeps a queue",
            );
        }
    }
    Ok(0)
}

/// The locks as an aligned table with a header; every cell is printable.
fn table(locks: &[LockInfo]) -> String {
    let mut rows = vec![[
        "NAME".to_owned(),
        "KIND".to_owned(),
        "HOLDER".to_owned(),
        "TOKEN".to_owned(),
        "WAITING".to_owned(),
        "TIME LEFT".to_owned(),
    ]];
    for info in locks {
        rows.push([
            info.name.to_string(),
            match info.permits {
                Some(permits) => format!("{} {}/{}", info.kind, permits.in_use, permits.limit),
                None => info.kind.to_string(),
            },
            info.holder
                .as_ref()
                .map_or_else(|| "-".to_owned(), holder_cell),
            info.fencing_token
                .map_or_else(|| "-".to_owned(), |token| token.to_string()),
            match &info.waiters {
                Waiters::Unknown => "?".to_owned(),
                Waiters::Known(waiters) => waiters.len().to_string(),
                // Readers and permits may wait beside them, unlisted.
                Waiters::WholeLock(waiters) => format!("{}+", waiters.len()),
            },
            match info.expires_in {
                Some(left) => humantime::format_duration(std::time::Duration::from_millis(
                    u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
                ))
                .to_string(),
                None => "until the holder exits".to_owned(),
            },
        ]);
    }
    aligned(&rows)
}

/// Who waits for each lock, in the order they will be served, where the
/// store keeps its waiters; empty when nobody waits, or nobody can say.
fn waiters_table(locks: &[LockInfo]) -> String {
    let mut rows = vec![[
        "WAITING FOR".to_owned(),
        "PLACE".to_owned(),
        "KIND".to_owned(),
        "WAITER".to_owned(),
        "WAITED".to_owned(),
    ]];
    let mut shown: Vec<&str> = Vec::new();
    for info in locks {
        let Some(waiters) = info.waiters.listed() else {
            continue;
        };
        // Every holder of a name carries the same waiters.
        if shown.contains(&info.name.as_str()) {
            continue;
        }
        shown.push(info.name.as_str());
        for (place, waiter) in waiters.iter().enumerate() {
            rows.push(waiter_row(&info.name, place + 1, waiter));
        }
    }
    if rows.len() == 1 {
        return String::new();
    }
    aligned(&rows)
}

fn waiter_row(name: &LockName, place: usize, waiter: &Waiter) -> [String; 5] {
    [
        name.to_string(),
        place.to_string(),
        waiter.kind.to_string(),
        waiter
            .holder
            .as_ref()
            .map_or_else(|| "-".to_owned(), holder_cell),
        waiter.waiting_for.map_or_else(
            || "-".to_owned(),
            |waited| {
                humantime::format_duration(std::time::Duration::from_millis(millis(waited)))
                    .to_string()
            },
        ),
    ]
}

/// A holder, for a table: host, pid and label, printable.
fn holder_cell(holder: &distlock::Holder) -> String {
    let mut shown = format!("{} pid {}", text::printable(&holder.host), holder.pid);
    if let Some(label) = &holder.label {
        shown.push_str(&format!(" ({})", text::printable(label)));
    }
    shown
}

/// `rows` as columns aligned under the first row, the header.
fn aligned<const N: usize>(rows: &[[String; N]]) -> String {
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|column| {
            rows.iter()
                .map(|row| row[column].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (column, cell) in row.iter().enumerate() {
            if column + 1 == row.len() {
                line.push_str(cell);
            } else {
                let pad = widths[column] - cell.chars().count();
                line.push_str(cell);
                line.push_str(&" ".repeat(pad + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use distlock::LockName;
    use distlock::backend::Holder;

    use super::*;

    fn info(name: &str, expires_in: Option<Duration>) -> LockInfo {
        LockInfo {
            name: LockName::new(name).unwrap(),
            kind: LockKind::Exclusive,
            permits: None,
            holder: Some(Holder {
                host: "h".into(),
                pid: 7,
                label: None,
            }),
            fencing_token: Some(3),
            expires_in,
            waiters: distlock::Waiters::Unknown,
        }
    }

    #[test]
    fn table_escapes_names_and_shows_time_left() {
        let shown = table(&[
            info("a\nb", None),
            info("c", Some(Duration::from_millis(1500))),
        ]);
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(lines.len(), 3, "{shown}");
        assert!(lines[1].starts_with("a\\nb"), "{shown}");
        assert!(lines[1].ends_with("until the holder exits"), "{shown}");
        assert!(lines[2].ends_with("1s 500ms"), "{shown}");
        assert!(lines[0].starts_with("NAME  KIND"), "{shown}");
    }

    #[test]
    fn semaphore_holders_show_their_permits() {
        let permit = LockInfo {
            kind: LockKind::Semaphore,
            permits: Some(Permits {
                in_use: 2,
                limit: 4,
            }),
            ..info("exports", None)
        };
        let shown = table(std::slice::from_ref(&permit));
        assert!(
            shown.lines().nth(1).unwrap().contains("semaphore 2/4"),
            "{shown}"
        );
        let value = serde_json::to_value(Listed::from(&permit)).unwrap();
        assert_eq!(value["kind"], "semaphore");
        assert_eq!(
            value["permits"],
            serde_json::json!({"in_use": 2, "limit": 4})
        );
    }

    #[test]
    fn json_shape_is_stable() {
        let value =
            serde_json::to_value(Listed::from(&info("x", Some(Duration::from_secs(2))))).unwrap();
        assert_eq!(
            value,
            serde_json::json!({
                "name": "x",
                "kind": "exclusive",
                "permits": null,
                "holder": {"host": "h", "pid": 7, "label": null},
                "fencing_token": 3,
                "expires_in_ms": 2000,
                "waiters": null,
                "waiters_complete": null
            })
        );
    }

    #[test]
    fn waiters_show_in_their_own_table_in_order_and_unknown_ones_as_a_question_mark() {
        let mut held = info("queue", None);
        let waiter = |label: &str, waited: u64| distlock::Waiter {
            kind: LockKind::Exclusive,
            holder: Some(Holder {
                host: "w".into(),
                pid: 9,
                label: Some(label.into()),
            }),
            waiting_for: Some(Duration::from_millis(waited)),
        };
        held.waiters = Waiters::Known(vec![waiter("first", 3000), waiter("second", 1000)]);
        let unknown = info("polled", None);
        let locks = [held, unknown];
        let shown = table(&locks);
        let lines: Vec<&str> = shown.lines().collect();
        assert!(lines[0].ends_with("WAITING  TIME LEFT"), "{shown}");
        assert!(
            lines[1].ends_with("  2        until the holder exits"),
            "{shown}"
        );
        assert!(
            lines[2].ends_with("  ?        until the holder exits"),
            "{shown}"
        );
        let waiting = waiters_table(&locks);
        let rows: Vec<&str> = waiting.lines().collect();
        assert_eq!(rows.len(), 3, "{waiting}");
        assert!(
            rows[1].starts_with("queue")
                && rows[1].contains(" 1 ")
                && rows[1].contains("(first)")
                && rows[1].ends_with("3s"),
            "{waiting}"
        );
        assert!(
            rows[2].contains(" 2 ") && rows[2].contains("(second)"),
            "{waiting}"
        );
        let json = serde_json::to_value(Listed::from(&locks[0])).unwrap();
        assert_eq!(json["waiters"][1]["holder"]["label"], "second");
        assert_eq!(json["waiters"][0]["waiting_for_ms"], 3000);
        let json = serde_json::to_value(Listed::from(&locks[1])).unwrap();
        assert!(json["waiters"].is_null(), "unknown is null, not []");
    }
}
