//! A server restart while a lock is held: in lease mode the lock is a row,
//! so it outlives the restart, and the holder keeps it if extension
//! resumes within the lease; in advisory mode the lock ends with its
//! session, and the holder hears it at once. And a crash that loses the
//! commits advisory mode made without waiting for the disk: tokens still
//! keep growing. Each test starts a server of its own, since
//! restarting the shared one would disturb the tests that run beside it.
//! It needs `DISTLOCK_POSTGRES_BIN` (the directory of `initdb`, `pg_ctl`
//! and `psql`, which `scripts/test` sets) and root, to run them as the
//! `postgres` user.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_core::backend::Backend;
use distlock_core::testing::ADMIN_LIMIT;
use distlock_core::{LockClient, LockName, LockOptions, LossReason, TryOptions};
use distlock_postgres::tokio_postgres::{self, NoTls};
use distlock_postgres::{PostgresBackend, WakeUps};

/// A PostgreSQL server of this test's own, stopped and removed when
/// dropped, whichever way the test ends.
struct OwnServer {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    password: String,
    /// The server's settings beyond its port and sockets, as `-c` options.
    settings: &'static str,
}

/// The test suite's fast settings: nothing waits for the disk.
const FAST: &str = "-c fsync=off";

/// PostgreSQL's durable defaults (fsync, synchronous commits, full page
/// writes), with the WAL writer as slow as the server allows (10 s): a
/// commit that does not wait for the flush stays in the server's memory,
/// where a crash loses it, for up to three times that.
const DURABLE_SLOW_WAL_WRITER: &str = "-c wal_writer_delay=10000";

impl OwnServer {
    /// Makes a database cluster in a fresh directory and starts it on a
    /// free port with `settings`, with a password-authenticated role
    /// `distlock` that owns a database `distlock`, as
    /// `scripts/servers/postgres.sh` does.
    fn start(settings: &'static str) -> Self {
        let bin = PathBuf::from(std::env::var("DISTLOCK_POSTGRES_BIN").unwrap_or_else(|_| {
            panic!(
                "DISTLOCK_POSTGRES_BIN is not set: run the tests with scripts/test, \
                 which names PostgreSQL's bin directory"
            )
        }));
        // The postgres user must reach it: the system's temporary
        // directory lets everyone through.
        let dir =
            std::env::temp_dir().join(format!("distlock-restart-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(dir.join("sock")).expect("the server's directory");
        let server = Self {
            bin,
            port: free_port(),
            password: format!("{:032x}", rand::random::<u128>()),
            dir,
            settings,
        };
        run(Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&server.dir));
        run(Command::new("chmod").arg("700").arg(&server.dir));
        server.as_postgres(
            "initdb",
            &[
                "-D",
                &server.data(),
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-locale",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
            ],
        );
        server.pg_ctl(&["start"]);
        // The password is hex, so it needs no quoting inside the SQL string.
        let sock = server.dir.join("sock");
        server.as_postgres(
            "psql",
            &[
                "-q",
                "-X",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                &sock.to_string_lossy(),
                "-p",
                &server.port.to_string(),
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-c",
                &format!("CREATE ROLE distlock LOGIN PASSWORD '{}'", server.password),
                "-c",
                "CREATE DATABASE distlock OWNER distlock",
            ],
        );
        server
    }

    fn url(&self) -> String {
        format!(
            "postgres://distlock:{}@127.0.0.1:{}/distlock",
            self.password, self.port
        )
    }

    fn data(&self) -> String {
        self.dir.join("data").to_string_lossy().into_owned()
    }

    /// Runs `pg_ctl` on this server; `start` and `restart` get its options.
    fn pg_ctl(&self, action: &[&str]) {
        let log = self.dir.join("postgres.log").to_string_lossy().into_owned();
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 {}",
            self.port,
            self.dir.join("sock").to_string_lossy(),
            self.settings
        );
        let data = self.data();
        let mut args = vec!["-D", &data, "-l", &log, "-w", "-t", "60"];
        args.extend(action);
        args.extend(["-o", &options]);
        self.as_postgres("pg_ctl", &args);
    }

    /// Restarts the server at once, as a crash and recovery would: every
    /// connection is cut, and nothing is checkpointed first.
    fn restart_immediately(&self) {
        self.pg_ctl(&["-m", "immediate", "restart"]);
    }

    fn as_postgres(&self, program: &str, args: &[&str]) {
        run(Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join(program))
            .args(args));
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        let stopped = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .args(["-D", &self.data(), "-m", "immediate", "-w", "stop"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !stopped.is_ok_and(|status| status.success()) {
            eprintln!("could not stop the server in {}", self.dir.display());
        }
        if let Err(error) = std::fs::remove_dir_all(&self.dir) {
            eprintln!("could not remove {}: {error}", self.dir.display());
        }
    }
}

/// Runs `command`, failing the test with its output if it fails.
fn run(command: &mut Command) {
    let out = command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|error| panic!("{command:?}: {error}"));
    assert!(
        out.status.success(),
        "{command:?} failed: {}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

fn log_tail(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("postgres.log")).unwrap_or_default()
}

fn name(text: &str) -> LockName {
    LockName::new(text).expect("a valid name")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lock_held_across_a_server_restart_is_kept_and_tokens_keep_growing() {
    let server = OwnServer::start(FAST);
    let lease = Duration::from_secs(10);
    let options = LockOptions::builder()
        .lease(lease)
        .extend_every(Duration::from_secs(1))
        .safety_margin(Duration::from_secs(1))
        .operation_timeout(Duration::from_secs(2))
        .build()
        .expect("valid options");
    let holding = Arc::new(PostgresBackend::open(&server.url()).await.expect("open"));
    let other = Arc::new(PostgresBackend::open(&server.url()).await.expect("open"));
    let holder = LockClient::new(holding.clone(), options.clone());
    let rival = LockClient::new(other.clone(), options);
    let lock = name(&format!("restart-{:016x}", rand::random::<u64>()));
    let guard = holder.acquire_with(&lock, lease).await.expect("acquire");
    let token = guard.fencing_token();
    assert!(rival.try_acquire(&lock).await.expect("try").is_none());

    let (witness, connection) = tokio_postgres::connect(&server.url(), NoTls)
        .await
        .expect("a connection from before");
    tokio::spawn(connection);

    let restarted = Instant::now();
    tokio::task::block_in_place(|| server.restart_immediately());
    eprintln!("restarted in {:?}", restarted.elapsed());
    // The restart cut every connection.
    assert!(witness.simple_query("SELECT 1").await.is_err());

    // The rival's first statements may meet connections the restart cut;
    // once one is answered, the lock is still held.
    let deadline = Instant::now() + lease;
    loop {
        match rival.try_acquire(&lock).await {
            Ok(None) => break,
            Ok(Some(_)) => panic!("the lock was free after the restart"),
            Err(error) => {
                assert!(error.is_transient(), "{error:?}");
                assert!(
                    Instant::now() < deadline,
                    "no answer after the restart: {error}\n{}",
                    log_tail(&server.dir)
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    // A lease after the restart: had extension not resumed, the guard
    // would have given the lock up by now.
    tokio::time::sleep(lease).await;
    assert!(!guard.is_lost(), "the guard lost the lock");
    assert!(rival.try_acquire(&lock).await.expect("try").is_none());
    let listed = other.list(ADMIN_LIMIT).await.expect("list");
    let ours = listed
        .iter()
        .find(|info| info.name == lock)
        .expect("the lock is listed");
    assert_eq!(ours.fencing_token, Some(token));
    // Extended within the last two seconds.
    assert!(
        ours.expires_in.expect("an expiry") > lease - Duration::from_secs(3),
        "{ours:?}"
    );
    // The listening connection came back too.
    let started = Instant::now();
    while holding.wake_ups() != WakeUps::Listening {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "wake-ups still {:?}",
            holding.wake_ups()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Tokens keep growing across the restart, whoever takes the lock.
    assert!(guard.release().await.expect("release"));
    let mut last = token;
    for client in [&rival, &holder, &rival] {
        let next = client.acquire_with(&lock, lease).await.expect("acquire");
        assert!(
            next.fencing_token() > last,
            "{} after {last}",
            next.fencing_token()
        );
        last = next.fencing_token();
        assert!(next.release().await.expect("release"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_advisory_lock_ends_with_a_server_restart_and_its_holder_hears_it_at_once() {
    let server = OwnServer::start(FAST);
    let url = format!("{}?mode=advisory", server.url());
    let lease = Duration::from_secs(30);
    let options = LockOptions::builder()
        .lease(lease)
        .build()
        .expect("valid options");
    let holder = LockClient::new(
        Arc::new(PostgresBackend::open(&url).await.expect("open")),
        options.clone(),
    );
    let rival = LockClient::new(
        Arc::new(PostgresBackend::open(&url).await.expect("open")),
        options,
    );
    let lock = name(&format!("restart-{:016x}", rand::random::<u64>()));
    let guard = holder.acquire_with(&lock, lease).await.expect("acquire");
    let token = guard.fencing_token();

    let restarted = Instant::now();
    tokio::task::block_in_place(|| server.restart_immediately());
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost() fires long before the lease ends");
    assert_eq!(reason, LossReason::Detected);
    eprintln!("lost() {:?} after the restart began", restarted.elapsed());
    assert!(!guard.release().await.expect("release"));

    // The restart freed the lock; tokens keep growing.
    let next = rival
        .acquire_with(&lock, Duration::from_secs(20))
        .await
        .expect("free after the restart");
    assert!(next.fencing_token() > token);
    assert!(next.release().await.expect("release"));
}

/// Takes `lock` with `options` and releases it, checking that its token
/// is above `highest`; answers the token.
async fn take_once(client: &LockClient, lock: &LockName, options: TryOptions, highest: u64) -> u64 {
    let guard = client
        .try_acquire_with(lock, options)
        .await
        .expect("try")
        .expect("the name is free to take");
    let token = guard.fencing_token();
    assert!(token > highest, "{token} after {highest}");
    assert!(guard.release().await.expect("release"));
    token
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn advisory_tokens_keep_growing_across_a_crash_that_loses_recent_commits() {
    let server = OwnServer::start(DURABLE_SLOW_WAL_WRITER);
    let url = format!("{}?mode=advisory", server.url());
    let options = LockOptions::builder()
        .lease(Duration::from_secs(30))
        .build()
        .expect("valid options");
    let client = |backend: &Arc<PostgresBackend>| LockClient::new(backend.clone(), options.clone());
    let taking = client(&Arc::new(PostgresBackend::open(&url).await.expect("open")));
    let staying = client(&Arc::new(PostgresBackend::open(&url).await.expect("open")));
    let lock = name(&format!("crash-{:016x}", rand::random::<u64>()));
    let mut highest = 0;
    // Each exclusive grant makes the name's row anew: its release deletes it.
    for _ in 0..100 {
        highest = take_once(&taking, &lock, TryOptions::new(), highest).await;
    }
    // While a reader stays, each reader's grant bumps the same row.
    let reader = staying
        .try_acquire_with(&lock, TryOptions::new().shared())
        .await
        .expect("try")
        .expect("free to read");
    for _ in 0..100 {
        highest = take_once(&taking, &lock, TryOptions::new().shared(), highest).await;
    }

    tokio::task::block_in_place(|| server.restart_immediately());
    let reason = tokio::time::timeout(Duration::from_secs(5), reader.lost())
        .await
        .expect("the crash ended the reader's session");
    assert_eq!(reason, LossReason::Detected);

    // What the crash kept of the name's row: a token below the highest
    // handed out means commits were lost, as they may be.
    let (db, connection) = tokio_postgres::connect(&server.url(), NoTls)
        .await
        .expect("a connection after the restart");
    tokio::spawn(connection);
    let kept: Option<i64> = db
        .query_opt(
            "SELECT fencing_token FROM distlock_advisory WHERE name = $1",
            &[&lock.as_str().as_bytes()],
        )
        .await
        .expect("the row's token")
        .map(|row| row.get(0));
    eprintln!("highest token handed out {highest}, kept through the crash {kept:?}");

    let next = taking
        .acquire_with(&lock, Duration::from_secs(20))
        .await
        .expect("free after the crash");
    assert!(
        next.fencing_token() > highest,
        "{} after the crash, {highest} before it",
        next.fencing_token()
    );
    assert!(next.release().await.expect("release"));
}
