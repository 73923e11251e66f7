//! A campaign's grant that its holder never received leaves no term in
//! the election's record: cancelled as it came, its answer lost, or come
//! after the wait timed out. Observers report only leaders that led.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::testing::{ADMIN_LIMIT, Spoil, SpoilGrant, TestBackend};
use distlock_core::{AcquireOptions, Error, LockClient, LockName};
use tokio::sync::Notify;

/// The values of the terms the record keeps for `name`, oldest first.
async fn recorded(backend: &TestBackend, name: &str) -> Vec<String> {
    let name = LockName::new(name).unwrap();
    let shared = backend.shared();
    let terms = shared
        .abilities()
        .term_log
        .expect("the memory backend keeps terms")
        .terms_after(&name, 0, ADMIN_LIMIT)
        .await
        .unwrap();
    terms
        .into_iter()
        .map(|term| term.holder.label.unwrap_or_default())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_grant_its_campaign_never_received_leaves_no_term() {
    let spoil = Arc::new(SpoilGrant::default());
    let backend = TestBackend::new().with_hook(spoil.clone());
    let client = || {
        LockClient::builder()
            .lease(Duration::from_secs(3))
            .build_shared(backend.shared())
            .unwrap()
    };
    let (client, other) = (client(), client());
    let election = client.election("e").unwrap();
    let mut observer = election.observe();
    let kept = election
        .campaign("kept", AcquireOptions::new())
        .await
        .unwrap();
    assert_eq!(observer.next().await.unwrap().value, "kept");
    assert!(kept.resign().await.unwrap());

    // Cancelled as the grant came.
    let cancel = Arc::new(Notify::new());
    spoil.arm("cancelled", Spoil::Cancel(cancel.clone()));
    let cancelled = election
        .campaign(
            "cancelled",
            AcquireOptions::new().cancel_on(async move { cancel.notified().await }),
        )
        .await;
    assert!(
        matches!(cancelled, Err(Error::Cancelled { .. })),
        "{cancelled:?}"
    );

    // The grant's answer lost: released (and withdrawn) by identity.
    spoil.arm("lost", Spoil::LoseAnswer);
    let lost = election.campaign("lost", Duration::ZERO).await;
    assert!(
        matches!(lost, Err(Error::Backend { .. } | Error::Timeout { .. })),
        "{lost:?}"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;

    // Granted after the wait timed out: released in the background. (The
    // blocker campaigns in another client, so that the late campaign
    // waits on the backend, where its second attempt has a short budget.)
    let blocker = other
        .election("e")
        .unwrap()
        .campaign("blocker", AcquireOptions::new())
        .await
        .unwrap();
    spoil.arm("late", Spoil::Delay(Duration::from_millis(600)));
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        blocker.resign().await.unwrap();
    });
    let late = election.campaign("late", Duration::from_millis(300)).await;
    assert!(matches!(late, Err(Error::Timeout { .. })), "{late:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;

    let next = election
        .campaign("next", AcquireOptions::new())
        .await
        .unwrap();
    assert_eq!(recorded(&backend, "e").await, ["kept", "blocker", "next"]);
    // The observer goes on from "kept" with no gap reported.
    for value in ["blocker", "next"] {
        assert_eq!(observer.next().await.unwrap().value, value);
    }
    assert!(next.resign().await.unwrap());
}
