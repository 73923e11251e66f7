//! What this backend keeps with a grant: the identity the lock document
//! stores it under.
//!
//! A grant is stored under its attempt's lease identity, except one that a
//! fair waiter holds as it was passed on (see `fair`): the pass-on stored it
//! under the waiter's place, and no command has renamed it since. Extensions,
//! releases and hand-overs find the grant by [`stored_id`], and a guard's
//! resume handle names it by [`stored_lease_id`].

use distlock_core::backend::{GrantState, Lease, LeaseId};

use crate::document::lock_id;

/// A grant held as it was passed on to the place of this identity.
#[derive(Debug)]
struct PassedOn(String);

/// The state of a grant held as it was passed on to the place `place`
/// (its identity).
pub(crate) fn passed_on(place: &str) -> GrantState {
    GrantState::new(PassedOn(place.to_owned()))
}

/// The identity `lease`'s grant is stored under.
pub(crate) fn stored_id(lease: &Lease) -> String {
    match lease.state.get::<PassedOn>() {
        Some(PassedOn(place)) => place.clone(),
        None => lock_id(lease.id),
    }
}

/// [`stored_id`] as a lease identity, for a resume handle: a place's
/// identity is 32 hex digits, as a lease's is.
pub(crate) fn stored_lease_id(lease: &Lease) -> LeaseId {
    match lease.state.get::<PassedOn>() {
        Some(PassedOn(place)) => lease_id_of(place).unwrap_or(lease.id),
        None => lease.id,
    }
}

/// A stored identity (32 hex digits) as a lease identity; `None` for any
/// other text.
pub(crate) fn lease_id_of(stored: &str) -> Option<LeaseId> {
    if stored.len() != 32 {
        return None;
    }
    u128::from_str_radix(stored, 16)
        .ok()
        .map(LeaseId::from_u128)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use distlock_core::backend::AcquireRequest;
    use distlock_core::{Claim, Holder, LockName};

    use super::*;

    #[test]
    fn a_grant_held_as_passed_is_found_under_its_place() {
        let request = AcquireRequest::new(
            LockName::new("n").unwrap(),
            Claim::Exclusive,
            Duration::from_secs(1),
            Holder::this_process(None).into(),
        );
        let place = "0123456789abcdef0123456789abcdef";
        let passed = request.granted(7, passed_on(place));
        assert_eq!(stored_id(&passed), place);
        assert_eq!(lock_id(stored_lease_id(&passed)), place);
        let own = request.granted(7, GrantState::none());
        assert_eq!(stored_id(&own), lock_id(request.lease_id));
        assert_eq!(stored_lease_id(&own), request.lease_id);
    }
}
