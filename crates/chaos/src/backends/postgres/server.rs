//! The campaign's own PostgreSQL server, which both modes use: run as the
//! `postgres` user (it refuses root) on a data directory made with
//! `initdb`.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::outcome::Outcome;
use crate::servers::ServerCommand;

/// The superuser, whom lock clients connect as.
const USER: &str = "postgres";

/// The superuser's password on the campaign's own throw-away server.
const PASSWORD: &str = "distlock-chaos";

/// How the server starts.
pub(super) fn command() -> ServerCommand {
    ServerCommand {
        binary_var: "DISTLOCK_POSTGRES_SERVER",
        args,
        prepare: Some(prepare),
        run_as: Some(USER),
    }
}

/// The database's URL at `address` (the server's, or a fault proxy's),
/// as the superuser.
pub(super) fn url(address: &str) -> String {
    format!("postgres://{USER}:{PASSWORD}@{address}/postgres")
}

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
