//! The sequential specifications: a lease lock, and a fenced register.
//! The crate's docs state the rules; this module is them, as code.

use crate::history::{Acquired, Call, Done, Op, Read};

/// What one operation does to its object, once linearized. An operation
/// that constrains nothing (a refused acquire, a refused release, an
/// unanswered acquire or plain read) has no step: it is left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// A grant of `token`.
    Grant(u64),
    /// A release of `token` that took effect.
    Release(u64),
    /// A release of `token` that may have taken effect.
    MaybeRelease(u64),
    /// A loss report for `token`.
    Lost(u64),
    /// An extension of `token` that the store confirmed.
    Extend(u64),
    /// A forced release, which ends whatever grant holds the lock.
    ForceRelease,
    /// A forced release that may have taken effect.
    MaybeForceRelease,
    /// A write of `value` with `token` that was accepted.
    Write { token: u64, value: u64 },
    /// A write that may have been accepted.
    MaybeWrite { token: u64, value: u64 },
    /// A fenced write or read turned away.
    Refused(u64),
    /// A fenced read with `token` that returned `value`.
    FencedRead { token: u64, value: u64 },
    /// A fenced read that may have been accepted.
    MaybeFencedRead(u64),
    /// A plain read that returned `value`.
    Read(u64),
}

impl Step {
    /// The token of a step that must take effect and needs its token at
    /// least as high as the state's [`State::floor`]: a grant, an accepted
    /// write or fenced read.
    pub(crate) fn needed_token(self) -> Option<u64> {
        match self {
            Step::Grant(token) | Step::Write { token, .. } | Step::FencedRead { token, .. } => {
                Some(token)
            }
            _ => None,
        }
    }

    /// The step of `op`, if it constrains anything.
    pub(crate) fn of(op: &Op) -> Option<Step> {
        match op.call {
            Call::Acquire { outcome, .. } => match outcome {
                Acquired::Granted { token } => Some(Step::Grant(token)),
                // A refusal is never wrong: a grant whose answer was lost
                // may hold the lock. An unanswered acquire gave nobody a
                // token; had it been granted, it could only have moved
                // the token counter on, which no later check needs.
                Acquired::NotGranted | Acquired::Unknown => None,
            },
            Call::Release { token, outcome, .. } => match outcome {
                Done::Ok => Some(Step::Release(token)),
                Done::Unknown => Some(Step::MaybeRelease(token)),
                // The lease may have expired, or been forced away.
                Done::Refused => None,
            },
            Call::Lost { token, .. } => Some(Step::Lost(token)),
            Call::Extend { token, outcome, .. } => match outcome {
                Done::Ok => Some(Step::Extend(token)),
                // A refused extension is never wrong (the lease may have
                // expired), and an unanswered one changed nothing a later
                // step can see.
                Done::Refused | Done::Unknown => None,
            },
            Call::ForceRelease { outcome, .. } => Some(match outcome {
                // Whether it found a grant or not, none is left after it:
                // one it did not find had expired.
                Done::Ok | Done::Refused => Step::ForceRelease,
                Done::Unknown => Step::MaybeForceRelease,
            }),
            // Validities are checked apart, by `exclusion`: they are
            // intervals on the one clock, not steps to place.
            Call::Held { .. } => None,
            Call::FencedWrite {
                token,
                value,
                outcome,
                ..
            } => Some(match outcome {
                Done::Ok => Step::Write { token, value },
                Done::Refused => Step::Refused(token),
                Done::Unknown => Step::MaybeWrite { token, value },
            }),
            Call::FencedRead {
                token: Some(token),
                outcome,
                ..
            } => Some(match outcome {
                Read::Value(value) => Step::FencedRead { token, value },
                Read::Refused => Step::Refused(token),
                Read::Unknown => Step::MaybeFencedRead(token),
            }),
            Call::FencedRead {
                token: None,
                outcome,
                ..
            } => match outcome {
                Read::Value(value) => Some(Step::Read(value)),
                Read::Refused | Read::Unknown => None,
            },
        }
    }
}

/// A lock's or a register's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum State {
    /// A lock: the last token granted, and the lease that a release may
    /// still end (the last grant, until it is released).
    Lock {
        last: Option<u64>,
        holder: Option<u64>,
    },
    /// A fenced register: the highest token it has accepted, and its
    /// value.
    Register { highest: Option<u64>, value: u64 },
}

/// Where a step may lead: one state, two (a step that may or may not
/// have taken effect), or none, with why.
pub(crate) type Next = Result<[Option<State>; 2], String>;

/// The value of a register nothing has written to.
pub(crate) const INITIAL_VALUE: u64 = 0;

impl State {
    pub(crate) fn lock() -> State {
        State::Lock {
            last: None,
            holder: None,
        }
    }

    pub(crate) fn register() -> State {
        State::Register {
            highest: None,
            value: INITIAL_VALUE,
        }
    }

    /// The lowest token a step that [needs one](Step::needed_token) may
    /// still have. It never falls as steps are taken, so a step needing a
    /// lower one can never take effect again.
    pub(crate) fn floor(self) -> u64 {
        match self {
            State::Lock { last, .. } => last.map_or(0, |last| last.saturating_add(1)),
            State::Register { highest, .. } => highest.unwrap_or(0),
        }
    }

    /// Where `step` leads from this state.
    pub(crate) fn step(self, step: Step) -> Next {
        match self {
            State::Lock { last, holder } => lock_step(last, holder, step),
            State::Register { highest, value } => register_step(highest, value, step),
        }
    }
}

fn lock_step(last: Option<u64>, holder: Option<u64>, step: Step) -> Next {
    let lock = |last, holder| Some(State::Lock { last, holder });
    match step {
        Step::Grant(token) => match last {
            Some(last) if token <= last => Err(format!(
                "token {token} is granted after token {last}: every grant's token must be \
                 above the last one's"
            )),
            // Any lease before it may have expired: a grant ends it.
            _ => Ok([lock(Some(token), Some(token)), None]),
        },
        Step::Release(token) if holder == Some(token) => Ok([lock(last, None), None]),
        Step::Release(token) => Err(match holder {
            Some(holder) if holder != token => format!(
                "the release of token {token} took effect after token {holder} was \
                 granted: it ended someone else's lease, or the two leases overlapped"
            ),
            _ => format!(
                "the release of token {token} took effect, but that lease had been \
                 released already or never granted"
            ),
        }),
        Step::MaybeRelease(token) => Ok([
            lock(last, holder),
            (holder == Some(token)).then_some(State::Lock { last, holder: None }),
        ]),
        Step::Extend(token) if holder == Some(token) => Ok([lock(last, holder), None]),
        Step::Extend(token) => Err(match holder {
            Some(holder) => format!(
                "the extension of token {token} took effect after token {holder} was \
                 granted: it kept a lease that another grant had ended"
            ),
            None => format!(
                "the extension of token {token} took effect after that lease was \
                 released, by its holder or by force, or was never granted"
            ),
        }),
        Step::ForceRelease => Ok([lock(last, None), None]),
        Step::MaybeForceRelease => Ok([lock(last, holder), lock(last, None)]),
        Step::Lost(token) if last.is_some_and(|last| token <= last) => {
            Ok([lock(last, holder), None])
        }
        Step::Lost(token) => Err(format!(
            "a loss of token {token} is reported before that token was granted"
        )),
        _ => Err(format!("{step:?} is not an operation on a lock")),
    }
}

fn register_step(highest: Option<u64>, current: u64, step: Step) -> Next {
    // A token at least as high as every token accepted so far: the same
    // holder's operations share their token.
    let fresh = |token: u64| highest.is_none_or(|highest| token >= highest);
    let register = |highest, value| Some(State::Register { highest, value });
    let stale = |token: u64, what: &str| {
        format!(
            "{what} with token {token} is accepted after token {} was: a token below \
             the highest accepted must be refused",
            highest.unwrap_or_default()
        )
    };
    match step {
        Step::Write { token, .. } | Step::FencedRead { token, .. } if !fresh(token) => {
            Err(stale(token, "an operation"))
        }
        Step::Write { token, value } => Ok([register(Some(token), value), None]),
        Step::MaybeWrite { token, value } => Ok([
            register(highest, current),
            fresh(token).then_some(State::Register {
                highest: Some(token),
                value,
            }),
        ]),
        Step::Refused(token) if fresh(token) => Err(format!(
            "an operation with token {token} is refused, yet no higher token has been \
             accepted{}",
            highest.map_or(String::new(), |highest| format!(
                " (the highest is {highest})"
            ))
        )),
        Step::Refused(_) => Ok([register(highest, current), None]),
        Step::FencedRead { token, value } if value == current => {
            Ok([register(Some(token), current), None])
        }
        Step::Read(value) if value == current => Ok([register(highest, current), None]),
        Step::FencedRead { value, .. } | Step::Read(value) => Err(format!(
            "a read returns {value} where the last accepted write left {current}"
        )),
        Step::MaybeFencedRead(token) => Ok([
            register(highest, current),
            fresh(token).then_some(State::Register {
                highest: Some(token),
                value: current,
            }),
        ]),
        _ => Err(format!("{step:?} is not an operation on a resource")),
    }
}
