//! Keeping credentials out of messages.

pub(crate) use distlock_core::backend::redact as redact_url;
use distlock_core::backend::{percent_decode, secret_options, user_info};

/// `text` %-decoded, or as it is when it does not decode.
fn decoded(text: &str) -> String {
    percent_decode(text).unwrap_or_else(|_| text.to_owned())
}

/// The secrets in `url`'s user information (user name and password) and
/// in its options that hold secrets, raw and %-decoded, longest first, so a
/// message can be scrubbed of them.
pub(crate) fn secrets_of(url: &str) -> Vec<String> {
    let mut secrets = Vec::new();
    if let Some((_, userinfo)) = user_info(url) {
        secrets.push(userinfo.to_owned());
        if let Some((user, password)) = userinfo.split_once(':') {
            secrets.push(password.to_owned());
            secrets.push(decoded(password));
            secrets.push(user.to_owned());
            secrets.push(decoded(user));
        } else {
            secrets.push(decoded(userinfo));
        }
    }
    for value in secret_options(url) {
        secrets.push(value.to_owned());
        let value = decoded(value);
        // `authMechanismProperties` is `KEY:value,KEY:value`; a message may
        // quote one value alone.
        for property in value.split(',') {
            if let Some((_, secret)) = property.split_once(':') {
                secrets.push(secret.to_owned());
            }
        }
        secrets.push(value);
    }
    secrets.retain(|secret| !secret.is_empty());
    secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
    secrets.dedup();
    secrets
}

/// `text` with every secret replaced by `***`.
pub(crate) fn scrub(text: &str, secrets: &[String]) -> String {
    let mut text = text.to_owned();
    for secret in secrets {
        text = text.replace(secret.as_str(), "***");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_user_information_only() {
        assert_eq!(
            redact_url("mongodb://admin:hunter2@db:27017/app?tls=true"),
            "mongodb://***@db:27017/app?tls=true"
        );
        assert_eq!(
            redact_url("mongodb+srv://u:p%40ss@cluster.example/"),
            "mongodb+srv://***@cluster.example/"
        );
        assert_eq!(redact_url("not a url"), "not a url");
    }

    #[test]
    fn a_password_with_unencoded_delimiters_is_still_hidden() {
        for url in [
            "mongodb://admin:hunt/er2@127.0.0.1:27017/",
            "mongodb://admin:hunt?er2@127.0.0.1:27017/",
            "mongodb://admin:hunt#er2@127.0.0.1:27017/",
        ] {
            let redacted = redact_url(url);
            assert!(!redacted.contains("er2"), "{redacted}");
            assert!(redacted.ends_with("***@127.0.0.1:27017/"), "{redacted}");
            let secrets = secrets_of(url);
            let scrubbed = scrub(&format!("cannot parse {url}"), &secrets);
            assert!(!scrubbed.contains("er2"), "{scrubbed}");
        }
        assert_eq!(redact_url("mongodb://h/db?x=a@b"), "mongodb://h/db?x=a@b");
    }

    #[test]
    fn option_secrets_are_scrubbed_too() {
        let url = "mongodb://h/?tls=true&tlsCertificateKeyFilePassword=s%33cret\
                   &authMechanismProperties=AWS_SESSION_TOKEN:tok3n";
        let secrets = secrets_of(url);
        let scrubbed = scrub("bad key password s3cret, s%33cret; token tok3n", &secrets);
        assert!(!scrubbed.contains("s3cret"), "{scrubbed}");
        assert!(!scrubbed.contains("s%33cret"), "{scrubbed}");
        assert!(!scrubbed.contains("tok3n"), "{scrubbed}");
        let redacted = redact_url(url);
        assert!(
            !redacted.contains("cret") && !redacted.contains("tok3n"),
            "{redacted}"
        );
    }

    #[test]
    fn scrubs_raw_and_decoded_secrets() {
        let secrets = secrets_of("mongodb://bob:p%40ss@h/");
        let text = "user bob with p@ss and p%40ss";
        let scrubbed = scrub(text, &secrets);
        assert!(!scrubbed.contains("p@ss"), "{scrubbed}");
        assert!(!scrubbed.contains("p%40ss"), "{scrubbed}");
        assert!(secrets_of("mongodb://h/").is_empty());
    }
}
