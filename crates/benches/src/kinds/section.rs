//! The report's section on semaphores and reader-writer locks.

use std::fmt::Write;
use std::time::Duration;

use super::{KindOutcome, KindRun, KindSummary, MEASURED, PERMITS, WRITERS_PER_PROCESS};
use crate::markdown::{commands_line, counted, goal, goals_list, opt, short};
use crate::mix::Mix;

/// What the section says about the run it reports.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    pub(crate) processes: u32,
    pub(crate) tasks: u32,
    pub(crate) seconds: Duration,
    pub(crate) work: Duration,
}

/// Writes the section "Semaphores and reader-writer locks", numbered
/// `number`: its text, one table per kind with a line for each backend left
/// out, and the safety checks. `backends` are each backend's kind and runs.
pub(crate) fn write_section(
    out: &mut String,
    number: u32,
    plan: Plan,
    backends: &[(&str, &[KindRun])],
) {
    let Plan {
        processes,
        tasks,
        seconds,
        work,
    } = plan;
    let writers = WRITERS_PER_PROCESS.min(tasks);
    let readers = tasks - writers;
    let held = if work.is_zero() {
        "releases it at once".to_owned()
    } else {
        format!(
            "holds it for {} (a sleep, the contention scenario's work) and releases it",
            humantime::format_duration(work)
        )
    };
    let _ = writeln!(out, "## {number}. Semaphores and reader-writer locks\n");
    let _ = writeln!(
        out,
        "The contention scenario's layout and rounds, {tasks} tasks in each of {processes} \
         processes on one name, each process sharing one `LockClient` among its tasks, for \
         {} per kind and backend: the parent starts a round by telling every process at once, \
         every task then takes the name exactly once, {held}, and the round ends when every \
         task has had its turn (or the window closed). The tasks take:\n",
        humantime::format_duration(seconds),
    );
    let _ = writeln!(
        out,
        "- **Semaphore of {PERMITS} permits**: every task takes one permit with \
         `acquire_with(name, AcquireOptions::new().permit({PERMITS}))`.\n\
         - **Reader-writer lock**: in each process, the first {} the writer's side with \
         `acquire` and the other {readers} a reader's share with `AcquireOptions::new().shared()`: {} and {} \
         in all, each once per round.\n",
        if writers == 1 {
            "task takes".to_owned()
        } else {
            format!("{writers} tasks take")
        },
        counted(writers * processes, "writer", "writers"),
        counted(readers * processes, "reader", "readers"),
    );
    let _ = writeln!(
        out,
        "A backend runs a kind only if its capabilities grant it \
         (`Capabilities::grants`); otherwise a line below the kind's table says it was left \
         out and why. A **hold** is timed as in the contention scenario, from the return of \
         the acquire call to the release call, by the wall clock that every process shares, \
         so the holds of all processes can be laid on one clock, and each lies within the \
         real grant. **Hand-off** is measured within a round only, since only there is \
         somebody known to wait:\n"
    );
    let _ = writeln!(
        out,
        "- for the semaphore, from a release made while some task of the round had not yet \
         been granted, to the next grant of the round that took a permit so freed (freed \
         permits go to later grants first in, first out; a grant that found a permit free \
         that no such release had freed, at the start of a round, is not a hand-off);\n\
         - for the reader-writer lock, from a release that left the name with no holder (a \
         writer's, or the last reader's) while some task of the round had not yet been \
         granted, to the next grant of the round, reader or writer; a reader let in beside \
         readers who hold is not a hand-off.\n\n\
         Like the contention scenario's, a hand-off runs from the release call to the return \
         of the next acquire call: it does not include the work.\n"
    );
    let _ = writeln!(
        out,
        "*Acquisitions* count every grant within the window (permits, readers and writers \
         alike); *server commands per acquisition* divide the commands the server received \
         over the window, counted as in the contention scenario, by those grants. The safety \
         columns are judged from the same holds on the one clock: *most holders at once* is \
         the largest number of holds that overlapped at any instant (at most {PERMITS} for the \
         semaphore); *most readers at once* shows that readers did share; *readers beside a \
         writer* is how many readers' holds overlapped a writer's, and *writers beside a \
         writer* how many writers' holds began before another writer's had ended (both must \
         be 0). As each hold lies within the real grant, an overlap seen is a real one; an \
         overlap could go unseen only if it lasted less than the time from a grant to the \
         return of its acquire call, or from a release call to the release itself.\n"
    );
    let mut checks = Vec::new();
    for (letter, mix) in ['a', 'b'].into_iter().zip(MEASURED) {
        let title = match mix {
            Mix::Semaphore { limit } => format!("Semaphore of {limit} permits"),
            _ => format!(
                "Reader-writer lock: {} and {} per process",
                counted(writers, "writer", "writers"),
                counted(readers, "reader", "readers"),
            ),
        };
        let _ = writeln!(out, "### {number}{letter}. {title}\n");
        table(out, mix, tasks * processes, backends);
        for &(kind, runs) in backends {
            for run in runs.iter().filter(|run| run.mix == mix) {
                if let KindOutcome::Measured(r) = &run.outcome {
                    checks.push(check(kind, mix, r));
                }
            }
        }
    }
    goals_list(out, &checks);
}

/// The table of one kind, the backends left out, and the commands by name.
fn table(out: &mut String, mix: Mix, tasks: u32, backends: &[(&str, &[KindRun])]) {
    let rw = matches!(mix, Mix::ReadersWriters { .. });
    if rw {
        let _ = writeln!(
            out,
            "| backend | acquisitions (reads + writes) | per second | hand-offs | hand-off p50 | hand-off p99 | tasks served | server commands per acquisition | most readers at once | readers beside a writer | writers beside a writer | errors |"
        );
        let _ = writeln!(
            out,
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
    } else {
        let _ = writeln!(
            out,
            "| backend | acquisitions | per second | hand-offs | hand-off p50 | hand-off p99 | tasks served | server commands per acquisition | most holders at once | errors |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    }
    let mut left_out = Vec::new();
    let mut by_command = Vec::new();
    for &(kind, runs) in backends {
        for run in runs.iter().filter(|run| run.mix == mix) {
            let r = match &run.outcome {
                KindOutcome::Measured(r) => r,
                KindOutcome::LeftOut(claim) => {
                    left_out.push(format!(
                        "- {kind}: left out; its capabilities do not grant {claim} \
                         (it answers `Error::Unsupported`)."
                    ));
                    continue;
                }
            };
            let acquisitions = if rw {
                format!(
                    "{} ({} + {})",
                    r.acquisitions,
                    r.reads,
                    r.acquisitions - r.reads
                )
            } else {
                r.acquisitions.to_string()
            };
            let safety = if rw {
                format!(
                    "{} | {} | {}",
                    r.safety.most_readers,
                    r.safety.readers_beside_writer,
                    r.safety.writers_beside_writer
                )
            } else {
                r.safety.most_holders.to_string()
            };
            // No hand-off measured: no percentile either.
            let hand_off = |d| {
                if r.hand_offs == 0 {
                    "—".to_owned()
                } else {
                    short(d)
                }
            };
            let _ = writeln!(
                out,
                "| {kind} | {acquisitions} | {:.0} | {} | {} | {} | {}/{tasks} | {} | {safety} | {} |",
                r.per_second,
                r.hand_offs,
                hand_off(r.hand_off_p50),
                hand_off(r.hand_off_p99),
                r.tasks_served,
                opt(r.commands_per_acquisition()),
                r.errors,
            );
            if let Some(commands) = &r.commands {
                by_command.push(commands_line(
                    kind,
                    commands,
                    r.server_ops.as_ref(),
                    r.acquisitions.max(1) as f64,
                ));
            }
        }
    }
    let _ = writeln!(out);
    for line in &left_out {
        let _ = writeln!(out, "{line}");
    }
    if !left_out.is_empty() {
        let _ = writeln!(out);
    }
    if !by_command.is_empty() {
        let _ = writeln!(out, "Server commands per acquisition, by command:\n");
        for line in &by_command {
            let _ = writeln!(out, "{line}");
        }
        let _ = writeln!(out);
    }
}

/// The safety check of one measured kind, as a goal.
fn check(kind: &str, mix: Mix, r: &KindSummary) -> String {
    let s = r.safety;
    match mix {
        Mix::Semaphore { limit } => goal(
            s.most_holders <= limit as usize,
            format!(
                "{kind}, semaphore of {limit} permits: never more than {limit} holders at once: \
                 at most {} seen, over {} acquisitions.",
                s.most_holders, r.acquisitions
            ),
        ),
        _ => goal(
            s.readers_beside_writer == 0 && s.writers_beside_writer == 0,
            format!(
                "{kind}, reader-writer lock: no reader beside a writer and no writer beside \
                 another: {} and {} seen, over {} reads and {} writes (at most {} readers at \
                 once).",
                s.readers_beside_writer,
                s.writers_beside_writer,
                r.reads,
                r.acquisitions - r.reads,
                s.most_readers
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use distlock::{Claim, LockKind};

    use super::*;
    use crate::gather::Gathered;
    use crate::kinds::tests::hold;
    use crate::worker::Tenure;

    #[test]
    fn the_section_shows_what_ran_what_was_left_out_and_the_checks() {
        use LockKind::{Exclusive as W, Semaphore as P, Shared as R};
        let summary = |holds: Vec<Tenure>, mix| {
            let gathered = Gathered {
                holds,
                ..Gathered::default()
            };
            KindOutcome::Measured(Box::new(KindSummary::new(
                gathered,
                mix,
                Duration::from_secs(1),
            )))
        };
        let [semaphore, rw] = MEASURED;
        let file = [
            KindRun {
                mix: semaphore,
                outcome: summary(vec![hold(0, 10, 0, P), hold(11, 20, 1, P)], semaphore),
            },
            KindRun {
                mix: rw,
                outcome: summary(vec![hold(0, 10, 1, R), hold(5, 20, 0, W)], rw),
            },
        ];
        let memcached = [
            KindRun {
                mix: semaphore,
                outcome: KindOutcome::LeftOut(Claim::Permit { limit: 4 }),
            },
            KindRun {
                mix: rw,
                outcome: KindOutcome::LeftOut(Claim::Shared),
            },
        ];
        let mut out = String::new();
        let plan = Plan {
            processes: 4,
            tasks: 4,
            seconds: Duration::from_secs(5),
            work: Duration::from_millis(5),
        };
        write_section(
            &mut out,
            3,
            plan,
            &[("file", &file[..]), ("memcached", &memcached[..])],
        );
        assert!(
            out.contains("## 3. Semaphores and reader-writer locks"),
            "{out}"
        );
        assert!(out.contains("### 3a. Semaphore of 4 permits"), "{out}");
        assert!(
            out.contains("### 3b. Reader-writer lock: 1 writer and 3 readers per process"),
            "{out}"
        );
        assert!(
            out.contains("the first task takes the writer's side with `acquire` and the other 3"),
            "{out}"
        );
        assert!(out.contains("4 writers and 12 readers in all"), "{out}");
        // Two of four permits taken: both found one idle, so no hand-off.
        assert!(
            out.contains("| file | 2 | 2 | 0 | — | — | 2/16 | — | 1 | 0 |"),
            "{out}"
        );
        assert!(
            out.contains("| file | 2 (1 + 1) | 2 | 0 | — | — | 2/16 | — | 1 | 1 | 0 | 0 |"),
            "{out}"
        );
        assert!(
            out.contains("- memcached: left out; its capabilities do not grant a shared"),
            "{out}"
        );
        assert!(
            out.contains("**Met** — file, semaphore of 4 permits: never more than 4"),
            "{out}"
        );
        assert!(
            out.contains("**Not met** — file, reader-writer lock: no reader beside a writer"),
            "{out}"
        );
    }
}
