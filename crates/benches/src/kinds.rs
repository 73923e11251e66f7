//! Semaphores and reader-writer locks under contention: the contention
//! scenario's processes, tasks and rounds, each task taking a permit, a
//! reader's share or the writer's side instead of the whole lock, and what
//! their holds add up to, safety included.
//!
//! The workers are the contention scenario's ([`crate::worker::drive`]), told by
//! a [`Mix`] what each task takes; their holds carry what was held, so the
//! parent can lay every hold of every process on the one wall clock and
//! check that no more than the permits were held at once, and that no reader
//! held beside a writer.

mod section;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use distlock::{Claim, LockKind};

use crate::commands::Counts;
use crate::gather::Gathered;
use crate::mix::Mix;
use crate::timeline::percentile;
use crate::worker::Tenure;

pub(crate) use section::{Plan, write_section};

/// The semaphore's permits.
pub(crate) const PERMITS: u32 = 4;

/// How many tasks of each process take the writer's side of the
/// reader-writer lock; the others read.
pub(crate) const WRITERS_PER_PROCESS: u32 = 1;

/// The kinds this section measures, in order.
pub(crate) const MEASURED: [Mix; 2] = [
    Mix::Semaphore { limit: PERMITS },
    Mix::ReadersWriters {
        writers: WRITERS_PER_PROCESS,
    },
];

/// One kind on one backend.
#[derive(Debug, Clone)]
pub(crate) struct KindRun {
    pub(crate) mix: Mix,
    pub(crate) outcome: KindOutcome,
}

/// What became of one kind on one backend.
#[derive(Debug, Clone)]
pub(crate) enum KindOutcome {
    Measured(Box<KindSummary>),
    /// Not run: the backend's capabilities do not grant this claim.
    LeftOut(Claim),
}

/// One kind's contended run, summed up.
#[derive(Debug, Clone)]
pub(crate) struct KindSummary {
    /// Grants within the window, of every kind.
    pub(crate) acquisitions: usize,
    /// Of which readers' shares.
    pub(crate) reads: usize,
    pub(crate) per_second: f64,
    /// How many hand-offs were measured (see [`hand_offs`]).
    pub(crate) hand_offs: usize,
    pub(crate) hand_off_p50: Duration,
    pub(crate) hand_off_p99: Duration,
    /// How many tasks held the name at least once.
    pub(crate) tasks_served: usize,
    pub(crate) safety: Safety,
    /// Calls that failed (the workers went on).
    pub(crate) errors: u64,
    /// Server commands over the window, where counted.
    pub(crate) commands: Option<Counts>,
    /// The server's own count of its operations, where it keeps one.
    pub(crate) server_ops: Option<Counts>,
}

impl KindSummary {
    /// Sums up what the workers of a run of `mix` reported over `elapsed`.
    pub(crate) fn new(gathered: Gathered, mix: Mix, elapsed: Duration) -> Self {
        let holds = gathered.holds;
        let mut gaps = hand_offs(&holds, mix);
        gaps.sort_unstable();
        let mut served: Vec<(u32, u32)> = holds.iter().map(|h| (h.process, h.task)).collect();
        served.sort_unstable();
        served.dedup();
        Self {
            acquisitions: holds.len(),
            reads: holds.iter().filter(|h| h.kind == LockKind::Shared).count(),
            per_second: holds.len() as f64 / elapsed.as_secs_f64(),
            hand_offs: gaps.len(),
            hand_off_p50: percentile(&gaps, 50),
            hand_off_p99: percentile(&gaps, 99),
            tasks_served: served.len(),
            safety: Safety::of(&holds),
            errors: gathered.errors,
            commands: gathered.commands,
            server_ops: gathered.server_ops,
        }
    }

    /// Server commands per acquisition, where counted.
    pub(crate) fn commands_per_acquisition(&self) -> Option<f64> {
        let commands = self.commands.as_ref()?;
        (self.acquisitions > 0).then(|| commands.total() as f64 / self.acquisitions as f64)
    }
}

/// One edge of a hold, for laying holds on the clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Edge {
    at_ns: u64,
    /// Releases first at the same instant (a grant that follows a release
    /// does not overlap it), except a hold's own release when it lasted no
    /// time at all, which comes after its grant.
    order: u8,
    hold: usize,
    grant: bool,
}

/// Every grant and release of `holds`, in order on the clock.
fn edges<'a>(holds: impl IntoIterator<Item = &'a Tenure>) -> Vec<Edge> {
    let mut edges = Vec::new();
    for (index, hold) in holds.into_iter().enumerate() {
        edges.push(Edge {
            at_ns: hold.acquired_at_ns,
            order: 1,
            hold: index,
            grant: true,
        });
        edges.push(Edge {
            at_ns: hold.released_at_ns,
            order: if hold.released_at_ns == hold.acquired_at_ns {
                2
            } else {
                0
            },
            hold: index,
            grant: false,
        });
    }
    edges.sort_unstable();
    edges
}

/// Hand-offs within each round, on the one clock:
///
/// - a semaphore: from a release made while a task of the round had not
///   yet been granted (so was waiting) to the next grant of the round that
///   took a permit so freed; freed permits go to later grants first in,
///   first out, and a grant that found a permit free that no such release
///   had freed (at the start of a round) is not a hand-off;
/// - a lock (exclusive or reader-writer): from a release that left the
///   name without any holder, while a task of the round had not yet been
///   granted, to the next grant of the round. A reader let in beside
///   readers is not a hand-off.
pub(crate) fn hand_offs(holds: &[Tenure], mix: Mix) -> Vec<Duration> {
    let mut rounds: BTreeMap<u32, Vec<&Tenure>> = BTreeMap::new();
    for hold in holds {
        rounds.entry(hold.round).or_default().push(hold);
    }
    let mut gaps = Vec::new();
    for round in rounds.values() {
        let mut holders = 0usize;
        let mut granted = 0usize;
        let mut freed: VecDeque<u64> = VecDeque::new();
        for edge in edges(round.iter().copied()) {
            if edge.grant {
                let idle = match mix {
                    Mix::Semaphore { limit } => limit as usize > holders + freed.len(),
                    _ => false,
                };
                if !idle && let Some(released_at_ns) = freed.pop_front() {
                    gaps.push(Duration::from_nanos(edge.at_ns - released_at_ns));
                }
                holders += 1;
                granted += 1;
            } else {
                holders = holders.saturating_sub(1);
                let waiting = granted < round.len();
                let frees = matches!(mix, Mix::Semaphore { .. }) || holders == 0;
                if waiting && frees {
                    freed.push_back(edge.at_ns);
                }
            }
        }
    }
    gaps
}

/// What the holds, laid on the one clock, show about safety. A hold is
/// timed from the return of the acquire call to the release call, so it
/// lies within the real grant: an overlap seen here is a real one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Safety {
    /// The most holds of any kind that overlapped at one instant.
    pub(crate) most_holders: usize,
    /// The most readers' holds that overlapped at one instant.
    pub(crate) most_readers: usize,
    /// Readers' holds that overlapped a writer's hold: must be 0.
    pub(crate) readers_beside_writer: usize,
    /// Writers' holds that began while another writer's had not ended:
    /// must be 0.
    pub(crate) writers_beside_writer: usize,
}

impl Safety {
    pub(crate) fn of(holds: &[Tenure]) -> Self {
        let mut safety = Self::default();
        let mut readers = BTreeSet::new();
        let mut beside = vec![false; holds.len()];
        let (mut holders, mut writers) = (0usize, 0usize);
        for edge in edges(holds) {
            let kind = holds[edge.hold].kind;
            if !edge.grant {
                holders = holders.saturating_sub(1);
                match kind {
                    LockKind::Shared => {
                        readers.remove(&edge.hold);
                    }
                    LockKind::Exclusive => writers = writers.saturating_sub(1),
                    LockKind::Semaphore => {}
                }
                continue;
            }
            holders += 1;
            safety.most_holders = safety.most_holders.max(holders);
            match kind {
                LockKind::Shared => {
                    beside[edge.hold] |= writers > 0;
                    readers.insert(edge.hold);
                    safety.most_readers = safety.most_readers.max(readers.len());
                }
                LockKind::Exclusive => {
                    safety.writers_beside_writer += usize::from(writers > 0);
                    for &reader in &readers {
                        beside[reader] = true;
                    }
                    writers += 1;
                }
                LockKind::Semaphore => {}
            }
        }
        safety.readers_beside_writer = beside.iter().filter(|&&b| b).count();
        safety
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn hold(from: u64, to: u64, task: u32, kind: LockKind) -> Tenure {
        Tenure {
            asked_at_ns: from,
            sent_ns: 0,
            in_line_ns: 0,
            acquired_at_ns: from,
            released_at_ns: to,
            token: from,
            process: 0,
            task,
            round: 1,
            kind,
        }
    }

    #[test]
    fn semaphore_hand_offs_pair_freed_permits_with_later_grants() {
        let permit = LockKind::Semaphore;
        // Two permits; four tasks, all waiting from the start of the round.
        // Tasks 0 and 1 take the idle permits (no hand-off); task 0's
        // release at 10 goes to task 2 at 13, task 1's at 11 to task 3 at 16.
        let holds = vec![
            hold(1, 10, 0, permit),
            hold(2, 11, 1, permit),
            hold(13, 20, 2, permit),
            hold(16, 25, 3, permit),
        ];
        let gaps = hand_offs(&holds, Mix::Semaphore { limit: 2 });
        assert_eq!(gaps, [Duration::from_nanos(3), Duration::from_nanos(5)]);
        let safety = Safety::of(&holds);
        assert_eq!(safety.most_holders, 2);
        assert_eq!(safety.readers_beside_writer, 0);
    }

    #[test]
    fn a_release_with_nobody_left_waiting_is_no_hand_off() {
        let permit = LockKind::Semaphore;
        let holds = vec![hold(1, 10, 0, permit), hold(12, 20, 1, permit)];
        // One permit: task 0's release goes to task 1.
        assert_eq!(
            hand_offs(&holds, Mix::Semaphore { limit: 1 }),
            [Duration::from_nanos(2)]
        );
        // Two permits: task 1 found one idle, whenever it came.
        assert!(hand_offs(&holds, Mix::Semaphore { limit: 2 }).is_empty());
        // A later round is not laid after this one.
        let mut later = holds.clone();
        later[1].round = 2;
        assert!(hand_offs(&later, Mix::Semaphore { limit: 1 }).is_empty());
    }

    #[test]
    fn reader_writer_hand_offs_start_when_the_name_is_free() {
        use LockKind::{Exclusive as W, Shared as R};
        // Two readers together; the writer gets in 4 after the last of
        // them left; a reader gets in 2 after the writer left.
        let holds = vec![
            hold(0, 10, 1, R),
            hold(1, 12, 2, R),
            hold(16, 30, 0, W),
            hold(32, 40, 3, R),
        ];
        let gaps = hand_offs(&holds, Mix::ReadersWriters { writers: 1 });
        assert_eq!(gaps, [Duration::from_nanos(4), Duration::from_nanos(2)]);
        let safety = Safety::of(&holds);
        assert_eq!(safety.most_readers, 2);
        assert_eq!(safety.readers_beside_writer, 0);
        assert_eq!(safety.writers_beside_writer, 0);
    }

    #[test]
    fn readers_beside_a_writer_are_counted_either_way_round() {
        use LockKind::{Exclusive as W, Shared as R};
        let holds = vec![
            // A reader already in when the writer comes.
            hold(0, 10, 1, R),
            hold(5, 20, 0, W),
            // A reader that comes while the writer holds.
            hold(15, 18, 2, R),
            // Another writer before the first has left.
            hold(19, 25, 4, W),
            // A reader after both: fine.
            hold(30, 31, 3, R),
        ];
        let safety = Safety::of(&holds);
        assert_eq!(safety.readers_beside_writer, 2);
        assert_eq!(safety.writers_beside_writer, 1);
        assert_eq!(safety.most_holders, 2);
    }

    #[test]
    fn holds_that_touch_or_last_no_time_do_not_overlap() {
        let permit = LockKind::Semaphore;
        let holds = vec![
            hold(0, 10, 0, permit),
            hold(10, 20, 1, permit),
            hold(20, 20, 2, permit),
        ];
        assert_eq!(Safety::of(&holds).most_holders, 1);
        assert_eq!(
            hand_offs(&holds, Mix::Semaphore { limit: 1 }),
            [Duration::ZERO, Duration::ZERO]
        );
    }

    #[test]
    fn the_summary_counts_reads_tasks_and_commands() {
        use LockKind::{Exclusive as W, Shared as R};
        let mut holds = vec![hold(0, 10, 1, R), hold(12, 20, 0, W)];
        holds[1].process = 1;
        let gathered = Gathered {
            holds,
            commands: Some(Counts(
                [("findAndModify".to_owned(), 6)].into_iter().collect(),
            )),
            server_ops: None,
            errors: 1,
        };
        let summary = KindSummary::new(
            gathered,
            Mix::ReadersWriters { writers: 1 },
            Duration::from_secs(2),
        );
        assert_eq!((summary.acquisitions, summary.reads), (2, 1));
        assert_eq!(summary.per_second, 1.0);
        assert_eq!(summary.tasks_served, 2);
        assert_eq!(summary.hand_offs, 1);
        assert_eq!(summary.hand_off_p50, Duration::from_nanos(2));
        assert_eq!(summary.commands_per_acquisition(), Some(3.0));
        assert_eq!(summary.errors, 1);
    }
}
