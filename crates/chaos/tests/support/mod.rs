//! Runs the campaign's binary as the tests do.

use std::process::{Command, ExitStatus};

/// The short form of `scenarios` on `backend`: how the binary exited, and
/// the report it wrote (empty if it wrote none).
pub(crate) fn short_form(backend: &str, scenarios: &[&str]) -> (ExitStatus, String) {
    let report = tempfile::NamedTempFile::new().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_distlock-chaos"));
    command.args(["--short", "--backend", backend]);
    for id in scenarios {
        command.args(["--scenario", id]);
    }
    let status = command
        .arg("--write")
        .arg(report.path())
        .status()
        .expect("run distlock-chaos");
    let written = std::fs::read_to_string(report.path()).unwrap_or_default();
    (status, written)
}
