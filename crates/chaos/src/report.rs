//! RELIABILITY.md: one table per scenario, one row per backend and kind.

use std::fmt::Write as _;

use crate::judge::{OverlapCause, Verdict};

/// One scenario on one backend (and lock kind).
#[derive(Debug, Clone)]
pub(crate) struct Row {
    /// The scenario's id, `R1` to `R13`.
    pub(crate) scenario: &'static str,
    pub(crate) backend: &'static str,
    /// The lock kind, or what was varied.
    pub(crate) kind: String,
    /// What the judge found; `None` when the scenario does not apply.
    pub(crate) verdict: Option<Verdict>,
    /// What else the scenario measured, or why it does not apply.
    pub(crate) detail: String,
    /// Whether the scenario's invariants held.
    pub(crate) passed: bool,
    /// Why valid holders may overlap in this row, if they may: only a
    /// documented cause allows it, and each overlap must then be fenced.
    /// Every other row allows none.
    pub(crate) overlaps_allowed: Option<OverlapCause>,
    /// What the row did of what its scenario must do to prove anything
    /// (grants made, faults fired), and whether that met the scenario's
    /// minimum: a row below it proved nothing, and fails, in the short
    /// form as in the full run. `None` for a row with no minimum (one
    /// that does not apply).
    pub(crate) minimum: Option<Minimum>,
    /// Whether the scenario applies to the backend: a row that does not
    /// is counted apart, never among those that held.
    pub(crate) applies: bool,
}

/// What a row did towards its scenario's minimum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Minimum {
    /// Whether it met it.
    pub(crate) met: bool,
    /// What it did, in words: the faults fired, the grants made.
    pub(crate) did: String,
}

/// A row's [`Minimum`]: whether it was `met`, and what the row `did`.
pub(crate) fn minimum(met: bool, did: impl FnOnce() -> String) -> Option<Minimum> {
    Some(Minimum { met, did: did() })
}

impl Row {
    /// What it fell short of, if it did not meet its minimum.
    pub(crate) fn shortfall(&self) -> Option<&str> {
        self.minimum
            .as_ref()
            .filter(|minimum| !minimum.met)
            .map(|minimum| minimum.did.as_str())
    }
}

impl Row {
    /// Whether the safety invariants held: no lost update, no token out of
    /// real-time order, a history checked whole (none undecided) and
    /// linearizable, and no overlap of valid holders unless the row names
    /// its cause, and then every one fenced. No timing is judged here,
    /// which is what the short form asserts. A row without holders (a
    /// scenario that does not apply, checks that judge no holders, or one
    /// that could not run) holds when it passed: a scenario that could not
    /// run never passes silently.
    pub(crate) fn safe(&self) -> bool {
        self.verdict.as_ref().map_or(self.passed, |verdict| {
            verdict.lost_updates == 0
                && verdict.token_regressions == 0
                && verdict.history_violations == 0
                && verdict.undecided == 0
                && verdict.overlaps_fit(self.overlaps_allowed)
        })
    }

    /// The minimum's cell: what the row did, and whether that was enough.
    fn minimum_cell(&self) -> String {
        match &self.minimum {
            Some(Minimum { met: true, did }) => did.replace('|', "\\|"),
            Some(Minimum { met: false, did }) => {
                format!("{} (**below the minimum**)", did.replace('|', "\\|"))
            }
            None => "—".into(),
        }
    }

    /// The overlaps cell: how many, and, where the row allows them, why
    /// and how many went unfenced.
    fn overlaps_cell(&self, verdict: &Verdict) -> String {
        match self.overlaps_allowed {
            Some(cause) if verdict.overlaps > 0 => format!(
                "{} ({}; {} unfenced)",
                verdict.overlaps,
                cause.name(),
                verdict.unfenced_overlaps
            ),
            _ => verdict.overlaps.to_string(),
        }
    }
}

/// What a scenario is, for its heading.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScenarioInfo {
    pub(crate) id: &'static str,
    pub(crate) title: &'static str,
    /// What it does and what must hold.
    pub(crate) what: &'static str,
    /// Whether none of its checks depends on timing (name round-trips,
    /// secrets), so that the short form judges all of them, not only
    /// overlaps, lost updates and token order.
    pub(crate) untimed: bool,
}

/// Whether `row` held, as the run judges it: in full, or in the short form
/// (which runs few times on a busy machine, so it judges only what does not
/// depend on timing, and the row's minimum). A history that fails the linearizability check, or
/// that the check left undecided, fails the row either way: scenarios
/// decide `passed` without it.
pub(crate) fn held(row: &Row, scenarios: &[ScenarioInfo], short: bool) -> bool {
    if row.shortfall().is_some() {
        return false;
    }
    let untimed = scenarios
        .iter()
        .any(|info| info.id == row.scenario && info.untimed);
    let linearizable = row
        .verdict
        .as_ref()
        .is_none_or(|verdict| verdict.history_violations == 0 && verdict.undecided == 0);
    if short && !untimed {
        row.safe()
    } else {
        row.passed && linearizable
    }
}

/// The run's context, for the report's head.
#[derive(Debug, Clone)]
pub(crate) struct RunInfo {
    pub(crate) command: String,
    pub(crate) machine: String,
    pub(crate) versions: Vec<String>,
    /// How each backend's server was started, by backend.
    pub(crate) servers: Vec<(String, String)>,
    pub(crate) short: bool,
    pub(crate) took: std::time::Duration,
}

/// The report, as Markdown.
pub(crate) fn markdown(run: &RunInfo, scenarios: &[ScenarioInfo], rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Reliability\n");
    let _ = writeln!(
        out,
        "Generated by `{}`{}; it took {}.\n",
        run.command,
        if run.short { " (short form)" } else { "" },
        humantime::format_duration(std::time::Duration::from_secs(run.took.as_secs()))
    );
    let _ = writeln!(out, "- Machine: {}", run.machine);
    for version in &run.versions {
        let _ = writeln!(out, "- {version}");
    }
    if !run.servers.is_empty() {
        let _ = writeln!(
            out,
            "- Servers, as the campaign starts them (each on a port and a data directory of \
             its own):"
        );
        for (backend, shown) in &run.servers {
            let _ = writeln!(out, "  - {backend}: {shown}");
        }
    }
    let held = |row: &Row| held(row, scenarios, run.short);
    let failed = rows.iter().filter(|row| !held(row)).count();
    let applying = rows.iter().filter(|row| row.applies).count();
    let _ = writeln!(
        out,
        "- Outcome: {} of {applying} rows held their invariants{}; {} rows do not apply \
         (a scenario whose fault the backend cannot have), counted apart\n",
        applying - failed,
        if failed == 0 {
            ""
        } else {
            " (see FAILED rows)"
        },
        rows.len() - applying,
    );
    let _ = writeln!(
        out,
        "Every holder runs in a process of its own and does read-increment-write cycles \
         on a fenced counter (a file that accepts an operation only with a token at least \
         as high as the highest it has seen; readers only read, and are accepted while no \
         writer with a higher token has been seen, so readers granted together share a \
         range of tokens). A holder is valid from its grant until it releases, its \
         `lost()` fires or its own deadline passes, on the machine's one monotonic clock. Lost updates are accepted writes the counter does not show, which \
         the counter's fencing makes a sign of a repeated token; beside it, each exclusive \
         holder reads an unfenced witness, pauses, and writes it back plus one while it is \
         still valid, so a witness lost update shows two holders that acted at once, \
         whatever the tokens say (it fails a row that allows no overlap); a \
         token regression is a holding whose token is not above that of one that ended \
         before it began (between two readers, or two permits, before it was asked for: \
         their grants may be answered out of order). Every run is recorded as a history \
         and checked by `distlock-history`. Its exclusion check takes each holder's \
         validity, from its grant's answer to the earliest of its release being sent, \
         its `lost()` firing and its own deadline (the send time of its last confirmed \
         grant or extension, plus the lease, less the safety margin), and counts an \
         overlap where a validity begins while one it excludes is valid: any other, for \
         a writer; a writer's, for a reader; the limit's worth, for a permit. Only a row \
         that names the overlap's cause allows it, and then each overlap must be fenced \
         (no write of the earlier holder accepted once the later holder used the \
         counter); every other row allows none. An exclusive run's history also holds \
         every acquire, release and loss report, and every operation on the counter, \
         with its invocation and completion on that clock, checked for \
         linearizability against a lease lock and a fenced register: a violation is a \
         successful release of a lease after another grant, tokens that do not \
         increase from grant to grant, a stale operation accepted or a fresh one \
         refused, or a read of a value no accepted write left; R14's history adds every \
         extension and the forced release, where an extension that succeeds after its \
         lease ended is one too. A history the search left undecided fails its row. \
         Each row shows what it did towards its scenario's minimum (faults fired, grants \
         made): a row below it proved nothing, and fails.\n"
    );
    for scenario in scenarios {
        let mine: Vec<&Row> = rows
            .iter()
            .filter(|row| row.scenario == scenario.id)
            .collect();
        if mine.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "## {}. {}\n\n{}\n",
            scenario.id, scenario.title, scenario.what
        );
        let _ = writeln!(
            out,
            "| backend | kind | acquisitions | faults fired (minimum) | overlaps | witness lost updates | lost updates | token regressions | stale writes rejected | losses seen | failed waits | histories checked | undecided | history violations | detail | invariants |"
        );
        let _ = writeln!(
            out,
            "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"
        );
        for row in mine {
            let cells = match &row.verdict {
                Some(v) => format!(
                    "{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}",
                    v.acquisitions,
                    row.minimum_cell(),
                    row.overlaps_cell(v),
                    v.witness_lost_updates,
                    v.lost_updates,
                    v.token_regressions,
                    v.rejected_writes,
                    v.losses,
                    v.failed,
                    v.histories_checked,
                    v.undecided,
                    v.history_violations
                ),
                None => "— | — | — | — | — | — | — | — | — | — | — | —".into(),
            };
            let mut detail = match row.verdict.as_ref().and_then(|v| v.history_note.as_ref()) {
                Some(note) => format!("{}; history: {note}", row.detail),
                None => row.detail.clone(),
            };
            if let Some(shortfall) = row.shortfall() {
                detail.push_str(&format!(
                    "; below its minimum, so it proved nothing: {shortfall}"
                ));
            }
            let _ = writeln!(
                out,
                "| {} | {} | {cells} | {} | {} |",
                row.backend,
                row.kind,
                detail.replace('|', "\\|"),
                match (row.applies, held(row)) {
                    (false, true) => "does not apply",
                    (_, true) => "held",
                    (_, false) => "**FAILED**",
                }
            );
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(passed: bool, history_violations: usize) -> Row {
        Row {
            scenario: "R1",
            backend: "file",
            kind: "exclusive".into(),
            verdict: Some(Verdict {
                histories_checked: 1,
                history_violations,
                ..Verdict::default()
            }),
            detail: String::new(),
            passed,
            overlaps_allowed: None,
            minimum: None,
            applies: true,
        }
    }

    const SCENARIOS: [ScenarioInfo; 1] = [ScenarioInfo {
        id: "R1",
        title: "",
        what: "",
        untimed: false,
    }];

    #[test]
    fn an_undecided_history_fails_the_row_in_full_and_in_the_short_form() {
        let mut undecided = row(true, 0);
        if let Some(verdict) = undecided.verdict.as_mut() {
            verdict.histories_checked = 0;
            verdict.undecided = 1;
        }
        for short in [false, true] {
            assert!(!held(&undecided, &SCENARIOS, short), "short: {short}");
        }
    }

    #[test]
    fn a_row_below_its_minimum_fails_in_full_and_in_the_short_form() {
        let mut vacuous = row(true, 0);
        vacuous.minimum = minimum(false, || "no fault fired".to_owned());
        for short in [false, true] {
            assert!(!held(&vacuous, &SCENARIOS, short), "short: {short}");
        }
        let text = markdown(
            &RunInfo {
                command: "test".into(),
                machine: "test".into(),
                versions: Vec::new(),
                servers: Vec::new(),
                short: true,
                took: std::time::Duration::ZERO,
            },
            &SCENARIOS,
            &[vacuous],
        );
        assert!(text.contains("proved nothing: no fault fired"), "{text}");
        assert!(text.contains("0 of 1 rows held"), "{text}");
    }

    #[test]
    fn overlaps_fail_a_row_unless_it_names_their_cause_and_each_was_fenced() {
        let mut overlapping = row(true, 0);
        if let Some(verdict) = overlapping.verdict.as_mut() {
            verdict.overlaps = 2;
        }
        assert!(!held(&overlapping, &SCENARIOS, true));
        overlapping.overlaps_allowed = Some(OverlapCause::ServerForgot);
        assert!(held(&overlapping, &SCENARIOS, true));
        if let Some(verdict) = overlapping.verdict.as_mut() {
            verdict.unfenced_overlaps = 1;
        }
        assert!(!held(&overlapping, &SCENARIOS, true));
    }

    #[test]
    fn a_history_violation_fails_the_row_in_full_and_in_the_short_form() {
        let scenarios = [ScenarioInfo {
            id: "R1",
            title: "",
            what: "",
            untimed: false,
        }];
        for short in [false, true] {
            assert!(held(&row(true, 0), &scenarios, short));
            assert!(!held(&row(true, 1), &scenarios, short), "short: {short}");
        }
    }
}
