//! Section 2, contention: one table per workload with every contestant
//! side by side, its goals and its findings.

use std::fmt::Write;

use super::*;

impl Run {
    pub(super) fn contention(&self, out: &mut String) {
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

    pub(super) fn contention_table(&self, out: &mut String, letter: char, workload: Workload) {
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

    pub(super) fn contention_goals(&self, workload: Workload) -> Vec<String> {
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
}
