//! The Markdown report: the machine, the versions, the exact command, one
//! table per scenario with every backend and peer side by side, and the
//! goals, each checked against this run's numbers; every numbered section
//! stamped with the run's commit, date, machine and its own settings.

mod contention;
mod contention_table;
mod contestants;
mod durability;
mod etcd;
mod fair;
mod hand_off_charts;
mod header;
mod held;
mod mongodb;
mod objectstore;
mod pg_steps;
mod postgres;
mod redis;
mod scale_out;
mod scaling;
mod uncontended;

use std::fmt::Write;
use std::time::Duration;

use crate::commands::{Counts, MEMCACHED_COMMANDS};
use crate::durability::Durability;
use crate::kinds::{self, KindRun};
use crate::markdown::{findings_list, goal, goals_list, opt, short, unjudged};
use crate::open_files::OpenFiles;
use crate::order;
use crate::peers::{ToozUncontended, ToozVersions};
use crate::quiet::Quiet;
use crate::scale_out::ScaleOut;
use crate::scaling::Curves;
use crate::scaling::held::HoldMany;
use crate::scenario::{Scenario, Spread};
use crate::sections::stamp_sections;
use crate::stamp::Stamp;
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
    /// Each kind of server's durability settings, as the script gave them.
    pub(crate) durability: Vec<Durability>,
    /// The limit on open files the run had, where it measured held locks.
    pub(crate) open_files: Option<OpenFiles>,
    pub(crate) backends: Vec<BackendResults>,
    /// Where the charts go, relative to the report (`docs/bench`); `None`
    /// when the report is printed, not written, and the charts are not
    /// drawn.
    pub(crate) charts_dir: Option<String>,
    /// What the charts' file names start with: nothing for a full run,
    /// [`charts::partial_prefix`] for a partial one.
    pub(crate) chart_prefix: String,
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
    /// The processes of one task each in the fourth (zero: not run).
    pub(crate) single_task_processes: u32,
}

/// Who contended in one contended run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Contestant {
    Ours,
    /// distributed-lock-mongo, with its defaults.
    MongoPeer,
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
    pub(crate) scenario: Scenario,
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
    /// On an object store, what one waiter and the holder sent while a
    /// lock was held (section 4's waiters); `None` elsewhere.
    pub(crate) polling: Option<crate::outcome::Outcome<crate::objectstore::polling::Polling>>,
    /// The curves of section 4; the held locks are not measured on a
    /// scale-out form, nor in PostgreSQL's advisory mode (see
    /// [`MANY_LEFT_OUT_ADVISORY`]).
    pub(crate) curves: Curves,
}

impl BackendResults {
    /// The held-locks point the goals are judged at: the one nearest
    /// [`HELD_GOAL_LOCKS`], the size of the scenario before it became a
    /// curve, which the guide quotes.
    pub(crate) fn held_goal_point(&self) -> Option<&HoldMany> {
        crate::scaling::measured(&self.curves.held)
            .min_by_key(|(at, _)| at.abs_diff(HELD_GOAL_LOCKS))
            .map(|(_, m)| m)
    }
}

/// The number of held locks the goals of section 4 are stated for.
pub(crate) const HELD_GOAL_LOCKS: usize = 10_000;

pub(crate) use postgres::MANY_LEFT_OUT_ADVISORY;

const PEER: &str = "distributed-lock-mongo 0.2.0";

/// The head of the report file: what it holds, and how a run of some
/// kinds only (`--only`) merges into it (see [`crate::sections`]).
pub(crate) const TITLE: &str = "# Benchmarks

Written by `distlock-bench` from runs of `bash scripts/bench`, which starts the servers, \
installs the Python peer when it is missing, builds in release mode and runs every scenario \
against every backend and peer in turn. Benchmarks measure; nothing here is asserted by a \
test. Every numbered section is stamped: the commit its run was built from (and whether the \
checkout had uncommitted changes), when and on what machine it ran, and the settings it used. \
Compare numbers under one stamp only.

A full run (`bash scripts/bench`) writes this whole file, and every ratio in it compares \
numbers of that run. A run of some kinds only (`bash scripts/bench --only Redis`) cannot \
replace rows of a table whose other rows came from another run, perhaps on another machine, \
and the goals and findings compare the rows of one run. So it leaves the full run's sections \
as they are and writes its own sections, each stamped, into a part of its own at the end, \
headed *Partial run* and its kinds. A later partial run replaces every part whose kinds it \
covers; the next full run replaces the whole file. Where a part and a full run's section \
disagree, their stamps say which ran later.

";

impl Run {
    pub(crate) fn new(command: String, settings: Settings, notes: Vec<String>) -> Self {
        Self {
            command,
            settings,
            notes,
            left_out: Vec::new(),
            tooz_versions: None,
            durability: Vec::new(),
            open_files: None,
            backends: Vec::new(),
            charts_dir: None,
            chart_prefix: String::new(),
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
            Contestant::MongoPeer => format!("{PEER}, defaults"),
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

    /// The report, every numbered section under `stamp` and the settings
    /// it used; without [`TITLE`], which only a whole file starts with.
    pub(crate) fn to_markdown(&self, stamp: &Stamp) -> String {
        let mut out = String::new();
        let all = &self.backends;
        self.header(&mut out);
        self.uncontended(&mut out);
        self.disk_waits(&mut out, all);
        self.contention(&mut out);
        self.disk_waits(&mut out, all);
        self.kinds(&mut out);
        self.scaling(&mut out);
        self.disk_waits(&mut out, all.iter().filter(|b| b.curves.measured_any()));
        scale_out::write_section(&mut out, 5, all, &Workload::all(self.settings.work));
        self.disk_waits(&mut out, all.iter().filter(|b| b.scale_out.is_some()));
        stamp_sections(&out, |heading| stamp.line(&self.settings_of(heading)))
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
}

/// `who`'s result on `b` in `scenario` (a workload alone: on the shared
/// processes), if it ran.
fn find(b: &BackendResults, who: Contestant, scenario: impl Into<Scenario>) -> Option<&Contention> {
    let scenario = scenario.into();
    b.contended
        .iter()
        .find(|c| c.by == who && c.scenario == scenario)
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

/// The "which" cell of an uncontended row: the commands by name per cycle,
/// and the server's own count beside them where it keeps one.
fn which(side: &Side) -> String {
    let per = side.counted_cycles as f64;
    let mut cell = side.commands.as_ref().map_or("—".into(), |c| c.per(per));
    if let Some(ops) = &side.server_ops {
        let _ = write!(cell, "; the server's own count: {}", ops.per(per));
    }
    cell
}

/// The goal that the client makes at least `share` of the cycles per
/// second of `base`, the baseline `base_is` describes, on backend `who`.
fn share_goal(who: &str, share: f64, base_is: &str, client: &Side, base: &Side) -> String {
    let ratio = client.per_second() / base.per_second();
    goal(
        ratio >= share,
        format!(
            "{who}: the client reaches at least {share} of {base_is}: {ratio:.2} ({:.0} \
             against {:.0} cycles/s){}.",
            client.per_second(),
            base.per_second(),
            spread(client, base),
        ),
    )
}

/// The goal that `ours` hands the lock to another process, at the
/// median, within `within` times `peer`'s hand-off (`peer_is` names it) in
/// the same scenario, `what` naming backend and scenario. Only hand-offs
/// across processes count: ours to a task of the same process skip the
/// server, which a peer's never do, so the whole median would compare
/// unlike things. Without such hand-offs on both sides it is not judged.
fn cross_hand_off_goal(
    what: &str,
    ours: &Contention,
    peer_is: &str,
    peer: &Contention,
    within: f64,
) -> String {
    let bound = if within == 1.0 {
        "no worse than".to_owned()
    } else {
        format!("within {within}x")
    };
    let claim = format!("{what}: hand-off p50 across processes {bound} that of {peer_is}");
    if ours.cross_process == 0 || peer.cross_process == 0 {
        return unjudged(format!(
            "{claim}: too few hand-offs across processes to compare ({} of ours, {} of \
             theirs).",
            ours.cross_process, peer.cross_process
        ));
    }
    let factor = ratio(ours.cross_p50, peer.cross_p50);
    goal(
        factor <= within,
        format!(
            "{claim}: {} against {} ({factor:.2}x; p99 {} against {}; over {} and {} such \
             hand-offs).",
            short(ours.cross_p50),
            short(peer.cross_p50),
            short(ours.cross_p99),
            short(peer.cross_p99),
            ours.cross_process,
            peer.cross_process,
        ),
    )
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

#[cfg(test)]
mod tests {
    use distlock::LockKind;

    use super::*;
    use crate::worker::Tenure;

    /// Holds laid end to end, 10 ns each, one per `(process, gap)`: held by
    /// a task of `process`, granted `gap` ns after the hold before it.
    fn run(holders: &[(u32, u64)]) -> Contention {
        let mut at = 0;
        let holds = holders
            .iter()
            .enumerate()
            .map(|(task, &(process, gap))| {
                at += gap;
                let hold = Tenure {
                    asked_at_ns: 0,
                    sent_ns: 0,
                    in_line_ns: 0,
                    acquired_at_ns: at,
                    released_at_ns: at + 10,
                    token: 0,
                    process,
                    task: task as u32,
                    round: 0,
                    kind: LockKind::Exclusive,
                };
                at += 10;
                hold
            })
            .collect();
        Contention::from_holds(holds, Duration::from_secs(1))
    }

    #[test]
    fn hand_off_goals_judge_only_hand_offs_across_processes() {
        // Ours: quick hand-overs within a process, slow hand-offs across;
        // the peer: every hand-off across, in between.
        let ours = run(&[(0, 0), (0, 1), (0, 1), (1, 50), (1, 1), (1, 1), (0, 50)]);
        let peer = run(&[(0, 0), (1, 20), (0, 20), (1, 20)]);
        // The whole median (1 ns against 20) would meet it; across
        // processes (50 against 20) it is not met.
        assert!(ours.hand_off_p50 < peer.hand_off_p50);
        let judged = cross_hand_off_goal("x", &ours, "the peer", &peer, 2.0);
        assert!(judged.starts_with("**Not met**"), "{judged}");
        let met = cross_hand_off_goal("x", &peer, "the peer", &ours, 1.0);
        assert!(met.starts_with("**Met**"), "{met}");
        // Without hand-offs across processes on one side, nothing is judged.
        let alone = run(&[(0, 0), (0, 1)]);
        let unjudged = cross_hand_off_goal("x", &alone, "the peer", &peer, 1.0);
        assert!(unjudged.starts_with("**Not judged**"), "{unjudged}");
    }
}
