//! What the servers keep on disk: the header's list of every server's
//! durability settings, each section's sentence on what a cycle waits for
//! on disk, and what the measured rows on servers with other settings show.

use std::fmt::Write;

use super::*;

impl Run {
    /// The header's durability lines: one per kind of server, as the
    /// script that started them said.
    pub(super) fn durability_lines(&self, out: &mut String) {
        if self.durability.is_empty() {
            let _ = writeln!(
                out,
                "- Durability: not given (`--durability`); the servers' settings are unknown"
            );
            return;
        }
        let _ = writeln!(
            out,
            "- Durability, as the script started each server (PostgreSQL's and Redis's read \
             back from the servers themselves):"
        );
        for line in &self.durability {
            let _ = writeln!(out, "  - {}: {}", line.kind, line.settings);
        }
    }

    /// The sentence that says what a cycle waits for on disk, for each kind
    /// of backend among `backends` whose servers' durability was given;
    /// nothing when there is none.
    pub(super) fn disk_waits<'a>(
        &self,
        out: &mut String,
        backends: impl IntoIterator<Item = &'a BackendResults>,
    ) {
        let mut kinds: Vec<&str> = Vec::new();
        for b in backends {
            if !kinds.contains(&b.kind) {
                kinds.push(b.kind);
            }
        }
        let waits: Vec<String> = kinds
            .iter()
            .filter_map(|kind| {
                let line = self
                    .durability
                    .iter()
                    .find(|line| line.kind == *kind && !line.waits.is_empty())?;
                Some(format!("{kind}, {}", line.waits))
            })
            .collect();
        if !waits.is_empty() {
            let _ = writeln!(
                out,
                "What a cycle waits for on disk in this section, with the settings in the \
                 header: {}.\n",
                waits.join("; ")
            );
        }
    }

    /// What the client's rounds on servers with other durability settings
    /// show beside its rounds on the durable server: one paragraph.
    pub(super) fn durability_findings(&self) -> Option<String> {
        let mut costs = Vec::new();
        for b in &self.backends {
            let u = &b.uncontended;
            let Some(client) = u.side(Contender::Client) else {
                continue;
            };
            for (index, settings) in u.beside.iter().enumerate() {
                let Some(beside) = u.side(Contender::ClientBeside(index)) else {
                    continue;
                };
                costs.push(format!(
                    "{}: {:.0} cycles/s against {:.0} on a server with {settings} ({:.2} of it)",
                    b.label,
                    client.per_second(),
                    beside.per_second(),
                    client.per_second() / beside.per_second(),
                ));
            }
        }
        (!costs.is_empty()).then(|| {
            format!(
                "**What durability costs.** The lock client on the servers above, against the \
                 same client in the same rounds on a server beside them with other settings \
                 (the measured-only rows): {}.",
                costs.join("; ")
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durability::Durability;

    fn line(kind: &str, waits: &str) -> Durability {
        Durability {
            kind: kind.to_owned(),
            settings: format!("{kind}'s settings"),
            waits: waits.to_owned(),
        }
    }

    fn run(durability: Vec<Durability>) -> Run {
        let settings = Settings {
            seconds: Duration::from_secs(1),
            uncontended_seconds: Duration::from_secs(1),
            processes: 1,
            tasks: 1,
            work: Duration::ZERO,
            single_task_processes: 0,
        };
        let mut run = Run::new("bench".to_owned(), settings, Vec::new());
        run.durability = durability;
        run
    }

    fn side(contender: Contender, cycles: u64) -> Side {
        Side::measured(contender, cycles)
    }

    /// Redis, with the client on its own server and on one beside it.
    fn redis(client: u64, beside: u64) -> BackendResults {
        BackendResults {
            kind: "Redis",
            label: "Redis".to_owned(),
            scale_out: None,
            advisory_mode: false,
            fair: false,
            url: "redis://127.0.0.1:1".to_owned(),
            server_version: None,
            uncontended: Uncontended {
                sides: vec![
                    side(Contender::Client, client),
                    side(Contender::ClientBeside(0), beside),
                ],
                quiet: None,
                beside: vec!["durability off (appendonly no)".to_owned()],
            },
            tooz_uncontended: None,
            contended: Vec::new(),
            kinds: Vec::new(),
            polling: None,
            curves: Default::default(),
        }
    }

    #[test]
    fn each_section_says_what_its_backends_wait_for_on_disk() {
        let mut report = run(vec![
            line("PostgreSQL", "the WAL flush"),
            line("Redis", "nothing per write"),
            line("Redis", "said twice"),
            line("disk", ""),
        ]);
        report.backends.push(redis(100, 200));
        let mut out = String::new();
        report.disk_waits(&mut out, &report.backends);
        assert_eq!(
            out,
            "What a cycle waits for on disk in this section, with the settings in the header: \
             Redis, nothing per write.\n\n"
        );
        let mut out = String::new();
        report.disk_waits(
            &mut out,
            report.backends.iter().filter(|b| b.curves.measured_any()),
        );
        assert_eq!(out, "");
        let stamp = crate::stamp::Stamp {
            commit: "commit `0123456789ab` (clean)".to_owned(),
            date: "2026-12-06T00:00:00Z".to_owned(),
            machine: "a test machine".to_owned(),
        };
        let markdown = report.to_markdown(&stamp);
        assert!(
            markdown.contains(
                "| Redis | measured only: distlock `LockClient`, on a server with durability off \
                 (appendonly no) | 200 |"
            ),
            "{markdown}"
        );
        assert!(
            markdown.contains(
                "Redis: 100 cycles/s against 200 on a server with durability off (appendonly \
                 no) (0.50 of it)"
            ),
            "{markdown}"
        );
    }

    #[test]
    fn the_header_lists_every_line_and_says_when_none_was_given() {
        let mut out = String::new();
        run(vec![line("PostgreSQL", "the WAL flush"), line("disk", "")]).durability_lines(&mut out);
        assert!(
            out.contains("  - PostgreSQL: PostgreSQL's settings\n"),
            "{out}"
        );
        assert!(out.contains("  - disk: disk's settings\n"), "{out}");
        let mut out = String::new();
        run(Vec::new()).durability_lines(&mut out);
        assert!(out.contains("Durability: not given"), "{out}");
    }
}
