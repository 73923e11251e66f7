//! The members of the 3-member test cluster that `scripts/servers/etcd.sh`
//! starts: find the leader, kill, restart, stop and continue a member.
//! Each member N has, in `DISTLOCK_TEST_ETCD_CLUSTER_DIR`, its command
//! line (`member-N.cmd`), its pid (`member-N.pid`, rewritten here on a
//! restart) and its client URL (`member-N.client`).

use std::path::PathBuf;
use std::time::Duration;

use distlock_etcd::raw::{Client, ConnectOptions};

fn dir() -> PathBuf {
    std::env::var_os("DISTLOCK_TEST_ETCD_CLUSTER_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            panic!("DISTLOCK_TEST_ETCD_CLUSTER_DIR is not set: run the tests with scripts/test")
        })
}

fn read(file: &str) -> String {
    std::fs::read_to_string(dir().join(file))
        .unwrap_or_else(|e| panic!("{file}: {e}"))
        .trim()
        .to_owned()
}

/// One member, 1 to 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Member(usize);

/// The `etcd://` URL naming only `members`.
pub(crate) fn url_of(members: &[Member]) -> String {
    let hosts: Vec<String> = members
        .iter()
        .map(|member| member.client().replacen("http://", "", 1))
        .collect();
    format!("etcd://{}", hosts.join(","))
}

impl Member {
    pub(crate) fn new(number: usize) -> Self {
        assert!((1..=3).contains(&number));
        Self(number)
    }

    /// Its client URL, `http://127.0.0.1:PORT`.
    pub(crate) fn client(self) -> String {
        read(&format!("member-{}.client", self.0))
    }

    /// The `etcd://` URL naming only this member.
    pub(crate) fn url(self) -> String {
        url_of(&[self])
    }

    fn pid(self) -> String {
        read(&format!("member-{}.pid", self.0))
    }

    fn signal(self, signal: &str) {
        let pid = self.pid();
        let status = std::process::Command::new("kill")
            .args([signal, &pid])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {signal} {pid}");
    }

    pub(crate) fn kill(self) {
        self.signal("-KILL");
    }

    pub(crate) fn stop(self) {
        self.signal("-STOP");
    }

    pub(crate) fn resume(self) {
        self.signal("-CONT");
    }

    /// Starts the member again from its command line, on its data, and
    /// records its pid. It outlives the test, as the first one did: the
    /// script that started the cluster stops it by its pid file.
    #[allow(clippy::zombie_processes)]
    pub(crate) fn restart(self) {
        let args: Vec<String> = read(&format!("member-{}.cmd", self.0))
            .lines()
            .map(str::to_owned)
            .collect();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir().join(format!("member-{}.log", self.0)))
            .expect("log");
        let child = std::process::Command::new(&args[0])
            .args(&args[1..])
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("restart the member");
        std::fs::write(
            dir().join(format!("member-{}.pid", self.0)),
            child.id().to_string(),
        )
        .expect("pid file");
    }

    /// Whether this member says it leads.
    async fn leads(self) -> bool {
        let options =
            ConnectOptions::new([self.client()]).with_connect_timeout(Duration::from_millis(500));
        let status = tokio::time::timeout(Duration::from_secs(1), async {
            let client = Client::connect(&options).await.ok()?;
            client.status().await.ok()
        })
        .await
        .ok()
        .flatten();
        status.is_some_and(|status| status.header.map(|h| h.member_id) == Some(status.leader))
    }
}

/// Waits for a member that says it leads, other than `not`; panics after
/// a minute without one.
pub(crate) async fn wait_for_leader(not: Option<Member>) -> Member {
    for _ in 0..600 {
        for number in 1..=3 {
            let member = Member::new(number);
            if Some(member) != not && member.leads().await {
                return member;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no member led for a minute");
}
