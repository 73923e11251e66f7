//! Section 4, many locks held at once: one table per backend, and its
//! findings.

use std::fmt::Write;

use super::*;

impl Run {
    pub(super) fn many(&self, out: &mut String) {
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

    pub(super) fn many_findings(&self, out: &mut String) {
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
