//! Throwaway certificates for TLS tests: a CA and a certificate it signs
//! for 127.0.0.1, made with openssl in a directory of their own.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A CA (`ca.pem`) and a server certificate it signs for 127.0.0.1
/// (`server.pem`, `server.key`); gone when dropped.
pub struct Certificates {
    dir: tempfile::TempDir,
}

impl Certificates {
    /// Makes them, with openssl.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temp dir");
        make_certificates(dir.path());
        Self { dir }
    }

    /// The path of `file` in their directory.
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// The CA's certificate.
    pub fn ca(&self) -> PathBuf {
        self.path("ca.pem")
    }

    /// The settings that make a redis-server serve TLS with them, without
    /// asking clients for certificates.
    pub fn server_args(&self) -> Vec<String> {
        let path = |file: &str| self.path(file).display().to_string();
        vec![
            "--tls-cert-file".into(),
            path("server.pem"),
            "--tls-key-file".into(),
            path("server.key"),
            "--tls-ca-cert-file".into(),
            path("ca.pem"),
            "--tls-auth-clients".into(),
            "no".into(),
        ]
    }
}

/// Makes, in `dir`, a CA (`ca.pem`) and a certificate it signs for
/// 127.0.0.1 (`server.pem`, `server.key`), with openssl. The certificate
/// serves clients, and nodes of a cluster that talk to one another over
/// TLS.
fn make_certificates(dir: &Path) {
    let p256 = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n",
    )
    .unwrap();
    for command in [
        format!(
            "req -x509 -new {p256} -keyout ca.key -out ca.pem -days 1 -subj /CN=distlock-redis-test-CA \
             -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign"
        ),
        format!("req -new {p256} -keyout server.key -out server.csr -subj /CN=127.0.0.1"),
        "x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 \
         -extfile server.ext -out server.pem"
            .to_owned(),
    ] {
        let output = Command::new("openssl")
            .current_dir(dir)
            .args(command.split_whitespace())
            .output()
            .expect("run openssl (scripts/test installs it)");
        assert!(
            output.status.success(),
            "openssl {command}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
