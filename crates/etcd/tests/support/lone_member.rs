//! A single etcd member of a test's own, plain or serving TLS with a
//! throwaway CA, for the tests that change how the server is set up
//! (authentication, TLS). Dropping it stops the member and removes its
//! data. `scripts/test` sets `DISTLOCK_ETCD_BIN` and `DISTLOCK_ETCDCTL_BIN`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use distlock_etcd::raw::{Client, ConnectOptions};

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

pub(crate) struct LoneMember {
    child: Child,
    dir: PathBuf,
    /// Its client URL, `http://127.0.0.1:PORT` or `https://…`.
    client: String,
    /// The CA that signed its certificate, when it serves TLS.
    ca: Option<PathBuf>,
}

impl LoneMember {
    /// A member serving plain HTTP/2.
    pub(crate) fn start() -> Self {
        Self::start_with(false)
    }

    /// A member serving TLS only, with a certificate for 127.0.0.1 signed
    /// by a CA made for it.
    pub(crate) fn start_tls() -> Self {
        Self::start_with(true)
    }

    fn start_with(tls: bool) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "distlock-etcd-lone-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).expect("data dir");
        let scheme = if tls { "https" } else { "http" };
        let client = format!("{scheme}://127.0.0.1:{}", free_port());
        let peer = format!("http://127.0.0.1:{}", free_port());
        let log = std::fs::File::create(dir.join("member.log")).expect("log");
        let mut command = Command::new(bin("DISTLOCK_ETCD_BIN"));
        command
            .args(["--name", "lone"])
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("lone={peer}")])
            .args(["--logger", "zap", "--log-level", "error"])
            .stdout(Stdio::null())
            .stderr(log);
        let ca = tls.then(|| {
            let (ca, cert, key) = throwaway_tls(&dir);
            command
                .arg("--cert-file")
                .arg(cert)
                .arg("--key-file")
                .arg(key);
            ca
        });
        let child = command.spawn().expect("start an etcd member");
        Self {
            child,
            dir,
            client,
            ca,
        }
    }

    /// `host:port`.
    pub(crate) fn host(&self) -> &str {
        self.client.split_once("://").map_or("", |(_, host)| host)
    }

    /// The CA that signed its certificate, if it serves TLS.
    pub(crate) fn ca(&self) -> Option<&Path> {
        self.ca.as_deref()
    }

    /// Waits until the member answers; panics after a minute.
    pub(crate) async fn wait_healthy(&self) {
        let mut options = ConnectOptions::new([self.client.clone()])
            .with_connect_timeout(Duration::from_millis(500));
        if let Some(ca) = &self.ca {
            options = options.with_tls(Some(std::fs::read(ca).expect("the CA")));
        }
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
            "the test's own etcd member did not come up (log in {})",
            self.dir.display()
        );
    }

    /// Runs etcdctl against the (plain) member as `user` (`name:password`),
    /// which etcd checks once authentication is on.
    pub(crate) fn etcdctl(&self, user: &str, args: &[&str]) {
        let output = Command::new(bin("DISTLOCK_ETCDCTL_BIN"))
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &self.client, "--user", user])
            .args(args)
            .output()
            .expect("run etcdctl");
        assert!(
            output.status.success(),
            "etcdctl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

impl Drop for LoneMember {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A throwaway CA and a server certificate it signs for 127.0.0.1, made
/// with openssl in `dir`: the CA's PEM, the certificate, and its key.
fn throwaway_tls(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let openssl = |args: &[&str]| {
        let output = Command::new("openssl")
            .current_dir(dir)
            .args(args)
            .output()
            .expect("run openssl (scripts/test installs it)");
        assert!(
            output.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509", "-new"][..],
            &ec,
            &["-keyout", "ca.key", "-out", "ca.pem", "-days", "1"],
            &["-subj", "/CN=distlock etcd test CA"],
            &["-addext", "basicConstraints=critical,CA:TRUE"],
            &["-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        ]
        .concat(),
    );
    openssl(
        &[
            &["req", "-new"][..],
            &ec,
            &["-keyout", "server.key", "-out", "server.csr"],
            &["-subj", "/CN=127.0.0.1"],
        ]
        .concat(),
    );
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\n\
         keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .expect("server.ext");
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "server.ext",
        "-out",
        "server.pem",
    ]);
    (
        dir.join("ca.pem"),
        dir.join("server.pem"),
        dir.join("server.key"),
    )
}
