//! Holding a grant as it was passed on: the write that passes the lock to
//! a place carries the grant's token and end, in its change event (or, in
//! the releaser's own process, its reply), so the place's waiter may hold
//! the lock without a command of its own, when it can show that the lease
//! it counts ends no later than the server's grant.
//!
//! A pass-on at `T0` (the server's now) grants the place's lease and a
//! grace (see `grace`): it ends at `E = T0 + lease + grace`. The waiter's
//! latest command that found its place in line was sent at `sent`, by its
//! own clock, and applied at `L`, by the server's, which set the place's
//! end to `P = L + lease`; so `sent <= L <= T0`. The waiter counts a lease
//! from when it takes the grant up, `now`: its count ends at `now + lease`,
//! the server's grant at `E = L + lease + (E - P)`. The count ends no later
//! whenever `now - sent <= E - P`: the left side measured here, the right
//! read from the server, so no clocks are compared (their rates agree, as
//! every lease here assumes). `E - P` is the time from that command to the
//! release plus the grace; the test fails only when the pass-on took
//! longer than the grace to be heard and acted on, and the waiter then
//! takes the grant over by command.
//!
//! Only a pass-on made after that command counts: its token is above the
//! token that command's reply showed. A waiter whose command's answer was
//! lost holds nothing as passed until a reply shows its place again (that
//! command may have taken the grant over under its own identity).

use std::time::Instant;

use mongodb::bson::Document;

use crate::counter;
use crate::document::{EXPIRES_AT, FENCING_TOKEN};

/// What a pass-on showed of the grant it made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PassOn {
    fencing_token: u64,
    /// The grant's end, by the server's clock, in milliseconds.
    expires_ms: i64,
}

impl PassOn {
    /// The grant a pass-on made, from the fields it wrote: a change
    /// event's updated fields, a replacement's document, or a release's
    /// reply. `None` when they do not show both the token and the end.
    pub(crate) fn read(written: &Document) -> Option<Self> {
        Some(Self {
            fencing_token: counter::read(written, FENCING_TOKEN).ok()??,
            expires_ms: written.get_datetime(EXPIRES_AT).ok()?.timestamp_millis(),
        })
    }

    /// The later of two pass-ons heard of for one place.
    pub(crate) fn latest(self, other: Option<Self>) -> Self {
        match other {
            Some(other) if other.fencing_token > self.fencing_token => other,
            _ => self,
        }
    }
}

/// Where a place stood when its waiter's latest command found it in line.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Standing {
    /// When the command was sent, by this process's clock.
    sent: Instant,
    /// The place's end that command set, by the server's clock, in
    /// milliseconds.
    place_expires_ms: i64,
    /// The lock's token in the command's reply: every pass-on after it
    /// has a greater one.
    fencing_token: u64,
}

impl Standing {
    /// The standing of the place whose entry in line is `entry`, in
    /// `found`, the reply to a command sent at `sent`.
    pub(crate) fn read(found: &Document, entry: &Document, sent: Instant) -> Option<Self> {
        Some(Self {
            sent,
            place_expires_ms: entry.get_datetime(EXPIRES_AT).ok()?.timestamp_millis(),
            fencing_token: counter::read(found, FENCING_TOKEN).ok()?.unwrap_or(0),
        })
    }

    /// The token of `pass_on`'s grant, when the waiter may hold it as
    /// passed at `now`: the pass-on came after this standing's command,
    /// and a lease counted from `now` ends no later than the grant does by
    /// the server's clock (see the module's documentation).
    pub(crate) fn holds(&self, pass_on: &PassOn, now: Instant) -> Option<u64> {
        let after_us = pass_on.fencing_token > self.fencing_token;
        let elapsed = now.saturating_duration_since(self.sent);
        // Rounded up, and a millisecond more for the server's rounding of
        // `L` and `T0` to whole milliseconds.
        let elapsed_ms = i64::try_from(elapsed.as_micros().div_ceil(1000)).unwrap_or(i64::MAX);
        let room_ms = pass_on.expires_ms.saturating_sub(self.place_expires_ms);
        (after_us && elapsed_ms.saturating_add(1) <= room_ms).then_some(pass_on.fencing_token)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use mongodb::bson::{DateTime, doc};

    use super::*;

    fn standing(sent: Instant, place_expires_ms: i64, fencing_token: u64) -> Standing {
        Standing {
            sent,
            place_expires_ms,
            fencing_token,
        }
    }

    #[test]
    fn a_pass_on_heard_in_time_is_held() {
        let sent = Instant::now();
        let stood = standing(sent, 10_000, 7);
        // The pass-on left 500 ms of room beyond the place's end.
        let passed = PassOn {
            fencing_token: 8,
            expires_ms: 10_500,
        };
        assert_eq!(stood.holds(&passed, sent), Some(8));
        assert_eq!(
            stood.holds(&passed, sent + Duration::from_millis(498)),
            Some(8)
        );
    }

    #[test]
    fn a_pass_on_heard_late_is_confirmed_by_command() {
        let sent = Instant::now();
        let stood = standing(sent, 10_000, 7);
        let passed = PassOn {
            fencing_token: 8,
            expires_ms: 10_500,
        };
        assert_eq!(
            stood.holds(&passed, sent + Duration::from_millis(500)),
            None
        );
        // An earlier version's pass-on, with no grace: the grant ends a
        // lease after the release, which the waiter cannot show it counts
        // from.
        let graceless = PassOn {
            fencing_token: 8,
            expires_ms: 9_990,
        };
        assert_eq!(stood.holds(&graceless, sent), None);
    }

    #[test]
    fn a_pass_on_from_before_the_latest_command_is_not_held() {
        let sent = Instant::now();
        // The reply showed token 8 already: a pass-on with token 8 was made
        // before it (and has ended, or the place would not be in line).
        let stood = standing(sent, 10_000, 8);
        let stale = PassOn {
            fencing_token: 8,
            expires_ms: 20_000,
        };
        assert_eq!(stood.holds(&stale, sent), None);
        assert_eq!(stale.latest(None), stale);
        let fresh = PassOn {
            fencing_token: 9,
            expires_ms: 10_500,
        };
        assert_eq!(stale.latest(Some(fresh)), fresh);
        assert_eq!(fresh.latest(Some(stale)), fresh);
    }

    #[test]
    fn the_grant_and_the_place_are_read_from_what_was_written() {
        let at = |ms| DateTime::from_millis(ms);
        let written = doc! { FENCING_TOKEN: 12_i64, EXPIRES_AT: at(9_000), "passedTo": "x" };
        assert_eq!(
            PassOn::read(&written),
            Some(PassOn {
                fencing_token: 12,
                expires_ms: 9_000
            })
        );
        assert_eq!(PassOn::read(&doc! { FENCING_TOKEN: 12_i64 }), None);
        assert_eq!(PassOn::read(&doc! { EXPIRES_AT: at(9_000) }), None);

        let sent = Instant::now();
        let entry = doc! { "id": "ours", EXPIRES_AT: at(4_000) };
        let found = doc! { FENCING_TOKEN: 5_i64, "queue": [entry.clone()] };
        let stood = Standing::read(&found, &entry, sent).unwrap();
        assert_eq!((stood.place_expires_ms, stood.fencing_token), (4_000, 5));
        let unsent = Standing::read(&doc! {}, &entry, sent).unwrap();
        assert_eq!(unsent.fencing_token, 0, "no grant yet");
        assert!(Standing::read(&found, &doc! { "id": "ours" }, sent).is_none());
    }
}
