//! Opening a backend from a URL.

use std::path::PathBuf;
use std::sync::Arc;

use distlock_core::{Backend, Error, MemoryBackend, Result};

/// The schemes this build understands, for error messages.
const KNOWN: &str = "file://, memory://";

/// A parsed backend URL. Its `Display` never shows credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendUrl {
    /// `file://` (the default directory) or `file:///path/to/dir`.
    File(PathBuf),
    /// `memory://`: locks in this process's memory only.
    Memory,
}

impl BackendUrl {
    /// Parses `url`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for an unknown scheme or a malformed URL; the
    /// message shows the URL with any credentials replaced by `***`.
    pub fn parse(url: &str) -> Result<Self> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(Error::config(
                "backend URL",
                format!("`{}` has no scheme; use one of {KNOWN}", redact(url)),
            ));
        };
        match scheme.to_ascii_lowercase().as_str() {
            "file" => parse_file(rest, url),
            "memory" if rest.is_empty() => Ok(Self::Memory),
            "memory" => Err(Error::config(
                "backend URL",
                "memory:// takes nothing after the scheme",
            )),
            "mongodb" | "mongodb+srv" | "memcache" | "memcached" | "etcd" | "redis"
            | "postgres" | "postgresql" => Err(Error::Unsupported(format!(
                "this build of distlock has no `{scheme}` backend; this build knows {KNOWN}"
            ))),
            _ => Err(Error::config(
                "backend URL",
                format!(
                    "unknown scheme `{scheme}` in `{}`; use one of {KNOWN}",
                    redact(url)
                ),
            )),
        }
    }
}

fn parse_file(rest: &str, url: &str) -> Result<BackendUrl> {
    if rest.is_empty() {
        return Ok(BackendUrl::File(default_dir()));
    }
    let (host, path) = match rest.find('/') {
        Some(slash) => rest.split_at(slash),
        None => (rest, ""),
    };
    if !host.is_empty() && host != "localhost" {
        return Err(Error::config(
            "backend URL",
            format!(
                "`{}` names the host `{host}`; a file URL is local: write file:///absolute/path",
                redact(url)
            ),
        ));
    }
    if path.is_empty() {
        return Ok(BackendUrl::File(default_dir()));
    }
    let decoded = percent_decode(path).ok_or_else(|| {
        Error::config(
            "backend URL",
            format!("`{}` has a malformed %-escape in its path", redact(url)),
        )
    })?;
    Ok(BackendUrl::File(PathBuf::from(decoded)))
}

fn percent_decode(path: &str) -> Option<String> {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = path.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(feature = "file")]
fn default_dir() -> PathBuf {
    distlock_file::FileBackend::default_dir()
}

#[cfg(not(feature = "file"))]
fn default_dir() -> PathBuf {
    std::env::temp_dir().join("distlock")
}

/// The URL of the embedded default backend: `file://` in the default
/// directory.
pub fn default_url() -> String {
    "file://".to_owned()
}

/// Opens the backend at `url`, connecting where the backend has a server.
///
/// # Errors
/// [`Error::InvalidConfig`] for a malformed URL, [`Error::Unsupported`] for a
/// backend this build lacks, and a backend error when the backend cannot be
/// opened or reached.
pub async fn open(url: &str) -> Result<Arc<dyn Backend>> {
    match BackendUrl::parse(url)? {
        #[cfg(feature = "file")]
        BackendUrl::File(dir) => Ok(Arc::new(distlock_file::FileBackend::open(dir)?)),
        #[cfg(not(feature = "file"))]
        BackendUrl::File(_) => Err(Error::Unsupported(
            "this build of distlock has no file backend; enable the `file` feature".into(),
        )),
        BackendUrl::Memory => Ok(Arc::new(MemoryBackend::new())),
    }
}

/// `url` with any user name and password replaced by `***`, for messages.
///
/// ```
/// assert_eq!(
///     distlock::redact("mongodb://admin:hunter2@db:27017/?tls=true"),
///     "mongodb://***@db:27017/?tls=true"
/// );
/// ```
pub fn redact(url: &str) -> String {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let authority_end = url[start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| start + i);
    match url[start..authority_end].rfind('@') {
        Some(at) => format!("{}***{}", &url[..start], &url[start + at..]),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_file_urls() {
        assert_eq!(
            BackendUrl::parse("file://").unwrap(),
            BackendUrl::File(default_dir())
        );
        assert_eq!(
            BackendUrl::parse("file:///var/lock/app").unwrap(),
            BackendUrl::File("/var/lock/app".into())
        );
        assert_eq!(
            BackendUrl::parse("file://localhost/tmp/a%20b").unwrap(),
            BackendUrl::File("/tmp/a b".into())
        );
        assert!(BackendUrl::parse("file://otherhost/tmp").is_err());
    }

    #[test]
    fn unknown_schemes_are_named_and_credentials_hidden() {
        let err = BackendUrl::parse("ftp://bob:secret@host/x")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown scheme `ftp`"), "{err}");
        assert!(!err.contains("secret"), "{err}");
        let err = BackendUrl::parse("no-scheme").unwrap_err().to_string();
        assert!(err.contains("no scheme"), "{err}");
    }

    #[test]
    fn redaction_covers_user_and_password() {
        assert_eq!(redact("memcache://u:p@h:1,h2:2"), "memcache://***@h:1,h2:2");
        assert_eq!(redact("mongodb://h/db?x=a@b"), "mongodb://h/db?x=a@b");
        assert_eq!(redact("file:///tmp"), "file:///tmp");
    }
}
