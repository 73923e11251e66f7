//! The report file as Markdown text: a stamp under each numbered section,
//! a partial run's sections as a part of their own, and that part merged
//! into the file an earlier run wrote. Tables mix every backend's rows, so
//! a partial run never replaces rows of a full run's section: it replaces
//! only the parts of earlier partial runs whose kinds it covers (see the
//! file's header, [`crate::report::TITLE`]).

use crate::stamp::STAMP_START;

/// The start of the heading of a partial run's part; the kinds follow.
pub(crate) const PART_START: &str = "## Partial run: ";

/// The stamp of a section written before sections were stamped.
pub(crate) const NO_STAMP: &str = "> **Stamp**: none: written before runs were stamped; \
                                   the next full run (`bash scripts/bench`) replaces it.";

/// The lines of `markdown`, each with whether it is outside a code fence
/// (and so may be a heading).
fn lines_outside_fences(markdown: &str) -> Vec<(&str, bool)> {
    let mut in_fence = false;
    markdown
        .lines()
        .map(|line| {
            if line.trim_start().starts_with("```") {
                in_fence = !in_fence;
                return (line, false);
            }
            (line, !in_fence)
        })
        .collect()
}

/// Whether `line` heads a numbered top-level section (`## 1. …`).
fn is_numbered_heading(line: &str) -> bool {
    line.strip_prefix("## ")
        .is_some_and(|title| title.starts_with(|c: char| c.is_ascii_digit()))
}

/// `markdown` with `stamp(heading)` under every numbered top-level
/// section (`## 1. …`) that has no stamp yet.
pub(crate) fn stamp_sections(markdown: &str, stamp: impl Fn(&str) -> String) -> String {
    let lines = lines_outside_fences(markdown);
    let mut out = String::with_capacity(markdown.len());
    for (i, &(line, outside)) in lines.iter().enumerate() {
        out.push_str(line);
        out.push('\n');
        if !(outside && is_numbered_heading(line)) {
            continue;
        }
        let next = lines[i + 1..].iter().find(|(l, _)| !l.trim().is_empty());
        if !next.is_some_and(|(l, _)| l.starts_with(STAMP_START)) {
            out.push('\n');
            out.push_str(&stamp(line));
            out.push('\n');
        }
    }
    out
}

/// `markdown` with every heading one level further down.
fn demoted(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len() + 64);
    for (line, outside) in lines_outside_fences(markdown) {
        if outside && line.starts_with('#') {
            out.push('#');
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The kinds of a partial run, in the order a part's heading names them:
/// sorted, without repeats (any case).
pub(crate) fn part_kinds(kinds: &[String]) -> Vec<String> {
    let mut sorted: Vec<String> = kinds.to_vec();
    sorted.sort_by_key(|k| k.to_lowercase());
    sorted.dedup_by(|a, b| a.eq_ignore_ascii_case(b));
    sorted
}

/// A partial run's `report` (of the run's `kinds`) as a part of the file:
/// its heading names the kinds, `stamp` follows, then the report with its
/// headings one level down, so that its numbered sections (stamped
/// already) sit inside the part.
pub(crate) fn partial_part(kinds: &[String], stamp: &str, report: &str) -> String {
    format!(
        "{PART_START}{}\n\n{stamp}\n\n{}",
        part_kinds(kinds).join(", "),
        demoted(report).trim_end()
    )
}

/// The kinds a part's heading names.
fn kinds_of_part(heading: &str) -> Vec<&str> {
    heading
        .strip_prefix(PART_START)
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .collect()
}

/// `part`, a partial run of `kinds`, merged into `existing`, the file an
/// earlier run wrote: every part of an earlier partial run of none but
/// these kinds goes, the new part comes last, and everything else stays as
/// it was, with [`NO_STAMP`] under any numbered section that has no stamp.
pub(crate) fn merge(existing: &str, kinds: &[String], part: &str) -> String {
    let covered = |heading: &str| {
        kinds_of_part(heading)
            .iter()
            .all(|k| kinds.iter().any(|new| new.eq_ignore_ascii_case(k)))
    };
    let mut kept = String::with_capacity(existing.len() + part.len());
    let mut dropping = false;
    for (line, outside) in lines_outside_fences(existing) {
        if outside && line.starts_with(PART_START) {
            dropping = covered(line);
        } else if outside && line.starts_with("# ") {
            // Nothing of a part reaches above its own level.
            dropping = false;
        }
        if !dropping {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    let kept = stamp_sections(&kept, |_| NO_STAMP.to_owned());
    format!("{}\n\n{}\n", kept.trim_end(), part.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(heading: &str) -> String {
        format!("{STAMP_START} for {heading}")
    }

    const FULL: &str = "# Benchmarks\n\nIntro.\n\n## How server commands are counted\n\n\
                        - counted\n\n## 1. Uncontended\n\n| backend | cycles/s |\n|---|---:|\n\
                        | Redis | 7198 |\n\n### 1a. Detail\n\ntext\n\n## 2. Contention\n\n\
                        ```text\n## 3. not a heading\n```\n";

    #[test]
    fn every_numbered_section_is_stamped_once() {
        let stamped = stamp_sections(FULL, stamp);
        assert!(stamped.contains("## 1. Uncontended\n\n> **Stamp**: for ## 1. Uncontended\n"));
        assert!(stamped.contains("## 2. Contention\n\n> **Stamp**: for ## 2. Contention\n"));
        // Neither the unnumbered section, nor a subsection, nor a line in
        // a code fence.
        assert_eq!(stamped.matches(STAMP_START).count(), 2);
        // Stamping again adds nothing.
        assert_eq!(stamp_sections(&stamped, stamp), stamped);
    }

    fn redis_part(figure: &str) -> String {
        let report = stamp_sections(
            &format!(
                "- Command: `bash scripts/bench --only Redis`\n\n## 1. Uncontended\n\n| Redis | {figure} |\n\n### 1a. Detail\n"
            ),
            stamp,
        );
        partial_part(
            &["redis".into(), "Redis".into()],
            "> **Stamp**: part",
            &report,
        )
    }

    #[test]
    fn a_partial_run_becomes_a_part_with_its_headings_one_level_down() {
        let part = redis_part("8696");
        assert!(part.starts_with("## Partial run: redis\n\n> **Stamp**: part\n\n- Command"));
        assert!(part.contains("\n### 1. Uncontended\n\n> **Stamp**: for ## 1. Uncontended\n"));
        assert!(part.contains("\n#### 1a. Detail"));
        assert_eq!(
            part_kinds(&["etcd".into(), "Redis".into(), "ETCD".into()]),
            ["etcd", "Redis"]
        );
    }

    #[test]
    fn a_partial_run_leaves_the_full_run_and_replaces_its_own_earlier_part() {
        let full = stamp_sections(FULL, stamp);
        let kinds = ["Redis".to_owned()];
        let once = merge(&full, &kinds, &redis_part("8696"));
        assert!(
            once.starts_with(full.trim_end()),
            "the full run stays as it was"
        );
        assert!(once.contains("| Redis | 7198 |") && once.contains("| Redis | 8696 |"));
        let twice = merge(&once, &kinds, &redis_part("9119"));
        assert!(!twice.contains("8696"), "the earlier Redis part goes");
        assert!(twice.contains("| Redis | 7198 |") && twice.contains("| Redis | 9119 |"));
        assert_eq!(twice.matches(PART_START).count(), 1);
        assert!(twice.ends_with("#### 1a. Detail\n"));
    }

    #[test]
    fn a_part_of_other_kinds_stays() {
        let full = stamp_sections(FULL, stamp);
        let etcd = partial_part(
            &["etcd".into(), "Redis".into()],
            "> **Stamp**: e",
            "## 1. X\n",
        );
        let with_etcd = merge(&full, &["etcd".into(), "Redis".into()], &etcd);
        // A Redis run does not cover a part that holds etcd too...
        let merged = merge(&with_etcd, &["Redis".into()], &redis_part("8696"));
        assert!(merged.contains("## Partial run: etcd, Redis"));
        assert_eq!(merged.matches(PART_START).count(), 2);
        // ...and a run of both kinds replaces both parts.
        let again = merge(&merged, &["REDIS".into(), "etcd".into()], &etcd);
        assert_eq!(again.matches(PART_START).count(), 1);
        assert!(!again.contains("8696"));
    }

    #[test]
    fn sections_written_before_stamps_say_so() {
        let merged = merge(FULL, &["Redis".into()], &redis_part("8696"));
        assert!(merged.contains(&format!("## 1. Uncontended\n\n{NO_STAMP}\n")));
        assert!(merged.contains(&format!("## 2. Contention\n\n{NO_STAMP}\n")));
        // The full run's subsections share their section's stamp; the
        // part's sections have their own.
        assert!(!merged.contains(&format!("### 1a. Detail\n\n{NO_STAMP}")));
        assert!(merged.contains("### 1. Uncontended\n\n> **Stamp**: for ## 1. Uncontended"));
    }
}
