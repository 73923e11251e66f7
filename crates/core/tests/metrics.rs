//! Every metric moves when what it counts happens, seen through a
//! recorder that keeps what it is given.

use std::collections::HashMap;
use std::time::Duration;

use distlock_core::testing::{Failure, TestBackend};
use distlock_core::{AcquireOptions, LockClient, LockOptions};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// Every metric so far: counters, gauges and the number of each
/// histogram's samples, by name and labels (`name{label=value,…}`, labels
/// sorted). The recorder hands out what changed since the last look, so
/// the looks add up.
fn look(snapshotter: &Snapshotter, seen: &mut HashMap<String, f64>) -> HashMap<String, f64> {
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let mut labels: Vec<String> = key
            .labels()
            .map(|label| format!("{}={}", label.key(), label.value()))
            .collect();
        labels.sort();
        let name = format!("{}{{{}}}", key.name(), labels.join(","));
        let value = match value {
            DebugValue::Counter(count) => count as f64,
            DebugValue::Gauge(level) => level.into_inner(),
            DebugValue::Histogram(samples) => samples.len() as f64,
        };
        *seen.entry(name).or_default() += value;
    }
    seen.clone()
}

fn get(seen: &HashMap<String, f64>, name: &str) -> f64 {
    seen.get(name).copied().unwrap_or_default()
}

/// One test, since the recorder is the process's: each step checks what
/// moved.
#[tokio::test(start_paused = true)]
async fn every_metric_moves_when_its_event_happens() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this process");
    let mut totals = HashMap::new();

    let backend = TestBackend::new();
    let options = LockOptions::builder()
        .lease(Duration::from_secs(3))
        .build()
        .unwrap();
    let client = LockClient::new(backend.shared(), options.clone());
    let other = LockClient::new(backend.shared(), options);

    // A grant, a refused try and a wait that times out.
    let guard = client.acquire("job").await.unwrap();
    assert!(other.try_acquire("job").await.unwrap().is_none());
    let late = other.acquire_with("job", Duration::from_millis(200)).await;
    assert!(late.is_err());
    let seen = look(&snapshotter, &mut totals);
    let acquisitions = "distlock_acquisitions_total{backend=memory,kind=exclusive,outcome=";
    assert_eq!(
        get(&seen, &format!("{acquisitions}granted}}")),
        1.0,
        "{seen:?}"
    );
    assert_eq!(
        get(&seen, &format!("{acquisitions}refused}}")),
        1.0,
        "{seen:?}"
    );
    assert_eq!(
        get(&seen, &format!("{acquisitions}timed_out}}")),
        1.0,
        "{seen:?}"
    );
    assert_eq!(
        get(
            &seen,
            "distlock_acquire_wait_seconds{backend=memory,kind=exclusive,outcome=timed_out}"
        ),
        1.0
    );
    assert_eq!(
        get(&seen, "distlock_locks_held{backend=memory,kind=exclusive}"),
        1.0
    );

    // Extensions while it is held; then the release ends the hold.
    tokio::time::sleep(Duration::from_secs(5)).await;
    guard.release().await.unwrap();
    let seen = look(&snapshotter, &mut totals);
    assert!(
        get(
            &seen,
            "distlock_extensions_total{backend=memory,outcome=extended}"
        ) >= 2.0,
        "{seen:?}"
    );
    assert!(get(&seen, "distlock_extension_seconds{backend=memory}") >= 2.0);
    assert_eq!(
        get(&seen, "distlock_locks_held{backend=memory,kind=exclusive}"),
        0.0
    );
    assert_eq!(
        get(
            &seen,
            "distlock_hold_seconds{backend=memory,kind=exclusive}"
        ),
        1.0
    );

    // A loss the backend reports, counted by its reason.
    let guard = client
        .acquire_with("job", AcquireOptions::new().shared())
        .await
        .unwrap();
    assert_eq!(backend.lose("job"), 1);
    guard.lost().await;
    drop(guard);
    // The dropped guard lets go of the lease in the background.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let seen = look(&snapshotter, &mut totals);
    assert_eq!(
        get(
            &seen,
            "distlock_losses_total{backend=memory,kind=shared,reason=detected}"
        ),
        1.0,
        "{seen:?}"
    );
    assert_eq!(
        get(&seen, "distlock_locks_held{backend=memory,kind=shared}"),
        0.0
    );

    // A backend error, by operation and kind, and the try it failed.
    backend.fail_next(1, Failure::Transient);
    assert!(client.try_acquire("flaky").await.is_err());
    let seen = look(&snapshotter, &mut totals);
    assert_eq!(
        get(
            &seen,
            "distlock_backend_errors_total{backend=memory,error=transient,operation=acquire}"
        ),
        1.0,
        "{seen:?}"
    );
    assert_eq!(get(&seen, &format!("{acquisitions}failed}}")), 1.0);

    // A failed extension puts a lock at risk, counted by the reason.
    let guard = client.acquire("shaky").await.unwrap();
    backend.fail_next(1, Failure::Transient);
    assert!(guard.extend().await.is_err());
    let seen = look(&snapshotter, &mut totals);
    assert_eq!(
        get(
            &seen,
            "distlock_at_risk_total{backend=memory,kind=exclusive,reason=extension_failed}"
        ),
        1.0,
        "{seen:?}"
    );
    guard.release().await.unwrap();

    // A lock passed to the next task of the same client in one step.
    let held = client.acquire("relay").await.unwrap();
    let next = {
        let client = client.clone();
        tokio::spawn(async move { client.acquire("relay").await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    held.release().await.unwrap();
    let next = next.await.unwrap().unwrap();
    let seen = look(&snapshotter, &mut totals);
    assert_eq!(
        get(&seen, "distlock_local_hand_overs_total{backend=memory}"),
        1.0,
        "{seen:?}"
    );
    next.release().await.unwrap();

    // Names are labels only for a client that asks.
    assert!(!LockOptions::default().metrics_by_name());
    let named = LockClient::builder()
        .metrics_by_name(true)
        .build_shared(backend.shared())
        .unwrap();
    named
        .acquire("report")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let seen = look(&snapshotter, &mut totals);
    assert_eq!(
        get(
            &seen,
            "distlock_acquisitions_total{backend=memory,kind=exclusive,lock=report,outcome=granted}"
        ),
        1.0,
        "{seen:?}"
    );
    assert_eq!(
        get(
            &seen,
            "distlock_hold_seconds{backend=memory,kind=exclusive,lock=report}"
        ),
        1.0
    );
    assert!(
        !seen.keys().any(|key| key.contains("lock=job")),
        "the first client's metrics carry no names: {seen:?}"
    );
}
