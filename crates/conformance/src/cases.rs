//! The cases. Each takes the fixture of the backend under test and panics,
//! naming what broke, when the backend misbehaves.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use distlock_core::backend::BackendExt;
use distlock_core::backend::{AcquireRequest, Attempt, Backend, HandOver, Lease, LeaseId};
use distlock_core::{Claim, Error, Holder, LockName, LossReason};

use crate::fixture::Fixture;
use crate::process::HeldByChild;
use crate::support::{
    ADMIN_LIMIT, LEAK_CATCHING_LEASE, bounded, cancelled_wait_leaves_nothing, client, client_with,
    shared, unique_name,
};

const PATIENCE: Duration = Duration::from_secs(10);

/// Acquire, see it held, release, and see it free.
pub async fn acquire_and_release(fixture: &dyn Fixture) {
    let name = unique_name("basic");
    let a = client(fixture).await;
    let b = client(fixture).await;
    let guard = a
        .acquire_with(&name, PATIENCE)
        .await
        .expect("acquire a free lock");
    assert_eq!(guard.name(), &name);
    assert!(guard.fencing_token() > 0, "tokens start above zero");
    assert!(!guard.is_lost());
    assert!(
        b.try_acquire(&name).await.expect("try").is_none(),
        "held lock must not be granted"
    );
    assert!(
        guard.release().await.expect("release"),
        "release reports we held it"
    );
    let again = b.try_acquire(&name).await.expect("try after release");
    assert!(again.is_some(), "a released lock is free at once");
    again.unwrap().release().await.expect("release");
}

/// `try_acquire` on a held lock is `Ok(None)`, from another client and
/// from the holder's own client.
pub async fn contended_try_acquire_returns_none(fixture: &dyn Fixture) {
    let name = unique_name("contended");
    let a = client(fixture).await;
    let b = client(fixture).await;
    let guard = a.acquire_with(&name, PATIENCE).await.expect("acquire");
    assert!(b.try_acquire(&name).await.expect("try").is_none());
    assert!(
        a.try_acquire(&name)
            .await
            .expect("try, same client")
            .is_none()
    );
    guard.release().await.expect("release");
}

/// A zero timeout tries exactly once: it gets a free lock and times out on a
/// held one.
pub async fn zero_timeout_tries_once(fixture: &dyn Fixture) {
    let name = unique_name("zero");
    let a = client(fixture).await;
    let b = client(fixture).await;
    let guard = a
        .acquire_with(&name, Duration::ZERO)
        .await
        .expect("zero timeout on a free lock");
    match b.acquire_with(&name, Duration::ZERO).await {
        Err(Error::Timeout { .. }) => {}
        other => panic!("expected a timeout, got {other:?}"),
    }
    guard.release().await.expect("release");
}

/// A short timeout on a held lock ends in `Timeout`, not before the
/// deadline and not long after it.
pub async fn short_timeout_is_honoured(fixture: &dyn Fixture) {
    let name = unique_name("short");
    let a = client(fixture).await;
    let b = client(fixture).await;
    let guard = a.acquire_with(&name, PATIENCE).await.expect("acquire");
    let timeout = Duration::from_millis(300);
    let started = Instant::now();
    let outcome = b.acquire_with(&name, timeout).await;
    let waited = started.elapsed();
    assert!(
        matches!(outcome, Err(Error::Timeout { .. })),
        "got {outcome:?}"
    );
    assert!(waited >= timeout, "gave up early, after {waited:?}");
    // "Never much later": one operation timeout is the most it may overrun.
    let bound = timeout + a.options().operation_timeout() + Duration::from_secs(2);
    assert!(
        waited <= bound,
        "gave up after {waited:?}, beyond {bound:?}"
    );
    guard.release().await.expect("release");
}

/// Cancelling waiting or in-flight acquires leaves nothing held.
pub async fn cancelled_acquire_leaves_nothing_held(fixture: &dyn Fixture) {
    let name = unique_name("cancel");
    let a = client_with(fixture, LEAK_CATCHING_LEASE).await;
    let b = client_with(fixture, LEAK_CATCHING_LEASE).await;
    // A waiter cancelled while the lock is held.
    let guard = a.acquire_with(&name, PATIENCE).await.expect("acquire");
    let waiter = {
        let b = b.clone();
        let name = name.clone();
        tokio::spawn(async move { b.acquire_with(&name, Duration::from_secs(300)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    waiter.abort();
    assert!(waiter.await.expect_err("aborted").is_cancelled());
    guard.release().await.expect("release");
    // Attempts cancelled at random points while the lock is free, some
    // after the backend granted it.
    for round in 0..20u64 {
        let attempt = {
            let b = b.clone();
            let name = name.clone();
            tokio::spawn(async move { b.acquire_with(&name, Duration::from_secs(300)).await })
        };
        tokio::time::sleep(Duration::from_micros(round * 250)).await;
        attempt.abort();
        if let Ok(Ok(guard)) = attempt.await {
            guard.release().await.expect("release");
        }
    }
    // With a 60 s lease, a leaked grant would make this time out.
    let guard = a
        .acquire_with(&name, PATIENCE)
        .await
        .expect("nothing may stay held after cancelled acquires");
    guard.release().await.expect("release");
}

/// A wait cancelled through `AcquireOptions::cancel_on`, at any point, has
/// released whatever it was granted by the time it returns: another client
/// can take the lock at once, not only after a background release.
pub async fn acquire_or_cancel_returns_holding_nothing(fixture: &dyn Fixture) {
    let name = unique_name("cancel-token");
    let a = client_with(fixture, LEAK_CATCHING_LEASE).await;
    let b = client_with(fixture, LEAK_CATCHING_LEASE).await;
    for round in 0..20u64 {
        let after = Duration::from_micros(round * 250);
        cancelled_wait_leaves_nothing(&a, &b, &name, Claim::Exclusive, after)
            .await
            .unwrap_or_else(|error| panic!("round {round}: {error}"));
    }
}

/// Many tasks in several clients never overlap, and every grant's token is
/// greater than the last.
pub async fn mutual_exclusion_across_clients(fixture: &dyn Fixture) {
    const CLIENTS: usize = 4;
    const TASKS_PER_CLIENT: usize = 4;
    const ROUNDS: usize = 8;
    let name = unique_name("exclusion");
    let inside = shared(AtomicBool::new(false));
    let overlaps = shared(AtomicUsize::new(0));
    let tokens = shared(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let client = client(fixture).await;
        for _ in 0..TASKS_PER_CLIENT {
            let (client, name) = (client.clone(), name.clone());
            let (inside, overlaps, tokens) = (inside.clone(), overlaps.clone(), tokens.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let guard = client
                        .acquire_with(&name, Duration::from_secs(60))
                        .await
                        .expect("acquire");
                    if inside.swap(true, Ordering::SeqCst) {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    tokens.lock().unwrap().push(guard.fencing_token());
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    inside.store(false, Ordering::SeqCst);
                    guard.release().await.expect("release");
                }
            }));
        }
    }
    for task in tasks {
        bounded("a contending task", task).await.expect("task");
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders overlapped");
    let tokens = tokens.lock().unwrap();
    assert_eq!(tokens.len(), CLIENTS * TASKS_PER_CLIENT * ROUNDS);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens must strictly increase in grant order: {tokens:?}"
    );
}

/// Tasks of one client queue for a name locally: each gets it in turn.
pub async fn local_waiters_share_one_lock(fixture: &dyn Fixture) {
    let name = unique_name("local");
    let client = client(fixture).await;
    let holders = shared(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (client, name, holders) = (client.clone(), name.clone(), holders.clone());
        tasks.push(tokio::spawn(async move {
            let guard = client
                .acquire_with(&name, Duration::from_secs(60))
                .await
                .expect("acquire");
            assert_eq!(
                holders.fetch_add(1, Ordering::SeqCst),
                0,
                "two local holders"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
            holders.fetch_sub(1, Ordering::SeqCst);
            guard.fencing_token()
        }));
    }
    let mut tokens = Vec::new();
    for task in tasks {
        tokens.push(bounded("a local waiter", task).await.expect("task"));
    }
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), 16, "each holder had its own grant");
}

/// Names differing only in case are different locks, and odd names work
/// and come back from `list` exactly.
pub async fn names_are_case_sensitive_and_exact(fixture: &dyn Fixture) {
    let a = client(fixture).await;
    let b = client(fixture).await;
    let lower = unique_name("case-a");
    let upper = LockName::new(lower.as_str().replacen("case-a", "case-A", 1)).unwrap();
    let g1 = a.acquire_with(&lower, PATIENCE).await.expect("lower");
    let g2 = b
        .try_acquire(&upper)
        .await
        .expect("try upper")
        .expect("case differs: a different lock");
    g1.release().await.expect("release");
    g2.release().await.expect("release");

    let prefix = unique_name("odd");
    let mut names = Vec::new();
    for odd in [
        "$$NOW",
        "$x",
        "a.b",
        "nul\0byte",
        "cr\r\nlf",
        "emoji 🦀🔒",
        " spaces ",
    ] {
        names.push(LockName::new(format!("{prefix}{odd}")).unwrap());
    }
    let long = format!("{prefix}:{}", "é".repeat(1024));
    let mut long_bytes = long.as_bytes()[..1024].to_vec();
    while std::str::from_utf8(&long_bytes).is_err() {
        long_bytes.pop();
    }
    names.push(LockName::new(String::from_utf8(long_bytes).unwrap()).unwrap());
    let mut guards = Vec::new();
    for name in &names {
        let guard = a
            .try_acquire(name)
            .await
            .unwrap_or_else(|e| panic!("{name:?}: {e}"))
            .unwrap_or_else(|| panic!("{name:?} collided with another name"));
        assert_eq!(guard.name(), name);
        guards.push(guard);
    }
    let listed = a.list().await.expect("list");
    for name in &names {
        assert!(
            listed.iter().any(|info| &info.name == name),
            "{name:?} missing from list, or not round-tripped exactly"
        );
    }
    for guard in guards {
        assert!(guard.release().await.expect("release"));
    }
}

/// `list` shows a held lock with its holder and token, and not after release.
pub async fn list_shows_held_locks(fixture: &dyn Fixture) {
    let name = unique_name("list");
    let a = client(fixture).await;
    let guard = a.acquire_with(&name, PATIENCE).await.expect("acquire");
    let listed = a.list().await.expect("list");
    let info = listed
        .iter()
        .find(|info| info.name == name)
        .unwrap_or_else(|| panic!("{name:?} missing from {listed:?}"));
    assert_eq!(info.fencing_token, Some(guard.fencing_token()));
    let holder = info.holder.as_ref().expect("holder recorded");
    assert_eq!(holder.pid, std::process::id());
    assert_eq!(holder.label.as_deref(), Some("conformance"));
    if let Some(left) = info.expires_in {
        assert!(
            left <= fixture.lease(),
            "time left {left:?} exceeds the lease"
        );
    }
    guard.release().await.expect("release");
    let listed = a.list().await.expect("list");
    assert!(
        !listed.iter().any(|info| info.name == name),
        "released lock still listed"
    );
}

fn request(name: &LockName, lease: Duration) -> AcquireRequest {
    AcquireRequest::new(
        name.clone(),
        distlock_core::Claim::Exclusive,
        lease,
        Holder::this_process(Some("conformance")).into(),
    )
}

pub(crate) async fn grant(backend: &dyn Backend, name: &LockName, lease: Duration) -> Lease {
    let request = request(name, lease);
    match backend
        .try_acquire(&request, &mut distlock_core::backend::WaitState::new())
        .await
        .expect("try_acquire")
    {
        Attempt::Acquired {
            fencing_token,
            state,
        } => request.granted(fencing_token, state),
        held => panic!("expected a grant on a fresh name, got {held:?}"),
    }
}

/// Releasing twice is harmless, and releasing a lease that is not ours
/// leaves the holder's lock alone.
pub async fn release_is_idempotent_and_owner_checked(fixture: &dyn Fixture) {
    let name = unique_name("release");
    let backend = fixture.backend().await;
    let lease = grant(&*backend, &name, LEAK_CATCHING_LEASE).await;
    assert!(backend.release(&lease).await.expect("release"));
    assert!(
        !backend.release(&lease).await.expect("second release"),
        "a second release reports false"
    );

    let holder = client_with(fixture, LEAK_CATCHING_LEASE).await;
    let guard = holder.acquire_with(&name, PATIENCE).await.expect("acquire");
    let stranger = Lease {
        id: LeaseId::random(),
        ..lease.clone()
    };
    assert!(!backend.release(&stranger).await.expect("stranger release"));
    assert!(!backend.release(&lease).await.expect("stale release"));
    assert!(
        !backend.extend(&stranger).await.expect("stranger extend"),
        "never extend someone else's lease"
    );
    let other = client(fixture).await;
    assert!(
        other.try_acquire(&name).await.expect("try").is_none(),
        "a stale release must leave the holder's lock in place"
    );
    assert!(
        guard.release().await.expect("release"),
        "the holder still held it"
    );
}

/// A hand-over passes a live grant of ours to a new identity in one step,
/// with a greater token; it never touches someone else's grant or an
/// expired one. A backend without it takes the plain path: a release that
/// ends the old grant, and a grant of its own for the next task of the
/// client, with a greater token.
pub async fn hand_over_is_atomic_and_owner_checked(fixture: &dyn Fixture) {
    let name = unique_name("hand-over");
    let backend = fixture.backend().await;
    let Some(hand_overs) = backend.hand_overs() else {
        passes_on_by_release_and_grant(fixture, &name).await;
        return;
    };
    let old = grant(&*backend, &name, LEAK_CATCHING_LEASE).await;
    let next = request(&name, LEAK_CATCHING_LEASE);
    let (fencing_token, state) = match hand_overs.hand_over(&old, &next).await.expect("hand over") {
        HandOver::Granted {
            fencing_token,
            state,
            ..
        } => (fencing_token, state),
        HandOver::NotOurs => panic!("a live grant of ours must be handed over"),
    };
    assert!(
        fencing_token > old.fencing_token,
        "{fencing_token} after {}",
        old.fencing_token
    );
    let new = next.granted(fencing_token, state);
    let other = client(fixture).await;
    assert!(
        other.try_acquire(&name).await.expect("try").is_none(),
        "the handed-over lock is held"
    );
    assert!(
        !backend.extend(&old).await.expect("extend old"),
        "the old grant ended"
    );
    assert!(
        !backend.release(&old).await.expect("release old"),
        "the old grant ended"
    );
    let stale = hand_overs
        .hand_over(&old, &request(&name, LEAK_CATCHING_LEASE))
        .await
        .expect("stale hand-over");
    assert!(
        matches!(stale, HandOver::NotOurs),
        "a stale grant hands nothing over"
    );
    assert!(
        backend.extend(&new).await.expect("extend new"),
        "the new grant is live"
    );
    assert!(backend.release(&new).await.expect("release new"));

    // An expired grant is not ours to hand over.
    let short = grant(&*backend, &name, fixture.lease()).await;
    tokio::time::sleep(fixture.lease() + fixture.expiry_slack()).await;
    let late = hand_overs
        .hand_over(&short, &request(&name, LEAK_CATCHING_LEASE))
        .await
        .expect("late hand-over");
    assert!(
        matches!(late, HandOver::NotOurs),
        "an expired grant hands nothing over"
    );
    let after = other
        .acquire_with(&name, PATIENCE)
        .await
        .expect("the expired lock is free");
    after.release().await.expect("release");
}

/// Background extension keeps a lock across at least three lease periods.
pub async fn extension_keeps_the_lock_across_three_leases(fixture: &dyn Fixture) {
    let name = unique_name("extend");
    let a = client(fixture).await;
    let b = client(fixture).await;
    let guard = a.acquire_with(&name, PATIENCE).await.expect("acquire");
    let hold = fixture.lease() * 7 / 2;
    let started = Instant::now();
    while started.elapsed() < hold {
        tokio::time::sleep(fixture.lease() / 2).await;
        assert!(
            b.try_acquire(&name).await.expect("try").is_none(),
            "lock escaped after {:?}",
            started.elapsed()
        );
        assert!(!guard.is_lost(), "lost after {:?}", started.elapsed());
    }
    guard
        .extend()
        .await
        .expect("a manual extension succeeds too");
    assert!(
        guard.release().await.expect("release"),
        "still ours after three leases"
    );
}

/// A forced release makes the holder's `lost()` fire, and its release then
/// reports false.
pub async fn lost_fires_on_forced_release(fixture: &dyn Fixture) {
    let name = unique_name("forced");
    let a = client(fixture).await;
    let admin = fixture.backend().await;
    let guard = a.acquire_with(&name, PATIENCE).await.expect("acquire");
    assert!(
        admin
            .force_release(&name, ADMIN_LIMIT)
            .await
            .expect("force release"),
        "it was held"
    );
    let reason = bounded("lost() after a forced release", guard.lost()).await;
    // Refused at the next extension, or Detected at once by a backend
    // that watches its grants (etcd).
    assert!(
        matches!(reason, LossReason::Refused | LossReason::Detected),
        "{reason:?}"
    );
    assert!(guard.is_lost());
    assert!(matches!(guard.extend().await, Err(Error::Lost { .. })));
    assert!(
        !guard.release().await.expect("release"),
        "release of a lost lock reports false"
    );
}

/// Tokens strictly increase across a release and across a holder that
/// vanished (its lease expired, or for process-bound locks, its handle
/// closed).
pub async fn fencing_tokens_increase_across_release_and_expiry(fixture: &dyn Fixture) {
    let name = unique_name("tokens");
    let a = client(fixture).await;
    let first = a.acquire_with(&name, PATIENCE).await.expect("acquire");
    let t1 = first.fencing_token();
    first.release().await.expect("release");
    let second = a
        .acquire_with(&name, PATIENCE)
        .await
        .expect("acquire again");
    let t2 = second.fencing_token();
    assert!(t2 > t1, "{t2} after {t1}");
    second.release().await.expect("release");

    // A holder that vanishes without releasing.
    let backend = fixture.backend().await;
    let lease = grant(&*backend, &name, fixture.lease()).await;
    let vanished = lease.fencing_token;
    assert!(vanished > t2);
    // Dropping the lease drops its grant state: a process-bound lock (an
    // open file) ends with it, as when its process dies; others expire.
    drop(lease);
    let third = bounded(
        "acquire after the holder vanished",
        a.acquire_with(&name, fixture.lease() * 5),
    )
    .await
    .expect("the vanished holder's lease ends");
    assert!(
        third.fencing_token() > vanished,
        "{} after {vanished}",
        third.fencing_token(),
    );
    third.release().await.expect("release");
}

/// `with_lock` releases when the work returns, returns an error, or panics.
pub async fn with_lock_releases_on_every_path(fixture: &dyn Fixture) {
    let name = unique_name("with-lock");
    let a = client_with(fixture, LEAK_CATCHING_LEASE).await;
    let b = client_with(fixture, LEAK_CATCHING_LEASE).await;
    let token = a
        .with_lock(
            &name,
            PATIENCE,
            |context| async move { context.fencing_token },
        )
        .await
        .expect("with_lock");
    assert!(token > 0);
    b.acquire_with(&name, PATIENCE)
        .await
        .expect("free after Ok")
        .release()
        .await
        .unwrap();

    let failed: Result<Result<(), &str>, Error> = a
        .with_lock(&name, PATIENCE, |_| async { Err("work failed") })
        .await;
    assert_eq!(failed.expect("lock part succeeded"), Err("work failed"));
    b.acquire_with(&name, PATIENCE)
        .await
        .expect("free after Err")
        .release()
        .await
        .unwrap();

    let panicking = {
        let (a, name) = (a.clone(), name.clone());
        tokio::spawn(async move {
            a.with_lock(&name, PATIENCE, |_| async {
                panic!("work panicked");
            })
            .await
        })
    };
    assert!(panicking.await.expect_err("panicked").is_panic());
    let after_panic = b
        .acquire_with(&name, PATIENCE)
        .await
        .expect("free after a panic");
    after_panic.release().await.unwrap();
}

/// Dropping a guard without releasing frees the lock soon.
pub async fn dropped_guard_releases(fixture: &dyn Fixture) {
    let name = unique_name("drop");
    let a = client_with(fixture, LEAK_CATCHING_LEASE).await;
    let b = client_with(fixture, LEAK_CATCHING_LEASE).await;
    drop(a.acquire_with(&name, PATIENCE).await.expect("acquire"));
    let guard = b
        .acquire_with(&name, PATIENCE)
        .await
        .expect("a dropped guard releases");
    guard.release().await.expect("release");
}

/// A `distlock run` holder killed with SIGKILL frees the lock: at once for
/// process-bound backends, within one lease for the others.
pub async fn cross_process_sigkill_frees_the_lock(fixture: &dyn Fixture) {
    let name = unique_name("sigkill");
    let url = fixture.url().expect("cross-process cases need a URL");
    let a = client(fixture).await;
    let mut child = HeldByChild::start(&url, &name, fixture.lease()).await;
    assert!(
        a.try_acquire(&name).await.expect("try").is_none(),
        "the child holds it"
    );
    child.kill_hard();
    let guard = if a.backend().capabilities().process_bound {
        a.try_acquire(&name)
            .await
            .expect("try")
            .expect("free at once after the holder died")
    } else {
        a.acquire_with(
            &name,
            fixture.lease() + fixture.expiry_slack() + Duration::from_secs(1),
        )
        .await
        .expect("free within one lease after the holder died")
    };
    assert!(guard.fencing_token() > child.fencing_token());
    guard.release().await.expect("release");
}

/// A SIGSTOPped holder: on lease-based backends it loses the lock to another
/// process after its lease and reports the loss once continued; on
/// process-bound backends it keeps the lock.
pub async fn cross_process_sigstop_holder(fixture: &dyn Fixture) {
    let name = unique_name("sigstop");
    let url = fixture.url().expect("cross-process cases need a URL");
    let a = client(fixture).await;
    let mut child = HeldByChild::start(&url, &name, fixture.lease()).await;
    child.stop();
    if a.backend().capabilities().process_bound {
        tokio::time::sleep(fixture.lease() * 3 / 2).await;
        assert!(
            a.try_acquire(&name).await.expect("try").is_none(),
            "a process-bound lock stays with a stopped holder"
        );
        child.resume();
        tokio::time::sleep(fixture.lease()).await;
        assert!(
            child.is_running(),
            "the resumed holder keeps running under its lock"
        );
        child.terminate();
        let guard = bounded(
            "acquire after the holder exited",
            a.acquire_with(&name, PATIENCE),
        )
        .await
        .expect("free after the holder exited");
        guard.release().await.expect("release");
    } else {
        let guard = a
            .acquire_with(&name, fixture.lease() * 3 + fixture.expiry_slack())
            .await
            .expect("the stopped holder's lease runs out");
        assert!(guard.fencing_token() > child.fencing_token());
        child.resume();
        let status = child.wait().await;
        assert_eq!(
            status,
            Some(76),
            "the resumed holder reports the lock lost (exit 76)"
        );
        assert!(
            guard.release().await.expect("release"),
            "the new holder kept the lock"
        );
    }
}

/// An election whose leader is another process: SIGKILLed, it is followed
/// by a campaigner here, within one lease, with a greater term.
pub async fn cross_process_election_survives_a_killed_leader(fixture: &dyn Fixture) {
    let name = unique_name("killed-leader");
    let url = fixture.url().expect("cross-process cases need a URL");
    let here = client(fixture).await;
    let election = here.election(&name).expect("a valid name");
    let mut leader = HeldByChild::start(&url, &name, fixture.lease()).await;
    leader.kill_hard();
    let leading = election
        .campaign(
            "http://here:8080",
            fixture.lease() + fixture.expiry_slack() + Duration::from_secs(1),
        )
        .await
        .expect("elected within one lease of the leader's death");
    assert!(leading.term() > leader.fencing_token());
    assert!(leading.resign().await.expect("resign"));
}

/// The plain path of a backend without hand-overs: a task of the client
/// releases `name` while another waits for it, and the waiter is granted
/// it afresh, with a greater token; the released grant is over.
async fn passes_on_by_release_and_grant(fixture: &dyn Fixture, name: &LockName) {
    let holder = client_with(fixture, LEAK_CATCHING_LEASE).await;
    let backend = holder.backend();
    let old = grant(&**backend, name, LEAK_CATCHING_LEASE).await;
    assert!(backend.release(&old).await.expect("release"), "it was ours");
    assert!(
        !backend.extend(&old).await.expect("extend old"),
        "the released grant ended"
    );
    let first = holder.acquire_with(name, PATIENCE).await.expect("acquire");
    assert!(first.fencing_token() > old.fencing_token);
    let waiter = {
        let (holder, name) = (holder.clone(), name.clone());
        tokio::spawn(async move { holder.acquire_with(&name, PATIENCE).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let first_token = first.fencing_token();
    assert!(first.release().await.expect("release"), "it was ours");
    let next = bounded("the waiting task of the same client", waiter)
        .await
        .expect("the waiting task")
        .expect("the waiter is granted the lock once it is released");
    assert!(
        next.fencing_token() > first_token,
        "{} after {first_token}",
        next.fencing_token()
    );
    assert!(next.release().await.expect("release"));
}
