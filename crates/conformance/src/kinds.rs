//! The cases for shared locks and semaphores. A backend that does not grant
//! a kind must answer [`Error::Unsupported`] for it, at once; each case
//! checks that instead where the capability is off.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use distlock_core::backend::{AcquireRequest, Attempt, WaitState};
use distlock_core::{
    AcquireOptions, Claim, Error, Holder, LockClient, LockKind, LossReason, TryOptions,
};

use crate::fixture::Fixture;
use crate::process::HeldByChild;
use crate::support::{
    LEAK_CATCHING_LEASE, bounded, cancelled_wait_leaves_nothing, client, client_with,
    exclusive_side, shared, unique_name,
};

const PATIENCE: Duration = Duration::from_secs(10);

/// Whether `client`'s backend grants `claim`; when it does not, checks
/// that asking for it is an immediate [`Error::Unsupported`].
async fn grants(client: &LockClient, claim: Claim) -> bool {
    if client.backend().capabilities().grants(claim) {
        return true;
    }
    let name = unique_name("unsupported");
    match client
        .acquire_with(&name, AcquireOptions::new().claim(claim).timeout(PATIENCE))
        .await
    {
        Err(Error::Unsupported(reason)) => {
            assert!(!reason.is_empty(), "the refusal says why");
        }
        other => panic!("{claim} is not granted here, so expected Unsupported, got {other:?}"),
    }
    false
}

/// Readers hold a name together: two clients each hold a reader at once,
/// each with its own grant and token, and `list` shows both.
pub async fn readers_overlap(fixture: &dyn Fixture) {
    let a = client(fixture).await;
    let b = client(fixture).await;
    if !grants(&a, Claim::Shared).await {
        return;
    }
    let name = unique_name("readers");
    let first = a
        .acquire_with(&name, AcquireOptions::new().shared().timeout(PATIENCE))
        .await
        .expect("first reader");
    let second = b
        .acquire_with(
            &name,
            AcquireOptions::new().shared().timeout(Duration::ZERO),
        )
        .await
        .expect("a second reader joins at once");
    let third = a
        .try_acquire_with(&name, TryOptions::new().shared())
        .await
        .expect("try")
        .expect("a reader of the same client joins too");
    assert_eq!(first.claim(), Claim::Shared);
    let mut tokens = vec![
        first.fencing_token(),
        second.fencing_token(),
        third.fencing_token(),
    ];
    tokens.dedup();
    assert_eq!(tokens.len(), 3, "each reader has its own token");
    let listed = a.list().await.expect("list");
    let readers = listed
        .iter()
        .filter(|info| info.name == name && info.kind == LockKind::Shared)
        .count();
    if a.backend().capabilities().lists_every_holder {
        assert_eq!(readers, 3, "every reader is listed: {listed:?}");
    }
    for guard in [first, second, third] {
        assert!(guard.release().await.expect("release"));
    }
}

/// A writer excludes readers and other writers, and readers exclude a
/// writer.
pub async fn a_writer_excludes_readers_and_writers(fixture: &dyn Fixture) {
    let a = client(fixture).await;
    let b = client(fixture).await;
    if !grants(&a, Claim::Shared).await {
        return;
    }
    let name = unique_name("writer");
    let writer = a.acquire_with(&name, PATIENCE).await.expect("writer");
    assert!(
        b.try_acquire_with(&name, TryOptions::new().shared())
            .await
            .expect("try")
            .is_none()
    );
    assert!(b.try_acquire(&name).await.expect("try").is_none());
    assert!(
        a.try_acquire_with(&name, TryOptions::new().shared())
            .await
            .expect("try")
            .is_none(),
        "not even a reader of the writer's own client"
    );
    writer.release().await.expect("release");
    let reader = b
        .acquire_with(&name, AcquireOptions::new().shared().timeout(PATIENCE))
        .await
        .expect("reader");
    assert!(
        a.try_acquire(&name).await.expect("try").is_none(),
        "a reader keeps writers out"
    );
    reader.release().await.expect("release");
    a.acquire_with(&name, PATIENCE)
        .await
        .expect("free again")
        .release()
        .await
        .expect("release");
}

/// Once a writer waits, readers that come after it wait behind it; the
/// reader already inside finishes first, and then the writer is served.
pub async fn a_waiting_writer_is_served_before_later_readers(fixture: &dyn Fixture) {
    let a = client(fixture).await;
    let b = client(fixture).await;
    let c = client(fixture).await;
    if !grants(&a, Claim::Shared).await {
        return;
    }
    let name = unique_name("writer-first");
    let inside = a
        .acquire_with(&name, AcquireOptions::new().shared().timeout(PATIENCE))
        .await
        .expect("reader");
    let writer = {
        let (b, name) = (b.clone(), name.clone());
        tokio::spawn(async move { b.acquire_with(&name, Duration::from_secs(60)).await })
    };
    // The writer has asked at least once, and so waits.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !writer.is_finished(),
        "the reader inside keeps the writer out"
    );
    assert!(
        c.try_acquire_with(&name, TryOptions::new().shared())
            .await
            .expect("try")
            .is_none(),
        "a reader that comes after a waiting writer waits behind it"
    );
    let late_reader = {
        let (c, name) = (c.clone(), name.clone());
        tokio::spawn(async move {
            c.acquire_with(
                &name,
                AcquireOptions::new()
                    .shared()
                    .timeout(Duration::from_secs(60)),
            )
            .await
        })
    };
    inside.release().await.expect("release");
    let writer = bounded("the waiting writer", writer)
        .await
        .expect("task")
        .expect("the writer is served once the reader inside left");
    assert!(
        !late_reader.is_finished(),
        "the late reader waits for the writer"
    );
    let writer_token = writer.fencing_token();
    writer.release().await.expect("release");
    let reader = bounded("the late reader", late_reader)
        .await
        .expect("task")
        .expect("the late reader is served after the writer");
    assert!(reader.fencing_token() > writer_token);
    reader.release().await.expect("release");
}

/// A writer that waits behind another writer keeps later readers out too:
/// once the writer inside leaves, a reader that comes before the waiting
/// writer asks again waits behind it. Where the fixture says a writer
/// waiting behind a writer posts no such mark (MongoDB), that reader goes
/// in instead.
pub async fn a_writer_waiting_behind_a_writer_keeps_later_readers_out(fixture: &dyn Fixture) {
    let a = client(fixture).await;
    let b = client(fixture).await;
    if !grants(&a, Claim::Shared).await {
        return;
    }
    let in_line = fixture.writers_wait_behind_writers_in_line();
    let name = unique_name("writer-behind-writer");
    let inside = a.acquire_with(&name, PATIENCE).await.expect("writer");
    // The second writer asks once, as a wait does, and so waits. Asked
    // through the backend, so that nothing asks again for it.
    let backend = fixture.backend().await;
    let waiting = AcquireRequest {
        retries: true,
        ..AcquireRequest::new(
            name.clone(),
            Claim::Exclusive,
            fixture.lease(),
            Holder::this_process(Some("conformance")).into(),
        )
    };
    let mut wait = WaitState::new();
    let attempt = backend
        .try_acquire(&waiting, &mut wait)
        .await
        .expect("the waiting writer asks");
    assert!(
        matches!(attempt, Attempt::Held { .. }),
        "the writer inside keeps the second one out"
    );
    inside.release().await.expect("release");
    let early = b
        .try_acquire_with(&name, TryOptions::new().shared())
        .await
        .expect("try");
    if in_line {
        assert!(
            early.is_none(),
            "a reader that comes after a waiting writer waits behind it, \
             even when that writer waited behind another writer"
        );
    } else {
        let early = early.expect(
            "a writer kept out by a writer posts no mark here, so a reader \
             that comes before its next attempt goes in",
        );
        assert!(early.release().await.expect("release"));
    }
    backend
        .end_wait(&waiting, wait)
        .await
        .expect("the waiting writer gives up");
    let reader = b
        .acquire_with(&name, AcquireOptions::new().shared().timeout(PATIENCE))
        .await
        .expect("once the writer gave up, readers go in");
    reader.release().await.expect("release");
}

/// A writer that stops waiting (its wait timed out) holds no reader back.
pub async fn a_writer_that_gave_up_lets_readers_in(fixture: &dyn Fixture) {
    let a = client(fixture).await;
    let b = client(fixture).await;
    if !grants(&a, Claim::Shared).await {
        return;
    }
    let name = unique_name("writer-gave-up");
    let inside = a
        .acquire_with(&name, AcquireOptions::new().shared().timeout(PATIENCE))
        .await
        .expect("reader");
    let gave_up = b.acquire_with(&name, Duration::from_millis(300)).await;
    assert!(matches!(gave_up, Err(Error::Timeout { .. })), "{gave_up:?}");
    let next = bounded(
        "a reader after the writer gave up",
        a.acquire_with(&name, AcquireOptions::new().shared().timeout(PATIENCE)),
    )
    .await
    .expect("readers are let in again");
    inside.release().await.expect("release");
    next.release().await.expect("release");
}

/// Many tasks in several clients take permits of a semaphore of 3: never
/// more than 3 hold at once, and 3 do hold at once.
pub async fn a_semaphore_never_exceeds_its_limit_and_reaches_it(fixture: &dyn Fixture) {
    const LIMIT: u32 = 3;
    const CLIENTS: usize = 3;
    const TASKS_PER_CLIENT: usize = 3;
    const ROUNDS: usize = 4;
    let probe = client(fixture).await;
    if !grants(&probe, Claim::Permit { limit: LIMIT }).await {
        return;
    }
    let name = unique_name("semaphore");
    let inside = shared(AtomicUsize::new(0));
    let most = shared(AtomicUsize::new(0));
    let tokens = shared(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let client = client(fixture).await;
        for _ in 0..TASKS_PER_CLIENT {
            let (client, name) = (client.clone(), name.clone());
            let (inside, most, tokens) = (inside.clone(), most.clone(), tokens.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let permit = client
                        .acquire_with(
                            &name,
                            AcquireOptions::new()
                                .permit(LIMIT)
                                .timeout(Duration::from_secs(60)),
                        )
                        .await
                        .expect("permit");
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokens.lock().unwrap().push(permit.fencing_token());
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    permit.release().await.expect("release");
                }
            }));
        }
    }
    for task in tasks {
        bounded("a permit holder", task).await.expect("task");
    }
    let most = most.load(Ordering::SeqCst);
    assert!(
        most <= LIMIT as usize,
        "{most} held permits of {LIMIT} at once"
    );
    assert_eq!(
        most, LIMIT as usize,
        "all {LIMIT} permits were held at once"
    );
    let mut tokens = tokens.lock().unwrap().clone();
    let count = tokens.len();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), count, "every permit has its own token");
}

/// A permit holder that vanishes without releasing gives its permit back:
/// at once on process-bound backends, when its lease ends on others.
pub async fn a_dead_holders_permit_returns(fixture: &dyn Fixture) {
    let a = client(fixture).await;
    if !grants(&a, Claim::Permit { limit: 1 }).await {
        return;
    }
    let name = unique_name("dead-permit");
    let backend = fixture.backend().await;
    let request = AcquireRequest::new(
        name.clone(),
        Claim::Permit { limit: 1 },
        fixture.lease(),
        Holder::this_process(Some("conformance")).into(),
    );
    let vanished = match backend
        .try_acquire(&request, &mut WaitState::new())
        .await
        .expect("try_acquire")
    {
        Attempt::Acquired {
            fencing_token,
            state,
        } => {
            // Dropping the grant's state is how a process-bound grant ends
            // when its process dies; the others' leases simply run out.
            drop(state);
            fencing_token
        }
        held => panic!("a fresh semaphore has a permit, got {held:?}"),
    };
    let permit = bounded(
        "a permit after its holder vanished",
        a.acquire_with(
            &name,
            AcquireOptions::new()
                .permit(1)
                .timeout(fixture.lease() * 5 + fixture.expiry_slack()),
        ),
    )
    .await
    .expect("the vanished holder's permit returns");
    assert!(permit.fencing_token() > vanished);
    permit.release().await.expect("release");
}

/// A semaphore asked for as a lock, a lock asked for as a semaphore, and a
/// semaphore asked for with another limit, are errors that name both
/// sides; a limit out of range is refused before the backend is asked.
pub async fn kind_and_limit_conflicts_are_errors(fixture: &dyn Fixture) {
    let a = client(fixture).await;
    let b = client(fixture).await;
    for limit in [0, distlock_core::MAX_PERMITS + 1] {
        match a
            .acquire_with(
                &unique_name("limit"),
                AcquireOptions::new().permit(limit).timeout(PATIENCE),
            )
            .await
        {
            Err(Error::InvalidConfig { field, .. }) => assert_eq!(field, "permits"),
            other => panic!("a limit of {limit} must be refused, got {other:?}"),
        }
    }
    if !grants(&a, Claim::Permit { limit: 2 }).await {
        return;
    }
    let semaphore = unique_name("conflict-sem");
    let permit = a
        .acquire_with(
            &semaphore,
            AcquireOptions::new().permit(2).timeout(PATIENCE),
        )
        .await
        .expect("permit");
    for asked in [Claim::Exclusive, Claim::Shared, Claim::Permit { limit: 3 }] {
        match b
            .acquire_with(
                &semaphore,
                AcquireOptions::new().claim(asked).timeout(PATIENCE),
            )
            .await
        {
            Err(Error::KindConflict {
                held, requested, ..
            }) => {
                assert_eq!(held, Claim::Permit { limit: 2 });
                assert_eq!(requested, asked);
            }
            Err(Error::Unsupported(_)) if asked == Claim::Shared => {}
            other => panic!("{asked} on a semaphore of 2 must conflict, got {other:?}"),
        }
    }
    let message = b
        .acquire_with(&semaphore, PATIENCE)
        .await
        .expect_err("conflict")
        .to_string();
    assert!(
        message.contains("semaphore of 2 permits") && message.contains("exclusive"),
        "the error names both sides: {message}"
    );
    permit.release().await.expect("release");

    let lock = unique_name("conflict-lock");
    let held = a.acquire_with(&lock, PATIENCE).await.expect("lock");
    match b
        .acquire_with(&lock, AcquireOptions::new().permit(2).timeout(PATIENCE))
        .await
    {
        Err(Error::KindConflict { held, .. }) => assert_eq!(held, Claim::Exclusive),
        other => panic!("a permit of a held lock must conflict, got {other:?}"),
    }
    held.release().await.expect("release");
    // Free again, the name takes the limit of whoever asks first.
    b.acquire_with(&lock, AcquireOptions::new().permit(5).timeout(PATIENCE))
        .await
        .expect("a free name becomes a semaphore")
        .release()
        .await
        .expect("release");
}

/// Tokens strictly increase across kinds: a writer's token is above every
/// earlier reader's and writer's, and a reader's above the writer before.
pub async fn tokens_increase_across_kinds(fixture: &dyn Fixture) {
    let a = client(fixture).await;
    if !grants(&a, Claim::Shared).await {
        return;
    }
    let name = unique_name("kind-tokens");
    let mut last = 0;
    for round in 0..3 {
        let r1 = a
            .acquire_with(&name, AcquireOptions::new().shared().timeout(PATIENCE))
            .await
            .expect("reader");
        let r2 = a
            .acquire_with(&name, AcquireOptions::new().shared().timeout(PATIENCE))
            .await
            .expect("reader");
        assert!(r1.fencing_token() > last, "round {round}");
        assert!(r2.fencing_token() > r1.fencing_token());
        last = r2.fencing_token();
        r1.release().await.expect("release");
        r2.release().await.expect("release");
        let writer = a.acquire_with(&name, PATIENCE).await.expect("writer");
        assert!(writer.fencing_token() > last, "round {round}");
        last = writer.fencing_token();
        writer.release().await.expect("release");
    }
}

/// `lost()` fires for a reader and for a permit when a forced release takes
/// them away, and a forced release takes every holder.
pub async fn lost_fires_for_each_kind(fixture: &dyn Fixture) {
    let a = client(fixture).await;
    let admin = client(fixture).await;
    for claim in [Claim::Shared, Claim::Permit { limit: 2 }] {
        if !grants(&a, claim).await {
            continue;
        }
        let name = unique_name("lost-kind");
        let one = a
            .acquire_with(&name, AcquireOptions::new().claim(claim).timeout(PATIENCE))
            .await
            .expect("first");
        let two = a
            .acquire_with(&name, AcquireOptions::new().claim(claim).timeout(PATIENCE))
            .await
            .expect("second");
        assert!(admin.force_release(&name).await.expect("force release"));
        for guard in [one, two] {
            let reason = bounded("lost() after a forced release", guard.lost()).await;
            assert!(
                matches!(reason, LossReason::Refused | LossReason::Detected),
                "{claim}: {reason:?}"
            );
            assert!(!guard.release().await.expect("release"));
        }
    }
}

/// Waits for a reader or a permit, cancelled at random points, leave
/// nothing held: a writer or the whole semaphore can be had right after.
pub async fn cancelled_waits_leave_nothing_held_for_each_kind(fixture: &dyn Fixture) {
    let a = client_with(fixture, LEAK_CATCHING_LEASE).await;
    let b = client_with(fixture, LEAK_CATCHING_LEASE).await;
    for claim in [Claim::Shared, Claim::Permit { limit: 1 }] {
        if !grants(&a, claim).await {
            continue;
        }
        let name = unique_name("cancel-kind");
        for round in 0..10u64 {
            let after = Duration::from_micros(round * 300);
            cancelled_wait_leaves_nothing(&a, &b, &name, claim, after)
                .await
                .unwrap_or_else(|error| panic!("{claim}, round {round}: {error}"));
        }
    }
}

/// A `distlock run --shared` or `--permits 1` holder killed with SIGKILL
/// gives its share back: at once on process-bound backends, within one
/// lease on the others.
pub async fn cross_process_sigkill_frees_each_kind(fixture: &dyn Fixture) {
    let url = fixture.url().expect("cross-process cases need a URL");
    let a = client(fixture).await;
    for claim in [Claim::Shared, Claim::Permit { limit: 1 }] {
        if !grants(&a, claim).await {
            continue;
        }
        let name = unique_name("sigkill-kind");
        let mut child = HeldByChild::start_as(&url, &name, fixture.lease(), claim).await;
        let excluded = exclusive_side(claim);
        assert!(
            a.try_acquire_with(&name, excluded)
                .await
                .expect("try")
                .is_none(),
            "the child's {claim} keeps {excluded} out"
        );
        child.kill_hard();
        let guard = if a.backend().capabilities().process_bound {
            a.try_acquire_with(&name, excluded)
                .await
                .expect("try")
                .unwrap_or_else(|| panic!("{claim}: free at once after the holder died"))
        } else {
            a.acquire_with(
                &name,
                AcquireOptions::new()
                    .claim(excluded)
                    .timeout(fixture.lease() + fixture.expiry_slack() + Duration::from_secs(1)),
            )
            .await
            .expect("free within one lease after the holder died")
        };
        assert!(guard.fencing_token() > child.fencing_token());
        guard.release().await.expect("release");
    }
}
