//! Small pieces of the report's Markdown, shared by its sections.

use std::fmt::Write;
use std::time::Duration;

use crate::commands::Counts;

/// A goal and whether this run met it.
pub(crate) fn goal(met: bool, text: String) -> String {
    format!("**{}** — {text}", if met { "Met" } else { "Not met" })
}

/// A goal this run could not judge, and why.
pub(crate) fn unjudged(text: String) -> String {
    format!("**Not judged** — {text}")
}

/// The findings of a section, one paragraph each.
pub(crate) fn findings_list(out: &mut String, text: &[String]) {
    if text.is_empty() {
        return;
    }
    let _ = writeln!(out, "What this shows:\n");
    for t in text {
        let _ = writeln!(out, "{t}\n");
    }
}

/// The goals of a section (see [`goal`]), as a list.
pub(crate) fn goals_list(out: &mut String, goals: &[String]) {
    if goals.is_empty() {
        return;
    }
    let _ = writeln!(out, "Goals, checked against this run:\n");
    for g in goals {
        let _ = writeln!(out, "- {g}");
    }
    let _ = writeln!(out);
}

/// A number with two decimals, or a dash where there is none.
pub(crate) fn opt(value: Option<f64>) -> String {
    value.map_or("—".into(), |v| format!("{v:.2}"))
}

/// A duration in the unit that suits it: s, ms or µs.
pub(crate) fn short(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{:.2} s", d.as_secs_f64())
    } else if d >= Duration::from_millis(1) {
        format!("{:.2} ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{:.0} µs", d.as_secs_f64() * 1e6)
    }
}

/// `n` and the word for one or for several of them: `1 writer`, `3 readers`.
pub(crate) fn counted(n: u32, one: &str, several: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { several })
}

/// One line of the list of server commands by name below a table:
/// `commands` per `per` acquisitions, with the server's own count beside
/// them where it keeps one (MongoDB's opcounters, etcd's storage
/// operations).
pub(crate) fn commands_line(
    label: &str,
    commands: &Counts,
    server_ops: Option<&Counts>,
    per: f64,
) -> String {
    let mut line = format!("- {label}: {}", commands.per(per));
    if let Some(ops) = server_ops {
        let _ = write!(
            line,
            "; the server's own count: {:.2} ({})",
            ops.total() as f64 / per,
            ops.per(per)
        );
    }
    line
}
