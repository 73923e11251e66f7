//! The report's goals for fair mode (see `Capabilities::fair`): each fair
//! target beside the same backend's ordinary form, and beside the peer that
//! lets its server do the hand-off.

use super::{BackendResults, Contestant, Run, cross_hand_off_goal, find, ratio};
use crate::markdown::{goal, opt, short};
use crate::order;
use crate::scenario::Scenario;
use crate::timeline::Contention;
use crate::uncontended::Contender;
use crate::worker::Workload;

/// A count the run may not know.
fn count(n: Option<usize>) -> String {
    n.map_or("unknown".into(), |n| n.to_string())
}

impl Run {
    /// The fair form of `kind` (`advisory`: PostgreSQL's advisory mode), if
    /// it ran.
    pub(super) fn fair_form(&self, kind: &str, advisory: bool) -> Option<&BackendResults> {
        self.backends
            .iter()
            .find(|b| b.kind == kind && b.fair && b.advisory_mode == advisory)
    }

    /// The goals of every fair form in `scenario`, among `tasks` tasks.
    pub(super) fn fair_contention_goals(&self, scenario: Scenario, tasks: usize) -> Vec<String> {
        let label = scenario.label();
        let mut goals = Vec::new();
        for b in self.backends.iter().filter(|b| b.fair) {
            let Some(ours) = find(b, Contestant::Ours, scenario) else {
                continue;
            };
            // Judged by the order of places in line where the workers say
            // when they asked the store (ours do); the margin on calls to
            // acquire is shown beside it.
            let in_line = ours.out_of_line.map(|o| o.grants);
            let lead = match ours.out_of_line {
                Some(o) if o.grants > 0 => format!(
                    ", each asking within {} of the answer to wait of the wait it overtook",
                    short(o.lead)
                ),
                _ => String::new(),
            };
            goals.push(goal(
                in_line.or(ours.out_of_order) == Some(0) && ours.tasks_served == tasks,
                format!(
                    "{}, {label}: every task served in the order it took its place in \
                     line: {} grants overtook a wait surely ahead in line{lead} ({} by the \
                     {} margin on calls to acquire), {}/{tasks} tasks served.",
                    b.label,
                    count(in_line),
                    count(ours.out_of_order),
                    humantime::format_duration(order::MARGIN),
                    ours.tasks_served,
                ),
            ));
        }
        if let (Some(fair), Some(plain)) =
            (self.fair_form("MongoDB", false), self.backend("MongoDB"))
            && let (Some(f), Some(p)) = (
                find(fair, Contestant::Ours, scenario),
                find(plain, Contestant::Ours, scenario),
            )
        {
            let factor = ratio(f.cross_p50, p.cross_p50);
            goals.push(goal(
                factor <= 1.0,
                format!(
                    "MongoDB, fair, {label}: hand-off p50 to another process no slower than \
                     the ordinary mode's: {} against {} ({factor:.2}).",
                    short(f.cross_p50),
                    short(p.cross_p50)
                ),
            ));
            if let Some(commands) = f.commands_per_acquisition() {
                goals.push(goal(
                    commands <= 3.0,
                    format!(
                        "MongoDB, fair, {label}: at most 3 server commands per \
                         acquisition: {commands:.2}."
                    ),
                ));
            }
        }
        if let (Some(fair), Some(plain)) = (
            self.fair_form("PostgreSQL", false),
            self.backend("PostgreSQL"),
        ) && scenario == Scenario::from(Workload::ROUNDS)
            && let (Some(f), Some(p)) = (
                find(fair, Contestant::Ours, scenario),
                find(plain, Contestant::Ours, scenario),
            )
        {
            let factor = ratio(f.cross_p50, p.cross_p50);
            goals.push(goal(
                factor <= 0.5,
                format!(
                    "PostgreSQL, lease mode, fair, {label}: hand-off p50 to another process \
                     at most half of the ordinary mode's: {} against {} ({factor:.2}).",
                    short(f.cross_p50),
                    short(p.cross_p50)
                ),
            ));
        }
        let sqlx = self
            .backends
            .iter()
            .find_map(|b| find(b, Contestant::PgAdvisoryLock, scenario));
        if let (Some(fair), Some(sqlx)) = (self.fair_form("PostgreSQL", true), sqlx)
            && let Some(f) = find(fair, Contestant::Ours, scenario)
        {
            goals.push(cross_hand_off_goal(
                &format!("PostgreSQL, advisory mode, fair, {label}"),
                f,
                "sqlx's `PgAdvisoryLock`",
                sqlx,
                1.5,
            ));
        }
        let lock_rpc = self
            .backends
            .iter()
            .find_map(|b| find(b, Contestant::EtcdLockRpc, scenario));
        if let (Some(fair), Some(rpc)) = (self.fair_form("etcd", false), lock_rpc)
            && let Some(f) = find(fair, Contestant::Ours, scenario)
        {
            goals.push(cross_hand_off_goal(
                &format!("etcd, fair, {label}"),
                f,
                "the Lock RPC",
                rpc,
                1.0,
            ));
        }
        goals
    }
}

/// A duration per event, at `per_second` events a second.
fn each(per_second: f64) -> String {
    if per_second > 0.0 {
        short(std::time::Duration::from_secs_f64(1.0 / per_second))
    } else {
        "—".into()
    }
}

/// How close together the waits that were served out of line order
/// asked, over `runs`: the longest lead any overtaken wait had.
fn leads(runs: &[&Contention]) -> String {
    let overtaken: Vec<_> = runs
        .iter()
        .filter_map(|r| r.out_of_line)
        .filter(|o| o.grants > 0)
        .collect();
    match overtaken.iter().map(|o| o.lead).max() {
        Some(lead) => format!(
            "In this run, {} grants overtook a wait surely ahead, and every one of them was \
             asked for within {} of the answer that put the overtaken wait in line.",
            overtaken.iter().map(|o| o.grants).sum::<usize>(),
            short(lead)
        ),
        None => "In this run no grant overtook a wait surely ahead.".into(),
    }
}

/// The client's cycles per second, uncontended.
fn client_cycles(b: &BackendResults) -> Option<f64> {
    b.uncontended
        .side(Contender::Client)
        .map(|side| side.per_second())
}

impl Run {
    /// Why each fair form stands where it does against its goals, from
    /// this run's measurements.
    pub(super) fn fair_findings(&self) -> Vec<String> {
        let mut text = Vec::new();
        let tight = Workload::TightLoop;
        let rounds = Workload::ROUNDS;
        let uncontended = |fair: &BackendResults, plain: Option<&BackendResults>| {
            let (Some(f), Some(p)) = (client_cycles(fair), plain.and_then(client_cycles)) else {
                return String::new();
            };
            format!(
                "uncontended, the fair client made {f:.0} cycles/s against the ordinary \
                 mode's {p:.0} ({} against {} a cycle)",
                each(f),
                each(p)
            )
        };
        if let Some(fair) = self.fair_form("MongoDB", false)
            && let (Some(t), Some(r)) = (
                find(fair, Contestant::Ours, tight),
                find(fair, Contestant::Ours, rounds),
            )
        {
            let plain = self.backend("MongoDB");
            let commands = |c: &Contention| {
                c.commands
                    .as_ref()
                    .map_or("—".into(), |k| k.per(c.acquisitions.max(1) as f64))
            };
            let command_rate = t.per_second * t.commands_per_acquisition().unwrap_or(0.0);
            text.push(format!(
                "**MongoDB, fair.** A contended acquisition cost {} server commands in the \
                 tight loop ({}) and {} in rounds ({}). They are the waiter's first \
                 `findAndModify`, which takes its place in the line kept in the lock's \
                 document; its release's `findAndModify`, which passes the lock on to the \
                 next place in the same write; and the change stream's `getMore` that \
                 brings that pass-on to the waiter's process, and only to it. The event \
                 carries the grant's token and end, and the waiter holds the grant with no \
                 command of its own: the pass-on grants a quarter lease beyond the lease, \
                 and the waiter, by its own clock, checks that it acts within that grace, \
                 so that the lease it counts from then never outlasts the server's \
                 (docs/mongodb.md, *Holding a grant as passed*); a waiter that heard late \
                 takes the grant over by command, as every waiter did before. Three is \
                 the least any design needs whose waiter in another process must be told \
                 of its grant (its ask, the release, and the message that tells it). The \
                 hand-off to another process is the release and the `getMore`, where the \
                 ordinary mode's waiter also tries again after the event; but every fair \
                 command runs an aggregation pipeline over the document and its line, and \
                 all of them queue on one document: {}, and in the tight loop, with up to \
                 {} places in line, the lock changed hands {:.0} times a second, one \
                 command every {} on average.",
                opt(t.commands_per_acquisition()),
                commands(t),
                opt(r.commands_per_acquisition()),
                commands(r),
                uncontended(fair, plain),
                self.settings.tasks * self.settings.processes - 1,
                t.per_second,
                each(command_rate),
            ));
        }
        if let Some(fair) = self.fair_form("PostgreSQL", false)
            && let Some(r) = find(fair, Contestant::Ours, rounds)
        {
            let plain = self.backend("PostgreSQL");
            let plain_cross = plain
                .and_then(|p| find(p, Contestant::Ours, rounds))
                .map_or("—".into(), |p| short(p.cross_p50));
            text.push(format!(
                "**PostgreSQL, lease mode, fair.** A waiter's first statement takes a place \
                 in the `waiting` array of the name's row; the release's one statement \
                 grants the lock to the first live place and names it in its notification, \
                 which only that waiter's process acts on; the waiter's next statement takes \
                 the grant over, its lease counted from its own request. So a hand-off to \
                 another process is the release, the notification and the take-over in a \
                 row: the same three steps that an ordinary waiter makes after a release \
                 (the notification, then its try), and in rounds it took {} against the \
                 ordinary mode's {plain_cross}, at {} transactions per acquisition. What \
                 fair mode saves is the waiters that try and fail; what it adds is longer \
                 statements, prepared once per connection where no transaction pooler is in \
                 the way, and sent unnamed, so parsed and planned at every call, behind \
                 PgBouncer (docs/postgres.md gives their planning and execution times): {}. \
                 The take-over is the step a fix would remove, as MongoDB's fair mode \
                 did: a waiter that held the grant named in the notification, with no \
                 statement of its own, would need the release to grant a grace beyond the \
                 lease, and a waiter that died after being named would then hold the line \
                 up for that grace too.",
                short(r.cross_p50),
                opt(r.commands_per_acquisition()),
                uncontended(fair, plain),
            ));
        }
        let sqlx = |workload| {
            self.backends
                .iter()
                .find_map(|b| find(b, Contestant::PgAdvisoryLock, workload))
        };
        if let Some(fair) = self.fair_form("PostgreSQL", true)
            && let (Some(t), Some(r)) = (
                find(fair, Contestant::Ours, tight),
                find(fair, Contestant::Ours, rounds),
            )
        {
            let theirs = |c: Option<&Contention>| c.map_or("—".into(), |c| short(c.hand_off_p50));
            text.push(format!(
                "**PostgreSQL, advisory mode, fair.** Waiters wait in the server as sqlx's \
                 do: a waiter's own connection runs `pg_advisory_lock`, and PostgreSQL's \
                 lock manager grants it, first come first served, when the holder's \
                 `pg_advisory_unlock` runs. The statement that is granted then bumps the \
                 name's fencing token in the token table before it returns, and the \
                 waiter's process collects the grant with one more round trip, which \
                 starts the server's idle timer (the lease) from its own request; sqlx's \
                 grant is the return of its statement, with no token. Hand-off p50: {} \
                 against sqlx's {} in the tight loop, {} against {} in rounds, at {} and {} \
                 transactions per acquisition. A wait's first attempt answers only once \
                 `pg_locks`, read from another connection, shows the wait's place in the \
                 server's queue (a few more statements per wait), so a wait that \
                 answered first is served first. {}",
                short(t.hand_off_p50),
                theirs(sqlx(tight)),
                short(r.hand_off_p50),
                theirs(sqlx(rounds)),
                opt(t.commands_per_acquisition()),
                opt(r.commands_per_acquisition()),
                leads(&[t, r]),
            ));
        }
        if let Some(fair) = self.fair_form("etcd", false)
            && let Some(r) = find(fair, Contestant::Ours, rounds)
        {
            let rpc = self
                .backends
                .iter()
                .find_map(|b| find(b, Contestant::EtcdLockRpc, rounds));
            text.push(format!(
                "**etcd, fair.** A waiter puts a key of its own under the name, on the \
                 client's etcd lease, and reads the name's keys in the same transaction; the \
                 key with the lowest create revision holds. Each waiter then watches only \
                 the key before its own, so the holder's release (the delete of its key) \
                 wakes the next waiter alone, which reads the keys again to see that it is \
                 first, then holds. etcd's Lock RPC keeps the same line inside the server, \
                 and answers the blocked `Lock` call itself when the waiter is first. In \
                 rounds that was {} requests per acquisition ({}) against the Lock RPC's {}, \
                 and a hand-off p50 of {} against {}: the watch event and the read that \
                 follows it are a round trip more than the RPC's answer. The read is what \
                 keeps the line safe: the deleted key before a waiter's may be a waiter's \
                 that gave up, or one whose client's lease ran out, while a key further \
                 ahead still holds, and a watch event does not say which; only the read \
                 does. Skipping it would give the lock to two holders after such a \
                 deletion.",
                opt(r.commands_per_acquisition()),
                r.commands
                    .as_ref()
                    .map_or("—".into(), |k| k.per(r.acquisitions.max(1) as f64)),
                rpc.map_or("—".into(), |c| opt(c.commands_per_acquisition())),
                short(r.hand_off_p50),
                rpc.map_or("—".into(), |c| short(c.hand_off_p50)),
            ));
        }
        text
    }
}
