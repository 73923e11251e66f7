//! The record of election terms against a real server, in lease mode
//! (directly and through PgBouncer) and in advisory mode: it keeps the
//! last `TERMS_KEPT` terms, each naming the one before, with the
//! campaign's value whole; plain grants and lost campaigns write nothing;
//! racing campaigns never name the same term before them; an observer
//! that fell behind is told so and goes on; and a deployment whose lock
//! table was made before the record gets it when it opens, and a role
//! that cannot make it opens without one and refuses campaigns.
//! `scripts/test` starts the servers and sets `DISTLOCK_TEST_POSTGRES_URL`
//! and `DISTLOCK_TEST_POSTGRES_PGBOUNCER_URL`; a missing one fails.

mod support;

use std::time::Duration;

use distlock_core::backend::BackendExt;
use distlock_core::backend::{
    AcquireRequest, Attempt, Backend, Lease, TERMS_KEPT, Term, WaitState,
};
use distlock_core::{Claim, Error, Holder, LockClient, LockName};
use distlock_postgres::PostgresBackend;
use distlock_postgres::tokio_postgres::{self, NoTls};

use distlock_core::testing::ADMIN_LIMIT;
use support::{env, open, race_campaigns, terms_and_values, unique, with_options};

/// The URLs of every way to run the backend, each with a fresh table.
fn servers() -> Vec<(&'static str, String)> {
    let direct = env("DISTLOCK_TEST_POSTGRES_URL");
    let bouncer = env("DISTLOCK_TEST_POSTGRES_PGBOUNCER_URL");
    [
        ("lease", direct.clone(), ""),
        ("pgbouncer", bouncer, ""),
        ("advisory", direct, "&mode=advisory"),
    ]
    .into_iter()
    .map(|(how, server, options)| {
        let table = unique("terms");
        (
            how,
            with_options(&server, &format!("table={table}{options}")),
        )
    })
    .collect()
}

fn name() -> LockName {
    LockName::new(unique("election")).expect("a valid name")
}

/// A request for the whole of `name`, held by a holder labelled `label`,
/// recording its term when `campaign`, as a campaign's does.
fn request(name: &LockName, label: &str, campaign: bool) -> AcquireRequest {
    let holder = Holder::this_process(Some(label));
    let mut request = AcquireRequest::new(
        name.clone(),
        Claim::Exclusive,
        Duration::from_secs(30),
        holder.into(),
    );
    request.records_term = campaign;
    request
}

/// One attempt through the backend alone: the lease when granted.
async fn attempt(backend: &dyn Backend, request: AcquireRequest) -> Option<Lease> {
    match backend
        .try_acquire(&request, &mut WaitState::new())
        .await
        .expect("acquire")
    {
        Attempt::Acquired {
            fencing_token,
            state,
        } => Some(request.granted(fencing_token, state)),
        Attempt::Held { .. } => None,
    }
}

/// A grant of the free `name`, released at once; its token.
async fn grant_and_release(
    backend: &dyn Backend,
    name: &LockName,
    label: &str,
    campaign: bool,
) -> u64 {
    let lease = attempt(backend, request(name, label, campaign))
        .await
        .unwrap_or_else(|| panic!("{name} was held"));
    assert!(backend.release(&lease).await.expect("release"));
    lease.fencing_token
}

async fn record(backend: &dyn Backend, name: &LockName) -> Vec<Term> {
    backend
        .term_log()
        .expect("a record of terms")
        .terms_after(name, 0, ADMIN_LIMIT)
        .await
        .expect("read the terms")
}

fn tokens(terms: &[Term]) -> Vec<u64> {
    terms.iter().map(|term| term.term).collect()
}

/// The terms recorded, each naming the one recorded before it.
fn assert_chained(how: &str, terms: &[Term]) {
    for pair in terms.windows(2) {
        assert_eq!(pair[1].previous, Some(pair[0].term), "{how}: {terms:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_record_keeps_the_last_terms_each_naming_the_one_before_with_the_value_whole() {
    for (how, url) in servers() {
        let backend = open(&url).await;
        let name = name();
        let mut granted = Vec::new();
        for round in 0..TERMS_KEPT + 5 {
            // The longest value a campaign takes, 1 KiB, kept whole.
            let label = format!("{round:04}{}", "v".repeat(1020));
            granted.push((
                grant_and_release(&*backend, &name, &label, true).await,
                label,
            ));
        }
        let kept = record(&*backend, &name).await;
        let expected = &granted[granted.len() - TERMS_KEPT..];
        assert_eq!(
            tokens(&kept),
            expected.iter().map(|(token, _)| *token).collect::<Vec<_>>(),
            "{how}: the last {TERMS_KEPT} terms, oldest first"
        );
        for (term, (_, label)) in kept.iter().zip(expected) {
            assert_eq!(term.holder.label.as_ref(), Some(label), "{how}");
            assert_eq!(term.holder.pid, std::process::id(), "{how}");
        }
        // The first kept names the last one dropped.
        let dropped = granted[granted.len() - TERMS_KEPT - 1].0;
        assert_eq!(kept[0].previous, Some(dropped), "{how}");
        assert_chained(how, &kept);

        let after = kept[TERMS_KEPT - 3].term;
        let later = backend
            .term_log()
            .expect("a record of terms")
            .terms_after(&name, after, ADMIN_LIMIT)
            .await
            .expect("read the terms");
        assert_eq!(tokens(&later), tokens(&kept[TERMS_KEPT - 2..]), "{how}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_grants_and_lost_campaigns_write_no_term() {
    for (how, url) in servers() {
        let backend = open(&url).await;
        let name = name();
        grant_and_release(&*backend, &name, "plain", false).await;
        assert!(record(&*backend, &name).await.is_empty(), "{how}");

        let first = grant_and_release(&*backend, &name, "first", true).await;
        grant_and_release(&*backend, &name, "plain", false).await;
        // A campaign that finds the lock held is not granted, and not
        // recorded.
        let held = attempt(&*backend, request(&name, "holder", false))
            .await
            .expect("the name is free");
        assert!(
            attempt(&*backend, request(&name, "loser", true))
                .await
                .is_none(),
            "{how}: the lock is held"
        );
        assert!(backend.release(&held).await.expect("release"));
        let second = grant_and_release(&*backend, &name, "second", true).await;

        let kept = record(&*backend, &name).await;
        assert_eq!(tokens(&kept), vec![first, second], "{how}");
        assert_eq!(kept[0].previous, None, "{how}: the first recorded");
        assert_eq!(kept[1].previous, Some(first), "{how}");
        assert_eq!(kept[1].holder.label.as_deref(), Some("second"), "{how}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_campaigns_of_many_processes_record_one_chain() {
    const CAMPAIGNERS: usize = 4;
    const ROUNDS: usize = 6;
    for (how, url) in servers() {
        let name = name();
        let mut campaigners = Vec::new();
        for _ in 0..CAMPAIGNERS {
            // A backend each, as separate processes would have.
            let client = LockClient::builder()
                .build(PostgresBackend::open(&url).await.expect("open"))
                .expect("a client");
            campaigners.push(client);
        }
        let (won, clients) =
            race_campaigns(campaigners, &name, ROUNDS, Duration::from_secs(30)).await;
        let kept = record(clients[0].backend().as_ref(), &name).await;
        assert_eq!(
            terms_and_values(&kept),
            won,
            "{how}: every term won, in order, once"
        );
        assert_eq!(kept[0].previous, None, "{how}");
        assert_chained(how, &kept);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_told_it_missed_terms_goes_on_with_those_kept() {
    for (how, url) in servers() {
        let client = LockClient::builder()
            .build(PostgresBackend::open(&url).await.expect("open"))
            .expect("a client");
        let election = client.election(name()).expect("a valid name");
        let campaign = |value: String| {
            let election = election.clone();
            async move {
                election
                    .campaign(value, Duration::from_secs(30))
                    .await
                    .expect("the campaign wins")
            }
        };
        let first = campaign("first".into()).await;
        let first_term = first.term();
        let mut observer = election.observe();
        let seen = observer.next().await.expect("observe");
        assert_eq!((seen.value.as_str(), seen.term), ("first", first_term));
        assert!(first.resign().await.expect("resign"));

        let mut terms = Vec::new();
        for round in 0..TERMS_KEPT + 3 {
            let leading = campaign(format!("later-{round}")).await;
            terms.push(leading.term());
            assert!(leading.resign().await.expect("resign"));
        }
        let kept = &terms[terms.len() - TERMS_KEPT..];
        match observer.next().await {
            Err(Error::TermsForgotten {
                after,
                before,
                kept: count,
                ..
            }) => {
                assert_eq!(
                    (after, before, count),
                    (first_term, kept[0], TERMS_KEPT),
                    "{how}"
                );
            }
            other => panic!("{how}: expected TermsForgotten, got {other:?}"),
        }
        for (index, term) in kept.iter().enumerate() {
            let leader = observer.next().await.expect("observe");
            assert_eq!(leader.term, *term, "{how}");
            let round = terms.len() - TERMS_KEPT + index;
            assert_eq!(leader.value, format!("later-{round}"), "{how}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_table_made_before_the_record_gets_one_when_opened() {
    let (admin, connection) = tokio_postgres::connect(&env("DISTLOCK_TEST_POSTGRES_URL"), NoTls)
        .await
        .expect("admin");
    tokio::spawn(connection);
    for (how, url) in servers() {
        let table = url
            .split("table=")
            .nth(1)
            .and_then(|rest| rest.split('&').next())
            .expect("the URL names its table")
            .to_owned();
        drop(open(&url).await);
        // As an earlier release left it: the lock table alone.
        admin
            .batch_execute(&format!("DROP TABLE public.\"{table}_terms\""))
            .await
            .expect("drop the record");
        let backend = open(&url).await;
        let name = name();
        let token = grant_and_release(&*backend, &name, "after the upgrade", true).await;
        assert_eq!(
            tokens(&record(&*backend, &name).await),
            vec![token],
            "{how}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_that_cannot_make_the_record_opens_and_refuses_campaigns() {
    let (admin, connection) = tokio_postgres::connect(&env("DISTLOCK_TEST_POSTGRES_URL"), NoTls)
        .await
        .expect("admin");
    tokio::spawn(connection);
    // A role that may read distlock's tables and create nothing.
    let reader = env("DISTLOCK_TEST_POSTGRES_READER_URL");
    for mode in ["lease", "advisory"] {
        let table = unique("terms");
        let options = format!("table={table}&mode={mode}");
        drop(open(&with_options(&env("DISTLOCK_TEST_POSTGRES_URL"), &options)).await);
        admin
            .batch_execute(&format!("DROP TABLE public.\"{table}_terms\""))
            .await
            .expect("drop the record");
        let backend = open(&with_options(&reader, &options)).await;
        assert!(backend.term_log().is_none(), "{mode}");
        match backend
            .try_acquire(&request(&name(), "v", true), &mut WaitState::new())
            .await
        {
            Err(Error::Denied { message, .. }) => {
                assert!(
                    message.contains("table of election terms"),
                    "{mode}: {message}"
                );
            }
            other => panic!("{mode}: expected Denied, got {other:?}"),
        }
    }
}
