//! The blocking API from plain threads: waits block, the keeper extends in
//! the background, drops release, and inside a runtime it refuses rather
//! than stall or panic (and a drop there releases in the background).

use std::time::Duration;

use distlock::{AcquireOptions, Error, TryOptions};

fn file_url(dir: &tempfile::TempDir) -> String {
    format!("file://{}", dir.path().display())
}

#[test]
fn a_waiter_on_another_thread_gets_the_lock_when_it_is_released() {
    let dir = tempfile::tempdir().unwrap();
    let holder = distlock::blocking::connect(&file_url(&dir)).unwrap();
    let waiter = distlock::blocking::connect(&file_url(&dir)).unwrap();

    let guard = holder.acquire("shared-job").unwrap();
    assert!(waiter.try_acquire("shared-job").unwrap().is_none());
    let token = guard.fencing_token();
    let (sender, received) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let next = waiter.acquire("shared-job").unwrap();
        sender.send(next.fencing_token()).unwrap();
        next.release().unwrap()
    });
    // The waiter is blocked while the lock is held.
    assert!(received.recv_timeout(Duration::from_millis(200)).is_err());
    assert!(guard.release().unwrap());
    assert!(received.recv().unwrap() > token);
    assert!(thread.join().unwrap());
}

#[test]
fn the_keeper_extends_while_the_thread_works() {
    let client = distlock::blocking::connect("memory://?lease=1s").unwrap();
    let guard = client.acquire("long-work").unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    assert!(!guard.is_lost(), "extended in the background");
    guard.extend().unwrap();
    assert!(guard.release().unwrap());
}

#[test]
fn kinds_with_lock_list_and_force_release() {
    let client = distlock::blocking::connect("memory://").unwrap();
    let reader = client
        .acquire_with("config", AcquireOptions::new().shared())
        .unwrap();
    let second = client
        .try_acquire_with("config", TryOptions::new().shared())
        .unwrap()
        .expect("readers share");
    assert_eq!(client.list().unwrap().len(), 2);
    assert!(client.try_acquire("config").unwrap().is_none());
    drop(second);
    assert!(client.force_release("config").unwrap());
    // The holder learns at its next extension that the lock was taken away.
    reader.extend().unwrap_err();
    assert!(reader.wait_lost().is_ok());

    let doubled = client
        .with_lock("work", Duration::from_secs(5), |lock| {
            lock.fencing_token * 2
        })
        .unwrap();
    assert!(doubled >= 2);
    assert!(matches!(client.acquire(""), Err(Error::InvalidName { .. })));
}

#[test]
fn a_dropped_guard_releases_the_lock() {
    let client = distlock::blocking::connect("memory://").unwrap();
    drop(client.acquire("dropped").unwrap());
    let again = client
        .acquire_with("dropped", Duration::from_secs(5))
        .expect("the drop released it");
    again.release().unwrap();
}

#[tokio::test]
async fn inside_a_runtime_it_refuses_instead_of_stalling() {
    let outcome = distlock::blocking::connect("memory://");
    assert!(matches!(outcome, Err(Error::Unsupported(_))), "{outcome:?}");

    // A client made outside, then used (and dropped) inside.
    let client = std::thread::spawn(|| distlock::blocking::connect("memory://").unwrap())
        .join()
        .unwrap();
    assert!(matches!(
        client.acquire("inside"),
        Err(Error::Unsupported(_))
    ));
    assert!(matches!(
        client.acquire_all(["inside", "also"], Duration::from_secs(1)),
        Err(Error::Unsupported(_))
    ));
    drop(client);
}

#[tokio::test]
async fn a_guard_and_a_set_dropped_inside_a_runtime_release_without_blocking_it() {
    let dir = tempfile::tempdir().unwrap();
    let url = file_url(&dir);
    let (client, guard, set) = std::thread::spawn(move || {
        let client = distlock::blocking::connect(&url).unwrap();
        let guard = client.acquire("inside/one").unwrap();
        let set = client
            .acquire_all(["inside/two", "inside/three"], Duration::from_secs(5))
            .unwrap();
        (client, guard, set)
    })
    .join()
    .unwrap();
    // Blocking here would panic or stall this runtime's thread: the
    // releases run in the background, in the client's runtime.
    drop(guard);
    drop(set);
    let other = distlock::connect(&file_url(&dir)).await.unwrap();
    for name in ["inside/one", "inside/two", "inside/three"] {
        let again = other
            .acquire_with(name, Duration::from_secs(5))
            .await
            .expect("the drop released it");
        again.release().await.unwrap();
    }
    drop(client);
}

#[test]
fn a_set_is_taken_whole_or_not_at_all_and_released_together() {
    let dir = tempfile::tempdir().unwrap();
    let client = distlock::blocking::connect(&file_url(&dir)).unwrap();
    let other = distlock::blocking::connect(&file_url(&dir)).unwrap();

    let set = client
        .acquire_all(["ledger/b", "ledger/a"], Duration::from_secs(5))
        .unwrap();
    let names: Vec<&str> = set
        .fencing_tokens()
        .map(|(name, _)| name.as_str())
        .collect();
    assert_eq!(names, ["ledger/a", "ledger/b"]);
    assert!(!set.is_lost());

    // One member is held elsewhere: nothing of the set stays taken.
    let blocker = other.acquire("ledger/c").unwrap();
    let refused = client.acquire_all(
        ["ledger/d", "ledger/c"],
        AcquireOptions::new().timeout(Duration::from_millis(100)),
    );
    assert!(matches!(refused, Err(Error::Timeout { .. })), "{refused:?}");
    let free = other.try_acquire("ledger/d").unwrap().expect("rolled back");
    free.release().unwrap();
    blocker.release().unwrap();

    assert!(set.release().unwrap());
    let again = other
        .acquire_all(["ledger/a", "ledger/b"], Duration::from_secs(5))
        .expect("the set released both");
    let mut guards = again.into_guards();
    assert_eq!(guards.len(), 2);
    assert!(guards.pop().unwrap().release().unwrap());
    drop(guards);
    let first = other
        .acquire_with("ledger/a", Duration::from_secs(5))
        .expect("the drop released it");
    assert!(first.release().unwrap());
}

#[test]
fn a_set_reports_which_lock_was_lost() {
    // A short lease, so that the next extension, which learns of the
    // loss, comes soon.
    let client = distlock::blocking::connect("memory://?lease=1s").unwrap();
    let set = client
        .acquire_all(["jobs/1", "jobs/2"], Duration::from_secs(5))
        .unwrap();
    assert!(client.force_release("jobs/2").unwrap());
    let (name, _reason) = set.wait_lost().unwrap();
    assert_eq!(name.as_str(), "jobs/2");
    assert!(set.is_lost());
    assert!(!set.release().unwrap());
}

#[test]
fn a_thread_hears_of_a_loss_through_the_warning_too() {
    let client = distlock::blocking::connect("memory://?lease=1s").unwrap();
    let guard = client.acquire("warned").unwrap();
    assert_eq!(guard.risk(), None);
    let set = client
        .acquire_all(["warned/a", "warned/b"], Duration::from_secs(5))
        .unwrap();
    assert_eq!(set.risk(), None);
    // A forced release comes with no warning before it: the loss is the
    // warning, at the next extension.
    assert!(client.force_release("warned").unwrap());
    assert!(client.force_release("warned/b").unwrap());
    assert!(matches!(
        guard.wait_at_risk().unwrap(),
        distlock::RiskReason::Lost(_)
    ));
    let (name, reason) = set.wait_at_risk().unwrap();
    assert_eq!(name.as_str(), "warned/b");
    assert!(matches!(reason, distlock::RiskReason::Lost(_)));
}

#[test]
fn a_handle_resumes_its_grant_from_a_plain_thread() {
    let client = distlock::blocking::connect("memory://?lease=1s").unwrap();
    // A reader's share leaves the client's slot of the name free, so the
    // same client can stand in for the process after a restart.
    let old = client
        .acquire_with("report", AcquireOptions::new().shared())
        .unwrap();
    let handle: distlock::ResumeHandle = old.handle().to_string().parse().unwrap();
    let resumed = client.resume(&handle).unwrap();
    assert_eq!(resumed.fencing_token(), old.fencing_token());
    assert!(matches!(old.extend(), Err(Error::Lost { .. })));
    assert!(matches!(client.resume(&handle), Err(Error::Lost { .. })));
    assert!(resumed.release().unwrap());
}
