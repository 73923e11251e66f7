//! The one etcd lease per backend that every key of this client hangs on.
//!
//! etcd leases are whole seconds, and a key written on a lease does not
//! renew it. Core counts a new grant as confirmed for a lease from when it
//! was asked for, so the etcd lease is granted a second longer than the
//! client's lease, rounded up to whole seconds ([`ttl_for`]), and renewed
//! before a grant or a wait's try whenever its last confirmation is older
//! than that padding. Then the server never lets a key go before its
//! holder gives it up, and a crashed holder's keys go at most the lease
//! and a second after its last renewal. A client that takes a lock less
//! often than once a second so pays one keepalive with each grant.
//!
//! A session that ends (it expired, or was revoked) is replaced by the
//! next grant's. Each grant keeps the session it was made on, so the
//! keeper's renewals keep exactly the grants of the session they renewed,
//! and the sessions found gone are reported, once, to end exactly theirs.

use std::time::Duration;

use crate::raw::Client;
use distlock_core::backend::Renewal;
use distlock_core::{Error, Result};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::error::{from_etcd, is_lease_not_found};

/// The live session, as this process knows it.
#[derive(Debug, Clone, Copy)]
struct Session {
    /// etcd's lease id.
    id: i64,
    /// The client lease this session serves.
    lease: Duration,
    /// The TTL etcd granted, at least [`ttl_for`] of the lease.
    ttl: Duration,
    /// When the request behind the last confirmation was sent.
    confirmed: Instant,
}

impl Session {
    /// How old a confirmation may be before a grant needs a fresh one.
    fn padding(&self) -> Duration {
        self.ttl.saturating_sub(self.lease)
    }
}

/// The etcd lease a grant is made under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SessionId(pub(crate) i64);

impl SessionId {
    /// As core knows it. etcd's lease ids are positive, so the number is
    /// the same.
    pub(crate) fn for_core(self) -> distlock_core::backend::SessionId {
        distlock_core::backend::SessionId(u64::try_from(self.0).unwrap_or_default())
    }
}

/// Keeps the session: created on first use, renewed by core's keeper
/// through [`renew`](Self::renew), replaced once etcd says it is gone.
pub(crate) struct Sessions {
    client: Client,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    current: Option<Session>,
    /// Sessions found gone, until a renewal that returns reports them.
    ended: Vec<SessionId>,
}

impl State {
    /// Notes that etcd no longer has `id`.
    fn gone(&mut self, id: SessionId) {
        if self.current.is_some_and(|session| session.id == id.0) {
            self.current = None;
        }
        if !self.ended.contains(&id) {
            self.ended.push(id);
        }
    }
}

/// etcd's TTL for a client lease: the lease rounded up to whole seconds,
/// and one more, so that a grant's key outlives the lease core counts for
/// it from a confirmation up to a second old.
pub(crate) fn ttl_for(lease: Duration) -> i64 {
    let secs = lease.as_secs() + u64::from(lease.subsec_nanos() > 0) + 1;
    i64::try_from(secs).unwrap_or(i64::MAX)
}

/// The TTL of the etcd lease that carries the keys of clients with leases
/// of `lease`: how long after its last renewal a crashed client's locks
/// can outlive it.
pub fn session_ttl(lease: Duration) -> Duration {
    Duration::from_secs(u64::try_from(ttl_for(lease)).unwrap_or(u64::MAX))
}

/// Refuses leases etcd cannot keep: under a second.
pub(crate) fn check_lease(lease: Duration) -> Result<()> {
    if lease < Duration::from_secs(1) {
        return Err(Error::config(
            "lease",
            format!("etcd leases are whole seconds: a lease of {lease:?} is under the 1 s minimum"),
        ));
    }
    Ok(())
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions").finish_non_exhaustive()
    }
}

impl Sessions {
    pub(crate) fn new(client: Client) -> Self {
        Self {
            client,
            state: Mutex::new(State::default()),
        }
    }

    /// The session for a grant or wait with this client `lease`, created or
    /// confirmed first when needed.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a lease under a second, or another
    /// lease than the session's (one backend serves one lease length); a
    /// backend error.
    ///
    /// # Cancel safety
    /// Dropped while it creates a session, it leaves an etcd lease with no
    /// keys, which expires by itself.
    pub(crate) async fn ensure(&self, lease: Duration) -> Result<SessionId> {
        check_lease(lease)?;
        let mut state = self.state.lock().await;
        if let Some(session) = state.current.as_mut() {
            if session.lease != lease {
                return Err(Error::config(
                    "lease",
                    format!(
                        "this etcd backend's session serves leases of {:?}; open another backend for leases of {lease:?}",
                        session.lease
                    ),
                ));
            }
            if session.confirmed.elapsed() <= session.padding() {
                return Ok(SessionId(session.id));
            }
            let sent = Instant::now();
            if keep_alive(&self.client, session.id).await? {
                session.confirmed = sent;
                return Ok(SessionId(session.id));
            }
            let id = SessionId(session.id);
            state.gone(id);
        }
        let sent = Instant::now();
        let granted = self
            .client
            .lease_grant(ttl_for(lease))
            .await
            .map_err(|e| from_etcd("granting a lease", e))?;
        let ttl = Duration::from_secs(u64::try_from(granted.ttl).unwrap_or(0));
        let session = Session {
            id: granted.id,
            lease,
            ttl: ttl.max(lease),
            confirmed: sent,
        };
        state.current = Some(session);
        Ok(SessionId(session.id))
    }

    /// Renews the session with one keepalive, and reports the sessions
    /// found gone since the last renewal that returned. With no session,
    /// nothing is renewed.
    pub(crate) async fn renew(&self) -> Result<Renewal> {
        let current = self.state.lock().await.current;
        let mut renewal = Renewal::nothing();
        if let Some(session) = current {
            let id = SessionId(session.id);
            if self.confirm(id).await? {
                renewal = Renewal::of(id.for_core());
            }
        }
        let ended = std::mem::take(&mut self.state.lock().await.ended);
        Ok(ended
            .into_iter()
            .fold(renewal, |renewal, id| renewal.with_ended(id.for_core())))
    }

    /// Renews `id` with one keepalive: whether etcd still has it.
    pub(crate) async fn confirm(&self, id: SessionId) -> Result<bool> {
        let sent = Instant::now();
        let alive = keep_alive(&self.client, id.0).await?;
        let mut state = self.state.lock().await;
        if !alive {
            state.gone(id);
        } else if let Some(now) = state.current.as_mut().filter(|now| now.id == id.0) {
            now.confirmed = now.confirmed.max(sent);
        }
        Ok(alive)
    }

    /// Notes that `id` is gone, after etcd said so.
    pub(crate) async fn forget(&self, id: SessionId) {
        self.state.lock().await.gone(id);
    }

    /// Revokes the session, if there is one: its keys go at once.
    ///
    /// # Errors
    /// A backend error; etcd then ends the session at the end of its TTL.
    ///
    /// # Cancel safety
    /// Dropped, the session is either revoked or left to expire.
    pub(crate) async fn close(&self) -> Result<()> {
        let Some(session) = self.state.lock().await.current else {
            return Ok(());
        };
        let id = SessionId(session.id);
        match self.client.lease_revoke(id.0).await {
            Ok(_) => {}
            Err(error) => {
                let error = from_etcd("revoking the session's lease", error);
                // Already gone: expired, or revoked by an earlier try
                // whose answer was lost.
                if !is_lease_not_found(&error) {
                    return Err(error);
                }
            }
        }
        self.state.lock().await.gone(id);
        Ok(())
    }
}

/// One keepalive: whether etcd still has the lease.
async fn keep_alive(client: &Client, id: i64) -> Result<bool> {
    // Opening the stream sends the first keepalive and waits for its
    // answer; the stream is closed once it came.
    match client.lease_keep_alive(id).await {
        // etcd answers a lease it no longer has with a TTL of zero or less.
        Ok((_, answer)) => Ok(answer.ttl > 0),
        Err(error) => Err(from_etcd("renewing the session's lease", error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_are_padded_whole_seconds() {
        assert_eq!(ttl_for(Duration::from_secs(1)), 2);
        assert_eq!(ttl_for(Duration::from_secs(2)), 3);
        assert_eq!(ttl_for(Duration::from_millis(2500)), 4);
        assert_eq!(ttl_for(Duration::from_secs(5)), 6);
        assert_eq!(ttl_for(Duration::from_secs(30)), 31);
        assert!(check_lease(Duration::from_millis(999)).is_err());
        assert!(check_lease(Duration::from_secs(1)).is_ok());
    }
}
