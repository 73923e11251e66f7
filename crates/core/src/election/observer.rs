//! Following an election's leaders, term by term.

use std::collections::VecDeque;
use std::time::Duration;

use super::{Election, Leader};
use crate::backend::terms::{TERMS_KEPT, Term, continuing};
use crate::error::{Error, Result};

/// How often [`Observer::next`] looks for a new leader on a backend that
/// reports no releases, and at most after one that does.
const LOOK_EVERY: Duration = Duration::from_millis(250);

/// The first pause when a release was reported but no new leader is seen
/// yet: the campaigners it woke are still asking.
const FIRST_RECHECK: Duration = Duration::from_millis(2);

/// Follows an election's leaders, from [`Election::observe`].
///
/// Each call of [`next`](Self::next) returns the next leader, in term
/// order, none skipped: the backend records each term in the write that
/// grants it ([`Abilities::term_log`](crate::backend::Abilities::term_log)), and the
/// observer reads the terms after the last it returned. A grant its
/// campaign never received has its term withdrawn before it is released
/// ([`TermLog::withdraw`](crate::backend::TermLog::withdraw)), so only a look in
/// between reports its leader, who never led. So a term that
/// began and ended between two looks is still returned, with the value it
/// campaigned with. It looks right after a release on a backend that
/// reports releases (then a new leader shows within a few round trips of
/// its election), and every 250 ms otherwise.
///
/// A backend keeps the last [`TERMS_KEPT`] terms of each election; an
/// observer that falls further behind is told so once, by
/// [`Error::TermsForgotten`], and goes on with the terms still kept.
/// Terms are those won by [`Election::campaign`]: a plain acquire of the
/// election's name is no term.
#[derive(Debug)]
pub struct Observer {
    election: Election,
    /// The last term returned, or where following began.
    last_term: Option<u64>,
    /// Terms read from the record and not yet returned, oldest first.
    pending: VecDeque<Term>,
}

impl Observer {
    /// Follows `election` from its current leader.
    pub(super) fn new(election: Election) -> Self {
        Self {
            election,
            last_term: None,
            pending: VecDeque::new(),
        }
    }

    /// The next leader: the current one at the first call (or the first
    /// elected after it, when nobody leads), then each one after the last
    /// returned, in term order.
    ///
    /// # Errors
    /// [`Error::Unsupported`] on a backend that keeps no record of terms
    /// (Redis in quorum mode, memcached); [`Error::TermsForgotten`], once,
    /// when terms after the last one returned are no longer kept; what
    /// [`Election::leader`] returns.
    ///
    /// # Cancel safety
    /// Cancel safe: a leader found is returned by a later call, never
    /// lost.
    pub async fn next(&mut self) -> Result<Leader> {
        let election = &self.election;
        let backend = election.client.backend();
        let Some(log) = backend.abilities().term_log else {
            return Err(Error::Unsupported(
                "this backend keeps no record of an election's terms, so an observer could \
                 miss a leader; ask Election::leader instead"
                    .into(),
            ));
        };
        let mut recheck = FIRST_RECHECK;
        let mut just_released = false;
        loop {
            if let Some(term) = self.pending.pop_front() {
                self.last_term = Some(term.term);
                return Ok(Leader::of(term));
            }
            // Watched before the look, so that a release after it wakes us.
            let watch = backend
                .abilities()
                .wakeups
                .and_then(|wakeups| wakeups.watch(&election.name));
            match self.last_term {
                None => {
                    // Read before the leader, so that a term that begins
                    // after this look is after the newest one read.
                    let kept = election.terms_after(log, 0).await?;
                    if let Some(leader) = election.leader().await? {
                        self.last_term = Some(leader.term);
                        return Ok(leader);
                    }
                    self.last_term = Some(kept.iter().map(|term| term.term).max().unwrap_or(0));
                }
                Some(last) => {
                    let (terms, forgotten) =
                        continuing(last, election.terms_after(log, last).await?);
                    self.pending.extend(terms);
                    if let Some(forgotten) = forgotten {
                        return Err(Error::TermsForgotten {
                            name: election.name.to_string(),
                            after: forgotten.after,
                            before: forgotten.before,
                            kept: TERMS_KEPT,
                        });
                    }
                    if !self.pending.is_empty() {
                        continue;
                    }
                }
            }
            if just_released && recheck < LOOK_EVERY {
                // A release was seen and the next leader is being elected:
                // look again soon, then less and less often.
                tokio::time::sleep(recheck).await;
                recheck *= 2;
                continue;
            }
            just_released = false;
            recheck = FIRST_RECHECK;
            match watch {
                Some(mut watch) => {
                    just_released = tokio::time::timeout(LOOK_EVERY, watch.released())
                        .await
                        .is_ok();
                }
                None => tokio::time::sleep(LOOK_EVERY).await,
            }
        }
    }
}
