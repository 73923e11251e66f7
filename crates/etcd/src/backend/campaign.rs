//! A campaign's grant, which records its term (core's
//! `AcquireRequest::records_term`), and the reading and withdrawing of
//! that record.
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

use distlock_core::backend::{AcquireRequest, Attempt, Lease, ReleaseHub, Term, WaitState};
use distlock_core::{Holder, LockName, Result};

use crate::error::from_etcd;
use crate::grant::granted;
use crate::keys::{NameRange, Record, terms_key};
use crate::raw::Client;
use crate::raw::etcdserverpb::compare::CompareResult;
use crate::raw::etcdserverpb::{TxnRequest, TxnResponse};
use crate::requests::{
    self, create_revision, delete_op, mod_revision, name_keys, over, put_op, read_op,
};
use crate::rules::{Entry, Standing, in_order, standing};
use crate::session::SessionId;
use crate::terms::TermRecord;
use crate::transactions::{TRY_ROUNDS, header_revision, range_reads, run};
use crate::waiting::Waiting;
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

/// One attempt of a campaign, on the keys under `prefix`: the key and the
/// term in one transaction when the name is free, nothing otherwise. A
/// campaign that waits is woken through `hub`.
pub(super) async fn campaign_once(
    client: &Client,
    prefix: &str,
    hub: &ReleaseHub,
    request: &AcquireRequest,
    wait: &mut WaitState,
    session: SessionId,
) -> Result<Attempt> {
    let range = NameRange::new(prefix, &request.name);
    let record_key = terms_key(prefix, &request.name);
    let key = range.try_key(request.lease_id);
    let value = Record::new(request.claim, &request.holder, request.lease_id).to_bytes();
    // A read-only transaction: no raft proposal while the name is held.
    let mut seen = Seen::of(&run(client, reads(&range, &record_key), "campaigning").await?)?;
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
        let response = run(client, txn, "campaigning").await?;
        if response.succeeded {
            wait.take::<Campaigning>();
            let revision = header_revision(&response);
            let written = (revision, revision);
            return Ok(granted(client, request, key, written, session));
        }
        seen = Seen::of(&response)?;
    }
    if request.retries {
        // Woken by the next deletion among the name's keys after the
        // read: the one that frees the name, or an earlier one.
        let (client, name, hub) = (client.clone(), request.name.clone(), hub.clone());
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

/// A fair campaign's grant, on the keys under `prefix`: `place`, its `key`
/// as read, came first, and is taken over with its term recorded (see the
/// module docs). Until then the wait keeps the key, so that a cancelled
/// attempt deletes it.
pub(super) async fn take_over(
    client: &Client,
    prefix: &str,
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
        let written = (term, place.modified);
        return Ok(granted(client, request, key, written, session));
    }
    let record_key = terms_key(prefix, &request.name);
    let value = Record::new(request.claim, &request.holder, request.lease_id).to_bytes();
    let read = client
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
        let response = run(client, txn, "taking an election's term").await?;
        if response.succeeded {
            wait.take::<Waiting>();
            let written = (term, header_revision(&response));
            return Ok(granted(client, request, key, written, session));
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

/// The terms of `name` (its keys under `prefix`) after `after`, as its
/// record holds them.
pub(super) async fn terms_after(
    client: &Client,
    prefix: &str,
    name: &LockName,
    after: u64,
) -> Result<Vec<Term>> {
    let response = client
        .range(requests::key(terms_key(prefix, name)))
        .await
        .map_err(|e| from_etcd("reading an election's terms", e))?;
    let mut terms = TermRecord::parse(response.kvs.first())?.terms();
    terms.retain(|term| term.term > after);
    Ok(terms)
}

/// Takes the term of `lease`, whose holder was `holder`, out of its name's
/// record (under `prefix`): see [`TermLog::withdraw`](distlock_core::backend::TermLog::withdraw)
/// and the backend's impl.
pub(super) async fn withdraw(
    client: &Client,
    prefix: &str,
    lease: &Lease,
    holder: &Holder,
) -> Result<()> {
    let Some(term) = term_of(client, prefix, lease).await? else {
        return Ok(());
    };
    let name = &lease.name;
    let record_key = terms_key(prefix, name);
    for _ in 0..TRY_ROUNDS {
        let read = client
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
        if run(client, txn, "withdrawing an election's term")
            .await?
            .succeeded
        {
            return Ok(());
        }
    }
    Err(distlock_core::Error::Backend {
        backend: "etcd",
        message: format!(
            "could not withdraw term {term} of {name}: the record changed at each of \
             {TRY_ROUNDS} tries"
        ),
        source: None,
    })
}

/// The term `lease` was granted: its fencing token, or, for a grant whose
/// answer never came (token 0), the create revision of its key, which a
/// single try's identity names; `None` when that key is gone.
async fn term_of(client: &Client, prefix: &str, lease: &Lease) -> Result<Option<u64>> {
    if lease.fencing_token != 0 {
        return Ok(Some(lease.fencing_token));
    }
    let key = NameRange::new(prefix, &lease.name).try_key(lease.id);
    let read = client
        .range(requests::key(key))
        .await
        .map_err(|e| from_etcd("finding a campaign's grant", e))?;
    Ok(read
        .kvs
        .first()
        .and_then(|kv| u64::try_from(kv.create_revision).ok()))
}
