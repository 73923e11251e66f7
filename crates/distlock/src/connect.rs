//! A client from a URL: the backend it names, with client options from its
//! query.

use std::time::Duration;

use distlock_core::backend::{Query, UrlParts};
use distlock_core::{Error, LockClient, LockClientBuilder, LockOptions, Result};

use crate::url::open;

/// Opens the backend `url` names and returns a client of it, with the
/// default options and any client options of the URL's query (see the
/// [crate docs](crate#backends)).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), distlock::Error> {
/// let client = distlock::connect("memory://?lease=10s&label=reports").await?;
/// assert_eq!(client.options().lease(), std::time::Duration::from_secs(10));
/// let guard = client.acquire("nightly-report").await?;
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
///
/// # Errors
/// [`Error::InvalidConfig`] for a malformed URL or an option out of range,
/// naming the option; [`Error::Unsupported`] for a backend this build
/// lacks (enable its feature); a backend error when the backend cannot be
/// opened or reached.
///
/// # Cancel safety
/// Cancel safe: dropping the future drops the connection being made.
pub async fn connect(url: &str) -> Result<LockClient> {
    connect_with(LockClient::builder(), url).await
}

/// As [`connect`], starting from the options of `builder`; options in the
/// URL's query take precedence over the builder's.
///
/// # Errors
/// As [`connect`].
///
/// # Cancel safety
/// As [`connect`].
pub async fn connect_with(builder: LockClientBuilder, url: &str) -> Result<LockClient> {
    let (backend_url, builder) = client_options(url, builder)?;
    // Checked before connecting, so a bad option costs no connection.
    builder.clone().build_options()?;
    builder.build_shared(open(&backend_url).await?)
}

/// The client options a URL's query may hold.
const CLIENT_OPTIONS: &[&str] = &[
    "lease",
    "extend_every",
    "safety_margin",
    "operation_timeout",
    "backoff_min",
    "backoff_max",
    "local_hand_overs",
    "min_local_run",
    "at_risk_below",
    "label",
];

/// Takes distlock's client options out of `url`'s query and applies them
/// to `builder`. Returns the URL the backend sees (every other pair of the
/// query, as written) and the builder.
fn client_options(url: &str, builder: LockClientBuilder) -> Result<(String, LockClientBuilder)> {
    if !url.contains("://") {
        // `open` says what is wrong with it, naming the schemes it knows.
        return Ok((url.to_owned(), builder));
    }
    let parts = UrlParts::split(url)?;
    let mut query = Query::parse(parts.query)?;
    let mut builder = builder;
    let (mut backoff_min, mut backoff_max) = (None, None);
    for &key in CLIENT_OPTIONS {
        let Some(value) = query.take(key)? else {
            continue;
        };
        builder = match key {
            "lease" => builder.lease(duration(key, &value)?),
            "extend_every" => builder.extend_every(duration(key, &value)?),
            "safety_margin" => builder.safety_margin(duration(key, &value)?),
            "operation_timeout" => builder.operation_timeout(duration(key, &value)?),
            "min_local_run" => builder.min_local_run(duration(key, &value)?),
            "at_risk_below" => builder.at_risk_below(duration(key, &value)?),
            "local_hand_overs" => builder.local_hand_overs(value.parse().map_err(|_| {
                Error::config(key, format!("`{value}` is not a whole number from 0 up"))
            })?),
            "label" => builder.label(value),
            "backoff_min" => {
                backoff_min = Some(duration(key, &value)?);
                builder
            }
            "backoff_max" => {
                backoff_max = Some(duration(key, &value)?);
                builder
            }
            _ => unreachable!("every client option is matched"),
        };
    }
    if backoff_min.is_some() || backoff_max.is_some() {
        builder = builder.backoff(
            backoff_min.unwrap_or(LockOptions::DEFAULT_BACKOFF_MIN),
            backoff_max.unwrap_or(LockOptions::DEFAULT_BACKOFF_MAX),
        );
    }
    Ok((parts.with_query(&query.to_query_string()), builder))
}

/// A duration written as `30s`, `500ms`, `1m 30s` or bare seconds (`5`,
/// `0.5`).
fn duration(key: &str, value: &str) -> Result<Duration> {
    let invalid = || {
        Error::config(
            key,
            format!("`{value}` is not a duration; write it as 30s, 500ms, 2m or bare seconds"),
        )
    };
    let value = value.trim();
    if let Ok(seconds) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).map_err(|_| invalid());
    }
    humantime::parse_duration(value).map_err(|_| invalid())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(url: &str) -> Result<(String, LockOptions)> {
        let (url, builder) = client_options(url, LockClient::builder())?;
        Ok((url, builder.build_options()?))
    }

    #[test]
    fn client_options_leave_the_backends_own_in_place() {
        let (url, options) =
            split("postgres://u:p@db/app?table=locks&lease=10s&label=a%20b&sslmode=require")
                .unwrap();
        assert_eq!(url, "postgres://u:p@db/app?table=locks&sslmode=require");
        assert_eq!(options.lease(), Duration::from_secs(10));
        assert_eq!(options.label(), Some("a b"));

        let (url, options) = split("memory://?operation_timeout=0.5&backoff_max=2s").unwrap();
        assert_eq!(url, "memory://");
        assert_eq!(options.operation_timeout(), Duration::from_millis(500));
        assert_eq!(
            options.backoff(),
            (LockOptions::DEFAULT_BACKOFF_MIN, Duration::from_secs(2))
        );
        assert_eq!(split("file:///tmp/x").unwrap().0, "file:///tmp/x");
    }

    #[test]
    fn a_bad_client_option_is_named() {
        let error = split("memory://?lease=soon").unwrap_err();
        assert!(
            matches!(&error, Error::InvalidConfig { field, reason } if field == "lease" && reason.contains("soon")),
            "{error}"
        );
        let error = split("memory://?local_hand_overs=-1").unwrap_err();
        assert!(
            matches!(&error, Error::InvalidConfig { field, .. } if field == "local_hand_overs")
        );
    }

    #[test]
    fn a_plus_in_a_client_option_is_a_plus() {
        let (_, options) = split("memory://?label=a+b%2Bc%20d").unwrap();
        assert_eq!(options.label(), Some("a+b+c d"));
    }

    #[test]
    fn a_client_option_given_twice_or_malformed_is_refused_by_name() {
        for url in [
            "memory://?lease=1s&lease=2s",
            "memory://?lease=%zz",
            "memory://?lease",
        ] {
            let error = split(url).unwrap_err();
            assert!(
                matches!(&error, Error::InvalidConfig { field, .. } if field == "lease"),
                "{url}: {error}"
            );
        }
    }

    #[test]
    fn options_are_checked_together() {
        let error = split("memory://?lease=1s&extend_every=2s").unwrap_err();
        assert!(matches!(error, Error::InvalidConfig { .. }), "{error}");
    }

    #[tokio::test]
    async fn an_unknown_option_is_refused_by_name() {
        for url in [
            "memory://?leese=10s",
            "file:///tmp/distlock-unknown?leese=10s",
        ] {
            let error = connect(url).await.unwrap_err();
            assert!(
                matches!(&error, Error::InvalidConfig { reason, .. } if reason.contains("`leese`")),
                "{url}: {error}"
            );
        }
    }

    #[tokio::test]
    async fn the_builders_options_yield_to_the_urls() {
        let builder = LockClient::builder()
            .lease(Duration::from_secs(20))
            .label("builder");
        let client = connect_with(builder, "memory://?label=url").await.unwrap();
        assert_eq!(client.options().lease(), Duration::from_secs(20));
        assert_eq!(client.options().label(), Some("url"));
    }
}
