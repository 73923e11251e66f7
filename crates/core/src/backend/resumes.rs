//! Taking a grant up again by its identity, for a process that restarted
//! while it held a lock; see [`Abilities::resumes`].
//!
//! [`Abilities::resumes`]: crate::backend::Abilities::resumes

use async_trait::async_trait;

use crate::error::Result;

use super::request::{AcquireRequest, Lease, LeaseId};
use super::state::GrantState;

/// Why a backend that says nothing cannot resume: its grants are not kept
/// under an identity another client could name.
pub(crate) const NO_RESUME: &str =
    "this backend keeps no grant under its identity for another client to take up";

/// How a backend takes up a grant made by another client; see
/// [`Abilities::resumes`](crate::backend::Abilities::resumes).
#[derive(Clone, Copy)]
pub enum Resuming<'a> {
    /// By the backend's own call.
    By(&'a dyn Resumes),
    /// Not at all, for the reason given (a grant that dies with its
    /// process: an open file, a database session), which
    /// [`LockClient::resume`](crate::LockClient::resume) fails with.
    Never(&'static str),
}

impl std::fmt::Debug for Resuming<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::By(_) => f.write_str("By(..)"),
            Self::Never(why) => f.debug_tuple("Never").field(why).finish(),
        }
    }
}

/// A backend's way of taking up a grant by its identity.
#[async_trait]
pub trait Resumes: Send + Sync {
    /// Takes up `lease` for `request`, if the store still holds it: the
    /// grant on `lease.name` of `lease.claim` whose identity is `lease.id`
    /// and whose fencing token is `lease.fencing_token`, not yet expired by
    /// the store's clock. In one atomic step its identity becomes
    /// `request.lease_id` and it lasts `request.lease` from the server's
    /// now, as after an extension; its claim, its token and its place
    /// among the holders stay as they were. A backend that records holders
    /// may record `request.holder` instead of the old one.
    ///
    /// Answers the state of the grant under its new identity, or `None`
    /// when no such grant is held (released, run out, taken over, or
    /// resumed already), in which case nothing changed.
    ///
    /// `lease.state` is empty: the backend finds the grant by its name and
    /// identity alone. Because the identity changes, two resumes of one
    /// grant cannot both hold it: the second finds the old identity gone,
    /// and so does the old holder at its next extension, if it still runs.
    ///
    /// # Errors
    /// A backend error, after which the outcome is unknown: core then
    /// releases the new identity.
    ///
    /// # Cancel safety
    /// As for every [`Backend`](crate::backend::Backend) call: dropped, it
    /// either happened or not.
    async fn resume(&self, lease: &Lease, request: &AcquireRequest) -> Result<Option<GrantState>>;

    /// The identity the store keeps `lease`'s grant under, which
    /// [`LockGuard::handle`](crate::LockGuard::handle) names and
    /// [`resume`](Self::resume) then finds it by: `lease.id`, unless the
    /// backend stored the grant under another identity that its
    /// [`GrantState`] remembers (MongoDB's fair mode keeps a grant passed
    /// on to a waiter under the waiter's place in line, which no command
    /// of the waiter renamed).
    fn stored_identity(&self, lease: &Lease) -> LeaseId {
        lease.id
    }
}
