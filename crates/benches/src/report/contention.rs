//! Section 2, contention: one table per scenario with every contestant
//! side by side (see `contention_table`), its goals and its findings.

use std::fmt::Write;

use super::*;

impl Run {
    pub(super) fn contention(&self, out: &mut String) {
        let s = &self.settings;
        let scenarios = Scenario::all(s.work, s.single_task_processes);
        let work = humantime::format_duration(s.work);
        let _ = writeln!(
            out,
            "## 2. Contention: {} tasks in each of {} processes on one name{}\n",
            s.tasks,
            s.processes,
            if s.single_task_processes > 0 {
                format!(", and {} processes of one task", s.single_task_processes)
            } else {
                String::new()
            }
        );
        let _ = writeln!(
            out,
            "Each task takes the lock with the contender's own waiting strategy and \
             releases it at once{}. Each Rust process shares one client (ours) or one \
             `mongodb::Client` and lock value (the peer's) among its tasks; each Python \
             process shares one tooz coordinator among its threads. All processes share \
             the machine's wall clock, so the holds of every process can be laid end to \
             end. **Hand-off** is the time from one release to the next grant, whoever \
             gets it. *In process* and *across processes* split the acquisitions by who \
             held the lock before (the hold before it in the window, in any round; the \
             window's first acquisition is in neither), and the hand-offs likewise: ours \
             pass a released lock to a waiting task of the same process without the \
             server (a hand-over, in runs that end once they made {} hand-overs and lasted \
             {}), while a peer has no hand-over, so its acquisitions in process are tasks \
             of one process that took it from each other through the server. A lock is \
             shared between processes only by acquisitions across processes, so every goal \
             against a peer is judged on those, or on the workload of one task per process, \
             where every hand-off crosses processes. *Between tries* is what each contender \
             does while the lock is held (each peer runs with its documented defaults, read \
             from its source); *fencing token / lease* is what a grant promises, in bold \
             where a peer promises less than ours. *Tasks served* is how many of the tasks \
             held the lock at least once. *Out of asking order* counts the grants that went \
             to a task while another, which had called acquire at least {} earlier (by the \
             shared wall clock) in the same round, still waited; a lock that serves first \
             come, first served has none. Tasks that ask closer together than that can \
             reach the server in either order, so they are not ordered; as every task of a \
             round asks at its start, within about that margin, only the tight loop really \
             tests the order (— where a worker does not say when it asked; only grants in \
             the window are seen). *Out of line order* needs no margin: our workers also \
             note when each wait's first attempt was sent to the store and when the first \
             answer telling it to wait came back, and a grant counts there when it went to \
             a task while another still waited whose answer to wait had come back before \
             this task's first attempt was sent. A store that keeps a line puts a waiter in \
             it between those two moments, so that other waiter was surely ahead; this is \
             the order fair mode promises (— for the peers, which do not say; \
             PostgreSQL's advisory mode, whose waiter takes its place with a statement of \
             its own, answers only once the server shows that place). {} workloads, each for \
             {}:\n",
            if s.work.is_zero() {
                String::new()
            } else {
                format!(" (in the third workload, after {work} of work)")
            },
            distlock::LockOptions::DEFAULT_LOCAL_HAND_OVERS,
            humantime::format_duration(distlock::LockOptions::DEFAULT_MIN_LOCAL_RUN),
            humantime::format_duration(order::MARGIN),
            ["One", "Two", "Three", "Four"]
                .get(scenarios.len().wrapping_sub(1))
                .unwrap_or(&"Several"),
            humantime::format_duration(s.seconds)
        );
        let _ = writeln!(
            out,
            "- **Tight loop**: every task asks again as soon as it has released. This is \
             the most acquisitions a contender can make, but a lock that is not fair lets \
             the task (or process) that just released take it again before any waiter \
             notices, so its hand-off is then that task's own round trip, and the others \
             starve (see *tasks served* and the acquisitions across processes).\n\
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
        if s.single_task_processes > 0 {
            let _ = writeln!(
                out,
                "- **Rounds on {n} processes of one task each**: the rounds workload, with \
                 {n} worker processes of a single task instead of {} of {}, like {n} \
                 instances of a service with one worker each. No process has a second task \
                 to hand the lock over to, so every hand-off within a round goes to another \
                 process, through the server, for every contender alike. The scale-out \
                 forms do not run it.",
                s.processes,
                s.tasks,
                n = s.single_task_processes,
            );
        }
        let _ = writeln!(out);
        let mut goals = Vec::new();
        for (letter, scenario) in ('a'..).zip(scenarios) {
            self.contention_table(out, letter, scenario);
            self.hand_off_chart_links(out, scenario);
            goals.extend(self.contention_goals(scenario));
        }
        goals_list(out, &goals);
        self.contention_findings(out);
    }

    /// The goals of `scenario`: each against a peer judged on what crossed
    /// processes (see [`cross_hand_off_goal`]), or, where a count cannot be
    /// split by acquisition, only where every hand-off crosses.
    pub(super) fn contention_goals(&self, scenario: Scenario) -> Vec<String> {
        let by = |b, who| find(b, who, scenario);
        let s = &self.settings;
        let label = scenario.label();
        let (processes, tasks) = scenario.processes_and_tasks(s.processes, s.tasks);
        let tasks = (processes * tasks) as usize;
        let one_task_each = matches!(scenario.spread, Spread::OneTaskEach { .. });
        let mut goals = Vec::new();
        if let Some(b) = self.backend("MongoDB")
            && let (Some(ours), Some(peer)) =
                (by(b, Contestant::Ours), by(b, Contestant::MongoPeer))
        {
            goals.push(cross_hand_off_goal(
                &format!("MongoDB, {label}"),
                ours,
                &format!("{PEER} with its defaults"),
                peer,
                1.0,
            ));
            // Commands are counted over all acquisitions, so they are
            // compared only where every hand-off crosses processes.
            if one_task_each
                && let (Some(a), Some(p)) = (
                    ours.commands_per_acquisition(),
                    peer.commands_per_acquisition(),
                )
            {
                goals.push(goal(
                    a <= p / 3.0 && a <= 3.0,
                    format!(
                        "MongoDB, {label}: at most a third of {PEER}'s server commands per \
                         acquisition, and at most 3: {a:.2} against {p:.2} (ratio {:.2}).",
                        a / p
                    ),
                ));
            }
        }
        if let Some(b) = self.backend("memcached")
            && let (Some(ours), Some(tooz)) = (by(b, Contestant::Ours), by(b, Contestant::Tooz))
        {
            let factor = ours.per_second_across() / tooz.per_second_across();
            goals.push(goal(
                ours.acquired_across > 0 && factor >= 5.0,
                format!(
                    "memcached, {label}: at least 5x {}'s acquisitions per second across \
                     processes: {:.0} against {:.0} ({factor:.1}x; all acquisitions, {:.0} \
                     against {:.0}/s).",
                    self.tooz(),
                    ours.per_second_across(),
                    tooz.per_second_across(),
                    ours.per_second,
                    tooz.per_second,
                ),
            ));
        }
        if let Some(b) = self.backend("etcd") {
            goals.extend(etcd::contention_goals(b, scenario, tasks));
        }
        if let Some(b) = self.backend("PostgreSQL") {
            goals.extend(postgres::contention_goals(b, scenario));
        }
        if let Some(b) = self.advisory_mode() {
            goals.extend(postgres::advisory_contention_goals(b, scenario));
        }
        if let Some(b) = self.backend("Redis") {
            goals.extend(redis::contention_goals(b, scenario));
        }
        goals.extend(self.fair_contention_goals(scenario, tasks));
        if let Some(b) = self.backend("file")
            && let (Some(ours), Some(raw)) = (by(b, Contestant::Ours), by(b, Contestant::RawFlock))
        {
            goals.push(cross_hand_off_goal(
                &format!("file, {label}"),
                ours,
                "a raw blocking flock",
                raw,
                3.0,
            ));
        }
        goals
    }

    pub(super) fn contention_findings(&self, out: &mut String) {
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
            text.extend(mongodb::contention_findings(b, s.seconds));
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
    pub(super) fn work_findings(&self) -> Vec<String> {
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
                "median hand-off {}, mean {} (across processes {} and {}), {:.0} \
                 acquisitions/s ({:.0} across processes), the lock held {:.0} % of the \
                 window, {} server commands per acquisition",
                short(r.hand_off_p50),
                short(r.hand_off_mean),
                short(r.cross_p50),
                short(r.cross_mean),
                r.per_second,
                r.per_second_across(),
                r.busy() * 100.0,
                opt(r.commands_per_acquisition()),
            )
        };
        if let Some(b) = self.backend("MongoDB")
            && let Some(ours) = find(b, Contestant::Ours, workload)
        {
            let defaults = Contestant::MongoPeer;
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
    pub(super) fn flock_findings(&self) -> Option<String> {
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
             waiter writes no token and holds a thread while it waits. A waiter of ours \
             that blocked in `flock` would hold a thread per waiting task, and its grant \
             would still have to cross from that thread to the waiting task and write the \
             token; it is not measured here.",
            short(raw_tight),
            short(raw_rounds),
            short(ours_tight),
            short(ours_rounds),
        ))
    }
}
