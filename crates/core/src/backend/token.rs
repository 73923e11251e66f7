//! The fencing token's floor, for backends that may lose their counters.

/// The fencing token floor for backends that may lose their counters (a
/// deleted document, a restarted cache): microseconds since the Unix epoch
/// on the given clock. Tokens are then `max(previous + 1, floor)`, so they
/// keep increasing across such losses as long as clocks move forward; in
/// microseconds, a counter runs ahead of the clock only if one name is
/// granted more than a million times a second.
pub fn token_floor(now: std::time::SystemTime) -> u64 {
    now.duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
