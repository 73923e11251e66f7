//! User and password authentication, against a member of the test's own
//! with authentication enabled: the backend authenticates when it opens,
//! keeps working after etcd drops every token it handed out (a refused
//! token is replaced), and a wrong password is refused without being shown.
//! `scripts/test` sets `DISTLOCK_ETCD_BIN` and `DISTLOCK_ETCDCTL_BIN`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use distlock_core::{LockClient, LockName, LockOptions};
use distlock_etcd::EtcdBackend;
use distlock_etcd::raw::{Client, ConnectOptions};

const PASSWORD: &str = "p4ss-CANARY";

fn bin(variable: &str) -> String {
    std::env::var(variable)
        .unwrap_or_else(|_| panic!("{variable} is not set: run the tests with scripts/test"))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

/// One etcd member of this test's own; dropping it stops the member and
/// removes its data.
struct Member {
    child: Child,
    dir: PathBuf,
    client: String,
}

impl Member {
    fn start() -> Self {
        let dir = std::env::temp_dir().join(format!(
            "distlock-etcd-auth-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).expect("data dir");
        let client = format!("http://127.0.0.1:{}", free_port());
        let peer = format!("http://127.0.0.1:{}", free_port());
        let log = std::fs::File::create(dir.join("member.log")).expect("log");
        let child = Command::new(bin("DISTLOCK_ETCD_BIN"))
            .args(["--name", "auth"])
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("auth={peer}")])
            .args(["--logger", "zap", "--log-level", "error"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start an etcd member");
        Self { child, dir, client }
    }

    /// Waits until the member answers; panics after a minute.
    async fn wait_healthy(&self) {
        let options = ConnectOptions::new([self.client.clone()])
            .with_connect_timeout(Duration::from_millis(500));
        for _ in 0..600 {
            let status = tokio::time::timeout(Duration::from_secs(1), async {
                Client::connect(&options).await.ok()?.status().await.ok()
            })
            .await
            .ok()
            .flatten();
            if status.is_some_and(|status| status.leader != 0) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "the auth test's member did not come up (log in {})",
            self.dir.display()
        );
    }

    /// Runs etcdctl against the member, as root once authentication is on.
    fn etcdctl(&self, args: &[&str]) {
        let output = Command::new(bin("DISTLOCK_ETCDCTL_BIN"))
            .env("ETCDCTL_API", "3")
            .args([
                "--endpoints",
                &self.client,
                "--user",
                &format!("root:{PASSWORD}"),
            ])
            .args(args)
            .output()
            .expect("run etcdctl");
        assert!(
            output.status.success(),
            "etcdctl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// The backend's URL for this member, as root with `password`.
    fn url(&self, password: &str) -> String {
        let host = self.client.replacen("http://", "", 1);
        format!("etcd://root:{password}@{host}")
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
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
    let member = Member::start();
    member.wait_healthy().await;
    // Before authentication is on, etcdctl's --user is not checked.
    member.etcdctl(&["user", "add", &format!("root:{PASSWORD}")]);
    member.etcdctl(&["auth", "enable"]);

    let backend = EtcdBackend::open(&member.url(PASSWORD))
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
    member.etcdctl(&["auth", "disable"]);
    member.etcdctl(&["auth", "enable"]);
    let second = take_and_give_back(&client, &name).await;
    assert!(second > first, "tokens grow: {first} then {second}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wrong_password_is_refused_and_never_shown() {
    let member = Member::start();
    member.wait_healthy().await;
    member.etcdctl(&["user", "add", &format!("root:{PASSWORD}")]);
    member.etcdctl(&["auth", "enable"]);

    let wrong = "wr0ng-CANARY";
    let error = EtcdBackend::open(&member.url(wrong))
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
