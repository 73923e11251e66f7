//! Extending many leases in a few commands: one `updateMany` per lease
//! period and size bound, for exclusive grants and for readers' and
//! permits' entries apart, since their documents differ.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use distlock_core::backend::Lease;
use distlock_core::{Claim, Error, LockName, Result};
use futures::{StreamExt, TryStreamExt};
use mongodb::bson::{Document, doc};
use mongodb::{Collection, Cursor};

use crate::document::{self, ID, LOCK_ID, lock_id};
use crate::error::{BACKEND, driver};
use crate::grant::stored_id;
use crate::{exclusive, holders};

/// At most this many exclusive leases go into one bulk extension command.
const MAX_BATCH_GRANTS: usize = 10_000;
/// At most this many readers' or permits' leases go into one command: each
/// document's entries are matched against every identity of the command.
const MAX_BATCH_ENTRIES: usize = 1_000;
/// At most this many bytes of names go into one bulk extension command,
/// well below MongoDB's 16 MiB command limit.
const MAX_BATCH_BYTES: usize = 4 << 20;
/// How many bulk extension commands run at once.
const BATCH_CONCURRENCY: usize = 4;

/// Leases that one command extends.
#[derive(Debug)]
pub(crate) struct Chunk {
    /// Readers' or permits' entries rather than exclusive grants.
    entries: bool,
    period: Duration,
    indices: Vec<usize>,
}

/// Splits leases into bulk commands: by kind of document and lease
/// period, then by size.
pub(crate) fn chunks(leases: &[Lease]) -> Vec<Chunk> {
    let mut groups: BTreeMap<(bool, Duration), Vec<usize>> = BTreeMap::new();
    for (index, lease) in leases.iter().enumerate() {
        let entries = lease.claim != Claim::Exclusive;
        groups
            .entry((entries, lease.lease))
            .or_default()
            .push(index);
    }
    let mut chunks = Vec::new();
    for ((entries, period), indices) in groups {
        let most = if entries {
            MAX_BATCH_ENTRIES
        } else {
            MAX_BATCH_GRANTS
        };
        let mut chunk = Vec::new();
        let mut bytes = 0;
        for index in indices {
            let size = leases[index].name.as_str().len() + 64;
            if !chunk.is_empty() && (chunk.len() >= most || bytes + size > MAX_BATCH_BYTES) {
                chunks.push(Chunk {
                    entries,
                    period,
                    indices: std::mem::take(&mut chunk),
                });
                bytes = 0;
            }
            chunk.push(index);
            bytes += size;
        }
        if !chunk.is_empty() {
            chunks.push(Chunk {
                entries,
                period,
                indices: chunk,
            });
        }
    }
    chunks
}

/// Extends `leases`, several commands at once; one outcome per lease, in
/// order.
pub(crate) async fn extend_many(
    collection: &Collection<Document>,
    timeout: Duration,
    leases: &[Lease],
) -> Vec<Result<bool>> {
    let mut outcomes: Vec<Option<Result<bool>>> = leases.iter().map(|_| None).collect();
    let results: Vec<(Vec<usize>, Result<Vec<bool>>)> = futures::stream::iter(chunks(leases))
        .map(|chunk| async move {
            let batch: Vec<&Lease> = chunk.indices.iter().map(|&i| &leases[i]).collect();
            let outcome = if chunk.entries {
                extend_entries(collection, timeout, chunk.period, &batch).await
            } else {
                extend_grants(collection, timeout, chunk.period, &batch).await
            };
            (chunk.indices, outcome)
        })
        .buffer_unordered(BATCH_CONCURRENCY)
        .collect()
        .await;
    for (indices, outcome) in results {
        match outcome {
            Ok(still_ours) => {
                for (index, ours) in indices.into_iter().zip(still_ours) {
                    outcomes[index] = Some(Ok(ours));
                }
            }
            Err(error) => {
                for index in indices {
                    outcomes[index] = Some(Err(copy_error(&error)));
                }
            }
        }
    }
    settle(outcomes)
}

/// Extends exclusive grants, all with the same lease period. Returns, per
/// lease, whether it is still ours.
async fn extend_grants(
    collection: &Collection<Document>,
    timeout: Duration,
    lease: Duration,
    batch: &[&Lease],
) -> Result<Vec<bool>> {
    let filter =
        || document::live_grants(batch.iter().map(|lease| (&lease.name, stored_id(lease))));
    let updated = collection
        .update_many(filter(), exclusive::extend(lease))
        .await
        .map_err(|error| driver("extending leases", error))?;
    if usize::try_from(updated.matched_count).unwrap_or(usize::MAX) >= batch.len() {
        return Ok(vec![true; batch.len()]);
    }
    // Some were not ours any more. A lease that is ours and unexpired now
    // was so when the update ran (nobody else extends it), so it was
    // extended; the others are lost.
    let found = collection
        .find(filter())
        .projection(doc! { ID: 0, LOCK_ID: 1 })
        .max_time(timeout);
    let live: HashSet<String> = read_all(found, "checking extended leases")
        .await?
        .into_iter()
        .filter_map(|found| found.get_str(LOCK_ID).ok().map(str::to_owned))
        .collect();
    Ok(batch
        .iter()
        .map(|lease| live.contains(&stored_id(lease)))
        .collect())
}

/// Every document `query` finds; `what` names the read in errors.
pub(crate) async fn read_all(
    query: impl IntoFuture<Output = mongodb::error::Result<Cursor<Document>>>,
    what: &str,
) -> Result<Vec<Document>> {
    query
        .await
        .map_err(|error| driver(what, error))?
        .try_collect()
        .await
        .map_err(|error| driver(what, error))
}

/// Extends readers' and permits' entries, all with the same lease period.
/// Returns, per lease, whether it is still ours.
async fn extend_entries(
    collection: &Collection<Document>,
    timeout: Duration,
    lease: Duration,
    batch: &[&Lease],
) -> Result<Vec<bool>> {
    let mut seen = HashSet::new();
    let names: Vec<&LockName> = batch
        .iter()
        .map(|lease| &lease.name)
        .filter(|name| seen.insert(*name))
        .collect();
    let ids: Vec<String> = batch.iter().map(|lease| lock_id(lease.id)).collect();
    let updated = collection
        .update_many(
            holders::live_entries(&names, &ids),
            holders::extend(&ids, lease),
        )
        .await
        .map_err(|error| driver("extending leases", error))?;
    // A document counts once however many of our entries it has, so the
    // count proves every lease extended only when each name has one.
    let matched = usize::try_from(updated.matched_count).unwrap_or(usize::MAX);
    if names.len() == batch.len() && matched >= batch.len() {
        return Ok(vec![true; batch.len()]);
    }
    // As for grants: an entry of ours that lives now lived when the update
    // ran, so it was extended.
    let found = collection
        .aggregate(holders::which_live(&names, &ids))
        .max_time(timeout);
    let live: HashSet<String> = read_all(found, "checking extended leases")
        .await?
        .iter()
        .filter_map(|found| found.get_array("ids").ok())
        .flatten()
        .filter_map(|id| id.as_str().map(str::to_owned))
        .collect();
    Ok(ids.iter().map(|id| live.contains(id)).collect())
}

/// `error` again, for each lease of a bulk command that failed as a whole
/// (errors cannot be cloned, and the driver's source stays with the first).
pub(crate) fn copy_error(error: &Error) -> Error {
    Error::Backend {
        backend: BACKEND,
        message: error.to_string(),
        source: None,
    }
}

/// The per-lease outcomes of a bulk extension, in order; a lease that no
/// command covered is an error, never silently "extended".
pub(crate) fn settle(outcomes: Vec<Option<Result<bool>>>) -> Vec<Result<bool>> {
    outcomes
        .into_iter()
        .map(|outcome| {
            outcome.unwrap_or_else(|| {
                Err(Error::Backend {
                    backend: BACKEND,
                    message: "a lease was left out of the bulk extension".into(),
                    source: None,
                })
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_core::backend::{GrantState, LeaseId};

    fn lease(name: &str, secs: u64, claim: Claim) -> Lease {
        Lease {
            name: LockName::new(name).unwrap(),
            claim,
            id: LeaseId::random(),
            fencing_token: 1,
            lease: Duration::from_secs(secs),
            operation_timeout: Duration::from_secs(1),
            state: GrantState::none(),
        }
    }

    #[test]
    fn chunks_group_by_kind_and_lease_period_and_keep_every_lease() {
        let leases = vec![
            lease("a", 30, Claim::Exclusive),
            lease("b", 10, Claim::Exclusive),
            lease("c", 30, Claim::Exclusive),
            lease("a", 30, Claim::Shared),
            lease("d", 30, Claim::Permit { limit: 2 }),
        ];
        let chunks = chunks(&leases);
        assert_eq!(chunks.len(), 3);
        let mut all: Vec<usize> = chunks.iter().flat_map(|c| c.indices.clone()).collect();
        all.sort_unstable();
        assert_eq!(all, vec![0, 1, 2, 3, 4]);
        for chunk in &chunks {
            assert!(
                chunk
                    .indices
                    .iter()
                    .all(|&i| leases[i].lease == chunk.period
                        && (leases[i].claim != Claim::Exclusive) == chunk.entries)
            );
        }
    }

    #[test]
    fn chunks_respect_the_size_bounds() {
        let name = "x".repeat(1000);
        let leases: Vec<Lease> = (0..5000)
            .map(|i| lease(&format!("{name}{i}"), 30, Claim::Exclusive))
            .collect();
        let chunks = chunks(&leases);
        assert!(chunks.len() >= 2);
        for chunk in &chunks {
            let bytes: usize = chunk
                .indices
                .iter()
                .map(|&i| leases[i].name.as_str().len() + 64)
                .sum();
            assert!(bytes <= MAX_BATCH_BYTES);
        }
        let permits: Vec<Lease> = (0..2500)
            .map(|_| lease("p", 30, Claim::Permit { limit: 1000 }))
            .collect();
        let sizes: Vec<usize> = super::chunks(&permits)
            .iter()
            .map(|c| c.indices.len())
            .collect();
        assert_eq!(sizes, vec![1000, 1000, 500]);
    }
}
