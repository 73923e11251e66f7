//! User and password authentication, against a member of the test's own
//! with authentication enabled: the backend authenticates when it opens,
//! keeps working after etcd drops every token it handed out (a refused
//! token is replaced), and a wrong password is refused without being shown.

// Shared with the cluster tests, which use the rest of it.
#[allow(dead_code)]
mod support;

use std::time::Duration;

use distlock_core::{LockClient, LockName, LockOptions};
use distlock_etcd::EtcdBackend;

use support::lone_member::LoneMember;

const PASSWORD: &str = "p4ss-CANARY";

/// The backend's URL for `member`, as root with `password`.
fn url(member: &LoneMember, password: &str) -> String {
    format!("etcd://root:{password}@{}", member.host())
}

/// Adds root and turns authentication on.
fn enable_auth(member: &LoneMember) {
    let root = format!("root:{PASSWORD}");
    // Before authentication is on, etcdctl's --user is not checked.
    member.etcdctl(&root, &["user", "add", &root]);
    member.etcdctl(&root, &["auth", "enable"]);
}

async fn take_and_give_back(client: &LockClient, name: &LockName) -> u64 {
    let guard = client
        .try_acquire(name)
        .await
        .expect("try_acquire")
        .expect("a free name is granted");
    let token = guard.fencing_token();
    guard.release().await.expect("release");
    token
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn credentials_authenticate_and_a_dropped_token_is_replaced() {
    let member = LoneMember::start();
    member.wait_healthy().await;
    enable_auth(&member);

    let backend = EtcdBackend::open(&url(&member, PASSWORD))
        .await
        .expect("open with the right password");
    let options = LockOptions::builder()
        .lease(Duration::from_secs(5))
        .build()
        .expect("valid options");
    let client = LockClient::new(std::sync::Arc::new(backend), options);
    let name = LockName::new(format!("auth-{:016x}", rand::random::<u64>())).expect("name");
    let first = take_and_give_back(&client, &name).await;

    // Turning authentication off and on drops every token etcd handed
    // out, the backend's included: its next call is refused, and must
    // authenticate again and go through.
    let root = format!("root:{PASSWORD}");
    member.etcdctl(&root, &["auth", "disable"]);
    member.etcdctl(&root, &["auth", "enable"]);
    let second = take_and_give_back(&client, &name).await;
    assert!(second > first, "tokens grow: {first} then {second}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wrong_password_is_refused_and_never_shown() {
    let member = LoneMember::start();
    member.wait_healthy().await;
    enable_auth(&member);

    let wrong = "wr0ng-CANARY";
    let error = EtcdBackend::open(&url(&member, wrong))
        .await
        .expect_err("a wrong password is refused");
    let mut shown = format!("{error} {error:?}");
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        shown.push_str(&format!(" {cause} {cause:?}"));
        source = cause.source();
    }
    assert!(
        shown.contains("authentication failed"),
        "the error says why: {shown}"
    );
    assert!(!shown.contains(wrong), "the password is shown: {shown}");
}
