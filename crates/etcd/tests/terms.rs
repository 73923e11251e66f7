//! The record of election terms on a real etcd member: written by a
//! campaign's grant and by nothing else, exactly one term per grant when
//! campaigns race, the last `TERMS_KEPT` kept (an observer that fell
//! further behind is told, and goes on), and unseen by `list` and by a
//! forced release. `scripts/test` starts etcd and sets
//! `DISTLOCK_TEST_ETCD_URL`.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::BackendExt;
use distlock_core::backend::{AcquireRequest, Attempt, Backend, TERMS_KEPT, Term, WaitState};
use distlock_core::testing::ADMIN_LIMIT;
use distlock_core::{Claim, Error, Holder, LockClient, LockName};
use distlock_etcd::EtcdBackend;

#[path = "support/member.rs"]
mod member;

use member::{PATIENCE, backend, client_of, unique};

async fn client() -> (LockClient, Arc<EtcdBackend>) {
    let backend = backend().await;
    (client_of(&backend, Duration::from_secs(10)), backend)
}

/// Every term `backend` keeps for `name`.
async fn kept(backend: &EtcdBackend, name: &LockName) -> Vec<Term> {
    backend
        .term_log()
        .expect("etcd keeps a record of terms")
        .terms_after(name, 0, ADMIN_LIMIT)
        .await
        .expect("read the terms")
}

/// Campaigns once with `value` and resigns; the term won.
async fn one_term(client: &LockClient, name: &LockName, value: &str) -> u64 {
    let leading = client
        .election(name)
        .expect("a valid name")
        .campaign(value, PATIENCE)
        .await
        .expect("the campaign wins");
    let term = leading.term();
    assert!(leading.resign().await.expect("resign"));
    term
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn grants_that_are_no_campaigns_and_campaigns_that_find_the_name_held_record_nothing() {
    let (client, backend) = client().await;
    let name = unique("no-terms");
    // A plain lock, waited for and tried.
    let held = client.acquire_with(&name, PATIENCE).await.expect("acquire");
    assert!(held.release().await.expect("release"));
    let tried = client
        .try_acquire(&name)
        .await
        .expect("try")
        .expect("the name is free");
    // A campaign's attempt while the name is held, straight to the backend.
    let mut request = AcquireRequest::new(
        name.clone(),
        Claim::Exclusive,
        Duration::from_secs(10),
        Arc::new(Holder::this_process(Some("loser"))),
    );
    request.records_term = true;
    let mut wait = WaitState::default();
    let attempt = backend
        .try_acquire(&request, &mut wait)
        .await
        .expect("attempt");
    assert!(
        matches!(attempt, Attempt::Held { .. }),
        "a campaign cannot win a held name: {attempt:?}"
    );
    backend.end_wait(&request, wait).await.expect("end wait");
    assert_eq!(kept(&backend, &name).await, Vec::new());
    assert!(tried.release().await.expect("release"));
    assert_eq!(kept(&backend, &name).await, Vec::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_campaigns_record_each_grant_once_and_no_lost_race() {
    const CLIENTS: usize = 4;
    const ROUNDS: usize = 6;
    let name = unique("race");
    let mut tasks = Vec::new();
    for index in 0..CLIENTS {
        let name = name.clone();
        tasks.push(tokio::spawn(async move {
            let (client, _) = client().await;
            let mut won = Vec::new();
            for round in 0..ROUNDS {
                let value = format!("c{index}-r{round}");
                won.push((one_term(&client, &name, &value).await, value));
            }
            won
        }));
    }
    let mut won = Vec::new();
    for task in tasks {
        won.extend(task.await.expect("the campaigns"));
    }
    won.sort();
    assert!(won.len() <= TERMS_KEPT, "every term is still kept");
    let (_, backend) = client().await;
    let terms = kept(&backend, &name).await;
    let recorded: Vec<(u64, String)> = terms
        .iter()
        .map(|term| (term.term, term.holder.label.clone().expect("a value")))
        .collect();
    assert_eq!(recorded, won, "one term per grant, with its value");
    let previous: Vec<Option<u64>> = terms.iter().map(|term| term.previous).collect();
    let expected: Vec<Option<u64>> = std::iter::once(None)
        .chain(won.iter().map(|(term, _)| Some(*term)))
        .take(won.len())
        .collect();
    assert_eq!(previous, expected, "each term names the one before");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_last_terms_are_kept_and_an_observer_told_of_the_rest_goes_on() {
    let (one, backend) = client().await;
    let (watcher, _) = client().await;
    let name = unique("kept");
    let first = one
        .election(&name)
        .expect("a valid name")
        .campaign("first", PATIENCE)
        .await
        .expect("the campaign wins");
    let mut observer = watcher.election(&name).expect("a valid name").observe();
    let seen = observer.next().await.expect("observe");
    assert_eq!((seen.value.as_str(), seen.term), ("first", first.term()));
    let first_term = first.term();
    assert!(first.resign().await.expect("resign"));

    let mut won = Vec::new();
    for round in 0..TERMS_KEPT + 2 {
        let value = format!("v{round}");
        won.push((one_term(&one, &name, &value).await, value));
    }
    let last_kept = &won[won.len() - TERMS_KEPT..];
    let terms = kept(&backend, &name).await;
    assert_eq!(terms.len(), TERMS_KEPT);
    assert_eq!(terms[0].previous, Some(won[won.len() - TERMS_KEPT - 1].0));

    match observer.next().await {
        Err(Error::TermsForgotten {
            after,
            before,
            kept,
            ..
        }) => {
            assert_eq!(
                (after, before, kept),
                (first_term, last_kept[0].0, TERMS_KEPT)
            );
        }
        other => panic!("expected the forgotten terms, got {other:?}"),
    }
    for (term, value) in last_kept {
        let seen = observer.next().await.expect("observe");
        assert_eq!((seen.term, &seen.value), (*term, value));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn list_and_a_forced_release_leave_the_record_alone() {
    let (client, backend) = client().await;
    // A name, one nested in it, and one that spells the record's place.
    let names = [unique("list"), unique("list"), unique("#terms")];
    let names = [
        names[0].clone(),
        LockName::new(format!("{}/inner", names[0])).expect("valid name"),
        names[2].clone(),
    ];
    let mut leaders = Vec::new();
    for name in &names {
        let leading = client
            .election(name)
            .expect("a valid name")
            .campaign(format!("leader of {name}"), PATIENCE)
            .await
            .expect("the campaign wins");
        leaders.push(leading);
    }
    let listed = backend.list(ADMIN_LIMIT).await.expect("list");
    for (name, leading) in names.iter().zip(&leaders) {
        let mine: Vec<_> = listed.iter().filter(|info| &info.name == name).collect();
        assert_eq!(mine.len(), 1, "one lock listed for {name}: {listed:?}");
        assert_eq!(mine[0].fencing_token, Some(leading.term()));
        let terms = kept(&backend, name).await;
        assert_eq!(terms.len(), 1, "{name}: {terms:?}");
        assert_eq!(terms[0].term, leading.term());
    }
    let forced = leaders.remove(0);
    let forced_term = forced.term();
    assert!(
        backend
            .force_release(&names[0], ADMIN_LIMIT)
            .await
            .expect("force")
    );
    assert_eq!(kept(&backend, &names[0]).await.len(), 1, "the record stays");
    assert!(!forced.resign().await.expect("resign"), "forced away");
    let next = one_term(&client, &names[0], "after the force").await;
    let terms = kept(&backend, &names[0]).await;
    assert_eq!(
        terms
            .iter()
            .map(|term| (term.term, term.previous))
            .collect::<Vec<_>>(),
        vec![(forced_term, None), (next, Some(forced_term))]
    );
    for leading in leaders {
        assert!(leading.resign().await.expect("resign"));
    }
}
