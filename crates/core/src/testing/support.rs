//! Small helpers for tests that run a backend against its real server:
//! fresh names, the server's address from the environment, server
//! processes of a test's own, one attempt through a backend without core's
//! waiting, bounded waits, and the checks that several stores share
//! (fencing, restarts, permits, refused configurations).
//!
//! distlock's own backend crates share them, so each of their test suites
//! says what it checks rather than how it reaches the store.

use std::future::Future;
use std::net::TcpListener;
use std::process::Child;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::acquire::AcquireOptions;
use crate::backend::state::WaitState;
use crate::backend::{AcquireRequest, Attempt, Backend, Lease};
use crate::claim::Claim;
use crate::client::LockClient;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::info::Holder;
use crate::lost::LossReason;
use crate::name::LockName;
use crate::options::{LockOptions, LockOptionsBuilder};

/// The time a test gives an administrative call (`list`, `force_release`,
/// `server_info`, `terms_after`) that it makes on a backend directly, as a
/// client gives its operation timeout.
pub const ADMIN_LIMIT: Duration = Duration::from_secs(10);

/// A fresh lock name: `prefix` and 64 random bits, so that tests sharing a
/// server never meet.
///
/// # Panics
///
/// When `prefix` makes an invalid lock name.
pub fn unique_name(prefix: &str) -> LockName {
    LockName::new(format!("{prefix}-{:016x}", rand::random::<u64>()))
        .unwrap_or_else(|e| panic!("{prefix:?} does not start a valid lock name: {e}"))
}

/// The value of the environment variable `var`, which names a server the
/// test needs.
///
/// # Panics
///
/// When `var` is not set, with `hint` saying how to get the server: a test
/// whose server is missing fails rather than passes.
pub fn required_env(var: &str, hint: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| panic!("{var} is not set: {hint}"))
}

/// A loopback port that was free when the kernel picked it, for a server
/// the test starts itself.
///
/// # Panics
///
/// When no port can be bound.
pub fn free_loopback_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

/// Waits until `serving` says that `server`, a process the test started,
/// serves, asking every 20 ms.
///
/// # Panics
///
/// When the process exits first, or does not serve within 30 s; `what`
/// names it.
///
/// # Cancel safety
///
/// Cancel safe as far as `serving` is.
pub async fn until_serving<F, Fut>(server: &mut Child, what: &str, mut serving: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = Instant::now();
    while !serving().await {
        if let Ok(Some(status)) = server.try_wait() {
            panic!("{what} exited with {status}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{what} did not serve within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Options for `lease` that show losses soon: extension every quarter of
/// the lease, a tenth of it as safety margin, a third as the bound on each
/// call, and short backoff. Add to them (a label, say) before building.
pub fn quick_options(lease: Duration) -> LockOptionsBuilder {
    LockOptions::builder()
        .lease(lease)
        .extend_every(lease / 4)
        .safety_margin(lease / 10)
        .operation_timeout(lease / 3)
        .backoff(Duration::from_millis(5), Duration::from_millis(100))
}

/// One attempt at `request` through `backend` alone, without core's
/// waiting or keeper: the lease granted, which nobody extends, or `None`
/// when the lock is held.
///
/// # Errors
///
/// The backend's error for the attempt.
///
/// # Cancel safety
///
/// Not cancel safe: a grant whose answer is dropped stays on the store
/// until its lease ends.
pub async fn try_grant(backend: &dyn Backend, request: &AcquireRequest) -> Result<Option<Lease>> {
    Ok(
        match backend.try_acquire(request, &mut WaitState::new()).await? {
            Attempt::Acquired {
                fencing_token,
                state,
            } => Some(request.granted(fencing_token, state)),
            Attempt::Held { .. } => None,
        },
    )
}

/// The request of one attempt of a wait for `name`'s exclusive lock, as
/// core makes it (`retries` set: the wait asks again), for a holder that
/// `label` names. Asked through the backend directly, nothing asks again
/// for it unless the test does.
pub fn waiting_request(name: &LockName, lease: Duration, label: &str) -> AcquireRequest {
    AcquireRequest {
        retries: true,
        ..AcquireRequest::new(
            name.clone(),
            Claim::Exclusive,
            lease,
            Arc::new(Holder::this_process(Some(label))),
        )
    }
}

/// `client` waiting for `name` with `options` in a task of its own, until
/// the sender returned sends (or is dropped), which cancels the wait: the
/// sender, and the task that answers what the wait came to.
pub fn acquire_until_cancelled(
    client: &LockClient,
    name: &LockName,
    options: AcquireOptions<'static>,
) -> (oneshot::Sender<()>, JoinHandle<Result<LockGuard>>) {
    let (cancel, cancelled) = oneshot::channel::<()>();
    let (client, name) = (client.clone(), name.clone());
    let waiting = tokio::spawn(async move {
        let until_cancelled = options.cancel_on(async move {
            let _ = cancelled.await;
        });
        client.acquire_with(&name, until_cancelled).await
    });
    (cancel, waiting)
}

/// Asserts that `guard` still holds its lock: it was not lost, and
/// `other`, a client of the same store, cannot take the lock.
///
/// # Panics
///
/// When the guard was lost, when `other` gets the lock, or when its
/// attempt fails.
///
/// # Cancel safety
///
/// Cancel safe: a lock `other` took would be released when its guard
/// drops.
pub async fn assert_still_held(guard: &LockGuard, other: &LockClient) {
    assert!(!guard.is_lost(), "the holder kept the lock");
    assert!(
        other
            .try_acquire(guard.name())
            .await
            .expect("try")
            .is_none(),
        "nobody else gets it"
    );
}

/// Asserts that a waiter for a permit is woken when either holder leaves,
/// the earlier one included: `first` and `second` take the two permits of
/// `lock`, then `waiter` waits for one, giving up after `unwoken` (longer
/// than the test waits: only a wake-up lets it in in time). Once
/// `waiting` completes, which says that the waiter waits, `first` leaves;
/// the waiter must get the permit within 30 s, with a greater token.
///
/// # Panics
///
/// When any of these goes otherwise.
///
/// # Cancel safety
///
/// Cancelling drops the guards taken so far, which release in the
/// background.
pub async fn assert_a_leaving_permit_holder_wakes_the_waiter(
    [first, second]: [&LockClient; 2],
    waiter: LockClient,
    lock: &LockName,
    unwoken: Duration,
    waiting: impl Future<Output = ()>,
) {
    let patience = Duration::from_secs(30);
    let permit = Claim::Permit { limit: 2 };
    let one = first
        .acquire_with(lock, AcquireOptions::new().claim(permit).timeout(patience))
        .await
        .expect("first");
    let two = second
        .acquire_with(lock, AcquireOptions::new().claim(permit).timeout(patience))
        .await
        .expect("second");
    let waits = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let options = AcquireOptions::new().claim(permit).timeout(unwoken);
            waiter.acquire_with(&lock, options).await
        })
    };
    waiting.await;
    assert!(!waits.is_finished(), "the waiter did not wait");
    one.release().await.expect("release");
    let three = tokio::time::timeout(patience, waits)
        .await
        .expect("the waiter is woken by the release, long before it would try again")
        .expect("task")
        .expect("third");
    assert!(three.fencing_token() > two.fencing_token());
    two.release().await.expect("release");
    three.release().await.expect("release");
}

/// Asserts what a store that comes back empty from a restart does to
/// `guard`, held across it: the holder learns of the loss (refused, or
/// expired when reconnecting outlasted the lease) and its release says so,
/// and `other`, a client of the restarted store, is granted the lock
/// again with a greater token, from the clock since the counter is gone.
///
/// # Panics
///
/// When any of these goes otherwise, or the loss is not seen within 60 s.
///
/// # Cancel safety
///
/// Cancelling drops the guards taken so far, which release in the
/// background.
pub async fn assert_lost_to_a_restart(guard: LockGuard, other: &LockClient) {
    let (name, first_token) = (guard.name().clone(), guard.fencing_token());
    let reason = tokio::time::timeout(Duration::from_secs(60), guard.lost())
        .await
        .expect("lost() fires after the restart");
    assert!(
        matches!(reason, LossReason::Refused | LossReason::Expired),
        "{reason:?}"
    );
    assert!(!guard.release().await.expect("release"), "it was lost");
    let again = other
        .acquire_with(&name, Duration::from_secs(10))
        .await
        .expect("the restarted server grants again");
    assert!(
        again.fencing_token() > first_token,
        "{} after {first_token}",
        again.fencing_token()
    );
    assert!(again.release().await.expect("release"));
}

/// Asserts that a fenced store turns a stale holder away: `first` takes
/// `name` and writes; the lock is forced away through `admin` and granted
/// to `second`, whose token is greater and whose writes apply; then
/// `first`'s write is refused. `write(token)` is one fenced write with a
/// holder's token, answering how many records it changed. Returns the
/// stale guard and the fresh one, for the caller to look at what was
/// stored and to release.
///
/// # Panics
///
/// When any of these steps goes otherwise.
///
/// # Cancel safety
///
/// Cancelling drops the guards taken so far, which release in the
/// background.
pub async fn assert_fenced_writes<W, Fut>(
    [first, second]: [&LockClient; 2],
    admin: &dyn Backend,
    name: &LockName,
    write: W,
) -> (LockGuard, LockGuard)
where
    W: Fn(u64) -> Fut,
    Fut: Future<Output = u64>,
{
    let patience = Duration::from_secs(10);
    let stale = first.acquire_with(name, patience).await.unwrap();
    assert_eq!(write(stale.fencing_token()).await, 1, "the holder writes");
    // The holder pauses; its lock is taken away and granted again.
    assert!(admin.force_release(name, patience).await.unwrap());
    let fresh = second.acquire_with(name, patience).await.unwrap();
    assert!(fresh.fencing_token() > stale.fencing_token());
    assert_eq!(
        write(fresh.fencing_token()).await,
        1,
        "the new holder writes"
    );
    assert_eq!(
        write(fresh.fencing_token()).await,
        1,
        "and again, with its token"
    );
    assert_eq!(
        write(stale.fencing_token()).await,
        0,
        "the stale holder is turned away"
    );
    (stale, fresh)
}

/// Asserts that `result` is an [`Error::InvalidConfig`] that names
/// `field` and whose reason says `says`.
///
/// # Panics
///
/// When `result` is anything else.
pub fn assert_invalid_config<T: std::fmt::Debug>(result: &Result<T>, field: &str, says: &str) {
    match result {
        Err(Error::InvalidConfig {
            field: named,
            reason,
        }) => {
            assert_eq!(*named, field, "the field named: {reason}");
            assert!(reason.contains(says), "{reason:?} does not say {says:?}");
        }
        other => panic!("expected an invalid {field} that says {says:?}, got {other:?}"),
    }
}

/// Checks `check` every 50 ms until it is true.
///
/// # Panics
///
/// When `check` is still false after 60 s, naming `what` did not happen.
///
/// # Cancel safety
///
/// Cancel safe as far as `check` is.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = Instant::now();
    while !check().await {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{what} did not happen within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
