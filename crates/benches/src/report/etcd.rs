//! The report's lines on etcd: how its requests are counted, and the goals
//! and findings that set distlock beside etcd's own lock service and
//! `etcdctl lock`.

use std::fmt::Write;

use super::{BackendResults, Contestant, by_total, cross_hand_off_goal, find, share_goal};
use crate::markdown::{goal, opt, short};
use crate::order;
use crate::scenario::Scenario;
use crate::timeline::Contention;
use crate::uncontended::{Contender, Side};
use crate::worker::Workload;

/// etcd's lock service as the uncontended baseline.
pub(super) const LOCK_RPC: &str = "etcd's own lock service: `Lock` + `Unlock` RPCs through \
    etcd-client's `lock_client()`, on one lease granted up front and kept alive";

/// etcd's lock service as a contender.
pub(super) const LOCK_RPC_PER_TASK: &str =
    "etcd's lock service (`Lock` + `Unlock` RPCs, a lease per task)";

/// `etcdctl lock` in the uncontended table.
pub(super) const ETCDCTL: &str = "`etcdctl lock NAME true`: a process per cycle, so its rate \
    includes starting the process and its session";

/// How etcd's requests are counted, for the report's header.
pub(super) const COUNTING: &str = "- **etcd**: deltas of the member's own Prometheus \
    metrics, served on its client port (`GET /metrics`, read by the parent when a window \
    opens and when it closes, and around each uncontended round). *Server commands* are \
    `grpc_server_msg_received_total` by gRPC method, for etcd's key-value, watch, lease and \
    lock services: a unary call (`Txn`, `Range`, `DeleteRange`, `LeaseGrant`, `Lock`, \
    `Unlock`) is one, and a stream counts each request sent on it: each `Watch` create \
    request, each `LeaseKeepAlive`. *The server's own count* beside them is what the store \
    did, `etcd_mvcc_range_total + etcd_mvcc_put_total + etcd_mvcc_delete_total`: it shows \
    the work inside a call, such as the puts, ranges and deletes etcd's lock service makes \
    within one `Lock`, which no gRPC counter shows. The counters are the whole member's, \
    so they include the benchmark's parent too (its session's keepalives while it holds).";

/// How an etcd cluster's requests are counted, for the report's header.
pub(super) const CLUSTER_COUNTING: &str = "- **etcd, a cluster**: the requests are \
    summed over the members' metrics, each read as above: a client's request reaches one \
    member, which passes a write on to the leader over the members' own protocol, not over \
    gRPC, so each is counted once. The store's operations are not given for a cluster: every \
    member applies every write.";

/// The uncontended goal: the client against etcd's lock service.
pub(super) fn uncontended_goals(b: &BackendResults) -> Vec<String> {
    let u = &b.uncontended;
    let (Some(client), Some(rpc)) = (u.side(Contender::Client), u.side(Contender::EtcdLockRpc))
    else {
        return Vec::new();
    };
    vec![share_goal(
        "etcd",
        0.95,
        "etcd's own lock service (`Lock` + `Unlock`)",
        client,
        rpc,
    )]
}

/// Requests and store operations per cycle of one side, as prose.
fn cycle_cost(side: &Side) -> String {
    let per = side.cycles.max(1) as f64;
    format!(
        "{} requests ({}) and {:.2} store operations ({})",
        opt(side.commands_per_cycle()),
        side.commands.as_ref().map_or("—".into(), |c| c.per(per)),
        side.server_ops
            .as_ref()
            .map_or(0.0, |ops| ops.total() as f64 / per),
        side.server_ops.as_ref().map_or("—".into(), |c| c.per(per)),
    )
}

/// Where a cycle of the backend's calls spends the time it takes beyond
/// one of the lock service's: in the member's processor time, or in this
/// process's, both measured over each side's rounds. `None` where either
/// was not measured.
fn where_the_time_goes(calls: &Side, rpc: &Side) -> Option<String> {
    let us = |d: std::time::Duration| d.as_secs_f64() * 1e6;
    let cycle = |side: &Side| 1e6 / side.per_second();
    let (ours, theirs) = (cycle(calls), cycle(rpc));
    let server = (
        us(calls.server_cpu_per_cycle()?),
        us(rpc.server_cpu_per_cycle()?),
    );
    let client = (
        us(calls.client_cpu_per_cycle()?),
        us(rpc.client_cpu_per_cycle()?),
    );
    let mut text = format!(
        "A cycle of the backend's calls took {ours:.0} µs against the lock service's \
         {theirs:.0} µs. Of each, the member spent {:.0} µs against {:.0} µs of processor \
         time (`process_cpu_seconds_total`), and this process {:.0} µs against {:.0} µs \
         (its own, all threads: our backend's client against etcd-client's). ",
        server.0, server.1, client.0, client.1,
    );
    let longer = ours - theirs;
    if longer > 0.0 {
        let (more_server, more_client) = (server.0 - server.1, client.0 - client.1);
        let rest = longer - more_server - more_client;
        let _ = write!(
            text,
            "Of the {longer:.0} µs more a cycle of ours took, {more_server:.0} µs is more \
             processor time in the member and {more_client:.0} µs in this process"
        );
        // Processor time of the two processes overlaps on two cores, so
        // it can add up to more than the time the cycles took.
        let _ = if rest >= 0.0 {
            write!(
                text,
                "; the rest, {rest:.0} µs, is neither: waiting, on the two cores the \
                 processes share, on the log's sync and on each other. "
            )
        } else {
            write!(
                text,
                ": together more than the difference, as the two run at once on the two \
                 cores. "
            )
        };
    }
    Some(text)
}

/// What the uncontended rows on etcd show.
pub(super) fn uncontended_findings(b: &BackendResults) -> Option<String> {
    let u = &b.uncontended;
    let client = u.side(Contender::Client)?;
    let rpc = u.side(Contender::EtcdLockRpc)?;
    let mut t = format!(
        "**etcd.** A cycle of ours cost {} per cycle: the single try is one `Txn` that \
         writes the key only if the name is free, and the release is a `Txn` that deletes \
         the key if it is still ours; a grant held longer than 25 ms also opens a `Watch` \
         on its own key (so that a deletion by anyone else is reported as a loss within \
         moments), which a cycle this short never does. etcd's lock service cost {}: \
         its two calls hide the store operations the server makes inside them. ",
        cycle_cost(client),
        cycle_cost(rpc),
    );
    if let Some(calls) = u.side(Contender::BackendCalls) {
        let _ = write!(
            t,
            "The backend's own calls, without the lock client, made {:.2} of the lock \
             service's cycles, and the client {:.2} of its backend's. ",
            calls.per_second() / rpc.per_second(),
            client.per_second() / calls.per_second(),
        );
        if let Some(work) = where_the_time_goes(calls, rpc) {
            t.push_str(&work);
        }
    }
    if let Some(etcdctl) = u.side(Contender::Etcdctl) {
        let _ = write!(
            t,
            "`etcdctl lock` made {:.0} cycles/s ({:.3} of the lock service's), each a process \
             that connects, starts a session and takes etcd's lock recipe on the client side \
             ({}): what a shell script pays, most of it starting the process.",
            etcdctl.per_second(),
            etcdctl.per_second() / rpc.per_second(),
            cycle_cost(etcdctl),
        );
    }
    Some(t.trim_end().to_owned())
}

/// The contention goals on etcd in `scenario`, among `tasks` tasks.
pub(super) fn contention_goals(
    b: &BackendResults,
    scenario: Scenario,
    tasks: usize,
) -> Vec<String> {
    let label = scenario.label();
    let (Some(ours), Some(peer)) = (
        find(b, Contestant::Ours, scenario),
        find(b, Contestant::EtcdLockRpc, scenario),
    ) else {
        return Vec::new();
    };
    let order = |r: &Contention| {
        format!(
            "{}/{tasks} tasks served, {} of {} grants overtook a task that asked at least {} \
             earlier",
            r.tasks_served,
            r.out_of_order.map_or("—".into(), |n| n.to_string()),
            r.acquisitions,
            humantime::format_duration(order::MARGIN),
        )
    };
    vec![
        cross_hand_off_goal(
            &format!("etcd, {label}"),
            ours,
            "etcd's lock service",
            peer,
            1.0,
        ),
        goal(
            ours.tasks_served == tasks && ours.out_of_order == Some(0),
            format!(
                "etcd, {label}: every task served, in the order it asked: {} (etcd's lock \
                 service: {}).",
                order(ours),
                order(peer),
            ),
        ),
    ]
}

/// Requests and store operations per acquisition of one run, as prose.
fn acquisition_cost(r: &Contention) -> String {
    let per = r.acquisitions.max(1) as f64;
    format!(
        "{} requests per acquisition ({}), {:.2} store operations",
        opt(r.commands_per_acquisition()),
        r.commands.as_ref().map_or("—".into(), |c| c.per(per)),
        r.server_ops
            .as_ref()
            .map_or(0.0, |ops| ops.total() as f64 / per),
    )
}

/// What the contended runs on etcd show, over `workloads`.
pub(super) fn contention_findings(b: &BackendResults, workloads: &[Workload]) -> Vec<String> {
    let mut text = Vec::new();
    let mut costs = Vec::new();
    for &workload in workloads {
        if let (Some(ours), Some(peer)) = (
            find(b, Contestant::Ours, workload),
            find(b, Contestant::EtcdLockRpc, workload),
        ) {
            costs.push(format!(
                "{}: ours {}; the lock service {}",
                workload.label(),
                acquisition_cost(ours),
                acquisition_cost(peer),
            ));
        }
    }
    if costs.is_empty() {
        return text;
    }
    text.push(format!(
        "**etcd, queues and requests.** Every task of etcd's lock service calls `Lock` with a \
         lease of its own, so the server holds one key per waiting task and grants them in \
         revision order, first come, first served at the server, in one `Lock` and one \
         `Unlock` per acquisition. Ours queue the tasks of one process in the process, first \
         come, first served; only the first waits on etcd, with one key per process, and \
         when the process's holder releases, its next task writes its key behind the other \
         processes' waiters. So the lock goes round the processes in turn, and a task can \
         be served before a task of another process that asked earlier but stood further \
         back in its own process's queue: that is what the *out of asking order* column \
         counts for ours. A waiter of ours writes its key and reads the name in one `Txn`, \
         watches the key just before it (one `Watch`), reads again in a `Txn` when woken, \
         then watches its own key as a grant (another `Watch`), and releases in a `Txn`. \
         Requests and store operations per acquisition: {}.",
        costs.join("; ")
    ));
    text
}

/// The keepalives of the held-locks curve on etcd, as a goal.
pub(super) fn many_goals(b: &BackendResults) -> Vec<String> {
    let Some(m) = b.held_goal_point() else {
        return Vec::new();
    };
    let Some(c) = &m.commands else {
        return Vec::new();
    };
    let keepalives = c.0.get("LeaseKeepAlive").copied().unwrap_or(0);
    vec![goal(
        keepalives as f64 <= m.cadences().ceil() && m.lost == 0,
        format!(
            "etcd: one keepalive per cadence, whatever the number of locks: {keepalives} \
             `LeaseKeepAlive` requests in {} for {} locks, {:.2} per cadence of {} (the \
             keeper made {} session renewals), {} locks lost.",
            humantime::format_duration(m.held_for),
            m.locks,
            keepalives as f64 / m.cadences(),
            humantime::format_duration(m.extend_every),
            m.session_renewals,
            m.lost,
        ),
    )]
}

/// What the held-locks curve shows on etcd.
pub(super) fn many_findings(b: &BackendResults) -> Option<String> {
    let m = b.held_goal_point()?;
    let c = m.commands.as_ref()?;
    Some(format!(
        "**etcd.** Every lock's key hangs on the client's one etcd lease, so the keeper keeps \
         all {} of them with one session renewal per cadence, a keepalive on the member, \
         instead of extending each lock. The locks were taken in {}, each with a `Txn` and a \
         `Watch` on its own key, so the member kept {} watches open meanwhile, and this \
         process grew from {} to {} ({:.1} KiB per lock), most of it, presumably, those \
         watches' streams and tasks. While the locks were held the member received: {}.",
        m.locks,
        short(m.acquire_time),
        m.locks,
        super::mib(m.rss_before_kib),
        super::mib(m.rss_held_kib),
        m.rss_held_kib.saturating_sub(m.rss_before_kib) as f64 / m.locks.max(1) as f64,
        if c.0.is_empty() {
            "nothing".to_owned()
        } else {
            by_total(c, m.held_for)
        },
    ))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// `cycles` in a second, with the given processor times per cycle in µs.
    fn side(contender: Contender, cycles: u64, server_us: u64, client_us: u64) -> Side {
        Side {
            server_cpu: Some(Duration::from_micros(server_us * cycles)),
            client_cpu: Some(Duration::from_micros(client_us * cycles)),
            ..Side::measured(contender, cycles)
        }
    }

    #[test]
    fn the_time_a_cycle_takes_beyond_the_lock_services_is_split() {
        // 1250 µs against 1000 µs a cycle: 100 µs more in the member, 50
        // µs more here, 100 µs in neither.
        let calls = side(Contender::BackendCalls, 800, 600, 250);
        let rpc = side(Contender::EtcdLockRpc, 1000, 500, 200);
        let text = where_the_time_goes(&calls, &rpc).unwrap();
        assert!(
            text.contains("took 1250 µs against the lock service's 1000 µs"),
            "{text}"
        );
        assert!(
            text.contains("100 µs is more processor time in the member"),
            "{text}"
        );
        assert!(
            text.contains("50 µs in this process; the rest, 100 µs"),
            "{text}"
        );
    }

    #[test]
    fn processor_time_beyond_the_difference_is_not_given_as_a_negative_rest() {
        // 250 µs more a cycle, but 300 µs more processor time in all.
        let calls = side(Contender::BackendCalls, 800, 800, 300);
        let rpc = side(Contender::EtcdLockRpc, 1000, 600, 200);
        let text = where_the_time_goes(&calls, &rpc).unwrap();
        assert!(!text.contains("the rest"), "{text}");
        assert!(text.contains("together more than the difference"), "{text}");
    }
}
