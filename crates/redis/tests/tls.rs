//! `rediss://` against a server of the test's own that serves TLS with a
//! throwaway CA: trusted through `?ca=`, refused without it, and `?ca=`
//! refused on a plain `redis://` URL.

mod support;

use std::time::Duration;

use distlock_core::Error;
use distlock_redis::RedisBackend;

use support::tls::Certificates;
use support::{OwnServer, client, unique};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_with_a_private_ca_is_trusted_through_ca_and_refused_without() {
    let certificates = Certificates::new();
    let tls_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let path = |file: &str| certificates.path(file).display().to_string();
    let _server = OwnServer::start(&[
        "--tls-port",
        &tls_port.to_string(),
        "--tls-cert-file",
        &path("server.pem"),
        "--tls-key-file",
        &path("server.key"),
        "--tls-ca-cert-file",
        &path("ca.pem"),
        "--tls-auth-clients",
        "no",
    ])
    .await;

    let trusted = format!("rediss://127.0.0.1:{tls_port}?ca={}", path("ca.pem"));
    let locks = client(&trusted).await;
    let name = unique("tls");
    let guard = locks
        .acquire_with(&name, Duration::from_secs(5))
        .await
        .expect("acquire over TLS");
    assert!(guard.release().await.expect("release"));

    // The system's roots do not know the throwaway CA.
    let untrusted = format!("rediss://127.0.0.1:{tls_port}");
    let error = RedisBackend::open(&untrusted)
        .await
        .expect_err("a certificate no trusted CA signed");
    let message = error.to_string();
    assert!(
        message.contains("UnknownIssuer") && message.contains("?ca="),
        "the error says the certificate's issuer is unknown, and how to name a CA: {message}"
    );
}

#[tokio::test]
async fn a_ca_is_refused_without_tls_or_when_it_is_not_a_certificate() {
    let error = RedisBackend::open("redis://127.0.0.1:6379?ca=/etc/hostname")
        .await
        .expect_err("ca needs rediss://");
    assert!(
        matches!(&error, Error::InvalidConfig { field, .. } if field == "ca"),
        "{error:?}"
    );
    let error = RedisBackend::open("rediss://127.0.0.1:6379?ca=/etc/hostname")
        .await
        .expect_err("not a PEM certificate");
    assert!(
        error.to_string().contains("holds no PEM certificate"),
        "{error}"
    );
    let error = RedisBackend::open("rediss://127.0.0.1:6379?ca=/no/such/file")
        .await
        .expect_err("no such file");
    assert!(
        error.to_string().contains("cannot read /no/such/file"),
        "{error}"
    );
}
