//! Bad input, help, `list`, `release` and `demo`, with real processes.

mod common;

use common::{Running, Scratch, distlock, one_line_failure, run_sh, unique, wait_until};

#[test]
fn bad_input_is_one_clear_line_and_exit_2() {
    let scratch = Scratch::new();
    let cases: &[(&[&str], &str)] = &[
        (&["run", "x"], "give the command to run"),
        (&["run", "x", "--wait", "1s"], "give the command to run"),
        (&["run", "x", "-E", "256", "--", "true"], "256"),
        (&["run", "x", "--wait", "soon", "--", "true"], "duration"),
        (
            &["run", "x", "--lease", "5 parsecs", "--", "true"],
            "duration",
        ),
        (&["run", "x", "-w", "5x", "--", "true"], "duration"),
        (
            &["run", "x", "--backend", "gopher://h/x", "--", "true"],
            "unknown scheme `gopher`",
        ),
        (&["list", "--backend", "no-scheme"], "no scheme"),
        (&["run", "", "--", "true"], "must not be empty"),
        (&["release", "x"], "--force"),
        (
            &["run", "x", "--no-wait", "--wait", "1s", "--", "true"],
            "cannot be used with",
        ),
        (
            &["run", "x", "-n", "-w", "1", "--", "true"],
            "cannot be used with",
        ),
        (&["run", "x", "--permits", "0", "--", "true"], "1..=1000"),
        (&["run", "x", "--permits", "1001", "--", "true"], "1..=1000"),
        (
            &["run", "x", "--shared", "--permits", "2", "--", "true"],
            "cannot be used with",
        ),
    ];
    for (args, expected) in cases {
        let output = distlock(args).output().unwrap();
        let line = one_line_failure(&output, 2);
        assert!(line.contains(expected), "{args:?}: {line}");
    }
    // Options that make no sense for the backend are bad input too.
    let output = scratch
        .distlock(&["run", "x", "--lease", "1ms", "--", "true"])
        .output()
        .unwrap();
    let line = one_line_failure(&output, 2);
    assert!(line.contains("lease"), "{line}");
}

#[test]
fn a_kind_or_limit_that_conflicts_with_the_holders_is_bad_input() {
    let scratch = Scratch::new();
    let name = unique("semaphore");
    let ready = scratch.file("ready");
    let script = format!("touch '{}'; exec sleep 1000", ready.display());
    let _holder = Running::spawn(run_sh(&scratch, &name, &["--permits", "2"], &script));
    wait_until("the permit holder's command started", || ready.exists());
    for (options, expected) in [
        (&[][..], "an exclusive lock"),
        (&["--shared"][..], "a shared (reader) lock"),
        (&["--permits", "3"][..], "a semaphore of 3 permits"),
    ] {
        let output = run_sh(&scratch, &name, options, "true").output().unwrap();
        let line = one_line_failure(&output, 2);
        assert!(
            line.contains("held as a semaphore of 2 permits") && line.contains(expected),
            "{options:?}: {line}"
        );
    }
}

#[test]
fn credentials_are_never_printed() {
    for (url, code) in [
        ("ftp://user:hunter2@h/", 2),
        // A host that cannot be reached: worth trying again later.
        ("mongodb://user:hunter2@h:27017/db", 69),
        // A mistyped scheme, a password with an unencoded `/`, and a
        // secret among the options, each refused at once.
        ("mongodb//user:hunter2@h/db", 2),
        ("mongodb://user:hunt/hunter2@h/db", 2),
        (
            "mongodb://h/db?tls=maybe&tlsCertificateKeyFilePassword=hunter2",
            2,
        ),
    ] {
        let output = distlock(&["list", "--backend", url]).output().unwrap();
        let line = one_line_failure(&output, code);
        assert!(!line.contains("hunter2"), "{line}");
        assert!(!String::from_utf8_lossy(&output.stdout).contains("hunter2"));
        // Also when the URL comes from the environment.
        let output = distlock(&["list"])
            .env("DISTLOCK_URL", url)
            .output()
            .unwrap();
        let line = one_line_failure(&output, code);
        assert!(!line.contains("hunter2"), "{line}");
    }
    let output = distlock(&["run", "--help"])
        .env("DISTLOCK_URL", "ftp://user:hunter2@h/")
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&output.stdout).contains("hunter2"));
}

#[test]
fn help_documents_the_exit_codes() {
    for args in [&["--help"][..], &["run", "--help"]] {
        let output = distlock(args).output().unwrap();
        assert!(output.status.success());
        let help = String::from_utf8(output.stdout).unwrap();
        for code in ["2", "69", "75", "76", "126", "127", "128+N"] {
            assert!(help.contains(code), "{args:?} lacks {code}: {help}");
        }
    }
}

#[test]
fn list_shows_the_holder_and_json_parses() {
    let scratch = Scratch::new();
    let name = unique("listed");
    let odd = format!("{name}\nforged line");
    let ready = scratch.file("ready");
    let script = format!("touch '{}'; exec sleep 1000", ready.display());
    let holder = Running::spawn(run_sh(&scratch, &name, &[], &script));
    wait_until("the holder's command started", || ready.exists());
    let ready_odd = scratch.file("ready-odd");
    let script = format!("touch '{}'; exec sleep 1000", ready_odd.display());
    let odd_holder = Running::spawn(run_sh(&scratch, &odd, &[], &script));
    wait_until("the second holder's command started", || ready_odd.exists());

    let output = scratch.distlock(&["list"]).output().unwrap();
    assert!(output.status.success());
    let table = String::from_utf8(output.stdout).unwrap();
    let row = table
        .lines()
        .find(|line| line.starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no row for {name}: {table}"));
    assert!(row.contains(&format!("pid {}", holder.pid())), "{row}");
    assert!(row.contains("until the holder exits"), "{row}");
    assert!(table.contains(&format!("{name}\\nforged line")), "{table}");
    assert!(
        !table.lines().any(|line| line.starts_with("forged line")),
        "{table}"
    );

    let output = scratch.distlock(&["list", "--json"]).output().unwrap();
    assert!(output.status.success());
    let locks: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let locks = locks.as_array().expect("an array");
    assert_eq!(locks.len(), 2, "{locks:?}");
    let ours = locks
        .iter()
        .find(|lock| lock["name"] == name.as_str())
        .expect("our lock");
    assert_eq!(ours["holder"]["pid"], u64::from(holder.pid()));
    assert!(ours["holder"]["host"].is_string());
    assert!(ours["fencing_token"].as_u64().unwrap() > 0);
    assert!(ours["expires_in_ms"].is_null());
    // flock(2) keeps no list of who waits: unknown, not "nobody".
    assert!(ours["waiters"].is_null(), "{ours}");
    assert_eq!(ours["kind"], "exclusive");
    assert!(ours["permits"].is_null());
    let odd_listed = locks.iter().find(|lock| lock["name"] == odd.as_str());
    assert_eq!(
        odd_listed.expect("the odd name, exact")["holder"]["pid"],
        u64::from(odd_holder.pid())
    );
}

#[test]
fn release_force_says_whether_the_lock_was_held() {
    let scratch = Scratch::new();
    let output = scratch
        .distlock(&["release", "--force", &unique("free")])
        .output()
        .unwrap();
    assert!(output.status.success());
    assert!(
        String::from_utf8(output.stdout)
            .unwrap()
            .contains("was not held")
    );
}

#[test]
fn demo_on_the_file_backend_passes_its_checks() {
    let scratch = Scratch::new();
    let output = scratch
        .distlock(&["demo", "--workers", "3", "--duration", "1s"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("overlaps      0 "), "{stdout}");
    assert!(stdout.contains("every token increased"), "{stdout}");
    assert!(stdout.contains("equals the acquisitions"), "{stdout}");
    assert!(stdout.contains("result        ok"), "{stdout}");
}

#[test]
fn demo_refuses_a_backend_local_to_one_process() {
    let output = distlock(&["demo", "--backend", "memory://"])
        .output()
        .unwrap();
    let line = one_line_failure(&output, 2);
    assert!(line.contains("inside one process"), "{line}");
}

/// Completions and manual pages come from the command's own definition,
/// so they name every subcommand and option there is.
#[test]
fn completions_and_manual_pages_are_produced() {
    for (shell, marker) in [
        ("bash", "_distlock()"),
        ("zsh", "#compdef distlock"),
        ("fish", "complete -c distlock"),
    ] {
        let output = distlock(&["completions", shell]).output().unwrap();
        assert!(output.status.success(), "{shell}: {output:?}");
        let script = String::from_utf8(output.stdout).unwrap();
        assert!(script.contains(marker), "{shell}: {script}");
        for word in ["run", "list", "release", "conflict-exit-code"] {
            assert!(script.contains(word), "{shell} lacks {word}");
        }
        assert!(!script.contains("__exec"), "{shell} shows a hidden command");
    }
    one_line_failure(&distlock(&["completions", "tcsh"]).output().unwrap(), 2);

    let page = distlock(&["man"]).output().unwrap();
    assert!(page.status.success());
    let page = String::from_utf8(page.stdout).unwrap();
    assert!(
        page.starts_with(".ie") || page.contains(".TH distlock 1"),
        "{page}"
    );
    assert!(
        page.contains(".TH distlock 1") && page.contains("release"),
        "{page}"
    );
    let run = distlock(&["man", "run"]).output().unwrap();
    assert!(run.status.success());
    let run = String::from_utf8(run.stdout).unwrap();
    assert!(run.contains(".TH distlock-run 1"), "{run}");
    assert!(run.contains("conflict\\-exit\\-code"), "{run}");
    let line = one_line_failure(&distlock(&["man", "bogus"]).output().unwrap(), 2);
    assert!(line.contains("run, list"), "{line}");
}
