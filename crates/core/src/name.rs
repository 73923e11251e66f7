//! Validated lock names.

use std::fmt;
use std::sync::Arc;

use crate::error::Error;

/// The longest name accepted, in bytes of UTF-8.
pub const MAX_NAME_LEN: usize = 1024;

/// The name of a lock: any non-empty UTF-8 string of at most [`MAX_NAME_LEN`] bytes.
///
/// Names are compared byte for byte, so they are case-sensitive. Every
/// character is allowed, including `$`, `.`, NUL, CR, LF, spaces and emoji:
/// each backend encodes names for its own key space so that two different
/// names never collide and no name can change the meaning of a query.
///
/// Cloning is cheap (the text is shared).
///
/// ```
/// use distlock_core::LockName;
///
/// let name = LockName::new("reports/42")?;
/// assert_eq!(name.as_str(), "reports/42");
/// assert!(LockName::new("").is_err());
/// # Ok::<(), distlock_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockName(Arc<str>);

impl LockName {
    /// Validates `name`.
    ///
    /// # Errors
    /// [`Error::InvalidName`] when the name is empty or longer than
    /// [`MAX_NAME_LEN`] bytes.
    pub fn new(name: impl AsRef<str>) -> Result<Self, Error> {
        let name = name.as_ref();
        if name.is_empty() {
            return Err(Error::InvalidName {
                reason: "a lock name must not be empty".into(),
            });
        }
        if name.len() > MAX_NAME_LEN {
            return Err(Error::InvalidName {
                reason: format!(
                    "a lock name must be at most {MAX_NAME_LEN} bytes of UTF-8, this one has {}",
                    name.len()
                ),
            });
        }
        Ok(Self(Arc::from(name)))
    }

    /// The name as it was given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

/// Shows the name with control characters escaped, so that a name can never
/// forge extra lines in logs or terminal output.
impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

impl TryFrom<&str> for LockName {
    type Error = Error;
    fn try_from(value: &str) -> Result<Self, Error> {
        Self::new(value)
    }
}

impl TryFrom<String> for LockName {
    type Error = Error;
    fn try_from(value: String) -> Result<Self, Error> {
        Self::new(value)
    }
}

/// Anything a lock call takes as a name: `&str`, `String`, `&String`,
/// [`LockName`] and `&LockName`. A string is validated by the call that
/// takes it, so an invalid name is that call's [`Error::InvalidName`].
///
/// ```
/// use distlock_core::{IntoLockName, LockName};
///
/// assert_eq!("jobs/7".into_lock_name()?, LockName::new("jobs/7")?);
/// assert!(String::new().into_lock_name().is_err());
/// # Ok::<(), distlock_core::Error>(())
/// ```
pub trait IntoLockName {
    /// The validated name.
    ///
    /// # Errors
    /// [`Error::InvalidName`] when the name is empty or longer than
    /// [`MAX_NAME_LEN`] bytes.
    fn into_lock_name(self) -> Result<LockName, Error>;
}

impl IntoLockName for LockName {
    fn into_lock_name(self) -> Result<LockName, Error> {
        Ok(self)
    }
}

impl IntoLockName for &LockName {
    fn into_lock_name(self) -> Result<LockName, Error> {
        Ok(self.clone())
    }
}

impl IntoLockName for &str {
    fn into_lock_name(self) -> Result<LockName, Error> {
        LockName::new(self)
    }
}

impl IntoLockName for String {
    fn into_lock_name(self) -> Result<LockName, Error> {
        LockName::new(self)
    }
}

impl IntoLockName for &String {
    fn into_lock_name(self) -> Result<LockName, Error> {
        LockName::new(self)
    }
}

impl AsRef<str> for LockName {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_odd_names_verbatim() {
        for raw in ["$$NOW", "$x", "a.b", "\0", "\r\n", "🦀 lock", " ", "A"] {
            assert_eq!(LockName::new(raw).unwrap().as_str(), raw);
        }
        let longest = "x".repeat(MAX_NAME_LEN);
        assert_eq!(LockName::new(&longest).unwrap().as_str(), longest);
    }

    #[test]
    fn rejects_empty_and_overlong_names() {
        assert!(matches!(LockName::new(""), Err(Error::InvalidName { .. })));
        let err = LockName::new("x".repeat(MAX_NAME_LEN + 1)).unwrap_err();
        assert!(err.to_string().contains("1025"), "{err}");
    }

    #[test]
    fn names_are_case_sensitive() {
        assert_ne!(LockName::new("a").unwrap(), LockName::new("A").unwrap());
    }

    #[test]
    fn display_escapes_control_characters() {
        let name = LockName::new("a\r\nb\0").unwrap();
        assert_eq!(name.to_string(), "a\\r\\nb\\u{0}");
    }
}
