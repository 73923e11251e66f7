//! `?wait_replicas=N`: a grant or an extension counts only once N
//! replicas acknowledged it (Redis's `WAIT`), so that a failover to one of
//! them keeps it. A grant that does not reach them in time is released
//! and the attempt fails; an extension that does not is a failed one,
//! which the keeper retries while the lease lasts.
//!
//! `WAIT` counts the replicas that have the writes of the connection it
//! runs on, so it is sent in the same pipeline as the script (or the
//! extensions) it confirms: as a request of its own, a reconnect of the
//! shared connection in between would run it on a connection that wrote
//! nothing, which it answers at once with every connected replica.

use std::time::Duration;

use distlock_core::backend::AcquireRequest;
use distlock_core::{Error, Result};

use crate::node::{Node, Replicas};

/// The `WAIT` that confirms a grant for `request`: half its operation
/// timeout.
pub(crate) fn for_grant(request: &AcquireRequest, replicas: u32) -> Replicas {
    Replicas {
        count: replicas,
        within: request.operation_timeout / 2,
    }
}

/// Confirms a grant just made for `request` on `node`, with `token`,
/// which `waited` (the `WAIT` sent with its script, as `for_grant` asked)
/// says how many replicas acknowledged; releases it, owner checked, when
/// fewer than asked have it, and first withdraws the term it recorded,
/// if it recorded one: nobody led by it.
///
/// # Errors
/// A transient backend error saying how many replicas had the grant.
pub(crate) async fn confirm_grant(
    node: &Node,
    request: &AcquireRequest,
    token: u64,
    replicas: Replicas,
    waited: Result<u64>,
) -> Result<()> {
    if let Ok(acknowledged) = waited
        && acknowledged >= u64::from(replicas.count)
    {
        return Ok(());
    }
    // Not ours to keep: a failover could forget it. Its term goes first,
    // while the grant still keeps the lock, so that no later grant names
    // it as the term before its own.
    if request.records_term
        && let Err(error) = node
            .withdraw_term(
                &request.name,
                token,
                request.lease_id,
                &request.holder,
                request.operation_timeout,
            )
            .await
    {
        tracing::warn!(name = %request.name, %error, "could not withdraw the term of a grant the replicas did not have; observers may report it");
    }
    if let Err(error) = node
        .release(
            &request.name,
            request.claim,
            request.lease_id,
            request.operation_timeout,
        )
        .await
    {
        tracing::warn!(name = %request.name, %error, "could not release a grant the replicas did not have; it ends when its lease runs out");
    }
    Err(short(
        replicas,
        waited,
        "the grant of",
        request.name.as_str(),
    ))
}

/// The `WAIT` that confirms extensions sent within `timeout`: half of it.
pub(crate) fn for_extensions(replicas: u32, timeout: Duration) -> Replicas {
    Replicas {
        count: replicas,
        within: timeout / 2,
    }
}

/// Confirms the extensions `results` just made: those that succeeded
/// count only if `waited` (the `WAIT` sent with them) says that
/// `replicas` have them.
pub(crate) fn confirm_extensions(
    mut results: Vec<Result<bool>>,
    replicas: Replicas,
    waited: Result<u64>,
) -> Vec<Result<bool>> {
    if waited
        .as_ref()
        .is_ok_and(|acknowledged| *acknowledged >= u64::from(replicas.count))
    {
        return results;
    }
    let why = short(replicas, waited, "an extension of", "a lease").to_string();
    for result in &mut results {
        if matches!(result, Ok(true)) {
            *result = Err(Error::Backend {
                backend: "redis",
                message: why.clone(),
                source: None,
            });
        }
    }
    results
}

/// The error of a write that fewer than `replicas` acknowledged.
fn short(replicas: Replicas, waited: Result<u64>, what: &str, of: &str) -> Error {
    let Replicas { count, within } = replicas;
    let found = match waited {
        Ok(acknowledged) => format!("{acknowledged} acknowledged it"),
        Err(error) => format!("WAIT failed: {error}"),
    };
    Error::Backend {
        backend: "redis",
        message: format!(
            "{what} {of} did not reach {count} replica{} within {within:?} ({found}); \
             wait_replicas={count} asks that many, so check the replicas' links to the primary",
            if count == 1 { "" } else { "s" }
        ),
        source: None,
    }
}
