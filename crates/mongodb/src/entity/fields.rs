//! The names of the fields entity locks keep on the entity's document.

use distlock_core::{Error, Result};

/// The default name of the field holding the current lock's identity.
pub const DEFAULT_LOCK_ID_FIELD: &str = "lockId";
/// The default name of the field holding when the current lock expires.
pub const DEFAULT_LOCK_EXPIRES_AT_FIELD: &str = "lockExpiresAt";
/// The default name of the field holding the latest lock's fencing token.
pub const DEFAULT_LOCK_TOKEN_FIELD: &str = "lockToken";
/// The default name of the version field of optimistic updates.
pub const DEFAULT_VERSION_FIELD: &str = "version";

/// The field names, checked to be plain top-level names, distinct from one
/// another and from `_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fields {
    /// The current lock's identity (32 hex digits); absent when unlocked.
    pub(crate) lock_id: String,
    /// When the current lock expires, by the server's clock; absent when
    /// unlocked.
    pub(crate) expires_at: String,
    /// The latest lock's fencing token; kept across releases.
    pub(crate) token: String,
    /// The entity's version, for optimistic updates.
    pub(crate) version: String,
}

impl Default for Fields {
    fn default() -> Self {
        Self {
            lock_id: DEFAULT_LOCK_ID_FIELD.to_owned(),
            expires_at: DEFAULT_LOCK_EXPIRES_AT_FIELD.to_owned(),
            token: DEFAULT_LOCK_TOKEN_FIELD.to_owned(),
            version: DEFAULT_VERSION_FIELD.to_owned(),
        }
    }
}

impl Fields {
    /// Checks every name; the error names the builder option at fault.
    pub(crate) fn check(&self) -> Result<()> {
        let named = [
            ("lock_id_field", &self.lock_id),
            ("lock_expires_at_field", &self.expires_at),
            ("lock_token_field", &self.token),
            ("version_field", &self.version),
        ];
        for (option, name) in named {
            check_name(name)
                .map_err(|reason| Error::config(option, format!("`{name}` {reason}")))?;
        }
        for (i, (option, name)) in named.iter().enumerate() {
            if let Some((other, _)) = named[..i].iter().find(|(_, earlier)| earlier == name) {
                return Err(Error::config(
                    *option,
                    format!("`{name}` is also the {other}; every field needs its own name"),
                ));
            }
        }
        Ok(())
    }

    /// Whether `name` is one of the lock fields (not the version).
    pub(crate) fn is_lock_field(&self, name: &str) -> bool {
        name == self.lock_id || name == self.expires_at || name == self.token
    }

    /// The lock fields followed by the version field.
    pub(crate) fn managed(&self) -> [&str; 4] {
        [&self.lock_id, &self.expires_at, &self.token, &self.version]
    }
}

/// Why `name` cannot be a top-level field set by name, if it cannot.
pub(crate) fn check_name(name: &str) -> std::result::Result<(), &'static str> {
    if name.is_empty() {
        Err("must not be empty")
    } else if name == "_id" {
        Err("is the document's id")
    } else if name.starts_with('$') {
        Err("must not start with `$`")
    } else if name.contains('.') {
        Err("must not contain `.` (it would name a nested field)")
    } else if name.contains('\0') {
        Err("must not contain NUL")
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid() {
        Fields::default().check().unwrap();
    }

    #[test]
    fn errors_name_the_option() {
        let cases = [
            (
                Fields {
                    lock_id: "a.b".into(),
                    ..Fields::default()
                },
                "lock_id_field",
            ),
            (
                Fields {
                    expires_at: "$x".into(),
                    ..Fields::default()
                },
                "lock_expires_at_field",
            ),
            (
                Fields {
                    token: "_id".into(),
                    ..Fields::default()
                },
                "lock_token_field",
            ),
            (
                Fields {
                    version: String::new(),
                    ..Fields::default()
                },
                "version_field",
            ),
            (
                Fields {
                    version: "lockId".into(),
                    ..Fields::default()
                },
                "version_field",
            ),
        ];
        for (fields, option) in cases {
            match fields.check() {
                Err(Error::InvalidConfig { field, .. }) => assert_eq!(field, option),
                other => panic!("expected an error for {option}, got {other:?}"),
            }
        }
    }
}
