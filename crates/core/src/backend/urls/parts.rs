//! A URL cut at its delimiters. The `url` crate cannot do it for us: a
//! host list (`etcd://m1,m2,m3`) is not an authority it parses.

use crate::{Error, Result};

use super::redact::{self, redact};

/// A URL cut into its parts, as written: nothing is decoded.
///
/// `scheme://[user_info@]hosts[/path][?query][#fragment]`, where the
/// hosts end at the first `/`, `?` or `#`, and the user information at the
/// last `@` before that.
///
/// ```
/// use distlock_core::backend::UrlParts;
///
/// let url = "etcd://root:s%40cret@m1,m2:2380/?prefix=app/#top";
/// let parts = UrlParts::split(url)?;
/// assert_eq!(parts.scheme, "etcd");
/// assert_eq!(parts.user_info, Some("root:s%40cret"));
/// assert_eq!(parts.hosts, "m1,m2:2380");
/// assert_eq!(parts.path, "/");
/// assert_eq!(parts.query, "prefix=app/");
/// assert_eq!(parts.fragment, Some("top"));
/// assert_eq!(parts.with_query("a=1"), "etcd://root:s%40cret@m1,m2:2380/?a=1#top");
/// # Ok::<(), distlock_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct UrlParts<'a> {
    /// The scheme, as written: compare it ignoring ASCII case.
    pub scheme: &'a str,
    /// `user[:password]`, when the URL has an `@` before its hosts.
    pub user_info: Option<&'a str>,
    /// The host list, perhaps empty; [`parse_hosts`](super::parse_hosts)
    /// reads it.
    pub hosts: &'a str,
    /// From the `/` after the hosts up to the query; empty when none.
    pub path: &'a str,
    /// After the `?`, up to any `#`; empty when none. [`Query`](super::Query)
    /// reads it.
    pub query: &'a str,
    /// After the `#`, when there is one.
    pub fragment: Option<&'a str>,
    /// Everything before the query and fragment.
    before_query: &'a str,
}

impl<'a> UrlParts<'a> {
    /// Cuts `url` into its parts.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] (field `backend URL`) when `url` has no
    /// `scheme://`, and when an `@` follows the hosts where a password
    /// with an unencoded `/`, `?` or `#` would put it: that URL could be
    /// read two ways, one of which shows the password as a host. Messages
    /// show the URL with its credentials hidden.
    pub fn split(url: &'a str) -> Result<Self> {
        let Some((scheme, rest)) = url
            .split_once("://")
            .filter(|(scheme, _)| !scheme.is_empty())
        else {
            return Err(Error::config(
                "backend URL",
                format!("`{}` has no scheme://", redact(url)),
            ));
        };
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, after) = rest.split_at(authority_end);
        let (user_info, hosts) = match authority.rsplit_once('@') {
            Some((info, hosts)) => (Some(info), hosts),
            None => (None, authority),
        };
        // Redaction hides more than this split takes as user information
        // exactly when a password holds an unencoded delimiter.
        let hidden =
            redact::user_info(url).is_some_and(|(_, info)| !info.starts_with(['/', '?', '#']));
        if user_info.is_none() && hidden {
            return Err(Error::config(
                "backend URL",
                format!(
                    "`{}` has an `@` after its host, as a password with an unencoded `/`, `?` \
                     or `#` would; %-encode them in the password (%2F, %3F, %23), and an `@` \
                     in an option as %40",
                    redact(url)
                ),
            ));
        }
        let (before_fragment, fragment) = match after.split_once('#') {
            Some((before, fragment)) => (before, Some(fragment)),
            None => (after, None),
        };
        let (path, query) = before_fragment
            .split_once('?')
            .unwrap_or((before_fragment, ""));
        let before_query_len = url.len() - after.len() + path.len();
        Ok(Self {
            scheme,
            user_info,
            hosts,
            path,
            query,
            fragment,
            before_query: &url[..before_query_len],
        })
    }

    /// The URL up to its query: scheme, user information, hosts and path.
    pub fn before_query(&self) -> &'a str {
        self.before_query
    }

    /// The URL with `query` in place of its own (no `?` when `query` is
    /// empty), and its fragment kept: a driver's URL once distlock's own
    /// options are taken out.
    pub fn with_query(&self, query: &str) -> String {
        let mut url = self.before_query.to_owned();
        if !query.is_empty() {
            url.push('?');
            url.push_str(query);
        }
        if let Some(fragment) = self.fragment {
            url.push('#');
            url.push_str(fragment);
        }
        url
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_every_shape() {
        let parts = UrlParts::split("memory://").unwrap();
        assert_eq!(
            (
                parts.scheme,
                parts.user_info,
                parts.hosts,
                parts.path,
                parts.query
            ),
            ("memory", None, "", "", "")
        );
        let parts = UrlParts::split("file:///tmp/a%20b?lease=1s").unwrap();
        assert_eq!(
            (parts.hosts, parts.path, parts.query),
            ("", "/tmp/a%20b", "lease=1s")
        );
        assert_eq!(parts.before_query(), "file:///tmp/a%20b");
        let parts = UrlParts::split("mongodb://u:p@[::1]:1,h2/db?w=1&x=a@b").unwrap();
        assert_eq!(parts.user_info, Some("u:p"));
        assert_eq!((parts.hosts, parts.path), ("[::1]:1,h2", "/db"));
        assert_eq!(parts.query, "w=1&x=a@b");
        assert_eq!(parts.with_query(""), "mongodb://u:p@[::1]:1,h2/db");
        let parts = UrlParts::split("memcache://h?a=1#f?g").unwrap();
        assert_eq!((parts.query, parts.fragment), ("a=1", Some("f?g")));
        let parts = UrlParts::split("file:///run/a:b@c").unwrap();
        assert_eq!((parts.user_info, parts.path), (None, "/run/a:b@c"));
    }

    #[test]
    fn refuses_what_reads_two_ways_without_showing_secrets() {
        for url in ["etcd://u:pw/zq@h", "etcd://u:pw?zq@h", "etcd://u:pw#zq@h"] {
            let error = UrlParts::split(url).unwrap_err().to_string();
            assert!(!error.contains("zq"), "{error}");
            assert!(error.contains("unencoded"), "{error}");
        }
        for url in ["no-scheme", "://h", "u:secret@h"] {
            let error = UrlParts::split(url).unwrap_err().to_string();
            assert!(error.contains("no scheme"), "{error}");
            assert!(!error.contains("secret"), "{error}");
        }
    }
}
