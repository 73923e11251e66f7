//! Small helpers for backend URLs, shared by every backend that takes one.

/// `url` with any user name and password replaced by `***`, for messages.
///
/// ```
/// use distlock_core::urls::redact;
///
/// assert_eq!(redact("mongodb://admin:hunter2@db:27017/?tls=true"), "mongodb://***@db:27017/?tls=true");
/// assert_eq!(redact("mongodb://db/app?x=a@b"), "mongodb://db/app?x=a@b");
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
