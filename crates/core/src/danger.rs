//! How endangered a held lease is, short of its loss: set by the keeper,
//! read by whoever watches the lease (see [`RiskSignal`](crate::RiskSignal)).

use tokio::sync::Notify;

use crate::sync::atomic::{AtomicU8, Ordering};

/// A danger to a lease, each outranking the one before: a lease only
/// rises until an extension confirms it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Level {
    ExtensionFailed = 1,
    LittleLeft = 2,
}

/// No danger.
const SAFE: u8 = 0;

/// A lease's danger, set by the keeper (under its schedule's lock, so
/// writes never race) and read by whoever watches the lease.
#[derive(Debug, Default)]
pub(crate) struct Danger {
    level: AtomicU8,
    /// Woken on every change of the level, and at the loss.
    pub(crate) changed: Notify,
}

impl Danger {
    /// Raises the danger to `level`, unless it already stands as high.
    /// Returns whether it rose.
    pub(crate) fn raise(&self, level: Level) -> bool {
        let level = level as u8;
        if self.level.load(Ordering::Acquire) >= level {
            return false;
        }
        self.level.store(level, Ordering::Release);
        self.changed.notify_waiters();
        true
    }

    /// Clears the danger: an extension confirmed the lease.
    pub(crate) fn clear(&self) {
        if self.level.swap(SAFE, Ordering::AcqRel) != SAFE {
            self.changed.notify_waiters();
        }
    }

    /// The danger now; `None` while safe.
    pub(crate) fn level(&self) -> Option<Level> {
        match self.level.load(Ordering::Acquire) {
            1 => Some(Level::ExtensionFailed),
            2 => Some(Level::LittleLeft),
            _ => None,
        }
    }
}
