//! The report's section on scale-out forms: what an etcd cluster or
//! memcached over several servers costs, as ratios to the single-server
//! form of the same kind measured in the same run.

use std::fmt::Write;

use super::{BackendResults, Contestant, find};
use crate::markdown::{opt, short};
use crate::timeline::Contention;
use crate::uncontended::Contender;
use crate::worker::Workload;

/// One measure of a form beside its single server.
struct Row {
    measure: String,
    form: String,
    single: String,
    /// The form's figure over the single server's.
    ratio: Option<f64>,
}

/// Writes the section, numbered `number`, if any backend is a scale-out
/// form whose single-server form ran too.
pub(super) fn write_section(
    out: &mut String,
    number: u32,
    backends: &[BackendResults],
    workloads: &[Workload],
) {
    let pairs: Vec<(&BackendResults, &BackendResults)> = backends
        .iter()
        .filter(|b| b.scale_out.is_some())
        .filter_map(|form| {
            let single = backends
                .iter()
                .find(|b| b.kind == form.kind && b.scale_out.is_none())?;
            Some((form, single))
        })
        .collect();
    if pairs.is_empty() {
        return;
    }
    let _ = writeln!(out, "## {number}. Scale-out\n");
    let _ = writeln!(
        out,
        "What spreading a lock over several servers costs: each scale-out form below ran \
         the uncontended scenario (its client and its backend's calls, without peers) and \
         the contention scenario (ours only, in every workload) in this run, beside the \
         single-server form of its kind above, on servers of the same machine. The ratio is \
         the form's figure over the single server's: below 1 for a rate is slower, above 1 \
         for a hand-off or a count is more. What each form survives that a single server \
         does not is for the README to say; these are its costs. Server commands are \
         counted as in the header (on an etcd cluster, requests summed over its members; on \
         memcached over several servers, commands summed over them).\n"
    );
    let _ = writeln!(
        out,
        "| form | measure | this form | single server | ratio |\n|---|---|---:|---:|---:|"
    );
    for (form, single) in pairs {
        for row in rows(form, single, workloads) {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                form.label,
                row.measure,
                row.form,
                row.single,
                opt(row.ratio),
            );
        }
    }
    let _ = writeln!(out);
}

/// The rows of one form beside its single server.
fn rows(form: &BackendResults, single: &BackendResults, workloads: &[Workload]) -> Vec<Row> {
    let mut rows = Vec::new();
    for (contender, what) in [
        (Contender::Client, "distlock `LockClient`"),
        (Contender::BackendCalls, "the backend's calls"),
    ] {
        if let (Some(f), Some(s)) = (
            form.uncontended.side(contender),
            single.uncontended.side(contender),
        ) {
            rows.push(Row {
                measure: format!("uncontended cycles/s, {what}"),
                form: format!("{:.0}", f.per_second()),
                single: format!("{:.0}", s.per_second()),
                ratio: Some(f.per_second() / s.per_second()),
            });
        }
    }
    for &workload in workloads {
        let (Some(f), Some(s)) = (
            find(form, Contestant::Ours, workload),
            find(single, Contestant::Ours, workload),
        ) else {
            continue;
        };
        rows.extend(contended_rows(&workload.label(), f, s));
    }
    rows
}

/// The rows of one contended workload.
fn contended_rows(scenario: &str, f: &Contention, s: &Contention) -> Vec<Row> {
    let duration = |measure: &str, pick: fn(&Contention) -> std::time::Duration| Row {
        measure: format!("{scenario}: {measure}"),
        form: short(pick(f)),
        single: short(pick(s)),
        ratio: super::ratio(pick(f), pick(s))
            .is_finite()
            .then(|| super::ratio(pick(f), pick(s))),
    };
    let mut rows = vec![
        Row {
            measure: format!("{scenario}: acquisitions/s"),
            form: format!("{:.0}", f.per_second),
            single: format!("{:.0}", s.per_second),
            ratio: (s.per_second > 0.0).then(|| f.per_second / s.per_second),
        },
        Row {
            measure: format!("{scenario}: acquisitions/s across processes"),
            form: format!("{:.0}", f.per_second_across()),
            single: format!("{:.0}", s.per_second_across()),
            ratio: (s.acquired_across > 0).then(|| f.per_second_across() / s.per_second_across()),
        },
        duration("hand-off p50", |r| r.hand_off_p50),
        duration("hand-off p99", |r| r.hand_off_p99),
        duration("hand-off p50 across processes", |r| r.cross_p50),
    ];
    if let (Some(a), Some(b)) = (f.commands_per_acquisition(), s.commands_per_acquisition()) {
        rows.push(Row {
            measure: format!("{scenario}: server commands per acquisition"),
            form: format!("{a:.2}"),
            single: format!("{b:.2}"),
            ratio: (b > 0.0).then(|| a / b),
        });
    }
    rows
}
