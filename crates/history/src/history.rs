//! What a history holds: operations, each with its process, its invoke and
//! complete times on one monotonic clock, and what it returned.

use std::fmt;

use crate::error::HistoryError;

/// One operation of a history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    /// The process (or client, or task) that made it.
    pub process: u64,
    /// When it was invoked, in nanoseconds on the history's one clock.
    pub invoke_ns: u64,
    /// When its answer arrived; `None` when it never did (the process
    /// crashed, the call timed out), and then its outcome is unknown.
    pub complete_ns: Option<u64>,
    /// What it was, and what it returned.
    pub call: Call,
}

/// An operation and its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// An attempt to take the lock `name`.
    Acquire {
        /// The lock.
        name: String,
        /// What the attempt returned.
        outcome: Acquired,
    },
    /// A release of the lease `token` of the lock `name`.
    Release {
        /// The lock.
        name: String,
        /// The lease's fencing token.
        token: u64,
        /// What the release returned.
        outcome: Done,
    },
    /// An extension of the lease `token` of the lock `name`.
    Extend {
        /// The lock.
        name: String,
        /// The lease's fencing token.
        token: u64,
        /// What the extension returned: `Ok` when the store said the lease
        /// was still the caller's and now lasts longer, `Refused` when it
        /// said the lease was gone.
        outcome: Done,
    },
    /// An administrator's release of the lock `name` from whoever holds it.
    ForceRelease {
        /// The lock.
        name: String,
        /// What it returned: `Ok` when it ended a live grant, `Refused`
        /// when it found none.
        outcome: Done,
    },
    /// The client's report that its lease `token` of `name` is gone: a
    /// point event (invoke and complete at the same instant).
    Lost {
        /// The lock.
        name: String,
        /// The lease's fencing token.
        token: u64,
    },
    /// A write of `value` to `resource`, fenced by `token`.
    FencedWrite {
        /// The fenced resource.
        resource: String,
        /// The writer's fencing token.
        token: u64,
        /// The value written.
        value: u64,
        /// Whether the resource took it.
        outcome: Done,
    },
    /// A read of `resource`: fenced by `token` (which the resource then
    /// remembers as a write's would be), or, without one, a plain read.
    FencedRead {
        /// The fenced resource.
        resource: String,
        /// The reader's fencing token, if it showed one.
        token: Option<u64>,
        /// What the read returned.
        outcome: Read,
    },
    /// The lease `token` of `name` was valid: its holder could act on it
    /// from the op's invocation (the grant's answer) to its completion
    /// (the earliest of the release being sent, `lost()` firing, and the
    /// holder's own deadline). Validities are what exclusion is checked
    /// on (see the crate's docs).
    Held {
        /// The lock.
        name: String,
        /// The lease's fencing token.
        token: u64,
        /// How it was held.
        share: Share,
    },
}

/// How a lease was held: what other leases of its lock may be valid at the
/// same time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Share {
    /// Alone: a writer, or the holder of an exclusive lock.
    Exclusive,
    /// Beside other readers, and no writer.
    Shared,
    /// As one of at most `limit` permits of a semaphore.
    Permit {
        /// How many permits the semaphore has.
        limit: u32,
    },
}

/// What an acquire returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquired {
    /// A lease, with its fencing token.
    Granted {
        /// The lease's fencing token.
        token: u64,
    },
    /// No lease: the lock was held, or the wait timed out.
    NotGranted,
    /// No answer arrived.
    Unknown,
}

/// What a release or a fenced write returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Done {
    /// It took effect: the lease was released, the write accepted.
    Ok,
    /// It did not: the lease was not the caller's any more, the write was
    /// turned away as stale.
    Refused,
    /// No answer arrived.
    Unknown,
}

/// What a read returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// The resource's value.
    Value(u64),
    /// A fenced read turned away as stale.
    Refused,
    /// No answer arrived.
    Unknown,
}

impl Op {
    /// An operation that completed at `complete_ns`.
    pub fn new(process: u64, invoke_ns: u64, complete_ns: u64, call: Call) -> Op {
        Op {
            process,
            invoke_ns,
            complete_ns: Some(complete_ns),
            call,
        }
    }

    /// A validity: lease `token` of `name`, held as `share`, could be acted
    /// on from `from_ns` to `until_ns`.
    pub fn held(
        process: u64,
        from_ns: u64,
        until_ns: u64,
        name: impl Into<String>,
        token: u64,
        share: Share,
    ) -> Op {
        Op::new(
            process,
            from_ns,
            until_ns,
            Call::Held {
                name: name.into(),
                token,
                share,
            },
        )
    }

    /// An operation whose answer never arrived: `call`'s outcome must be
    /// `Unknown`.
    pub fn pending(process: u64, invoke_ns: u64, call: Call) -> Op {
        Op {
            process,
            invoke_ns,
            complete_ns: None,
            call,
        }
    }

    /// A loss report at `at_ns`.
    pub fn lost(process: u64, at_ns: u64, name: impl Into<String>, token: u64) -> Op {
        Op::new(
            process,
            at_ns,
            at_ns,
            Call::Lost {
                name: name.into(),
                token,
            },
        )
    }

    /// Whether the operation's outcome was never seen.
    pub fn is_unknown(&self) -> bool {
        match &self.call {
            Call::Acquire { outcome, .. } => *outcome == Acquired::Unknown,
            Call::Release { outcome, .. }
            | Call::Extend { outcome, .. }
            | Call::ForceRelease { outcome, .. }
            | Call::FencedWrite { outcome, .. } => *outcome == Done::Unknown,
            Call::FencedRead { outcome, .. } => *outcome == Read::Unknown,
            Call::Lost { .. } | Call::Held { .. } => false,
        }
    }

    /// The object the operation acts on: a lock or a resource.
    pub(crate) fn subject(&self) -> Subject {
        match &self.call {
            Call::Acquire { name, .. }
            | Call::Release { name, .. }
            | Call::Extend { name, .. }
            | Call::ForceRelease { name, .. }
            | Call::Lost { name, .. }
            | Call::Held { name, .. } => Subject::Lock(name.clone()),
            Call::FencedWrite { resource, .. } | Call::FencedRead { resource, .. } => {
                Subject::Resource(resource.clone())
            }
        }
    }

    /// Whether it is well formed, and if not, what is wrong with it.
    fn validate(&self) -> Result<(), String> {
        if matches!(self.call, Call::Held { .. }) && self.complete_ns.is_none() {
            return Err(
                "a validity needs its end (the earliest of the release being sent, \
                 `lost()` firing and the holder's deadline); leave out a lease whose end \
                 is not known"
                    .into(),
            );
        }
        match self.complete_ns {
            None if !self.is_unknown() => {
                return Err(
                    "it has an outcome but no completion time; give it the time \
                     its answer arrived, or make its outcome Unknown"
                        .into(),
                );
            }
            Some(complete) if complete < self.invoke_ns => {
                return Err(format!(
                    "it completes at {complete} ns, before its invocation at {} ns; \
                     take both times from the same monotonic clock",
                    self.invoke_ns
                ));
            }
            _ => {}
        }
        match &self.call {
            Call::Lost { .. } if self.complete_ns != Some(self.invoke_ns) => Err(
                "a loss report is a point event; build it with Op::lost(process, at_ns, …)".into(),
            ),
            Call::Held {
                share: Share::Permit { limit: 0 },
                ..
            } => Err("a semaphore has at least one permit; give its real limit".into()),
            Call::FencedRead {
                token: None,
                outcome: Read::Refused,
                ..
            } => Err(
                "a plain read (no token) cannot be refused; give the read its \
                 fencing token, or record the value it returned"
                    .into(),
            ),
            _ => Ok(()),
        }
    }
}

/// A lock or a resource: the checker checks each on its own.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Subject {
    /// The lock of this name.
    Lock(String),
    /// The fenced resource of this name.
    Resource(String),
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subject::Lock(name) => write!(f, "lock {name:?}"),
            Subject::Resource(name) => write!(f, "resource {name:?}"),
        }
    }
}

/// A history: the operations of a run, in any order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    ops: Vec<Op>,
}

impl History {
    /// An empty history.
    pub fn new() -> History {
        History::default()
    }

    /// Adds `op`.
    ///
    /// # Errors
    /// [`HistoryError`] when `op` is not well formed: it completes before it
    /// was invoked, has an outcome but no completion time, is a loss report
    /// with a duration, or is a plain read that was refused.
    pub fn push(&mut self, op: Op) -> Result<(), HistoryError> {
        match op.validate() {
            Ok(()) => {
                self.ops.push(op);
                Ok(())
            }
            Err(problem) => Err(HistoryError::new(self.ops.len(), &op, problem)),
        }
    }

    /// A history of `ops`.
    ///
    /// # Errors
    /// The first operation that [`History::push`] would refuse.
    pub fn from_ops(ops: impl IntoIterator<Item = Op>) -> Result<History, HistoryError> {
        let mut history = History::new();
        for op in ops {
            history.push(op)?;
        }
        Ok(history)
    }

    /// Its operations, in the order they were added.
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// How many operations it has.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether it has none.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "process {}: ", self.process)?;
        match &self.call {
            Call::Acquire { name, outcome } => {
                write!(f, "acquire {name:?} -> ")?;
                match outcome {
                    Acquired::Granted { token } => write!(f, "granted token {token}")?,
                    Acquired::NotGranted => write!(f, "not granted")?,
                    Acquired::Unknown => write!(f, "unknown")?,
                }
            }
            Call::Release {
                name,
                token,
                outcome,
            } => write!(
                f,
                "release {name:?} token {token} -> {}",
                done(*outcome, "ok")
            )?,
            Call::Extend {
                name,
                token,
                outcome,
            } => write!(
                f,
                "extend {name:?} token {token} -> {}",
                done(*outcome, "ok")
            )?,
            Call::ForceRelease { name, outcome } => write!(
                f,
                "release {name:?} by force -> {}",
                done(*outcome, "ended a grant")
            )?,
            Call::Lost { name, token } => write!(f, "lost {name:?} token {token}")?,
            Call::Held { name, token, share } => {
                write!(f, "held {name:?} token {token}")?;
                match share {
                    Share::Exclusive => {}
                    Share::Shared => write!(f, " shared")?,
                    Share::Permit { limit } => write!(f, " as one of {limit} permits")?,
                }
                write!(f, ", valid")?;
            }
            Call::FencedWrite {
                resource,
                token,
                value,
                outcome,
            } => write!(
                f,
                "write {value} to {resource:?} with token {token} -> {}",
                done(*outcome, "accepted")
            )?,
            Call::FencedRead {
                resource,
                token,
                outcome,
            } => {
                write!(f, "read {resource:?}")?;
                if let Some(token) = token {
                    write!(f, " with token {token}")?;
                }
                match outcome {
                    Read::Value(value) => write!(f, " -> {value}")?,
                    Read::Refused => write!(f, " -> refused")?,
                    Read::Unknown => write!(f, " -> unknown")?,
                }
            }
        }
        match self.complete_ns {
            Some(complete) if complete == self.invoke_ns => {
                write!(f, " at {}", millis(self.invoke_ns))
            }
            Some(complete) => write!(f, " [{} .. {}]", millis(self.invoke_ns), millis(complete)),
            None => write!(f, " [{} .. never answered]", millis(self.invoke_ns)),
        }
    }
}

fn done(outcome: Done, ok: &str) -> &str {
    match outcome {
        Done::Ok => ok,
        Done::Refused => "refused",
        Done::Unknown => "unknown",
    }
}

/// Nanoseconds as milliseconds, to the nanosecond.
fn millis(ns: u64) -> String {
    format!("{}.{:06} ms", ns / 1_000_000, ns % 1_000_000)
}
