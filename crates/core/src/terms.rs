//! The record of an election's terms, which a backend keeps beside the
//! lock, so that an observer that looks now and then still sees every
//! leader, the short-lived ones too.
//!
//! A campaign's grant asks for it ([`AcquireRequest::records_term`]), and
//! the backend appends the term in the same atomic write that grants it:
//! a term is in the record exactly when it was granted. The record keeps
//! the last [`TERMS_KEPT`] terms; each names the term before it, so that
//! an observer that fell further behind can tell that it did.
//!
//! [`AcquireRequest::records_term`]: crate::backend::AcquireRequest::records_term

use async_trait::async_trait;

use crate::backend::Holder;
use crate::error::Result;
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

/// A backend's record of election terms; see [`Backend::term_log`].
///
/// [`Backend::term_log`]: crate::Backend::term_log
#[async_trait]
pub trait TermLog: Send + Sync {
    /// The terms of `name` the record still keeps whose term is greater
    /// than `after`, oldest first; all it keeps for `after = 0`.
    async fn terms_after(&self, name: &LockName, after: u64) -> Result<Vec<Term>>;
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
    fn a_term_seen_outside_the_record_is_no_gap() {
        // The observer's first look found a holder that never campaigned.
        let (terms, forgotten) = continuing(8, vec![term(9, Some(4))]);
        assert_eq!(terms.len(), 1);
        assert_eq!(forgotten, None);
    }
}
