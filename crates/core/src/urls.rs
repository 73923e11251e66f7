//! Small helpers for backend URLs, shared by every backend that takes one.

/// The user information of `url` (`user:password` before the `@`), and
/// where it starts: after `://`, or at the start of a URL whose scheme is
/// mistyped. A password with an unencoded `/`, `?` or `#` would end the
/// host part early, so where the host part holds no `@`, everything up to
/// the last `@` counts when it holds a `:`, as a password would. That errs
/// towards hiding: it hides more of a URL with a port and an `@` in its
/// query string, but never hides a path with an `@` in it.
///
/// ```
/// use distlock_core::urls::user_info;
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
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .filter(|(key, value)| is_secret_option(key) && !value.is_empty())
        .map(|(_, value)| value)
        .collect()
}

/// `url` with any user name and password, and the values of options that
/// hold secrets (`tlsCertificateKeyFilePassword`, `authMechanismProperties`,
/// anything named like a password, secret or token), replaced by `***`,
/// for messages; see [`user_info`] for what counts as user information.
///
/// ```
/// use distlock_core::urls::redact;
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
        let options: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((key, value)) if is_secret_option(key) && !value.is_empty() => {
                    format!("{key}=***")
                }
                _ => pair.to_owned(),
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

/// Decodes `%XX` escapes; `None` when an escape is malformed or the result
/// is not UTF-8. A `+` stays a `+` (replace it first where it means a
/// space, as in query strings).
///
/// ```
/// use distlock_core::urls::percent_decode;
///
/// assert_eq!(percent_decode("a%20b%2Bc").as_deref(), Some("a b+c"));
/// assert_eq!(percent_decode("bad%2"), None);
/// ```
pub fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}
