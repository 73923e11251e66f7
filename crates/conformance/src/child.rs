//! Cases run in a child process of the test binary with an environment
//! variable set, for settings a process reads once, such as
//! `DISTLOCK_PORTABLE`. Tests cannot set it in their own process: that
//! takes `unsafe`, which the workspace forbids.

use std::process::{Command, Stdio};

/// Whether the calling test runs its case in this process: it does when
/// `key` is set to `value` here. Otherwise this runs the test `case`,
/// expanded in the module `module` (as [`module_path!`] gives it), in a
/// child process of this test binary with `key=value`, fails if the test
/// fails there, and returns false.
///
/// The child's output goes to a file rather than a pipe, so that a process
/// the case leaves behind (a command that outlives a killed `distlock`, as
/// it may without Linux's parent-death signal) cannot keep this test
/// waiting for the end of its output.
///
/// # Panics
/// If the child cannot be run, or its test fails or was not found.
pub fn in_child_with_env(module: &str, case: &str, key: &str, value: &str) -> bool {
    if std::env::var_os(key).is_some_and(|set| set == value) {
        return true;
    }
    // libtest names a test by its path below the crate root.
    let test = match module.split_once("::") {
        Some((_, path)) => format!("{path}::{case}"),
        None => case.to_owned(),
    };
    let log = std::env::temp_dir().join(format!(
        "distlock-conformance-child-{:016x}.log",
        rand::random::<u64>()
    ));
    let file = std::fs::File::create(&log).expect("create the child's log");
    let status = Command::new(std::env::current_exe().expect("this test binary"))
        .args([test.as_str(), "--exact", "--nocapture", "--test-threads=1"])
        .env(key, value)
        .stdin(Stdio::null())
        .stdout(file.try_clone().expect("the child's log"))
        .stderr(file)
        .status()
        .expect("run the test in a child process");
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    // A name that matched no test would pass with nothing run.
    assert!(
        status.success() && output.contains("1 passed"),
        "{test} with {key}={value}: {status}\n{output}"
    );
    false
}
