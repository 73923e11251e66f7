//! What the tasks of one worker process take on the name: the whole lock
//! (the contention scenario), a semaphore's permit, or either side of a
//! reader-writer lock.

use distlock::Claim;
use distlock::backend::Capabilities;

use crate::markdown::counted;

/// What the tasks of one worker process take on the name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mix {
    /// Every task the whole lock: the contention scenario.
    Exclusive,
    /// Every task one permit of a semaphore of `limit` permits.
    Semaphore { limit: u32 },
    /// The first `writers` tasks of each process take the writer's side,
    /// the others a reader's share.
    ReadersWriters { writers: u32 },
}

impl Mix {
    /// What task `task` of a process takes.
    pub(crate) fn claim(self, task: u32) -> Claim {
        match self {
            Self::Exclusive => Claim::Exclusive,
            Self::Semaphore { limit } => Claim::Permit { limit },
            Self::ReadersWriters { writers } if task < writers => Claim::Exclusive,
            Self::ReadersWriters { .. } => Claim::Shared,
        }
    }

    /// The first claim among this mix's that a backend with `capabilities`
    /// does not grant, if any.
    pub(crate) fn refused_by(self, capabilities: &Capabilities) -> Option<Claim> {
        let claims: &[Claim] = match self {
            Self::Exclusive => &[Claim::Exclusive],
            Self::Semaphore { limit } => &[Claim::Permit { limit }],
            Self::ReadersWriters { .. } => &[Claim::Exclusive, Claim::Shared],
        };
        claims
            .iter()
            .copied()
            .find(|&claim| !capabilities.grants(claim))
    }

    /// The worker's arguments that say what its tasks take.
    pub(crate) fn worker_args(self) -> Vec<String> {
        match self {
            Self::Exclusive => Vec::new(),
            Self::Semaphore { limit } => vec!["--permits".to_owned(), limit.to_string()],
            Self::ReadersWriters { writers } => vec!["--writers".to_owned(), writers.to_string()],
        }
    }

    /// Its name in progress lines and in the report.
    pub(crate) fn label(self) -> String {
        match self {
            Self::Exclusive => "exclusive lock".to_owned(),
            Self::Semaphore { limit } => format!("semaphore of {limit} permits"),
            Self::ReadersWriters { writers } => {
                format!(
                    "reader-writer lock, {} per process",
                    counted(writers, "writer", "writers")
                )
            }
        }
    }

    /// A word for its lock name.
    pub(crate) fn slug(self) -> &'static str {
        match self {
            Self::Exclusive => "exclusive",
            Self::Semaphore { .. } => "semaphore",
            Self::ReadersWriters { .. } => "readers-writers",
        }
    }
}

/// A worker's options that choose its [`Mix`]; neither is the whole lock.
#[derive(Debug, Clone, Copy, clap::Args)]
pub(crate) struct MixArgs {
    /// Every task takes one of this many permits of a semaphore.
    #[arg(long, conflicts_with = "writers")]
    permits: Option<u32>,
    /// A reader-writer lock: this many tasks of the process write, the
    /// others read.
    #[arg(long)]
    writers: Option<u32>,
}

impl MixArgs {
    pub(crate) fn mix(self) -> Mix {
        match (self.permits, self.writers) {
            (Some(limit), _) => Mix::Semaphore { limit },
            (None, Some(writers)) => Mix::ReadersWriters { writers },
            (None, None) => Mix::Exclusive,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_take_what_their_mix_gives_them() {
        let rw = Mix::ReadersWriters { writers: 1 };
        assert_eq!(rw.claim(0), Claim::Exclusive);
        assert_eq!(rw.claim(1), Claim::Shared);
        assert_eq!(rw.claim(3), Claim::Shared);
        let semaphore = Mix::Semaphore { limit: 4 };
        assert_eq!(semaphore.claim(2), Claim::Permit { limit: 4 });
        assert_eq!(Mix::Exclusive.claim(5), Claim::Exclusive);
        let none = Capabilities::lease_based();
        assert_eq!(
            semaphore.refused_by(&none),
            Some(Claim::Permit { limit: 4 })
        );
        assert_eq!(rw.refused_by(&none), Some(Claim::Shared));
        let all = none.with_shared(true).with_semaphores(true);
        assert_eq!(semaphore.refused_by(&all), None);
        assert_eq!(rw.refused_by(&all), None);
    }
}
