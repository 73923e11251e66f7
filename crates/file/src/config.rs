//! Where a [`FileBackend`](crate::FileBackend) keeps its locks:
//! [`FileConfig`], parsed from a `file://` URL.

use std::path::{Path, PathBuf};

use distlock_core::backend::{Query, UrlParts, percent_decode, redact};
use distlock_core::{Error, Result};

use crate::backend::FileBackend;

/// The lock directory a `file://` URL names.
///
/// `file://` is the [default directory](FileBackend::default_dir);
/// `file:///path/to/dir` (or `file://localhost/path/to/dir`) is that
/// directory, its `%`-escapes decoded. [`FileBackend::open`] opens it:
///
/// ```
/// use distlock_file::{FileBackend, FileConfig};
///
/// # let dir = tempfile::tempdir().unwrap();
/// # let url = format!("file://{}", dir.path().display());
/// let config = FileConfig::parse(&url)?; // "file:///var/lock/app"
/// let backend = FileBackend::open(config.dir())?;
/// # Ok::<(), distlock_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileConfig {
    dir: PathBuf,
}

impl FileConfig {
    /// Parses a `file://` URL.
    ///
    /// The URL takes no options: a client's (`lease`, `label`, …) are
    /// taken out of it by `distlock::connect` before it gets here, and
    /// `fair=true` is refused, since a file lock's waiters are woken in no
    /// set order.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for another scheme, a host other than
    /// `localhost`, user information, an option, a `#fragment`, or a path
    /// with a malformed `%`-escape or a NUL; [`Error::Unsupported`] for
    /// `fair=true`. Messages never show the user information.
    pub fn parse(url: &str) -> Result<Self> {
        let parts = UrlParts::split(url)?;
        if !parts.scheme.eq_ignore_ascii_case("file") {
            return Err(Error::config(
                "backend URL",
                format!(
                    "the scheme `{}` is not file://; write file:///absolute/path",
                    parts.scheme
                ),
            ));
        }
        refuse_options(parts.query)?;
        if parts.fragment.is_some() {
            return Err(Error::config(
                "backend URL",
                format!(
                    "`{}` has a #fragment; write a `#` in a path as %23",
                    redact(url)
                ),
            ));
        }
        refuse_remote(&parts, url)?;
        if parts.path.is_empty() {
            return Ok(Self {
                dir: FileBackend::default_dir(),
            });
        }
        let dir = percent_decode(parts.path)
            .ok()
            .filter(|path| !path.contains('\0'))
            .ok_or_else(|| {
                Error::config(
                    "backend URL",
                    format!(
                        "`{}` has a malformed %-escape, or a NUL, in its path; write a `%` \
                         in a path as %25",
                        redact(url)
                    ),
                )
            })?;
        Ok(Self { dir: dir.into() })
    }

    /// The lock directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Refuses every option of the query: `fair=true` as a mode this store
/// cannot offer, anything else as unknown.
fn refuse_options(query: &str) -> Result<()> {
    let mut query = Query::parse(query)?;
    if query.take_flag("fair")? == Some(true) {
        return Err(Error::Unsupported(
            "fair=true: fair mode needs a store that keeps a queue of waiters, and a file \
             lock's waiters are woken in no set order; use a mongodb://, postgres:// or \
             etcd:// URL with fair=true"
                .to_owned(),
        ));
    }
    query.refuse_rest(
        "a file URL takes only the client options (lease, extend_every, safety_margin, \
         operation_timeout, backoff_min, backoff_max, local_hand_overs, min_local_run, label), \
         through distlock::connect",
    )
}

/// Refuses a host other than `localhost`, and user information: a file URL
/// names a directory of this machine, reached with no credentials.
fn refuse_remote(parts: &UrlParts<'_>, url: &str) -> Result<()> {
    let host = parts.hosts;
    let named = match (parts.user_info, host) {
        (None, "" | "localhost") => return Ok(()),
        (None, _) => format!("the host `{host}`"),
        // Never the user information itself: it may hold a password.
        (Some(_), "" | "localhost") => "user information".to_owned(),
        (Some(_), _) => format!("user information and the host `{host}`"),
    };
    Err(Error::config(
        "backend URL",
        format!(
            "`{}` names {named}; a file URL is local and has no credentials: write \
             file:///absolute/path",
            redact(url)
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_of(url: &str) -> PathBuf {
        FileConfig::parse(url).unwrap().dir
    }

    #[test]
    fn a_url_names_its_directory() {
        assert_eq!(dir_of("file://"), FileBackend::default_dir());
        assert_eq!(dir_of("FILE://"), FileBackend::default_dir());
        assert_eq!(dir_of("file:///var/lock/app"), Path::new("/var/lock/app"));
        assert_eq!(dir_of("file://localhost/tmp/a%20b"), Path::new("/tmp/a b"));
        assert_eq!(dir_of("file:///tmp/a+b%2Bc"), Path::new("/tmp/a+b+c"));
        assert_eq!(dir_of("file:///tmp/x?fair=false"), Path::new("/tmp/x"));
    }

    #[test]
    fn bad_input_is_refused_with_a_way_to_fix_it() {
        for (url, fix) in [
            ("file://otherhost/tmp", "file:///absolute/path"),
            ("file:///tmp/%zz", "%25"),
            ("file:///tmp/a%00", "NUL"),
            ("file:///tmp/a#b", "%23"),
            ("memory:///tmp", "file:///absolute/path"),
            ("file:///tmp?lease=1s", "distlock::connect"),
        ] {
            let error = FileConfig::parse(url).unwrap_err().to_string();
            assert!(error.contains(fix), "{url}: {error}");
        }
    }

    #[test]
    fn fair_mode_is_refused_as_unsupported() {
        match FileConfig::parse("file:///tmp/locks?fair=true") {
            Err(Error::Unsupported(why)) => {
                assert!(why.starts_with("fair=true: "), "{why}");
                assert!(why.contains("etcd://"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn user_information_is_refused_without_showing_it() {
        for url in [
            "file://u:secret@localhost/tmp",
            "file://u:secret@/tmp",
            "file://u:secret@otherhost/tmp",
        ] {
            let error = FileConfig::parse(url).unwrap_err().to_string();
            assert!(!error.contains("secret"), "{error}");
            assert!(error.contains("user information"), "{error}");
        }
    }
}
