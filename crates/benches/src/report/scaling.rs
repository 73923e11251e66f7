//! Section 4, how cost grows with the work: the waiters and names curves
//! (the held locks are `held.rs`'s), their tables, their
//! charts and why each backend's curve has its shape.

use std::fmt::Write;

use super::*;
use crate::charts::{Chart, Series};
use crate::scaling::names::NamesPoint;
use crate::scaling::store;
use crate::scaling::waiters::{WARM_UP, WaitersPoint};
use crate::scaling::{Curve, Point, measured};

/// How much a fair form's commands per acquisition may vary over the
/// waiters curve (among points with waiters to serve) and still count as
/// constant in N.
const FAIR_FLAT: f64 = 1.5;

impl Run {
    pub(super) fn scaling(&self, out: &mut String) {
        let any = self.backends.iter().any(|b| {
            let c = &b.curves;
            !(c.waiters.is_empty() && c.names.is_empty() && c.held.is_empty())
        });
        if !any {
            return;
        }
        let _ = writeln!(out, "## 4. How cost grows with the work\n");
        let _ = writeln!(
            out,
            "Three curves per backend: waiters on one name, distinct names taken once, and \
             locks held by one process. Each runs on the single-server forms (the scale-out \
             forms multiply a single server's cost by their servers, section 5); the fair \
             forms run the waiters only, as fairness changes how waiters are served and \
             nothing else. A point that failed says why in its row. The axes of the charts \
             are logarithmic.\n"
        );
        self.waiters(out);
        self.names(out);
        self.held(out);
    }

    fn waiters(&self, out: &mut String) {
        let rows: Vec<(&BackendResults, &Point<WaitersPoint>)> = self
            .backends
            .iter()
            .flat_map(|b| b.curves.waiters.iter().map(move |p| (b, p)))
            .collect();
        let Some(window) = rows
            .iter()
            .find_map(|(_, p)| p.measured.as_ref().ok())
            .map(|w| w.contention.elapsed)
        else {
            return;
        };
        let _ = writeln!(out, "### Waiters\n");
        let _ = writeln!(
            out,
            "N worker processes of one task each take one name over and over for {} \
             (a tight loop: each releases and asks again at once), so every release finds \
             the other N − 1 waiting. The tasks begin {} before the window opens, so that \
             what a process does once (its first attempt, a stream opened, a channel \
             listened to, a place taken) is done before it, and a wait the close cuts \
             short ends after the counts are read. *Commands per acquisition* are the \
             server commands from one grant to the next: the release, the waiters' tries \
             or wake-ups, and the grant, with whatever the waiting processes send \
             meanwhile (a change stream's idle `getMore`, a listener's probe), counted as \
             in section 2 but for PostgreSQL, whose are statements here, as they end \
             (`pg_stat_statements`, read at the window's edges): its transaction counters \
             publish too late for a window this short, and count a transaction in every \
             listening process for each notification. The file backend has no server to \
             count. The hand-off runs from a release to the next grant.\n",
            humantime::format_duration(window),
            humantime::format_duration(WARM_UP)
        );
        let _ = writeln!(
            out,
            "| backend | waiters | acquisitions/s | server commands per acquisition | hand-off p50 | hand-off p99 | to another process: share, p50 | tasks served |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|");
        for (b, point) in &rows {
            match &point.measured {
                Ok(w) => {
                    let c = &w.contention;
                    let _ = writeln!(
                        out,
                        "| {} | {} | {:.0} | {} | {} | {} | {:.0} %, {} | {}/{} |",
                        b.label,
                        w.waiters,
                        c.per_second,
                        opt(c.commands_per_acquisition()),
                        short(c.hand_off_p50),
                        short(c.hand_off_p99),
                        c.cross_process as f64 / c.hand_offs.max(1) as f64 * 100.0,
                        short(c.cross_p50),
                        c.tasks_served,
                        w.waiters
                    );
                }
                Err(error) => failed_row(out, &b.label, point.at, error, 8),
            }
        }
        let _ = writeln!(out);
        self.chart_links(out, &self.waiters_charts());
        let goals: Vec<String> = self
            .backends
            .iter()
            .filter(|b| b.fair)
            .filter_map(fair_flat_goal)
            .collect();
        goals_list(out, &goals);
        let why: Vec<String> = self
            .backends
            .iter()
            .filter(|b| !b.curves.waiters.is_empty())
            .map(|b| format!("- {}", why_waiters(b)))
            .collect();
        if !why.is_empty() {
            let _ = writeln!(out, "Why each curve has its shape:\n");
            for line in &why {
                let _ = writeln!(out, "{line}");
            }
            let _ = writeln!(out);
        }
        for b in &self.backends {
            match &b.polling {
                Some(Ok(polling)) => {
                    let _ = writeln!(
                        out,
                        "{}\n",
                        objectstore::polling_findings(&b.label, polling)
                    );
                }
                Some(Err(error)) => {
                    let _ = writeln!(
                        out,
                        "**{}, one waiter while a lock is held**: failed: {error}\n",
                        b.label
                    );
                }
                None => {}
            }
        }
    }

    fn names(&self, out: &mut String) {
        let rows: Vec<(&BackendResults, &Point<NamesPoint>)> = self
            .backends
            .iter()
            .flat_map(|b| b.curves.names.iter().map(move |p| (b, p)))
            .collect();
        if rows.is_empty() {
            return;
        }
        let _ = writeln!(out, "### Names\n");
        let _ = writeln!(
            out,
            "One client takes N fresh names once each and gives each back at once (per-entity \
             locks), 64 names in flight. *Kept afterwards* is what the store holds once every \
             name was given back, less what it held before, read from the server: how it \
             grows with N is what a name costs the store after its use (a token kept for \
             fencing, a lease left to expire). MongoDB's documents are deleted after each \
             point; the other stores keep theirs, so a later point starts from more.\n"
        );
        let _ = writeln!(
            out,
            "| backend | names | cycles/s | kept afterwards: entries | bytes | per name |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|");
        for (b, point) in &rows {
            match &point.measured {
                Ok(n) => {
                    let per_name = n.kept.bytes.map(|bytes| bytes as f64 / n.names as f64);
                    let _ = writeln!(
                        out,
                        "| {} | {} | {:.0} | {} | {} | {} |",
                        b.label,
                        n.names,
                        n.cycles_per_second(),
                        n.kept.entries.map_or("—".into(), |e| e.to_string()),
                        n.kept.bytes.map_or("—".into(), |e| e.to_string()),
                        per_name.map_or("—".into(), |v| format!("{v:.0} B")),
                    );
                }
                Err(error) => failed_row(out, &b.label, point.at, error, 6),
            }
        }
        let _ = writeln!(out);
        for line in self.backends.iter().filter_map(objectstore::names_left_out) {
            let _ = writeln!(out, "{line}\n");
        }
        let mut sources: Vec<String> = Vec::new();
        for b in self.backends.iter().filter(|b| !b.curves.names.is_empty()) {
            let line = format!("- {}: {}", b.kind, store::source(b.kind));
            if !sources.contains(&line) {
                sources.push(line);
            }
        }
        let _ = writeln!(out, "Where each store's figures come from:\n");
        for line in &sources {
            let _ = writeln!(out, "{line}");
        }
        let _ = writeln!(out);
        self.chart_links(out, &self.names_charts());
    }

    /// Every chart of section 4, in the order the section shows them.
    pub(crate) fn charts(&self) -> Vec<Chart> {
        let mut charts = self.waiters_charts();
        charts.extend(self.names_charts());
        charts.extend(self.held_charts());
        charts.retain(|chart| !chart.series.is_empty());
        charts
    }

    /// Links to the charts that have lines, as images, where the report
    /// has a charts directory.
    pub(super) fn chart_links(&self, out: &mut String, charts: &[Chart]) {
        let Some(dir) = &self.charts_dir else {
            return;
        };
        let mut any = false;
        for chart in charts.iter().filter(|c| !c.series.is_empty()) {
            let _ = writeln!(
                out,
                "![{}]({dir}/{}{})",
                chart.title, self.chart_prefix, chart.file
            );
            any = true;
        }
        if any {
            let _ = writeln!(out);
        }
    }

    fn waiters_charts(&self) -> Vec<Chart> {
        let lines = |y: &dyn Fn(&WaitersPoint) -> Option<f64>| {
            chart_lines(&self.backends, |b| &b.curves.waiters, y)
        };
        vec![
            Chart::new(
                "waiters-commands.svg",
                "Waiters: server commands per acquisition".to_owned(),
                "processes waiting on one name",
                "server commands per acquisition".to_owned(),
                lines(&|w| w.contention.commands_per_acquisition()),
            ),
            Chart::new(
                "waiters-hand-off.svg",
                "Waiters: hand-off p50".to_owned(),
                "processes waiting on one name",
                "hand-off p50, ms".to_owned(),
                lines(&|w| Some(w.contention.hand_off_p50.as_secs_f64() * 1e3)),
            ),
        ]
    }

    fn names_charts(&self) -> Vec<Chart> {
        let lines = |y: &dyn Fn(&NamesPoint) -> Option<f64>| {
            chart_lines(&self.backends, |b| &b.curves.names, y)
        };
        vec![
            Chart::new(
                "names-cycles.svg",
                "Names: cycles per second, each name taken once".to_owned(),
                "distinct names",
                "cycles/s".to_owned(),
                lines(&|n| Some(n.cycles_per_second())),
            ),
            Chart::new(
                "names-kept.svg",
                "Names: bytes the store keeps afterwards".to_owned(),
                "distinct names",
                "bytes kept".to_owned(),
                lines(&|n| n.kept.bytes.map(|b| b as f64)),
            ),
        ]
    }
}

/// One chart line per backend: `y` of each measured point of the curve
/// `curve` picks, against the point's size.
pub(super) fn chart_lines<T>(
    backends: &[BackendResults],
    curve: impl Fn(&BackendResults) -> &Curve<T>,
    y: &dyn Fn(&T) -> Option<f64>,
) -> Vec<Series> {
    backends
        .iter()
        .map(|b| Series {
            label: b.label.clone(),
            points: measured(curve(b))
                .filter_map(|(at, point)| Some((at as f64, y(point)?)))
                .collect(),
        })
        .collect()
}

/// A row that says its point failed, padded to `columns`.
fn failed_row(out: &mut String, label: &str, at: usize, error: &str, columns: usize) {
    let _ = writeln!(
        out,
        "| {label} | {at} | failed: {} |{}",
        error.replace('|', "\\|"),
        " |".repeat(columns.saturating_sub(3))
    );
}

/// The goal that a fair form's commands per acquisition stay constant in
/// N: within [`FAIR_FLAT`] of each other over the points with at least
/// two waiters (with one there is nobody to serve in order).
fn fair_flat_goal(b: &BackendResults) -> Option<String> {
    let per = with_waiters(b, Contention::commands_per_acquisition);
    let spread = flat_spread(&per.iter().map(|(_, v)| *v).collect::<Vec<_>>())?;
    let points = per
        .iter()
        .map(|(at, v)| format!("{v:.2} at {at}"))
        .collect::<Vec<_>>()
        .join(", ");
    Some(goal(
        spread <= FAIR_FLAT,
        format!(
            "{}: server commands per acquisition constant in the number of waiters (the \
             largest at most {FAIR_FLAT}× the smallest): {spread:.2}× ({points}).",
            b.label
        ),
    ))
}

/// The largest of `values` over the smallest; `None` with fewer than two,
/// or a smallest of zero.
pub(super) fn flat_spread(values: &[f64]) -> Option<f64> {
    if values.len() < 2 {
        return None;
    }
    let low = values.iter().copied().fold(f64::INFINITY, f64::min);
    let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (low > 0.0).then(|| high / low)
}

/// `value` of each point of `b`'s waiters curve where someone waits (two
/// waiters or more), beside its number of waiters.
fn with_waiters(
    b: &BackendResults,
    value: impl Fn(&Contention) -> Option<f64>,
) -> Vec<(usize, f64)> {
    measured(&b.curves.waiters)
        .filter(|(at, _)| *at >= 2)
        .filter_map(|(at, w)| Some((at, value(&w.contention)?)))
        .collect()
}

/// One sentence on why `b`'s waiters curve grows as it does, with the
/// growth measured: commands per acquisition at the most waiters over
/// those at the fewest with someone waiting.
fn why_waiters(b: &BackendResults) -> String {
    let how = match (b.kind, b.fair, b.advisory_mode) {
        (_, true, true) => {
            "the server's own lock queue: each waiter blocks in `pg_advisory_lock` on its own \
             connection and an unlock grants the first in line, so a release wakes one waiter"
        }
        ("PostgreSQL", true, false) => {
            "a release grants the first place in line in its own statement and names the \
             place in its notification: every listening process hears it, but only that \
             place's waiter asks, so a release costs the same whatever the number waiting"
        }
        ("MongoDB", true, _) => {
            "a release passes the lock to the first in line in its own write, and only that \
             waiter's process hears of it (its change stream is filtered on the server to \
             its own places), so a release costs the same whatever the number waiting"
        }
        (_, true, false) => {
            "the store passes the lock to the first in line and wakes only that waiter's \
             process, so a release costs the same whatever the number waiting"
        }
        ("file", ..) => {
            "a release writes a signal file that every waiting process watches with inotify, \
             so every waiter wakes and tries its `flock` once: no server, but N − 1 tries per \
             release"
        }
        ("MongoDB", ..) => {
            "each waiting process's change stream reports the release, and every waiter tries \
             once more (a `findAndModify`), so a release costs a try per waiter"
        }
        ("memcached", ..) => {
            "memcached cannot tell anyone of a release: every waiter polls on its own jittered \
             backoff (5 ms doubling to 500 ms), so the tries grow with the waiters and the \
             hand-off is set by the backoff"
        }
        ("etcd", ..) => {
            "a waiter watches only the key just before its own, so a release wakes the next \
             waiter, not the herd"
        }
        ("PostgreSQL", _, true) => {
            "a release notifies the name's channel, and every waiting process is woken and \
             tries `pg_try_advisory_lock` once more"
        }
        ("PostgreSQL", ..) => {
            "a release notifies the name's channel (`pg_notify`), and every waiting process is \
             woken and tries once more, a statement each between its `BEGIN` and `COMMIT`"
        }
        ("objectstore", ..) => {
            "an object store cannot tell anyone of a release: every waiter polls on its own \
             jittered backoff (5 ms doubling to 500 ms), one `GET` a try, so the requests grow \
             with the waiters and the hand-off is set by the backoff"
        }
        ("Redis", ..) => {
            "a release that finds a waiter's mark publishes on the name's channel, every \
             waiting process's subscriber wakes its waiters, and each tries the acquire script \
             once more"
        }
        _ => "no explanation is written for this backend",
    };
    let per = with_waiters(b, Contention::commands_per_acquisition);
    let growth = match (per.first(), per.last()) {
        (Some(&(few, low)), Some(&(many, high))) if many > few && low > 0.0 => format!(
            " Measured: {low:.2} commands per acquisition with {few} waiting processes, \
             {high:.2} with {many} ({:.2}×).",
            high / low
        ),
        _ => String::new(),
    };
    let polls = if b.kind == "MongoDB" {
        idle_polls(b)
    } else {
        String::new()
    };
    format!("**{}**: {how}.{growth}{polls}", b.label)
}

/// For MongoDB, the change streams' `getMore`s per acquisition at the
/// curve's ends: a stream asks again whenever its wait on the server
/// (`maxAwaitTimeMS`, 10 s in the backend) ends with no event, so its idle
/// polls grow with the processes waiting and the time they wait, not with
/// the releases.
fn idle_polls(b: &BackendResults) -> String {
    let per = with_waiters(b, |c| {
        let polls = *c.commands.as_ref()?.0.get("getMore")?;
        (c.acquisitions > 0).then(|| polls as f64 / c.acquisitions as f64)
    });
    match (per.first(), per.last()) {
        (Some(&(few, low)), Some(&(many, high))) if many > few => format!(
            " Of these, `getMore` {low:.2} with {few} and {high:.2} with {many}: each waiting \
             process's change stream asks again whenever its wait on the server (10 s, the \
             backend's `maxAwaitTimeMS`) ends with no event, so its idle polls grow with \
             the processes waiting and the time they wait, not with the releases."
        ),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flat_curve_is_judged_by_its_extremes() {
        assert_eq!(flat_spread(&[2.0, 2.5, 2.0]), Some(1.25));
        let growing = flat_spread(&[3.0, 9.0, 40.0]).unwrap();
        assert!(growing > FAIR_FLAT, "a growing curve must fail: {growing}");
        assert_eq!(flat_spread(&[3.0]), None);
        assert_eq!(flat_spread(&[0.0, 1.0]), None);
    }
}
