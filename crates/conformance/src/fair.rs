//! The cases of fair mode (see
//! [`Capabilities::fair`](distlock_core::backend::Capabilities::fair)): whole locks
//! go to waiters in the order they asked, across clients and processes; a
//! try never jumps the line; a waiter that gives up leaves at once; and a
//! waiter or a releaser that dies loses nobody's turn for longer than a
//! lease.
//!
//! They need [`Fixture::queued`], to know when a waiter has its place.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use distlock_core::backend::BackendExt;
use distlock_core::backend::{AcquireRequest, Attempt, WaitState};
use distlock_core::{AcquireOptions, Claim, Holder, LockName};

use crate::fixture::Fixture;
use crate::process::{HeldByChild, WaitingChild};
use crate::support::{assert_only_leaders_recorded, bounded, client, unique_name};

/// Waits (bounded) until `name` has `n` places in the store's line.
async fn until_queued(fixture: &dyn Fixture, name: &LockName, n: usize) {
    bounded(&format!("{n} places in line"), async {
        loop {
            match fixture.queued(name).await {
                Some(queued) if queued == n => return,
                Some(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                None => panic!("the fair cases need the fixture's `queued`"),
            }
        }
    })
    .await;
}

/// The longest a waiter may wait for a lock whose holder, or the waiter
/// before it, died: that one's lease, and a second for the calls around it.
fn after_a_death(fixture: &dyn Fixture) -> Duration {
    fixture.lease() + fixture.expiry_slack() + Duration::from_secs(1)
}

/// Eight waiters, two in each of four clients (each on its own
/// connection), take their places one after another while the lock is
/// held: they are served in that order, the clients' turns interleaved.
pub async fn fair_waiters_are_served_in_the_order_they_asked(fixture: &dyn Fixture) {
    const CLIENTS: usize = 4;
    const WAITERS: usize = 2 * CLIENTS;
    let name = unique_name("fair-order");
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(client(fixture).await);
    }
    let held = clients[0].acquire(&name).await.expect("acquire");
    let served = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for place in 0..WAITERS {
        let (locks, wanted, served) = (
            clients[place % CLIENTS].clone(),
            name.clone(),
            served.clone(),
        );
        waiters.push(tokio::spawn(async move {
            let guard = locks.acquire(&wanted).await.expect("acquire in line");
            served.lock().unwrap().push((place, guard.fencing_token()));
            tokio::time::sleep(Duration::from_millis(5)).await;
            guard.release().await.expect("release");
        }));
        until_queued(fixture, &name, place + 1).await;
    }
    let first_token = held.fencing_token();
    held.release().await.expect("release");
    for waiter in waiters {
        bounded("every waiter served", waiter)
            .await
            .expect("a waiter panicked");
    }
    let served = served.lock().unwrap().clone();
    let places: Vec<usize> = served.iter().map(|&(place, _)| place).collect();
    assert_eq!(
        places,
        (0..WAITERS).collect::<Vec<_>>(),
        "served out of order"
    );
    let mut last = first_token;
    for (place, token) in served {
        assert!(token > last, "place {place}'s token {token} after {last}");
        last = token;
    }
}

/// While a waiter is in line, a single try fails even at the moment of a
/// release, which hands the lock to the waiter.
pub async fn fair_a_try_never_jumps_the_line(fixture: &dyn Fixture) {
    let name = unique_name("fair-try");
    let (a, b) = (client(fixture).await, client(fixture).await);
    let held = a.acquire(&name).await.expect("acquire");
    let waiting = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move { b.acquire(&name).await.expect("acquire in line") }
    });
    until_queued(fixture, &name, 1).await;
    held.release().await.expect("release");
    assert!(
        a.try_acquire(&name).await.expect("try").is_none(),
        "the release handed the lock to the waiter in line"
    );
    let guard = bounded("the waiter served", waiting).await.expect("waiter");
    guard.release().await.expect("release");
    assert_eq!(fixture.queued(&name).await, Some(0));
    let again = a.try_acquire(&name).await.expect("try");
    again
        .expect("free with nobody in line")
        .release()
        .await
        .expect("release");
}

/// A waiter that gives up leaves the line before its call returns: the
/// line is one shorter at once, and the release goes to the next one.
pub async fn fair_a_cancelled_waiter_leaves_the_line_at_once(fixture: &dyn Fixture) {
    let name = unique_name("fair-cancel");
    let (a, b, c) = (
        client(fixture).await,
        client(fixture).await,
        client(fixture).await,
    );
    let held = a.acquire(&name).await.expect("acquire");
    let (cancel, cancelled) = tokio::sync::oneshot::channel::<()>();
    let gives_up = tokio::spawn({
        let name = name.clone();
        async move {
            let options = AcquireOptions::new().cancel_on(async move {
                let _ = cancelled.await;
            });
            b.acquire_with(&name, options).await.map(|_| ())
        }
    });
    until_queued(fixture, &name, 1).await;
    let stays = tokio::spawn({
        let name = name.clone();
        async move { c.acquire(&name).await.expect("acquire in line") }
    });
    until_queued(fixture, &name, 2).await;
    cancel.send(()).expect("the waiter listens");
    let ended = bounded("the cancelled wait ends", gives_up).await;
    assert!(ended.expect("task").is_err(), "the cancelled wait fails");
    assert_eq!(fixture.queued(&name).await, Some(1), "its place is gone");
    held.release().await.expect("release");
    let guard = bounded("the next waiter served", stays)
        .await
        .expect("waiter");
    guard.release().await.expect("release");
}

/// A log the waiting children append to, removed when dropped.
struct SharedLog(PathBuf);

impl SharedLog {
    fn new() -> Self {
        Self(std::env::temp_dir().join(format!("distlock-fair-{:016x}.log", rand::random::<u64>())))
    }

    /// Each line's place and fencing token, in the order written.
    fn entries(&self) -> Vec<(usize, u64)> {
        let text = std::fs::read_to_string(&self.0).unwrap_or_default();
        text.lines()
            .map(|line| {
                let (place, token) = line.split_once(' ').expect("`place token`");
                (place.parse().expect("place"), token.parse().expect("token"))
            })
            .collect()
    }
}

impl Drop for SharedLog {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A grant that a release passed on to a waiting campaign, which then
/// gave up before its next attempt took the grant over, leaves no term:
/// the store's end of the wait releases the grant and withdraws the term
/// the pass-on recorded, so the record keeps the leaders' terms only, and
/// the next (waiting behind it, granted by the same write) names the last
/// leader's as the one before. The waiter asks through the backend once,
/// so that nothing takes the grant over.
pub async fn fair_a_grant_passed_to_a_waiter_that_left_leaves_no_term(fixture: &dyn Fixture) {
    let name = unique_name("fair-term-left");
    let backend = fixture.backend().await;
    let campaigner = client(fixture).await;
    let election = campaigner.election(&name).expect("a valid name");
    let kept = bounded(
        "a campaign on a free election",
        election.campaign("kept", Duration::from_secs(30)),
    )
    .await
    .expect("the campaign wins");
    let waiting = AcquireRequest {
        retries: true,
        records_term: true,
        ..AcquireRequest::new(
            name.clone(),
            Claim::Exclusive,
            fixture.lease(),
            Holder::this_process(Some("left")).into(),
        )
    };
    let mut wait = WaitState::new();
    let attempt = backend
        .try_acquire(&waiting, &mut wait)
        .await
        .expect("the waiting campaign asks");
    assert!(matches!(attempt, Attempt::Held { .. }), "{attempt:?}");
    until_queued(fixture, &name, 1).await;
    // The next campaign waits behind it, so that the end of the wait
    // passes the lock on again, recording the next term in the same write.
    let next = tokio::spawn({
        let election = election.clone();
        async move { election.campaign("next", Duration::from_secs(30)).await }
    });
    until_queued(fixture, &name, 2).await;
    let kept_term = kept.term();
    assert!(kept.resign().await.expect("resign"), "passed on in line");
    backend
        .end_wait(&waiting, wait)
        .await
        .expect("the waiting campaign gives up");

    let next = bounded("the next campaign served", next)
        .await
        .expect("the campaign ran")
        .expect("the campaign wins");
    // Without a record of terms, the pass-on and the end of the wait are
    // still checked, above.
    if let Some(log) = backend.term_log() {
        assert_only_leaders_recorded(
            log,
            &name,
            (kept_term, next.term()),
            "the one passed on to the waiter that left",
        )
        .await;
    }
    assert!(next.resign().await.expect("resign"));
}

/// Four `distlock run` processes take their places one after another while
/// the lock is held; each, once granted, appends to a log they share, under
/// the lock. The log shows them served in the order they asked, with
/// increasing tokens.
pub async fn fair_four_processes_are_served_in_the_order_they_asked(fixture: &dyn Fixture) {
    const PROCESSES: usize = 4;
    let name = unique_name("fair-processes");
    let url = fixture.url().expect("cross-process cases need a URL");
    let a = client(fixture).await;
    let held = a.acquire(&name).await.expect("acquire");
    let log = SharedLog::new();
    let mut children = Vec::new();
    for place in 0..PROCESSES {
        children.push(WaitingChild::start(
            &url,
            &name,
            fixture.lease(),
            place,
            &log.0,
        ));
        until_queued(fixture, &name, place + 1).await;
    }
    let first_token = held.fencing_token();
    held.release().await.expect("release");
    for child in &mut children {
        assert_eq!(child.wait().await, Some(0), "a waiter failed");
    }
    let entries = log.entries();
    let places: Vec<usize> = entries.iter().map(|&(place, _)| place).collect();
    assert_eq!(
        places,
        (0..PROCESSES).collect::<Vec<_>>(),
        "served out of order"
    );
    let mut last = first_token;
    for (place, token) in entries {
        assert!(token > last, "process {place}'s token {token} after {last}");
        last = token;
    }
}

/// A `distlock run` waiter SIGKILLed in line holds the line up for no
/// longer than its lease: the waiter behind it gets the lock within that
/// of the release.
pub async fn fair_a_waiter_killed_in_line_holds_it_up_no_longer_than_its_lease(
    fixture: &dyn Fixture,
) {
    let name = unique_name("fair-dead-waiter");
    let url = fixture.url().expect("cross-process cases need a URL");
    let (a, b) = (client(fixture).await, client(fixture).await);
    let held = a.acquire(&name).await.expect("acquire");
    let log = SharedLog::new();
    let mut dead = WaitingChild::start(&url, &name, fixture.lease(), 0, &log.0);
    until_queued(fixture, &name, 1).await;
    let live = tokio::spawn({
        let name = name.clone();
        async move {
            let guard = b.acquire(&name).await.expect("acquire in line");
            (guard, Instant::now())
        }
    });
    until_queued(fixture, &name, 2).await;
    dead.kill_hard();
    let released_at = Instant::now();
    held.release().await.expect("release");
    let (guard, granted_at) = bounded("the live waiter served", live)
        .await
        .expect("waiter");
    let stalled = granted_at - released_at;
    assert!(
        stalled <= after_a_death(fixture),
        "the dead waiter held the line up for {stalled:?}"
    );
    assert!(log.entries().is_empty(), "the dead waiter never ran");
    guard.release().await.expect("release");
}

/// A holder that dies while it releases (SIGTERMed, then SIGKILLed at
/// moments before, during and after its release) loses no grant: the
/// waiter in line always gets the lock, within a lease, with a greater
/// token.
pub async fn fair_no_grant_is_lost_when_the_releaser_dies_mid_hand_off(fixture: &dyn Fixture) {
    let url = fixture.url().expect("cross-process cases need a URL");
    let b = client(fixture).await;
    for delay_ms in [0, 2, 5, 20, 100] {
        let name = unique_name("fair-dying-releaser");
        let mut holder = HeldByChild::start(&url, &name, fixture.lease()).await;
        let waiting = tokio::spawn({
            let (b, name) = (b.clone(), name.clone());
            async move { b.acquire(&name).await.expect("acquire in line") }
        });
        until_queued(fixture, &name, 1).await;
        let killed_at = Instant::now();
        holder
            .terminate_then_kill(Duration::from_millis(delay_ms))
            .await;
        let guard = bounded("the waiter served", waiting).await.expect("waiter");
        let waited = killed_at.elapsed();
        assert!(
            waited <= after_a_death(fixture) + Duration::from_millis(delay_ms),
            "killed {delay_ms} ms into its release, the holder kept the waiter out for {waited:?}"
        );
        assert!(guard.fencing_token() > holder.fencing_token());
        guard.release().await.expect("release");
    }
}

/// Expands the fair cases into one test each for the fixture built by the
/// given expression, a backend in fair mode whose fixture tells
/// [`Fixture::queued`]. `fair_cases!(in_process: fixture)` leaves out the
/// cases that run the `distlock` command.
#[macro_export]
macro_rules! fair_cases {
    (in_process: $fixture:expr) => {
        $crate::fair_cases!(@cases $fixture;
            fair_waiters_are_served_in_the_order_they_asked,
            fair_a_try_never_jumps_the_line,
            fair_a_cancelled_waiter_leaves_the_line_at_once,
            fair_a_grant_passed_to_a_waiter_that_left_leaves_no_term,
        );
    };
    ($fixture:expr) => {
        $crate::fair_cases!(in_process: $fixture);
        $crate::fair_cases!(@cases $fixture;
            fair_four_processes_are_served_in_the_order_they_asked,
            fair_a_waiter_killed_in_line_holds_it_up_no_longer_than_its_lease,
            fair_no_grant_is_lost_when_the_releaser_dies_mid_hand_off,
        );
    };
    (@cases $fixture:expr; $($case:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let fixture = $fixture;
                $crate::fair::$case(&fixture).await;
            }
        )*
    };
}
