//! The server's clock, which every grant and lease is judged by: read in
//! statements, and read back.

use std::time::{Duration, SystemTime};

/// The server's clock in microseconds since the epoch, read once for a
/// whole statement when selected in a `FROM` item.
pub(crate) const CLOCK: &str =
    "(SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS now_us) AS c";

/// The expression [`CLOCK`] reads, for a statement that must read the
/// clock at a step of its own choosing (after it locked a row).
pub(crate) const NOW_US: &str = "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint";

/// The server's clock, read in µs since the epoch, as a time.
pub(crate) fn server_time(now_us: i64) -> Option<SystemTime> {
    let micros = u64::try_from(now_us).ok()?;
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_micros(micros))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_is_read_one_way() {
        assert!(CLOCK.contains(NOW_US), "{CLOCK}");
    }
}
