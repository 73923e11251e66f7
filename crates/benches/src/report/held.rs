//! Section 4's held-locks curve: many locks held by one process, one row
//! per backend and point, and the goals and findings, judged at the point
//! nearest [`HELD_GOAL_LOCKS`].

use std::fmt::Write;

use super::*;
use crate::charts::Chart;
use crate::scaling::measured;

/// What the held locks' lease means for the *per minute* columns.
fn lease_note(lease: Duration) -> String {
    let default = distlock::LockOptions::DEFAULT_LEASE;
    let cadence = humantime::format_duration(distlock::LockOptions::default().extend_every());
    if lease == default {
        format!(
            "That is the default lease, as users run it, so the *per minute* columns \
             scale what was measured to a minute of the default cadence (every {cadence})."
        )
    } else {
        format!(
            "The lease is not the default {}: keeping a lock costs per cadence, whatever \
             the lease, so the *per minute* columns scale what one cadence cost to the \
             default lease's cadence (every {cadence}). A shorter lease asks the server \
             for more extensions per second.",
            humantime::format_duration(default)
        )
    }
}

impl Run {
    /// The held-locks part of section 4.
    pub(super) fn held(&self, out: &mut String) {
        let Some(m) = self
            .backends
            .iter()
            .find_map(|b| measured(&b.curves.held).next().map(|(_, m)| m))
        else {
            return;
        };
        let _ = writeln!(out, "### Held locks\n");
        let _ = writeln!(
            out,
            "One client takes N locks (64 attempts in flight), holds them for {} with a \
             {} lease (extended every {}, so {:.0} extension rounds), then releases them. \
             {} *Extension calls* are the calls the lock client's keeper makes to \
             the backend (`extend` or `extend_many`, or on etcd `renew_session`, one renewal \
             of the client's session that keeps all its leases, so no lease is extended on \
             its own); *server commands* are what the server received while the locks were \
             held, counted as above. CPU is this process's user + system time while \
             holding (the keeper's work, as the process does nothing else); RSS is this \
             process's resident memory before taking the locks and while holding them.\n",
            humantime::format_duration(m.held_for),
            humantime::format_duration(m.lease),
            humantime::format_duration(m.extend_every),
            m.cadences(),
            lease_note(m.lease),
        );
        if let Some(open_files) = &self.open_files {
            let _ = writeln!(
                out,
                "The file backend keeps one descriptor open for each lock it holds, so the run \
                 raises its limit on open files to fit the largest point where it may. The \
                 limit: {}.\n",
                open_files.describe()
            );
        }
        let _ = writeln!(
            out,
            "| backend | locks | taken in | extension calls/s | leases extended/s | server commands/s while held | server commands per lock per cadence | server commands per minute, default lease | lost | CPU while held | CPU per minute, default lease | RSS before → holding |"
        );
        let _ = writeln!(
            out,
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for b in &self.backends {
            for point in &b.curves.held {
                match &point.measured {
                    Ok(m) => held_row(out, &b.label, m),
                    Err(error) => {
                        let _ = writeln!(
                            out,
                            "| {} | {} | failed: {} | | | | | | | | | |",
                            b.label,
                            point.at,
                            error.replace('|', "\\|")
                        );
                    }
                }
            }
        }
        if let Some(b) = self.advisory_mode()
            && b.curves.held.is_empty()
        {
            let _ = writeln!(out, "\n{}: left out, {}.", b.label, MANY_LEFT_OUT_ADVISORY);
        }
        for line in self.backends.iter().filter_map(objectstore::held_left_out) {
            let _ = writeln!(out, "\n{line}");
        }
        let _ = writeln!(out);
        self.chart_links(out, &self.held_charts());
        let by_command: Vec<String> = self
            .backends
            .iter()
            .filter_map(|b| {
                let m = b.held_goal_point()?;
                let c = m.commands.as_ref()?;
                Some(format!(
                    "- {} ({} locks): {}",
                    b.label,
                    m.locks,
                    by_total(c, m.held_for)
                ))
            })
            .collect();
        if !by_command.is_empty() {
            let _ = writeln!(
                out,
                "Server commands while held, by command, at the point nearest \
                 {HELD_GOAL_LOCKS} locks:\n"
            );
            for line in &by_command {
                let _ = writeln!(out, "{line}");
            }
            let _ = writeln!(out);
        }
        let mut goals = Vec::new();
        if let Some(m) = self.backend("MongoDB").and_then(|b| b.held_goal_point())
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
        self.held_findings(out);
    }

    fn held_findings(&self, out: &mut String) {
        let mut text = Vec::new();
        if let Some(m) = self.backend("MongoDB").and_then(|b| b.held_goal_point())
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
        if let Some(m) = self.backend("memcached").and_then(|b| b.held_goal_point())
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

    /// The held-locks curve's charts: the extension traffic and the CPU,
    /// both per minute at the default lease.
    pub(super) fn held_charts(&self) -> Vec<Chart> {
        let lines = |y: &dyn Fn(&HoldMany) -> Option<f64>| {
            super::scaling::chart_lines(&self.backends, |b| &b.curves.held, y)
        };
        vec![
            Chart::new(
                "held-commands.svg",
                "Held locks: server commands per minute (default lease)".to_owned(),
                "locks held by one process",
                "server commands per minute".to_owned(),
                lines(&|m| m.commands_per_default_minute()),
            ),
            Chart::new(
                "held-cpu.svg",
                "Held locks: the keeper's CPU per minute (default lease)".to_owned(),
                "locks held by one process",
                "CPU milliseconds per minute".to_owned(),
                lines(&|m| Some(m.cpu_per_default_minute().as_secs_f64() * 1e3)),
            ),
        ]
    }
}

/// One measured row of the held-locks table.
fn held_row(out: &mut String, label: &str, m: &HoldMany) {
    let commands = m.commands.as_ref();
    let _ = writeln!(
        out,
        "| {} | {} | {} | {:.2} | {} | {} | {} | {} | {} | {} ({:.2} % of one core) | {} | {} → {} |",
        label,
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
        opt(m.commands_per_default_minute()),
        m.lost,
        short(m.cpu),
        m.cpu.as_secs_f64() / m.held_for.as_secs_f64() * 100.0,
        short(m.cpu_per_default_minute()),
        mib(m.rss_before_kib),
        mib(m.rss_held_kib),
    );
}
