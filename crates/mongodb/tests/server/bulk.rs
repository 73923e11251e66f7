//! Extending many leases at once.

use std::collections::HashMap;
use std::time::Duration;

use distlock_core::backend::{AcquireRequest, Backend, Lease, LeaseId};
use distlock_core::testing::try_grant;
use distlock_core::{Claim, Holder};
use distlock_mongodb::mongodb::bson::doc;
use futures::TryStreamExt;

use crate::common::*;
use distlock_core::testing::ADMIN_LIMIT;

#[tokio::test]
async fn extend_many_extends_what_is_ours_and_reports_what_is_not() {
    let url = shared_url();
    let collection = unique("bulk");
    let backend = backend_at(&url, &collection).await;
    let holder = std::sync::Arc::new(Holder::this_process(Some("bulk")));
    let mut leases = Vec::new();
    for i in 0..60 {
        let request = AcquireRequest::new(
            lock_name(&format!("bulk{i}")),
            Claim::Exclusive,
            Duration::from_secs(if i % 3 == 0 { 10 } else { 30 }),
            holder.clone(),
        );
        let lease = try_grant(&*backend, &request).await.unwrap();
        leases.push(lease.unwrap_or_else(|| panic!("{} is fresh", request.name)));
    }
    // Taken away: forced releases, and an identity that was never granted.
    let lost = [4, 9, 30];
    for &i in &lost {
        assert!(
            backend
                .force_release(&leases[i].name, ADMIN_LIMIT)
                .await
                .unwrap()
        );
    }
    leases[41].id = LeaseId::random();

    let inspector = inspector(&url).await;
    let raw = raw_collection(&inspector, &collection);
    let expiries = || async {
        raw.find(doc! {})
            .await
            .unwrap()
            .try_collect::<Vec<_>>()
            .await
            .unwrap()
            .into_iter()
            .map(|found| {
                (
                    found.get_str("_id").unwrap().to_owned(),
                    found.get_datetime("expiresAt").unwrap().timestamp_millis(),
                )
            })
            .collect::<HashMap<_, _>>()
    };
    let before = expiries().await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let outcomes = backend.extend_many(&leases).await.outcomes;
    let after = expiries().await;
    assert_eq!(outcomes.len(), leases.len());
    for (i, (lease, outcome)) in leases.iter().zip(outcomes).enumerate() {
        let ours = !lost.contains(&i) && i != 41;
        assert_eq!(outcome.unwrap(), ours, "lease {i}");
        let name = lease.name.as_str();
        if ours {
            assert!(after[name] > before[name], "lease {i} was not extended");
        } else {
            assert_eq!(after[name], before[name], "lease {i} was changed");
        }
    }
    // All that are still ours extend together.
    let ours: Vec<Lease> = leases
        .iter()
        .enumerate()
        .filter(|(i, _)| !lost.contains(i) && *i != 41)
        .map(|(_, lease)| lease.clone())
        .collect();
    assert!(
        backend
            .extend_many(&ours)
            .await
            .outcomes
            .into_iter()
            .all(|outcome| outcome.unwrap())
    );
    for lease in &ours {
        assert!(backend.release(lease).await.unwrap());
    }
}
