//! A contended scenario: a [`Workload`], and how its tasks are spread over
//! worker processes ([`Spread`]).

use crate::worker::Workload;

/// How the tasks of a contended run are spread over processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spread {
    /// The run's `--processes`, each with `--tasks` tasks: a process's
    /// tasks contend with each other as well as with other processes.
    Shared,
    /// `processes` processes of one task each: every hand-off within a
    /// round goes to another process.
    OneTaskEach { processes: u32 },
}

/// One contended scenario, which every contestant runs in turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Scenario {
    pub(crate) workload: Workload,
    pub(crate) spread: Spread,
}

impl From<Workload> for Scenario {
    /// `workload` on the run's shared processes.
    fn from(workload: Workload) -> Self {
        Self {
            workload,
            spread: Spread::Shared,
        }
    }
}

impl Scenario {
    /// Rounds without work on `processes` processes of one task each.
    pub(crate) fn one_task_each(processes: u32) -> Self {
        Self {
            workload: Workload::ROUNDS,
            spread: Spread::OneTaskEach { processes },
        }
    }

    /// The scenarios of a run, in order: every workload of [`Workload::all`]
    /// on the shared processes, then, unless `single_task_processes` is 0,
    /// rounds on that many processes of one task each.
    pub(crate) fn all(work: std::time::Duration, single_task_processes: u32) -> Vec<Self> {
        let mut all: Vec<Self> = Workload::all(work).into_iter().map(Self::from).collect();
        if single_task_processes > 0 {
            all.push(Self::one_task_each(single_task_processes));
        }
        all
    }

    /// Its processes and tasks per process, where the shared spread has
    /// `processes` × `tasks`.
    pub(crate) fn processes_and_tasks(self, processes: u32, tasks: u32) -> (u32, u32) {
        match self.spread {
            Spread::Shared => (processes, tasks),
            Spread::OneTaskEach { processes } => (processes, 1),
        }
    }

    /// Its name in progress lines and goals: the workload's, and the
    /// spread's when it is not the shared one.
    pub(crate) fn label(self) -> String {
        match self.spread {
            Spread::Shared => self.workload.label(),
            Spread::OneTaskEach { processes } => {
                format!("{}, {processes} processes x 1 task", self.workload.label())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn one_task_each_comes_last_and_only_when_asked() {
        let all = Scenario::all(Duration::from_millis(5), 16);
        assert_eq!(all.len(), 4);
        assert_eq!(all[3], Scenario::one_task_each(16));
        assert_eq!(all[3].processes_and_tasks(4, 4), (16, 1));
        assert_eq!(all[0].processes_and_tasks(4, 4), (4, 4));
        assert_eq!(all[3].label(), "rounds, 16 processes x 1 task");
        assert_eq!(Scenario::all(Duration::ZERO, 0).len(), 2);
    }
}
