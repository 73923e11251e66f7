//! Several locks at once and the longest hold, on the memory backend and
//! the test backend: what the conformance suite cannot reach on every
//! backend (bad input, a set's cancellation mid-wait, a hold that ends by
//! release before its bound).

use std::time::Duration;

use distlock_core::testing::TestBackend;
use distlock_core::{
    AcquireOptions, Claim, Error, LockClient, LockSet, LossReason, MemoryBackend, TryOptions,
};

fn client() -> LockClient {
    LockClient::builder().build(MemoryBackend::new()).unwrap()
}

#[tokio::test]
async fn a_set_is_taken_in_the_canonical_order_with_each_claim() {
    let locks = client();
    let set = locks
        .acquire_all(
            [
                ("b", Claim::Shared),
                ("a", Claim::Exclusive),
                ("c", Claim::Permit { limit: 2 }),
            ],
            Duration::from_secs(1),
        )
        .await
        .unwrap();
    let taken: Vec<(&str, Claim)> = set
        .guards()
        .iter()
        .map(|guard| (guard.name().as_str(), guard.claim()))
        .collect();
    assert_eq!(
        taken,
        [
            ("a", Claim::Exclusive),
            ("b", Claim::Shared),
            ("c", Claim::Permit { limit: 2 })
        ]
    );
    // Another reader of `b` and the second permit of `c` still fit.
    let more = locks
        .acquire_all(
            [("b", Claim::Shared), ("c", Claim::Permit { limit: 2 })],
            Duration::ZERO,
        )
        .await
        .unwrap();
    assert!(set.release().await.unwrap());
    assert!(more.release().await.unwrap());
}

#[tokio::test]
async fn a_name_given_twice_or_no_name_is_refused() {
    let locks = client();
    let twice = locks
        .acquire_all(["a", "b", "a"], Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(
        matches!(&twice, Error::InvalidConfig { field, reason } if field == "locks" && reason.contains("`a` is named twice")),
        "{twice:?}"
    );
    let none = locks
        .acquire_all(Vec::<&str>::new(), Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(
        matches!(&none, Error::InvalidConfig { field, .. } if field == "locks"),
        "{none:?}"
    );
    let bad = locks
        .acquire_all(["a", ""], Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(matches!(bad, Error::InvalidName { .. }), "{bad:?}");
}

#[tokio::test]
async fn the_loss_of_one_member_is_the_sets() {
    let backend = TestBackend::new();
    let locks = LockClient::builder().build(backend.clone()).unwrap();
    let set = locks
        .acquire_all(["x", "y"], Duration::from_secs(1))
        .await
        .unwrap();
    backend.lose("y");
    let (name, reason) = set.lost().await;
    assert_eq!((name.as_str(), reason), ("y", LossReason::Detected));
    assert!(!set.release().await.unwrap());
}

#[tokio::test]
async fn a_zero_longest_hold_is_refused() {
    let locks = client();
    let error = locks
        .acquire_with("job", AcquireOptions::new().max_hold(Duration::ZERO))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::InvalidConfig { field, .. } if field == "max_hold"),
        "{error:?}"
    );
    let error = locks
        .try_acquire_with("job", TryOptions::new().max_hold(Duration::ZERO))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::InvalidConfig { field, .. } if field == "max_hold"),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_lock_released_before_its_longest_hold_stays_released() {
    let locks = client();
    let options = || AcquireOptions::new().max_hold(Duration::from_millis(200));
    let first = locks.acquire_with("job", options()).await.unwrap();
    assert!(first.release().await.unwrap());
    // Held again by someone else past the first grant's bound: the first
    // bound must not touch the second grant.
    let second = locks.try_acquire("job").await.unwrap().expect("free");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!second.is_lost());
    assert!(second.release().await.unwrap());
}

#[tokio::test]
async fn the_longest_hold_holds_for_try_acquire_and_with_lock() {
    let locks = client();
    let tried = locks
        .try_acquire_with(
            "tried",
            TryOptions::new().max_hold(Duration::from_millis(100)),
        )
        .await
        .unwrap()
        .expect("free");
    assert_eq!(tried.lost().await, LossReason::HoldLimit);
    let outcome = locks
        .with_lock(
            "work",
            AcquireOptions::new().max_hold(Duration::from_millis(100)),
            |context| async move { context.lost.lost().await },
        )
        .await;
    // The work saw the loss; with_lock then reports the lock lost.
    assert!(matches!(outcome, Err(Error::Lost { .. })), "{outcome:?}");
}

#[tokio::test]
async fn a_term_is_recorded_only_for_one_whole_lock() {
    let locks = client();
    let election = locks.election("e").unwrap();
    let shared = election.campaign("v", AcquireOptions::new().shared()).await;
    assert!(
        matches!(shared, Err(Error::InvalidConfig { ref field, .. }) if field == "claim"),
        "{shared:?}"
    );
    // The whole lock, as a set of one (as `distlock campaign` holds it), is
    // a term observers see.
    let mut observer = election.observe();
    let set = LockSet::from(
        election
            .campaign("v", AcquireOptions::new())
            .await
            .unwrap()
            .into_guard(),
    );
    let term = set.guards()[0].fencing_token();
    let seen = observer.next().await.unwrap();
    assert_eq!((seen.value.as_str(), seen.term), ("v", term));
}
