//! Racing first acquisitions of a fresh name.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::{AcquireRequest, Attempt, Backend, WaitState};
use distlock_core::{Claim, Holder};
use tokio::sync::Barrier;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_racers_for_a_fresh_name_make_one_winner_and_no_error() {
    const RACERS: usize = 32;
    const BACKENDS: usize = 4;
    let url = shared_url();
    let collection = unique("race");
    let mut backends = Vec::new();
    for _ in 0..BACKENDS {
        backends.push(backend_at(&url, &collection).await);
    }
    for round in 0..8 {
        let name = lock_name(&format!("race{round}"));
        let barrier = Arc::new(Barrier::new(RACERS));
        let mut racers = Vec::new();
        for racer in 0..RACERS {
            let backend = backends[racer % BACKENDS].clone();
            let barrier = barrier.clone();
            let request = AcquireRequest::new(
                name.clone(),
                Claim::Exclusive,
                Duration::from_secs(30),
                Holder::this_process(Some(&format!("racer {racer}"))).into(),
            );
            racers.push(tokio::spawn(async move {
                barrier.wait().await;
                backend.try_acquire(&request, &mut WaitState::new()).await
            }));
        }
        let mut winners = 0;
        for racer in racers {
            match racer.await.unwrap() {
                Ok(Attempt::Acquired { .. }) => winners += 1,
                Ok(Attempt::Held { .. }) => {}
                Err(error) => panic!("a racer failed: {error}"),
            }
        }
        assert_eq!(winners, 1, "round {round}");
    }
}
