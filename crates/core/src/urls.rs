//! Small helpers for backend URLs, shared by every backend that takes one.

/// The user information of `url` (`user:password` before the `@`), and
/// where it starts. A password with an unencoded `/`, `?` or `#` would end
/// the host part early, so where the host part holds no `@`, everything
/// up to the last `@` counts when it holds a `:`, as a password would.
/// That errs towards hiding: it hides more of a URL with a port and an `@`
/// in its query string, but never hides a path with an `@` in it.
///
/// ```
/// use distlock_core::urls::user_info;
///
/// assert_eq!(user_info("mongodb://admin:hunter2@db/"), Some((10, "admin:hunter2")));
/// assert_eq!(user_info("mongodb://admin:hunt/er2@db/"), Some((10, "admin:hunt/er2")));
/// assert_eq!(user_info("mongodb://db/app?x=a@b"), None);
/// assert_eq!(user_info("file:///run/user@1000/locks"), None);
/// ```
pub fn user_info(url: &str) -> Option<(usize, &str)> {
    let start = url.find("://")? + 3;
    let rest = &url[start..];
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let info = match authority.rfind('@') {
        Some(at) => &authority[..at],
        None => Some(&rest[..rest.rfind('@')?]).filter(|info| info.contains(':'))?,
    };
    Some((start, info))
}

/// `url` with any user name and password replaced by `***`, for messages;
/// see [`user_info`] for what counts.
///
/// ```
/// use distlock_core::urls::redact;
///
/// assert_eq!(redact("mongodb://admin:hunter2@db:27017/?tls=true"), "mongodb://***@db:27017/?tls=true");
/// assert_eq!(redact("mongodb://admin:hu?nt#er/2@db/"), "mongodb://***@db/");
/// assert_eq!(redact("mongodb://db/app?tls=true"), "mongodb://db/app?tls=true");
/// ```
pub fn redact(url: &str) -> String {
    match user_info(url) {
        Some((start, info)) => format!("{}***{}", &url[..start], &url[start + info.len()..]),
        None => url.to_owned(),
    }
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
