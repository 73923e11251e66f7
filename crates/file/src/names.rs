//! Lock names to file names.

use std::path::{Path, PathBuf};

use distlock_core::LockName;
use sha2::{Digest, Sha256};

/// How much of the name is kept, readable, in front of the hash.
const READABLE_PREFIX: usize = 40;
const SUFFIX: &str = ".lock";
const RELEASED: &str = ".released";

/// The file that holds `name`'s lock: a readable prefix of the name, made of
/// ASCII letters, digits, `-` and `_` only, then the SHA-256 of the whole
/// name, which alone tells names apart.
pub(crate) fn file_name(name: &LockName) -> String {
    format!("{}-{}{SUFFIX}", readable(name), digest(name))
}

/// The path of `name`'s lock file in `dir`.
pub(crate) fn lock_path(dir: &Path, name: &LockName) -> PathBuf {
    dir.join(file_name(name))
}

/// Which holders a slot file is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotKind {
    /// A reader of a reader-writer lock.
    Reader,
    /// A permit of a semaphore.
    Permit,
}

impl SlotKind {
    fn letter(self) -> char {
        match self {
            Self::Reader => 'r',
            Self::Permit => 'p',
        }
    }
}

/// The file of slot `index` of `name`'s readers or permits: the lock
/// file's name with `.r<index>` or `.p<index>` before its suffix.
pub(crate) fn slot_name(name: &LockName, kind: SlotKind, index: u32) -> String {
    format!(
        "{}-{}.{}{index}{SUFFIX}",
        readable(name),
        digest(name),
        kind.letter()
    )
}

/// The file whose exclusive lock a process holds for the moment it decides
/// about `name`: granting a reader or a permit, or looking at a holder.
pub(crate) fn decision_lock_name(name: &LockName) -> String {
    decision_lock_of_digest(&digest(name))
}

/// The decision lock of a lock or slot file, from the digest in its name.
pub(crate) fn decision_lock_of_lock_file(path: &Path) -> Option<String> {
    let stem = path.file_name()?.to_str()?.strip_suffix(SUFFIX)?;
    let stem = match stem.rsplit_once('.') {
        Some((before, slot)) if is_slot_suffix(slot) => before,
        _ => stem,
    };
    let digest = stem.get(stem.len().checked_sub(64)?..)?;
    digest
        .bytes()
        .all(|b| b.is_ascii_hexdigit())
        .then(|| decision_lock_of_digest(digest))
}

/// Whether a lock file is a slot file of readers or permits.
pub(crate) fn is_slot_file(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_suffix(SUFFIX))
        .and_then(|stem| stem.rsplit_once('.'))
        .is_some_and(|(_, slot)| is_slot_suffix(slot))
}

fn is_slot_suffix(text: &str) -> bool {
    let mut chars = text.chars();
    matches!(chars.next(), Some('r' | 'p'))
        && !chars.as_str().is_empty()
        && chars.as_str().bytes().all(|b| b.is_ascii_digit())
}

fn decision_lock_of_digest(digest: &str) -> String {
    format!(".{digest}.gate")
}

/// The file that writers waiting for `name` hold a shared lock on, so that
/// readers who come after them wait too.
pub(crate) fn writers_name(name: &LockName) -> String {
    format!(".{}.writers", digest(name))
}

/// The record of the terms of the election named `name`.
pub(crate) fn terms_name(name: &LockName) -> String {
    format!(".{}.terms", digest(name))
}

/// A temporary file in the same directory, for atomic replacement.
pub(crate) fn temp_name(name: &LockName) -> String {
    format!(".{}.{:016x}.tmp", digest(name), rand_suffix())
}

/// The file a releaser touches to wake waiters for `name`.
pub(crate) fn release_signal(name: &LockName) -> String {
    format!(".{}{RELEASED}", digest(name))
}

/// The digest in a release signal's file name.
// Only the Linux directory watch reads signal files.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) fn signalled_digest(file_name: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(file_name).ok()?;
    text.strip_prefix('.')?.strip_suffix(RELEASED)
}

pub(crate) fn is_lock_file(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(SUFFIX) && !n.starts_with('.'))
}

fn readable(name: &LockName) -> String {
    name.as_str()
        .chars()
        .take(READABLE_PREFIX)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

pub(crate) fn digest(name: &LockName) -> String {
    Sha256::digest(name.as_str().as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn rand_suffix() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as u64);
    (u64::from(std::process::id()) << 32) ^ nanos
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> LockName {
        LockName::new(s).unwrap()
    }

    #[test]
    fn file_names_are_safe_and_short() {
        for raw in [
            "../../etc/passwd",
            "a/b",
            "\0",
            "\r\n",
            "🦀",
            &"x".repeat(1024),
        ] {
            let file = file_name(&name(raw));
            assert!(file.len() < 255, "{file}");
            assert!(!file.contains('/') && !file.contains('\0'), "{file}");
            assert!(is_lock_file(Path::new(&file)));
        }
    }

    #[test]
    fn release_signals_name_their_lock() {
        let lock = name("a\r\nb");
        let signal = release_signal(&lock);
        assert!(!is_lock_file(Path::new(&signal)));
        assert_eq!(
            signalled_digest(signal.as_bytes()),
            Some(digest(&lock).as_str())
        );
        assert_eq!(signalled_digest(file_name(&lock).as_bytes()), None);
    }

    #[test]
    fn slot_files_are_lock_files_of_the_same_decision_lock() {
        let lock = name("a.r1");
        let decision_lock = decision_lock_name(&lock);
        assert_eq!(
            decision_lock_of_lock_file(Path::new(&file_name(&lock))),
            Some(decision_lock.clone())
        );
        assert!(!is_slot_file(Path::new(&file_name(&lock))));
        for kind in [SlotKind::Reader, SlotKind::Permit] {
            let slot = slot_name(&lock, kind, 12);
            assert!(is_lock_file(Path::new(&slot)), "{slot}");
            assert!(is_slot_file(Path::new(&slot)), "{slot}");
            assert_eq!(
                decision_lock_of_lock_file(Path::new(&slot)),
                Some(decision_lock.clone())
            );
        }
        assert!(!is_lock_file(Path::new(&decision_lock)));
        assert!(!is_lock_file(Path::new(&writers_name(&lock))));
    }

    #[test]
    fn distinct_names_get_distinct_files() {
        assert_ne!(file_name(&name("a")), file_name(&name("A")));
        assert_ne!(file_name(&name("a/b")), file_name(&name("a_b")));
    }
}
