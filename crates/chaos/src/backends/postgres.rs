//! PostgreSQL, on the campaign's own server, run as the `postgres` user
//! (it refuses root) on a data directory made with `initdb`.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::LockName;
use distlock::postgres::{PostgresBackend, PostgresConfig, WakeUps};

use super::{CampaignBackend, SecretCase, ServerCommand, closed_port};
use crate::Outcome;
use crate::servers::Server;

#[derive(Debug)]
pub(crate) struct Postgres;

pub(crate) const POSTGRES: Postgres = Postgres;

const USER: &str = "postgres";

/// The superuser's password on the campaign's own throw-away server.
const PASSWORD: &str = "distlock-chaos";

/// The default lock table, where R7 deletes records.
const TABLE: &str = "public.distlock_locks";

fn cluster(data: &Path) -> PathBuf {
    data.join("postgres")
}

fn sockets(data: &Path) -> PathBuf {
    data.join("postgres-sockets")
}

/// Runs `program` as the postgres user.
fn as_postgres(program: &Path, args: &[OsString]) -> Outcome<()> {
    let status = Command::new("setpriv")
        .args([
            &format!("--reuid={USER}"),
            &format!("--regid={USER}"),
            "--init-groups",
        ])
        .arg(program)
        .args(args)
        .stdout(std::process::Stdio::null())
        .status()?;
    if !status.success() {
        return Err(format!("{} failed: {status}", program.display()).into());
    }
    Ok(())
}

/// Makes the data directory with `initdb`: the superuser's password from
/// a file, scram-sha-256 over TCP, trust over the socket.
fn prepare(data: &Path) -> Outcome<()> {
    let server = std::env::var_os("DISTLOCK_POSTGRES_SERVER")
        .map(PathBuf::from)
        .ok_or("DISTLOCK_POSTGRES_SERVER is not set: run through scripts/test or scripts/chaos")?;
    let initdb = server.with_file_name("initdb");
    // The postgres user must pass through the campaign's temp dir.
    let status = Command::new("chmod").arg("o+x").arg(data).status()?;
    if !status.success() {
        return Err(format!("chmod o+x {} failed", data.display()).into());
    }
    std::fs::create_dir_all(sockets(data))?;
    // initdb takes an empty directory of the server's user, private to it.
    std::fs::create_dir_all(cluster(data))?;
    std::fs::set_permissions(cluster(data), std::fs::Permissions::from_mode(0o700))?;
    let password_file = data.join("postgres-password");
    std::fs::write(&password_file, PASSWORD)?;
    let status = Command::new("chown")
        .arg(format!("{USER}:{USER}"))
        .arg(sockets(data))
        .arg(cluster(data))
        .arg(&password_file)
        .status()?;
    if !status.success() {
        return Err("chown to the postgres user failed".into());
    }
    let mut args: Vec<OsString> = vec!["-D".into(), cluster(data).into()];
    args.push(format!("--pwfile={}", password_file.display()).into());
    args.extend(
        [
            "-U",
            USER,
            "-E",
            "UTF8",
            "--no-locale",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
        ]
        .map(OsString::from),
    );
    as_postgres(&initdb, &args)
}

/// The campaign kills the server's processes, never the machine: a commit
/// is in the kernel's page cache once acknowledged (`synchronous_commit`
/// stays on), so it survives without `fsync`, which would only slow every
/// commit and every restart's recovery.
fn args(port: u16, data: &Path) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["-D".into(), cluster(data).into()];
    args.push("-p".into());
    args.push(port.to_string().into());
    args.push("-k".into());
    args.push(sockets(data).into());
    for setting in [
        "listen_addresses=127.0.0.1",
        "max_connections=300",
        "fsync=off",
        "full_page_writes=off",
    ] {
        args.push("-c".into());
        args.push(setting.into());
    }
    args
}

#[async_trait::async_trait]
impl CampaignBackend for Postgres {
    fn name(&self) -> &'static str {
        "PostgreSQL"
    }

    fn server(&self) -> Option<ServerCommand> {
        Some(ServerCommand {
            binary_var: "DISTLOCK_POSTGRES_SERVER",
            args,
            prepare: Some(prepare),
            run_as: Some(USER),
        })
    }

    fn url(&self, _scratch: &Path, address: &str) -> String {
        format!("postgres://{USER}:{PASSWORD}@{address}/postgres")
    }

    fn key_space_url(&self, server: &Server, space: &str) -> Outcome<String> {
        Ok(format!("{}?table={space}", server.url()))
    }

    /// Expiry is judged on the server's clock to the microsecond.
    fn regrant_bound(&self, lease: Duration) -> Duration {
        lease
    }

    /// Once the backend's listening connection has been checked: its probe
    /// notification goes through the pool, and would otherwise be what
    /// takes the proxy's one shot.
    async fn open_quiet(&self, url: &str, _lease: Duration) -> Outcome<Arc<dyn distlock::Backend>> {
        let backend = PostgresBackend::open(url).await?;
        let started = Instant::now();
        while matches!(
            backend.wake_ups(),
            WakeUps::Starting | WakeUps::Reconnecting
        ) && started.elapsed() < Duration::from_secs(10)
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(Arc::new(backend))
    }

    async fn delete_record(&self, server: &Server, name: &LockName) -> Outcome<()> {
        use distlock::postgres::tokio_postgres::{NoTls, connect};
        let (client, connection) = connect(&server.url(), NoTls).await?;
        let connection = tokio::spawn(connection);
        client
            .execute(
                &format!("DELETE FROM {TABLE} WHERE name = $1"),
                &[&name.as_str().as_bytes()],
            )
            .await?;
        drop(client);
        let _ = connection.await;
        Ok(())
    }

    fn secret_cases(&self, server: &Server, canary: &str) -> Outcome<Vec<SecretCase>> {
        Ok(vec![
            SecretCase {
                label: "bad host (a closed port)",
                url: format!(
                    "postgres://alice:{canary}@127.0.0.1:{}/postgres",
                    closed_port()?
                ),
                note: "",
            },
            SecretCase {
                label: "bad credentials (no such user)",
                url: format!("postgres://alice:{canary}@{}/postgres", server.address()),
                note: "",
            },
            SecretCase {
                label: "a URL the driver refuses",
                url: format!("postgres://alice:{canary}@127.0.0.1:notaport/postgres"),
                note: "",
            },
        ])
    }

    fn parse_url(&self, url: &str) -> Option<(&'static str, Result<String, distlock::Error>)> {
        Some((
            "`PostgresConfig::parse`",
            PostgresConfig::parse(url).map(|config| format!("{config:?}")),
        ))
    }

    fn expiry_edges(&self) -> Result<(), &'static str> {
        Err(
            "memcached only; PostgreSQL judges leases on its own clock (`clock_timestamp()`), \
             never evicts a row, and keeps its rows across restarts (R6)",
        )
    }
}
