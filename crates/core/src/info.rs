//! What a store says about a lock: who holds it, and how.

use std::collections::HashMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::claim::{LockKind, Permits};
use crate::name::LockName;

/// Who holds a lock, for inspection only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The holder's host name.
    pub host: String,
    /// The holder's process id.
    pub pid: u32,
    /// The label from [`LockOptions::label`](crate::LockOptions::label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

// distlock is for Unix: the host name below is uname(2)'s, and the file
// backend and the command stand on flock(2), signals and exec. Elsewhere,
// one clear error instead of rustix's missing modules.
#[cfg(not(unix))]
compile_error!(
    "distlock builds on Unix only (Linux, macOS and the BSDs); Windows is not supported"
);

impl Holder {
    /// This process, with an optional label.
    pub fn this_process(label: Option<&str>) -> Self {
        let host = rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned();
        Self {
            host,
            pid: std::process::id(),
            label: label.map(str::to_owned),
        }
    }
}

/// One holder of a lock, as [`Backend::list`](crate::backend::Backend::list) sees it. A name held by
/// several readers, or by several permits of a semaphore, has one entry per
/// holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    /// The lock's name, exactly as given.
    pub name: LockName,
    /// The holder's kind.
    pub kind: LockKind,
    /// For a semaphore, the permits in use out of its limit.
    pub permits: Option<Permits>,
    /// Who holds it, when known.
    pub holder: Option<Holder>,
    /// The fencing token of the current grant, when known.
    pub fencing_token: Option<u64>,
    /// How long until the lease ends unless extended; `None` when it lasts as
    /// long as the holder's process.
    pub expires_in: Option<Duration>,
    /// Who waits for the lock, where the store keeps its waiters; the same
    /// for every holder of one name. A backend lists
    /// [`Waiters::Unknown`]: [`LockClient::list`](crate::LockClient::list)
    /// fills in what the backend's
    /// [`WaiterList`](crate::backend::WaiterList) says.
    pub waiters: Waiters,
}

/// Who waits for a lock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Waiters {
    /// The store does not keep its waiters (each waits on its own: the
    /// file backend's `flock`, memcached's polls), so nobody can say.
    #[default]
    Unknown,
    /// Every waiter, in the order they will be served, first first (in
    /// the order they began where the store serves no order: see
    /// [`WaiterList::serves_in_order`](crate::backend::WaiterList::serves_in_order));
    /// empty when nobody waits.
    Known(Vec<Waiter>),
    /// The waits for the whole lock, which the store keeps (a fair line,
    /// Redis's marks), in the order they will be served (in the order
    /// they began where the store serves no order: see
    /// [`WaiterList::serves_in_order`](crate::backend::WaiterList::serves_in_order));
    /// a wait for a reader's share or a permit keeps no place, so such
    /// waiters may wait unseen. Empty when no wait for the whole lock is
    /// kept.
    WholeLock(Vec<Waiter>),
}

impl Waiters {
    /// The waiters the store keeps, in order: every one
    /// ([`Known`](Self::Known)) or those for the whole lock
    /// ([`WholeLock`](Self::WholeLock)); `None` when the store keeps none.
    pub fn listed(&self) -> Option<&[Waiter]> {
        match self {
            Self::Unknown => None,
            Self::Known(waiters) | Self::WholeLock(waiters) => Some(waiters),
        }
    }
}

/// One wait for a lock, as a store that keeps its waiters lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiter {
    /// What it waits to take.
    pub kind: LockKind,
    /// Who waits, where the store records it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<Holder>,
    /// How long it has waited, by the store's clock, where the store
    /// records when the wait began.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "millis")]
    pub waiting_for: Option<Duration>,
}

/// An optional duration as whole milliseconds, for JSON.
mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        value: &Option<Duration>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(duration) => {
                s.serialize_u64(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
            }
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}

/// The holders `held`, each with the waiters of its name out of `waiting`
/// (every wait the store keeps, in the order each name's are served).
pub(crate) fn with_waiters(
    mut held: Vec<LockInfo>,
    waiting: Vec<(LockName, Waiter)>,
    every_wait: bool,
) -> Vec<LockInfo> {
    let mut by_name: HashMap<LockName, Vec<Waiter>> = HashMap::new();
    for (name, waiter) in waiting {
        by_name.entry(name).or_default().push(waiter);
    }
    for info in &mut held {
        let waiters = by_name.get(&info.name).cloned().unwrap_or_default();
        info.waiters = if every_wait {
            Waiters::Known(waiters)
        } else {
            Waiters::WholeLock(waiters)
        };
    }
    held
}
