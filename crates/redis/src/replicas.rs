//! `?wait_replicas=N`: a grant or an extension counts only once N
//! replicas acknowledged it (Redis's `WAIT`), so that a failover to one of
//! them keeps it. A grant that does not reach them in time is released
//! and the attempt fails; an extension that does not is a failed one,
//! which the keeper retries while the lease lasts.

use std::time::Duration;

use distlock_core::{AcquireRequest, Error, Result};

use crate::node::Node;

/// Confirms a grant just made for `request` on `node`; releases it, owner
/// checked, when fewer than `replicas` have it within half the operation
/// timeout.
///
/// # Errors
/// A transient backend error saying how many replicas had the grant.
pub(crate) async fn confirm_grant(
    node: &Node,
    request: &AcquireRequest,
    replicas: u32,
) -> Result<()> {
    let within = request.operation_timeout / 2;
    let outcome = node.replicated(replicas, within).await;
    if let Ok(acknowledged) = outcome
        && acknowledged >= u64::from(replicas)
    {
        return Ok(());
    }
    // Not ours to keep: a failover could forget it.
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
        within,
        outcome,
        "the grant of",
        request.name.as_str(),
    ))
}

/// Confirms the extensions `results` just made on `node`: those that
/// succeeded count only once `replicas` have them within `timeout`.
pub(crate) async fn confirm_extensions(
    node: &Node,
    mut results: Vec<Result<bool>>,
    replicas: u32,
    timeout: Duration,
) -> Vec<Result<bool>> {
    if !results.iter().any(|result| matches!(result, Ok(true))) {
        return results;
    }
    let outcome = node.replicated(replicas, timeout).await;
    if outcome
        .as_ref()
        .is_ok_and(|acknowledged| *acknowledged >= u64::from(replicas))
    {
        return results;
    }
    let why = short(replicas, timeout, outcome, "an extension of", "a lease").to_string();
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
fn short(replicas: u32, within: Duration, outcome: Result<u64>, what: &str, of: &str) -> Error {
    let found = match outcome {
        Ok(acknowledged) => format!("{acknowledged} acknowledged it"),
        Err(error) => format!("WAIT failed: {error}"),
    };
    Error::Backend {
        backend: "redis",
        message: format!(
            "{what} {of} did not reach {replicas} replica{} within {within:?} ({found}); \
             wait_replicas={replicas} asks that many, so check the replicas' links to the primary",
            if replicas == 1 { "" } else { "s" }
        ),
        source: None,
    }
}
