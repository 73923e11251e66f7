//! The Markdown report: the machine, the versions, the exact command, one
//! table per scenario with every backend and peer side by side, and the
//! goals, each checked against this run's numbers.

mod etcd;
mod fair;
mod mongodb;
mod postgres;
mod redis;
mod scale_out;

use std::fmt::Write;
use std::time::Duration;

use crate::commands::{Counts, MEMCACHED_COMMANDS};
use crate::hold_many::HoldMany;
use crate::kinds::{self, KindRun};
use crate::markdown::{commands_line, findings_list, goal, goals_list, opt, short};
use crate::order;
use crate::peers::{ToozUncontended, ToozVersions};
use crate::quiet::Quiet;
use crate::scale_out::ScaleOut;
use crate::timeline::Contention;
use crate::uncontended::{Contender, ROUNDS, Side, Uncontended};
use crate::worker::Workload;

/// Everything measured in one run.
#[derive(Debug)]
pub(crate) struct Run {
    command: String,
    settings: Settings,
    notes: Vec<String>,
    /// Contestants this run could not measure, and why: one line each.
    pub(crate) left_out: Vec<String>,
    pub(crate) tooz_versions: Option<ToozVersions>,
    pub(crate) backends: Vec<BackendResults>,
}

/// The run's settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    pub(crate) seconds: Duration,
    pub(crate) uncontended_seconds: Duration,
    pub(crate) processes: u32,
    pub(crate) tasks: u32,
    /// The work held in the third contention workload (zero: not run).
    pub(crate) work: Duration,
    pub(crate) peer_sleep: Duration,
}

/// Who contended in one contended run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Contestant {
    Ours,
    /// distributed-lock-mongo, with its defaults or a fixed sleep.
    MongoPeer {
        sleep: Option<Duration>,
    },
    Tooz,
    /// etcd's own lock service: the `Lock` and `Unlock` RPCs.
    EtcdLockRpc,
    /// sqlx's `PgAdvisoryLock`: a session advisory lock per task.
    PgAdvisoryLock,
    /// rslock 0.7.4 (Redis).
    Rslock,
    /// redlock 2.0.0 (Redis).
    Redlock,
    /// A raw blocking `flock(2)` per task, beside the file backend.
    RawFlock,
}

/// One contended run.
#[derive(Debug)]
pub(crate) struct Contended {
    pub(crate) by: Contestant,
    pub(crate) workload: Workload,
    pub(crate) result: Contention,
}

/// One backend's results.
#[derive(Debug)]
pub(crate) struct BackendResults {
    pub(crate) kind: &'static str,
    /// What the report calls it: its kind, and its scale-out form if any.
    pub(crate) label: String,
    /// Its scale-out form; `None` for the single-server form, which the
    /// goals are stated for.
    pub(crate) scale_out: Option<ScaleOut>,
    /// Whether it is PostgreSQL's advisory mode, a target of its own
    /// beside lease mode (see [`Run::advisory_mode`]).
    pub(crate) advisory_mode: bool,
    /// Whether it is a backend in fair mode, a target of its own beside
    /// the ordinary form (see [`Run::fair_form`]).
    pub(crate) fair: bool,
    pub(crate) url: String,
    pub(crate) server_version: Option<String>,
    pub(crate) uncontended: Uncontended,
    pub(crate) tooz_uncontended: Option<ToozUncontended>,
    pub(crate) contended: Vec<Contended>,
    /// The semaphore and the reader-writer lock, measured or left out.
    pub(crate) kinds: Vec<KindRun>,
    /// The many-locks scenario; not run on a scale-out form, nor in
    /// PostgreSQL's advisory mode (see [`MANY_LEFT_OUT_ADVISORY`]).
    pub(crate) many: Option<HoldMany>,
}

pub(crate) use postgres::MANY_LEFT_OUT_ADVISORY;

const PEER: &str = "distributed-lock-mongo 0.2.0";

impl Run {
    pub(crate) fn new(command: String, settings: Settings, notes: Vec<String>) -> Self {
        Self {
            command,
            settings,
            notes,
            left_out: Vec::new(),
            tooz_versions: None,
            backends: Vec::new(),
        }
    }

    fn tooz(&self) -> String {
        self.tooz_versions
            .as_ref()
            .map_or_else(|| "tooz".to_owned(), |v| format!("tooz {}", v.tooz))
    }

    fn contestant(&self, by: Contestant) -> String {
        match by {
            Contestant::Ours => "distlock".to_owned(),
            Contestant::MongoPeer { sleep: None } => format!("{PEER}, defaults (10 ms sleep)"),
            Contestant::MongoPeer { sleep: Some(s) } => {
                format!("{PEER}, {} sleep", humantime::format_duration(s))
            }
            Contestant::Tooz => format!("{} (Python threads)", self.tooz()),
            Contestant::EtcdLockRpc => etcd::LOCK_RPC_PER_TASK.to_owned(),
            Contestant::PgAdvisoryLock => postgres::ADVISORY_PER_TASK.to_owned(),
            Contestant::Rslock => redis::RSLOCK_PER_TASK.to_owned(),
            Contestant::Redlock => redis::REDLOCK_PER_TASK.to_owned(),
            Contestant::RawFlock => {
                "raw blocking `flock(2)` (the kernel wakes the next waiter; an open file per task)"
                    .to_owned()
            }
        }
    }

    /// The single-server form of `kind`, which the goals are stated for;
    /// for PostgreSQL, lease mode (the default).
    fn backend(&self, kind: &str) -> Option<&BackendResults> {
        self.backends
            .iter()
            .find(|b| b.kind == kind && b.scale_out.is_none() && !b.advisory_mode && !b.fair)
    }

    /// PostgreSQL's advisory mode, if it ran.
    fn advisory_mode(&self) -> Option<&BackendResults> {
        self.backends.iter().find(|b| b.advisory_mode && !b.fair)
    }

    pub(crate) fn to_markdown(&self) -> String {
        let mut out = String::new();
        self.header(&mut out);
        self.uncontended(&mut out);
        self.contention(&mut out);
        self.kinds(&mut out);
        self.many(&mut out);
        scale_out::write_section(
            &mut out,
            5,
            &self.backends,
            &Workload::all(self.settings.work),
        );
        out
    }

    fn header(&self, out: &mut String) {
        let s = &self.settings;
        let _ = writeln!(out, "# Benchmarks\n");
        let _ = writeln!(
            out,
            "Written by `distlock-bench` from one run of `bash scripts/bench`, which starts \
             the servers, installs the Python peer when it is missing, builds in release \
             mode and runs every scenario against every backend and peer in turn. Every \
             number below comes from that one run, and every ratio compares numbers of \
             that run. Benchmarks measure; nothing here is asserted by a test.\n"
        );
        let _ = writeln!(out, "- Machine: {}", machine());
        let mut versions = vec![format!("distlock {}", env!("CARGO_PKG_VERSION")), rustc()];
        versions.extend(self.notes.iter().cloned());
        for b in &self.backends {
            if let Some(version) = &b.server_version {
                let line = match b.kind {
                    "MongoDB" => format!("MongoDB server: `buildInfo` reports {version}"),
                    kind => format!("{kind} {version}"),
                };
                // Both PostgreSQL modes report the one server.
                if !versions.contains(&line) {
                    versions.push(line);
                }
            }
        }
        if self.backend("MongoDB").is_some() {
            versions.push(format!("{PEER} (crates.io, pinned `=0.2.0`)"));
        }
        if self.backend("Redis").is_some() {
            versions.push(redis::VERSIONS.to_owned());
        }
        if let Some(v) = &self.tooz_versions {
            versions.push(format!(
                "tooz {} with pymemcache {} on Python {}",
                v.tooz, v.pymemcache, v.python
            ));
        }
        let _ = writeln!(out, "- Versions: {}", versions.join("; "));
        let _ = writeln!(out, "- Command: `{}`", self.command);
        for line in &self.left_out {
            let _ = writeln!(out, "- Left out: {line}");
        }
        let _ = writeln!(
            out,
            "- Backends (servers started by the script on loopback): {}",
            self.backends
                .iter()
                .map(|b| format!("{} `{}`", b.label, b.url))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let _ = writeln!(
            out,
            "- Settings: the uncontended scenario runs {} per backend, shared by its \
             contenders; each contended run lasts {}, with {} tasks in each of {} \
             processes; the many-locks scenario is described in its section.\n",
            humantime::format_duration(s.uncontended_seconds),
            humantime::format_duration(s.seconds),
            s.tasks,
            s.processes
        );
        let _ = writeln!(out, "## How server commands are counted\n");
        let _ = writeln!(
            out,
            "- **MongoDB**: the driver's command monitoring. Every `mongodb::Client` the \
             benchmarks build, in the parent and in every worker process, ours and \
             {PEER}'s, carries a `CommandEventHandler` that counts each \
             `CommandStartedEvent` by command name; each worker prints its counts for the \
             contention window as a final JSON line, and the parent adds them up. This \
             includes the change stream's `getMore`s. The driver's own server monitoring \
             (`hello` heartbeats) is not reported to command monitoring and is not \
             counted. As a cross-check, the contention table also gives the server's own \
             count: the delta of SecantusDB's `serverStatus` opcounters (`insert + query + \
             update + delete + getmore + command`, less the `serverStatus` that read it) \
             over the same window. The server's count also includes the `hello` handshake \
             of every new connection (a worker's pool opens one per task that needs it), \
             which command monitoring does not report, so it can be a little higher."
        );
        let _ = writeln!(
            out,
            "- **memcached**: deltas of the server's `stats` (read by the parent when the \
             window opens and when it closes), summed over {}. A CAS store counts in \
             `cmd_set` and again in `cas_*`, so `cas_*` is left out. memcached 1.6 does \
             not count an `ma` that creates a missing counter (once per lock name) nor \
             `mn`/`stats`. For memcached over several servers (quorum mode), the \
             counters are summed over all of them.\n",
            MEMCACHED_COMMANDS
                .iter()
                .map(|name| format!("`{name}`"))
                .collect::<Vec<_>>()
                .join(" + ")
        );
        if self.backend("etcd").is_some() {
            let _ = writeln!(out, "{}\n", etcd::COUNTING);
        }
        if self
            .backends
            .iter()
            .any(|b| matches!(b.scale_out, Some(ScaleOut::EtcdCluster { .. })))
        {
            let _ = writeln!(out, "{}\n", etcd::CLUSTER_COUNTING);
        }
        if self.backend("PostgreSQL").is_some() || self.advisory_mode().is_some() {
            let _ = writeln!(out, "{}\n", postgres::COUNTING);
        }
        if self.backend("Redis").is_some() {
            let _ = writeln!(out, "{}\n", redis::COUNTING);
        }
    }

    /// How long each backend's uncontended scenario waited for quiet.
    fn quiet_waits(&self) -> String {
        let waits: Vec<String> = self
            .backends
            .iter()
            .filter_map(|b| {
                let quiet = b.uncontended.quiet?;
                let waited = Duration::from_millis(quiet.waited.as_millis() as u64);
                Some(match quiet.busy {
                    Some(busy) => format!(
                        "{} waited {} (then {:.0} % busy)",
                        b.label,
                        humantime::format_duration(waited),
                        busy * 100.0
                    ),
                    None => format!("{} could not tell", b.label),
                })
            })
            .collect();
        if waits.is_empty() {
            String::new()
        } else {
            format!(": {}", waits.join(", "))
        }
    }

    fn uncontended(&self, out: &mut String) {
        let _ = writeln!(out, "## 1. Uncontended acquire and release on one name\n");
        let _ = writeln!(
            out,
            "One task takes and releases one name as fast as it can. The contenders of a \
             backend take turns in {ROUNDS} alternating rounds, each begun by the next contender \
             in turn, so that noise from the machine hits them alike; tooz, a separate Python process, runs once afterwards, for as \
             long as one of our contenders had in all its rounds. The ratio is against the \
             backend's baseline, marked in bold: the same server commands issued directly, \
             without the lock client (on etcd, etcd's own lock service). Before a backend's rounds start, the benchmark waits \
             until the processors are at most {:.0} % busy over half a second (at most 30 s), \
             so that a server still busy with an earlier scenario does not fall into some \
             rounds and not others{}.\n",
            Quiet::THRESHOLD * 100.0,
            self.quiet_waits(),
        );
        let _ = writeln!(
            out,
            "| backend | contender | cycles/s | ratio to baseline | server commands per cycle | which |"
        );
        let _ = writeln!(out, "|---|---|---:|---:|---:|---|");
        for b in &self.backends {
            let u = &b.uncontended;
            let baseline = u.baseline().map(Side::per_second);
            for side in &u.sides {
                let label = match side.contender {
                    Contender::Client => "distlock `LockClient`".to_owned(),
                    Contender::BackendCalls
                        if u.baseline().map(|b| b.contender) != Some(Contender::BackendCalls) =>
                    {
                        "the backend's `try_acquire` + `release`, called directly".to_owned()
                    }
                    Contender::BackendCalls => {
                        "**baseline**: the backend's `try_acquire` + `release`, called directly"
                            .to_owned()
                    }
                    Contender::RawRecipe => {
                        "**baseline**: bare add + CAS delete (`MemcachedBackend::raw`)".to_owned()
                    }
                    Contender::MongoPeer => PEER.to_owned(),
                    Contender::WriteOne => {
                        "measured only: the backend's calls with write concern `w: 1`".to_owned()
                    }
                    Contender::DeletingRelease => {
                        "measured only: the backend's acquire, released by deleting the document"
                            .to_owned()
                    }
                    Contender::Unindexed => {
                        "measured only: the backend's calls on a collection without the TTL index"
                            .to_owned()
                    }
                    Contender::UnindexedDeleting => {
                        "measured only: without the TTL index, and released by deleting the \
                         document"
                            .to_owned()
                    }
                    Contender::PeerCommands => {
                        "measured only: distributed-lock-mongo's two commands, sent directly on a \
                         collection without indexes"
                            .to_owned()
                    }
                    Contender::PeerCommandsWithToken => {
                        "measured only: the same, with a fencing token built by the server as \
                         ours is"
                            .to_owned()
                    }
                    Contender::EtcdLockRpc => format!("**baseline**: {}", etcd::LOCK_RPC),
                    Contender::Etcdctl => etcd::ETCDCTL.to_owned(),
                    Contender::PgAdvisoryLock => postgres::ADVISORY.to_owned(),
                    Contender::RedisRawPair => redis::RAW_PAIR.to_owned(),
                    Contender::Rslock => redis::RSLOCK.to_owned(),
                    Contender::Redlock => redis::REDLOCK.to_owned(),
                };
                let _ = writeln!(
                    out,
                    "| {} | {} | {:.0} | {} | {} | {} |",
                    b.label,
                    label,
                    side.per_second(),
                    baseline.map_or("—".into(), |base| format!(
                        "{:.2}",
                        side.per_second() / base
                    )),
                    opt(side.commands_per_cycle()),
                    which(side),
                );
            }
            if let Some(t) = &b.tooz_uncontended {
                let _ = writeln!(
                    out,
                    "| {} | {} (Python, not interleaved) | {:.0} | {} | {} | {} |",
                    b.label,
                    self.tooz(),
                    t.per_second,
                    baseline.map_or("—".into(), |base| format!("{:.2}", t.per_second / base)),
                    opt(t.commands_per_cycle()),
                    t.commands
                        .as_ref()
                        .map_or("—".into(), |c| c.per(t.cycles as f64)),
                );
            }
        }
        let _ = writeln!(out);
        let mut goals = Vec::new();
        if let Some(b) = self.backend("MongoDB") {
            let u = &b.uncontended;
            if let (Some(client), Some(base)) = (u.side(Contender::Client), u.baseline()) {
                let ratio = client.per_second() / base.per_second();
                goals.push(goal(
                    ratio >= 0.9,
                    format!(
                        "MongoDB: the client reaches at least 0.9 of the same two commands \
                         issued directly: {ratio:.2} ({:.0} against {:.0} cycles/s){}.",
                        client.per_second(),
                        base.per_second(),
                        spread(client, base),
                    ),
                ));
                if let Some(per) = client.commands_per_cycle() {
                    goals.push(goal(
                        per <= 2.0 + 1e-9,
                        format!(
                            "MongoDB: 2 server commands per cycle: {per:.2} ({}); the \
                             baseline sends {}.",
                            client
                                .commands
                                .as_ref()
                                .map_or("—".into(), |c| c.per(client.cycles as f64)),
                            opt(base.commands_per_cycle()),
                        ),
                    ));
                }
            }
        }
        if let Some(b) = self.backend("memcached") {
            let u = &b.uncontended;
            if let (Some(client), Some(base)) = (u.side(Contender::Client), u.baseline()) {
                let ratio = client.per_second() / base.per_second();
                goals.push(goal(
                    ratio >= 0.9,
                    format!(
                        "memcached: the client reaches at least 0.9 of the bare add + \
                         conditional delete: {ratio:.2} ({:.0} against {:.0} cycles/s){}.",
                        client.per_second(),
                        base.per_second(),
                        spread(client, base),
                    ),
                ));
            }
        }
        if let Some(b) = self.backend("etcd") {
            goals.extend(etcd::uncontended_goals(b));
        }
        if let Some(b) = self.backend("PostgreSQL") {
            goals.extend(postgres::uncontended_goals(b));
        }
        if let Some(b) = self.advisory_mode() {
            goals.extend(postgres::uncontended_goals(b));
        }
        if let Some(b) = self.backend("Redis") {
            goals.extend(redis::uncontended_goals(b));
        }
        goals_list(out, &goals);
        self.uncontended_findings(out);
    }

    fn contention(&self, out: &mut String) {
        let s = &self.settings;
        let workloads = Workload::all(s.work);
        let work = humantime::format_duration(s.work);
        let _ = writeln!(
            out,
            "## 2. Contention: {} tasks in each of {} processes on one name\n",
            s.tasks, s.processes
        );
        let _ = writeln!(
            out,
            "Each task takes the lock with the contender's own waiting strategy and \
             releases it at once{}. Each Rust process shares one client (ours) or one \
             `mongodb::Client` and lock value (the peer's) among its tasks; each Python \
             process shares one tooz coordinator among its threads. All processes share \
             the machine's wall clock, so the holds of every process can be laid end to \
             end. **Hand-off** is the time from one release to the next grant, whoever \
             gets it; *to another process* counts only the hand-offs where the next \
             holder is in another process than the last one, with their share of all \
             hand-offs. *Tasks served* is how many of the {} tasks held the lock at \
             least once. *Out of asking order* counts the grants that went to a task while \
             another, which had called acquire at least {} earlier (by the shared wall \
             clock) in the same round, still waited; a lock that serves first come, first \
             served has none. Tasks that ask closer together than that can reach the server \
             in either order, so they are not ordered; as every task of a round asks at its \
             start, within about that margin, only the tight loop really tests the order \
             (— where a worker does not say when it asked; only grants in the window are \
             seen). *Out of line order* needs no margin: our workers also note when each \
             wait's first attempt was sent to the store and when the first answer telling \
             it to wait came back, and a grant counts there when it went to a task while \
             another still waited whose answer to wait had come back before this task's \
             first attempt was sent. A store that keeps a line puts a waiter in it between \
             those two moments, so that other waiter was surely ahead; this is the order \
             fair mode promises (— for the peers, which do not say; in PostgreSQL's \
             advisory mode, whose waiter takes its place with a statement sent just after \
             that answer, the bound is only close). {} workloads, each for \
             {}:\n",
            if s.work.is_zero() {
                String::new()
            } else {
                format!(" (in the third workload, after {work} of work)")
            },
            s.tasks * s.processes,
            humantime::format_duration(order::MARGIN),
            if workloads.len() == 3 { "Three" } else { "Two" },
            humantime::format_duration(s.seconds)
        );
        let _ = writeln!(
            out,
            "- **Tight loop**: every task asks again as soon as it has released. This is \
             the most acquisitions a contender can make, but a lock that is not fair lets \
             the task (or process) that just released take it again before any waiter \
             notices, so its hand-off is then that task's own round trip, and the others \
             starve (see *tasks served* and the share to another process).\n\
             - **Rounds**: the parent starts a round by telling every process at once; \
             every task then takes the lock exactly once, and the round ends when all \
             have (or the window closes). Nobody asks twice in a round, so every \
             hand-off within a round goes to a task that has been waiting since the \
             round began: this is the hand-off a waiter sees, like instances of a \
             service that all start the same job at the same moment. Hand-offs are \
             only taken within a round."
        );
        if !s.work.is_zero() {
            let _ = writeln!(
                out,
                "- **Rounds with work**: the rounds workload, but each task holds the lock \
                 for {work} (a sleep, standing for the work a lock protects) before it \
                 releases it. While the lock is held, a waiter that polls on a clock keeps \
                 polling and one that waits for the release does not, so this shows what \
                 waiting costs when the holder is busy. Hand-off is still the time from the \
                 release call to the next grant; it does not include the work."
            );
        }
        let _ = writeln!(out);
        let mut goals = Vec::new();
        for (letter, workload) in ['a', 'b', 'c'].into_iter().zip(workloads) {
            self.contention_table(out, letter, workload);
            goals.extend(self.contention_goals(workload));
        }
        goals_list(out, &goals);
        self.contention_findings(out);
    }

    fn contention_table(&self, out: &mut String, letter: char, workload: Workload) {
        let s = &self.settings;
        let title = match workload {
            Workload::TightLoop => "Tight loop".to_owned(),
            Workload::ROUNDS => "Rounds: every task once per round".to_owned(),
            Workload::Rounds { work } => {
                format!("Rounds with {} of work", humantime::format_duration(work))
            }
        };
        let _ = writeln!(out, "### 2{letter}. {title}\n");
        let _ = writeln!(
            out,
            "| backend | contender | acquisitions | per second | hand-offs | hand-off p50 | hand-off p99 | hand-off mean | to another process: share, p50, p99 | tasks served | out of asking order | out of line order | server commands per acquisition | overlaps | errors |"
        );
        let _ = writeln!(
            out,
            "|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"
        );
        let tasks = s.tasks * s.processes;
        for b in &self.backends {
            for c in b.contended.iter().filter(|c| c.workload == workload) {
                let r = &c.result;
                let share = if r.hand_offs > 0 {
                    r.cross_process as f64 / r.hand_offs as f64
                } else {
                    0.0
                };
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {:.0} | {} | {} | {} | {} | {:.1} %, {}, {} | {}/{} | {} | {} | {} | {} | {} |",
                    b.label,
                    self.contestant(c.by),
                    r.acquisitions,
                    r.per_second,
                    r.hand_offs,
                    short(r.hand_off_p50),
                    short(r.hand_off_p99),
                    short(r.hand_off_mean),
                    share * 100.0,
                    short(r.cross_p50),
                    short(r.cross_p99),
                    r.tasks_served,
                    tasks,
                    r.out_of_order.map_or("—".into(), |n| n.to_string()),
                    r.out_of_line.map_or("—".into(), |o| o.grants.to_string()),
                    opt(r.commands_per_acquisition()),
                    r.overlaps,
                    r.errors
                );
            }
        }
        let _ = writeln!(out, "\nServer commands per acquisition, by command:\n");
        for b in &self.backends {
            for c in b.contended.iter().filter(|c| c.workload == workload) {
                let r = &c.result;
                let Some(commands) = &r.commands else {
                    continue;
                };
                let line = commands_line(
                    &format!("{}, {}", b.label, self.contestant(c.by)),
                    commands,
                    r.server_ops.as_ref(),
                    r.acquisitions.max(1) as f64,
                );
                let _ = writeln!(out, "{line}");
            }
        }
        let _ = writeln!(out);
    }

    fn contention_goals(&self, workload: Workload) -> Vec<String> {
        let by = |b, who| find(b, who, workload);
        let s = &self.settings;
        let scenario = workload.label();
        let mut goals = Vec::new();
        if let Some(b) = self.backend("MongoDB") {
            let ours = by(b, Contestant::Ours);
            let defaults = by(b, Contestant::MongoPeer { sleep: None });
            let slow = by(
                b,
                Contestant::MongoPeer {
                    sleep: Some(s.peer_sleep),
                },
            );
            if let (Some(ours), Some(peer)) = (ours, defaults) {
                goals.push(goal(
                    ours.hand_off_p50 <= peer.hand_off_p50,
                    format!(
                        "MongoDB, {scenario}: hand-off p50 no worse than {PEER}'s defaults: \
                         {} against {}.",
                        short(ours.hand_off_p50),
                        short(peer.hand_off_p50)
                    ),
                ));
                if let (Some(a), Some(p)) = (
                    ours.commands_per_acquisition(),
                    peer.commands_per_acquisition(),
                ) {
                    goals.push(goal(
                        a <= p / 3.0 && a <= 3.0,
                        format!(
                            "MongoDB, {scenario}: at most a third of its server commands per \
                             acquisition, and at most 3: {a:.2} against {p:.2} (ratio {:.2}).",
                            a / p
                        ),
                    ));
                }
            }
            if let (Some(ours), Some(peer)) = (ours, slow) {
                let p50 = ratio(peer.hand_off_p50, ours.hand_off_p50);
                let mean = ratio(peer.hand_off_mean, ours.hand_off_mean);
                goals.push(goal(
                    p50 >= 50.0,
                    format!(
                        "MongoDB, {scenario}: hand-off p50 at least 50x faster than {PEER} with \
                         a {} sleep: {} against {} ({p50:.1}x).",
                        humantime::format_duration(s.peer_sleep),
                        short(ours.hand_off_p50),
                        short(peer.hand_off_p50),
                    ),
                ));
                goals.push(goal(
                    mean >= 50.0,
                    format!(
                        "MongoDB, {scenario}: mean hand-off at least 50x faster than {PEER} \
                         with a {} sleep: {} against {} ({mean:.1}x).",
                        humantime::format_duration(s.peer_sleep),
                        short(ours.hand_off_mean),
                        short(peer.hand_off_mean),
                    ),
                ));
            }
        }
        if let Some(b) = self.backend("memcached")
            && let (Some(ours), Some(tooz)) = (by(b, Contestant::Ours), by(b, Contestant::Tooz))
        {
            let factor = ours.per_second / tooz.per_second;
            goals.push(goal(
                factor >= 5.0,
                format!(
                    "memcached, {scenario}: at least 5x {}'s contended throughput: {:.0} \
                     against {:.0} acquisitions/s ({factor:.1}x).",
                    self.tooz(),
                    ours.per_second,
                    tooz.per_second
                ),
            ));
        }
        if let Some(b) = self.backend("etcd") {
            let tasks = (s.tasks * s.processes) as usize;
            goals.extend(etcd::contention_goals(b, workload, tasks));
        }
        if let Some(b) = self.backend("PostgreSQL") {
            goals.extend(postgres::contention_goals(b, workload));
        }
        if let Some(b) = self.advisory_mode() {
            goals.extend(postgres::advisory_contention_goals(b, workload));
        }
        if let Some(b) = self.backend("Redis") {
            goals.extend(redis::contention_goals(b, workload));
        }
        goals.extend(self.fair_contention_goals(workload, (s.tasks * s.processes) as usize));
        if let Some(b) = self.backend("file")
            && let (Some(ours), Some(raw)) = (by(b, Contestant::Ours), by(b, Contestant::RawFlock))
        {
            let factor = ratio(ours.hand_off_p50, raw.hand_off_p50);
            goals.push(goal(
                factor <= 2.0,
                format!(
                    "file, {scenario}: hand-off p50 within 2x a raw blocking flock's: {} \
                     against {} ({factor:.2}x).",
                    short(ours.hand_off_p50),
                    short(raw.hand_off_p50),
                ),
            ));
        }
        goals
    }

    fn kinds(&self, out: &mut String) {
        let s = &self.settings;
        let backends: Vec<(&str, &[KindRun])> = self
            .backends
            .iter()
            .filter(|b| !b.kinds.is_empty())
            .map(|b| (b.label.as_str(), b.kinds.as_slice()))
            .collect();
        if backends.is_empty() {
            return;
        }
        kinds::write_section(
            out,
            3,
            kinds::Plan {
                processes: s.processes,
                tasks: s.tasks,
                seconds: s.seconds,
                work: s.work,
            },
            &backends,
        );
    }

    fn many(&self, out: &mut String) {
        let Some(m) = self.backends.iter().find_map(|b| b.many.as_ref()) else {
            return;
        };
        let _ = writeln!(out, "## 4. Many locks held by one process\n");
        let _ = writeln!(
            out,
            "One client takes {} locks (64 attempts in flight), holds them for {} with a \
             {} lease (extended every {}, so {:.0} extension rounds), then releases them. \
             *Extension calls* are the calls the lock client's keeper makes to the backend \
             (`extend` or `extend_many`, or on etcd `renew_session`, one renewal of the \
             client's session that keeps all its leases, so no lease is extended on its \
             own); *server commands* are what the server received \
             while the locks were held, counted as above. CPU is this process's user + \
             system time while holding; RSS is this process's resident memory before \
             taking the locks and while holding them.\n",
            m.locks,
            humantime::format_duration(m.held_for),
            humantime::format_duration(m.lease),
            humantime::format_duration(m.extend_every),
            m.cadences()
        );
        let _ = writeln!(
            out,
            "| backend | locks | taken in | extension calls/s | leases extended/s | server commands/s while held | server commands per lock per cadence | lost | CPU while held | RSS before → holding |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for b in &self.backends {
            let Some(m) = &b.many else {
                continue;
            };
            let commands = m.commands.as_ref();
            let _ = writeln!(
                out,
                "| {} | {} | {} | {:.2} | {} | {} | {} | {} | {} ({:.2} % of one core) | {} → {} |",
                b.label,
                m.locks,
                short(m.acquire_time),
                m.per_second(m.extend_calls + m.session_renewals),
                if m.session_renewals > 0 && m.extended_leases == 0 {
                    "— (one session)".to_owned()
                } else {
                    format!("{:.0}", m.per_second(m.extended_leases))
                },
                commands.map_or("—".into(), |c| format!("{:.2}", m.per_second(c.total()))),
                commands.map_or("—".into(), |c| format!(
                    "{:.5}",
                    c.total() as f64 / m.locks as f64 / m.cadences()
                )),
                m.lost,
                short(m.cpu),
                m.cpu.as_secs_f64() / m.held_for.as_secs_f64() * 100.0,
                mib(m.rss_before_kib),
                mib(m.rss_held_kib),
            );
        }
        if let Some(b) = self.advisory_mode()
            && b.many.is_none()
        {
            let _ = writeln!(out, "\n{}: left out, {}.", b.label, MANY_LEFT_OUT_ADVISORY);
        }
        let _ = writeln!(out);
        let by_command: Vec<String> = self
            .backends
            .iter()
            .filter_map(|b| {
                let m = b.many.as_ref()?;
                let c = m.commands.as_ref()?;
                Some(format!("- {}: {}", b.label, by_total(c, m.held_for)))
            })
            .collect();
        if !by_command.is_empty() {
            let _ = writeln!(out, "Server commands while held, by command:\n");
            for line in &by_command {
                let _ = writeln!(out, "{line}");
            }
            let _ = writeln!(out);
        }
        let mut goals = Vec::new();
        if let Some(m) = self.backend("MongoDB").and_then(|b| b.many.as_ref())
            && let Some(c) = &m.commands
        {
            let per_lock = c.total() as f64 / m.locks as f64 / m.cadences();
            goals.push(goal(
                per_lock < 0.01 && m.lost == 0,
                format!(
                    "MongoDB: batched extension, far below one command per lock per cadence: \
                     {per_lock:.5} commands per lock per cadence ({} commands in {} for {} \
                     locks), {} locks lost.",
                    c.total(),
                    humantime::format_duration(m.held_for),
                    m.locks,
                    m.lost
                ),
            ));
        }
        if let Some(b) = self.backend("etcd") {
            goals.extend(etcd::many_goals(b));
        }
        goals_list(out, &goals);
        self.many_findings(out);
    }

    fn uncontended_findings(&self, out: &mut String) {
        let mut text = Vec::new();
        if let Some(b) = self.backend("MongoDB") {
            text.extend(mongodb::uncontended_findings(b));
        }
        if let Some(b) = self.backend("memcached") {
            let u = &b.uncontended;
            if let (Some(client), Some(calls), Some(base)) = (
                u.side(Contender::Client),
                u.side(Contender::BackendCalls),
                u.baseline(),
            ) {
                let ratio = client.per_second() / base.per_second();
                let mut t = format!(
                    "**memcached.** A cycle of ours is {} commands in two round trips \
                     (acquire: the add, which returns the item's CAS, and the fencing-token \
                     counter's increment, pipelined in one write; release: the delete \
                     conditional on the CAS the add returned, sent only over a connection to \
                     the memcached process that issued it, since a restarted memcached numbers \
                     CAS values from 1 again), against the bare recipe's {} in two. The lock \
                     client makes {:.2} of its own backend's direct calls, and {ratio:.2} of the \
                     recipe. ",
                    opt(client.commands_per_cycle()),
                    opt(base.commands_per_cycle()),
                    client.per_second() / calls.per_second(),
                );
                if ratio < 0.9 {
                    t.push_str(
                        "The difference is the third command, the token counter's increment, \
                         which a fencing token needs and the bare recipe does not send, and \
                         the client's own work. ",
                    );
                } else {
                    t.push_str(
                        "In this run the third command, the token counter's increment that a \
                         fencing token needs, cost less than the goal's margin. ",
                    );
                }
                if let Some(t_u) = &b.tooz_uncontended {
                    let _ = write!(
                        t,
                        "tooz's cycle is {} commands in three round trips (add; get, compare \
                         and delete, which is not atomic: it can delete the next holder's lock) \
                         and made {:.0} cycles/s, run on its own after our rounds.",
                        opt(t_u.commands_per_cycle()),
                        t_u.per_second
                    );
                }
                text.push(t);
            }
        }
        if let Some(b) = self.backend("etcd") {
            text.extend(etcd::uncontended_findings(b));
        }
        text.extend(postgres::uncontended_findings(
            self.backend("PostgreSQL"),
            self.advisory_mode(),
        ));
        if let Some(b) = self.backend("Redis") {
            text.extend(redis::uncontended_findings(b));
        }
        findings_list(out, &text);
    }

    fn contention_findings(&self, out: &mut String) {
        let s = &self.settings;
        let mut text = Vec::new();
        // The rounds workload is the one without work.
        let by = |b, who, workload| find(b, who, workload).cloned();
        let share = |r: &Contention| {
            if r.hand_offs == 0 {
                0.0
            } else {
                r.cross_process as f64 / r.hand_offs as f64 * 100.0
            }
        };
        if let Some(b) = self.backend("MongoDB") {
            let slow = Contestant::MongoPeer {
                sleep: Some(s.peer_sleep),
            };
            let defaults = Contestant::MongoPeer { sleep: None };
            if let (Some(ours), Some(peer), Some(slow_tight)) = (
                by(b, Contestant::Ours, Workload::TightLoop),
                by(b, defaults, Workload::TightLoop),
                by(b, slow, Workload::TightLoop),
            ) {
                let mut t = format!(
                    "**MongoDB, tight loop.** The peer tries once before it first sleeps, so \
                     the task that has just released usually takes the lock back before any \
                     sleeper wakes: with its {} sleep, {:.0} % of hand-offs went to another \
                     process and its median hand-off ({}) is one task's own round trip rather \
                     than a hand-off to a waiter. Ours handed {:.0} % of grants to another \
                     process, each through the change stream (the release's event must reach \
                     the other process's `getMore` before its `findAndModify` can go out); \
                     the rest went to the next task of the same process, by hand-over: one \
                     `findAndModify` that ends one grant and makes the next, in runs that end \
                     once they made {} hand-overs and lasted {}, after which the process \
                     releases and lets other processes try first. ",
                    humantime::format_duration(s.peer_sleep),
                    share(&slow_tight),
                    short(slow_tight.hand_off_p50),
                    share(&ours),
                    distlock::LockOptions::DEFAULT_LOCAL_HAND_OVERS,
                    humantime::format_duration(distlock::LockOptions::DEFAULT_MIN_LOCAL_RUN),
                );
                if ours.hand_off_p50 > peer.hand_off_p50 {
                    let _ = write!(
                        t,
                        "The peer defaults hand {:.0} % to another process, when a sleeper's \
                         retry happens to arrive right after the release; their median \
                         hand-off to another process is {} against our {}, and overall their \
                         median is {} against our {}.",
                        share(&peer),
                        short(peer.cross_p50),
                        short(ours.cross_p50),
                        short(peer.hand_off_p50),
                        short(ours.hand_off_p50),
                    );
                } else {
                    let _ = write!(
                        t,
                        "Our median is {} against the peer defaults' {}.",
                        short(ours.hand_off_p50),
                        short(peer.hand_off_p50)
                    );
                }
                text.push(t);
            }
            if let (Some(ours), Some(peer), Some(slow_rounds)) = (
                by(b, Contestant::Ours, Workload::ROUNDS),
                by(b, defaults, Workload::ROUNDS),
                by(b, slow, Workload::ROUNDS),
            ) {
                let p50_ok = ratio(slow_rounds.hand_off_p50, ours.hand_off_p50) >= 50.0;
                let mean_ok = ratio(slow_rounds.hand_off_mean, ours.hand_off_mean) >= 50.0;
                let verdict = match (p50_ok, mean_ok) {
                    (true, true) => "The 50x goal holds for both the median and the mean.",
                    (false, true) => {
                        "The 50x goal therefore holds for the mean and not for the median."
                    }
                    (true, false) => "The 50x goal holds for the median but not for the mean.",
                    (false, false) => "The 50x goal holds for neither the median nor the mean.",
                };
                text.push(format!(
                    "**MongoDB, rounds.** Every hand-off goes to a task that has been waiting. \
                     Ours: median {}, mean {}, {:.0} acquisitions/s. The peer with its defaults: \
                     median {}, mean {}, {:.0}/s. With a {} sleep the peer's hand-offs have two \
                     modes: a waiter whose retry happens to be queued at the server right behind \
                     the release (the tasks of a round start together, so their sleeps run \
                     nearly in step) gets it within a round trip, and the others wait out a \
                     whole sleep. Its median is {}, its p99 {}, its mean {}, and it made \
                     {:.0} acquisitions/s. {verdict}",
                    short(ours.hand_off_p50),
                    short(ours.hand_off_mean),
                    ours.per_second,
                    short(peer.hand_off_p50),
                    short(peer.hand_off_mean),
                    peer.per_second,
                    humantime::format_duration(s.peer_sleep),
                    short(slow_rounds.hand_off_p50),
                    short(slow_rounds.hand_off_p99),
                    short(slow_rounds.hand_off_mean),
                    slow_rounds.per_second,
                ));
            }
            if let (Some(ours), Some(peer_rounds)) = (
                by(b, Contestant::Ours, Workload::ROUNDS),
                by(b, defaults, Workload::ROUNDS),
            ) && let Some(commands) = &ours.commands
            {
                let per = ours.acquisitions.max(1) as f64;
                let count = |name: &str| commands.0.get(name).copied().unwrap_or(0) as f64 / per;
                text.push(format!(
                    "**MongoDB, server commands.** Ours need {} per acquisition in rounds: \
                     {:.2} `findAndModify` (grants, hand-overs, and tries that lose), {:.2} \
                     `update` (releases: a hand-over is itself the release, so there is one \
                     per run of hand-overs) and {:.2} `getMore`. A release is delivered to the \
                     change stream of every process that has a waiter (one `getMore` reply per \
                     process, fewer when events arrive together), and each woken process tries \
                     once; only one can win. A hand-over wakes nobody. The peer's count has \
                     another cause: its waiters try every 10 ms whatever happens, so its \
                     commands per acquisition are its tries per second over its acquisitions \
                     per second ({:.0} commands/s for {:.0} acquisitions/s here); ours follow \
                     releases, not the clock. With nothing done under the lock, a hold is far \
                     shorter than the peer's 10 ms sleep, so few of its tries fall inside one, \
                     which keeps its count low; the rounds with work below show what its \
                     polling costs while a holder works.",
                    opt(ours.commands_per_acquisition()),
                    count("findAndModify"),
                    count("update"),
                    count("getMore"),
                    peer_rounds.commands.as_ref().map_or(0, Counts::total) as f64
                        / s.seconds.as_secs_f64(),
                    peer_rounds.per_second,
                ));
            }
        }
        if let Some(b) = self.backend("memcached")
            && let (Some(ours_t), Some(tooz_t), Some(ours_r), Some(tooz_r)) = (
                by(b, Contestant::Ours, Workload::TightLoop),
                by(b, Contestant::Tooz, Workload::TightLoop),
                by(b, Contestant::Ours, Workload::ROUNDS),
                by(b, Contestant::Tooz, Workload::ROUNDS),
            )
        {
            let factor = ours_t.per_second / tooz_t.per_second;
            let tasks = (s.tasks * s.processes) as usize;
            text.push(format!(
                "**memcached, tight loop.** tooz's releasing thread asks again before any \
                 waiter polls, so its throughput is one thread cycling: {:.0} % of its \
                 hand-offs went to another process, and {} of the {tasks} tasks held the lock \
                 at all. Ours pass the lock to the next task of the same process by hand-over: \
                 the first of a run is a CAS store of the next grant with the token counter's \
                 increment by 16, in one round trip, and the next 15 take those reserved \
                 tokens without any server command, under the lease the server confirmed \
                 (median hand-off {}). A run ends once it made {} hand-overs and lasted {}; \
                 then the process releases and lets the others in: {:.1} % of hand-offs went \
                 to another process, each waiting for that process's next poll, since \
                 memcached has no notifications (median {}), and {} of the {tasks} tasks were \
                 served. {:.0}/s for us against {:.0}/s for tooz ({:.1}x{}). Our {} commands \
                 per acquisition are the first hand-over of each block of 16 (two commands), \
                 grants and releases, plus tries that lose (a failed add also reads how long \
                 the holder has left); tooz's {} are its add, get and delete plus failed \
                 adds.",
                share(&tooz_t),
                tooz_t.tasks_served,
                short(ours_t.hand_off_p50),
                distlock::LockOptions::DEFAULT_LOCAL_HAND_OVERS,
                humantime::format_duration(distlock::LockOptions::DEFAULT_MIN_LOCAL_RUN),
                share(&ours_t),
                short(ours_t.cross_p50),
                ours_t.tasks_served,
                ours_t.per_second,
                tooz_t.per_second,
                factor,
                if factor >= 5.0 { "" } else { ", short of 5x" },
                opt(ours_t.commands_per_acquisition()),
                opt(tooz_t.commands_per_acquisition()),
            ));
            text.push(format!(
                "**memcached, rounds.** Waiters that do wait show the difference: tooz's \
                 blocked threads sleep a whole second between tries (tenacity's \
                 `wait_exponential(max=1)` starts at one second), ours retry after a jittered \
                 5–500 ms backoff bounded by the holder's remaining TTL, and within a process \
                 the lock is handed over: {:.0}/s against {:.0}/s ({:.0}x).",
                ours_r.per_second,
                tooz_r.per_second,
                ours_r.per_second / tooz_r.per_second,
            ));
        }
        text.extend(self.work_findings());
        if let Some(b) = self.backend("etcd") {
            text.extend(etcd::contention_findings(b, &Workload::all(s.work)));
        }
        text.extend(postgres::contention_findings(
            self.backend("PostgreSQL"),
            self.advisory_mode(),
            &Workload::all(s.work),
        ));
        text.extend(self.fair_findings());
        text.extend(self.flock_findings());
        findings_list(out, &text);
    }

    /// What the rounds with work show, beside the rounds without.
    fn work_findings(&self) -> Vec<String> {
        let s = &self.settings;
        let mut text = Vec::new();
        if s.work.is_zero() {
            return text;
        }
        let workload = Workload::Rounds { work: s.work };
        let work = humantime::format_duration(s.work);
        let scenario = workload.label();
        let run = |r: &Contention| {
            format!(
                "median hand-off {}, mean {}, {:.0} acquisitions/s, the lock held {:.0} % \
                 of the window, {} server commands per acquisition",
                short(r.hand_off_p50),
                short(r.hand_off_mean),
                r.per_second,
                r.busy() * 100.0,
                opt(r.commands_per_acquisition()),
            )
        };
        if let Some(b) = self.backend("MongoDB")
            && let Some(ours) = find(b, Contestant::Ours, workload)
        {
            let defaults = Contestant::MongoPeer { sleep: None };
            let slow = Contestant::MongoPeer {
                sleep: Some(s.peer_sleep),
            };
            let mut t = format!(
                "**MongoDB, {scenario}.** Every holder keeps the lock for {work} before it \
                 releases it, so the waiters of a round wait through the holds of those \
                 before them. Ours: {}. ",
                run(ours)
            );
            if let Some(peer) = find(b, defaults, workload) {
                let _ = write!(
                    t,
                    "The peer with its defaults: {}; its waiters try every 10 ms whether the \
                     lock is free or not ({:.0} commands/s for {:.0} acquisitions/s). ",
                    run(peer),
                    peer.commands.as_ref().map_or(0, Counts::total) as f64
                        / peer.elapsed.as_secs_f64(),
                    peer.per_second,
                );
                if let (Some(a), Some(p)) = (
                    ours.commands_per_acquisition(),
                    peer.commands_per_acquisition(),
                ) {
                    let _ = write!(
                        t,
                        "Ours sent {:.2} of the peer defaults' commands per acquisition. ",
                        a / p
                    );
                }
                if let (Some(ours_0), Some(peer_0)) = (
                    find(b, Contestant::Ours, Workload::ROUNDS),
                    find(b, defaults, Workload::ROUNDS),
                ) {
                    let _ = write!(
                        t,
                        "In rounds without work (2b) the counts were {} for ours and {} for \
                         the peer's defaults. ",
                        opt(ours_0.commands_per_acquisition()),
                        opt(peer_0.commands_per_acquisition()),
                    );
                }
            }
            if let Some(peer) = find(b, slow, workload) {
                let _ = write!(
                    t,
                    "The peer with a {} sleep: {}.",
                    humantime::format_duration(s.peer_sleep),
                    run(peer)
                );
            }
            text.push(t.trim_end().to_owned());
        }
        if let Some(b) = self.backend("memcached")
            && let Some(ours) = find(b, Contestant::Ours, workload)
        {
            let mut t = format!("**memcached, {scenario}.** Ours: {}. ", run(ours));
            if let Some(tooz) = find(b, Contestant::Tooz, workload) {
                let _ = write!(
                    t,
                    "{}: {}. Ours made {:.1}x its acquisitions per second.",
                    self.tooz(),
                    run(tooz),
                    ours.per_second / tooz.per_second
                );
            }
            text.push(t.trim_end().to_owned());
        }
        text
    }
    /// The file backend's hand-off beside a raw blocking `flock(2)`.
    fn flock_findings(&self) -> Option<String> {
        let b = self.backend("file")?;
        let pair = |workload| {
            Some((
                find(b, Contestant::Ours, workload)?.hand_off_p50,
                find(b, Contestant::RawFlock, workload)?.hand_off_p50,
            ))
        };
        let (ours_tight, raw_tight) = pair(Workload::TightLoop)?;
        let (ours_rounds, raw_rounds) = pair(Workload::ROUNDS)?;
        Some(format!(
            "**file, beside a raw blocking `flock(2)`.** A raw waiter sleeps in the kernel, \
             which wakes it as the holder's lock goes: {} p50 in the tight loop, {} in \
             rounds. Ours takes the lock with a non-blocking `flock` and waits outside the \
             kernel: the release drops the lock and then writes the name's signal file; the \
             waiting process's inotify watch reports that write, its runtime wakes the \
             waiting task, and the task's attempt locks the file and writes the name's next \
             fencing token into it before it returns. That chain took {} and {}. The raw \
             waiter writes no token and holds a thread while it waits; a waiter of ours \
             that blocked in `flock` on a thread of its own was tried during development \
             and handed off more slowly on this machine, since the grant must still cross \
             from that thread to the waiting task and the token must still be written.",
            short(raw_tight),
            short(raw_rounds),
            short(ours_tight),
            short(ours_rounds),
        ))
    }

    fn many_findings(&self, out: &mut String) {
        let mut text = Vec::new();
        if let Some(m) = self.backend("MongoDB").and_then(|b| b.many.as_ref())
            && let Some(c) = &m.commands
        {
            text.push(format!(
                "**MongoDB.** The keeper extends the leases that fall due together with one \
                 `extend_many` call, and the backend sends it as one `updateMany` per 10,000 \
                 leases (a `find` follows only when fewer matched than were sent). The {} \
                 leases were taken over {}, so they fall due in a few groups: {} extension \
                 calls and {} server commands in {}, against {} if each lock were extended on \
                 its own at every cadence.",
                m.locks,
                short(m.acquire_time),
                m.extend_calls,
                c.total(),
                humantime::format_duration(m.held_for),
                (m.locks as f64 * m.cadences()).round()
            ));
        }
        if let Some(m) = self.backend("memcached").and_then(|b| b.many.as_ref())
            && let Some(c) = &m.commands
        {
            text.push(format!(
                "**memcached.** The keeper's call is batched the same way, but memcached has \
                 no multi-key conditional store, so the backend extends each lease with its \
                 own store, conditional on the CAS its last store returned (512 in flight, \
                 pipelined): {:.2} commands per lock \
                 per cadence, {:.0} commands/s for {} locks. There was no goal for this; it \
                 is what an efficiency lock on memcached costs.",
                c.total() as f64 / m.locks as f64 / m.cadences(),
                m.per_second(c.total()),
                m.locks
            ));
        }
        if let Some(b) = self.backend("etcd") {
            text.extend(etcd::many_findings(b));
        }
        findings_list(out, &text);
    }
}

/// `who`'s result on `b` in `workload`, if it ran.
fn find(b: &BackendResults, who: Contestant, workload: Workload) -> Option<&Contention> {
    b.contended
        .iter()
        .find(|c| c.by == who && c.workload == workload)
        .map(|c| &c.result)
}

fn ratio(a: Duration, b: Duration) -> f64 {
    if b.is_zero() {
        f64::INFINITY
    } else {
        a.as_secs_f64() / b.as_secs_f64()
    }
}

fn by_total(c: &Counts, over: Duration) -> String {
    let mut named: Vec<(&String, &u64)> = c.0.iter().collect();
    named.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    named
        .iter()
        .map(|(name, n)| format!("{name} {n} ({:.2}/s)", **n as f64 / over.as_secs_f64()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("model name"))
                .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            let kib: u64 = info
                .lines()
                .next()?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some(format!("{:.0} GiB", kib as f64 / 1024.0 / 1024.0))
        })
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|r| format!(", Linux {}", r.trim()))
        .unwrap_or_default();
    format!("{cores} cores ({cpu}), {memory}{kernel}")
}

fn rustc() -> String {
    std::process::Command::new("rustc")
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map_or_else(|| "rustc (unknown)".into(), |v| v.trim().to_owned())
}

/// The "which" cell of an uncontended row: the commands by name per cycle,
/// and the server's own count beside them where it keeps one.
fn which(side: &Side) -> String {
    let per = side.cycles as f64;
    let mut cell = side.commands.as_ref().map_or("—".into(), |c| c.per(per));
    if let Some(ops) = &side.server_ops {
        let _ = write!(cell, "; the server's own count: {}", ops.per(per));
    }
    cell
}

/// How the client's ratio to the baseline varied from round to round, for
/// a goal's line.
fn spread(client: &Side, base: &Side) -> String {
    client.round_ratios(base).map_or_else(String::new, |s| {
        format!(
            "; round by round, median {:.2}, middle half {:.2}–{:.2}",
            s.median, s.low, s.high
        )
    })
}
