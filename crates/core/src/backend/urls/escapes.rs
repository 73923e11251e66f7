//! `%XX` escapes, decoded strictly.

use std::fmt;

/// Why a %-encoded text does not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BadEscape {
    /// A `%` not followed by two hex digits.
    Malformed,
    /// The decoded bytes are not UTF-8.
    NotUtf8,
}

impl fmt::Display for BadEscape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Malformed => {
                "a malformed %-escape: a `%` not followed by two hex digits (write a literal % \
                 as %25)"
            }
            Self::NotUtf8 => "its %-escapes decode to bytes that are not UTF-8",
        })
    }
}

impl std::error::Error for BadEscape {}

/// Decodes the `%XX` escapes of `text`, refusing a malformed escape and a
/// result that is not UTF-8. A `+` stays a `+`: see [the module
/// docs](crate::backend#reading-urls) for why.
///
/// ```
/// use distlock_core::backend::{BadEscape, percent_decode};
///
/// assert_eq!(percent_decode("a%20b+c%2B").as_deref(), Ok("a b+c+"));
/// assert_eq!(percent_decode("bad%2"), Err(BadEscape::Malformed));
/// assert_eq!(percent_decode("%FF"), Err(BadEscape::NotUtf8));
/// ```
///
/// # Errors
/// [`BadEscape`] saying which of the two is wrong.
pub fn percent_decode(text: &str) -> Result<String, BadEscape> {
    // The crate leaves a malformed escape as it is; we refuse it, as libpq
    // does, rather than guess what was meant.
    if has_malformed_escape(text) {
        return Err(BadEscape::Malformed);
    }
    percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .map(|decoded| decoded.into_owned())
        .map_err(|_| BadEscape::NotUtf8)
}

/// Whether some `%` of `text` is not followed by two hex digits. Hex
/// digits are never `%`, so each `%` can be judged on its own.
fn has_malformed_escape(text: &str) -> bool {
    let bytes = text.as_bytes();
    let is_hex = |at: usize| bytes.get(at).is_some_and(u8::is_ascii_hexdigit);
    bytes
        .iter()
        .enumerate()
        .any(|(at, &byte)| byte == b'%' && !(is_hex(at + 1) && is_hex(at + 2)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_escapes_and_keeps_plus() {
        assert_eq!(percent_decode("").as_deref(), Ok(""));
        assert_eq!(percent_decode("a+b").as_deref(), Ok("a+b"));
        assert_eq!(percent_decode("a%2Bb%2bc").as_deref(), Ok("a+b+c"));
        assert_eq!(percent_decode("%25%20%C3%A9").as_deref(), Ok("% é"));
    }

    #[test]
    fn refuses_what_does_not_decode() {
        for text in ["%", "%2", "%zz", "a%g1", "%%41", "ok%4"] {
            assert_eq!(percent_decode(text), Err(BadEscape::Malformed), "{text}");
        }
        for text in ["%FF", "%C3", "%C3%28"] {
            assert_eq!(percent_decode(text), Err(BadEscape::NotUtf8), "{text}");
        }
    }
}
