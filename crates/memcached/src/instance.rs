//! Which memcached process a connection reaches, so that a CAS value can
//! be trusted after the round trip that returned it.
//!
//! memcached numbers CAS values from 1 again each time it starts. A CAS
//! remembered from one process can therefore equal the CAS of another
//! holder's item in the process that replaced it, and a delete or store
//! conditional on it would then hit that item. So a CAS is remembered
//! together with the identity of the process that issued it
//! ([`KnownCas`]), and a conditional command with it is sent only over a
//! connection that reports the same identity.
//!
//! A connection reads the identity once, from `stats`, when it opens. That
//! is enough because a TCP connection reaches one process for its whole
//! life: a process that exits (restart, crash) takes its connections with
//! it, so every connection to its successor was opened after it started
//! and reports the successor's identity. Within one process, CAS values
//! never repeat, so a conditional command with a CAS that process issued
//! matches only the item stored with it.

/// A memcached process: its pid and the time it started.
///
/// Either alone can repeat: pids are reused (in a container memcached is
/// often pid 1 every time), and two processes can start within the same
/// second. Both repeat together only for a process started in the same
/// second as its predecessor under the same pid. A warm restart (`-e`)
/// keeps the start time, and may keep the pid in a container, but it also
/// keeps the items and the CAS counter, so the CAS values of the old
/// process stay valid in the new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Instance {
    pid: u64,
    started: i64,
}

impl Instance {
    /// The process that answered `stats`: its `pid`, and its start time as
    /// `time - uptime`, which memcached computes from one reading of its
    /// clock, so the difference is the same in every `stats` of a process.
    /// `None` when a value is missing or not a number (not memcached?):
    /// the CAS values from such a server are never remembered.
    pub(crate) fn from_stats(stats: &[(String, String)]) -> Option<Self> {
        let stat = |name: &str| {
            stats
                .iter()
                .find(|(stat, _)| stat == name)
                .and_then(|(_, value)| value.parse::<i64>().ok())
        };
        Some(Self {
            pid: u64::try_from(stat("pid")?).ok()?,
            started: stat("time")?.checked_sub(stat("uptime")?)?,
        })
    }
}

/// The CAS of our item on one server, and the process that issued it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KnownCas {
    pub(crate) instance: Instance,
    pub(crate) cas: u64,
}

impl KnownCas {
    /// `cas`, as returned over a connection to `instance`, if it can be
    /// trusted later. Not when the process is unknown, and not a CAS of 0:
    /// memcached run without CAS (`-C`) returns 0 for every item, and a
    /// conditional command with `C0` then matches any item.
    pub(crate) fn new(instance: Option<Instance>, cas: Option<u64>) -> Option<Self> {
        Some(Self {
            instance: instance?,
            cas: cas.filter(|&cas| cas != 0)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|&(name, value)| (name.to_owned(), value.to_owned()))
            .collect()
    }

    #[test]
    fn the_start_time_is_the_same_in_every_stats_of_a_process() {
        let early = Instance::from_stats(&stats(&[
            ("pid", "1830"),
            ("uptime", "3"),
            ("time", "1795338216"),
        ]));
        let late = Instance::from_stats(&stats(&[
            ("pid", "1830"),
            ("uptime", "3603"),
            ("time", "1795341816"),
            ("version", "1.6.18"),
        ]));
        assert!(early.is_some());
        assert_eq!(early, late);
    }

    #[test]
    fn another_pid_or_start_is_another_process() {
        let base = [("pid", "1"), ("uptime", "10"), ("time", "1000")];
        let one = Instance::from_stats(&stats(&base));
        let other_pid = Instance::from_stats(&stats(&[base[1], base[2], ("pid", "2")]));
        let other_start = Instance::from_stats(&stats(&[base[0], base[1], ("time", "1001")]));
        assert_ne!(one, other_pid);
        assert_ne!(one, other_start);
    }

    #[test]
    fn missing_or_garbled_stats_identify_nothing() {
        for pairs in [
            &[("pid", "1"), ("uptime", "10")][..],
            &[("pid", "x"), ("uptime", "10"), ("time", "1000")],
            &[("pid", "-1"), ("uptime", "10"), ("time", "1000")],
            &[],
        ] {
            assert_eq!(Instance::from_stats(&stats(pairs)), None, "{pairs:?}");
        }
    }

    #[test]
    fn only_a_nonzero_cas_from_a_known_process_is_kept() {
        let instance =
            Instance::from_stats(&stats(&[("pid", "1"), ("uptime", "1"), ("time", "5")]));
        assert_eq!(
            KnownCas::new(instance, Some(7)).map(|known| known.cas),
            Some(7)
        );
        assert_eq!(KnownCas::new(instance, Some(0)), None);
        assert_eq!(KnownCas::new(instance, None), None);
        assert_eq!(KnownCas::new(None, Some(7)), None);
    }
}
