//! This process's processor time, for measurements that charge the
//! client's own work (the held-locks curve, the uncontended rounds).

use std::time::Duration;

/// This process's user plus system CPU time, from `/proc/self/stat`.
pub(crate) fn cpu_time() -> Duration {
    let ticks = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            // Fields after the parenthesised command name: utime and stime
            // are the 12th and 13th.
            let rest = &stat[stat.rfind(')')? + 2..];
            let fields: Vec<&str> = rest.split(' ').collect();
            Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0);
    Duration::from_secs_f64(ticks as f64 / rustix::param::clock_ticks_per_second() as f64)
}
