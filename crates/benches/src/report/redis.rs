//! The report's lines on Redis: how its commands are counted, and the goals
//! and findings that set distlock's Redis backend beside the raw pair
//! issued directly and beside rslock and redlock, measured on the same
//! server in the same rounds and runs.

use std::fmt::Write;

use super::{BackendResults, Contestant, find};
use crate::markdown::{goal, opt, short};
use crate::scenario::Scenario;
use crate::uncontended::Contender;
use crate::worker::Workload;

/// The raw pair in the uncontended table.
pub(super) const RAW_PAIR: &str = "**baseline**: `SET key id NX PX` + an owner-checked delete \
    script (`EVALSHA`: `GET`, and `DEL` when the value is ours), issued directly on one \
    connection";

/// rslock in the uncontended table.
pub(super) const RSLOCK: &str = "rslock 0.7.4: `lock` + `unlock` (`SET NX PX`, the delete \
    script), one multiplexed connection";

/// redlock in the uncontended table.
pub(super) const REDLOCK: &str = "redlock 2.0.0: `lock` + `unlock` (`SET NX PX`, the delete \
    script), synchronous, a new connection per command";

/// rslock as a contender.
pub(super) const RSLOCK_PER_TASK: &str =
    "rslock 0.7.4 (`acquire_no_guard`, one lock manager per process)";

/// redlock as a contender.
pub(super) const REDLOCK_PER_TASK: &str =
    "redlock 2.0.0 (`lock` until granted, a blocking thread per task)";

/// The peers' versions, for the report's head.
pub(super) const VERSIONS: &str = "rslock 0.7.4 (on redis 0.32, as the backend) and \
    redlock 2.0.0 (on redis 0.23), both pinned";

/// How Redis's commands are counted, for the report's header.
pub(super) const COUNTING: &str = "- **Redis**: deltas of the server's `INFO commandstats` \
    `calls`, read by the parent when the window opens and when it closes (and around each \
    uncontended round), summed over every command but `INFO`, which reads them. Redis counts \
    each command a script runs as well as the `EVALSHA` that runs it: distlock's acquire is \
    one `EVALSHA` whose script runs several commands (the server's `TIME`, reads of the \
    name's keys, the token counter's `GET` and `SET`, the grant's `SET`), each counted, and the owner-checked delete of the raw pair \
    and of the peers counts its `GET` and `DEL` beside its `EVALSHA`. So *server commands* \
    here are what the server executed, not round trips: the `evalsha` share of the \
    breakdown is the scripts sent. A release's `PUBLISH` to wake waiters (sent only when an \
    attempt found the grant held) is counted, and so are the subscriber connection's `SUBSCRIBE`, `UNSUBSCRIBE` and `PING`s, and the \
    `HELLO`/`CLIENT SETINFO` of a connection opened inside the window.";

/// The uncontended goal on Redis: the client against the raw pair.
pub(super) fn uncontended_goals(b: &BackendResults) -> Vec<String> {
    let u = &b.uncontended;
    let (Some(client), Some(base)) = (u.side(Contender::Client), u.side(Contender::RedisRawPair))
    else {
        return Vec::new();
    };
    vec![super::share_goal(
        "Redis",
        0.9,
        "the raw pair issued directly (`SET NX PX` and the owner-checked delete script)",
        client,
        base,
    )]
}

/// What the uncontended rows on Redis show.
pub(super) fn uncontended_findings(b: &BackendResults) -> Option<String> {
    let u = &b.uncontended;
    let client = u.side(Contender::Client)?;
    let calls = u.side(Contender::BackendCalls)?;
    let base = u.side(Contender::RedisRawPair)?;
    let mut t = format!(
        "**Redis.** A cycle of ours is two scripts, two round trips: the acquire, one \
         `EVALSHA` that reads the server's clock, stores our grant with the lease as its \
         `PX` and bumps the name's fencing token, and the release, one `EVALSHA` that \
         deletes the grant only while it is ours, and publishes on the name's channel only \
         when an attempt found it held; {} commands executed per cycle. The raw pair is two round trips too, with no token \
         and no wake-up, {} commands executed per cycle. The backend's direct calls made \
         {:.2} of the raw pair's cycles, and the client {:.2} of its backend's direct calls. ",
        opt(client.commands_per_cycle()),
        opt(base.commands_per_cycle()),
        calls.per_second() / base.per_second(),
        client.per_second() / calls.per_second(),
    );
    if let (Some(client_cpu), Some(calls_cpu), Some(base_cpu)) = (
        client.server_cpu_per_cycle(),
        calls.server_cpu_per_cycle(),
        base.server_cpu_per_cycle(),
    ) {
        let us = |d: std::time::Duration| format!("{:.1} µs", d.as_secs_f64() * 1e6);
        let _ = write!(
            t,
            "The server's processor time per cycle (`INFO cpu`, user and system, over each \
             contender's rounds) was {} for the client's cycles, {} for the backend's direct \
             calls and {} for the raw pair's, whose acquire is a plain `SET`: ours is a \
             script, since the token needs the server's clock and the name's counter, read and \
             written with the grant in one step, and Redis runs each command of a script \
             through its Lua bridge, which costs the server more than the command itself. ",
            us(client_cpu),
            us(calls_cpu),
            us(base_cpu),
        );
    }
    if let (Some(rslock), Some(redlock)) = (u.side(Contender::Rslock), u.side(Contender::Redlock)) {
        let _ = write!(
            t,
            "rslock sends the raw pair's two commands and made {:.0} cycles/s ({:.2} of the \
             raw pair); redlock sends them too, each on a connection it opens for that \
             command, and made {:.0} cycles/s. Neither has a fencing token, a lease that is \
             extended in the background, or a signal when the lock is lost.",
            rslock.per_second(),
            rslock.per_second() / base.per_second(),
            redlock.per_second(),
        );
    }
    Some(t.trim_end().to_owned())
}

/// The contention goals on Redis in `scenario`, as the issue sets them: at
/// least five times each peer's acquisitions per second across processes
/// (the lock passed between processes, as a peer always passes it), and a
/// hand-off to another process under a millisecond at the median.
pub(super) fn contention_goals(b: &BackendResults, scenario: Scenario) -> Vec<String> {
    let label = scenario.label();
    let Some(ours) = find(b, Contestant::Ours, scenario) else {
        return Vec::new();
    };
    let mut goals = Vec::new();
    for (who, name) in [
        (Contestant::Rslock, "rslock"),
        (Contestant::Redlock, "redlock"),
    ] {
        if let Some(peer) = find(b, who, scenario) {
            let (a, p) = (ours.per_second_across(), peer.per_second_across());
            let factor = a / p;
            let mut text = format!(
                "Redis, {label}: at least 5x {name}'s acquisitions per second across \
                 processes: {a:.0} against {p:.0} ({factor:.1}x; all acquisitions, {:.0} \
                 against {:.0}/s).",
                ours.per_second, peer.per_second,
            );
            if let Some(ceiling) = ceiling(scenario.workload)
                && ceiling < 5.0 * p
            {
                let _ = write!(
                    text,
                    " No lock can meet this here: one holder at a time, each holding it for its \
                     work, allows at most {ceiling:.0} acquisitions per second, {:.1}x \
                     {name}'s; ours reached {:.0} % of that ceiling across processes.",
                    ceiling / p,
                    100.0 * a / ceiling,
                );
            }
            goals.push(goal(ours.acquired_across > 0 && factor >= 5.0, text));
        }
    }
    if ours.cross_process > 0 {
        goals.push(goal(
            ours.cross_p50 < std::time::Duration::from_millis(1),
            format!(
                "Redis, {label}: hand-off to another process under 1 ms at the median: {} \
                 (p99 {}, over {} such hand-offs).",
                short(ours.cross_p50),
                short(ours.cross_p99),
                ours.cross_process,
            ),
        ));
    }
    goals
}

/// The most acquisitions per second any lock allows in `workload`, where
/// each holder works while it holds the lock: one grant per work period.
fn ceiling(workload: Workload) -> Option<f64> {
    match workload {
        Workload::Rounds { work } if !work.is_zero() => Some(1.0 / work.as_secs_f64()),
        _ => None,
    }
}
