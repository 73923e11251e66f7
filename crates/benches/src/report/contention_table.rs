//! Section 2's tables: one per contended scenario, every contestant side
//! by side, its acquisitions and hand-offs split into those within a
//! process and those across processes.

use std::fmt::Write;
use std::time::Duration;

use super::Run;
use super::contestants::{between_tries, promises};
use crate::markdown::{commands_line, opt, short};
use crate::scenario::{Scenario, Spread};
use crate::timeline::Contention;
use crate::worker::Workload;

/// The table's header, and its alignment row.
const HEADER: &str = "| backend | contender | between tries | fencing token / lease | \
    acquisitions | per second | in process: per second, hand-off p50, p99 | across \
    processes: per second, hand-off p50, p99, mean | all hand-offs: count, p50, p99, mean | \
    tasks served | out of asking order | out of line order | server commands per acquisition \
    | overlaps | errors |\n|---|---|---|---|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|";

/// The title of `scenario`'s table.
fn title(scenario: Scenario) -> String {
    match (scenario.spread, scenario.workload) {
        (Spread::OneTaskEach { processes }, _) => {
            format!("Rounds on {processes} processes of one task each")
        }
        (Spread::Shared, Workload::TightLoop) => "Tight loop".to_owned(),
        (Spread::Shared, Workload::ROUNDS) => "Rounds: every task once per round".to_owned(),
        (Spread::Shared, Workload::Rounds { work }) => {
            format!("Rounds with {} of work", humantime::format_duration(work))
        }
    }
}

/// A percentile of `count` hand-offs: a dash where there were none, which a
/// zero would hide.
fn of(count: usize, value: Duration) -> String {
    if count == 0 {
        "—".into()
    } else {
        short(value)
    }
}

/// The measured cells of one run, from *acquisitions* to *errors*, among
/// `tasks` tasks.
fn cells(r: &Contention, tasks: u32) -> String {
    format!(
        "{} | {:.0} | {:.0}, {}, {} | {:.0}, {}, {}, {} | {}, {}, {}, {} | {}/{tasks} | {} | {} | \
         {} | {} | {}",
        r.acquisitions,
        r.per_second,
        r.per_second_in_process(),
        of(r.in_process, r.in_p50),
        of(r.in_process, r.in_p99),
        r.per_second_across(),
        of(r.cross_process, r.cross_p50),
        of(r.cross_process, r.cross_p99),
        of(r.cross_process, r.cross_mean),
        r.hand_offs,
        short(r.hand_off_p50),
        short(r.hand_off_p99),
        short(r.hand_off_mean),
        r.tasks_served,
        r.out_of_order.map_or("—".into(), |n| n.to_string()),
        r.out_of_line.map_or("—".into(), |o| o.grants.to_string()),
        opt(r.commands_per_acquisition()),
        r.overlaps,
        r.errors
    )
}

impl Run {
    /// Table 2`letter`: every contestant's run in `scenario`, and the
    /// server commands of each by name.
    pub(super) fn contention_table(&self, out: &mut String, letter: char, scenario: Scenario) {
        let s = &self.settings;
        let (processes, tasks) = scenario.processes_and_tasks(s.processes, s.tasks);
        let _ = writeln!(out, "### 2{letter}. {}\n\n{HEADER}", title(scenario));
        for b in &self.backends {
            for c in b.contended.iter().filter(|c| c.scenario == scenario) {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} |",
                    b.label,
                    self.contestant(c.by),
                    between_tries(b, c.by),
                    promises(c.by),
                    cells(&c.result, processes * tasks),
                );
            }
        }
        let _ = writeln!(out, "\nServer commands per acquisition, by command:\n");
        for b in &self.backends {
            for c in b.contended.iter().filter(|c| c.scenario == scenario) {
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
}
