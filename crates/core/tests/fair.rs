//! Fair mode on the memory backend, the reference for the stores that
//! keep a queue: waiters are served in the order they asked, across
//! clients and within one; a cancelled waiter leaves the queue at once;
//! a waiter that died holds the queue up for no longer than its lease.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::backend::{AcquireRequest, Backend, WaitState};
use distlock_core::{AcquireOptions, Claim, Holder, LockClient, LockName, MemoryBackend};

const WAITERS: usize = 6;

fn clients(backend: &Arc<MemoryBackend>, n: usize) -> Vec<LockClient> {
    (0..n)
        .map(|_| {
            let shared: Arc<dyn Backend> = backend.clone();
            LockClient::builder().build_shared(shared).unwrap()
        })
        .collect()
}

/// Waits, in virtual time, until `name` has `n` places in line.
async fn until_queued(backend: &MemoryBackend, name: &LockName, n: usize) {
    while backend.queued(name) != n {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn waiters_are_served_in_the_order_they_asked_across_and_within_clients() {
    let backend = Arc::new(MemoryBackend::fair());
    let name = LockName::new("fair").unwrap();
    let clients = clients(&backend, 3);
    let held = clients[0].acquire(&name).await.unwrap();
    let served = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for index in 0..WAITERS {
        // Two tasks of each client, interleaved: the holder's client too.
        let client = clients[index % 3].clone();
        let (task_name, served) = (name.clone(), served.clone());
        tasks.push(tokio::spawn(async move {
            let guard = client.acquire(&task_name).await.unwrap();
            served.lock().unwrap().push(index);
            tokio::time::sleep(Duration::from_millis(5)).await;
            assert!(guard.release().await.unwrap());
        }));
        until_queued(&backend, &name, index + 1).await;
    }
    assert!(held.release().await.unwrap());
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(*served.lock().unwrap(), (0..WAITERS).collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn a_try_never_jumps_the_line() {
    let backend = Arc::new(MemoryBackend::fair());
    let name = LockName::new("fair").unwrap();
    let clients = clients(&backend, 2);
    let held = clients[0].acquire(&name).await.unwrap();
    let waiting = tokio::spawn({
        let (client, name) = (clients[1].clone(), name.clone());
        async move { client.acquire(&name).await.unwrap() }
    });
    until_queued(&backend, &name, 1).await;
    assert!(held.release().await.unwrap());
    // Released, and granted at once to the waiter in line.
    assert!(clients[0].try_acquire(&name).await.unwrap().is_none());
    let guard = waiting.await.unwrap();
    assert!(guard.release().await.unwrap());
    assert!(clients[0].try_acquire(&name).await.unwrap().is_some());
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_waiter_leaves_the_line_at_once() {
    let backend = Arc::new(MemoryBackend::fair());
    let name = LockName::new("fair").unwrap();
    let clients = clients(&backend, 3);
    let held = clients[0].acquire(&name).await.unwrap();
    let (cancel, cancelled) = tokio::sync::oneshot::channel::<()>();
    let gives_up = tokio::spawn({
        let (client, name) = (clients[1].clone(), name.clone());
        async move {
            client
                .acquire_with(
                    &name,
                    AcquireOptions::new().cancel_on(async move {
                        let _ = cancelled.await;
                    }),
                )
                .await
        }
    });
    until_queued(&backend, &name, 1).await;
    let stays = tokio::spawn({
        let (client, name) = (clients[2].clone(), name.clone());
        async move { client.acquire(&name).await.unwrap() }
    });
    until_queued(&backend, &name, 2).await;
    cancel.send(()).unwrap();
    assert!(gives_up.await.unwrap().is_err(), "the cancelled wait ends");
    assert_eq!(backend.queued(&name), 1, "its place is gone");
    assert!(held.release().await.unwrap());
    let guard = stays.await.unwrap();
    assert!(guard.release().await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn a_dead_waiter_holds_the_line_up_no_longer_than_its_lease() {
    let backend = Arc::new(MemoryBackend::fair());
    let name = LockName::new("fair").unwrap();
    let clients = clients(&backend, 2);
    let held = clients[0].acquire(&name).await.unwrap();
    // A waiter that takes its place and dies: it never asks again, and
    // never ends its wait.
    let lease = Duration::from_secs(4);
    let dead = AcquireRequest {
        retries: true,
        ..AcquireRequest::new(
            name.clone(),
            Claim::Exclusive,
            lease,
            Arc::new(Holder::this_process(Some("dead"))),
        )
    };
    let _ = backend
        .try_acquire(&dead, &mut WaitState::new())
        .await
        .unwrap();
    let live = tokio::spawn({
        let (client, name) = (clients[1].clone(), name.clone());
        async move {
            let guard = client.acquire(&name).await.unwrap();
            (guard, tokio::time::Instant::now())
        }
    });
    until_queued(&backend, &name, 2).await;
    let released_at = tokio::time::Instant::now();
    assert!(held.release().await.unwrap());
    let (guard, granted_at) = live.await.unwrap();
    // The dead waiter's grant (or place) ran out within its lease of the
    // release, by the backend's clock; the live waiter asks again at once.
    let stalled = granted_at - released_at;
    assert!(stalled <= lease + Duration::from_secs(1), "{stalled:?}");
    assert!(guard.release().await.unwrap());
}
