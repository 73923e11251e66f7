//! The commands a semaphore sends to its server: claiming a slot, looking
//! at every slot, extending one, finding one by its grant's identity, and
//! clearing the record.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::Result;
use distlock_core::backend::LeaseId;
use tokio::time::Instant;

use crate::grant::PermitGrant;
use crate::instance::KnownCas;
use crate::keys::SlotKeys;
use crate::lease::is_ours;
use crate::ops::{
    CAS_RETRIES, Deadline, Ownership, cas_of_add, counted, read_on, release_on, token_of,
    two_replies, unexpected,
};
use crate::pool::Server;
use crate::proto::{Batch, Code, Key, Reply};

use super::record::{self, Record, Seen};

/// What one attempt claims a slot with, and by when: everything but the
/// slot.
pub(super) struct SlotClaim<'a> {
    pub(super) server: &'a Server,
    pub(super) limit: u32,
    pub(super) lock: &'a Key,
    pub(super) token: &'a Key,
    /// What the slot is to hold: the grant's identity and details.
    pub(super) value: Arc<[u8]>,
    pub(super) ttl: u32,
    pub(super) seed: u64,
    pub(super) record: Record,
    /// When the attempt was sent, which its lease counts from.
    pub(super) started: Instant,
    /// When the attempt must be over: every command it sends gets what is
    /// left of it.
    pub(super) deadline: Deadline,
}

/// A slot that a claim got.
pub(super) struct SlotGrant {
    /// What the token counter's increment, after the slot's add, returned.
    pub(super) token: u64,
    /// The slot's CAS.
    pub(super) cas: Option<KnownCas>,
}

/// What one claim of a slot found.
pub(super) struct Claimed {
    /// The slot, when it was free.
    pub(super) grant: Option<SlotGrant>,
    /// The lock key, as read after the slot's add.
    pub(super) record: Seen,
}

/// What a look at every slot of a semaphore found.
pub(super) struct Scan {
    pub(super) free: Vec<u32>,
    /// The shortest time a taken slot has left, when memcached says.
    pub(super) soonest: Option<Duration>,
    /// The limit of a live slot that was taken with another one than ours.
    pub(super) other_limit: Option<u32>,
}

impl Scan {
    /// The next free slot to claim after `tried` was found taken, picked
    /// at random by round `round` of grant `id`; `None` when none is free.
    pub(super) fn next_after(&mut self, tried: u32, id: LeaseId, round: usize) -> Option<u32> {
        self.free.retain(|&free| free != tried);
        if self.free.is_empty() {
            return None;
        }
        Some(self.free[spread(id, round, self.free.len())])
    }
}

/// What an extension of a slot did.
pub(super) enum SlotExtended {
    /// Stored again; its new CAS, and the lock key as read right after.
    Done { cas: Option<KnownCas>, record: Seen },
    /// Missing, or someone else's.
    Gone,
}

/// A number below `len` from the random bits of `id`, different for each
/// `round`: which slot a claim tries.
pub(super) fn spread(id: LeaseId, round: usize, len: usize) -> usize {
    let bits = id.as_u128().rotate_right((round as u32 * 37) % 128);
    (bits % len as u128) as usize
}

/// Claims slot `slot` for `want`, in one write: the slot's add, the
/// record's add and CAS bump, a read of the lock key, and the token
/// counter's increment, which comes after the add, so that the token is
/// above every token handed out before the slot was ours.
pub(super) async fn claim_slot(want: &SlotClaim<'_>, slot: &Key) -> Result<Claimed> {
    let server = want.server;
    let batch = Batch::new().ms(
        slot,
        &want.value,
        format_args!("ME T{} F{} c", want.ttl, want.limit),
    );
    let batch = want.record.add(batch, want.lock);
    let batch = record::bump(batch, want.lock);
    let batch = record::read(batch, want.lock);
    let batch = counted(batch, want.token, want.seed, 1);
    let (replies, from) = server.meta_from(batch, want.deadline.left()).await?;
    let [stored, _added, _bumped, read, counter] = <[Reply; 5]>::try_from(replies)
        .map_err(|replies| server.message(format!("{} replies to 5 commands", replies.len())))?;
    let record = want.record.judge(server, &read, from)?;
    let grant = match stored.code {
        Code::Hd => {
            let cas = cas_of_add(server, &stored, from, "permit")?;
            let (token, _) = token_of(server, &counter)?;
            Some(SlotGrant { token, cas })
        }
        Code::Ns => None,
        _ => return Err(unexpected(server, "a permit slot's add", &stored)),
    };
    Ok(Claimed { grant, record })
}

/// Reads every slot of a semaphore of `limit` permits, in one write.
pub(super) async fn scan_slots(
    server: &Server,
    slots: &SlotKeys,
    limit: u32,
    deadline: Deadline,
) -> Result<Scan> {
    let mut batch = Batch::new();
    for slot in 0..limit {
        batch = batch.mg(&slots.key(slot), "t f");
    }
    let replies = server.meta(batch, deadline.left()).await?;
    if replies.len() != limit as usize {
        return Err(server.message(format!("{} replies to {limit} reads", replies.len())));
    }
    let mut scan = Scan {
        free: Vec::new(),
        soonest: None,
        other_limit: None,
    };
    for (slot, reply) in (0..limit).zip(&replies) {
        match reply.code {
            Code::En => scan.free.push(slot),
            Code::Hd => {
                let left = reply
                    .flag_i64('t')
                    .and_then(|secs| u64::try_from(secs).ok())
                    .map(Duration::from_secs);
                scan.soonest = match (scan.soonest, left) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                let flags = reply.flag_u64('f');
                if flags.is_some_and(|flags| flags != u64::from(limit)) {
                    scan.other_limit = flags.and_then(|flags| u32::try_from(flags).ok());
                }
            }
            _ => return Err(unexpected(server, "a read of a permit slot", reply)),
        }
    }
    Ok(scan)
}

/// Stores `permit`'s slot again with an expiry of `ttl` seconds if it is
/// still that grant's, and reads the lock key in the same write. One write
/// when `cas`, the CAS of our last store, is known; otherwise, or when the slot
/// changed since, the slot is read first.
pub(super) async fn extend_slot(
    server: &Server,
    permit: &PermitGrant,
    cas: Option<KnownCas>,
    ttl: u32,
    record: &Record,
    lock: &Key,
    deadline: Deadline,
) -> Result<SlotExtended> {
    let mut expected = cas.map(|known| (Some(known.instance), known.cas));
    let mut was_read = false;
    for _ in 0..CAS_RETRIES {
        if let Some((from, cas)) = expected.take() {
            let store = Batch::new().ms(
                &permit.key,
                &permit.value,
                format_args!("C{cas} T{ttl} F{} c", permit.limit),
            );
            // Sent only to the process that issued the CAS; to another one
            // (the server restarted), nothing is sent and we read again.
            if let Some(replies) = server
                .meta_to(from, record::read(store, lock), deadline.left())
                .await?
            {
                let [stored, read] = two_replies(server, replies)?;
                match stored.code {
                    Code::Hd => {
                        return Ok(SlotExtended::Done {
                            cas: KnownCas::new(from, stored.flag_u64('c')),
                            record: record.judge(server, &read, from)?,
                        });
                    }
                    Code::Nf => return Ok(SlotExtended::Gone),
                    // memcached deleted the slot when it could not store
                    // its replacement: the permit is gone.
                    Code::ServerError => {
                        tracing::warn!(error = %unexpected(server, "an extension", &stored), "the permit is lost");
                        return Ok(SlotExtended::Gone);
                    }
                    // Changed since we read it: no longer ours.
                    Code::Ex if was_read => return Ok(SlotExtended::Gone),
                    // Changed since our last store (an extension of ours
                    // whose answer was lost?): read to tell.
                    Code::Ex => {}
                    _ => return Err(unexpected(server, "a compare-and-swap store", &stored)),
                }
            }
        }
        match read_on(server, &permit.key, permit.id, deadline).await? {
            Ownership::Ours { cas, from, .. } => expected = Some((from, cas)),
            Ownership::Other | Ownership::Missing => return Ok(SlotExtended::Gone),
        }
        was_read = true;
    }
    Err(server.message("a permit's slot kept changing while we extended it"))
}

/// The slot, among the `limit` of `slots`, that holds grant `id`, if one
/// does, with its CAS: every slot is read, in one write.
pub(super) async fn find_slot(
    server: &Server,
    slots: &SlotKeys,
    limit: u32,
    id: LeaseId,
    deadline: Deadline,
) -> Result<Option<(u32, Option<KnownCas>)>> {
    let mut batch = Batch::new();
    for slot in 0..limit {
        batch = batch.mg(&slots.key(slot), "v c");
    }
    let (replies, from) = server.meta_from(batch, deadline.left()).await?;
    let ours = (0..limit).zip(&replies).find(|(_, reply)| {
        reply.code == Code::Va
            && reply
                .value
                .as_deref()
                .is_some_and(|value| is_ours(value, id))
    });
    Ok(ours.map(|(slot, reply)| (slot, KnownCas::new(from, reply.flag_u64('c')))))
}

/// Deletes the slot, among the `limit` of `slots`, that holds grant `id`,
/// if one does. Returns whether it did.
pub(super) async fn release_by_identity(
    server: &Server,
    slots: &SlotKeys,
    limit: u32,
    id: LeaseId,
    deadline: Deadline,
) -> Result<bool> {
    let Some((slot, known)) = find_slot(server, slots, limit, id, deadline).await? else {
        return Ok(false);
    };
    release_on(server, &slots.key(slot), id, known, deadline).await
}

/// Deletes the record of a semaphore of `limit` permits if no slot of it
/// is taken. The record's CAS is read before the slots are, and a claim
/// gives the record a new CAS after its slot's add ([`record::bump`]), so
/// a permit taken after this look makes the delete fail rather than leave
/// the permit without its record. Returns whether it deleted the record.
pub(super) async fn clear_idle_record(
    server: &Server,
    lock: &Key,
    slots: &SlotKeys,
    limit: u32,
    deadline: Deadline,
) -> Result<bool> {
    let mut batch = record::read(Batch::new(), lock);
    for slot in 0..limit {
        batch = batch.mg(&slots.key(slot), "");
    }
    let (replies, from) = server.meta_from(batch, deadline.left()).await?;
    let Some((read, slots_read)) = replies.split_first() else {
        return Err(server.message("no reply"));
    };
    if slots_read.iter().any(|slot| slot.code != Code::En) {
        return Ok(false);
    }
    let Seen::Ours { cas, from, .. } = record::judge(server, read, from, limit)? else {
        return Ok(false);
    };
    let delete = Batch::new().md(lock, format_args!("C{cas}"));
    let reply = server.meta_one_to(from, delete, deadline.left()).await?;
    Ok(reply.is_some_and(|reply| reply.code == Code::Hd))
}
