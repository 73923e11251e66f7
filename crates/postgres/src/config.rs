//! The backend's URL: a libpq-style `postgres://` or `postgresql://` URL
//! whose options `table`, `schema`, `mode`, `advisory_class`, `fair`,
//! `listen_url`, `sslmode` and `sslrootcert` are distlock's, and whose
//! other options go to the driver.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use distlock_core::backend::{Query, UrlParts, percent_decode, redact, secret_options, user_info};
use distlock_core::{Error, Result};

use crate::error::describe;
use crate::table::TableName;
use crate::tls::{Endpoint, Problem, SslMode, TlsOptions, TlsSettings};

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
    /// Fair mode (`?fair=true`, off when not given): whole locks go to
    /// waiters in the order they asked, across processes; see the
    /// [crate documentation](crate#fair-mode).
    pub fair: bool,
    /// What the listening connection for release wake-ups connects with:
    /// `?listen_url=` when given, else the main URL. Pooled connections
    /// never listen, since PgBouncer in transaction mode hands them to
    /// other clients between statements.
    pub(crate) listen: tokio_postgres::Config,
    /// `?listen_url=` as given, for display only.
    listen_url: Option<String>,
    /// `?sslmode=` and `?sslrootcert=`, checked.
    tls: TlsSettings,
    /// `listen_url`'s own `sslmode` and `sslrootcert`, when it gives any;
    /// otherwise it uses the main URL's.
    listen_tls: Option<TlsSettings>,
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
            .field("fair", &self.fair)
            .field("listen_url", &self.listen_url.as_deref().map(redact))
            .field("sslmode", &self.tls.mode)
            .finish()
    }
}

impl PostgresConfig {
    /// Parses a `postgres://` or `postgresql://` URL.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the part at fault: another scheme, a
    /// malformed escape, an option given twice or without `=`, an empty or
    /// overlong `table` or `schema`, a `mode`
    /// other than `lease` and `advisory`, an `advisory_class` that is not
    /// an integer from 0 to 2147483647, a `fair` other than `true` and
    /// `false`, an `sslmode` other than `disable`,
    /// `prefer`, `require`, `verify-ca` and `verify-full`, `verify-ca`
    /// without `sslrootcert`, `sslrootcert=system` with another mode than
    /// `verify-full`, `sslcert`, `sslkey`, `sslcrl` or `sslcrldir` (not
    /// supported), an option the driver refuses, or a `listen_url` that
    /// is not a PostgreSQL URL the driver accepts (its own `sslmode` and
    /// `sslrootcert` checked the same way). Messages never include the user
    /// information or secret options.
    ///
    /// The `sslrootcert` file is read when the backend connects, not here.
    pub fn parse(url: &str) -> Result<Self> {
        Self::parse_with_mode(url, Mode::Lease)
    }

    /// As [`parse`](Self::parse), with `default` as the mode when the URL
    /// gives none (and its table's default name): transaction locks
    /// ([`crate::xact`]) read a URL as advisory mode's.
    ///
    /// # Errors
    /// As [`parse`](Self::parse).
    pub(crate) fn parse_with_mode(url: &str, default: Mode) -> Result<Self> {
        if !is_postgres_url(url) {
            return Err(Error::config(
                "url",
                "a PostgreSQL URL starts with postgres:// or postgresql://",
            ));
        }
        let shown = redact(url);
        let parts = UrlParts::split(url)?;
        let mut query = Query::parse(parts.query)?;
        let schema = query
            .take("schema")?
            .unwrap_or_else(|| DEFAULT_SCHEMA.to_owned());
        let table = query.take("table")?;
        let mode = match query.take("mode")? {
            Some(mode) => parse_mode(&mode)?,
            None => default,
        };
        let advisory_class = match query.take("advisory_class")? {
            Some(class) => parse_class(&class)?,
            None => DEFAULT_ADVISORY_CLASS,
        };
        let fair = query.take_flag("fair")?.unwrap_or(false);
        let listen_url = query.take("listen_url")?.filter(|url| !url.is_empty());
        let tls = take_tls_options(&mut query)?;
        refuse_unsupported(&query)?;
        // libpq would keep the last of a repeated option without a word.
        query.refuse_repeats(&[])?;
        let table = table.unwrap_or_else(|| {
            match mode {
                Mode::Lease => DEFAULT_TABLE,
                Mode::Advisory => DEFAULT_ADVISORY_TABLE,
            }
            .to_owned()
        });
        let table = TableName::new(&schema, &table)?;
        let driver_url = parts.with_query(&query.to_query_string());
        let tls = tls.resolve().map_err(main_problem)?;
        let mut driver = driver_config("url", &driver_url, url)?;
        tls.apply(&mut driver);
        let (listen, listen_tls) = match &listen_url {
            Some(listen_url) => {
                if !is_postgres_url(listen_url) {
                    return Err(Error::config(
                        "listen_url",
                        "a PostgreSQL URL starts with postgres:// or postgresql://",
                    ));
                }
                let (listen_driver_url, listen_tls) =
                    listen_tls_options(listen_url).map_err(in_listen_url)?;
                let listen_tls = if listen_tls.is_empty() {
                    None
                } else {
                    Some(listen_tls.resolve().map_err(listen_problem)?)
                };
                let mut listen = driver_config("listen_url", &listen_driver_url, listen_url)?;
                listen_tls.as_ref().unwrap_or(&tls).apply(&mut listen);
                (listen, listen_tls)
            }
            None => (driver.clone(), None),
        };
        Ok(Self {
            driver,
            table,
            mode,
            advisory_class,
            fair,
            listen,
            listen_url,
            tls,
            listen_tls,
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

    /// Whether and how connections use TLS (`?sslmode=`,
    /// [`SslMode::Prefer`] when not given, [`SslMode::VerifyFull`] with
    /// `sslrootcert=system`).
    pub fn ssl_mode(&self) -> SslMode {
        self.tls.mode
    }

    /// The file of trusted CA certificates (`?sslrootcert=PATH`), if one
    /// is given.
    pub fn ssl_root_cert(&self) -> Option<&Path> {
        self.tls.root_cert()
    }

    /// Where the backend's connections go, each with the TLS connector it
    /// uses: the main URL's, and the listening connection's. Each
    /// connector is built here, once, and shared by every connection that
    /// goes there; the listening connection shares the main one unless
    /// `listen_url` sets TLS options of its own.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming `sslrootcert` (or `listen_url`) when
    /// the file cannot be read or holds no usable CA certificate.
    pub(crate) fn endpoints(&self) -> Result<(Endpoint, Endpoint)> {
        let tls = self.tls.connector().map_err(main_problem)?;
        let listen_tls = match &self.listen_tls {
            Some(settings) if *settings != self.tls => {
                settings.connector().map_err(listen_problem)?
            }
            _ => tls.clone(),
        };
        Ok((
            Endpoint {
                config: self.driver.clone(),
                tls,
            },
            Endpoint {
                config: self.listen.clone(),
                tls: listen_tls,
            },
        ))
    }
}

/// Takes `sslmode` and `sslrootcert` out of `query`.
fn take_tls_options(query: &mut Query<'_>) -> Result<TlsOptions> {
    Ok(TlsOptions {
        mode: query.take("sslmode")?,
        root_cert: query.take("sslrootcert")?,
    })
}

/// Refuses the libpq options this backend does not support.
fn refuse_unsupported(query: &Query<'_>) -> Result<()> {
    for pair in query.pairs() {
        let reason = match pair.key() {
            "sslcert" | "sslkey" => {
                "client certificates are not supported: authenticate with a password in the URL"
            }
            "sslcrl" | "sslcrldir" => {
                "certificate revocation lists are not supported: remove the option"
            }
            _ => continue,
        };
        return Err(Error::config(pair.key(), reason));
    }
    Ok(())
}

/// `listen_url` without its `sslmode` and `sslrootcert`, and those two.
fn listen_tls_options(url: &str) -> Result<(String, TlsOptions)> {
    let parts = UrlParts::split(url)?;
    let mut query = Query::parse(parts.query)?;
    let tls = take_tls_options(&mut query)?;
    Ok((parts.with_query(&query.to_query_string()), tls))
}

/// An error in `listen_url`'s own URL, named as `listen_url`'s.
fn in_listen_url(error: Error) -> Error {
    match error {
        Error::InvalidConfig { field, reason } => {
            Error::config("listen_url", format!("its {field}: {reason}"))
        }
        other => other,
    }
}

/// A TLS option of the main URL at fault.
fn main_problem(problem: Problem) -> Error {
    Error::config(problem.option, problem.reason)
}

/// A TLS option of `listen_url` at fault.
fn listen_problem(problem: Problem) -> Error {
    Error::config(
        "listen_url",
        format!("its {}: {}", problem.option, problem.reason),
    )
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
                scrub(&describe(&error), original)
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
        .filter_map(|secret| percent_decode(secret).ok())
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
    fn fair_mode_is_off_unless_asked_and_takes_true_or_false() {
        assert!(!PostgresConfig::parse("postgres://db/").unwrap().fair);
        assert!(
            PostgresConfig::parse("postgres://db/?fair=true")
                .unwrap()
                .fair
        );
        assert!(
            PostgresConfig::parse("postgres://db/?mode=advisory&fair=true")
                .unwrap()
                .fair
        );
        assert!(
            !PostgresConfig::parse("postgres://db/?fair=false")
                .unwrap()
                .fair
        );
        for bad in [
            "postgres://db/?fair=yes",
            "postgres://db/?fair=true&fair=true",
        ] {
            let error = PostgresConfig::parse(bad).unwrap_err().to_string();
            assert!(error.contains("fair"), "{bad}: {error}");
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
    fn tls_options_are_ours_and_the_driver_is_told_whether_to_ask_for_tls() {
        use tokio_postgres::config::SslMode as Driver;
        let config = PostgresConfig::parse("postgres://db/").unwrap();
        assert_eq!(config.ssl_mode(), SslMode::Prefer);
        assert_eq!(config.driver.get_ssl_mode(), Driver::Prefer);
        let config = PostgresConfig::parse(
            "postgres://u:p@db/app?sslmode=verify-full&sslrootcert=%2Fetc%2Fca%20s.pem",
        )
        .unwrap();
        assert_eq!(config.ssl_mode(), SslMode::VerifyFull);
        assert_eq!(config.ssl_root_cert(), Some(Path::new("/etc/ca s.pem")));
        assert_eq!(config.driver.get_ssl_mode(), Driver::Require);
        // The listening connection takes the main URL's TLS...
        assert_eq!(config.listen.get_ssl_mode(), Driver::Require);
        assert_eq!(config.listen_tls, None);
        assert!(format!("{config:?}").contains("VerifyFull"));
        let config = PostgresConfig::parse(
            "postgres://db/?sslmode=disable&listen_url=postgres%3A%2F%2Fdirect%2F%3Fsslmode%3Dverify-ca%26sslrootcert%3D%252Fca.pem",
        )
        .unwrap();
        assert_eq!(config.driver.get_ssl_mode(), Driver::Disable);
        // ...unless it gives its own.
        let own = config.listen_tls.as_ref().unwrap();
        assert_eq!(own.mode, SslMode::VerifyCa);
        assert_eq!(own.root_cert(), Some(Path::new("/ca.pem")));
        assert_eq!(config.listen.get_ssl_mode(), Driver::Require);
        let config = PostgresConfig::parse("postgres://db/?sslrootcert=system").unwrap();
        assert_eq!(config.ssl_mode(), SslMode::VerifyFull);
        // Never over a Unix-domain socket, as libpq.
        let config =
            PostgresConfig::parse("postgres://%2Frun%2Fpostgresql/app?sslmode=require").unwrap();
        assert_eq!(config.ssl_mode(), SslMode::Require);
        assert_eq!(config.driver.get_ssl_mode(), Driver::Disable);
    }

    #[test]
    fn bad_tls_options_name_the_option() {
        for (url, field) in [
            ("postgres://db/?sslmode=on", "sslmode"),
            ("postgres://db/?sslmode=verify-ca", "sslrootcert"),
            (
                "postgres://db/?sslmode=prefer&sslrootcert=system",
                "sslmode",
            ),
            (
                "postgres://db/?listen_url=postgres%3A%2F%2Fdb%2F%3Fsslmode%3Dsecure",
                "listen_url",
            ),
        ] {
            match PostgresConfig::parse(url) {
                Err(Error::InvalidConfig { field: got, reason }) => {
                    assert_eq!(got, field, "{url}: {reason}");
                    assert!(reason.contains("sslmode"), "{url}: {reason}");
                }
                other => panic!("{url}: {other:?}"),
            }
        }
        for option in ["sslcert", "sslkey", "sslcrl", "sslcrldir"] {
            let error = PostgresConfig::parse(&format!("postgres://db/?{option}=/x.pem"));
            assert!(
                matches!(&error, Err(Error::InvalidConfig { field, .. }) if field == option),
                "{error:?}"
            );
        }
        let config =
            PostgresConfig::parse("postgres://db/?sslmode=verify-ca&sslrootcert=/no/such.pem")
                .unwrap();
        let Err(Error::InvalidConfig { field, reason }) = config.endpoints() else {
            panic!("an unreadable sslrootcert was accepted");
        };
        assert_eq!(field, "sslrootcert");
        assert!(reason.contains("/no/such.pem"), "{reason}");
    }

    #[test]
    fn a_plus_reads_as_the_driver_reads_it() {
        let config =
            PostgresConfig::parse("postgres://db/app?table=a+b%2Bc%20d&application_name=x+y")
                .unwrap();
        assert_eq!(config.table(), "a+b+c d");
        assert_eq!(config.driver.get_application_name(), Some("x+y"));
    }

    #[test]
    fn repeated_and_malformed_options_are_refused_by_name() {
        for (url, field) in [
            ("postgres://db/?table=a&table=b", "table"),
            (
                "postgres://db/?connect_timeout=1&connect_timeout=2",
                "connect_timeout",
            ),
            ("postgres://db/?table=%zz", "table"),
            ("postgres://db/?application_name=%FF", "application_name"),
            (
                "postgres://db/?listen_url=postgres%3A%2F%2Fdb%2F%3Fsslmode%3D%25zz",
                "listen_url",
            ),
        ] {
            match PostgresConfig::parse(url) {
                Err(Error::InvalidConfig { field: got, .. }) => assert_eq!(got, field, "{url}"),
                other => panic!("{url}: {other:?}"),
            }
        }
    }

    #[test]
    fn other_schemes_are_refused() {
        assert!(PostgresConfig::parse("mysql://db/").is_err());
    }
}
