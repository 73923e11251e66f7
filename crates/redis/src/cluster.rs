//! Cluster mode's own operations, on the one node whose connection reaches
//! every master: extensions batched per master, and what every master says
//! of itself.
//!
//! Everything else is single mode's code on a cluster connection: each of
//! a name's scripts touches keys of one hash tag, so the driver sends it
//! to the master of that slot, and follows `MOVED` and `ASK`.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::{Lease, ServerInfo};
use distlock_core::{Error, Result};
use futures::future::join_all;
use redis::ErrorKind;
use redis::Value;
use redis::cluster_async::ClusterConnection;

use crate::deployment;
use crate::error::{from_redis, timed_out, unexpected};
use crate::node::Node;
use crate::scripts::SCRIPTS;
use crate::slots::{OnMaster, SlotOwners, group_by_master, pipeline_to_slot};

/// Extends `leases` on a cluster, through `node`: one pipeline per master,
/// as the slot map last read has it, all at once, all within `timeout`
/// (each batch gets what reading the map left of it). Each master's batch
/// has the time to itself: a master that does not answer holds up only its
/// own leases. A batch that meets a redirection (a slot moved), or fails
/// as a whole, is sent again lease by lease, each call routed by its keys;
/// extending twice is harmless, since each extension runs the lease from
/// the server's now.
pub(crate) async fn extend(
    node: &Node,
    mut connection: ClusterConnection,
    leases: &[Lease],
    timeout: Duration,
) -> Vec<Result<bool>> {
    let what = match leases {
        [one] => format!("extending {}", one.name),
        _ => format!("extending {} leases", leases.len()),
    };
    let started = std::time::Instant::now();
    let map = tokio::time::timeout(timeout / 4, node.slot_cache().get(&mut connection)).await;
    // The batches get what the map left of the call's timeout, so the
    // whole call ends within it, as the keeper bounds it.
    let timeout = timeout.saturating_sub(started.elapsed());
    // Without a map, each lease is a batch of its own.
    let owners = match map {
        Ok(Ok(owners)) => owners,
        Ok(Err(error)) => {
            tracing::debug!(%error, "extending without the cluster's slot map");
            Arc::new(SlotOwners::default())
        }
        Err(_) => {
            tracing::debug!("extending without the cluster's slot map: no answer");
            Arc::new(SlotOwners::default())
        }
    };
    let slots: Vec<u16> = leases
        .iter()
        .map(|lease| node.slot_of(&lease.name))
        .collect();
    let groups = group_by_master(&owners, &slots);
    let batches = groups.iter().map(|group| {
        let connection = connection.clone();
        let batch: Vec<&Lease> = group.iter().map(|at| &leases[*at]).collect();
        let count = batch.len();
        let extend = extend_batch(node, connection, &what, batch, slots[group[0]], timeout);
        async move {
            tokio::time::timeout(timeout, extend)
                .await
                .unwrap_or_else(|_| {
                    (0..count)
                        .map(|_| Err(timed_out("extend", timeout)))
                        .collect()
                })
        }
    });
    let answers = join_all(batches).await;
    let mut outcomes: Vec<Option<Result<bool>>> = leases.iter().map(|_| None).collect();
    for (group, answer) in groups.iter().zip(answers) {
        for (at, outcome) in group.iter().zip(answer) {
            outcomes[*at] = Some(outcome);
        }
    }
    outcomes
        .into_iter()
        .map(|outcome| {
            outcome.unwrap_or_else(|| {
                Err(Error::Backend {
                    backend: "redis",
                    message: format!("{what}: no answer for this lease"),
                    source: None,
                })
            })
        })
        .collect()
}

/// Extends `batch`, whose slots one master serves, in one pipeline to the
/// master of `slot`.
async fn extend_batch(
    node: &Node,
    mut connection: ClusterConnection,
    what: &str,
    batch: Vec<&Lease>,
    slot: u16,
    timeout: Duration,
) -> Vec<Result<bool>> {
    let pipe = node.extend_pipe(batch.iter().copied());
    let mut sent = pipeline_to_slot(&mut connection, &pipe, batch.len(), slot).await;
    if matches!(&sent, Err(error) if error.kind() == ErrorKind::NoScriptError) {
        // The master lost its scripts (a restart, SCRIPT FLUSH): the
        // driver loads the script on every node.
        let script = SCRIPTS.extend.prepare_invoke();
        if script.load_async(&mut connection).await.is_ok() {
            sent = pipeline_to_slot(&mut connection, &pipe, batch.len(), slot).await;
        }
    }
    match sent {
        Ok(replies) if replies.len() == batch.len() => replies
            .into_iter()
            .map(|reply| match reply {
                Value::Int(extended) => Ok(extended == 1),
                Value::ServerError(error) => Err(from_redis(what, error.into())),
                other => Err(unexpected(what, &other)),
            })
            .collect(),
        other => {
            if let Err(error) = &other {
                tracing::debug!(%error, "extending a batch lease by lease");
            }
            // A redirection (MOVED, ASK, TRYAGAIN) means the map is
            // stale; any other error is told lease by lease.
            node.slot_cache().forget();
            join_all(batch.iter().map(|lease| node.extend_one(lease, timeout))).await
        }
    }
}

/// What the cluster says of itself: the first master's version and clock,
/// and the eviction and persistence settings of every master, asked at
/// once, each master that falls short named by its address.
pub(crate) async fn server_info(
    mut cluster: ClusterConnection,
    timeout: Duration,
) -> Result<ServerInfo> {
    let started = tokio::time::Instant::now();
    let owners = tokio::time::timeout(timeout, SlotOwners::read(&mut cluster))
        .await
        .map_err(|_| timed_out("server info", timeout))??;
    let left = timeout.saturating_sub(started.elapsed());
    let masters = owners.masters();
    let Some(first) = masters.first() else {
        return Err(Error::Backend {
            backend: "redis",
            message: "the redis cluster serves no slot: no master is known".into(),
            source: None,
        });
    };
    let asked = join_all(masters.iter().map(|master| {
        let mut on = OnMaster::new(cluster.clone(), master.clone());
        async move { deployment::server_info(&mut on, &format!(" on {master}"), left).await }
    }))
    .await;
    let mut infos = Vec::with_capacity(asked.len());
    for info in asked {
        infos.push(info?);
    }
    let features: Vec<(String, Vec<_>)> = masters
        .iter()
        .zip(&mut infos)
        .map(|(master, info)| (master.to_string(), std::mem::take(&mut info.features)))
        .collect();
    let first_info = infos.swap_remove(0);
    let version = first_info.version.map(|version| {
        format!(
            "{version} ({first}, the first of {} masters in cluster mode)",
            masters.len()
        )
    });
    Ok(deployment::across("master", &features).into_iter().fold(
        ServerInfo::new(version, first_info.clock),
        ServerInfo::with_feature,
    ))
}
