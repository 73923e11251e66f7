//! The client's entry points as a user meets them: names as strings, a
//! wait with no deadline, the options of one call, and the builder.

use std::time::Duration;

use distlock_core::{
    AcquireOptions, Claim, Error, LockClient, LockName, MemoryBackend, TryOptions,
};

fn client() -> LockClient {
    LockClient::builder()
        .build(MemoryBackend::new())
        .expect("default options")
}

#[tokio::test]
async fn every_call_takes_a_name_as_str_string_or_lock_name() {
    let client = client();
    let owned = String::from("as-string");
    let named = LockName::new("as-lock-name").unwrap();

    let a = client.acquire("as-str").await.unwrap();
    let b = client.try_acquire(owned.clone()).await.unwrap().unwrap();
    let c = client
        .acquire_with(&named, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(a.name().as_str(), "as-str");
    assert_eq!(b.name().as_str(), owned);
    assert_eq!(c.name(), &named);
    assert!(client.try_acquire(&owned).await.unwrap().is_none());
    assert!(client.force_release("as-str").await.unwrap());
    for guard in [b, c] {
        assert!(guard.release().await.unwrap());
    }
}

#[tokio::test]
async fn an_invalid_name_is_the_calls_own_error() {
    let client = client();
    assert!(matches!(
        client.acquire("").await,
        Err(Error::InvalidName { .. })
    ));
    assert!(matches!(
        client.try_acquire("x".repeat(2000)).await,
        Err(Error::InvalidName { .. })
    ));
    let outcome = client.with_lock("", Duration::ZERO, |_| async {}).await;
    assert!(matches!(outcome, Err(Error::InvalidName { .. })));
}

#[tokio::test(start_paused = true)]
async fn acquire_waits_with_no_deadline_until_the_holder_releases() {
    let client = client();
    let held = client.acquire("no-deadline").await.unwrap();
    let waiter = {
        let client = client.clone();
        tokio::spawn(async move { client.acquire("no-deadline").await })
    };
    // Far past any default timeout, the waiter still waits.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(!waiter.is_finished());
    let token = held.fencing_token();
    assert!(held.release().await.unwrap());
    let next = waiter.await.unwrap().unwrap();
    assert!(next.fencing_token() > token);
}

#[tokio::test]
async fn options_choose_the_claim() {
    let client = client();
    let first = client
        .acquire_with("kinds", AcquireOptions::new().shared())
        .await
        .unwrap();
    let second = client
        .try_acquire_with("kinds", TryOptions::new().shared())
        .await
        .unwrap()
        .expect("readers share");
    assert_eq!(second.claim(), Claim::Shared);
    assert!(client.try_acquire("kinds").await.unwrap().is_none());
    first.release().await.unwrap();
    second.release().await.unwrap();

    let permit = client
        .try_acquire_with("permits", TryOptions::new().permit(1))
        .await
        .unwrap()
        .expect("a free permit");
    assert_eq!(permit.claim(), Claim::Permit { limit: 1 });
    assert!(
        client
            .try_acquire_with("permits", Claim::Permit { limit: 1 })
            .await
            .unwrap()
            .is_none()
    );
    permit.release().await.unwrap();
}

// A try cannot be given a timeout or a cancellation: `TryOptions` has
// neither (its docs show the call that does not compile).
#[tokio::test]
async fn a_try_refuses_a_permit_limit_out_of_range() {
    let client = client();
    let outcome = client
        .try_acquire_with("try", TryOptions::new().permit(0))
        .await;
    assert!(
        matches!(outcome, Err(Error::InvalidConfig { .. })),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn a_cancelled_wait_without_a_deadline_holds_nothing() {
    let client = client();
    let held = client.acquire("cancelled").await.unwrap();
    let outcome = client
        .acquire_with(
            "cancelled",
            AcquireOptions::new().cancel_on(tokio::time::sleep(Duration::from_millis(20))),
        )
        .await;
    assert!(
        matches!(outcome, Err(Error::Cancelled { .. })),
        "{outcome:?}"
    );
    assert!(held.release().await.unwrap());
    assert!(client.try_acquire("cancelled").await.unwrap().is_some());
}

#[tokio::test]
async fn with_lock_takes_the_options_of_one_call() {
    let client = client();
    let claim = client
        .with_lock("work", AcquireOptions::new().shared(), |lock| async move {
            assert_eq!(lock.name.as_str(), "work");
            lock.fencing_token
        })
        .await
        .unwrap();
    assert!(claim > 0);
}

#[test]
fn the_builder_checks_its_options_and_names_the_one_at_fault() {
    let client = LockClient::builder()
        .lease(Duration::from_secs(9))
        .label("reports")
        .build(MemoryBackend::new())
        .unwrap();
    assert_eq!(client.options().extend_every(), Duration::from_secs(3));
    assert_eq!(client.options().label(), Some("reports"));

    let error = LockClient::builder()
        .lease(Duration::from_secs(1))
        .extend_every(Duration::from_secs(2))
        .build(MemoryBackend::new())
        .unwrap_err();
    assert!(
        matches!(&error, Error::InvalidConfig { field, .. } if field.contains("extend")),
        "{error}"
    );

    let copied = LockClient::builder()
        .options(client.options())
        .build(MemoryBackend::new())
        .unwrap();
    assert_eq!(copied.options(), client.options());
}
