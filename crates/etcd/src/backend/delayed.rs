//! A release that takes effect later (core's `min_hold`): the grant's key
//! moves, owner-checked, from the client's session onto an etcd lease of
//! its own whose TTL ends it when it should. The session's renewals and
//! its end then no longer decide when the lock goes, and etcd's leader
//! judges that time by its own clock.

use std::sync::atomic::Ordering;
use std::time::Duration;

use distlock_core::Result;

use crate::error::from_etcd;
use crate::grant::Grant;
use crate::raw::Client;
use crate::raw::etcdserverpb::TxnRequest;
use crate::raw::etcdserverpb::compare::CompareResult;
use crate::requests::{self, create_revision, mod_revision, put_op};
use crate::transactions::run;

/// Puts `grant`'s key, with its value, on a new etcd lease of `remaining`
/// (in whole seconds, rounded up), if the key is still as the grant wrote
/// it. Returns whether it was.
pub(super) async fn move_to_own_lease(
    client: &Client,
    grant: &Grant,
    remaining: Duration,
) -> Result<bool> {
    let current = client
        .range(requests::key(grant.key.clone()))
        .await
        .map_err(|e| from_etcd("reading a lock before its delayed release", e))?;
    let Some(kv) = current
        .kvs
        .into_iter()
        .find(|kv| kv.create_revision == grant.revision && kv.mod_revision == grant.modified)
    else {
        return Ok(false);
    };
    let own = client
        .lease_grant(whole_seconds(remaining))
        .await
        .map_err(|e| from_etcd("granting the lease of a delayed release", e))?;
    // Its expiry deletes the key: that is the release, not a loss.
    grant.releasing.store(true, Ordering::Release);
    // A put keeps the key's create revision, so the fencing token and the
    // waiters' order stay as they were.
    let txn = TxnRequest {
        compare: vec![
            create_revision(grant.key.clone(), CompareResult::Equal, grant.revision),
            mod_revision(grant.key.clone(), CompareResult::Equal, grant.modified),
        ],
        success: vec![put_op(grant.key.clone(), kv.value, own.id)],
        failure: Vec::new(),
    };
    let moved = run(
        client,
        txn,
        "moving a lock onto the lease of its delayed release",
    )
    .await?
    .succeeded;
    if !moved {
        // No key is on it; it would expire by itself anyway.
        let _ = client.lease_revoke(own.id).await;
    }
    Ok(moved)
}

/// `duration` in etcd's whole seconds, rounded up: etcd may lengthen a TTL
/// to its minimum, never shorten it.
fn whole_seconds(duration: Duration) -> i64 {
    let secs = duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
    i64::try_from(secs.max(1)).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_round_up_and_never_reach_zero() {
        assert_eq!(whole_seconds(Duration::from_millis(1)), 1);
        assert_eq!(whole_seconds(Duration::from_secs(2)), 2);
        assert_eq!(whole_seconds(Duration::from_millis(2001)), 3);
    }
}
