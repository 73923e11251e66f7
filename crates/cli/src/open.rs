//! Opening the backend named on the command line, within a bounded time.

use std::sync::Arc;
use std::time::Duration;

use distlock::Backend;

use crate::exit::Failure;

/// How long opening a backend (connecting to its server) may take.
pub(crate) const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// The URL to use: the one given (by `--backend` or `DISTLOCK_URL`), else
/// the embedded default.
pub(crate) fn url_or_default(given: Option<String>) -> String {
    given.unwrap_or_else(distlock::default_url)
}

/// Opens the backend at `url`. Every failure here is bad input (exit 2): a
/// malformed URL, an unknown scheme, a server that cannot be reached.
/// Messages show the URL only through [`distlock::redact`].
pub(crate) async fn open_backend(url: &str) -> Result<Arc<dyn Backend>, Failure> {
    match tokio::time::timeout(OPEN_TIMEOUT, distlock::open(url)).await {
        Ok(Ok(backend)) => Ok(backend),
        // These already name the (redacted) URL and what is wrong with it.
        Ok(Err(
            error @ (distlock::Error::InvalidConfig { .. } | distlock::Error::Unsupported(_)),
        )) => Err(Failure::usage(error.to_string())),
        Ok(Err(error)) => Err(Failure::usage(format!(
            "cannot open the backend `{}`: {error}",
            distlock::redact(url)
        ))),
        Err(_) => Err(Failure::usage(format!(
            "could not reach the backend `{}` within {}s",
            distlock::redact(url),
            OPEN_TIMEOUT.as_secs()
        ))),
    }
}
