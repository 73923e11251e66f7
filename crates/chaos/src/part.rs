//! A run of some backends, written as a part of its own at the end of the
//! report of the full run (`--part`), so that a backend that joins the
//! campaign gets its rows without rerunning every other backend. The full
//! run's text stays as it was; a part of the same backends written before
//! is replaced, and parts of other backends stay.

/// What starts a part's title line; every heading inside a part is one
/// level lower, so no other line of a report starts so.
const PART: &str = "## Partial run: ";

/// The title of the part for the backends `names` (their `--backend`
/// names).
pub(crate) fn title(names: &[&str]) -> String {
    format!("{PART}{}", names.join(", "))
}

/// `existing` (a report, perhaps with parts, or empty) with `report` (this
/// run's, as [`markdown`](crate::report::markdown) writes it) as the part
/// called `title` at its end, in place of any earlier part of that title.
pub(crate) fn merged(existing: &str, title: &str, report: &str) -> String {
    let (full, parts) = split(existing);
    let mut pieces: Vec<String> = Vec::new();
    if !full.trim().is_empty() {
        pieces.push(full.trim_end().to_owned());
    }
    for part in parts
        .iter()
        .filter(|part| part.lines().next() != Some(title))
    {
        pieces.push(part.trim_end().to_owned());
    }
    let mut part = format!("{title}\n");
    // The report's own title is the part's; its other headings go one
    // level down.
    for line in report.lines().skip_while(|line| line.starts_with("# ")) {
        if line.starts_with('#') {
            part.push('#');
        }
        part.push_str(line);
        part.push('\n');
    }
    pieces.push(part);
    pieces.join("\n\n")
}

/// The full run's text, and each part's, title line first.
fn split(text: &str) -> (&str, Vec<&str>) {
    let mut starts: Vec<usize> = Vec::new();
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        if line.starts_with(PART) {
            starts.push(at);
        }
        at += line.len();
    }
    let Some(&first) = starts.first() else {
        return (text, Vec::new());
    };
    let mut parts = Vec::new();
    for (index, &start) in starts.iter().enumerate() {
        let end = starts.get(index + 1).copied().unwrap_or(text.len());
        parts.push(&text[start..end]);
    }
    (&text[..first], parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = "# Reliability\n\n- Outcome: 2 of 2 rows held\n\n## R1. Churn\n\n| a |\n";

    fn report(outcome: &str) -> String {
        format!("# Reliability\n\n- Outcome: {outcome}\n\n## R1. Churn\n\n| new |\n")
    }

    #[test]
    fn a_part_goes_after_the_full_run_with_its_headings_one_level_down() {
        let title = title(&["s3"]);
        let merged = merged(FULL, &title, &report("1 of 1"));
        assert!(merged.starts_with(FULL.trim_end()), "{merged}");
        assert!(
            merged
                .ends_with("## Partial run: s3\n\n- Outcome: 1 of 1\n\n### R1. Churn\n\n| new |\n"),
            "{merged}"
        );
    }

    #[test]
    fn a_part_of_the_same_backends_is_replaced_and_others_stay() {
        let once = merged(FULL, &title(&["s3"]), &report("first s3"));
        let twice = merged(&once, &title(&["azure"]), &report("azure"));
        let again = merged(&twice, &title(&["s3"]), &report("second s3"));
        assert!(!again.contains("first s3"), "{again}");
        assert_eq!(again.matches("## Partial run: s3\n").count(), 1, "{again}");
        let azure = again.find("Partial run: azure").unwrap();
        let s3 = again.find("Partial run: s3").unwrap();
        assert!(azure < s3, "the newest part comes last: {again}");
        assert!(again.starts_with(FULL.trim_end()));
    }

    #[test]
    fn a_part_alone_when_there_is_no_report_yet() {
        let merged = merged("", &title(&["s3"]), &report("1 of 1"));
        assert!(merged.starts_with("## Partial run: s3\n"), "{merged}");
    }
}
