//! A compact record of how a set of durations is spread: a fixed number of
//! quantiles, kept instead of every value so that a tight loop's hundreds
//! of thousands of hand-offs cost a few kilobytes, and read back as the
//! points of a cumulative distribution for a chart.

use std::time::Duration;

/// How many quantiles are kept at most: one per 0.1 % of the values, so
/// that p50 and p99 sit exactly on kept points.
pub(crate) const STEPS: usize = 1000;

/// The spread of a set of durations.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Distribution {
    /// How many values it was taken from.
    pub(crate) count: usize,
    /// The values at the ranks `⌈count × k / m⌉` for `k` in `1..=m`,
    /// `m = min(count, STEPS)`: every value when there are at most
    /// [`STEPS`].
    quantiles: Vec<Duration>,
}

impl Distribution {
    /// The distribution of `sorted` (ascending).
    pub(crate) fn of_sorted(sorted: &[Duration]) -> Self {
        debug_assert!(sorted.is_sorted());
        let count = sorted.len();
        let steps = count.min(STEPS);
        let quantiles = (1..=steps)
            .map(|k| sorted[(count * k).div_ceil(steps) - 1])
            .collect();
        Self { count, quantiles }
    }

    /// The cumulative distribution as chart points: `(value in ms, share
    /// of values at most it)`, the share rising from `1/m` to 1; none for
    /// an empty set.
    pub(crate) fn cumulative_ms(&self) -> Vec<(f64, f64)> {
        let steps = self.quantiles.len() as f64;
        self.quantiles
            .iter()
            .enumerate()
            .map(|(i, value)| (value.as_secs_f64() * 1e3, (i + 1) as f64 / steps))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::percentile;

    fn sorted_ms(values: impl IntoIterator<Item = u64>) -> Vec<Duration> {
        let mut values: Vec<Duration> = values.into_iter().map(Duration::from_millis).collect();
        values.sort_unstable();
        values
    }

    #[test]
    fn a_small_set_keeps_every_value_and_climbs_to_one() {
        let d = Distribution::of_sorted(&sorted_ms([4, 1, 2, 2]));
        assert_eq!(d.count, 4);
        assert_eq!(
            d.cumulative_ms(),
            vec![(1.0, 0.25), (2.0, 0.5), (2.0, 0.75), (4.0, 1.0)]
        );
    }

    #[test]
    fn a_large_set_keeps_its_quantiles_at_the_nearest_rank() {
        let values = sorted_ms(1..=250_000);
        let d = Distribution::of_sorted(&values);
        assert_eq!(d.count, 250_000);
        let points = d.cumulative_ms();
        assert_eq!(points.len(), STEPS);
        // p50 and p99 read off the curve are the table's nearest-rank ones.
        for p in [50_usize, 99] {
            let (ms, _) = points[STEPS * p / 100 - 1];
            assert_eq!(ms, percentile(&values, p).as_secs_f64() * 1e3);
        }
        assert_eq!(points.first(), Some(&(250.0, 0.001)));
        assert_eq!(points.last(), Some(&(250_000.0, 1.0)));
        assert!(
            points
                .windows(2)
                .all(|w| w[0].0 <= w[1].0 && w[0].1 < w[1].1)
        );
    }

    #[test]
    fn no_values_draw_no_points() {
        let d = Distribution::of_sorted(&[]);
        assert_eq!(d.count, 0);
        assert!(d.cumulative_ms().is_empty());
    }
}
