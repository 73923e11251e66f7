//! The record of an election's terms, which a backend keeps beside the
//! lock, so that an observer that looks now and then still sees every
//! leader, the short-lived ones too.
//!
//! A campaign's grant asks for it ([`AcquireRequest::records_term`]), and
//! the backend appends the term in the same atomic write that grants it.
//! A grant its holder never received is withdrawn: an attempt that timed
//! out or was cancelled after the grant, one whose answer was lost, one a
//! backend takes back itself (Redis's `wait_replicas` unconfirmed). Core
//! (or that backend) then removes its term with [`TermLog::withdraw`]
//! before the grant is released. So a term is in the record when it was
//! granted and its holder was not refused it; the one moment left is the
//! time between the grant and its withdrawal, when an observer that reads
//! the record sees the term, and reports a leader that never led. In fair
//! mode, a grant a release passed on to a waiting campaign that then gave
//! up before taking it over has its term withdrawn by the backend's own
//! end of the wait, which ends that grant ([`Backend::end_wait`]): in the
//! same write where the store allows (MongoDB, PostgreSQL in lease mode),
//! just before the release otherwise (PostgreSQL in advisory mode). Two
//! kinds of grant still leave their term: one whose answer was lost on a
//! backend that keeps the grant only in that answer (the file backend,
//! PostgreSQL in advisory mode), where nothing names the term any more;
//! and, in fair mode, one passed on to a waiter that died before taking it
//! over, whose lease runs out with nobody to end its wait (MongoDB,
//! PostgreSQL).
//!
//! The record keeps the last [`TERMS_KEPT`] terms; each names the term
//! before it, so that an observer that fell further behind can tell that
//! it did. A withdrawn term's successor takes over its `previous`, so the
//! gap it leaves is not taken for forgotten terms.
//!
//! [`AcquireRequest::records_term`]: crate::backend::AcquireRequest::records_term
//! [`Backend::end_wait`]: crate::backend::Backend::end_wait

use std::time::Duration;

use async_trait::async_trait;

use super::request::Lease;
use crate::error::Result;
use crate::info::Holder;
use crate::name::LockName;

/// How many terms of each election a backend keeps, at least.
pub const TERMS_KEPT: usize = 32;

/// One term of an election, as its backend recorded it with the grant.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Term {
    /// The term: the grant's fencing token.
    pub term: u64,
    /// The term recorded just before this one, `None` for the first the
    /// backend recorded for the name.
    pub previous: Option<u64>,
    /// Who was granted it, with the value it campaigned with as the label.
    pub holder: Holder,
}

impl Term {
    /// A term, as a backend read it from its record.
    pub fn new(term: u64, previous: Option<u64>, holder: Holder) -> Self {
        Self {
            term,
            previous,
            holder,
        }
    }
}

/// A backend's record of election terms; see [`Abilities::term_log`].
///
/// [`Abilities::term_log`]: crate::backend::Abilities::term_log
#[async_trait]
pub trait TermLog: Send + Sync {
    /// The terms of `name` the record still keeps whose term is greater
    /// than `after`, oldest first; all it keeps for `after = 0`. Read
    /// within `limit`, as every administrative call (see the
    /// [`Backend`](crate::backend::Backend#time-budget)'s time budget).
    ///
    /// # Errors
    /// A backend error.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes no term, and may be called again.
    async fn terms_after(&self, name: &LockName, after: u64, limit: Duration) -> Result<Vec<Term>>;

    /// Removes the term `lease` was granted with, if the record still
    /// keeps it and it was recorded for `holder`: a term of the same
    /// number recorded for anyone else stays. The term after it, if the
    /// record keeps one, takes the removed term's `previous`.
    ///
    /// Core calls it for a campaign's grant that its holder never
    /// received, before releasing that grant, while the grant still holds
    /// the lock (unless its lease ran out meanwhile). A leader that steps
    /// down keeps its term: core never calls it for a grant it handed over.
    ///
    /// The term is `lease.fencing_token`; 0 when the grant's answer never
    /// came, and then it is the term of the grant that holds `lease.name`
    /// under `lease.id`, if one still does (a backend that cannot have
    /// such a grant, or cannot find its term, removes nothing).
    ///
    /// # Errors
    /// A backend error; the term then stays in the record.
    ///
    /// # Cancel safety
    /// Dropping the future may leave the term removed or not; calling it
    /// again is harmless.
    async fn withdraw(&self, lease: &Lease, holder: &Holder) -> Result<()>;
}

/// Removes the term `term`, recorded for `holder`, from `record`, giving its `previous` to the term after it: the step every
/// backend that edits its record in memory takes for
/// [`TermLog::withdraw`]. Returns whether it removed one.
pub fn withdraw_term(record: &mut Vec<Term>, term: u64, holder: &Holder) -> bool {
    let Some(at) = record
        .iter()
        .position(|kept| kept.term == term && kept.holder == *holder)
    else {
        return false;
    };
    let removed = record.remove(at);
    if let Some(next) = record.get_mut(at) {
        next.previous = removed.previous;
    }
    true
}

/// What a record read after `after` says about the terms in between: the
/// terms to report, in order, and the terms it no longer keeps, if any
/// fell between `after` and the first it kept.
pub(crate) fn continuing(after: u64, mut terms: Vec<Term>) -> (Vec<Term>, Option<Forgotten>) {
    terms.retain(|term| term.term > after);
    terms.sort_by_key(|term| term.term);
    let forgotten = terms.first().and_then(|first| {
        // The term before the first kept one was newer than `after`: the
        // terms from it back to `after` fell out of the record.
        let previous = first.previous?;
        (previous > after).then_some(Forgotten {
            after,
            before: first.term,
        })
    });
    (terms, forgotten)
}

/// Terms an observer missed because the record no longer kept them: all
/// those greater than `after` and less than `before`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Forgotten {
    pub(crate) after: u64,
    pub(crate) before: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn term(term: u64, previous: Option<u64>) -> Term {
        Term::new(term, previous, Holder::this_process(None))
    }

    #[test]
    fn terms_that_follow_on_are_reported_in_order() {
        let (terms, forgotten) =
            continuing(3, vec![term(9, Some(5)), term(5, Some(3)), term(2, None)]);
        assert_eq!(terms.iter().map(|t| t.term).collect::<Vec<_>>(), vec![5, 9]);
        assert_eq!(forgotten, None);
    }

    #[test]
    fn a_record_that_moved_past_the_last_seen_term_says_so() {
        let (terms, forgotten) = continuing(3, vec![term(9, Some(7)), term(12, Some(9))]);
        assert_eq!(terms.len(), 2);
        assert_eq!(
            forgotten,
            Some(Forgotten {
                after: 3,
                before: 9
            })
        );
    }

    #[test]
    fn a_withdrawn_term_gives_its_previous_to_the_next_and_leaves_no_gap() {
        // Term 7 was withdrawn after 9 was granted behind it.
        let mut record = vec![term(3, None), term(7, Some(3)), term(9, Some(7))];
        let other = Holder::this_process(Some("someone else"));
        assert!(!withdraw_term(&mut record, 7, &other), "not its term");
        assert!(withdraw_term(&mut record, 7, &Holder::this_process(None)));
        let kept: Vec<_> = record.iter().map(|t| (t.term, t.previous)).collect();
        assert_eq!(kept, vec![(3, None), (9, Some(3))]);
        // An observer that last saw 3 goes on to 9, no gap.
        let (terms, forgotten) = continuing(3, record.clone());
        assert_eq!((terms.len(), forgotten), (1, None));
        // One that saw 7 before it went goes on to 9 too.
        assert_eq!(continuing(7, record).1, None);
    }

    #[test]
    fn a_term_seen_outside_the_record_is_no_gap() {
        // The observer's first look found a holder that never campaigned.
        let (terms, forgotten) = continuing(8, vec![term(9, Some(4))]);
        assert_eq!(terms.len(), 1);
        assert_eq!(forgotten, None);
    }
}
