//! Section 2's charts: per backend kind, the cumulative distribution of
//! the hand-offs across processes in the rounds on processes of one task
//! each (table 2d), one line per contestant, linked below that table.

use std::fmt::Write;

use super::{BackendResults, Contestant, Run};
use crate::charts::{Chart, Series, slug};
use crate::scenario::Scenario;
use crate::worker::Workload;

impl Run {
    /// The scenario the charts draw: the rounds on processes of one task
    /// each, where every hand-off crosses processes and every contestant
    /// does the same work; the shared rounds (2b) when that did not run.
    fn hand_off_scenario(&self) -> Scenario {
        match self.settings.single_task_processes {
            0 => Scenario::from(Workload::ROUNDS),
            n => Scenario::one_task_each(n),
        }
    }

    /// One chart per backend kind that has a line, in the report's order
    /// of kinds. The scale-out forms are left out: they do not run 2d, and
    /// their kind's single-server form stands for them.
    pub(crate) fn hand_off_charts(&self) -> Vec<Chart> {
        let scenario = self.hand_off_scenario();
        let single: Vec<&BackendResults> = self
            .backends
            .iter()
            .filter(|b| b.scale_out.is_none())
            .collect();
        let mut kinds: Vec<&'static str> = Vec::new();
        for b in &single {
            if !kinds.contains(&b.kind) {
                kinds.push(b.kind);
            }
        }
        kinds
            .into_iter()
            .map(|kind| {
                let series = single
                    .iter()
                    .filter(|b| b.kind == kind)
                    .flat_map(|b| {
                        b.contended
                            .iter()
                            .filter(|c| c.scenario == scenario)
                            .map(|c| Series {
                                label: counted(
                                    &line_label(b, c.by),
                                    c.result.cross_distribution.count,
                                ),
                                points: c.result.cross_distribution.cumulative_ms(),
                            })
                    })
                    .collect();
                Chart::cumulative(
                    format!("hand-off-{}.svg", slug(kind)),
                    format!("{kind}: {}", self.hand_off_what()),
                    "hand-off to another process, ms",
                    series,
                )
            })
            .filter(|chart| !chart.series.is_empty())
            .collect()
    }

    /// What the charts draw, for their titles.
    fn hand_off_what(&self) -> String {
        match self.settings.single_task_processes {
            0 => format!(
                "hand-offs across processes, rounds on {} processes x {} tasks (2b; 2d did \
                 not run)",
                self.settings.processes, self.settings.tasks
            ),
            n => format!("hand-offs across processes, rounds on {n} processes x 1 task (2d)"),
        }
    }

    /// The charts' paragraph and links, below the table of `scenario`
    /// when it is the one they draw; nothing where the report has no
    /// charts directory or no chart has a line.
    pub(super) fn hand_off_chart_links(&self, out: &mut String, scenario: Scenario) {
        if scenario != self.hand_off_scenario() || self.charts_dir.is_none() {
            return;
        }
        let charts = self.hand_off_charts();
        if charts.is_empty() {
            return;
        }
        let which = if self.settings.single_task_processes == 0 {
            "table 2b's hand-offs across processes (2d did not run, so this is the \
             rounds workload with tasks that share processes; only the hand-offs that \
             crossed processes are drawn)"
        } else {
            "table 2d's hand-offs, every one of which crosses processes"
        };
        let _ = writeln!(
            out,
            "The charts draw, per backend kind, the distribution of {which}: one line per \
             contestant, each point a hand-off time (logarithmic axis) and the share of \
             hand-offs that took at most that long, so a line crosses 0.5 at its p50 and \
             0.99 at its p99. A contestant with no such hand-off has no line. A peer that ran \
             beside more than one form of a backend has a line for each run. The scale-out \
             forms are left out.\n"
        );
        self.chart_links(out, &charts);
    }
}

/// A chart line's name within its kind's chart: the contestant, and the
/// backend's form where it is not the kind's plain one.
fn line_label(b: &BackendResults, by: Contestant) -> String {
    let form = b
        .label
        .strip_prefix(b.kind)
        .map(|rest| rest.trim_start_matches([',', ' ']))
        .unwrap_or(&b.label);
    match (by, form.is_empty()) {
        (_, true) => short_name(by).to_owned(),
        (Contestant::Ours, false) => format!("{} ({form})", short_name(by)),
        (_, false) => format!("{} (beside {form})", short_name(by)),
    }
}

/// A line's name with the hand-offs it was drawn from.
fn counted(label: &str, hand_offs: usize) -> String {
    let noun = if hand_offs == 1 {
        "hand-off"
    } else {
        "hand-offs"
    };
    format!("{label}, {hand_offs} {noun}")
}

/// A contestant's name, short enough for a legend.
fn short_name(by: Contestant) -> &'static str {
    match by {
        Contestant::Ours => "distlock",
        Contestant::MongoPeer => "distributed-lock-mongo",
        Contestant::Tooz => "tooz",
        Contestant::EtcdLockRpc => "etcd's Lock RPC",
        Contestant::PgAdvisoryLock => "sqlx's PgAdvisoryLock",
        Contestant::Rslock => "rslock",
        Contestant::Redlock => "redlock",
        Contestant::RawFlock => "raw blocking flock(2)",
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use distlock::LockKind;

    use super::*;
    use crate::report::{Contended, Settings};
    use crate::scale_out::ScaleOut;
    use crate::timeline::Contention;
    use crate::uncontended::Uncontended;
    use crate::worker::Tenure;

    /// Holds laid end to end, one per process in `processes`, each granted
    /// 1 ms after the one before it ended.
    fn holds_by(processes: &[u32]) -> Contention {
        let holds = processes
            .iter()
            .enumerate()
            .map(|(i, &process)| {
                let at = i as u64 * 2_000_000;
                Tenure {
                    asked_at_ns: 0,
                    sent_ns: 0,
                    in_line_ns: 0,
                    acquired_at_ns: at,
                    released_at_ns: at + 1_000_000,
                    token: i as u64,
                    process,
                    task: i as u32,
                    round: 0,
                    kind: LockKind::Exclusive,
                }
            })
            .collect();
        Contention::from_holds(holds, Duration::from_secs(1))
    }

    fn backend(kind: &'static str, label: &str, contended: Vec<Contended>) -> BackendResults {
        BackendResults {
            kind,
            label: label.to_owned(),
            scale_out: None,
            advisory_mode: false,
            fair: false,
            url: String::new(),
            server_version: None,
            uncontended: Uncontended {
                sides: Vec::new(),
                quiet: None,
                beside: Vec::new(),
            },
            tooz_uncontended: None,
            contended,
            kinds: Vec::new(),
            polling: None,
            curves: Default::default(),
        }
    }

    fn run(single_task_processes: u32, backends: Vec<BackendResults>) -> Run {
        let settings = Settings {
            seconds: Duration::from_secs(1),
            uncontended_seconds: Duration::from_secs(1),
            processes: 4,
            tasks: 4,
            work: Duration::ZERO,
            single_task_processes,
        };
        let mut run = Run::new("bench".to_owned(), settings, Vec::new());
        run.backends = backends;
        run.charts_dir = Some("docs/bench".to_owned());
        run
    }

    fn contended(by: Contestant, scenario: Scenario, processes: &[u32]) -> Contended {
        Contended {
            by,
            scenario,
            result: holds_by(processes),
        }
    }

    #[test]
    fn one_chart_per_kind_with_a_line_per_contestant_that_crossed_processes() {
        let d = Scenario::one_task_each(16);
        let rounds = Scenario::from(Workload::ROUNDS);
        let mut scaled = backend(
            "Redis",
            "Redis, quorum of 3",
            vec![contended(Contestant::Ours, d, &[0, 1])],
        );
        scaled.scale_out = Some(ScaleOut::RedisQuorum { servers: 3 });
        let mut r = run(
            16,
            vec![
                backend(
                    "PostgreSQL",
                    "PostgreSQL",
                    vec![
                        contended(Contestant::Ours, d, &[0, 1, 2, 3]),
                        // Another scenario's run is not drawn.
                        contended(Contestant::PgAdvisoryLock, rounds, &[0, 1]),
                        // A run that never crossed processes gets no line.
                        contended(Contestant::PgAdvisoryLock, d, &[0, 0, 0]),
                    ],
                ),
                backend(
                    "PostgreSQL",
                    "PostgreSQL, advisory mode, fair",
                    vec![contended(Contestant::Ours, d, &[0, 1])],
                ),
                scaled,
                backend(
                    "file",
                    "file",
                    vec![contended(Contestant::Ours, d, &[0, 0])],
                ),
            ],
        );
        let charts = r.hand_off_charts();
        assert_eq!(charts.len(), 1, "{charts:?}");
        let chart = &charts[0];
        assert_eq!(chart.file, "hand-off-postgresql.svg");
        assert!(
            chart.title.contains("16 processes x 1 task (2d)"),
            "{}",
            chart.title
        );
        let lines: Vec<(&str, &[(f64, f64)])> = chart
            .series
            .iter()
            .map(|s| (s.label.as_str(), s.points.as_slice()))
            .collect();
        assert_eq!(
            lines,
            vec![
                (
                    "distlock, 3 hand-offs",
                    &[(1.0, 1.0 / 3.0), (1.0, 2.0 / 3.0), (1.0, 1.0)][..]
                ),
                (
                    "distlock (advisory mode, fair), 1 hand-off",
                    &[(1.0, 1.0)][..]
                ),
            ]
        );
        let mut out = String::new();
        r.hand_off_chart_links(&mut out, rounds);
        assert!(out.is_empty(), "links go below the table drawn only");
        r.hand_off_chart_links(&mut out, d);
        assert!(
            out.contains("](docs/bench/hand-off-postgresql.svg)"),
            "{out}"
        );
        // A partial run's charts have names of their own.
        r.chart_prefix = "partial-postgresql-".to_owned();
        let mut out = String::new();
        r.hand_off_chart_links(&mut out, d);
        assert!(
            out.contains("](docs/bench/partial-postgresql-hand-off-postgresql.svg)"),
            "{out}"
        );
    }

    #[test]
    fn without_2d_the_shared_rounds_are_drawn_and_the_title_says_so() {
        let rounds = Scenario::from(Workload::ROUNDS);
        let r = run(
            0,
            vec![backend(
                "MongoDB",
                "MongoDB",
                vec![
                    contended(Contestant::Ours, rounds, &[0, 0, 1]),
                    contended(Contestant::MongoPeer, rounds, &[0, 1, 0]),
                ],
            )],
        );
        let charts = r.hand_off_charts();
        assert_eq!(charts.len(), 1);
        assert!(charts[0].title.contains("(2b; 2d did not run)"));
        let labels: Vec<&str> = charts[0].series.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "distlock, 1 hand-off",
                "distributed-lock-mongo, 2 hand-offs"
            ]
        );
    }

    #[test]
    fn a_peer_beside_another_form_says_so() {
        let b = backend("PostgreSQL", "PostgreSQL, advisory mode", Vec::new());
        assert_eq!(
            line_label(&b, Contestant::PgAdvisoryLock),
            "sqlx's PgAdvisoryLock (beside advisory mode)"
        );
        assert_eq!(line_label(&b, Contestant::Ours), "distlock (advisory mode)");
        assert_eq!(slug("PostgreSQL"), "postgresql");
    }
}
