//! Keeping credentials out of messages.

/// `url` with any user name and password replaced by `***`.
pub(crate) fn redact_url(url: &str) -> String {
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
        secrets.push(percent_decode(password));
        secrets.push(user.to_owned());
        secrets.push(percent_decode(user));
    } else {
        secrets.push(percent_decode(userinfo));
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

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| text.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
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
