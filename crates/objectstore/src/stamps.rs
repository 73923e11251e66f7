//! The store's clock, as its stamps show it: the `Last-Modified` of each
//! version of an object, which the store sets when it takes the write.
//!
//! No store expires an object, and no conditional write can ask for a
//! time (S3's and GCS's writes take no date condition; Azure's take one
//! against a date the client supplies, which `object_store` does not
//! send). So a resume cannot make "still within its lease" part of its
//! write. It judges it afterwards, from two stamps of the store's one
//! clock: the old grant's last write, and the resume's own write, read
//! back. A stamp is an HTTP date, whole seconds (truncated or rounded),
//! so each is within a [`STAMP_TICK`] of the moment it names, and the
//! time between the two writes is less than the difference of their
//! stamps plus one tick.

use std::time::{Duration, SystemTime};

use object_store::path::Path;

use distlock_core::{Error, Result};

use crate::store::BACKEND;

/// How far below the moment a store took a write its stamp may be, or
/// (rounded) half of it either side: an HTTP date counts whole seconds.
pub(crate) const STAMP_TICK: Duration = Duration::from_secs(1);

/// Whether a grant whose last write the store stamped `written`, with
/// `lease`, was surely still within that lease when the store took the
/// write it stamped `taken`: the time between the two writes is less than
/// `taken - written` plus a tick, so that sum must not pass the lease.
///
/// A later write stamped before an earlier one (the store's clock went
/// back) proves nothing, and counts as run out.
pub(crate) fn within_lease(written: SystemTime, taken: SystemTime, lease: Duration) -> bool {
    taken
        .duration_since(written)
        .is_ok_and(|between| between + STAMP_TICK <= lease)
}

/// Refuses what no stamp can show within its lease: a store that gives no
/// `Last-Modified` (`object_store` reads it as the Unix epoch for S3,
/// where the header is optional), or a lease shorter than a tick.
///
/// # Errors
/// [`Error::Unsupported`] saying which.
pub(crate) fn check_stamped(key: &Path, written: SystemTime, lease: Duration) -> Result<()> {
    if written <= SystemTime::UNIX_EPOCH {
        return Err(Error::Unsupported(format!(
            "{BACKEND} cannot resume the lock at {key}: the store gave no Last-Modified for it, \
             and without the store's time of the grant's last write nothing shows that its \
             lease has not run out"
        )));
    }
    if lease < STAMP_TICK {
        return Err(Error::Unsupported(format!(
            "{BACKEND} cannot resume the lock at {key}: its lease of {} is shorter than a \
             second, and the store stamps its writes to the second, so nothing shows that \
             such a grant has not run out; resume locks held with a lease of a second or more",
            humantime::format_duration(lease)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_765_000_000 + seconds)
    }

    #[test]
    fn a_write_within_the_lease_less_a_tick_is_within_it() {
        let lease = Duration::from_secs(30);
        assert!(within_lease(at(0), at(0), lease));
        assert!(within_lease(at(0), at(29), lease));
    }

    #[test]
    fn a_write_a_tick_or_less_before_the_end_counts_as_run_out() {
        // Stamped 29 s apart, the writes may have been up to 30 s apart.
        let lease = Duration::from_millis(29_500);
        assert!(!within_lease(at(0), at(29), lease));
        assert!(!within_lease(at(0), at(30), Duration::from_secs(30)));
        assert!(!within_lease(at(0), at(3_600), Duration::from_secs(30)));
    }

    #[test]
    fn a_clock_that_went_back_proves_nothing() {
        assert!(!within_lease(at(5), at(4), Duration::from_secs(30)));
    }

    #[test]
    fn a_missing_stamp_and_a_lease_under_a_tick_are_refused() {
        let key = Path::from("k");
        let lease = Duration::from_secs(2);
        assert!(check_stamped(&key, at(0), lease).is_ok());
        assert!(check_stamped(&key, at(0), STAMP_TICK).is_ok());
        for (written, lease, says) in [
            (SystemTime::UNIX_EPOCH, lease, "Last-Modified"),
            (at(0), Duration::from_millis(999), "shorter than a second"),
        ] {
            match check_stamped(&key, written, lease) {
                Err(Error::Unsupported(message)) => assert!(message.contains(says), "{message}"),
                other => panic!("{other:?}"),
            }
        }
    }
}
