//! What some backends can do beyond the contract: hand a lock on in one
//! step, release after a delay, keep leases by a session, wake waiters.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::Result;
use crate::name::LockName;

use super::request::{AcquireRequest, HandOver, Lease};
use super::resumes::{NO_RESUME, Resumes, Resuming};
use super::terms::TermLog;
use super::waiters::WaiterList;
use super::wake::ReleaseWatch;

/// What a backend can do beyond the contract, each as the object that does
/// it; see [`Backend::abilities`](crate::backend::Backend::abilities).
/// Start from [`none`](Self::none) and add what the backend has.
#[derive(Clone, Copy)]
#[non_exhaustive]
pub struct Abilities<'a> {
    /// The backend's one-step hand-over: core then passes a lock to the
    /// next task of the same client that waits for it without releasing
    /// it.
    pub hand_overs: Option<&'a dyn HandOvers>,
    /// The session every grant and wait of this backend hangs on (an etcd
    /// lease for all of a client's keys): core then renews it once per
    /// extension period while anything is held or waited for, and never
    /// calls [`Backend::extend_many`](crate::backend::Backend::extend_many).
    pub session: Option<&'a dyn Session>,
    /// The backend's record of election terms: a backend that has one
    /// appends each grant whose request
    /// [`records_term`](crate::backend::AcquireRequest::records_term) to
    /// it, in the same atomic write, keeping at least
    /// [`TERMS_KEPT`](crate::backend::TERMS_KEPT) terms per name. Without
    /// one, [`Election::observe`](crate::Election::observe) is
    /// [`Error::Unsupported`](crate::Error::Unsupported).
    pub term_log: Option<&'a dyn TermLog>,
    /// The backend's reports of releases: waiters then wait for a release
    /// instead of polling.
    pub wakeups: Option<&'a dyn Wakeups>,
    /// How the backend gives a lock up later instead of now, for
    /// [`AcquireOptions::min_hold`](crate::AcquireOptions::min_hold).
    pub delayed_release: ReleaseLater<'a>,
    /// The backend's list of the waits its store keeps: core then shows
    /// each lock's waiters in [`LockClient::list`](crate::LockClient::list).
    /// Without one, the listing says the waiters are unknown
    /// ([`Waiters::Unknown`](crate::Waiters::Unknown)), never that there
    /// are none.
    pub waiters: Option<&'a dyn WaiterList>,
    /// How the backend takes up a grant made by another client, for
    /// [`LockClient::resume`](crate::LockClient::resume). Without one,
    /// resuming is [`Error::Unsupported`](crate::Error::Unsupported).
    pub resumes: Resuming<'a>,
}

/// How a backend gives a lock up later instead of now; see
/// [`Abilities::delayed_release`].
#[derive(Clone, Copy)]
#[non_exhaustive]
pub enum ReleaseLater<'a> {
    /// By an extension of the lease to the time left, which then runs out
    /// on the server: right for every backend whose
    /// [`extend_many`](crate::backend::Backend::extend_many) sets a lease's
    /// end from the server's now, shorter ones too. Core refuses it for a
    /// backend whose locks are process-bound or hang on a session, which
    /// extension does not end.
    ByExtension,
    /// By the backend's own call.
    By(&'a dyn DelayedRelease),
    /// Not at all, for the reason given, which an acquire with `min_hold`
    /// fails with at once.
    Never(&'static str),
}

impl<'a> Abilities<'a> {
    /// No abilities beyond the contract; a later release by extension.
    pub const fn none() -> Self {
        Self {
            hand_overs: None,
            session: None,
            term_log: None,
            wakeups: None,
            delayed_release: ReleaseLater::ByExtension,
            waiters: None,
            resumes: Resuming::Never(NO_RESUME),
        }
    }

    /// With a one-step hand-over.
    pub const fn with_hand_overs(mut self, hand_overs: &'a dyn HandOvers) -> Self {
        self.hand_overs = Some(hand_overs);
        self
    }

    /// With a session that keeps every grant.
    pub const fn with_session(mut self, session: &'a dyn Session) -> Self {
        self.session = Some(session);
        self
    }

    /// With a record of election terms.
    pub const fn with_term_log(mut self, term_log: &'a dyn TermLog) -> Self {
        self.term_log = Some(term_log);
        self
    }

    /// With reports of releases.
    pub const fn with_wakeups(mut self, wakeups: &'a dyn Wakeups) -> Self {
        self.wakeups = Some(wakeups);
        self
    }

    /// With a list of the waits the store keeps.
    pub const fn with_waiters(mut self, waiters: &'a dyn WaiterList) -> Self {
        self.waiters = Some(waiters);
        self
    }

    /// With a way to take up a grant by its identity.
    pub const fn with_resumes(mut self, resumes: &'a dyn Resumes) -> Self {
        self.resumes = Resuming::By(resumes);
        self
    }

    /// Without any way to take up a grant, for the reason given.
    pub const fn without_resumes(mut self, why: &'static str) -> Self {
        self.resumes = Resuming::Never(why);
        self
    }

    /// With the backend's own later release.
    pub const fn with_delayed_release(mut self, delayed_release: &'a dyn DelayedRelease) -> Self {
        self.delayed_release = ReleaseLater::By(delayed_release);
        self
    }

    /// Without any later release, for the reason given.
    pub const fn without_delayed_release(mut self, why: &'static str) -> Self {
        self.delayed_release = ReleaseLater::Never(why);
        self
    }
}

impl Default for Abilities<'_> {
    fn default() -> Self {
        Self::none()
    }
}

impl fmt::Debug for Abilities<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Abilities")
            .field("hand_overs", &self.hand_overs.is_some())
            .field("session", &self.session.is_some())
            .field("term_log", &self.term_log.is_some())
            .field("wakeups", &self.wakeups.is_some())
            .field("delayed_release", &self.delayed_release)
            .field("waiters", &self.waiters.is_some())
            .field("resumes", &self.resumes)
            .finish()
    }
}

impl fmt::Debug for ReleaseLater<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ByExtension => f.write_str("ByExtension"),
            Self::By(_) => f.write_str("By(..)"),
            Self::Never(why) => f.debug_tuple("Never").field(why).finish(),
        }
    }
}

/// A backend's own release that takes effect later; see
/// [`Abilities::delayed_release`].
#[async_trait]
pub trait DelayedRelease: Send + Sync {
    /// Gives `lease` up `remaining` from now, if it is still ours: until
    /// then the lock stays held, though nobody extends it, and then it is
    /// free without any further call. The time is judged by the server's
    /// clock where the backend has one. A backend may keep the lock longer
    /// than `remaining` (its clock counts in whole seconds, say), never
    /// shorter. Returns whether the lease was still ours. Core asks it
    /// only for an exclusive lease.
    ///
    /// Where leases end by the server's clock, an owner-checked extension
    /// of the lease to `remaining` is this call, if the backend's extension
    /// sets the new end from the server's now and honours a lease shorter
    /// than the current one.
    ///
    /// # Errors
    /// A backend error, after which the outcome is unknown: the lock then
    /// ends as the lease would have.
    ///
    /// # Cancel safety
    /// As for every [`Backend`](crate::backend::Backend) call: dropped, it either happened or not.
    async fn release_after(&self, lease: &Lease, remaining: Duration) -> Result<bool>;
}

/// A backend's one-step hand-over; see [`Abilities::hand_overs`].
#[async_trait]
pub trait HandOvers: Send + Sync {
    /// Ends `lease` and grants `next` in one atomic step, if `lease` is
    /// still ours; otherwise changes nothing. Both are exclusive. The lock
    /// is never free in between, so no other process can take it, and the
    /// new grant gets a fresh identity and a fencing token greater than
    /// the old one's.
    ///
    /// Core calls it only to pass a lock to the next task of the same
    /// client that waits for it; it never passes a lock to another process.
    ///
    /// # Errors
    /// A backend error, after which the outcome is unknown: core then
    /// releases both identities.
    ///
    /// # Cancel safety
    /// As for every [`Backend`](crate::backend::Backend) call: dropped, it either happened or not.
    async fn hand_over(&self, lease: &Lease, next: &AcquireRequest) -> Result<HandOver>;
}

/// The session a backend's grants and waits hang on; see
/// [`Abilities::session`].
///
/// A backend may replace its session (the old one ended, and the next
/// grant started another), so grants made at different times may hang on
/// different sessions. Each renewal says which session it confirmed and
/// which ended, and core keeps or ends exactly the grants of each.
#[async_trait]
pub trait Session: Send + Sync {
    /// The session `lease` was granted on; `None` when the backend cannot
    /// tell, and then no renewal confirms the grant: it runs out at the
    /// end of its lease unless released first.
    fn session_of(&self, lease: &Lease) -> Option<SessionId>;

    /// Renews the current session, if there is one, and reports the
    /// sessions found gone since the last renewal.
    ///
    /// [`Renewal::renewed`] keeps every grant of that session for a lease
    /// from when the renewal was sent, and no other grant. Every grant of
    /// a session in [`Renewal::ended`] is lost. Grants on no session named
    /// are neither kept nor lost. A renewal with no session to renew
    /// confirms nothing. The backend starts a new session for the next
    /// grant or wait.
    ///
    /// # Errors
    /// A backend error, after which the outcome is unknown: core tries
    /// again, and gives up the grants once none was confirmed for the lease
    /// minus the safety margin.
    ///
    /// # Cancel safety
    /// As for every [`Backend`](crate::backend::Backend) call: dropped, it either happened or not.
    /// A backend reports a session found gone until a renewal that returns
    /// has reported it.
    async fn renew(&self) -> Result<Renewal>;
}

/// One of a backend's sessions, by the backend's own number for it (for
/// etcd, its lease id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(pub u64);

/// What a [`Session::renew`] confirmed, and which sessions it found gone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Renewal {
    /// The session renewed, whose grants are kept for a lease from when
    /// the renewal was sent; `None` when there was none to renew.
    pub renewed: Option<SessionId>,
    /// The sessions found gone since the last renewal (by this one, or by a
    /// grant that found its session gone and started another): exactly
    /// their grants are lost.
    pub ended: Vec<SessionId>,
}

impl Renewal {
    /// A renewal of `session`.
    pub fn of(session: SessionId) -> Self {
        Self {
            renewed: Some(session),
            ended: Vec::new(),
        }
    }

    /// A renewal that found no session to renew, and confirms nothing.
    pub fn nothing() -> Self {
        Self::default()
    }

    /// This renewal, reporting also that `session` ended.
    pub fn with_ended(mut self, session: SessionId) -> Self {
        if !self.ended.contains(&session) {
            self.ended.push(session);
        }
        if self.renewed == Some(session) {
            self.renewed = None;
        }
        self
    }
}

/// A backend's reports of releases; see [`Abilities::wakeups`](crate::backend::Abilities::wakeups).
pub trait Wakeups: Send + Sync {
    /// Starts watching `name` for releases; `None` when none can be
    /// reported now (a listening connection still being checked), and the
    /// waiter then polls. A wait that got `None` asks again before each of
    /// its attempts, so this must answer cheaply.
    fn watch(&self, name: &LockName) -> Option<ReleaseWatch>;
}
