//! The record at a semaphore's lock key: it says that the name is a
//! semaphore, and of how many permits, for as long as any permit lives.
//!
//! An exclusive lock and a semaphore's record share the lock key, so an
//! exclusive `add` fails while the record lives, and adding the record
//! fails while a lock is held. The limit is the record's client flags
//! (`F<limit>`, from 1); a lock's item is stored without flags, so they
//! read 0. One `mg <lock> f` therefore tells a lock from a semaphore, and
//! one limit from another.

use distlock_core::{Claim, Result};

use crate::instance::Instance;
use crate::lease::MAX_RELATIVE_EXPIRY;
use crate::ops::{CAS_RETRIES, Deadline, held_as, unexpected};
use crate::pool::Server;
use crate::proto::{Batch, Code, Key, Reply};

/// What a read of the lock key found, as a holder of one semaphore sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Seen {
    /// The record of our semaphore: its CAS, the process that gave it,
    /// and the seconds it has left (`None`: it never expires).
    Ours {
        cas: u64,
        from: Option<Instance>,
        left: Option<u64>,
    },
    /// The name is held as another kind: a lock, or a semaphore of
    /// another limit.
    Other(Claim),
    Missing,
}

/// The record of a semaphore of `limit` permits, kept by a holder whose
/// slot lives `slot_ttl` seconds from its last store.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Record {
    limit: u32,
    /// What the record is stored with: twice the slot's, so that it needs
    /// raising about once a lease for all holders together, not at every
    /// extension of each.
    ttl: u64,
    /// The fewest seconds the record must have left when read right after
    /// a slot was stored in the same write: the slot's own expiry.
    need: u64,
}

/// The record's value, for people reading the cache. Never read back: the
/// flags carry the limit.
const VALUE: &[u8] = b"{\"semaphore\":true}";

impl Record {
    pub(crate) fn new(limit: u32, slot_ttl: u32) -> Self {
        let slot_ttl = u64::from(slot_ttl);
        Self {
            limit,
            ttl: (2 * slot_ttl).min(MAX_RELATIVE_EXPIRY),
            need: slot_ttl,
        }
    }

    /// `batch` and `ms <lock> <len> ME T<ttl> F<limit>`: adds the record if
    /// the key is free.
    pub(crate) fn add(&self, batch: Batch, lock: &Key) -> Batch {
        batch.ms(
            lock,
            VALUE,
            format_args!("ME T{} F{}", self.ttl, self.limit),
        )
    }

    /// What a read made by [`read`] says, for this semaphore.
    pub(crate) fn judge(
        &self,
        server: &Server,
        reply: &Reply,
        from: Option<Instance>,
    ) -> Result<Seen> {
        judge(server, reply, from, self.limit)
    }

    /// Makes sure the record, last `seen` so, is this semaphore's and lives
    /// at least as long as a slot stored before that look: adds it when
    /// missing, and raises its expiry by compare-and-swap when too short.
    /// Returns what holds the name instead, when another kind does.
    pub(crate) async fn keep(
        &self,
        server: &Server,
        lock: &Key,
        mut seen: Seen,
        deadline: Deadline,
    ) -> Result<Option<Claim>> {
        for _ in 0..CAS_RETRIES {
            let look = match seen {
                Seen::Other(held) => return Ok(Some(held)),
                Seen::Ours { left, .. } if left.is_none_or(|left| left >= self.need) => {
                    return Ok(None);
                }
                Seen::Ours { cas, from, .. } => {
                    // Conditional, and only on the process that gave the
                    // CAS: a record that became something else since is
                    // never written.
                    let raise = Batch::new().ms(
                        lock,
                        VALUE,
                        format_args!("C{cas} T{} F{}", self.ttl, self.limit),
                    );
                    match server.meta_one_to(from, raise, deadline.left()).await? {
                        Some(reply) if reply.code == Code::Hd => return Ok(None),
                        Some(reply) if matches!(reply.code, Code::Ex | Code::Nf) => {}
                        Some(reply) => {
                            return Err(unexpected(server, "a semaphore record's store", &reply));
                        }
                        // The server restarted since: look again.
                        None => {}
                    }
                    read(Batch::new(), lock)
                }
                Seen::Missing => read(self.add(Batch::new(), lock), lock),
            };
            let (replies, from) = server.meta_from(look, deadline.left()).await?;
            let reply = replies.last().ok_or_else(|| server.message("no reply"))?;
            seen = self.judge(server, reply, from)?;
        }
        Err(server.message("a semaphore's record kept changing while we kept it"))
    }
}

/// `batch` and `mg <lock> f t c`: what holds the lock key, for
/// [`judge`].
pub(crate) fn read(batch: Batch, lock: &Key) -> Batch {
    batch.mg(lock, "f t c")
}

/// What a read made by [`read`], answered by the process `from`, says
/// to a holder of a semaphore of `limit` permits.
pub(crate) fn judge(
    server: &Server,
    reply: &Reply,
    from: Option<Instance>,
    limit: u32,
) -> Result<Seen> {
    match reply.code {
        Code::En => Ok(Seen::Missing),
        Code::Hd => {
            let flags = reply
                .flag_u64('f')
                .ok_or_else(|| server.message("a lock key came without its flags"))?;
            if flags != u64::from(limit) {
                return Ok(Seen::Other(held_as(flags)));
            }
            let cas = reply
                .flag_u64('c')
                .ok_or_else(|| server.message("a semaphore's record came without its CAS"))?;
            // `t-1`: no expiry.
            let left = reply.flag_i64('t').and_then(|t| u64::try_from(t).ok());
            Ok(Seen::Ours { cas, from, left })
        }
        _ => Err(unexpected(server, "a read of a lock key", reply)),
    }
}

/// `batch` and `ms <lock> 0 MA`: appends nothing to whatever the lock key
/// holds, which leaves its value, flags and expiry as they are but gives it
/// a new CAS, and does nothing when the key is missing. A permit's claim
/// sends it after its slot's add, so that a release that looked at the
/// slots before that add and found none cannot then delete the record by
/// its old CAS (see `clear_idle_record`).
pub(crate) fn bump(batch: Batch, lock: &Key) -> Batch {
    batch.ms(lock, b"", "MA")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_outlives_the_slot_and_stays_a_relative_expiry() {
        let record = Record::new(3, 31);
        assert_eq!((record.ttl, record.need), (62, 31));
        let longest = Record::new(3, MAX_RELATIVE_EXPIRY as u32);
        assert_eq!(longest.ttl, MAX_RELATIVE_EXPIRY);
        assert!(longest.ttl >= longest.need);
    }
}
