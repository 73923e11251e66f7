//! Keeping credentials out of messages.

use distlock_core::urls::percent_decode;
pub(crate) use distlock_core::urls::redact as redact_url;

/// `text` %-decoded, or as it is when it does not decode.
fn decoded(text: &str) -> String {
    percent_decode(text).unwrap_or_else(|| text.to_owned())
}

/// The secrets in `url`'s user information (user name and password, raw and
/// %-decoded), longest first, so a message can be scrubbed of them.
pub(crate) fn secrets_of(url: &str) -> Vec<String> {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return Vec::new();
    };
    let authority_end = url[start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| start + i);
    let Some(at) = url[start..authority_end].rfind('@') else {
        return Vec::new();
    };
    let userinfo = &url[start..start + at];
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
        assert_eq!(redact_url("mongodb://h/db?x=a@b"), "mongodb://h/db?x=a@b");
        assert_eq!(redact_url("not a url"), "not a url");
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
