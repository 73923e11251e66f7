//! Line charts of the report's curves, drawn as SVG with `plotters` and
//! written beside the report, each captioned with the run it came from.

use std::borrow::Cow;
use std::path::Path;

use plotters::coord::Shift;
use plotters::coord::combinators::LogCoord;
use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::outcome::Outcome;
use crate::stamp::Stamp;

/// Where the charts go, relative to the report's directory, so that the
/// report's links to them work wherever it is read (GitHub renders them).
pub(crate) const DIR: &str = "docs/bench";

/// The charts' directory beside the report at `report`.
pub(crate) fn dir_beside(report: &Path) -> std::path::PathBuf {
    report.parent().unwrap_or_else(|| Path::new("")).join(DIR)
}

/// `kind` as a file name's part: lower case letters and digits only, so
/// that a later run's chart of the kind overwrites this one's.
pub(crate) fn slug(kind: &str) -> String {
    kind.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// What the charts of a run of only `kinds` are named with, so that they
/// sit beside the full run's charts, which the rest of the report still
/// shows, instead of replacing them: `partial-postgresql-` for
/// `--only PostgreSQL`; nothing for a full run.
pub(crate) fn partial_prefix(kinds: &[String]) -> String {
    if kinds.is_empty() {
        return String::new();
    }
    let slugs: Vec<String> = kinds.iter().map(|kind| slug(kind)).collect();
    format!("partial-{}-", slugs.join("-"))
}

/// Removes the charts partial runs left in `dir`: a full run's report has
/// no part that shows them.
pub(crate) fn remove_partial(dir: &Path) -> Outcome<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("partial-") && name.ends_with(".svg") {
            std::fs::remove_file(entry.path())
                .map_err(|e| format!("cannot remove {}: {e}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// One line of a chart: a backend's points, `(x, y)`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Series {
    pub(crate) label: String,
    pub(crate) points: Vec<(f64, f64)>,
}

/// How a chart's vertical axis runs; the horizontal one is always
/// logarithmic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum YAxis {
    /// Logarithmic: the curves span orders of magnitude.
    Log,
    /// A share, linear from 0 to 1: a cumulative distribution.
    Share,
}

/// A chart with a logarithmic horizontal axis: the curves span orders of
/// magnitude.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Chart {
    /// Its file name, e.g. `waiters-commands.svg`.
    pub(crate) file: Cow<'static, str>,
    pub(crate) title: String,
    pub(crate) x_label: &'static str,
    pub(crate) y_label: String,
    pub(crate) y_axis: YAxis,
    pub(crate) series: Vec<Series>,
}

/// The chart's size in pixels.
const SIZE: (u32, u32) = (860, 520);

impl Chart {
    /// A chart with logarithmic axes of the lines among `series` that have
    /// a point to draw: a logarithmic axis shows no zero, so points at or
    /// below zero are left out, and so is a line left without points.
    pub(crate) fn new(
        file: impl Into<Cow<'static, str>>,
        title: String,
        x_label: &'static str,
        y_label: String,
        series: Vec<Series>,
    ) -> Self {
        Self::drawn(file.into(), title, x_label, y_label, YAxis::Log, series)
    }

    /// A chart of cumulative distributions: each line's points are `(x,
    /// share of values at most x)`, the share on a linear axis from 0 to 1.
    /// Points outside it, or at or below zero in x, are left out, and so is
    /// a line left without points.
    pub(crate) fn cumulative(
        file: impl Into<Cow<'static, str>>,
        title: String,
        x_label: &'static str,
        series: Vec<Series>,
    ) -> Self {
        let y_label = "share of hand-offs at most this long".to_owned();
        Self::drawn(file.into(), title, x_label, y_label, YAxis::Share, series)
    }

    fn drawn(
        file: Cow<'static, str>,
        title: String,
        x_label: &'static str,
        y_label: String,
        y_axis: YAxis,
        series: Vec<Series>,
    ) -> Self {
        let shown = |y: f64| match y_axis {
            YAxis::Log => y > 0.0 && y.is_finite(),
            YAxis::Share => (0.0..=1.0).contains(&y),
        };
        let series = series
            .into_iter()
            .map(|s| Series {
                points: s
                    .points
                    .into_iter()
                    .filter(|&(x, y)| x > 0.0 && x.is_finite() && shown(y))
                    .collect(),
                ..s
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        Self {
            file,
            title,
            x_label,
            y_label,
            y_axis,
            series,
        }
    }

    /// The axes' ranges, `(x, y)`: a logarithmic one widened a little
    /// beyond the points so that none sits on the frame, a share from 0 to
    /// 1; `None` without points.
    pub(crate) fn ranges(&self) -> Option<((f64, f64), (f64, f64))> {
        let points = || self.series.iter().flat_map(|s| s.points.iter().copied());
        let span = |values: Vec<f64>| {
            let low = values.iter().copied().fold(f64::INFINITY, f64::min);
            let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (low.is_finite() && high.is_finite()).then(|| (low / 1.5, high * 1.5))
        };
        let x = span(points().map(|(x, _)| x).collect())?;
        let y = match self.y_axis {
            YAxis::Log => span(points().map(|(_, y)| y).collect())?,
            YAxis::Share => (0.0, 1.0),
        };
        Some((x, y))
    }

    /// The chart as an SVG document, with `caption` (the run it came
    /// from) along its foot.
    ///
    /// # Errors
    ///
    /// When the chart has no points, or plotters fails to draw it.
    pub(crate) fn to_svg(&self, caption: &str) -> Outcome<String> {
        let ((x0, x1), (y0, y1)) = self
            .ranges()
            .ok_or_else(|| format!("{}: nothing to draw", self.file))?;
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
            root.fill(&WHITE).map_err(|e| self.failed(&e))?;
            let (plot, foot) = root.split_vertically(SIZE.1 - 24);
            foot.draw(&Text::new(
                caption.to_owned(),
                (10, 6),
                ("sans-serif", 12).into_font().color(&BLACK.mix(0.7)),
            ))
            .map_err(|e| self.failed(&e))?;
            let x = LogCoord::from((x0..x1).log_scale());
            match self.y_axis {
                YAxis::Log => self.plot(&plot, x, LogCoord::from((y0..y1).log_scale()))?,
                YAxis::Share => self.plot(&plot, x, RangedCoordf64::from(y0..y1))?,
            };
            root.present().map_err(|e| self.failed(&e))?;
        }
        Ok(svg)
    }

    /// Why drawing it failed: plotters' `error`, naming the chart.
    fn failed(&self, error: &dyn std::fmt::Display) -> String {
        format!("{}: {error}", self.file)
    }

    /// Draws the axes, the lines and the legend onto `plot`, the vertical
    /// axis running over `y`.
    fn plot<Y>(
        &self,
        plot: &DrawingArea<SVGBackend<'_>, Shift>,
        x: LogCoord<f64>,
        y: Y,
    ) -> Outcome<()>
    where
        Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        let fail = |e: &dyn std::fmt::Display| self.failed(e);
        let mut chart = ChartBuilder::on(plot)
            .caption(&self.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(70)
            .build_cartesian_2d(x, y)
            .map_err(|e| fail(&e))?;
        chart
            .configure_mesh()
            .x_desc(self.x_label)
            .y_desc(self.y_label.as_str())
            .x_label_formatter(&|x| short_number(*x))
            .y_label_formatter(&|y| short_number(*y))
            .draw()
            .map_err(|e| fail(&e))?;
        for (i, series) in self.series.iter().enumerate() {
            let color = Palette99::pick(i).mix(1.0);
            chart
                .draw_series(LineSeries::new(
                    series.points.iter().copied(),
                    color.stroke_width(2),
                ))
                .map_err(|e| fail(&e))?
                .label(series.label.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            if self.y_axis == YAxis::Log {
                // A distribution's thousand points would hide its line.
                chart
                    .draw_series(
                        series
                            .points
                            .iter()
                            .map(|&point| Circle::new(point, 3, color.filled())),
                    )
                    .map_err(|e| fail(&e))?;
            }
        }
        chart
            .configure_series_labels()
            .position(match self.y_axis {
                YAxis::Log => SeriesLabelPosition::UpperLeft,
                // A cumulative distribution rises to the right: its lower
                // right is empty.
                YAxis::Share => SeriesLabelPosition::LowerRight,
            })
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .draw()
            .map_err(|e| fail(&e))?;
        Ok(())
    }
}

/// A tick label: `64`, `1.5k`, `100k`, `2.5M`, `0.25`.
pub(crate) fn short_number(value: f64) -> String {
    let trimmed = |v: f64, unit: &str| {
        let text = format!("{v:.1}");
        format!("{}{unit}", text.trim_end_matches(".0"))
    };
    match value.abs() {
        v if v >= 1e6 => trimmed(value / 1e6, "M"),
        v if v >= 1e3 => trimmed(value / 1e3, "k"),
        v if v >= 1.0 => trimmed(value, ""),
        _ => format!("{value:.2}"),
    }
}

/// Writes every chart into `dir` as `dir/<file>`, each with `caption`;
/// returns the files written.
///
/// # Errors
///
/// When the directory cannot be made, a chart not drawn or a file not
/// written.
pub(crate) fn write_all(dir: &Path, charts: &[Chart], caption: &str) -> Outcome<Vec<String>> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    let mut written = Vec::new();
    for chart in charts {
        let path = dir.join(chart.file.as_ref());
        std::fs::write(&path, chart.to_svg(caption)?)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        written.push(path.display().to_string());
    }
    Ok(written)
}

/// A chart's caption: the run's commit (and whether the checkout had
/// changes), its start and the backends drawn, so that a chart left by an
/// earlier run says which run drew it.
pub(crate) fn caption(stamp: &Stamp, backends: &[String]) -> String {
    format!(
        "distlock-bench, {}, {}; backends: {}",
        stamp.commit.replace('`', ""),
        stamp.date,
        backends.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partial_run_names_its_charts_apart_and_a_full_run_removes_them() {
        assert_eq!(partial_prefix(&[]), "");
        let kinds = ["PostgreSQL".to_owned(), "etcd".to_owned()];
        assert_eq!(partial_prefix(&kinds), "partial-postgresql-etcd-");
        let dir = std::env::temp_dir().join(format!("distlock-charts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for file in [
            "held-cpu.svg",
            "partial-postgresql-held-cpu.svg",
            "partial-notes.txt",
        ] {
            std::fs::write(dir.join(file), "x").unwrap();
        }
        remove_partial(&dir).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["held-cpu.svg", "partial-notes.txt"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn chart(series: Vec<Series>) -> Chart {
        Chart::new(
            "test.svg",
            "A title".to_owned(),
            "waiters",
            "commands".to_owned(),
            series,
        )
    }

    fn series(label: &str, points: &[(f64, f64)]) -> Series {
        Series {
            label: label.to_owned(),
            points: points.to_vec(),
        }
    }

    #[test]
    fn points_a_log_axis_cannot_show_are_left_out() {
        let c = chart(vec![
            series("a", &[(1.0, 0.0), (4.0, 2.0), (16.0, f64::INFINITY)]),
            series("uncounted", &[(1.0, 0.0)]),
        ]);
        assert_eq!(c.series, vec![series("a", &[(4.0, 2.0)])]);
        let ((x0, x1), (y0, y1)) = c.ranges().unwrap();
        assert!(x0 < 4.0 && x1 > 4.0 && y0 < 2.0 && y1 > 2.0);
        assert!(chart(Vec::new()).ranges().is_none());
        assert!(chart(Vec::new()).to_svg("caption").is_err());
    }

    #[test]
    fn the_svg_is_one_document_with_a_line_and_a_legend_entry_per_series() {
        let svg = chart(vec![
            series(
                "Redis",
                &[(1.0, 3.0), (4.0, 5.0), (16.0, 9.0), (64.0, 30.0)],
            ),
            series("etcd", &[(1.0, 4.0), (64.0, 4.0)]),
        ])
        .to_svg("distlock-bench at abc")
        .unwrap();
        assert!(svg.starts_with("<svg") || svg.starts_with("<?xml"));
        assert_eq!(svg.matches("<svg").count(), 1);
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(
            svg.matches(r#"stroke-width="2" points="#).count(),
            2 + 2,
            "a line and a legend mark per series, and no other wide line"
        );
        for text in ["Redis", "etcd", "A title", "distlock-bench at abc"] {
            assert!(svg.contains(text), "{text} missing");
        }
    }

    #[test]
    fn a_cumulative_chart_runs_its_share_from_zero_to_one_without_marks() {
        let c = Chart::cumulative(
            "cdf.svg",
            "Hand-offs".to_owned(),
            "hand-off, ms",
            vec![
                series("ours", &[(0.0, 0.25), (2.0, 0.5), (3.0, 1.0), (4.0, 1.5)]),
                series("none", &[]),
            ],
        );
        assert_eq!(c.series, vec![series("ours", &[(2.0, 0.5), (3.0, 1.0)])]);
        let (_, y) = c.ranges().unwrap();
        assert_eq!(y, (0.0, 1.0));
        let svg = c.to_svg("caption").unwrap();
        assert_eq!(svg.matches(r#"stroke-width="2" points="#).count(), 1 + 1);
        assert_eq!(svg.matches("<circle").count(), 0, "no mark per point");
        assert!(svg.contains("share of hand-offs at most this long"));
    }

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(short_number(64.0), "64");
        assert_eq!(short_number(1500.0), "1.5k");
        assert_eq!(short_number(100_000.0), "100k");
        assert_eq!(short_number(2_500_000.0), "2.5M");
        assert_eq!(short_number(0.25), "0.25");
    }
}
