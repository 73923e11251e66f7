//! An election's record of terms: one key per name (see `keys.rs` for
//! where), holding its last [`TERMS_KEPT`] terms, written by a campaign's
//! grant in the grant's own transaction.
//!
//! A term is the grant's fencing token: its key's create revision. A
//! campaign that finds the name free creates its key and rewrites the
//! record in one transaction, whose revision is not known until etcd runs
//! it; so the record then stores the newest term's holder without its
//! number, and the newest term is the record's own mod revision. A
//! campaign served in fair mode's queue records its term when it takes its
//! grant over, later than its key was created, so it stores the number
//! too. The next grant, guarded by a compare on the record's mod revision,
//! files the newest term under its number and puts its own holder in its
//! place. A compare that fails (another campaign granted meanwhile) writes
//! nothing.

use distlock_core::backend::{TERMS_KEPT, Term, withdraw_term};
use distlock_core::{Error, Holder, Result};
use serde::{Deserialize, Serialize};

use crate::raw::etcdserverpb::Compare;
use crate::raw::etcdserverpb::compare::CompareResult;
use crate::raw::mvccpb::KeyValue;
use crate::requests::{create_revision, mod_revision};

/// What the key holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Stored {
    /// The term before the oldest kept, once older ones were dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    before: Option<u64>,
    /// The kept terms before the newest, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    earlier: Vec<Filed>,
    /// The newest term's holder.
    newest: Holder,
    /// The newest term, when written after its grant's key (a take-over in
    /// fair mode); otherwise it is the key's mod revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    newest_term: Option<u64>,
}

/// A term filed under its number.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Filed {
    term: u64,
    holder: Holder,
}

/// A record as read: its contents, its newest term, and the revision
/// that last wrote it.
#[derive(Debug, Clone)]
struct Read {
    stored: Stored,
    newest: u64,
    written_at: i64,
}

/// A name's record of terms as read: absent, or present.
#[derive(Debug, Clone, Default)]
pub(crate) struct TermRecord {
    read: Option<Read>,
}

impl TermRecord {
    /// The record in `kv`, the read of its key (`None`: no record yet).
    ///
    /// # Errors
    /// A backend error for a value that is not a record of terms (a key
    /// someone else wrote under the prefix): deleting it starts the record
    /// anew.
    pub(crate) fn parse(kv: Option<&KeyValue>) -> Result<Self> {
        let Some(kv) = kv else {
            return Ok(Self::default());
        };
        let stored: Stored = serde_json::from_slice(&kv.value).map_err(|error| Error::Backend {
            backend: "etcd",
            message: format!(
                "the record of terms at {} is not one distlock wrote; delete that key to \
                 start the record anew",
                String::from_utf8_lossy(&kv.key)
            ),
            source: Some(Box::new(error)),
        })?;
        let newest = stored
            .newest_term
            .unwrap_or_else(|| u64::try_from(kv.mod_revision).unwrap_or(0));
        Ok(Self {
            read: Some(Read {
                stored,
                newest,
                written_at: kv.mod_revision,
            }),
        })
    }

    /// The kept terms, oldest first, each with the term before it.
    pub(crate) fn terms(&self) -> Vec<Term> {
        let Some(Read { stored, newest, .. }) = &self.read else {
            return Vec::new();
        };
        let mut terms = Vec::with_capacity(stored.earlier.len() + 1);
        let mut previous = stored.before;
        let filed = stored
            .earlier
            .iter()
            .map(|filed| (filed.term, &filed.holder));
        for (term, holder) in filed.chain([(*newest, &stored.newest)]) {
            terms.push(Term::new(term, previous, holder.clone()));
            previous = Some(term);
        }
        terms
    }

    /// The compare that holds while the record is as read: absent, or
    /// last written at the revision read.
    pub(crate) fn unchanged(&self, key: Vec<u8>) -> Compare {
        match &self.read {
            None => create_revision(key, CompareResult::Equal, 0),
            Some(read) => mod_revision(key, CompareResult::Equal, read.written_at),
        }
    }

    /// The record's value once a term of `holder` follows the ones read,
    /// keeping the last [`TERMS_KEPT`]. The new term is `term`, or, when
    /// `None`, the revision of the write that stores this value.
    pub(crate) fn with_next(&self, holder: &Holder, term: Option<u64>) -> Vec<u8> {
        let stored = match &self.read {
            None => Stored {
                before: None,
                earlier: Vec::new(),
                newest: holder.clone(),
                newest_term: term,
            },
            Some(Read { stored, newest, .. }) => {
                let mut before = stored.before;
                let mut earlier = stored.earlier.clone();
                earlier.push(Filed {
                    term: *newest,
                    holder: stored.newest.clone(),
                });
                // The new term is kept too: at most TERMS_KEPT - 1 before it.
                let dropped = earlier.len().saturating_sub(TERMS_KEPT - 1);
                if let Some(last_dropped) = earlier.drain(..dropped).next_back() {
                    before = Some(last_dropped.term);
                }
                Stored {
                    before,
                    earlier,
                    newest: holder.clone(),
                    newest_term: term,
                }
            }
        };
        serde_json::to_vec(&stored).unwrap_or_default()
    }

    /// What the record becomes once `term`, recorded for `holder`, is
    /// withdrawn: `None` when it holds no such term, `Some(None)` when no
    /// term is left (the key goes), else its new value. Each term names
    /// the one kept before it, so the term after the withdrawn one now
    /// names the withdrawn one's previous. The newest term is stored with
    /// its number: this write's revision is not its term.
    pub(crate) fn without(&self, term: u64, holder: &Holder) -> Option<Option<Vec<u8>>> {
        let mut terms = self.terms();
        if !withdraw_term(&mut terms, term, holder) {
            return None;
        }
        let Some(newest) = terms.pop() else {
            return Some(None);
        };
        let stored = Stored {
            before: terms
                .first()
                .map_or(newest.previous, |first| first.previous),
            earlier: terms
                .into_iter()
                .map(|term| Filed {
                    term: term.term,
                    holder: term.holder,
                })
                .collect(),
            newest: newest.holder,
            newest_term: Some(newest.term),
        };
        Some(Some(serde_json::to_vec(&stored).unwrap_or_default()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(label: &str) -> Holder {
        Holder {
            label: Some(label.into()),
            ..Holder::this_process(None)
        }
    }

    /// The record after `value` was written at `revision`.
    fn written(value: Vec<u8>, revision: i64) -> TermRecord {
        let kv = KeyValue {
            key: b"p/#terms/n".to_vec(),
            value,
            mod_revision: revision,
            ..KeyValue::default()
        };
        TermRecord::parse(Some(&kv)).expect("a record")
    }

    #[test]
    fn a_withdrawn_term_leaves_its_previous_to_the_next() {
        let mut record = TermRecord::parse(None).expect("no record");
        for (round, revision) in [10, 20, 30].into_iter().enumerate() {
            record = written(
                record.with_next(&holder(&format!("v{round}")), None),
                revision,
            );
        }
        assert_eq!(record.without(20, &holder("v0")), None, "not its holder");
        let value = record
            .without(20, &holder("v1"))
            .expect("kept")
            .expect("terms left");
        // Rewritten at a revision that is no term: the newest keeps its own.
        let terms = written(value, 40).terms();
        let kept: Vec<_> = terms.iter().map(|t| (t.term, t.previous)).collect();
        assert_eq!(kept, [(10, None), (30, Some(10))]);
        let only = written(TermRecord::default().with_next(&holder("v"), None), 5);
        assert_eq!(only.without(5, &holder("v")), Some(None), "the key goes");
    }

    #[test]
    fn each_term_names_the_one_before_and_only_the_last_are_kept() {
        let mut record = TermRecord::parse(None).expect("no record");
        assert!(record.terms().is_empty());
        let grants = TERMS_KEPT + 3;
        for round in 0..grants {
            let revision = 10 * (i64::try_from(round).unwrap() + 1);
            record = written(
                record.with_next(&holder(&format!("v{round}")), None),
                revision,
            );
        }
        let terms = record.terms();
        assert_eq!(terms.len(), TERMS_KEPT);
        let dropped = grants - TERMS_KEPT;
        for (kept, term) in terms.iter().enumerate() {
            let round = dropped + kept;
            assert_eq!(term.term, 10 * (round as u64 + 1));
            assert_eq!(term.previous, Some(10 * round as u64));
            assert_eq!(term.holder.label.as_deref(), Some(&*format!("v{round}")));
        }
    }

    #[test]
    fn the_first_term_has_none_before_it() {
        let record = written(TermRecord::default().with_next(&holder("first"), None), 7);
        let terms = record.terms();
        assert_eq!(terms.len(), 1);
        assert_eq!((terms[0].term, terms[0].previous), (7, None));
        assert_eq!(terms[0].holder, holder("first"));
    }

    #[test]
    fn a_term_written_after_its_grant_keeps_its_own_number() {
        // Taken over at revision 20, for a key created at 12.
        let record = written(TermRecord::default().with_next(&holder("a"), Some(12)), 20);
        let record = written(record.with_next(&holder("b"), None), 30);
        let record = written(record.with_next(&holder("c"), Some(31)), 40);
        let terms: Vec<(u64, Option<u64>)> = record
            .terms()
            .iter()
            .map(|term| (term.term, term.previous))
            .collect();
        assert_eq!(terms, [(12, None), (30, Some(12)), (31, Some(30))]);
        assert_eq!(record.terms()[2].holder, holder("c"));
    }

    #[test]
    fn a_foreign_value_is_an_error_that_says_what_to_do() {
        let kv = KeyValue {
            key: b"p/#terms/n".to_vec(),
            value: b"not json".to_vec(),
            mod_revision: 3,
            ..KeyValue::default()
        };
        let error = TermRecord::parse(Some(&kv)).expect_err("not a record");
        assert!(error.to_string().contains("p/#terms/n"), "{error}");
        assert!(error.to_string().contains("delete"), "{error}");
    }
}
