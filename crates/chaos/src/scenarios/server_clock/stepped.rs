//! A server of R13's own, run under libfaketime with a timestamp file, so
//! that writing an offset into the file steps its wall clock at once, as
//! NTP's `makestep` would, and its monotonic clock is left alone.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use distlock::backend::Backend;
use tokio::runtime::Runtime;

use crate::campaign::Kind;
use crate::campaign::Server;
use crate::clock::now_ns;
use crate::outcome::Outcome;
use crate::scenarios::network::runtime;
use crate::settings::ADMIN_LIMIT;
use crate::worker::{open_patiently, wall_ms};

/// The backend's server under libfaketime, and a client that reads its
/// clock.
pub(super) struct SteppedServer {
    pub(super) server: Server,
    /// The file libfaketime reads the offset from, on every clock read.
    file: PathBuf,
    /// Keeps the file's directory for as long as the server runs.
    _dir: tempfile::TempDir,
    /// The offset the file holds now, in milliseconds.
    offset_ms: i64,
    runtime: Runtime,
    backend: Arc<dyn Backend>,
}

impl SteppedServer {
    /// Starts `kind`'s server with libfaketime (the thread-safe build
    /// beside `faketime`) preloaded and its clock at the right time, and
    /// checks that the library is loaded.
    ///
    /// # Errors
    /// The server does not start, does not load libfaketime, or cannot be
    /// reached within 30 s.
    pub(super) fn start(kind: Kind, faketime: &Path) -> Outcome<SteppedServer> {
        let dir = tempfile::Builder::new()
            .prefix("distlock-chaos-clock")
            .tempdir()?;
        // A server that runs as another user (PostgreSQL) must read it.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
        let file = dir.path().join("offset");
        write_offset(&file, 0)?;
        let env: Vec<(OsString, OsString)> = vec![
            ("LD_PRELOAD".into(), multithreaded(faketime)?.into()),
            ("FAKETIME_TIMESTAMP_FILE".into(), file.clone().into()),
            // Read the file on every clock read, so a step takes effect at
            // once, not at the end of a cache period.
            ("FAKETIME_NO_CACHE".into(), "1".into()),
            // An NTP step moves the wall clock only.
            ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
        ];
        let server = Server::start_with_env(kind, env)?;
        let pid = server.pid().ok_or("the server has no process")?;
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
        if !maps.contains("libfaketime") {
            return Err(format!(
                "the {} server (pid {pid}) has not loaded libfaketime, so its clock cannot be \
                 stepped",
                kind.name()
            )
            .into());
        }
        let runtime = runtime()?;
        let backend = runtime.block_on(open_patiently(&server.url()))?;
        Ok(SteppedServer {
            server,
            file,
            _dir: dir,
            offset_ms: 0,
            runtime,
            backend,
        })
    }

    /// Steps the server's wall clock by `by_ms` (back when negative), and
    /// returns when, on the machine's monotonic clock.
    ///
    /// # Errors
    /// The file cannot be written.
    pub(super) fn step(&mut self, by_ms: i64) -> Outcome<u64> {
        self.offset_ms += by_ms;
        write_offset(&self.file, self.offset_ms)?;
        Ok(now_ns())
    }

    /// How far the server's clock is ahead of this machine's, in
    /// milliseconds, as the backend reads it (`server_info`, as `distlock
    /// check` does).
    ///
    /// # Errors
    /// The server cannot be asked, or tells no clock.
    pub(super) fn clock_ahead_ms(&self) -> Outcome<i64> {
        let info = self
            .runtime
            .block_on(self.backend.server_info(ADMIN_LIMIT))
            .map_err(|error| format!("cannot read the server's clock: {error}"))?;
        let here = wall_ms(SystemTime::now());
        let clock = info
            .clock
            .ok_or("the backend reads no clock from its server, so a step cannot be checked")?;
        Ok(wall_ms(clock) - here)
    }
}

/// The thread-safe build of libfaketime beside `faketime`. The plain one
/// reads and parses the timestamp file into shared buffers, unguarded: a
/// many-threaded server (SecantusDB) then reads the real time now and
/// then instead of the offset, in 11 of 11,714 clock reads at +2 s over
/// 8 connections, where the thread-safe build strayed in none of 8,191.
/// A stray read in an extension sets an expiry two leases early, which is
/// not what a step does.
///
/// # Errors
/// It is not there.
fn multithreaded(faketime: &Path) -> Outcome<PathBuf> {
    let lib = faketime.with_file_name("libfaketimeMT.so.1");
    if !lib.is_file() {
        return Err(format!(
            "{} is not there: R13 needs libfaketime's thread-safe build beside {}",
            lib.display(),
            faketime.display()
        )
        .into());
    }
    Ok(lib)
}

/// Writes `offset_ms` where libfaketime reads it, whole: into a file of
/// its own first, then renamed over the old one, so that no clock read
/// finds it half written.
fn write_offset(file: &Path, offset_ms: i64) -> Outcome<()> {
    let next = file.with_extension("next");
    // libfaketime reads a signed offset in seconds, fractions allowed.
    std::fs::write(&next, format!("{:+.3}\n", offset_ms as f64 / 1000.0))?;
    std::fs::set_permissions(&next, std::fs::Permissions::from_mode(0o644))?;
    std::fs::rename(&next, file)?;
    Ok(())
}
