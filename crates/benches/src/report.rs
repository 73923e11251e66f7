//! The Markdown report: the machine, the versions, the exact command, and
//! one table per scenario with every backend side by side.

use std::fmt::Write;
use std::time::Duration;

use crate::scenarios::{HoldMany, Uncontended};
use crate::timeline::Contention;

/// Everything measured in one run.
#[derive(Debug)]
pub(crate) struct Run {
    command: String,
    pub(crate) backends: Vec<BackendResults>,
}

/// One backend's results.
#[derive(Debug)]
pub(crate) struct BackendResults {
    pub(crate) url: String,
    pub(crate) uncontended: Uncontended,
    pub(crate) contended: Contention,
    pub(crate) many: HoldMany,
}

impl Run {
    pub(crate) fn new(command: String) -> Self {
        Self {
            command,
            backends: Vec::new(),
        }
    }

    pub(crate) fn to_markdown(&self, processes: u32, tasks: u32) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# Benchmarks\n");
        let _ = writeln!(
            out,
            "Written by `distlock-bench`; rerun with `bash scripts/bench`.\n"
        );
        let _ = writeln!(out, "- Machine: {}", machine());
        let _ = writeln!(
            out,
            "- Versions: distlock {}, {}",
            env!("CARGO_PKG_VERSION"),
            rustc()
        );
        let _ = writeln!(out, "- Command: `{}`\n", self.command);

        let _ = writeln!(out, "## Uncontended acquire and release on one name\n");
        let _ = writeln!(
            out,
            "| backend | client cycles/s | raw backend calls cycles/s | ratio |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|");
        for b in &self.backends {
            let u = &b.uncontended;
            let _ = writeln!(
                out,
                "| {} | {:.0} | {:.0} | {:.2} |",
                b.url,
                u.client_cycles_per_second,
                u.raw_cycles_per_second,
                u.client_cycles_per_second / u.raw_cycles_per_second
            );
        }
        let _ = writeln!(
            out,
            "\n## Contention: {tasks} tasks in each of {processes} processes on one name\n"
        );
        let _ = writeln!(
            out,
            "| backend | acquisitions | per second | hand-off p50 | hand-off p99 | overlaps |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|");
        for b in &self.backends {
            let c = &b.contended;
            let _ = writeln!(
                out,
                "| {} | {} | {:.0} | {} | {} | {} |",
                b.url,
                c.acquisitions,
                c.per_second,
                short(c.hand_off_p50),
                short(c.hand_off_p99),
                c.overlaps
            );
        }
        let _ = writeln!(out, "\n## Many locks held by one process\n");
        let _ = writeln!(
            out,
            "| backend | locks | taken in | held for | extension calls/s | leases extended/s | lost | CPU while held | RSS growth |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for b in &self.backends {
            let m = &b.many;
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {:.2} | {:.0} | {} | {} | {} KiB |",
                b.url,
                m.locks,
                short(m.acquire_time),
                short(m.held_for),
                m.extend_calls_per_second,
                m.extended_leases_per_second,
                m.lost,
                short(m.cpu),
                m.rss_growth_kib
            );
        }
        out
    }
}

fn short(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{:.2} s", d.as_secs_f64())
    } else if d >= Duration::from_millis(1) {
        format!("{:.2} ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{:.0} µs", d.as_secs_f64() * 1e6)
    }
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("model name"))
                .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            let kib: u64 = info
                .lines()
                .next()?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some(format!("{:.0} GiB", kib as f64 / 1024.0 / 1024.0))
        })
        .unwrap_or_default();
    format!("{cores} cores ({cpu}), {memory}")
}

fn rustc() -> String {
    std::process::Command::new("rustc")
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map_or_else(|| "rustc (unknown)".into(), |v| v.trim().to_owned())
}
