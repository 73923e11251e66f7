//! The faults a proxy can inject, and what each means for one direction.

use std::time::Duration;

/// One direction of a proxied connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Bytes the client sends to the server: requests.
    ToServer,
    /// Bytes the server sends back to the client: replies.
    ToClient,
}

/// What the proxy does to the traffic passing through it.
///
/// A fault applies to every connection, existing and new, from the moment
/// it is set with [`FaultProxy::set_fault`](crate::FaultProxy::set_fault).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fault {
    /// Pass everything through unchanged.
    #[default]
    None,
    /// Deliver every chunk, in both directions, this long after it arrived.
    ///
    /// Order is kept and reading goes on meanwhile, so this adds latency
    /// without capping throughput. The delay is measured from each chunk's
    /// arrival against the fault in force when it is due: shortening or
    /// clearing the delay releases chunks that waited long enough.
    Delay(Duration),
    /// Like [`Fault::Delay`], for one direction only.
    DelayOne(Direction, Duration),
    /// Swallow all bytes in both directions, like a network partition.
    ///
    /// Connections, existing and new, stay open; new ones are still
    /// connected through to the server. Swallowed bytes are gone:
    /// they are not delivered when the fault is cleared. A peer's close
    /// (end of stream) is still passed on, so that connections the client
    /// gave up on do not linger at the server.
    Blackhole,
    /// Swallow the bytes of one direction only, the other flowing freely.
    ///
    /// `Drop(Direction::ToClient)` models requests that arrive and replies
    /// that are lost.
    Drop(Direction),
    /// Close new connections at once, with a reset; existing ones go on.
    Refuse,
    /// One shot: the next bytes a client sends, on any connection, reach
    /// the server, and then that connection is reset on both sides before
    /// any reply is passed back.
    ///
    /// Models a lost acknowledgement: the server did the work, the client
    /// never hears. The reset comes as soon as the server starts to reply
    /// (the reply is swallowed), or after a grace period of one second if
    /// it does not. Taking the shot sets the fault back to [`Fault::None`].
    ResetAfterRequest,
    /// Like [`Fault::ResetAfterRequest`], but the shot is kept for the
    /// first chunk a client sends that starts with these bytes (an HTTP
    /// method, say `b"PUT "`): chunks before it pass untouched.
    ///
    /// For a protocol whose request of interest follows others on the same
    /// connections (a read before a conditional write).
    ResetAfterRequestStarting(&'static [u8]),
}

impl Fault {
    /// How long chunks travelling in `dir` are held back.
    pub(crate) fn delay(self, dir: Direction) -> Duration {
        match self {
            Fault::Delay(d) => d,
            Fault::DelayOne(only, d) if only == dir => d,
            _ => Duration::ZERO,
        }
    }

    /// Whether bytes travelling in `dir` are thrown away.
    pub(crate) fn swallows(self, dir: Direction) -> bool {
        match self {
            Fault::Blackhole => true,
            Fault::Drop(only) => only == dir,
            _ => false,
        }
    }

    /// Whether this one-shot fault is taken by a client chunk of `bytes`.
    pub(crate) fn shot_taken_by(self, bytes: &[u8]) -> bool {
        match self {
            Fault::ResetAfterRequest => true,
            Fault::ResetAfterRequestStarting(start) => bytes.starts_with(start),
            _ => false,
        }
    }

    /// Whether new connections are closed as soon as they are accepted.
    pub(crate) fn refuses(self) -> bool {
        self == Fault::Refuse
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_applies_to_the_chosen_directions() {
        let d = Duration::from_millis(5);
        assert_eq!(Fault::Delay(d).delay(Direction::ToServer), d);
        assert_eq!(Fault::Delay(d).delay(Direction::ToClient), d);
        let one = Fault::DelayOne(Direction::ToClient, d);
        assert_eq!(one.delay(Direction::ToClient), d);
        assert_eq!(one.delay(Direction::ToServer), Duration::ZERO);
        assert_eq!(Fault::Blackhole.delay(Direction::ToServer), Duration::ZERO);
    }

    #[test]
    fn swallowing_applies_to_the_chosen_directions() {
        assert!(Fault::Blackhole.swallows(Direction::ToServer));
        assert!(Fault::Blackhole.swallows(Direction::ToClient));
        let lost_replies = Fault::Drop(Direction::ToClient);
        assert!(lost_replies.swallows(Direction::ToClient));
        assert!(!lost_replies.swallows(Direction::ToServer));
        assert!(!Fault::None.swallows(Direction::ToServer));
        assert!(!Fault::ResetAfterRequest.swallows(Direction::ToClient));
    }

    #[test]
    fn a_shot_kept_for_a_start_is_taken_only_by_it() {
        let put = Fault::ResetAfterRequestStarting(b"PUT ");
        assert!(put.shot_taken_by(b"PUT /a HTTP/1.1\r\n"));
        assert!(!put.shot_taken_by(b"GET /a HTTP/1.1\r\n"));
        assert!(!put.shot_taken_by(b"PU"));
        assert!(Fault::ResetAfterRequest.shot_taken_by(b"GET /a"));
        assert!(!Fault::None.shot_taken_by(b"PUT /a"));
    }

    #[test]
    fn only_refuse_refuses() {
        assert!(Fault::Refuse.refuses());
        assert!(!Fault::Blackhole.refuses());
        assert!(!Fault::None.refuses());
    }
}
