//! Keeping credentials out of messages: a URL's user information and the
//! values of options that hold secrets.

use super::query::split_pairs;

/// The user information of `url` (`user:password` before the `@`), and
/// where it starts: after `://`, or at the start of a URL whose scheme is
/// mistyped. A password with an unencoded `/`, `?` or `#` would end the
/// host part early, so where the host part holds no `@`, everything up to
/// the last `@` counts when it holds a `:`, as a password would. That errs
/// towards hiding: it hides more of a URL with a port and an `@` in its
/// query string, but never hides a path with an `@` in it.
///
/// ```
/// use distlock_core::backend::user_info;
///
/// assert_eq!(user_info("mongodb://admin:hunter2@db/"), Some((10, "admin:hunter2")));
/// assert_eq!(user_info("mongodb://admin:hunt/er2@db/"), Some((10, "admin:hunt/er2")));
/// assert_eq!(user_info("mongodb//admin:hunter2@db/"), Some((0, "mongodb//admin:hunter2")));
/// assert_eq!(user_info("mongodb://db/app?x=a@b"), None);
/// assert_eq!(user_info("file:///run/user@1000/locks"), None);
/// ```
pub fn user_info(url: &str) -> Option<(usize, &str)> {
    let start = url.find("://").map_or(0, |scheme| scheme + 3);
    let rest = &url[start..];
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let info = match authority.rfind('@') {
        Some(at) => &authority[..at],
        None => Some(&rest[..rest.rfind('@')?]).filter(|info| info.contains(':'))?,
    };
    Some((start, info))
}

/// Whether the URL option `key` holds a secret: a password, a token, or
/// the mechanism properties that can carry either.
fn is_secret_option(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["password", "secret", "token", "authmechanismproperties"]
        .iter()
        .any(|word| key.contains(word))
}

/// The values of `url`'s options that hold secrets (see [`redact`]), as
/// written.
pub fn secret_options(url: &str) -> Vec<&str> {
    let Some((_, query)) = url.split_once('?') else {
        return Vec::new();
    };
    let query = query.split('#').next().unwrap_or_default();
    split_pairs(query)
        .filter_map(|(_, key, value)| Some(value?).filter(|_| is_secret_option(key)))
        .filter(|value| !value.is_empty())
        .collect()
}

/// `url` with any user name and password, and the values of options that
/// hold secrets (`tlsCertificateKeyFilePassword`, `authMechanismProperties`,
/// anything named like a password, secret or token), replaced by `***`,
/// for messages; see [`user_info`] for what counts as user information.
///
/// ```
/// use distlock_core::backend::redact;
///
/// assert_eq!(redact("mongodb://admin:hunter2@db:27017/?tls=true"), "mongodb://***@db:27017/?tls=true");
/// assert_eq!(redact("mongodb://admin:hu?nt#er/2@db/"), "mongodb://***@db/");
/// assert_eq!(redact("mongodb//admin:hunter2@db/"), "***@db/");
/// assert_eq!(
///     redact("mongodb://db/?tls=true&tlsCertificateKeyFilePassword=s3cret"),
///     "mongodb://db/?tls=true&tlsCertificateKeyFilePassword=***"
/// );
/// assert_eq!(redact("mongodb://db/app?tls=true"), "mongodb://db/app?tls=true");
/// ```
pub fn redact(url: &str) -> String {
    let mut redacted = match user_info(url) {
        Some((start, info)) => format!("{}***{}", &url[..start], &url[start + info.len()..]),
        None => url.to_owned(),
    };
    if let Some((head, query)) = redacted.split_once('?') {
        let (query, fragment) = match query.split_once('#') {
            Some((query, fragment)) => (query, Some(fragment)),
            None => (query, None),
        };
        let options: Vec<String> = split_pairs(query)
            .map(|(written, key, value)| match value {
                Some(value) if is_secret_option(key) && !value.is_empty() => {
                    format!("{key}=***")
                }
                _ => written.to_owned(),
            })
            .collect();
        let mut rebuilt = format!("{head}?{}", options.join("&"));
        if let Some(fragment) = fragment {
            rebuilt.push('#');
            rebuilt.push_str(fragment);
        }
        redacted = rebuilt;
    }
    redacted
}
