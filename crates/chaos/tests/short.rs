//! The campaign's short form, as CI runs it: every scenario on every
//! backend, judged only on overlaps, lost updates and token order (never
//! on timings). The servers come from `scripts/test`; without them the
//! campaign fails, so a missing server never passes silently.

use std::process::Command;

fn short_form(backend: &str) {
    let report = tempfile::NamedTempFile::new().unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_distlock-chaos"))
        .args(["--short", "--backend", backend, "--write"])
        .arg(report.path())
        .status()
        .expect("run distlock-chaos");
    let written = std::fs::read_to_string(report.path()).unwrap_or_default();
    assert!(
        status.success(),
        "the short form on {backend} found a violation ({status}):\n{written}"
    );
    assert!(written.contains("| held |"), "{written}");
}

#[test]
fn the_short_form_holds_on_the_file_backend() {
    short_form("file");
}

#[test]
fn the_short_form_holds_on_mongodb() {
    short_form("mongodb");
}

#[test]
fn the_short_form_holds_on_memcached() {
    short_form("memcached");
}
