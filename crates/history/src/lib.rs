//! A checker for histories of a lease lock and the resources its fencing
//! tokens protect: of exclusion (no two holders valid at once) and of
//! linearizability.
//!
//! A [`History`] holds operations: who made each, when it was invoked and
//! when it completed (nanoseconds on one monotonic clock shared by every
//! process), and what it returned. [`check`] asks whether some order of
//! them, each placed at an instant between its invocation and its
//! completion, is a run of the model below; an operation whose answer
//! never arrived may take effect at any instant after its invocation, or
//! never. This is the question Porcupine, Knossos and Elle answer for
//! registers and queues, asked of a lock.
//!
//! ```
//! use distlock_history::{Acquired, Call, Done, History, Op, check};
//!
//! let acquire = |token| Call::Acquire { name: "jobs".into(), outcome: Acquired::Granted { token } };
//! let write = |token, value, outcome| Call::FencedWrite {
//!     resource: "ledger".into(), token, value, outcome,
//! };
//! let history = History::from_ops([
//!     Op::new(1, 0, 10, acquire(1)),
//!     Op::new(2, 20, 30, acquire(2)), // 1's lease had expired
//!     Op::new(2, 40, 50, write(2, 7, Done::Ok)),
//!     Op::new(1, 60, 70, write(1, 8, Done::Ok)), // stale, yet accepted
//! ])?;
//! let report = check(&history);
//! assert!(!report.passed());
//! println!("{report}");
//! # Ok::<(), distlock_history::HistoryError>(())
//! ```
//!
//! # The model
//!
//! Each lock name and each resource is an object of its own, checked on
//! its own (linearizability is compositional: a history is linearizable
//! when each object's part of it is).
//!
//! **A lock** remembers the last token it granted, and the lease a release
//! may still end (the last grant, until it is released).
//!
//! - *Acquire → granted `t`*: `t` must be above every token granted before
//!   it. The grant may come while an earlier lease is unreleased: that
//!   lease may have expired, and a grant ends it.
//! - *Release `t` → ok*: `t` must be the last grant, and not released yet.
//!   So a grant to B between A's grant and A's successful release is a
//!   violation (the leases overlapped, or A's release ended B's lease), as
//!   is a second successful release of one lease.
//! - *Extend `t` → ok*: `t` must be the last grant, not released. An
//!   extension is owner-checked as a release is, so one that succeeds
//!   after another grant, a release, or a forced release kept a lease
//!   that had ended.
//! - *Release by force* (an administrator's): ends whatever grant holds
//!   the lock, whether it answered that it found one or not (one it did
//!   not find had expired).
//! - *Lost `t`* (the client's report that its lease is gone): `t` must have
//!   been granted. It changes nothing else: a loss found on the client's
//!   clock fires before the server's lease ends, so a release after it may
//!   still succeed, and the lock may have been free long before it.
//! - Constraining nothing: a refused acquire (a grant whose answer was lost
//!   may hold the lock), an unanswered acquire (it gave nobody a token), a
//!   refused release or extension (the lease may have expired).
//!
//! The lock model never assumes how long a lease lasts: a lease ends by
//! time on the server's clock, which the history does not see, so "the
//! holder still held it" is concluded only from what proves it, a
//! successful release. What a holder knew of its own lease is in its
//! validities, checked next.
//!
//! **Exclusion.** A *validity* ([`Call::Held`]) is the span in which a
//! holder could act on its lease: from the grant's answer to the earliest
//! of its release being sent, `lost()` firing, and its own deadline (the
//! send time of its last confirmed grant or extension, plus the lease,
//! less the safety margin). Its end is the holder's promise to stop, so
//! the rule is plain: validities of a lock that exclude each other never
//! overlap. An exclusive validity (a writer's) overlaps any other; a
//! reader's overlaps a writer's; a permit of a semaphore of `N` overlaps
//! when `N` others are valid. So a grant may follow an unreleased lease
//! only once that lease's validity has ended. Validities that meet at one
//! instant do not overlap. A validity's start is its grant's answer, not
//! the instant the server granted it, which can only be earlier: an
//! overlap found is one the holders could have acted in. Each overlap is
//! reported as an [`Overlap`]; a history with one does not pass.
//!
//! **A fenced resource** (a register holding a `u64`, 0 before any write)
//! remembers the highest token it has accepted, and its value.
//!
//! - *Write `v` with `t` → accepted* iff `t` ≥ the highest accepted token;
//!   the register then holds `v` and `t` is its highest. *→ refused* iff
//!   `t` is below it.
//! - *Read with `t`* (a fenced read) follows the same rule, and an accepted
//!   one raises the highest token as a write does; it returns the value.
//!   *A plain read* (no token) returns the value.
//!
//! The rule is ≥, not >, because a holder makes several operations with
//! its one token (the chaos campaign's holders read, then write), and it is
//! the rule of the campaign's fenced counter. Under it, once B's token
//! (above A's) has been accepted, every operation with A's is refused; an
//! operation of A's after B's grant but before B touched the resource is
//! accepted, and rightly so: to the resource, A's work came first.
//!
//! What the checker finds, then: two holders valid at once, tokens that do
//! not increase from grant to grant (a re-grant of a token lets the
//! previous holder's writes be accepted beside the new holder's), a
//! successful release or extension of a lease that another grant, or a
//! release by force, had ended, a stale
//! operation accepted, a fresh one refused, and a read that returns a
//! value no accepted write left there (never written, or overwritten). Two
//! accepted writes whose tokens disagree with their real-time order are
//! one of these.
//!
//! # Cost
//!
//! The search is Wing and Gong's, with Lowe's memoization: a cache of every
//! (set of linearized operations, state) reached, so that no configuration
//! is explored twice, and it drops at once any configuration from which an
//! operation still to place never can be (its token is below one already
//! taken effect). Exclusion is a sweep of each lock's validities, in the
//! order they began, and costs little. The search's cost grows with how many operations overlap in
//! time, not with the history's length; operations that never answered
//! overlap every later one, so many of them on one object make it slow.
//! [`check_within`] bounds the moves, and reports an object it could not
//! decide.

mod check;
mod error;
mod exclusion;
mod history;
mod model;
mod search;

pub use check::{DEFAULT_MAX_MOVES, Report, Violation, check, check_within};
pub use error::HistoryError;
pub use exclusion::Overlap;
pub use history::{Acquired, Call, Done, History, Op, Read, Share, Subject};
