//! The process's limit on open files, raised to fit the held-locks curve:
//! the file backend keeps one descriptor open for each lock it holds, so
//! 100,000 held locks need a limit above 100,000, where many systems set
//! 1,024 or 20,000.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Descriptors kept beside the locks' own: connections, servers' pipes,
/// the report.
const SPARE: u64 = 1024;

/// The limit on open files before and after [`raise_for`], beside what
/// it wanted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OpenFiles {
    pub(crate) before: Option<u64>,
    pub(crate) after: Option<u64>,
    /// The hard limit afterwards, which only a privileged process raises.
    pub(crate) hard: Option<u64>,
    pub(crate) wanted: u64,
}

impl OpenFiles {
    /// The report's words for the limit the run had.
    pub(crate) fn describe(&self) -> String {
        let shown = |limit: Option<u64>| limit.map_or_else(|| "none".to_owned(), |n| n.to_string());
        let raised = if self.before == self.after {
            format!("{}, not raised", shown(self.after))
        } else {
            format!("{}, raised from {}", shown(self.after), shown(self.before))
        };
        if self.after.is_some_and(|after| after < self.wanted) {
            format!(
                "{raised}; {} wanted, above the hard limit of {}, which this process may not raise",
                self.wanted,
                shown(self.hard)
            )
        } else {
            raised
        }
    }
}

/// Raises the soft limit on open files so that `locks` locks fit, up to
/// the hard limit, and the hard limit too where the process may (as root
/// may, up to the kernel's `fs.nr_open`). What cannot be raised is left:
/// the points that need more then fail with the system's own error.
pub(crate) fn raise_for(locks: usize) -> OpenFiles {
    let limit = getrlimit(Resource::Nofile);
    let before = limit.current;
    let wanted = (locks as u64).saturating_add(SPARE);
    if before.is_some_and(|current| current < wanted) {
        let both = Rlimit {
            current: Some(wanted),
            maximum: limit.maximum.map(|maximum| maximum.max(wanted)),
        };
        if setrlimit(Resource::Nofile, both).is_err() {
            // Not allowed to raise the hard limit: the soft one up to it.
            let soft = Rlimit {
                current: limit.maximum.map(|maximum| maximum.min(wanted)),
                maximum: limit.maximum,
            };
            let _ = setrlimit(Resource::Nofile, soft);
        }
    }
    let after = getrlimit(Resource::Nofile);
    OpenFiles {
        before,
        after: after.current,
        hard: after.maximum,
        wanted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_says_whether_the_limit_was_raised_and_why_not() {
        let raised = OpenFiles {
            before: Some(1024),
            after: Some(101_024),
            hard: Some(1_048_576),
            wanted: 101_024,
        };
        assert_eq!(raised.describe(), "101024, raised from 1024");
        let kept = OpenFiles {
            before: Some(20_000),
            after: Some(20_000),
            hard: Some(20_000),
            wanted: 101_024,
        };
        assert_eq!(
            kept.describe(),
            "20000, not raised; 101024 wanted, above the hard limit of 20000, which this \
             process may not raise"
        );
    }

    #[test]
    fn a_limit_already_high_enough_is_left_alone() {
        let now = getrlimit(Resource::Nofile);
        let seen = raise_for(0);
        assert_eq!((seen.before, seen.after), (now.current, now.current));
        assert_eq!(
            seen.describe(),
            format!("{}, not raised", now.current.unwrap_or(0))
        );
    }
}
