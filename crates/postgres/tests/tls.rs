//! TLS against a real server: each `sslmode`, a CA of our own through
//! `sslrootcert`, the checks that must fail (another CA, a host name the
//! certificate does not list, a server that offers no TLS), and that every
//! connection of a backend (pooled, listening, advisory) really is
//! encrypted. `scripts/test` starts the server with a throwaway CA and sets
//! `DISTLOCK_TEST_POSTGRES_URL`, `DISTLOCK_TEST_POSTGRES_CA` (that CA's
//! certificate) and `DISTLOCK_TEST_POSTGRES_PGBOUNCER_URL` (PgBouncer,
//! which offers no TLS).

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_core::{Error, LockClient, LockName, LockOptions};
use distlock_postgres::tokio_postgres::{self, NoTls, types::Type};
use distlock_postgres::{PostgresBackend, SslMode, WakeUps};

use support::{first_column, unique, with_options};

/// Long enough for any step of a test.
const PATIENCE: Duration = Duration::from_secs(30);

/// A CA that signed nothing the server has (its key was thrown away).
const UNRELATED_CA: &str = "-----BEGIN CERTIFICATE-----
MIIBsTCCAVegAwIBAgIUMpKH73PSQR0NinVviywxFKQuvTQwCgYIKoZIzj0EAwIw
JTEjMCEGA1UEAwwaZGlzdGxvY2sgdW5yZWxhdGVkIHRlc3QgQ0EwIBcNMjYxMTI2
MTM0NjE2WhgPMjEyNjExMDIxMzQ2MTZaMCUxIzAhBgNVBAMMGmRpc3Rsb2NrIHVu
cmVsYXRlZCB0ZXN0IENBMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEk7+9bE+y
9wrV8/t5wuK0A+2v46QpeaZIImDiXt928L81nyasXmtCe+wsofFufE12KSoCKorn
46IAa6WS5u6tPaNjMGEwHQYDVR0OBBYEFB0+pSkrcZwJ/KtEvL19pFALG5uJMB8G
A1UdIwQYMBaAFB0+pSkrcZwJ/KtEvL19pFALG5uJMA8GA1UdEwEB/wQFMAMBAf8w
DgYDVR0PAQH/BAQDAgEGMAoGCCqGSM49BAMCA0gAMEUCIQCznq8NmVb8ZMgkxBed
ox0MuwpWo+lfnshKVI9/rqXlwQIgAZlzXWxjKI7XtKsR0ks5i3X+bHQxqR+VwhSR
4xpZa8Y=
-----END CERTIFICATE-----
";

/// The server's URL. A missing one fails the test: a run without the
/// server must not pass as if it had one.
fn url() -> String {
    env("DISTLOCK_TEST_POSTGRES_URL")
}

/// The PEM certificate of the CA that signed the server's certificate.
fn ca() -> String {
    env("DISTLOCK_TEST_POSTGRES_CA")
}

fn pgbouncer_url() -> String {
    env("DISTLOCK_TEST_POSTGRES_PGBOUNCER_URL")
}

fn env(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!(
            "{var} is not set: run the tests with scripts/test, which starts PostgreSQL \
             with TLS"
        )
    })
}

/// `base` (the test server's URL, at 127.0.0.1) naming `host` instead,
/// while still connecting to 127.0.0.1: the certificate is checked
/// against `host`.
fn as_host(base: &str, host: &str) -> String {
    assert!(base.contains("@127.0.0.1:"), "{base}");
    with_options(
        &base.replacen("@127.0.0.1:", &format!("@{host}:"), 1),
        "hostaddr=127.0.0.1",
    )
}

/// The password of `url`, as written.
fn password_of(url: &str) -> String {
    let rest = url.split_once("://").expect("a URL").1;
    let info = rest.rsplit_once('@').expect("user information").0;
    info.split_once(':').expect("a password").1.to_owned()
}

fn client(backend: Arc<PostgresBackend>) -> LockClient {
    let options = LockOptions::builder()
        .lease(PATIENCE)
        .operation_timeout(Duration::from_secs(10))
        .label("tls-tests")
        .build()
        .expect("valid options");
    LockClient::new(backend, options)
}

/// Opens the backend at `url` and takes and releases a lock through it.
async fn lock_and_release(url: &str) -> Arc<PostgresBackend> {
    let backend = Arc::new(PostgresBackend::open(url).await.expect("open"));
    let locks = client(backend.clone());
    let name = LockName::new(unique("tls")).expect("a valid name");
    let guard = locks.acquire_with(&name, PATIENCE).await.expect("acquire");
    assert!(
        locks.try_acquire(&name).await.expect("try").is_none(),
        "a held lock was granted twice"
    );
    guard.release().await.expect("release");
    let again = locks.try_acquire(&name).await.expect("try again");
    again
        .expect("released, so free")
        .release()
        .await
        .expect("release");
    backend
}

/// Whether each open connection named `application_name` uses TLS, as
/// the server sees it.
async fn tls_of(application_name: &str) -> Vec<bool> {
    let (admin, connection) = tokio_postgres::connect(&url(), NoTls).await.expect("admin");
    tokio::spawn(connection);
    first_column(
        &admin,
        "SELECT s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
          WHERE a.application_name = $1",
        &[(&application_name, Type::TEXT)],
        "read pg_stat_ssl",
    )
    .await
}

/// Waits until the backend's listening connection is open and heard.
async fn until_listening(backend: &PostgresBackend) {
    let start = Instant::now();
    while backend.wake_ups() != WakeUps::Listening {
        assert!(
            start.elapsed() < PATIENCE,
            "still {:?} after {PATIENCE:?}",
            backend.wake_ups()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The error of opening `url`, which must fail.
async fn open_error(url: &str) -> Error {
    PostgresBackend::open(url)
        .await
        .expect_err("opening should fail")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_encrypts_without_a_ca() {
    let app = unique("require");
    let backend = lock_and_release(&with_options(
        &url(),
        &format!("sslmode=require&application_name={app}"),
    ))
    .await;
    assert_eq!(backend.config().ssl_mode(), SslMode::Require);
    let connections = tls_of(&app).await;
    assert!(!connections.is_empty());
    assert!(connections.iter().all(|&tls| tls), "{connections:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_ca_trusts_the_ca_in_sslrootcert() {
    let app = unique("verify_ca");
    let _open = lock_and_release(&with_options(
        &url(),
        &format!(
            "sslmode=verify-ca&sslrootcert={}&application_name={app}",
            ca()
        ),
    ))
    .await;
    let connections = tls_of(&app).await;
    assert!(!connections.is_empty());
    assert!(connections.iter().all(|&tls| tls), "{connections:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_checks_the_ca_and_the_host_name() {
    let full = format!("sslmode=verify-full&sslrootcert={}", ca());
    // The certificate lists 127.0.0.1 and localhost.
    lock_and_release(&with_options(&url(), &full)).await;
    lock_and_release(&with_options(&as_host(&url(), "localhost"), &full)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_refuses_a_host_name_the_certificate_does_not_list() {
    let server = url();
    let elsewhere = as_host(&server, "wrong-name.invalid");
    let error = open_error(&with_options(
        &elsewhere,
        &format!("sslmode=verify-full&sslrootcert={}", ca()),
    ))
    .await;
    assert!(matches!(error, Error::Backend { .. }), "{error:?}");
    let text = error.to_string();
    assert!(
        text.contains("wrong-name.invalid")
            && text.contains("not issued for the host name")
            && text.contains("verify-ca"),
        "{text}"
    );
    assert!(!text.contains(&password_of(&server)), "{text}");
    // verify-ca checks only the CA: the same URL connects.
    lock_and_release(&with_options(
        &elsewhere,
        &format!("sslmode=verify-ca&sslrootcert={}", ca()),
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_refuses_a_certificate_from_another_ca() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let unrelated = dir.path().join("unrelated-ca.pem");
    std::fs::write(&unrelated, UNRELATED_CA).expect("write the CA");
    let server = url();
    for mode in ["verify-full", "verify-ca", "require"] {
        let error = open_error(&with_options(
            &server,
            &format!("sslmode={mode}&sslrootcert={}", unrelated.display()),
        ))
        .await;
        assert!(matches!(error, Error::Backend { .. }), "{mode}: {error:?}");
        let text = error.to_string();
        assert!(
            text.contains("UnknownIssuer") && text.contains("point sslrootcert at"),
            "{mode}: {text}"
        );
        assert!(!text.contains(&password_of(&server)), "{text}");
    }
    // Without sslrootcert, verify-full trusts the public CAs only.
    let error = open_error(&with_options(&server, "sslmode=verify-full")).await;
    assert!(error.to_string().contains("UnknownIssuer"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_connection_of_a_backend_is_encrypted() {
    let full = format!("sslmode=verify-full&sslrootcert={}", ca());
    for mode in ["lease", "advisory"] {
        let app = unique(mode);
        let backend = Arc::new(
            PostgresBackend::open(&with_options(
                &url(),
                &format!(
                    "{full}&mode={mode}&table={}&application_name={app}",
                    unique("tls")
                ),
            ))
            .await
            .expect("open"),
        );
        until_listening(&backend).await;
        let locks = client(backend.clone());
        let name = LockName::new(unique("held")).expect("a valid name");
        let guard = locks.acquire_with(&name, PATIENCE).await.expect("acquire");
        // The pool's connection, the listening one, and in advisory mode
        // the grant's own session.
        let connections = tls_of(&app).await;
        let expected = if mode == "advisory" { 3 } else { 2 };
        assert!(connections.len() >= expected, "{mode}: {connections:?}");
        assert!(
            connections.iter().all(|&tls| tls),
            "{mode}: {connections:?}"
        );
        guard.release().await.expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefer_uses_tls_when_offered_and_disable_never_does() {
    let app = unique("prefer");
    let backend = lock_and_release(&with_options(&url(), &format!("application_name={app}"))).await;
    assert_eq!(backend.config().ssl_mode(), SslMode::Prefer);
    let connections = tls_of(&app).await;
    assert!(!connections.is_empty());
    assert!(connections.iter().all(|&tls| tls), "{connections:?}");

    let app = unique("disable");
    let backend = lock_and_release(&with_options(
        &url(),
        &format!("sslmode=disable&sslrootcert=/no/such/ca.pem&application_name={app}"),
    ))
    .await;
    until_listening(&backend).await;
    let connections = tls_of(&app).await;
    assert!(connections.len() >= 2, "{connections:?}");
    assert!(connections.iter().all(|&tls| !tls), "{connections:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_refuses_a_server_without_tls() {
    // PgBouncer here offers no TLS to its clients.
    let error = open_error(&with_options(&pgbouncer_url(), "sslmode=require")).await;
    assert!(matches!(error, Error::Backend { .. }), "{error:?}");
    let text = error.to_string();
    assert!(
        text.contains("does not offer TLS") && text.contains("sslmode=prefer"),
        "{text}"
    );
    // prefer falls back to plain TCP there.
    lock_and_release(&with_options(
        &pgbouncer_url(),
        &format!("table={}", unique("plain")),
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listening_connection_takes_the_main_urls_tls_unless_it_has_its_own() {
    let server = url();
    let listen = format!(
        "{server}?application_name=listen_{:016x}",
        rand::random::<u64>()
    );
    let app = listen.rsplit_once('=').expect("a name").1.to_owned();
    let encode = |url: &str| {
        url.replace('%', "%25")
            .replace(':', "%3A")
            .replace('/', "%2F")
            .replace('@', "%40")
            .replace('?', "%3F")
            .replace('&', "%26")
            .replace('=', "%3D")
    };
    // Inherited: verify-full with the CA.
    let backend = lock_and_release(&with_options(
        &server,
        &format!(
            "sslmode=verify-full&sslrootcert={}&listen_url={}",
            ca(),
            encode(&listen)
        ),
    ))
    .await;
    until_listening(&backend).await;
    assert_eq!(tls_of(&app).await, [true]);
    drop(backend);

    // Its own: disable.
    let own = with_options(&listen, "sslmode=disable");
    let backend = lock_and_release(&with_options(
        &server,
        &format!(
            "sslmode=verify-full&sslrootcert={}&listen_url={}",
            ca(),
            encode(&own)
        ),
    ))
    .await;
    until_listening(&backend).await;
    let start = Instant::now();
    // The first backend's listening connection may still be closing.
    while tls_of(&app).await != [false] {
        assert!(start.elapsed() < PATIENCE, "{:?}", tls_of(&app).await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A bad sslrootcert of its own is refused by name.
    let bad = with_options(&listen, "sslmode=verify-ca&sslrootcert=/no/such/ca.pem");
    let error = open_error(&with_options(
        &server,
        &format!("listen_url={}", encode(&bad)),
    ))
    .await;
    let text = error.to_string();
    assert!(
        matches!(error, Error::InvalidConfig { .. })
            && text.contains("listen_url")
            && text.contains("sslrootcert"),
        "{text}"
    );
}

#[tokio::test]
async fn bad_tls_options_are_clear_errors() {
    let server = url();
    let dir = tempfile::tempdir().expect("a temp dir");
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "not a certificate\n").expect("write");
    let not_pem = not_pem.display().to_string();
    let cases = [
        ("sslmode=verify_full", "sslmode", "verify-full"),
        ("sslmode=allow", "sslmode", "prefer"),
        ("sslmode=verify-ca", "sslrootcert", "sslrootcert=PATH"),
        (
            "sslmode=require&sslrootcert=system",
            "sslmode",
            "verify-full",
        ),
        (
            "sslmode=verify-full&sslrootcert=/no/such/ca.pem",
            "sslrootcert",
            "cannot read /no/such/ca.pem",
        ),
        (
            &format!("sslmode=verify-ca&sslrootcert={not_pem}"),
            "sslrootcert",
            "holds no certificate",
        ),
    ];
    for (options, field, expected) in cases {
        let error = open_error(&with_options(&server, options)).await;
        let Error::InvalidConfig {
            field: at_fault,
            reason,
        } = &error
        else {
            panic!("{options}: {error:?}");
        };
        assert_eq!(at_fault, field, "{options}: {error}");
        assert!(reason.contains(expected), "{options}: {reason}");
        assert!(
            !error.to_string().contains(&password_of(&server)),
            "{error}"
        );
    }
}
