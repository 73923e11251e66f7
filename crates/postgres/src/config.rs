//! The backend's URL: a libpq-style `postgres://` or `postgresql://` URL
//! whose options `table`, `schema`, `mode`, `advisory_class` and
//! `listen_url` are distlock's, and whose other options go to the driver.

use std::fmt;
use std::str::FromStr;

use distlock_core::urls::{percent_decode, redact, secret_options, user_info};
use distlock_core::{Error, Result};

use crate::table::TableName;

/// The lock table, when the URL names none.
pub const DEFAULT_TABLE: &str = "distlock_locks";

/// The fencing-token table of `mode=advisory`, when the URL names none.
pub const DEFAULT_ADVISORY_TABLE: &str = "distlock_advisory";

/// The first of the two-`int4` advisory keys' halves that `mode=advisory`
/// uses, when the URL gives no `advisory_class`: the bytes `dl` (0x646c),
/// shifted up. The application's own advisory locks keep out of it by
/// using another class, or the one-`bigint` key form, which PostgreSQL
/// keeps apart from the two-`int4` form.
pub const DEFAULT_ADVISORY_CLASS: i32 = 0x646c_0000;

/// The schema of the lock table, when the URL names none.
pub const DEFAULT_SCHEMA: &str = "public";

/// How the backend holds locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mode {
    /// One row per lock, with leases judged by the server's clock
    /// (`mode=lease`, the default).
    Lease,
    /// Session advisory locks on a connection pinned to each grant
    /// (`mode=advisory`); see the [crate documentation](crate#advisory-mode).
    Advisory,
}

/// Where the backend connects, and where it keeps its locks.
///
/// `Debug` never shows the user name, the password or secret options.
#[derive(Clone)]
pub struct PostgresConfig {
    /// What the driver connects with: the URL less distlock's options.
    pub(crate) driver: tokio_postgres::Config,
    /// The lock table, schema-qualified.
    pub(crate) table: TableName,
    /// How locks are held (`?mode=`).
    pub mode: Mode,
    /// The class (first key half) of `mode=advisory`'s advisory locks
    /// (`?advisory_class=`, [`DEFAULT_ADVISORY_CLASS`] when not given).
    pub advisory_class: i32,
    /// What the listening connection for release wake-ups connects with:
    /// `?listen_url=` when given, else the main URL. Pooled connections
    /// never listen, since PgBouncer in transaction mode hands them to
    /// other clients between statements.
    pub(crate) listen: tokio_postgres::Config,
    /// `?listen_url=` as given, for display only.
    listen_url: Option<String>,
    /// The URL as messages may show it.
    shown: String,
}

impl fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresConfig")
            .field("url", &self.shown)
            .field("table", &self.table)
            .field("mode", &self.mode)
            .field("advisory_class", &self.advisory_class)
            .field("listen_url", &self.listen_url.as_deref().map(redact))
            .finish()
    }
}

impl PostgresConfig {
    /// Parses a `postgres://` or `postgresql://` URL.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the part at fault: another scheme, a
    /// malformed escape, an empty or overlong `table` or `schema`, a `mode`
    /// other than `lease` and `advisory`, an `advisory_class` that is not
    /// an integer from 0 to 2147483647, an option the driver refuses, or a `listen_url` that is not a PostgreSQL URL the
    /// driver accepts. Messages never include the user information or
    /// secret options.
    pub fn parse(url: &str) -> Result<Self> {
        if !is_postgres_url(url) {
            return Err(Error::config(
                "url",
                "a PostgreSQL URL starts with postgres:// or postgresql://",
            ));
        }
        let shown = redact(url);
        let (head, query) = match url.split_once('?') {
            Some((head, query)) => (head, query),
            None => (url, ""),
        };
        let mut schema = DEFAULT_SCHEMA.to_owned();
        let mut table = None;
        let mut mode = Mode::Lease;
        let mut advisory_class = DEFAULT_ADVISORY_CLASS;
        let mut listen_url = None;
        let mut driver_options = Vec::new();
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let (key, raw) = pair.split_once('=').unwrap_or((pair, ""));
            let decoded = || {
                percent_decode(&raw.replace('+', " ")).ok_or_else(|| {
                    Error::config(key, "the value has a malformed %-escape or is not UTF-8")
                })
            };
            match key {
                "schema" => schema = decoded()?,
                "table" => table = Some(decoded()?),
                "mode" => mode = parse_mode(&decoded()?)?,
                "advisory_class" => advisory_class = parse_class(&decoded()?)?,
                "listen_url" => listen_url = Some(decoded()?).filter(|url| !url.is_empty()),
                _ => driver_options.push(pair),
            }
        }
        let table = table.unwrap_or_else(|| {
            match mode {
                Mode::Lease => DEFAULT_TABLE,
                Mode::Advisory => DEFAULT_ADVISORY_TABLE,
            }
            .to_owned()
        });
        let table = TableName::new(&schema, &table)?;
        let driver_url = if driver_options.is_empty() {
            head.to_owned()
        } else {
            format!("{head}?{}", driver_options.join("&"))
        };
        let driver = driver_config("url", &driver_url, url)?;
        let listen = match &listen_url {
            Some(listen_url) => {
                if !is_postgres_url(listen_url) {
                    return Err(Error::config(
                        "listen_url",
                        "a PostgreSQL URL starts with postgres:// or postgresql://",
                    ));
                }
                driver_config("listen_url", listen_url, listen_url)?
            }
            None => driver.clone(),
        };
        Ok(Self {
            driver,
            table,
            mode,
            advisory_class,
            listen,
            listen_url,
            shown,
        })
    }

    /// The URL with its credentials hidden, as messages show it.
    pub fn redacted_url(&self) -> &str {
        &self.shown
    }

    /// The lock table's schema, as given.
    pub fn schema(&self) -> &str {
        self.table.schema()
    }

    /// The lock table's name, as given.
    pub fn table(&self) -> &str {
        self.table.table()
    }

    /// The `listen_url` option, with its credentials hidden.
    pub fn listen_url(&self) -> Option<String> {
        self.listen_url.as_deref().map(redact)
    }
}

fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// The driver's configuration from `driver_url` (`field` of the URL, whose
/// secrets `original` holds), or an error that shows neither's secrets.
fn driver_config(field: &str, driver_url: &str, original: &str) -> Result<tokio_postgres::Config> {
    tokio_postgres::Config::from_str(driver_url).map_err(|error| {
        Error::config(
            field,
            format!(
                "the driver refused {}: {}",
                redact(driver_url),
                scrub(&error.to_string(), original)
            ),
        )
    })
}

fn parse_mode(mode: &str) -> Result<Mode> {
    match mode {
        "lease" => Ok(Mode::Lease),
        "advisory" => Ok(Mode::Advisory),
        other => Err(Error::config(
            "mode",
            format!("{other:?} is not a mode; the accepted values are lease and advisory"),
        )),
    }
}

/// A class for advisory keys: a non-negative `int4`, so that it reads the
/// same in `pg_locks`, which shows it as an unsigned `oid`.
fn parse_class(class: &str) -> Result<i32> {
    class
        .parse::<i32>()
        .ok()
        .filter(|class| *class >= 0)
        .ok_or_else(|| {
            Error::config(
                "advisory_class",
                format!("{class:?} is not an integer from 0 to {}", i32::MAX),
            )
        })
}

/// `message` with every secret of `url` in it, raw or decoded, replaced
/// by `***`: a driver's message may quote a value it refused.
pub(crate) fn scrub(message: &str, url: &str) -> String {
    let mut secrets: Vec<String> = Vec::new();
    if let Some((_, info)) = user_info(url) {
        secrets.push(info.to_owned());
        if let Some((user, password)) = info.split_once(':') {
            secrets.extend([user.to_owned(), password.to_owned()]);
        }
    }
    secrets.extend(secret_options(url).into_iter().map(str::to_owned));
    let decoded: Vec<String> = secrets
        .iter()
        .filter_map(|secret| percent_decode(secret))
        .collect();
    secrets.extend(decoded);
    // Longest first, so that a part of a secret never leaves the rest.
    secrets.retain(|secret| !secret.is_empty());
    secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
    secrets.iter().fold(message.to_owned(), |text, secret| {
        text.replace(secret, "***")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_distlock_options() {
        let config = PostgresConfig::parse("postgres://db/app").unwrap();
        assert_eq!(
            (config.schema(), config.table()),
            ("public", "distlock_locks")
        );
        assert_eq!(config.mode, Mode::Lease);
        let config = PostgresConfig::parse(
            "postgresql://u:p@db:6432/app?schema=locks&table=my%20locks&mode=lease&connect_timeout=3&listen_url=postgres%3A%2F%2Fu%3Ap%40db%2Fapp",
        )
        .unwrap();
        assert_eq!((config.schema(), config.table()), ("locks", "my locks"));
        assert_eq!(
            config.listen_url().as_deref(),
            Some("postgres://***@db/app")
        );
        assert_eq!(
            config.driver.get_connect_timeout(),
            Some(&std::time::Duration::from_secs(3))
        );
    }

    #[test]
    fn advisory_mode_has_its_own_table_and_a_validated_class() {
        let config = PostgresConfig::parse("postgres://db/?mode=advisory").unwrap();
        assert_eq!(config.mode, Mode::Advisory);
        assert_eq!(config.table(), DEFAULT_ADVISORY_TABLE);
        assert_eq!(config.advisory_class, DEFAULT_ADVISORY_CLASS);
        let config =
            PostgresConfig::parse("postgres://db/?mode=advisory&advisory_class=7&table=t").unwrap();
        assert_eq!((config.advisory_class, config.table()), (7, "t"));
        for bad in ["-1", "2147483648", "x", ""] {
            let error = PostgresConfig::parse(&format!("postgres://db/?advisory_class={bad}"))
                .unwrap_err()
                .to_string();
            assert!(error.contains("advisory_class"), "{error}");
        }
    }

    #[test]
    fn unknown_modes_are_refused_by_name() {
        let other = PostgresConfig::parse("postgres://db/?mode=fast").unwrap_err();
        let text = other.to_string();
        assert!(
            text.contains("lease") && text.contains("advisory"),
            "{text}"
        );
    }

    #[test]
    fn errors_and_debug_never_show_credentials() {
        let url = "postgres://alice:s%40cret-pw@db/app?sslpassword=hush&bogus=1";
        let text = PostgresConfig::parse(url).unwrap_err().to_string();
        assert!(text.contains("bogus"), "{text}");
        for secret in ["alice", "s%40cret-pw", "s@cret-pw", "hush"] {
            assert!(!text.contains(secret), "{text}");
        }
        let config = PostgresConfig::parse("postgres://alice:s3cret-pw@db/app").unwrap();
        let shown = format!("{config:?}");
        assert!(
            !shown.contains("s3cret-pw") && !shown.contains("alice"),
            "{shown}"
        );
    }

    #[test]
    fn scrubbing_hides_raw_and_decoded_secrets() {
        let url = "postgres://bob:p%2Fw@h/";
        assert_eq!(
            scrub("bad p/w and p%2Fw for bob", url),
            "bad *** and *** for ***"
        );
    }

    #[test]
    fn the_listening_connection_goes_to_listen_url_or_the_main_url() {
        let config = PostgresConfig::parse("postgres://u:p@db:6432/app?table=t").unwrap();
        assert_eq!(config.listen.get_ports(), &[6432]);
        let config = PostgresConfig::parse(
            "postgres://u:p@db:6432/app?listen_url=postgres%3A%2F%2Fu%3Ap%40direct%3A5432%2Fapp",
        )
        .unwrap();
        assert_eq!(config.listen.get_ports(), &[5432]);
        assert_eq!(config.driver.get_ports(), &[6432]);
    }

    #[test]
    fn a_bad_listen_url_is_refused_without_its_secrets() {
        let wrong_scheme =
            PostgresConfig::parse("postgres://db/?listen_url=mysql%3A%2F%2Fdb").unwrap_err();
        assert!(
            wrong_scheme.to_string().contains("listen_url"),
            "{wrong_scheme}"
        );
        let bad_option = PostgresConfig::parse(
            "postgres://db/?listen_url=postgres%3A%2F%2Falice%3Ahush-pw%40db%2F%3Fbogus%3D1",
        )
        .unwrap_err();
        let text = bad_option.to_string();
        assert!(
            text.contains("listen_url") && text.contains("bogus"),
            "{text}"
        );
        assert!(
            !text.contains("hush-pw") && !text.contains("alice"),
            "{text}"
        );
    }

    #[test]
    fn other_schemes_are_refused() {
        assert!(PostgresConfig::parse("mysql://db/").is_err());
    }
}
