//! Resuming a grant by its handle ([`LockClient::resume`]): the store
//! takes the very grant up again, with its token, for a client that
//! names it, once; a grant released, run out or held by another is
//! [`Error::Lost`]. A backend whose grants die with their process refuses
//! with the reason.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::Resuming;
use distlock_core::testing::{Call, Hook, TestBackend};
use distlock_core::{
    AcquireOptions, Claim, Error, LockClient, LockGuard, LockName, Result, ResumeHandle,
};

use crate::fixture::Fixture;
use crate::process::HeldByChild;
use crate::support::{bounded, client, test_options, unique_name};

const PATIENCE: Duration = Duration::from_secs(10);

/// Whether `client`'s backend resumes grants; checks that one that does
/// not refuses a resume as unsupported, saying why.
async fn resumes(client: &LockClient, handle: &ResumeHandle) -> bool {
    match client.backend().abilities().resumes {
        Resuming::By(_) => true,
        Resuming::Never(why) => {
            let refused = client.resume(handle).await;
            match refused {
                Err(Error::Unsupported(message)) => {
                    assert!(message.contains(why), "{message}");
                }
                other => panic!("a backend that cannot resume answered {other:?}"),
            }
            false
        }
    }
}

/// The claims `fixture`'s backend grants.
async fn claims(fixture: &dyn Fixture) -> Vec<Claim> {
    let capabilities = fixture.backend().await.capabilities();
    let mut claims = vec![Claim::Exclusive];
    if capabilities.shared {
        claims.push(Claim::Shared);
    }
    if capabilities.semaphores {
        // One permit, so that the held one leaves none to another.
        claims.push(Claim::Permit { limit: 1 });
    }
    claims
}

async fn acquired(client: &LockClient, name: &LockName, claim: Claim) -> LockGuard {
    let options = AcquireOptions::new().claim(claim).timeout(PATIENCE);
    client.acquire_with(name, options).await.expect("acquire")
}

/// Asserts that `lost`'s holder learns it no longer holds the lock: the
/// grant went on under another identity.
async fn assert_learns_it_lost(lost: &LockGuard) {
    let _ = lost.extend().await;
    bounded("the old holder learns of its loss", lost.lost()).await;
}

/// A handle taken by another client (a process after its restart) holds
/// the same grant, with its token and claim, for every claim the backend
/// grants: others still find the lock held, the old holder loses it, and
/// the resumed guard extends and releases it.
pub async fn a_handle_resumes_its_grant_with_the_same_token(fixture: &dyn Fixture) {
    for claim in claims(fixture).await {
        let name = unique_name("resume");
        let before = client(fixture).await;
        let old = acquired(&before, &name, claim).await;
        let handle = old.handle();
        assert_eq!(
            (handle.name(), handle.claim(), handle.fencing_token()),
            (&name, claim, old.fencing_token())
        );
        let after = client(fixture).await;
        if !resumes(&after, &handle).await {
            old.release().await.expect("release");
            return;
        }
        // Read back from its text, as a restarted process would.
        let read: ResumeHandle = handle.to_string().parse().expect("the handle reads back");
        let resumed = after.resume(&read).await.expect("resume a held grant");
        assert_eq!(resumed.name(), &name);
        assert_eq!(resumed.claim(), claim);
        assert_eq!(resumed.fencing_token(), old.fencing_token(), "{claim}");
        assert_learns_it_lost(&old).await;
        resumed.extend().await.expect("the resumed grant extends");
        // A writer, or the semaphore's other permit holder.
        let excluded = match claim {
            Claim::Permit { .. } => claim,
            _ => Claim::Exclusive,
        };
        let other = client(fixture).await;
        assert!(
            other
                .try_acquire_with(&name, excluded)
                .await
                .expect("try")
                .is_none(),
            "{claim}: the lock is still held, by the resumed guard"
        );
        assert_ne!(
            resumed.handle().to_string(),
            handle.to_string(),
            "a resumed grant has a new identity"
        );
        assert!(resumed.release().await.expect("release"), "{claim}");
        drop(old);
        let next = bounded("a writer after the release", async {
            let options = AcquireOptions::new().claim(excluded).timeout(PATIENCE);
            other.acquire_with(&name, options).await
        })
        .await
        .expect("free once the resumed guard released it");
        assert!(next.fencing_token() > handle.fencing_token());
        next.release().await.expect("release");
    }
}

/// A handle of a grant that was released, resumed already, or followed
/// by another holder's grant is lost, and its resume changes nothing.
pub async fn a_released_or_spent_handle_is_lost(fixture: &dyn Fixture) {
    let name = unique_name("resume-spent");
    let first = client(fixture).await;
    let guard = acquired(&first, &name, Claim::Exclusive).await;
    let released = guard.handle();
    let resumer = client(fixture).await;
    if !resumes(&resumer, &released).await {
        guard.release().await.expect("release");
        return;
    }
    assert!(guard.release().await.expect("release"));
    assert_lost(resumer.resume(&released).await, "a released grant");

    let other = client(fixture).await;
    let holder = acquired(&other, &name, Claim::Exclusive).await;
    assert_lost(resumer.resume(&released).await, "another holder's lock");
    holder.extend().await.expect("the other holder keeps it");
    let spent = holder.handle();
    let resumed = resumer.resume(&spent).await.expect("resume");
    assert_lost(
        client(fixture).await.resume(&spent).await,
        "a handle resumed already",
    );
    resumed
        .extend()
        .await
        .expect("the first resume still holds");
    assert!(resumed.release().await.expect("release"));
    drop(holder);
}

fn assert_lost(outcome: Result<LockGuard>, what: &str) {
    match outcome {
        Err(Error::Lost { .. }) => {}
        Ok(guard) => panic!(
            "resuming {what} held {} with token {}, instead of answering Lost",
            guard.name(),
            guard.fencing_token()
        ),
        Err(error) => panic!("resuming {what} failed with {error}, not Lost"),
    }
}

/// Two clients resume one handle at once: one holds, the other is told it
/// lost, in every round.
pub async fn two_resumes_of_one_handle_cannot_both_hold(fixture: &dyn Fixture) {
    for round in 0..3 {
        let name = unique_name("resume-race");
        let holder = client(fixture).await;
        let guard = acquired(&holder, &name, Claim::Exclusive).await;
        let handle = guard.handle();
        let (one, two) = (client(fixture).await, client(fixture).await);
        if !resumes(&one, &handle).await {
            guard.release().await.expect("release");
            return;
        }
        let (a, b) = tokio::join!(one.resume(&handle), two.resume(&handle));
        let (won, lost) = match (a, b) {
            (Ok(won), lost) | (lost, Ok(won)) => (won, lost),
            (Err(a), Err(b)) => panic!("round {round}: neither resume held: {a}; {b}"),
        };
        assert_lost(lost, "a handle another client resumed at the same time");
        won.extend().await.expect("the winner holds it");
        assert_learns_it_lost(&guard).await;
        assert!(won.release().await.expect("release"), "round {round}");
    }
}

/// Fails every extension (a session's renewal included), so that a lease
/// runs out on the store while its guard lives.
#[derive(Debug, Default)]
struct NoExtensions(AtomicBool);

#[async_trait]
impl Hook for NoExtensions {
    async fn before(&self, call: Call<'_>) -> Result<()> {
        if matches!(call, Call::Extend(_) | Call::RenewSession) && self.0.load(Ordering::SeqCst) {
            return Err(Error::Backend {
                backend: "conformance",
                message: "extension failed as the case asked".into(),
                source: None,
            });
        }
        Ok(())
    }
}

/// A grant whose lease ran out on the store is lost to a resume, even
/// when nobody took the lock since.
pub async fn a_handle_whose_lease_ran_out_is_lost(fixture: &dyn Fixture) {
    let name = unique_name("resume-expired");
    let stop = Arc::new(NoExtensions::default());
    let backend = TestBackend::wrapping(fixture.backend().await).with_hook(stop.clone());
    let holder = LockClient::new(backend.shared(), test_options(fixture.lease()));
    let guard = acquired(&holder, &name, Claim::Exclusive).await;
    let handle = guard.handle();
    let resumer = client(fixture).await;
    if !resumes(&resumer, &handle).await {
        guard.release().await.expect("release");
        return;
    }
    stop.0.store(true, Ordering::SeqCst);
    bounded("the unextended lease is given up", guard.lost()).await;
    // The store's end of the lease comes no later than a lease after the
    // last confirmation, and the holder gave up before it.
    tokio::time::sleep(fixture.lease() + fixture.expiry_slack() + Duration::from_millis(500)).await;
    assert_lost(resumer.resume(&handle).await, "a grant that ran out");
    // Nothing holds it: the guard kept alive until now released nothing.
    let next = resumer
        .try_acquire(&name)
        .await
        .expect("try")
        .expect("free after the lease ran out");
    next.release().await.expect("release");
    drop(guard);
}

/// `distlock run --resume-file` killed outright and started again with
/// the same file holds the same grant, as a supervisor's restart would;
/// the file is gone once the lock is released. A backend that cannot
/// resume refuses the option at the start.
pub async fn a_killed_run_restarted_with_its_resume_file_keeps_its_grant(fixture: &dyn Fixture) {
    let Some(url) = fixture.url() else {
        return;
    };
    // A lease long enough for the restart to come well within it, where
    // the store's clock counts in whole seconds (object storage's
    // Last-Modified): a resume must not depend on the machine's speed.
    let lease = fixture.lease() * 3;
    let name = unique_name("resume-run");
    let dir = std::env::temp_dir().join(format!("distlock-resume-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("lock.handle");
    let other = client(fixture).await;
    let resumable = matches!(other.backend().abilities().resumes, Resuming::By(_));
    if !resumable {
        let refused = HeldByChild::refused_at_start(&url, &name, lease, &file).await;
        assert!(refused.contains("cannot resume"), "{refused}");
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let mut first = HeldByChild::start_resuming(&url, &name, lease, &file).await;
    let handle: ResumeHandle = std::fs::read_to_string(&file)
        .expect("the handle is written while the lock is held")
        .parse()
        .expect("a readable handle");
    assert_eq!(handle.fencing_token(), first.fencing_token());
    first.kill_hard();
    assert!(file.exists(), "a killed run leaves its handle behind");
    let mut second = HeldByChild::start_resuming(&url, &name, lease, &file).await;
    assert_eq!(
        second.fencing_token(),
        first.fencing_token(),
        "the restarted run holds the same grant"
    );
    assert!(
        other.try_acquire(&name).await.expect("try").is_none(),
        "the restarted run holds the lock"
    );
    second.terminate();
    assert!(!file.exists(), "a released lock leaves no handle");
    let next = other
        .acquire_with(&name, PATIENCE)
        .await
        .expect("free after the restarted run released it");
    assert!(next.fencing_token() > first.fencing_token());
    next.release().await.expect("release");
    let _ = std::fs::remove_dir_all(&dir);
}
