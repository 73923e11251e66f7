//! A campaign's grant, which records its term (core's
//! `AcquireRequest::records_term`), and the reading of that record.
//!
//! A waiter's key is granted by its predecessor's deletion, with no write
//! of its own in which a term could be recorded. So a campaign does not
//! queue: like a single try, it writes its key only when the name is free,
//! and in that same transaction rewrites the name's record of terms. The
//! transaction is guarded by a compare on the name's keys (nothing written
//! since they were read) and one on the record (as read): a campaign that
//! lost a race writes neither its key nor a term, so a term is in the
//! record exactly when it was granted. Between tries it watches the name's
//! keys for a deletion, so campaigners are woken together (a herd, of as
//! many as there are candidates) and one of them wins.
//!
//! In fair mode a waiting campaign queues like any waiter, and its key is
//! granted by its predecessor's deletion. Its next attempt, which finds its
//! key first, takes the grant over: one transaction rewrites its key (so
//! its mod revision marks it taken) and files its term in the record,
//! guarded by compares on the key (still the one created at its place, not
//! yet taken) and on the record (as read). The term is the key's create
//! revision, the grant's fencing token. It is recorded exactly once: a
//! take-over whose answer was lost is found done by the key's mod
//! revision, and a key that went before its take-over never records one.
//! And in order: the next place holds only once this key is deleted, after
//! its take-over, and its create revision is greater.

use std::time::Duration;

use distlock_core::backend::{
    AcquireRequest, Attempt, Lease, Term, TermLog, WaitState, async_trait,
};
use distlock_core::{Holder, LockName, Result};

use super::{EtcdBackend, TRY_ROUNDS, Waiting, header_revision, name_keys, range_reads};
use crate::error::from_etcd;
use crate::keys::{NameRange, Record, terms_key};
use crate::raw::etcdserverpb::compare::CompareResult;
use crate::raw::etcdserverpb::{TxnRequest, TxnResponse};
use crate::requests::{self, create_revision, delete_op, mod_revision, over, put_op, read_op};
use crate::rules::{Entry, Standing, in_order, standing};
use crate::session::SessionId;
use crate::terms::TermRecord;
use crate::watch::{Task, Watched, deleted};

/// What a campaign keeps between its tries: the watch that wakes it.
#[derive(Debug)]
struct Campaigning {
    _watch: Task,
}

/// The name's keys and its record of terms, read together.
struct Seen {
    revision: i64,
    entries: Vec<Entry>,
    record: TermRecord,
}

impl Seen {
    /// What a transaction's two reads (the name's keys, then the record)
    /// found.
    fn of(response: &TxnResponse) -> Result<Self> {
        let mut reads = range_reads(response);
        let entries = reads
            .next()
            .map(|keys| keys.kvs.iter().map(Entry::from_kv).collect())
            .unwrap_or_default();
        let record = TermRecord::parse(reads.next().and_then(|record| record.kvs.first()))?;
        Ok(Self {
            revision: header_revision(response),
            entries: in_order(entries),
            record,
        })
    }
}

impl EtcdBackend {
    /// One attempt of a campaign: the key and the term in one transaction
    /// when the name is free, nothing otherwise.
    pub(super) async fn campaign_once(
        &self,
        request: &AcquireRequest,
        wait: &mut WaitState,
        session: SessionId,
    ) -> Result<Attempt> {
        let range = self.range(&request.name);
        let record_key = terms_key(&self.config.prefix, &request.name);
        let key = range.try_key(request.lease_id);
        let value = Record::new(request.claim, &request.holder).to_bytes();
        // A read-only transaction: no raft proposal while the name is held.
        let mut seen = Seen::of(&self.txn(reads(&range, &record_key), "campaigning").await?)?;
        let mut free = true;
        for _ in 0..TRY_ROUNDS {
            free = standing(
                &request.name,
                request.claim,
                &seen.entries,
                seen.entries.len(),
            )? == Standing::Holds;
            if !free {
                break;
            }
            let TxnRequest { success: read, .. } = reads(&range, &record_key);
            let txn = TxnRequest {
                compare: vec![
                    over(
                        mod_revision(range.start.clone(), CompareResult::Less, seen.revision + 1),
                        range.end(),
                    ),
                    seen.record.unchanged(record_key.clone()),
                ],
                success: vec![
                    put_op(key.clone(), value.clone(), session.0),
                    // On no etcd lease: the record outlives its holders.
                    put_op(
                        record_key.clone(),
                        seen.record.with_next(&request.holder, None),
                        0,
                    ),
                ],
                failure: read,
            };
            let response = self.txn(txn, "campaigning").await?;
            if response.succeeded {
                wait.take::<Campaigning>();
                return Ok(self.granted(request, key, header_revision(&response), session));
            }
            seen = Seen::of(&response)?;
        }
        if request.retries {
            // Woken by the next deletion among the name's keys after the
            // read: the one that frees the name, or an earlier one.
            let (client, name, hub) = (self.client.clone(), request.name.clone(), self.hub.clone());
            let watched = Watched::AnyOf {
                start: range.start.clone(),
                end: range.end(),
            };
            let after = seen.revision;
            wait.set(Campaigning {
                _watch: Task::spawn(async move {
                    deleted(client, watched, after).await;
                    hub.notify(&name);
                }),
            });
        }
        // Free at the last read, but every round lost a race: no deletion
        // may come to wake the campaign, so it tries again at once.
        let retry_after = free.then_some(Duration::ZERO);
        Ok(Attempt::Held { retry_after })
    }

    /// A fair campaign's grant: `place`, its `key` as read, came first, and
    /// is taken over with its term recorded (see the module docs). Until
    /// then the wait keeps the key, so that a cancelled attempt deletes it.
    pub(super) async fn take_over(
        &self,
        request: &AcquireRequest,
        wait: &mut WaitState,
        key: Vec<u8>,
        place: &Entry,
        session: SessionId,
    ) -> Result<Attempt> {
        let term = place.revision;
        if place.modified != term {
            // Taken over by an attempt whose answer was lost: its term is
            // in the record already.
            wait.take::<Waiting>();
            return Ok(self.granted(request, key, term, session));
        }
        let record_key = terms_key(&self.config.prefix, &request.name);
        let value = Record::new(request.claim, &request.holder).to_bytes();
        let read = self
            .client
            .range(requests::key(record_key.clone()))
            .await
            .map_err(|e| from_etcd("reading an election's terms", e))?;
        let mut record = TermRecord::parse(read.kvs.first())?;
        for _ in 0..TRY_ROUNDS {
            let txn = TxnRequest {
                compare: vec![
                    create_revision(key.clone(), CompareResult::Equal, term),
                    mod_revision(key.clone(), CompareResult::Equal, term),
                    record.unchanged(record_key.clone()),
                ],
                success: vec![
                    put_op(key.clone(), value.clone(), session.0),
                    put_op(
                        record_key.clone(),
                        record.with_next(&request.holder, u64::try_from(term).ok()),
                        0,
                    ),
                ],
                failure: vec![
                    read_op(requests::key(key.clone())),
                    read_op(requests::key(record_key.clone())),
                ],
            };
            let response = self.txn(txn, "taking an election's term").await?;
            if response.succeeded {
                wait.take::<Waiting>();
                return Ok(self.granted(request, key, term, session));
            }
            let mut reads = range_reads(&response);
            let own = reads.next().and_then(|read| read.kvs.first());
            if !own.is_some_and(|kv| kv.create_revision == term && kv.mod_revision == term) {
                // The key went (a forced release, or its session): the
                // next attempt writes it again, at the end of the line.
                break;
            }
            // Another write of the record came between: file after it.
            record = TermRecord::parse(reads.next().and_then(|read| read.kvs.first()))?;
        }
        Ok(Attempt::Held {
            retry_after: Some(Duration::ZERO),
        })
    }
}

/// Reads the name's keys, then its record of terms, in a transaction
/// without writes (as its `success`; `failure` is empty).
fn reads(range: &NameRange, record_key: &[u8]) -> TxnRequest {
    TxnRequest {
        compare: Vec::new(),
        success: vec![
            read_op(name_keys(range)),
            read_op(requests::key(record_key.to_vec())),
        ],
        failure: Vec::new(),
    }
}

#[async_trait]
impl TermLog for EtcdBackend {
    /// One request, which core's timer bounds.
    async fn terms_after(&self, name: &LockName, after: u64, _: Duration) -> Result<Vec<Term>> {
        let response = self
            .client
            .range(requests::key(terms_key(&self.config.prefix, name)))
            .await
            .map_err(|e| from_etcd("reading an election's terms", e))?;
        let mut terms = TermRecord::parse(response.kvs.first())?.terms();
        terms.retain(|term| term.term > after);
        Ok(terms)
    }

    /// Rewrites the record in a transaction guarded by a compare on it
    /// (as read), read again and retried when another write came between.
    /// A grant whose answer never came is found by its key, whose create
    /// revision is its term.
    async fn withdraw(&self, lease: &Lease, holder: &Holder) -> Result<()> {
        let name = &lease.name;
        let term = match lease.fencing_token {
            0 => {
                let key = self.range(name).try_key(lease.id);
                let read = self
                    .client
                    .range(requests::key(key))
                    .await
                    .map_err(|e| from_etcd("finding a campaign's grant", e))?;
                match read.kvs.first().map(|kv| u64::try_from(kv.create_revision)) {
                    Some(Ok(term)) => term,
                    _ => return Ok(()),
                }
            }
            term => term,
        };
        let record_key = terms_key(&self.config.prefix, name);
        for _ in 0..TRY_ROUNDS {
            let read = self
                .client
                .range(requests::key(record_key.clone()))
                .await
                .map_err(|e| from_etcd("reading an election's terms", e))?;
            let record = TermRecord::parse(read.kvs.first())?;
            let Some(rewritten) = record.without(term, holder) else {
                return Ok(());
            };
            let write = match rewritten {
                Some(value) => put_op(record_key.clone(), value, 0),
                None => delete_op(&record_key),
            };
            let txn = TxnRequest {
                compare: vec![record.unchanged(record_key.clone())],
                success: vec![write],
                failure: Vec::new(),
            };
            if self
                .txn(txn, "withdrawing an election's term")
                .await?
                .succeeded
            {
                return Ok(());
            }
        }
        Err(distlock_core::Error::Backend {
            backend: "etcd",
            message: format!(
                "could not withdraw term {term} of {name}: the record changed at each of                  {TRY_ROUNDS} tries"
            ),
            source: None,
        })
    }
}
