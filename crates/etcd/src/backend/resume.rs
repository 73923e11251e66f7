//! Taking up a grant by its identity, for a client that restarted while
//! it held a lock (core's `Resumes`).
//!
//! A grant is a key of its name, and its record holds the grant's
//! identity. The grant of a handle is the name's key created at the
//! handle's fencing token (tokens are create revisions), whose record
//! names the handle's identity and claim, and which still holds. Its
//! session must still live by the leader's clock, as etcd reports it: a
//! session whose TTL has run out is not resumed even while etcd has not
//! yet deleted its keys.
//!
//! One transaction, guarded by the key's create and mod revisions as read
//! (nothing wrote the key since), rewrites it with the new identity and
//! holder, on the resuming client's own session. A put keeps the key's
//! create revision, so the fencing token and the key's place among the
//! holders and in line stay as they were; the old session's end no longer
//! deletes it. The grant's owner checks compare the key's mod revision
//! with the grant's last write, so the old holder finds it changed: its
//! watch, which sees every write of its own key, reports the loss, and its
//! confirmation and release find it not theirs. So does a second resume
//! of the same handle, whose identity the record no longer names.

use distlock_core::backend::{AcquireRequest, GrantState, Lease};
use distlock_core::{Error, Result};

use crate::error::from_etcd;
use crate::grant::grant_state;
use crate::keys::{NameRange, Record};
use crate::raw::Client;
use crate::raw::etcdserverpb::TxnRequest;
use crate::raw::etcdserverpb::compare::CompareResult;
use crate::release::lives;
use crate::requests::{create_revision, mod_revision, name_keys, put_op};
use crate::rules::{Entry, holds, in_order};
use crate::session::SessionId;
use crate::transactions::{TRY_ROUNDS, header_revision, run};

/// Takes up `lease`'s grant, on the keys under `prefix`, for `request`
/// on `session`: its state under the new identity, or `None` when no such
/// grant is held (nothing then changed).
///
/// # Errors
/// A backend error (a put on a `session` etcd no longer has is one, which
/// the caller answers with a new session), after which the key may have
/// been taken up; or the key changed at each of [`TRY_ROUNDS`] tries.
pub(super) async fn take_up(
    client: &Client,
    prefix: &str,
    lease: &Lease,
    request: &AcquireRequest,
    session: SessionId,
) -> Result<Option<GrantState>> {
    let Ok(token) = i64::try_from(lease.fencing_token) else {
        return Ok(None);
    };
    let range = NameRange::new(prefix, &lease.name);
    let value = Record::new(request.claim, &request.holder, request.lease_id).to_bytes();
    for _ in 0..TRY_ROUNDS {
        let read = client
            .range(name_keys(&range))
            .await
            .map_err(|e| from_etcd("reading a lock to resume", e))?;
        let entries = in_order(read.kvs.iter().map(Entry::from_kv).collect());
        let Some(position) = entries.iter().position(|entry| entry.revision == token) else {
            return Ok(None);
        };
        let entry = &entries[position];
        let named = entry
            .record
            .as_ref()
            .is_some_and(|record| record.is_of(lease.id));
        if !named || entry.claim != lease.claim || !holds(&entries, position) {
            return Ok(None);
        }
        // By the leader's clock: a TTL run out ends the grant even before
        // etcd deletes its keys.
        if !lives(client, SessionId(entry.session)).await? {
            return Ok(None);
        }
        let txn = TxnRequest {
            compare: vec![
                create_revision(entry.key.clone(), CompareResult::Equal, token),
                mod_revision(entry.key.clone(), CompareResult::Equal, entry.modified),
            ],
            success: vec![put_op(entry.key.clone(), value.clone(), session.0)],
            failure: Vec::new(),
        };
        let response = run(client, txn, "resuming a lock").await?;
        if response.succeeded {
            let written = (token, header_revision(&response));
            let state = grant_state(client, request, entry.key.clone(), written, session);
            return Ok(Some(state));
        }
        // The key was written or deleted since the read: a release, the
        // end of its session, another resume (all of which the next read
        // finds), or a write that keeps the identity (a fair campaign's
        // take-over, a delayed release's move).
    }
    Err(Error::Backend {
        backend: "etcd",
        message: format!(
            "could not resume {}: its key changed at each of {TRY_ROUNDS} tries",
            lease.name
        ),
        source: None,
    })
}
