//! The line `run` shows on a terminal while it waits for a lock: which
//! lock, who holds it, and for how long the holder's lease still runs.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use distlock::{LockClient, LockInfo, LockName};
use tokio::task::JoinHandle;

use crate::text;

/// How long a wait goes on before the line first shows: a lock that is
/// free, or freed at once, shows nothing.
const FIRST_AFTER: Duration = Duration::from_millis(300);
/// How often the line is brought up to date, at most.
const EVERY: Duration = Duration::from_secs(1);
/// How long one look at the holders may take before the line shows
/// without them.
const LOOK_TIMEOUT: Duration = Duration::from_millis(800);

/// The waiting line, shown from a task of its own until dropped.
pub(crate) struct WaitingLine {
    task: Option<JoinHandle<()>>,
}

impl WaitingLine {
    /// Starts showing the line for a wait on `name`, when stderr is a
    /// terminal and `quiet` is not set; otherwise shows nothing.
    pub(crate) fn start(client: &LockClient, names: &[LockName], quiet: bool) -> Self {
        let shown = !quiet && std::io::stderr().is_terminal();
        let task = shown.then(|| {
            let (client, names) = (client.clone(), names.to_vec());
            tokio::spawn(async move { keep_showing(client, names).await })
        });
        Self { task }
    }
}

impl Drop for WaitingLine {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            // Clears what the line showed, at the start of the line. The
            // task writes only whole lines, between await points, so none
            // is cut short by the abort.
            let _ = write!(std::io::stderr().lock(), "\r\x1b[2K");
        }
    }
}

async fn keep_showing(client: LockClient, names: Vec<LockName>) {
    tokio::time::sleep(FIRST_AFTER).await;
    let started = tokio::time::Instant::now() - FIRST_AFTER;
    loop {
        let listed = tokio::time::timeout(LOOK_TIMEOUT, client.list()).await;
        // Of several names, the first one someone else holds is the one
        // waited for (they are taken in this order).
        let (name, holders) = match listed {
            Ok(Ok(locks)) => names
                .iter()
                .map(|name| {
                    let held: Vec<LockInfo> = locks
                        .iter()
                        .filter(|info| &info.name == name)
                        .cloned()
                        .collect();
                    (name, Some(held))
                })
                .find(|(_, held)| held.as_ref().is_some_and(|held| !held.is_empty()))
                .unwrap_or((&names[0], None)),
            _ => (&names[0], None),
        };
        let line = describe(name, holders.as_deref(), started.elapsed());
        let _ = write!(std::io::stderr().lock(), "\r\x1b[2K{line}");
        tokio::time::sleep(EVERY).await;
    }
}

/// The line for a wait on `name` of `waited` so far, held by `holders`
/// (`None`: the backend could not say).
fn describe(name: &LockName, holders: Option<&[LockInfo]>, waited: Duration) -> String {
    let held_by = match holders {
        Some([one]) => format!("; held by {}", holder(one)),
        Some([]) | None => String::new(),
        Some(many) => format!(
            "; held by {} holders, first {}",
            many.len(),
            holder(&many[0])
        ),
    };
    text::printable(&format!(
        "distlock: waiting {} for lock {name}{held_by}",
        humantime::format_duration(Duration::from_secs(waited.as_secs()))
    ))
}

/// Who holds a lock, and how long their lease still runs.
fn holder(info: &LockInfo) -> String {
    let who = match &info.holder {
        Some(holder) => {
            let label = holder
                .label
                .as_deref()
                .map_or_else(String::new, |label| format!(" ({label})"));
            format!("pid {} on {}{label}", holder.pid, holder.host)
        }
        None => "another process".to_owned(),
    };
    match info.expires_in {
        Some(left) if left < Duration::from_secs(1) => format!("{who}, lease ends within 1s"),
        Some(left) => format!(
            "{who}, lease ends in {}",
            humantime::format_duration(Duration::from_secs(left.as_secs()))
        ),
        None => who,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock::LockKind;
    use distlock::backend::Holder;

    fn info(name: &LockName, label: Option<&str>, expires_in: Option<Duration>) -> LockInfo {
        LockInfo {
            name: name.clone(),
            kind: LockKind::Exclusive,
            permits: None,
            holder: Some(Holder {
                host: "web-1".into(),
                pid: 42,
                label: label.map(str::to_owned),
            }),
            fencing_token: Some(7),
            expires_in,
            waiters: distlock::Waiters::Unknown,
        }
    }

    #[test]
    fn the_line_names_the_lock_the_holder_and_the_lease_left() {
        let name = LockName::new("nightly").unwrap();
        let one = [info(
            &name,
            Some("distlock run backup\n"),
            Some(Duration::from_secs(12)),
        )];
        let line = describe(&name, Some(&one), Duration::from_millis(3_400));
        assert_eq!(
            line,
            "distlock: waiting 3s for lock nightly; held by pid 42 on web-1 \
             (distlock run backup\\n), lease ends in 12s"
        );
        let unknown = describe(&name, None, Duration::ZERO);
        assert_eq!(unknown, "distlock: waiting 0s for lock nightly");
    }
}
