//! Two processes and one entity. The other process is this test binary
//! again, running this same test in the child role that its environment
//! names.

use std::process::Stdio;
use std::time::Duration;

use distlock_mongodb::mongodb::bson::doc;
use distlock_mongodb::mongodb::bson::oid::ObjectId;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

use super::*;

/// Set in the child: `<collection>|<entity id>|<role>`.
const CHILD: &str = "DISTLOCK_TEST_ENTITY_CHILD";
/// This test's path, for the child's test filter.
const THIS_TEST: &str = "entity::process::two_processes_cannot_both_hold_an_entity";
/// What the child's own lines start with, among the harness's.
const SAYS: &str = "ENTITY-CHILD ";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_cannot_both_hold_an_entity() {
    if let Ok(spec) = std::env::var(CHILD) {
        child(&spec).await;
        return;
    }
    let (reports, raw) = collections::<Report>("entity-procs").await;
    let id = ObjectId::new();
    insert_raw(&raw, doc! { "_id": id, "title": "t", "count": 0_i64 }).await;
    let locks = handle(&reports, options());
    let spec = |role: &str| format!("{}|{}|{role}", reports.name(), id.to_hex());

    // We hold it: the other process cannot take it.
    let guard = locks.lock(&id, Duration::from_secs(5)).await.unwrap();
    let mut other = Other::start(&spec("try"));
    assert_eq!(other.says().await, "none");
    other.exits_cleanly().await;
    guard.release_unchanged().await.unwrap();

    // The other process holds it: we cannot take it until it wrote and
    // unlocked.
    let mut other = Other::start(&spec("hold"));
    let said = other.says().await;
    let their_token: u64 = said
        .strip_prefix("locked ")
        .and_then(|token| token.parse().ok())
        .unwrap_or_else(|| panic!("unexpected: {said}"));
    assert!(locks.try_lock(&id).await.unwrap().is_none());
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move { locks.lock(&id, Duration::from_secs(60)).await })
    };
    other.tell("release").await;
    assert_eq!(other.says().await, "released");
    let ours = waiter.await.unwrap().unwrap();
    assert_eq!(ours.value().count, 1000, "we saw its write");
    assert!(ours.fencing_token() > their_token);
    other.exits_cleanly().await;
    ours.release_unchanged().await.unwrap();

    // Both increment at once: no update is lost.
    const ROUNDS: i64 = 40;
    let mut other = Other::start(&spec(&format!("count {ROUNDS}")));
    assert_eq!(other.says().await, "counting");
    for _ in 0..ROUNDS {
        let mut guard = locks.lock(&id, Duration::from_secs(60)).await.unwrap();
        guard.value_mut().count += 1;
        guard.commit().await.unwrap();
    }
    assert_eq!(other.says().await, "counted");
    other.exits_cleanly().await;
    assert_eq!(
        stored(&raw, id).await.get_i64("count").unwrap(),
        1000 + 2 * ROUNDS
    );
}

/// The child role: does what `spec` says, reporting on stdout.
async fn child(spec: &str) {
    let mut parts = spec.splitn(3, '|');
    let (collection, id, role) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    );
    let client = inspector(&shared_url()).await;
    let reports = client
        .database("distlock_test")
        .collection::<Report>(collection);
    let id = ObjectId::parse_str(id).unwrap();
    let locks = handle(&reports, options());
    match role.split_once(' ').unwrap_or((role, "")) {
        ("try", _) => {
            let got = locks.try_lock(&id).await.unwrap();
            println!("{SAYS}{}", if got.is_some() { "some" } else { "none" });
        }
        ("hold", _) => {
            let guard = locks.lock(&id, Duration::from_secs(60)).await.unwrap();
            println!("{SAYS}locked {}", guard.fencing_token());
            let mut line = String::new();
            BufReader::new(tokio::io::stdin())
                .read_line(&mut line)
                .await
                .unwrap();
            assert_eq!(line.trim(), "release");
            let mut value = guard.value().clone();
            value.count += 1000;
            guard.release(value).await.unwrap();
            println!("{SAYS}released");
        }
        ("count", rounds) => {
            println!("{SAYS}counting");
            for _ in 0..rounds.parse::<u32>().unwrap() {
                let mut guard = locks.lock(&id, Duration::from_secs(60)).await.unwrap();
                guard.value_mut().count += 1;
                guard.commit().await.unwrap();
            }
            println!("{SAYS}counted");
        }
        _ => panic!("unknown role {role}"),
    }
}

/// The other process, seen from this one.
struct Other {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Other {
    fn start(spec: &str) -> Self {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([THIS_TEST, "--exact", "--nocapture", "--test-threads", "1"])
            .env(CHILD, spec)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("this test binary runs again");
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Self { child, lines }
    }

    /// The next thing the child says, skipping the harness's own lines.
    async fn says(&mut self) -> String {
        let read = async {
            while let Some(line) = self.lines.next_line().await.unwrap() {
                // The harness may have begun the line ("test … ... ").
                if let Some((_, said)) = line.split_once(SAYS) {
                    return said.to_owned();
                }
            }
            panic!("the child ended without saying anything more");
        };
        tokio::time::timeout(Duration::from_secs(120), read)
            .await
            .expect("the child answers")
    }

    async fn tell(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        stdin.flush().await.unwrap();
    }

    async fn exits_cleanly(mut self) {
        // Drain what is left, so the child never blocks on a full pipe.
        while self.lines.next_line().await.unwrap().is_some() {}
        let status = tokio::time::timeout(Duration::from_secs(120), self.child.wait())
            .await
            .expect("the child exits")
            .unwrap();
        assert!(status.success(), "the child failed: {status}");
    }
}
