//! `distlock leader`: who leads an election, and with `--watch` each new
//! leader as it is elected.

use distlock::{Leader, LockClient, LockOptions};
use serde::Serialize;

use crate::cli::LeaderArgs;
use crate::exit::Failure;
use crate::open;
use crate::text;

/// A leader as `--json` prints it.
#[derive(Serialize)]
struct Shown<'a> {
    value: &'a str,
    term: u64,
    host: &'a str,
    pid: u32,
    expires_in_ms: Option<u128>,
}

/// Runs `distlock leader`; returns the exit code.
pub(crate) async fn leader(args: LeaderArgs) -> Result<u8, Failure> {
    let url = open::url_or_default(args.backend.backend);
    let backend = open::open_backend(&url).await?;
    let client = LockClient::new(backend, LockOptions::default());
    let election = client.election(&args.name)?;
    if !args.watch {
        let leader = election.leader().await?;
        text::print(&format!(
            "{}\n",
            describe(&args.name, leader.as_ref(), args.json)?
        ))?;
        return Ok(0);
    }
    let mut observer = election.observe();
    loop {
        let leader = match observer.next().await {
            Ok(leader) => leader,
            // Said on stderr, and the watch goes on with the terms kept.
            Err(error @ distlock::Error::TermsForgotten { .. }) => {
                text::say(&text::printable(&error.to_string()));
                continue;
            }
            Err(error) => return Err(error.into()),
        };
        text::print(&format!(
            "{}\n",
            describe(&args.name, Some(&leader), args.json)?
        ))?;
    }
}

/// One line: the leader, or that nobody leads.
fn describe(name: &str, leader: Option<&Leader>, json: bool) -> Result<String, Failure> {
    if json {
        let shown = leader.map(|leader| Shown {
            value: &leader.value,
            term: leader.term,
            host: &leader.holder.host,
            pid: leader.holder.pid,
            expires_in_ms: leader.expires_in.map(|left| left.as_millis()),
        });
        return serde_json::to_string(&shown)
            .map_err(|error| Failure::runtime(format!("cannot write JSON: {error}")));
    }
    Ok(text::printable(&match leader {
        None => format!("nobody leads {name}"),
        Some(leader) => {
            let lease = leader.expires_in.map_or_else(String::new, |left| {
                format!(
                    ", lease ends in {}",
                    humantime::format_duration(std::time::Duration::from_secs(left.as_secs()))
                )
            });
            format!(
                "{name}: {} leads, term {} (pid {} on {}{lease})",
                leader.value, leader.term, leader.holder.pid, leader.holder.host
            )
        }
    }))
}
