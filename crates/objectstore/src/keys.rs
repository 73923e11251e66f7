//! Lock names to object keys.
//!
//! A lock lives at `<prefix>/locks/<hash>`, where `<hash>` is the hex
//! SHA-256 of the name, so that any name (up to 1,024 bytes, with `/`,
//! NUL or newlines) becomes a short key every store accepts, and distinct
//! names never share one. The name itself is in the object's body, which
//! is what [`list`](distlock_core::backend::Backend::list) shows.
//! `<prefix>/probe/` holds the objects of the precondition probe, which
//! lists of locks never see.

use std::fmt::Write as _;

use object_store::path::Path;
use sha2::{Digest, Sha256};

use distlock_core::{Error, LockName, Result};

/// The longest prefix accepted, in bytes: room for it and a key within
/// every store's limit (S3's is 1,024 bytes).
pub const MAX_PREFIX_LEN: usize = 512;

/// Where one backend keeps its objects.
#[derive(Debug, Clone)]
pub(crate) struct KeySpace {
    locks: Path,
    probes: Path,
}

impl KeySpace {
    /// The keys under `prefix`, a path in the bucket (`team/locks`, or
    /// empty for the bucket's root).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming `prefix`, when it is longer than
    /// [`MAX_PREFIX_LEN`] or is not a path of segments (no empty segment,
    /// no `.` or `..`, no control characters).
    pub(crate) fn new(prefix: &str) -> Result<Self> {
        let base = parse_prefix(prefix)?;
        Ok(Self {
            locks: base.clone().join("locks"),
            probes: base.join("probe"),
        })
    }

    /// The object of `name`.
    pub(crate) fn lock(&self, name: &LockName) -> Path {
        let hash = Sha256::digest(name.as_str().as_bytes());
        let mut hex = String::with_capacity(64);
        for byte in hash {
            // Writing to a String cannot fail.
            let _ = write!(hex, "{byte:02x}");
        }
        self.locks.clone().join(hex)
    }

    /// Where every lock's object is, for listing.
    pub(crate) fn locks(&self) -> &Path {
        &self.locks
    }

    /// A fresh object for one probe of the store.
    pub(crate) fn probe(&self) -> Path {
        self.probes
            .clone()
            .join(format!("{:032x}", rand::random::<u128>()))
    }
}

/// `prefix` as a path in the bucket.
fn parse_prefix(prefix: &str) -> Result<Path> {
    if prefix.len() > MAX_PREFIX_LEN {
        return Err(Error::config(
            "prefix",
            format!(
                "the prefix has {} bytes; use at most {MAX_PREFIX_LEN}",
                prefix.len()
            ),
        ));
    }
    let trimmed = prefix.trim_matches('/');
    if trimmed.is_empty() {
        return Ok(Path::default());
    }
    Path::parse(trimmed).map_err(|error| {
        Error::config(
            "prefix",
            format!("the prefix is not a path in the bucket ({error}); write it as `a/b/c`"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(text: &str) -> LockName {
        LockName::new(text).unwrap()
    }

    #[test]
    fn any_name_becomes_a_short_key_under_the_prefix() {
        let keys = KeySpace::new("team/locks").unwrap();
        let long = "é/\u{0}\n".repeat(200);
        for text in ["a", "a/b", "../x", long.as_str()] {
            let key = keys.lock(&name(text)).to_string();
            assert!(key.starts_with("team/locks/locks/"), "{key}");
            assert_eq!(key.len(), "team/locks/locks/".len() + 64, "{key}");
        }
        assert_ne!(keys.lock(&name("a")), keys.lock(&name("b")));
    }

    #[test]
    fn an_empty_prefix_is_the_bucket_root() {
        for prefix in ["", "/"] {
            let key = KeySpace::new(prefix).unwrap().lock(&name("a")).to_string();
            assert!(key.starts_with("locks/"), "{key}");
        }
    }

    #[test]
    fn a_prefix_that_is_not_a_path_is_refused_by_name() {
        for prefix in ["a//b", "a/../b", &"x".repeat(MAX_PREFIX_LEN + 1)] {
            match KeySpace::new(prefix) {
                Err(Error::InvalidConfig { field, .. }) => assert_eq!(field, "prefix"),
                other => panic!("{prefix}: {other:?}"),
            }
        }
    }

    #[test]
    fn probes_are_apart_from_locks() {
        let keys = KeySpace::new("p").unwrap();
        assert!(keys.probe().to_string().starts_with("p/probe/"));
        assert!(!keys.probe().prefix_matches(keys.locks()));
    }
}
