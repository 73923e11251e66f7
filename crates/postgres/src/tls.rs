//! TLS for every connection of a backend: libpq's `sslmode` and
//! `sslrootcert`, carried out with rustls.
//!
//! The driver knows only `disable`, `prefer` and `require`, which say
//! whether to ask for TLS. Checking the server's certificate is left to
//! the connector, so `verify-ca` and `verify-full` reach the driver as
//! `require` and are carried out by the verifier built here, once per
//! backend, and shared by the pool, the listening connection and advisory
//! mode's sessions.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{WebPkiServerVerifier, verify_server_cert_signed_by_trust_anchor};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::Socket;
use tokio_postgres::config::{Host, SslMode as DriverSslMode};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres_rustls::MakeRustlsConnect;

/// Whether and how connections use TLS: libpq's `sslmode`.
///
/// Every mode but `disable` asks the server for TLS first. Without
/// `sslrootcert`, `prefer` and `require` encrypt without checking the
/// server's certificate, which protects against eavesdropping but not
/// against someone who can redirect the connection; with `sslrootcert`
/// they check that its CA signed the certificate, as libpq does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SslMode {
    /// `disable`: never TLS.
    Disable,
    /// `prefer`, the default: TLS when the server offers it, plain TCP
    /// when it does not.
    Prefer,
    /// `require`: TLS or no connection.
    Require,
    /// `verify-ca`: TLS, with a certificate signed by a CA in
    /// `sslrootcert`, whatever host name it is for.
    VerifyCa,
    /// `verify-full`: TLS, with a certificate signed by a CA in
    /// `sslrootcert` (Mozilla's roots without it) and issued for the host
    /// connected to.
    VerifyFull,
}

impl SslMode {
    /// The name the URL gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }

    fn parse(value: &str) -> Result<Self, Problem> {
        match value {
            "disable" => Ok(Self::Disable),
            "prefer" => Ok(Self::Prefer),
            "require" => Ok(Self::Require),
            "verify-ca" => Ok(Self::VerifyCa),
            "verify-full" => Ok(Self::VerifyFull),
            "allow" => Err(Problem::new(
                "sslmode",
                "\"allow\" (TLS only when the server insists) is not supported: \
                 use prefer, or disable",
            )),
            other => Err(Problem::new(
                "sslmode",
                format!(
                    "{other:?} is not an sslmode; the accepted values are disable, prefer, \
                     require, verify-ca and verify-full"
                ),
            )),
        }
    }

    /// What the driver is told: whether to ask for TLS, and whether to
    /// give up without it.
    fn driver(self) -> DriverSslMode {
        match self {
            Self::Disable => DriverSslMode::Disable,
            Self::Prefer => DriverSslMode::Prefer,
            Self::Require | Self::VerifyCa | Self::VerifyFull => DriverSslMode::Require,
        }
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An option at fault and what is wrong with it, before the caller says
/// which URL it came from.
#[derive(Debug)]
pub(crate) struct Problem {
    pub(crate) option: &'static str,
    pub(crate) reason: String,
}

impl Problem {
    fn new(option: &'static str, reason: impl Into<String>) -> Self {
        Self {
            option,
            reason: reason.into(),
        }
    }
}

/// `sslmode` and `sslrootcert` as one URL gives them, percent-decoded.
#[derive(Debug, Default)]
pub(crate) struct TlsOptions {
    pub(crate) mode: Option<String>,
    pub(crate) root_cert: Option<String>,
}

impl TlsOptions {
    /// Whether the URL gave neither option.
    pub(crate) fn is_empty(&self) -> bool {
        self.mode.is_none() && self.root_cert.is_none()
    }

    /// The settings these options ask for, with libpq's defaults: `prefer`,
    /// or `verify-full` with `sslrootcert=system`.
    ///
    /// # Errors
    /// An unknown `sslmode`; `verify-ca` without `sslrootcert`;
    /// `sslrootcert=system` with a weaker mode than `verify-full`.
    pub(crate) fn resolve(self) -> Result<TlsSettings, Problem> {
        let roots = match self.root_cert.as_deref() {
            None | Some("") => Roots::Unset,
            Some("system") => Roots::System,
            Some(path) => Roots::File(PathBuf::from(path)),
        };
        let mode = match self.mode.as_deref() {
            None if roots == Roots::System => SslMode::VerifyFull,
            None => SslMode::Prefer,
            Some(mode) => SslMode::parse(mode)?,
        };
        match (&roots, mode) {
            (Roots::System, mode) if mode != SslMode::VerifyFull => Err(Problem::new(
                "sslmode",
                format!(
                    "sslmode={mode} is too weak for sslrootcert=system, which trusts every \
                     public CA: use sslmode=verify-full (the default with sslrootcert=system)"
                ),
            )),
            (Roots::Unset, SslMode::VerifyCa) => Err(Problem::new(
                "sslrootcert",
                "sslmode=verify-ca needs sslrootcert=PATH, a PEM file with the certificate of \
                 the CA that signed the server's certificate; to check the server against \
                 the public CAs, use sslmode=verify-full",
            )),
            _ => Ok(TlsSettings { mode, roots }),
        }
    }
}

/// Where trusted CA certificates come from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Roots {
    /// No `sslrootcert`: none for `prefer` and `require`, Mozilla's for
    /// `verify-full`.
    Unset,
    /// `sslrootcert=system`: Mozilla's roots, built in.
    System,
    /// `sslrootcert=PATH`: the PEM certificates in that file.
    File(PathBuf),
}

/// How one URL's connections use TLS, checked but not yet loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsSettings {
    pub(crate) mode: SslMode,
    roots: Roots,
}

impl TlsSettings {
    /// What the driver is told: see [`SslMode::driver`].
    pub(crate) fn driver_mode(&self) -> DriverSslMode {
        self.mode.driver()
    }

    /// Tells `config` whether to ask for TLS. Not over Unix-domain sockets,
    /// whatever the mode, as libpq: the server offers no TLS there.
    pub(crate) fn apply(&self, config: &mut tokio_postgres::Config) {
        let hosts = config.get_hosts();
        let local = !hosts.is_empty() && hosts.iter().all(|host| !matches!(host, Host::Tcp(_)));
        config.ssl_mode(if local {
            DriverSslMode::Disable
        } else {
            self.driver_mode()
        });
    }

    /// The `sslrootcert` file, if one is given.
    pub(crate) fn root_cert(&self) -> Option<&Path> {
        match &self.roots {
            Roots::File(path) => Some(path),
            Roots::Unset | Roots::System => None,
        }
    }

    /// The connector that carries these settings out, reading
    /// `sslrootcert` if it is used.
    ///
    /// # Errors
    /// An `sslrootcert` that cannot be read, or holds no certificate that
    /// can serve as a CA.
    pub(crate) fn connector(&self) -> Result<Connector, Problem> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = match (&self.roots, self.mode) {
            // Never used: the driver does not ask for TLS.
            (_, SslMode::Disable) => None,
            (Roots::File(path), _) => Some(load_roots(path)?),
            (Roots::System, _) | (Roots::Unset, SslMode::VerifyFull) => Some(mozilla_roots()),
            (Roots::Unset, _) => None,
        };
        let verifier: Arc<dyn ServerCertVerifier> = match (roots, self.mode) {
            (Some(roots), SslMode::VerifyFull) => {
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|error| {
                        Problem::new("sslrootcert", format!("no usable CA certificate: {error}"))
                    })?
            }
            (roots, _) => Arc::new(ChainOnly {
                roots: roots.map(Arc::new),
                provider: provider.clone(),
            }),
        };
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|error| Problem::new("sslmode", format!("setting up TLS: {error}")))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(MakeRustlsConnect::new(config))
    }
}

/// What every connection of a backend opens TLS with (or not, as its
/// configuration's `sslmode` says).
pub(crate) type Connector = MakeRustlsConnect;

/// A connection's stream: TLS or plain TCP, as the handshake went.
pub(crate) type Stream = <Connector as MakeTlsConnect<Socket>>::Stream;

/// A connection of ours, to be driven by a task of its own.
pub(crate) type Connection = tokio_postgres::Connection<Socket, Stream>;

/// Where connections go, and with what TLS: what every connection of a
/// backend is opened from.
#[derive(Clone)]
pub(crate) struct Endpoint {
    pub(crate) config: tokio_postgres::Config,
    pub(crate) tls: Connector,
}

impl Endpoint {
    /// Opens a connection.
    ///
    /// # Errors
    /// The driver's: the server cannot be reached, refuses us, or does not
    /// pass the TLS checks.
    ///
    /// # Cancel safety
    /// Dropping the future closes the connection it was opening.
    pub(crate) async fn connect(
        &self,
    ) -> Result<(tokio_postgres::Client, Connection), tokio_postgres::Error> {
        self.config.connect(self.tls.clone()).await
    }
}

/// Mozilla's root certificates, as webpki-roots builds them in.
fn mozilla_roots() -> RootCertStore {
    RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    }
}

/// The CA certificates in the PEM file at `path`.
fn load_roots(path: &Path) -> Result<RootCertStore, Problem> {
    let shown = path.display();
    let pem = std::fs::read(path).map_err(|error| {
        Problem::new(
            "sslrootcert",
            format!(
                "cannot read {shown}: {error}; sslrootcert names a PEM file with the \
                 certificate of the CA that signed the server's certificate"
            ),
        )
    })?;
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| {
            Problem::new(
                "sslrootcert",
                format!("{shown} is not a valid PEM file: {error}"),
            )
        })?;
    if certificates.is_empty() {
        return Err(Problem::new(
            "sslrootcert",
            format!(
                "{shown} holds no certificate: it should hold the CA's certificate in PEM \
                 (-----BEGIN CERTIFICATE-----)"
            ),
        ));
    }
    let mut roots = RootCertStore::empty();
    for (index, certificate) in certificates.into_iter().enumerate() {
        roots.add(certificate).map_err(|error| {
            Problem::new(
                "sslrootcert",
                format!(
                    "certificate {} of {shown} cannot serve as a CA: {error}",
                    index + 1
                ),
            )
        })?;
    }
    Ok(roots)
}

/// Checks that a CA in `roots` signed the server's certificate, whatever
/// name it was issued for (`verify-ca`, and `prefer` or `require` with
/// `sslrootcert`), or checks nothing about it (`prefer` and `require`
/// without). Either way the server must prove in the handshake that it
/// holds the certificate's key.
#[derive(Debug)]
struct ChainOnly {
    roots: Option<Arc<RootCertStore>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            let certificate = ParsedCertificate::try_from(end_entity)?;
            verify_server_cert_signed_by_trust_anchor(
                &certificate,
                roots,
                intermediates,
                now,
                self.provider.signature_verification_algorithms.all,
            )?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            certificate,
            signature,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            certificate,
            signature,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(mode: Option<&str>, root_cert: Option<&str>) -> TlsOptions {
        TlsOptions {
            mode: mode.map(str::to_owned),
            root_cert: root_cert.map(str::to_owned),
        }
    }

    #[test]
    fn modes_and_their_defaults() {
        let settings = options(None, None).resolve().unwrap();
        assert_eq!(settings.mode, SslMode::Prefer);
        assert_eq!(settings.driver_mode(), DriverSslMode::Prefer);
        let settings = options(None, Some("system")).resolve().unwrap();
        assert_eq!(settings.mode, SslMode::VerifyFull);
        for (name, mode, driver) in [
            ("disable", SslMode::Disable, DriverSslMode::Disable),
            ("prefer", SslMode::Prefer, DriverSslMode::Prefer),
            ("require", SslMode::Require, DriverSslMode::Require),
            ("verify-ca", SslMode::VerifyCa, DriverSslMode::Require),
            ("verify-full", SslMode::VerifyFull, DriverSslMode::Require),
        ] {
            let settings = options(Some(name), Some("/ca.pem")).resolve().unwrap();
            assert_eq!((settings.mode, settings.driver_mode()), (mode, driver));
            assert_eq!(mode.to_string(), name);
        }
    }

    #[test]
    fn bad_combinations_name_the_option_and_the_fix() {
        let unknown = options(Some("verify_full"), None).resolve().unwrap_err();
        assert_eq!(unknown.option, "sslmode");
        assert!(unknown.reason.contains("verify-full"), "{unknown:?}");
        let allow = options(Some("allow"), None).resolve().unwrap_err();
        assert!(allow.reason.contains("prefer"), "{allow:?}");
        let no_ca = options(Some("verify-ca"), None).resolve().unwrap_err();
        assert_eq!(no_ca.option, "sslrootcert");
        let weak = options(Some("require"), Some("system"))
            .resolve()
            .unwrap_err();
        assert!(weak.reason.contains("verify-full"), "{weak:?}");
    }

    #[test]
    fn connectors_need_a_readable_pem_with_a_ca() {
        // Mozilla's roots need no file.
        options(Some("verify-full"), None)
            .resolve()
            .unwrap()
            .connector()
            .unwrap();
        // Nothing is read when TLS is off.
        options(Some("disable"), Some("/no/such/ca.pem"))
            .resolve()
            .unwrap()
            .connector()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let garbled = dir.join("garbled.pem");
        std::fs::write(
            &garbled,
            "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let not_a_ca = dir.join("not-a-ca.pem");
        std::fs::write(
            &not_a_ca,
            "-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        for (path, expected) in [
            ("/no/such/ca.pem".as_ref(), "cannot read"),
            (empty.as_path(), "holds no certificate"),
            (garbled.as_path(), "not a valid PEM"),
            (not_a_ca.as_path(), "cannot serve as a CA"),
        ] {
            let problem = options(Some("verify-ca"), Some(path.to_str().unwrap()))
                .resolve()
                .unwrap()
                .connector()
                .err()
                .unwrap();
            assert_eq!(problem.option, "sslrootcert");
            assert!(problem.reason.contains(expected), "{problem:?}");
        }
    }
}
