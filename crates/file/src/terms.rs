//! The record of an election's terms: `.<SHA-256 of the name>.terms`
//! beside the lock file, which only a campaign's grant writes.
//!
//! The grant writes it while it holds the lock file's exclusive `flock`,
//! so two grants never write it at once, and replaces it whole (written
//! beside it, then renamed over it), so a reader sees one record or the
//! next, never half of one, without taking any lock.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use distlock_core::backend::{TERMS_KEPT, Term, withdraw_term};
use distlock_core::{Holder, LockName, Result};
use serde::{Deserialize, Serialize};

use crate::files::{io_error, open_existing, replace_whole};
use crate::names;

/// One term, as the record file keeps it.
#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    term: u64,
    previous: Option<u64>,
    holder: Holder,
}

impl From<Entry> for Term {
    fn from(entry: Entry) -> Self {
        Term::new(entry.term, entry.previous, entry.holder)
    }
}

impl From<Term> for Entry {
    fn from(term: Term) -> Self {
        Entry {
            term: term.term,
            previous: term.previous,
            holder: term.holder,
        }
    }
}

/// `name`'s record of terms in `dir`.
#[derive(Debug)]
pub(crate) struct TermRecord {
    dir: PathBuf,
    name: LockName,
    path: PathBuf,
}

impl TermRecord {
    pub(crate) fn of(dir: &Path, name: &LockName) -> Self {
        Self {
            dir: dir.to_owned(),
            name: name.clone(),
            path: dir.join(names::terms_name(name)),
        }
    }

    /// The last term recorded, if any.
    pub(crate) fn last(&self) -> Result<Option<u64>> {
        Ok(self.read()?.last().map(|entry| entry.term))
    }

    /// Appends `term`, granted to `holder`, keeping the last
    /// [`TERMS_KEPT`]. The caller holds the name's lock file exclusively,
    /// and `term` is greater than every term recorded.
    pub(crate) fn append(&self, term: u64, holder: &Holder) -> Result<()> {
        let mut entries = self.read()?;
        let previous = entries.last().map(|entry| entry.term);
        entries.push(Entry {
            term,
            previous,
            holder: holder.clone(),
        });
        let excess = entries.len().saturating_sub(TERMS_KEPT);
        entries.drain(..excess);
        self.write(&entries)
    }

    /// Removes `term`, if it was recorded for `holder`, and gives its
    /// `previous` to the term after it. The caller holds the name's lock
    /// file exclusively.
    pub(crate) fn withdraw(&self, term: u64, holder: &Holder) -> Result<()> {
        let mut terms: Vec<Term> = self.read()?.into_iter().map(Term::from).collect();
        if !withdraw_term(&mut terms, term, holder) {
            return Ok(());
        }
        let entries: Vec<Entry> = terms.into_iter().map(Entry::from).collect();
        self.write(&entries)
    }

    /// Replaces the record with `entries`.
    fn write(&self, entries: &[Entry]) -> Result<()> {
        let text = serde_json::to_vec(&entries).map_err(|e| {
            io_error(
                format!("cannot encode the terms of {}", self.path.display()),
                io::Error::other(e),
            )
        })?;
        let temp = self.dir.join(names::temp_name(&self.name));
        replace_whole(&temp, &self.path, &text)
            .map_err(|e| io_error(format!("cannot write {}", self.path.display()), e))
    }

    /// The terms kept after `after`, oldest first.
    pub(crate) fn after(&self, after: u64) -> Result<Vec<Term>> {
        Ok(self
            .read()?
            .into_iter()
            .filter(|entry| entry.term > after)
            .map(Term::from)
            .collect())
    }

    fn read(&self) -> Result<Vec<Entry>> {
        let Some(mut file) = open_existing(&self.path)? else {
            return Ok(Vec::new());
        };
        let mut text = Vec::new();
        file.read_to_end(&mut text)
            .map_err(|e| io_error(format!("cannot read {}", self.path.display()), e))?;
        serde_json::from_slice(&text).map_err(|e| distlock_core::Error::InvalidData {
            what: self.path.display().to_string(),
            field: ".".into(),
            reason: format!(
                "not a record of election terms ({e}); delete the file to start a new record"
            ),
        })
    }
}
