//! `lock_or_insert`: inserting an entity already locked, under races.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use distlock_mongodb::mongodb::bson::doc;
use distlock_mongodb::mongodb::bson::oid::ObjectId;
use tokio::sync::Barrier;
use tokio::task::JoinHandle;

use super::*;

const RACERS: usize = 16;
const HANDLES: usize = 4;

/// [`RACERS`] tasks, each on one of `handles` in turn, that run `race`
/// together once every one has started: their join handles, in order.
fn racing<F, Fut>(handles: &[EntityLocks<Report>], race: F) -> Vec<JoinHandle<Fut::Output>>
where
    F: Fn(usize, EntityLocks<Report>) -> Fut,
    Fut: Future + Send + 'static,
    Fut::Output: Send + 'static,
{
    let barrier = Arc::new(Barrier::new(RACERS));
    (0..RACERS)
        .map(|racer| {
            let raced = race(racer, handles[racer % HANDLES].clone());
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                raced.await
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_racers_on_a_missing_id_make_one_insert_and_one_holder() {
    let (reports, raw) = collections::<Report>("entity-race").await;
    let handles: Vec<_> = (0..HANDLES).map(|_| handle(&reports, options())).collect();
    for round in 0..4 {
        let id = ObjectId::new();
        let racers = racing(&handles, |racer, locks| async move {
            let default = Report::new(&format!("racer {racer}"), 0);
            locks.try_lock_or_insert(&id, &default).await
        });
        let mut holders = Vec::new();
        for racer in racers {
            match racer.await.unwrap() {
                Ok(Some(guard)) => holders.push(guard),
                Ok(None) => {}
                Err(error) => panic!("round {round}: a racer failed: {error}"),
            }
        }
        assert_eq!(holders.len(), 1, "round {round}");
        let holder = holders.pop().unwrap();
        assert!(holder.inserted(), "round {round}");
        assert_eq!(raw.count_documents(doc! { "_id": id }).await.unwrap(), 1);
        let document = stored(&raw, id).await;
        assert_eq!(document.get_str("title").unwrap(), holder.value().title);
        holder.commit().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_waiters_on_a_missing_id_each_hold_it_once() {
    let (reports, raw) = collections::<Report>("entity-race-wait").await;
    let handles: Vec<_> = (0..HANDLES).map(|_| handle(&reports, options())).collect();
    let id = ObjectId::new();
    let racers = racing(&handles, |_, locks| async move {
        let mut guard = locks
            .lock_or_insert(&id, &Report::new("new", 0), Duration::from_secs(60))
            .await?;
        let inserted = guard.inserted();
        guard.value_mut().count += 1;
        guard.commit().await?;
        Ok::<bool, distlock_core::Error>(inserted)
    });
    let mut inserts = 0;
    for racer in racers {
        if racer.await.unwrap().expect("every racer gets the entity") {
            inserts += 1;
        }
    }
    assert_eq!(inserts, 1);
    assert_eq!(raw.count_documents(doc! {}).await.unwrap(), 1);
    assert_eq!(
        stored(&raw, id).await.get_i64("count").unwrap(),
        RACERS as i64
    );
}

#[tokio::test]
async fn lock_or_insert_of_an_existing_entity_only_locks_it() {
    let (reports, raw) = collections::<Report>("entity-existing").await;
    insert_raw(
        &raw,
        doc! { "_id": "r", "title": "stored", "count": 3_i64, "owner": "ops" },
    )
    .await;
    let locks = handle(&reports, options());
    let guard = locks
        .lock_or_insert("r", &Report::new("default", 0), Duration::from_secs(5))
        .await
        .unwrap();
    assert!(!guard.inserted());
    assert_eq!(guard.value(), &Report::new("stored", 3));
    assert!(
        locks
            .try_lock_or_insert("r", &Report::new("default", 0))
            .await
            .unwrap()
            .is_none()
    );
    guard.release_unchanged().await.unwrap();
    let after = stored(&raw, "r").await;
    assert_eq!(after.get_str("title").unwrap(), "stored");
    assert_eq!(after.get_str("owner").unwrap(), "ops");
}

/// `lock` and `lock_or_insert` on one id queue together in a handle, first
/// come first served: a `lock_or_insert` that queued first is served first.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lock_and_lock_or_insert_on_one_id_share_one_local_queue() {
    let (reports, _raw) = collections::<Report>("entity-one-queue").await;
    let locks = handle(&reports, options());
    let id = ObjectId::new();
    for round in 0..3 {
        let held = locks
            .lock_or_insert(&id, &Report::new("first", 0), Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(held.inserted(), round == 0);
        let (order, mut served) = tokio::sync::mpsc::unbounded_channel();
        let inserter = {
            let (locks, order) = (locks.clone(), order.clone());
            tokio::spawn(async move {
                let default = Report::new("unused", 0);
                let guard = locks
                    .lock_or_insert(&id, &default, Duration::from_secs(30))
                    .await
                    .unwrap();
                order.send("lock_or_insert").unwrap();
                guard.commit().await.unwrap();
            })
        };
        // Each waiter queues before the next one comes.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let locker = {
            let (locks, order) = (locks.clone(), order.clone());
            tokio::spawn(async move {
                let guard = locks.lock(&id, Duration::from_secs(30)).await.unwrap();
                order.send("lock").unwrap();
                guard.commit().await.unwrap();
            })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        held.commit().await.unwrap();
        inserter.await.unwrap();
        locker.await.unwrap();
        let got = [served.recv().await.unwrap(), served.recv().await.unwrap()];
        assert_eq!(got, ["lock_or_insert", "lock"], "round {round}");
    }
}
