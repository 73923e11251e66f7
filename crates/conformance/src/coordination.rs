//! The cases of coordination built on locks: several locks taken together
//! ([`LockClient::acquire_all`](distlock_core::LockClient::acquire_all)),
//! and bounds on a hold
//! ([`AcquireOptions::max_hold`](distlock_core::AcquireOptions::max_hold),
//! [`min_hold`](distlock_core::AcquireOptions::min_hold)).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use distlock_core::backend::BackendExt;
use distlock_core::testing::{Spoil, SpoilGrant, TestBackend};
use distlock_core::{
    AcquireOptions, Error, Leadership, LockClient, LockGuard, LockName, LossReason, Observer,
    TryOptions,
};
use tokio::sync::Notify;

use crate::fixture::Fixture;
use crate::support::{
    ADMIN_LIMIT, LEAK_CATCHING_LEASE, assert_only_leaders_recorded, bounded, client,
    client_keeping_idle_records, client_with, shared, test_options, unique_name,
};

/// How many times each of two callers takes the same pair of names in
/// opposite orders.
const ROUNDS: usize = 200;

/// Two callers take the same two names in opposite orders, 200 times each,
/// at the same time: neither ever waits for the other in a cycle (each
/// take is bounded, and a deadlock would time out), and the two never hold
/// the pair at once.
pub async fn opposite_orders_never_deadlock(fixture: &dyn Fixture) {
    let (first, second) = (unique_name("set-a"), unique_name("set-b"));
    let inside = shared(AtomicUsize::new(0));
    let mut callers = Vec::new();
    for order in [
        [first.clone(), second.clone()],
        [second.clone(), first.clone()],
    ] {
        let locks = client(fixture).await;
        let inside = inside.clone();
        callers.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                let set = locks
                    .acquire_all(order.clone(), Duration::from_secs(30))
                    .await
                    .unwrap_or_else(|error| panic!("round {round}: {error}"));
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two callers held the pair at once"
                );
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                // A lease may be lost on a starved machine (a release then
                // says so): what this case is about is that the pair is
                // never held twice, and that every round ends.
                set.release().await.expect("release");
            }
        }));
    }
    for caller in callers {
        bounded("200 rounds of sets in opposite orders", caller)
            .await
            .expect("a caller panicked");
    }
}

/// A set whose last lock is held elsewhere times out naming that lock,
/// and holds nothing afterwards: the first lock is free at once.
pub async fn a_set_that_times_out_holds_nothing(fixture: &dyn Fixture) {
    let set = OneMemberHeld::new(fixture).await;
    let error = set
        .locks
        .acquire_all([&set.free, &set.taken], Duration::from_millis(300))
        .await
        .expect_err("the second lock is held");
    match &error {
        Error::Timeout { name, .. } => assert_eq!(name, set.taken.as_str()),
        other => panic!("expected a timeout, got {other:?}"),
    }
    set.assert_free_member_free(fixture, "the set released the lock it took")
        .await;
}

/// A cancelled set holds nothing afterwards.
pub async fn a_cancelled_set_holds_nothing(fixture: &dyn Fixture) {
    let set = OneMemberHeld::new(fixture).await;
    let options = AcquireOptions::new()
        .timeout(Duration::from_secs(30))
        .cancel_on(tokio::time::sleep(Duration::from_millis(300)));
    let error = set
        .locks
        .acquire_all([&set.taken, &set.free], options)
        .await
        .expect_err("cancelled");
    match &error {
        Error::Cancelled { name, .. } => assert_eq!(name, set.taken.as_str()),
        other => panic!("expected a cancellation, got {other:?}"),
    }
    set.assert_free_member_free(fixture, "the cancelled set released the lock it took")
        .await;
}

/// Two names for a set, the one `taken` held by another client
/// (`blocking`), and the client to take the set with.
struct OneMemberHeld {
    free: LockName,
    taken: LockName,
    _holder: LockClient,
    blocking: LockGuard,
    /// With a long lease: a leaked grant of `free` would outlast the check.
    locks: LockClient,
}

impl OneMemberHeld {
    async fn new(fixture: &dyn Fixture) -> Self {
        let (free, taken) = (unique_name("set-free"), unique_name("set-taken"));
        let holder = client(fixture).await;
        let blocking = holder
            .acquire_with(&taken, Duration::from_secs(10))
            .await
            .expect("acquire");
        let locks = client_with(fixture, LEAK_CATCHING_LEASE).await;
        Self {
            free,
            taken,
            _holder: holder,
            blocking,
            locks,
        }
    }

    /// After the set failed: another client takes the free member at
    /// once (`why` says what that shows); then both are released.
    async fn assert_free_member_free(self, fixture: &dyn Fixture, why: &str) {
        let other = client(fixture).await;
        let again = other
            .try_acquire(&self.free)
            .await
            .expect("try")
            .expect(why);
        again.release().await.expect("release");
        self.blocking.release().await.expect("release");
    }
}

/// The loss of any one lock of a set is the set's, named; the others stay
/// held until the set is released, which then reports the loss.
pub async fn a_set_reports_the_loss_of_any_member(fixture: &dyn Fixture) {
    let (kept, forced) = (unique_name("set-kept"), unique_name("set-forced"));
    let locks = client(fixture).await;
    let set = locks
        .acquire_all([&kept, &forced], Duration::from_secs(10))
        .await
        .expect("acquire the set");
    let tokens: Vec<(String, u64)> = set
        .fencing_tokens()
        .map(|(name, token)| (name.to_string(), token))
        .collect();
    assert_eq!(tokens.len(), 2);
    assert!(tokens.iter().all(|(_, token)| *token > 0));
    let admin = fixture.backend().await;
    assert!(
        admin
            .force_release(&forced, ADMIN_LIMIT)
            .await
            .expect("force release")
    );
    let (name, reason) = bounded("the set's lost()", set.lost()).await;
    assert_eq!(name, &forced);
    assert!(
        matches!(reason, LossReason::Refused | LossReason::Detected),
        "{reason:?}"
    );
    assert!(set.is_lost());
    let other = client(fixture).await;
    assert!(
        other.try_acquire(&kept).await.expect("try").is_none(),
        "the other lock of the set is still held"
    );
    assert!(!set.release().await.expect("release"), "one was lost");
    let again = other
        .try_acquire(&kept)
        .await
        .expect("try")
        .expect("released with the set");
    again.release().await.expect("release");
}

/// A lock taken with a longest hold is given up once it has passed: its
/// `lost()` says so, another client takes it at once, and the old guard's
/// release reports that it was no longer held.
pub async fn max_hold_ends_the_hold(fixture: &dyn Fixture) {
    let name = unique_name("max-hold");
    // A lease far longer than the hold: only the bound can end it soon.
    let holder = client_with(fixture, LEAK_CATCHING_LEASE).await;
    let guard = holder
        .acquire_with(
            &name,
            AcquireOptions::new()
                .timeout(Duration::from_secs(10))
                .max_hold(Duration::from_millis(500)),
        )
        .await
        .expect("acquire");
    let reason = bounded("lost() at the longest hold", guard.lost()).await;
    assert_eq!(reason, LossReason::HoldLimit);
    let other = client(fixture).await;
    let next = other
        .acquire_with(&name, Duration::from_secs(10))
        .await
        .expect("the lock was released at its longest hold");
    assert!(next.fencing_token() > guard.fencing_token());
    assert!(matches!(guard.extend().await, Err(Error::Lost { .. })));
    assert!(!guard.release().await.expect("release"), "it was given up");
    assert!(next.release().await.expect("release"));
}

/// A lock taken with a shortest hold, and released at once, stays held
/// until the shortest hold has passed, by the server's clock, and then is
/// free without any further call: another client's single try is refused
/// meanwhile, a waiter of the holder's own client is not handed the lock
/// early, and a waiter of another client gets it once the first is done.
/// The hold is longer than the lease, so that only the delayed release can
/// keep the lock that long. On a backend that cannot keep a lock after its
/// release, asking for a shortest hold is a clear `Unsupported`, and takes
/// nothing.
pub async fn min_hold_keeps_a_released_lock_until_it_passes(fixture: &dyn Fixture) {
    let name = unique_name("min-hold");
    let min_hold = fixture.lease() * 3 / 2;
    let holder = client(fixture).await;
    let options = || {
        AcquireOptions::new()
            .timeout(Duration::from_secs(30))
            .min_hold(min_hold)
    };
    if holder.backend().releases_later().is_err() {
        let refused = holder.acquire_with(&name, options()).await;
        assert!(
            matches!(&refused, Err(Error::Unsupported(why)) if why.contains("min_hold")),
            "{refused:?}"
        );
        let refused = holder
            .try_acquire_with(&name, TryOptions::new().min_hold(min_hold))
            .await;
        assert!(matches!(refused, Err(Error::Unsupported(_))), "{refused:?}");
        let free = holder.try_acquire(&name).await.expect("try");
        assert!(
            free.expect("nothing was taken")
                .release()
                .await
                .expect("release")
        );
        return;
    }
    // Before the grant was asked for, so the lock must stay held until at
    // least `min_hold` after this on the local clock too.
    let asked_at = Instant::now();
    let guard = holder
        .acquire_with(&name, options())
        .await
        .expect("acquire");
    let first_token = guard.fencing_token();
    // A waiter of the same client, queued in this client (or, if it comes
    // late, waiting on the backend): either way it must wait it out.
    let local = {
        let (holder, name) = (holder.clone(), name.clone());
        tokio::spawn(async move {
            let next = holder.acquire_with(&name, Duration::from_secs(30)).await;
            (next, Instant::now())
        })
    };
    tokio::task::yield_now().await;
    assert!(guard.release().await.expect("release"), "it was ours");
    let other = client(fixture).await;
    let tried = other.try_acquire(&name).await.expect("try");
    if asked_at.elapsed() < min_hold {
        assert!(
            tried.is_none(),
            "a lock released before its min_hold had passed was free at once"
        );
    }
    let (next, got_at) = bounded("the local waiter", local)
        .await
        .expect("the waiter panicked");
    let next = next.expect("the lock is free once min_hold has passed");
    assert!(
        got_at.duration_since(asked_at) >= min_hold,
        "granted again {:?} after it was asked for, before its min_hold of {min_hold:?}",
        got_at.duration_since(asked_at)
    );
    assert!(next.fencing_token() > first_token);
    // Without a shortest hold, a release frees the lock at once.
    assert!(next.release().await.expect("release"));
    let last = bounded(
        "a waiter of another client",
        other.acquire_with(&name, Duration::from_secs(30)),
    )
    .await
    .expect("the lock is free after an ordinary release");
    assert!(last.release().await.expect("release"));
}

/// An election: the leader's value and term are read by others, a
/// resignation hands over to a waiting campaigner with a greater term,
/// and an observer sees both leaders in term order. On a backend whose
/// list shows only its own process's locks, `leader()` is a clear
/// `Unsupported` and campaigning still works; on one that keeps no record
/// of terms, observing is a clear `Unsupported`, and the rest holds.
pub async fn an_election_passes_on_and_observers_see_each_term(fixture: &dyn Fixture) {
    let name = unique_name("election");
    let (first, second, watcher) = (
        client(fixture).await,
        client(fixture).await,
        client(fixture).await,
    );
    let leading = first
        .election(&name)
        .expect("a valid name")
        .campaign("http://first:8080", Duration::from_secs(10))
        .await
        .expect("the first campaign wins");
    let election = watcher.election(&name).expect("a valid name");
    if !watcher.backend().capabilities().lists_every_holder {
        assert!(matches!(
            election.leader().await,
            Err(Error::Unsupported(_))
        ));
        assert!(leading.resign().await.expect("resign"));
        return;
    }
    // A backend without a record of terms refuses to observe; the rest of
    // the election is the same there, read by `leader()`.
    let mut observer = watcher.backend().term_log().map(|_| election.observe());
    match &mut observer {
        Some(observer) => {
            let seen = bounded("the first leader observed", observer.next())
                .await
                .expect("observe");
            assert_eq!(
                (seen.value.as_str(), seen.term),
                ("http://first:8080", leading.term())
            );
        }
        None => assert!(matches!(
            election.observe().next().await,
            Err(Error::Unsupported(_))
        )),
    }
    let campaign = tokio::spawn(async move {
        let election = second.election(&name).expect("a valid name");
        let leading = election
            .campaign("http://second:8080", Duration::from_secs(30))
            .await
            .expect("the second campaign wins once the first resigns");
        // Held until the observer has seen it.
        (leading, second)
    });
    let first_term = leading.term();
    assert!(leading.resign().await.expect("resign"));
    let seen = match &mut observer {
        Some(observer) => Some(
            bounded("the second leader observed", observer.next())
                .await
                .expect("observe"),
        ),
        None => None,
    };
    let (leading, _second) = campaign.await.expect("the campaign task");
    let now = election
        .leader()
        .await
        .expect("leader")
        .expect("someone leads");
    assert_eq!(now.value, "http://second:8080");
    assert!(now.term > first_term, "{} after {first_term}", now.term);
    assert_eq!(leading.term(), now.term);
    if let Some(seen) = seen {
        assert_eq!((seen.value, seen.term), (now.value, now.term));
    }
    assert!(leading.resign().await.expect("resign"));
    assert!(election.leader().await.expect("leader").is_none());
}

/// How many terms begin and end while an observer looks away.
const SHORT_TERMS: usize = 5;

/// An observer that looks away while terms begin and end still sees each
/// of them afterwards, in order, with its value: the backend records every
/// term in the write that grants it. Two of the terms are won by
/// campaigns of one client in a row, the second waiting behind the first
/// in that client, so that a lock passed on inside the client is recorded
/// too, with the second campaign's own value. On a backend that keeps no
/// record of terms, observing is a clear `Unsupported`.
pub async fn an_observer_sees_every_term_the_short_ones_too(fixture: &dyn Fixture) {
    let name = unique_name("terms");
    let (one, other, watcher) = (
        client(fixture).await,
        client(fixture).await,
        client(fixture).await,
    );
    let campaign = |client: &distlock_core::LockClient, value: String| {
        let election = client.election(&name).expect("a valid name");
        async move {
            bounded(
                "a campaign on a free election",
                election.campaign(value, Duration::from_secs(30)),
            )
            .await
            .expect("the campaign wins")
        }
    };
    let first = campaign(&one, "first".into()).await;
    let Some(mut observer) = observer_past(&watcher, &name, first).await else {
        return;
    };

    // Terms that begin and end while the observer looks away.
    let mut expected = Vec::new();
    for round in 0..SHORT_TERMS {
        let client = if round % 2 == 0 { &one } else { &other };
        let value = format!("short-{round}");
        let leading = campaign(client, value.clone()).await;
        expected.push((value, leading.term()));
        assert!(leading.resign().await.expect("resign"));
    }
    // Two campaigns of one client in a row: the second waits in the client.
    let held = campaign(&one, "held-first".into()).await;
    let behind = tokio::spawn({
        let election = one.election(&name).expect("a valid name");
        async move {
            election
                .campaign("held-second", Duration::from_secs(30))
                .await
                .expect("the second campaign wins once the first resigns")
        }
    });
    expected.push(("held-first".into(), held.term()));
    // The second campaign has queued behind the first once it waits; it
    // cannot win before the resignation either way.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(held.resign().await.expect("resign"));
    let last = bounded("the campaign behind", behind)
        .await
        .expect("the campaign task");
    assert_eq!(last.value(), "held-second");
    expected.push(("held-second".into(), last.term()));

    let mut seen = Vec::new();
    for _ in 0..expected.len() {
        let leader = bounded("a recorded term observed", observer.next())
            .await
            .expect("observe");
        seen.push((leader.value, leader.term));
    }
    assert_eq!(seen, expected, "every term, in order, with its value");
    assert!(
        expected.windows(2).all(|pair| pair[0].1 < pair[1].1),
        "terms increase: {expected:?}"
    );
    assert!(last.resign().await.expect("resign"));
}

/// An observer of election `name` in `watcher`, which has seen `first`, the
/// leader now, who then resigns. `None` on a backend that keeps no record
/// of terms, where observing is a clear `Unsupported` (and `first`
/// resigned all the same).
async fn observer_past(
    watcher: &LockClient,
    name: &LockName,
    first: Leadership,
) -> Option<Observer> {
    let mut observer = watcher.election(name).expect("a valid name").observe();
    if watcher.backend().term_log().is_none() {
        assert!(
            matches!(observer.next().await, Err(Error::Unsupported(_))),
            "a backend without a record of terms refuses to observe"
        );
        assert!(first.resign().await.expect("resign"));
        return None;
    }
    let seen = bounded("the first leader observed", observer.next())
        .await
        .expect("observe");
    assert_eq!(
        (seen.value.as_str(), seen.term),
        (first.value(), first.term())
    );
    assert!(first.resign().await.expect("resign"));
    Some(observer)
}

/// An observer that fell further behind than the record keeps is told so
/// once, with the terms it missed, and goes on with the kept ones: the
/// terms it returns are the newest ones, in order, at least
/// [`TERMS_KEPT`](distlock_core::backend::TERMS_KEPT) of them, and follow on from
/// where the error said the record begins. On a backend that keeps no
/// record of terms, observing is a clear `Unsupported`, and campaigning
/// still works.
pub async fn an_observer_that_fell_behind_is_told_and_goes_on(fixture: &dyn Fixture) {
    let name = unique_name("terms-behind");
    let (campaigner, watcher) = (
        client_keeping_idle_records(fixture).await,
        client_keeping_idle_records(fixture).await,
    );
    let election = campaigner.election(&name).expect("a valid name");
    let first = bounded(
        "the first campaign",
        election.campaign("first", Duration::from_secs(30)),
    )
    .await
    .expect("the campaign wins");
    let first_term = first.term();
    let Some(mut observer) = observer_past(&watcher, &name, first).await else {
        return;
    };
    let mut expected = Vec::new();
    for round in 0..distlock_core::backend::TERMS_KEPT + 3 {
        let leading = bounded(
            "a campaign on a free election",
            election.campaign(format!("term-{round}"), Duration::from_secs(30)),
        )
        .await
        .expect("the campaign wins");
        expected.push((format!("term-{round}"), leading.term()));
        assert!(leading.resign().await.expect("resign"));
    }
    let mut returned = Vec::new();
    let mut told = None;
    while returned.last() != expected.last() {
        match bounded("the next term observed", observer.next()).await {
            Ok(leader) => returned.push((leader.value, leader.term)),
            Err(Error::TermsForgotten { after, before, .. }) => {
                assert!(told.is_none(), "told of forgotten terms only once");
                assert!(returned.is_empty(), "told before the kept terms");
                assert_eq!(after, first_term, "forgotten after the last returned");
                told = Some(before);
            }
            Err(error) => panic!("observe: {error}"),
        }
    }
    let start = expected.len() - returned.len();
    assert_eq!(returned, expected[start..], "the newest terms, in order");
    assert!(returned.len() >= distlock_core::backend::TERMS_KEPT);
    match told {
        Some(before) => assert_eq!(before, returned[0].1, "the record begins there"),
        None => assert_eq!(start, 0, "nothing missed, nothing said"),
    }
}

/// A campaign's grant that its holder never received leaves no term: one
/// cancelled as it came, and (where the store finds a grant by its
/// identity) one whose answer was lost, which core releases by identity.
/// An observer goes on from the last leader to the next without reporting
/// either, and without a gap; the record keeps each leader's term, and the
/// next one names the last leader's as the one before. On a backend that
/// keeps no record of terms, the campaigns still leave nothing held.
pub async fn a_grant_nobody_received_leaves_no_term(fixture: &dyn Fixture) {
    let name = unique_name("terms-withdrawn");
    let spoil = shared(SpoilGrant::default());
    let spoiled = TestBackend::wrapping(fixture.backend().await).with_hook(spoil.clone());
    let campaigner = LockClient::new(spoiled.shared(), test_options(fixture.lease()));
    let watcher = client(fixture).await;
    let election = campaigner.election(&name).expect("a valid name");
    let campaign = |value: &'static str| {
        bounded(
            "a campaign on a free election",
            election.campaign(value, Duration::from_secs(30)),
        )
    };
    let kept = campaign("kept").await.expect("the campaign wins");
    let log = watcher.backend().term_log();
    let mut observer = log.map(|_| watcher.election(&name).expect("a valid name").observe());
    if let Some(observer) = &mut observer {
        let seen = bounded("the leader observed", observer.next())
            .await
            .expect("observe");
        assert_eq!((seen.value.as_str(), seen.term), ("kept", kept.term()));
    }
    let kept_term = kept.term();
    assert!(kept.resign().await.expect("resign"));

    let cancel = shared(Notify::new());
    spoil.arm("cancelled", Spoil::Cancel(cancel.clone()));
    let cancelled = bounded(
        "a campaign cancelled as its grant came",
        election.campaign(
            "cancelled",
            AcquireOptions::new().cancel_on(async move { cancel.notified().await }),
        ),
    )
    .await;
    assert!(
        matches!(cancelled, Err(Error::Cancelled { .. })),
        "{cancelled:?}"
    );
    if fixture.finds_grants_by_identity() {
        spoil.arm("lost", Spoil::LoseAnswer);
        // One attempt, whose answer is lost.
        let lost = election.campaign("lost", Duration::ZERO).await;
        assert!(
            matches!(lost, Err(Error::Backend { .. } | Error::Timeout { .. })),
            "{lost:?}"
        );
    }
    let spoiled_terms = spoil.spoiled();
    assert_eq!(
        spoiled_terms.len(),
        if fixture.finds_grants_by_identity() {
            2
        } else {
            1
        },
        "each spoiled campaign was granted"
    );

    // The lost answer's grant is released (and its term withdrawn) in the
    // background: the next campaign waits for it.
    let next = campaign("next").await.expect("the campaign wins");
    let Some(log) = log else {
        assert!(next.resign().await.expect("resign"));
        return;
    };
    assert_only_leaders_recorded(
        log,
        &name,
        (kept_term, next.term()),
        &format!("the spoiled {spoiled_terms:?}"),
    )
    .await;
    let observer = observer.as_mut().expect("observed");
    let seen = bounded("the next leader observed", observer.next())
        .await
        .expect("observe, with no gap reported");
    assert_eq!((seen.value.as_str(), seen.term), ("next", next.term()));
    assert!(next.resign().await.expect("resign"));
}
