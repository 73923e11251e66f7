//! The options of a MongoDB URL: distlock's `collection`, taken out before
//! the driver sees the URL, and the driver's, checked by name, so that a
//! misspelt option is refused with a way to fix it, whatever version of
//! the driver is built.

use distlock_core::backend::{Query, UrlParts};
use distlock_core::{Error, Result};

use crate::redact::redact_url;

/// distlock's own options of a MongoDB URL.
const COLLECTION: &str = "collection";
const FAIR: &str = "fair";

/// The options the `mongodb` driver's connection-string parser knows,
/// lowercased: the keys its `parse_option_pair` matches (driver 3.6).
/// Keys are case-insensitive, as the connection-string specification says.
/// A few are known only with a driver feature (`compressors`, the
/// `proxy*` options, `tlsCertificateKeyFilePassword`); without it, the
/// driver refuses them with a message of its own.
const DRIVER_OPTIONS: &[&str] = &[
    "appname",
    "authmechanism",
    "authmechanismproperties",
    "authsource",
    "compressors",
    "connecttimeoutms",
    "directconnection",
    "enableoverloadretargeting",
    "heartbeatfrequencyms",
    "journal",
    "loadbalanced",
    "localthresholdms",
    "maxadaptiveretries",
    "maxconnecting",
    "maxidletimems",
    "maxpoolsize",
    "maxstalenessseconds",
    "minpoolsize",
    "proxyhost",
    "proxypassword",
    "proxyport",
    "proxyusername",
    "readconcernlevel",
    "readpreference",
    "readpreferencetags",
    "replicaset",
    "retryreads",
    "retrywrites",
    "servermonitoringmode",
    "serverselectiontimeoutms",
    "sockettimeoutms",
    "srvmaxhosts",
    "srvservicename",
    "ssl",
    "tls",
    "tlsallowinvalidcertificates",
    "tlscafile",
    "tlscertificatekeyfile",
    "tlscertificatekeyfilepassword",
    "tlsinsecure",
    "uuidrepresentation",
    "w",
    "waitqueuetimeoutms",
    "wtimeoutms",
    "zlibcompressionlevel",
];

/// Where the driver's options are described.
const DRIVER_OPTIONS_PAGE: &str =
    "https://www.mongodb.com/docs/manual/reference/connection-string-options/";

/// The one driver option that is a list, given once per element.
const REPEATABLE: &[&str] = &["readPreferenceTags"];

fn is_driver_option(key: &str) -> bool {
    DRIVER_OPTIONS
        .iter()
        .any(|known| known.eq_ignore_ascii_case(key))
}

/// Splits distlock's own options (`collection` and `fair`) off a MongoDB
/// URL, so the rest can go to the driver. Returns the URL without them,
/// and the collection if the URL named one.
///
/// # Errors
/// [`Error::InvalidConfig`] naming `collection` when it is given twice,
/// empty or malformed, naming `fair` when it is given twice or is neither
/// `true` nor `false`, and naming any option whose escapes do not decode.
pub fn split_collection_option(url: &str) -> Result<(String, Option<String>)> {
    split_options(url).map(|(url, options)| (url, options.collection))
}

/// distlock's own options of a MongoDB URL.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct OwnOptions {
    pub(crate) collection: Option<String>,
    pub(crate) fair: Option<bool>,
}

/// Splits distlock's own options off a MongoDB URL: the URL for the
/// driver, and the options.
///
/// # Errors
/// As [`split_collection_option`].
pub(crate) fn split_options(url: &str) -> Result<(String, OwnOptions)> {
    let parts = UrlParts::split(url)?;
    let mut query = Query::parse(parts.query)?;
    let collection = match query.take_ignoring_case(COLLECTION)? {
        Some(collection) if collection.is_empty() => {
            return Err(Error::config(
                COLLECTION,
                format!("`{}` has an empty `collection`", redact_url(url)),
            ));
        }
        collection => collection,
    };
    let fair = query.take_flag(FAIR)?;
    let options = OwnOptions { collection, fair };
    if options == OwnOptions::default() {
        return Ok((url.to_owned(), options));
    }
    Ok((parts.with_query(&query.to_query_string()), options))
}

/// Checks the options of `url`, the URL handed to the driver: each must be
/// one the driver knows, named as it reads it, and given once (but
/// `readPreferenceTags`).
///
/// # Errors
/// [`Error::InvalidConfig`] naming the first option at fault and saying
/// how to fix it.
pub(crate) fn check_driver_options(url: &str) -> Result<()> {
    let parts = UrlParts::split(url)?;
    let query = Query::parse(parts.query)?;
    for pair in query.pairs() {
        let key = pair.key();
        if pair.key_as_written() != key {
            return Err(Error::config(
                key,
                "write the option's name without %-escapes: the driver does not decode names",
            ));
        }
        if key.eq_ignore_ascii_case(COLLECTION) {
            return Err(Error::config(
                key,
                "`collection` is distlock's option, read by `MongoConfig::parse` and \
                 `distlock::connect`; with `MongoConfig::new`, call `.collection(…)`",
            ));
        }
        if !is_driver_option(key) {
            return Err(Error::config(
                key,
                format!(
                    "unknown option `{key}`; distlock's own option is `collection`, and the \
                     driver's (case-insensitive) are listed at {DRIVER_OPTIONS_PAGE}"
                ),
            ));
        }
    }
    query.refuse_repeats(REPEATABLE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(result: Result<impl std::fmt::Debug>) -> String {
        match result {
            Err(Error::InvalidConfig { field, .. }) => field,
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }

    #[test]
    fn the_collection_option_is_split_off() {
        assert_eq!(
            split_collection_option("mongodb://h/db?collection=locks&w=1").unwrap(),
            ("mongodb://h/db?w=1".to_owned(), Some("locks".to_owned()))
        );
        assert_eq!(
            split_collection_option("mongodb://h/db?Collection=a%2Eb+c").unwrap(),
            ("mongodb://h/db".to_owned(), Some("a.b+c".to_owned()))
        );
        assert_eq!(
            split_collection_option("mongodb://h/").unwrap(),
            ("mongodb://h/".to_owned(), None)
        );
        assert!(split_collection_option("mongodb://h/?collection=a&collection=b").is_err());
        assert!(split_collection_option("mongodb://h/?collection=").is_err());
        assert_eq!(
            field_of(split_collection_option("mongodb://h/?collection=%zz")),
            "collection"
        );
    }

    #[test]
    fn the_fair_option_is_split_off_and_never_reaches_the_driver() {
        let (url, options) = split_options("mongodb://h/db?w=1&fair=true&collection=c").unwrap();
        assert_eq!(url, "mongodb://h/db?w=1");
        assert_eq!(
            options,
            OwnOptions {
                collection: Some("c".to_owned()),
                fair: Some(true)
            }
        );
        assert_eq!(
            split_collection_option("mongodb://h/db?fair=false").unwrap(),
            ("mongodb://h/db".to_owned(), None)
        );
        let error = split_options("mongodb://h/db?fair=1").unwrap_err();
        assert!(error.to_string().contains("fair=true"), "{error}");
    }

    #[test]
    fn an_unknown_option_is_refused_by_name_with_the_fix() {
        let error = check_driver_options("mongodb://u:hunter2@h/?w=1&w-timeout=5").unwrap_err();
        let text = error.to_string();
        assert!(text.contains("unknown option `w-timeout`"), "{text}");
        assert!(
            text.contains("collection") && text.contains(DRIVER_OPTIONS_PAGE),
            "{text}"
        );
        assert!(!text.contains("hunter2"), "{text}");
        assert_eq!(
            field_of(check_driver_options("mongodb://h/?collection=l")),
            "collection"
        );
        assert_eq!(
            field_of(check_driver_options("mongodb://h/?w%74imeoutMS=5")),
            "wtimeoutMS"
        );
    }

    #[test]
    fn driver_options_match_in_any_case_and_repeat_only_when_a_list() {
        check_driver_options(
            "mongodb://a,b/db?replicaSet=rs0&READPREFERENCE=nearest&readPreferenceTags=dc:ny\
             &readpreferencetags=&wTimeoutMS=5&directConnection=false",
        )
        .unwrap();
        assert_eq!(field_of(check_driver_options("mongodb://h/?w=1&W=2")), "W");
    }

    /// Every option the guide and the tests use is one we let through.
    #[test]
    fn the_options_in_use_are_known() {
        let guide = include_str!("../../../docs/mongodb.md");
        let readme = include_str!("../README.md");
        let tests = [
            include_str!("../../chaos/src/backends/mongodb.rs"),
            include_str!("../tests/server/credentials.rs"),
            include_str!("../../conformance/tests/mongodb.rs"),
        ];
        let mut checked = 0;
        for text in [guide, readme].into_iter().chain(tests) {
            for url in urls_in(text) {
                let Some((_, query)) = url.split_once('?') else {
                    continue;
                };
                for pair in query.split('&') {
                    let key = pair.split_once('=').map_or(pair, |(key, _)| key);
                    if key.is_empty() || key.contains(['{', '}']) {
                        continue;
                    }
                    assert!(
                        is_driver_option(key) || key.eq_ignore_ascii_case(COLLECTION),
                        "`{key}` in {url} is not an option we know"
                    );
                    checked += 1;
                }
            }
        }
        // The campaign adds these to its URLs from a string of their own.
        for key in ["serverSelectionTimeoutMS", "connectTimeoutMS"] {
            assert!(is_driver_option(key), "{key}");
        }
        assert!(
            checked >= 5,
            "only {checked} options found: is the scan broken?"
        );
    }

    /// The `mongodb://` URLs in `text`, up to a quote, space or backtick.
    fn urls_in(text: &str) -> impl Iterator<Item = &str> {
        text.match_indices("mongodb").filter_map(move |(at, _)| {
            let rest = &text[at..];
            let end = rest
                .find(|c: char| c.is_whitespace() || matches!(c, '"' | '`' | '\'' | ')' | '<'))
                .unwrap_or(rest.len());
            let url = &rest[..end];
            url.contains("://").then_some(url)
        })
    }
}
