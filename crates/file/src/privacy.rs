//! Whether the lock directory is private: a real directory of this user's
//! that nobody else can write. Whoever can write it controls every lock in
//! it, so the default directory, in a place every user can write, must be.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use distlock_core::backend::Feature;
use distlock_core::{Error, Result};

use crate::files::io_error;

/// Refuses a directory in a place every user can write (the default one,
/// under `/tmp`) unless it is private: another user could have made it
/// first, and would then control every lock in it.
///
/// # Errors
/// [`Error::InvalidConfig`] naming what is wrong with `dir`; a backend
/// error when it cannot be read.
pub(crate) fn check_private(dir: &Path) -> Result<()> {
    match privacy_problem(dir)? {
        None => Ok(()),
        Some(problem) => Err(Error::config(
            "file backend directory",
            format!(
                "{} {problem}, so another user could control its locks; remove it (distlock \
                 makes it again, private), or name a directory of your own with file:///path",
                dir.display()
            ),
        )),
    }
}

/// What `distlock check` says of the directory. A directory that others
/// may write can be meant (users of one group sharing locks), so it is a
/// caveat, not a failure: the default directory never gets this far.
pub(crate) fn directory_feature(dir: &Path) -> Feature {
    match privacy_problem(dir) {
        Ok(None) => Feature::present(
            "directory",
            format!(
                "{}: a directory of this user's that nobody else can write",
                dir.display()
            ),
        ),
        Ok(Some(problem)) => Feature::degraded(
            "directory",
            format!(
                "{} {problem}: whoever can write it can take or break its locks; make it \
                 private (chmod 700) unless those users are meant to share them",
                dir.display()
            ),
        ),
        Err(error) => Feature::missing("directory", error.to_string()),
    }
}

/// Why `dir` is not private, if it is not: a symbolic link, another
/// owner, or write permission for others.
fn privacy_problem(dir: &Path) -> Result<Option<String>> {
    let meta = std::fs::symlink_metadata(dir).map_err(|e| {
        io_error(
            format!("cannot read the lock directory {}", dir.display()),
            e,
        )
    })?;
    let uid = rustix::process::getuid().as_raw();
    Ok(if meta.file_type().is_symlink() {
        Some("is a symbolic link".to_owned())
    } else if meta.uid() != uid {
        Some(format!(
            "belongs to uid {}, not to this user (uid {uid})",
            meta.uid()
        ))
    } else if meta.mode() & 0o022 != 0 {
        Some(format!(
            "can be written by others (mode {:o})",
            meta.mode() & 0o777
        ))
    } else {
        None
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::DirBuilderExt;

    use super::*;

    #[test]
    fn only_a_private_directory_of_ours_passes() {
        use std::os::unix::fs::PermissionsExt;

        let dir = tempfile::tempdir().unwrap();
        let private = dir.path().join("private");
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&private)
            .unwrap();
        assert!(check_private(&private).is_ok());

        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&private, &link).unwrap();
        let mut refused = vec![(open, "written by others"), (link, "symbolic link")];
        // Only root can give a directory away.
        if rustix::process::getuid().is_root() {
            let theirs = dir.path().join("theirs");
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&theirs)
                .unwrap();
            std::os::unix::fs::chown(&theirs, Some(4242), None).unwrap();
            refused.push((theirs, "belongs to uid 4242"));
        }
        for (path, why) in refused {
            match check_private(&path) {
                Err(Error::InvalidConfig { reason, .. }) => {
                    assert!(reason.contains(why), "{reason}")
                }
                other => panic!("{}: expected a refusal, got {other:?}", path.display()),
            }
        }
    }
}
