//! How the scenarios sum up and print durations.

use std::time::Duration;

/// The `p`-th percentile of `values` (sorted in place), if any.
pub(crate) fn percentile(values: &mut [Duration], p: f64) -> Option<Duration> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    let index = ((values.len() as f64 * p / 100.0).ceil() as usize).clamp(1, values.len()) - 1;
    Some(values[index])
}

/// A duration as milliseconds for a report, with a decimal below 10 ms.
pub(crate) fn ms(duration: Duration) -> String {
    let millis = duration.as_secs_f64() * 1000.0;
    if millis < 10.0 {
        format!("{millis:.1} ms")
    } else {
        format!("{millis:.0} ms")
    }
}
