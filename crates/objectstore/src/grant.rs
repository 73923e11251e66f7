//! What the backend keeps for one grant: its object, its token, and the
//! version of the object its last write made, which the next write
//! replaces.

use std::sync::{Arc, Mutex};

use object_store::UpdateVersion;
use object_store::path::Path;

use distlock_core::backend::{GrantState, Holder, Lease};

/// One grant's state, kept in its [`GrantState`].
#[derive(Debug)]
pub(crate) struct GrantHandle {
    pub(crate) key: Path,
    pub(crate) token: u64,
    pub(crate) holder: Holder,
    /// The version of the object this grant last wrote.
    version: Mutex<UpdateVersion>,
}

impl GrantHandle {
    /// The state of a grant whose write made `version` of `key`.
    pub(crate) fn state(
        key: Path,
        token: u64,
        holder: Holder,
        version: UpdateVersion,
    ) -> GrantState {
        GrantState::from_arc(Arc::new(Self {
            key,
            token,
            holder,
            version: Mutex::new(version),
        }))
    }

    /// The handle of `lease`, if the grant's attempt answered (a lease
    /// whose answer was lost comes back with empty state).
    pub(crate) fn of(lease: &Lease) -> Option<Arc<Self>> {
        lease.state.get_arc::<Self>()
    }

    /// The version the grant's last write made.
    pub(crate) fn version(&self) -> UpdateVersion {
        self.version
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Records the version a later write of the grant made.
    pub(crate) fn wrote(&self, version: UpdateVersion) {
        *self
            .version
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = version;
    }
}
