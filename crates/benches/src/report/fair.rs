//! The report's goals for fair mode (see `Capabilities::fair`): each fair
//! target beside the same backend's ordinary form, and beside the peer that
//! lets its server do the hand-off.

use super::{BackendResults, Contestant, Run, find, ratio};
use crate::markdown::{goal, short};
use crate::scenarios::Workload;

impl Run {
    /// The fair form of `kind` (`advisory`: PostgreSQL's advisory mode), if
    /// it ran.
    pub(super) fn fair_form(&self, kind: &str, advisory: bool) -> Option<&BackendResults> {
        self.backends
            .iter()
            .find(|b| b.kind == kind && b.fair && b.advisory_mode == advisory)
    }

    /// The goals of every fair form in `workload`.
    pub(super) fn fair_contention_goals(&self, workload: Workload, tasks: usize) -> Vec<String> {
        let scenario = workload.label();
        let mut goals = Vec::new();
        for b in self.backends.iter().filter(|b| b.fair) {
            let Some(ours) = find(b, Contestant::Ours, workload) else {
                continue;
            };
            goals.push(goal(
                ours.out_of_order == Some(0) && ours.tasks_served == tasks,
                format!(
                    "{}, {scenario}: every task served in the order it asked: {} grants out of \
                     asking order, {}/{tasks} tasks served.",
                    b.label,
                    ours.out_of_order
                        .map_or("unknown".into(), |n| n.to_string()),
                    ours.tasks_served,
                ),
            ));
        }
        if let (Some(fair), Some(plain)) =
            (self.fair_form("MongoDB", false), self.backend("MongoDB"))
            && let (Some(f), Some(p)) = (
                find(fair, Contestant::Ours, workload),
                find(plain, Contestant::Ours, workload),
            )
        {
            let factor = ratio(f.cross_p50, p.cross_p50);
            goals.push(goal(
                factor <= 0.6,
                format!(
                    "MongoDB, fair, {scenario}: hand-off p50 to another process at most 0.6 of \
                     the ordinary mode's: {} against {} ({factor:.2}).",
                    short(f.cross_p50),
                    short(p.cross_p50)
                ),
            ));
            if let Some(commands) = f.commands_per_acquisition() {
                goals.push(goal(
                    commands <= 2.0,
                    format!(
                        "MongoDB, fair, {scenario}: at most 2 server commands per \
                         acquisition: {commands:.2}."
                    ),
                ));
            }
        }
        if let (Some(fair), Some(plain)) = (
            self.fair_form("PostgreSQL", false),
            self.backend("PostgreSQL"),
        ) && workload == Workload::ROUNDS
            && let (Some(f), Some(p)) = (
                find(fair, Contestant::Ours, workload),
                find(plain, Contestant::Ours, workload),
            )
        {
            let factor = ratio(f.cross_p50, p.cross_p50);
            goals.push(goal(
                factor <= 0.5,
                format!(
                    "PostgreSQL, lease mode, fair, {scenario}: hand-off p50 to another process \
                     at most half of the ordinary mode's: {} against {} ({factor:.2}).",
                    short(f.cross_p50),
                    short(p.cross_p50)
                ),
            ));
        }
        let sqlx = self
            .backends
            .iter()
            .find_map(|b| find(b, Contestant::PgAdvisoryLock, workload));
        if let (Some(fair), Some(sqlx)) = (self.fair_form("PostgreSQL", true), sqlx)
            && let Some(f) = find(fair, Contestant::Ours, workload)
        {
            let factor = ratio(f.hand_off_p50, sqlx.hand_off_p50);
            goals.push(goal(
                factor <= 1.5,
                format!(
                    "PostgreSQL, advisory mode, fair, {scenario}: hand-off p50 within 1.5x \
                     sqlx's `PgAdvisoryLock`: {} against {} ({factor:.2}x).",
                    short(f.hand_off_p50),
                    short(sqlx.hand_off_p50)
                ),
            ));
        }
        let lock_rpc = self
            .backends
            .iter()
            .find_map(|b| find(b, Contestant::EtcdLockRpc, workload));
        if let (Some(fair), Some(rpc)) = (self.fair_form("etcd", false), lock_rpc)
            && let Some(f) = find(fair, Contestant::Ours, workload)
        {
            goals.push(goal(
                f.hand_off_p50 <= rpc.hand_off_p50,
                format!(
                    "etcd, fair, {scenario}: hand-off p50 no worse than the Lock RPC's: {} \
                     against {}.",
                    short(f.hand_off_p50),
                    short(rpc.hand_off_p50)
                ),
            ));
        }
        goals
    }
}
