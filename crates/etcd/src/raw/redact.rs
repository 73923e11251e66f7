//! `Debug` for the messages that carry a secret, written by hand since
//! the generated one would print it.

use std::fmt;

use super::generated::etcdserverpb::{AuthenticateRequest, AuthenticateResponse};

impl fmt::Debug for AuthenticateRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthenticateRequest")
            .field("name", &"***")
            .field("password", &"***")
            .finish()
    }
}

impl fmt::Debug for AuthenticateResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthenticateResponse")
            .field("header", &self.header)
            .field("token", &"***")
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_never_shown() {
        let request = AuthenticateRequest {
            name: "alice".into(),
            password: "s3cret".into(),
        };
        let response = AuthenticateResponse {
            header: None,
            token: "t0ken".into(),
        };
        let shown = format!("{request:?} {response:?}");
        for secret in ["alice", "s3cret", "t0ken"] {
            assert!(!shown.contains(secret), "{shown}");
        }
    }
}
