//! Listing holders and forcing releases: looks at lock files made inside
//! each name's decision lock, so that they never make a free lock look held to
//! someone taking it.

use std::collections::HashMap;
use std::io;
use std::path::Path;

use distlock_core::backend::Waiters;
use distlock_core::{LockInfo, LockName, Permits, Result};

use crate::decision::DecisionLock;
use crate::files::{
    io_error, is_held_at_all, is_held_exclusively, no_follow, open_existing, replace_whole,
};
use crate::names::{self, SlotKind};
use crate::record::Record;
use crate::shared::{MAX_READERS, slot_paths};
use crate::wake::signal_release;

/// Every holder in `dir`: writers from the lock files,
/// readers and permits from their slot files.
pub(crate) async fn list(dir: &Path) -> Result<Vec<LockInfo>> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| io_error(format!("cannot list {}", dir.display()), e))?;
    let mut locks = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if !names::is_lock_file(&path) {
            continue;
        }
        let Some(decision_lock) = names::decision_lock_of_lock_file(&path) else {
            continue;
        };
        // Only holders lock a slot file exclusively, so a look at one needs
        // no decision lock; a look at a lock file does, since readers lock it too.
        let _deciding = if names::is_slot_file(&path) {
            None
        } else {
            Some(DecisionLock::enter(&dir.join(decision_lock)).await?)
        };
        if let Some(info) = look(&path) {
            locks.push(info);
        }
    }
    count_permits(&mut locks);
    locks.sort_by(|a, b| (&a.name, a.fencing_token).cmp(&(&b.name, b.fencing_token)));
    Ok(locks)
}

/// The holder of the lock or slot file at `path`, if one holds it
/// exclusively, or a marker left at its release still keeps it held (then
/// with the time left); files that cannot be read are passed over.
fn look(path: &Path) -> Option<LockInfo> {
    let mut file = no_follow().read(true).open(path).ok()?;
    let held = is_held_exclusively(&file).ok()?;
    let record = Record::read(&mut file).ok()?;
    let marked = record.held_for();
    if !held && marked.is_none() {
        return None;
    }
    let name = LockName::new(&record.name).ok()?;
    let claim = record.claim();
    Some(LockInfo {
        name,
        kind: claim.kind(),
        permits: claim.limit().map(|limit| Permits { in_use: 0, limit }),
        holder: record.holder,
        fencing_token: Some(record.fencing_token),
        expires_in: if held { None } else { marked },
        waiters: Waiters::Unknown,
    })
}

/// Sets each permit's `in_use` to the number of its semaphore's permits
/// listed.
fn count_permits(locks: &mut [LockInfo]) {
    let mut in_use: HashMap<LockName, u32> = HashMap::new();
    for info in locks.iter().filter(|info| info.permits.is_some()) {
        *in_use.entry(info.name.clone()).or_default() += 1;
    }
    for info in locks.iter_mut() {
        if let Some(permits) = &mut info.permits {
            permits.in_use = in_use[&info.name];
        }
    }
}

/// Releases `name` from every holder: its lock file and each of its slot
/// files are atomically replaced (keeping the fencing token), so each
/// holder's next check finds that its files are no longer the ones at
/// their paths, and new grants lock the new files.
pub(crate) async fn force_release(dir: &Path, name: &LockName) -> Result<bool> {
    let _deciding = DecisionLock::enter(&dir.join(names::decision_lock_name(name))).await?;
    let path = names::lock_path(dir, name);
    let Some(mut old) = open_existing(&path)? else {
        return Ok(false);
    };
    let mut was_held = is_held_at_all(&old)
        .map_err(|e| io_error(format!("cannot look at {}", path.display()), e))?;
    let last = Record::read(&mut old).ok();
    // A marker left at a release keeps the lock held; the new file has none.
    was_held |= last.as_ref().and_then(Record::held_for).is_some();
    replace(
        dir,
        name,
        &path,
        &Record {
            name: name.as_str().to_owned(),
            fencing_token: last.as_ref().map_or(0, |record| record.fencing_token),
            holder: None,
            acquired_at_ms: None,
            shared: last.and_then(|record| record.shared),
            held_until_ms: None,
        },
    )?;
    for kind in [SlotKind::Reader, SlotKind::Permit] {
        for slot in slot_paths(dir, name, kind, MAX_READERS) {
            let Some(file) = open_existing(&slot)? else {
                break;
            };
            was_held |= is_held_exclusively(&file)
                .map_err(|e| io_error(format!("cannot look at {}", slot.display()), e))?;
            replace(dir, name, &slot, &empty(name))?;
        }
    }
    signal_release(dir, name);
    Ok(was_held)
}

fn empty(name: &LockName) -> Record {
    Record {
        name: name.as_str().to_owned(),
        fencing_token: 0,
        holder: None,
        acquired_at_ms: None,
        shared: None,
        held_until_ms: None,
    }
}

/// Puts a file holding `record` at `path` in one step.
fn replace(dir: &Path, name: &LockName, path: &Path, record: &Record) -> Result<()> {
    let temp = dir.join(names::temp_name(name));
    let failed = |e| io_error(format!("cannot replace {}", path.display()), e);
    let contents = serde_json::to_vec(record)
        .map_err(io::Error::other)
        .map_err(failed)?;
    replace_whole(&temp, path, &contents).map_err(failed)
}
