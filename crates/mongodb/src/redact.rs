//! Keeping credentials out of messages.

pub(crate) use distlock_core::urls::redact as redact_url;
use distlock_core::urls::{percent_decode, user_info};

/// `text` %-decoded, or as it is when it does not decode.
fn decoded(text: &str) -> String {
    percent_decode(text).unwrap_or_else(|| text.to_owned())
}

/// The secrets in `url`'s user information (user name and password, raw and
/// %-decoded), longest first, so a message can be scrubbed of them.
pub(crate) fn secrets_of(url: &str) -> Vec<String> {
    let Some((_, userinfo)) = user_info(url) else {
        return Vec::new();
    };
    let mut secrets = vec![userinfo.to_owned()];
    if let Some((user, password)) = userinfo.split_once(':') {
        secrets.push(password.to_owned());
        secrets.push(decoded(password));
        secrets.push(user.to_owned());
        secrets.push(decoded(user));
    } else {
        secrets.push(decoded(userinfo));
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
    fn scrubs_raw_and_decoded_secrets() {
        let secrets = secrets_of("mongodb://bob:p%40ss@h/");
        let text = "user bob with p@ss and p%40ss";
        let scrubbed = scrub(text, &secrets);
        assert!(!scrubbed.contains("p@ss"), "{scrubbed}");
        assert!(!scrubbed.contains("p%40ss"), "{scrubbed}");
        assert!(secrets_of("mongodb://h/").is_empty());
    }
}
