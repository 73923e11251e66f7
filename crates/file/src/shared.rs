//! Readers and permits: holders that share a name.
//!
//! Each holds the name's lock file with a shared lock, which keeps writers
//! out (and is kept out by a writer), and one slot file with an exclusive
//! lock, which counts it and records who it is: readers take any free
//! reader slot, permits one of the semaphore's `limit` permit slots. Both
//! locks are the kernel's, so a holder that dies gives its place back at
//! once. Whether a reader or a permit may go in, and its fencing token, are
//! decided inside the name's [`DecisionLock`].

use std::fs::File;
use std::path::{Path, PathBuf};

use distlock_core::backend::{AcquireRequest, Attempt, GrantState, WaitState};
use distlock_core::{Claim, Holder, LockName, Result};

use crate::decision::DecisionLock;
use crate::files::{
    Mode, io_error, is_held_at_all, is_held_exclusively, open_existing, open_locked,
};
use crate::grant::{Held, LockedFile};
use crate::names::{self, SlotKind};
use crate::record::{Record, SharedKind, next_token, now_ms};

/// The most readers one name may have at once: each has a slot file.
pub(crate) const MAX_READERS: u32 = 4096;

/// Takes a reader's share or a permit of `request.name`.
///
/// # Errors
/// A backend error; a kind conflict when the name is held as another kind,
/// or as a semaphore of another limit.
pub(crate) async fn acquire(
    dir: &Path,
    request: &AcquireRequest,
    kind: SharedKind,
) -> Result<Attempt> {
    let name = &request.name;
    let lock_path = names::lock_path(dir, name);
    // The decision lock first: a shared lock on the lock file is only ever taken to
    // be kept, so a writer that finds the file locked under the decision lock knows
    // that real holders have it, and waits for their release.
    let _deciding = DecisionLock::enter(&dir.join(names::decision_lock_name(name))).await?;
    if kind == SharedKind::Reader && writers_wait(dir, name)? {
        return Ok(Attempt::Held { retry_after: None });
    }
    let Some(mut lock_file) = open_locked(&lock_path, Mode::Shared)? else {
        // Only a writer keeps a shared lock out; a name a writer holds is
        // a lock, not a semaphore.
        return match kind {
            SharedKind::Reader => Ok(Attempt::Held { retry_after: None }),
            SharedKind::Permit { .. } => Err(request.claim.conflict(name, Claim::Exclusive)),
        };
    };
    let last = Record::read(&mut lock_file).ok();
    if let Some(left) = last.as_ref().and_then(Record::held_for) {
        // A writer released it before its min_hold had passed: it is the
        // writer's lock until then.
        return match kind {
            SharedKind::Reader => Ok(Attempt::Held {
                retry_after: Some(left),
            }),
            SharedKind::Permit { .. } => Err(request.claim.conflict(name, Claim::Exclusive)),
        };
    }
    if let Some(held) = conflict(dir, name, kind, last.as_ref())? {
        return Err(request.claim.conflict(name, held));
    }
    let Some(slot) = take_free_slot(dir, name, kind)? else {
        return Ok(Attempt::Held { retry_after: None });
    };
    let fencing_token = next_token(last.map_or(0, |record| record.fencing_token), &lock_path)?;
    write(
        &mut lock_file,
        &lock_path,
        &Record {
            name: name.as_str().to_owned(),
            fencing_token,
            holder: None,
            acquired_at_ms: None,
            shared: Some(kind),
            held_until_ms: None,
        },
    )?;
    let mut slot = slot;
    write(
        &mut slot.file,
        &slot.path,
        &Record {
            name: name.as_str().to_owned(),
            fencing_token,
            holder: Some(Holder::clone(&request.holder)),
            acquired_at_ms: Some(now_ms()),
            shared: Some(kind),
            held_until_ms: None,
        },
    )?;
    let lock_file = LockedFile {
        file: lock_file,
        path: lock_path,
    };
    Ok(Attempt::Acquired {
        fencing_token,
        state: GrantState::new(Held::new(dir, name, lock_file, Some(slot))),
    })
}

fn write(file: &mut File, path: &Path, record: &Record) -> Result<()> {
    record
        .write(file)
        .map_err(|e| io_error(format!("cannot write {}", path.display()), e))
}

/// What the live holders of `name` hold, when it rules `kind` out. Only the
/// last grant's kind is recorded; holders of another kind can only be live
/// if that grant's kind is theirs, since a conflicting grant is never made.
fn conflict(
    dir: &Path,
    name: &LockName,
    kind: SharedKind,
    last: Option<&Record>,
) -> Result<Option<Claim>> {
    let Some(held) = last.and_then(|record| record.shared) else {
        return Ok(None);
    };
    if held == kind {
        return Ok(None);
    }
    let (slots, upto) = match held {
        SharedKind::Reader => (SlotKind::Reader, MAX_READERS),
        SharedKind::Permit { limit } => (SlotKind::Permit, limit),
    };
    Ok((!live_slots(dir, name, slots, upto)?.is_empty()).then(|| held.claim()))
}

/// Takes the first free slot of `kind`; `None` when every one is held.
fn take_free_slot(dir: &Path, name: &LockName, kind: SharedKind) -> Result<Option<LockedFile>> {
    let (slots, count) = match kind {
        SharedKind::Reader => (SlotKind::Reader, MAX_READERS),
        SharedKind::Permit { limit } => (SlotKind::Permit, limit),
    };
    for index in 0..count {
        let path = dir.join(names::slot_name(name, slots, index));
        if let Some(file) = open_locked(&path, Mode::Slot)? {
            return Ok(Some(LockedFile { file, path }));
        }
    }
    Ok(None)
}

/// The records of the held slots of `kind` among the first `upto`. Slots
/// are taken lowest first, so they stop at the first missing file.
pub(crate) fn live_slots(
    dir: &Path,
    name: &LockName,
    kind: SlotKind,
    upto: u32,
) -> Result<Vec<Record>> {
    let mut live = Vec::new();
    for path in slot_paths(dir, name, kind, upto) {
        let Some(mut file) = open_existing(&path)? else {
            break;
        };
        if is_held_exclusively(&file)
            .map_err(|e| io_error(format!("cannot look at {}", path.display()), e))?
            && let Ok(record) = Record::read(&mut file)
        {
            live.push(record);
        }
    }
    Ok(live)
}

/// The paths of the first `upto` slots of `kind`.
pub(crate) fn slot_paths(
    dir: &Path,
    name: &LockName,
    kind: SlotKind,
    upto: u32,
) -> impl Iterator<Item = PathBuf> {
    (0..upto).map(move |index| dir.join(names::slot_name(name, kind, index)))
}

/// A writer waiting for a name holds a shared lock on its writers file
/// while it waits, so that readers who come after it wait behind it. The
/// kernel drops it if the writer dies.
#[derive(Debug)]
pub(crate) struct WriterMark {
    _locked: File,
}

/// Marks the writer of `wait` as waiting for `name`, unless it is already.
/// Called under the name's decision lock.
pub(crate) fn mark_writer(dir: &Path, name: &LockName, wait: &mut WaitState) -> Result<()> {
    if wait.get::<WriterMark>().is_some() {
        return Ok(());
    }
    let path = dir.join(names::writers_name(name));
    if let Some(file) = open_locked(&path, Mode::Shared)? {
        wait.set(WriterMark { _locked: file });
    }
    Ok(())
}

/// Whether a writer waits for `name`. Looks with an exclusive lock of a
/// moment, under the name's decision lock, where no writer marks itself meanwhile.
fn writers_wait(dir: &Path, name: &LockName) -> Result<bool> {
    let path = dir.join(names::writers_name(name));
    match open_existing(&path)? {
        Some(file) => is_held_at_all(&file)
            .map_err(|e| io_error(format!("cannot look at {}", path.display()), e)),
        None => Ok(false),
    }
}
