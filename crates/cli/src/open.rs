//! Opening the backend named on the command line, within a bounded time.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use distlock::backend::Backend;

use crate::exit::Failure;

/// How long opening a backend (connecting to its server) may take.
pub(crate) const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// The URL to use: the one given (by `--backend` or `DISTLOCK_URL`), else
/// the embedded default.
pub(crate) fn url_or_default(given: Option<String>) -> String {
    given.unwrap_or_else(distlock::default_url)
}

/// Opens the backend at `url`, once. A malformed URL, an unknown scheme or
/// refused credentials are bad input (exit 2); a server that cannot be
/// reached is unavailable (exit 69). Messages show the URL only through
/// [`distlock::redact`].
pub(crate) async fn open_backend(url: &str) -> Result<Arc<dyn Backend>, Failure> {
    open_within(url, OPEN_TIMEOUT)
        .await
        .map_err(|failure| failure.into_failure(url))
}

/// Opens the backend at `url` for `distlock run`, which waits for its lock
/// for up to `patience` (`None`: without limit): while the server refuses
/// or drops connections, or does not answer, it is tried again, with
/// backoff, for as long as the lock would be waited for. Says so once on
/// stderr. A wait that ends first fails as [`open_backend`] does (exit 69).
pub(crate) async fn open_backend_waiting(
    url: &str,
    patience: Option<Duration>,
) -> Result<Arc<dyn Backend>, Failure> {
    let started = Instant::now();
    let mut pause = FIRST_PAUSE;
    let mut said = false;
    let mut budget = OPEN_TIMEOUT;
    loop {
        let failure = match open_within(url, budget).await {
            Ok(backend) => return Ok(backend),
            Err(failure @ OpenFailure::Final(_)) => return Err(failure.into_failure(url)),
            Err(failure) => failure,
        };
        let left = patience.map(|patience| patience.saturating_sub(started.elapsed()));
        if left == Some(Duration::ZERO) {
            return Err(failure.into_failure(url));
        }
        if !said {
            let until = match patience {
                Some(patience) => format!("for up to {}", humantime::format_duration(patience)),
                None => "until it answers".to_owned(),
            };
            crate::text::say(&crate::text::printable(&format!(
                "{}; trying again {until}",
                failure.into_failure(url).message
            )));
            said = true;
        }
        tokio::time::sleep(left.map_or(pause, |left| pause.min(left))).await;
        pause = (pause * 2).min(LAST_PAUSE);
        // Like a lock client's later attempts, a later opening ends with
        // the wait, rather than a whole open timeout after it.
        budget = patience.map_or(OPEN_TIMEOUT, |patience| {
            OPEN_TIMEOUT.min(
                patience
                    .saturating_sub(started.elapsed())
                    .max(MIN_OPEN_BUDGET),
            )
        });
    }
}

/// The first and the longest pause between openings.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const LAST_PAUSE: Duration = Duration::from_secs(2);
/// The least time a later opening gets, so that it can answer at all.
const MIN_OPEN_BUDGET: Duration = Duration::from_millis(100);

/// Why an opening failed.
enum OpenFailure {
    /// Worth trying again: the server is unreachable or did not answer.
    Transient(String),
    /// Bad input that stays bad.
    Final(Failure),
}

impl OpenFailure {
    fn into_failure(self, url: &str) -> Failure {
        match self {
            Self::Transient(reason) => Failure::unavailable(format!(
                "cannot open the backend `{}`: {reason}",
                distlock::redact(url)
            )),
            Self::Final(failure) => failure,
        }
    }
}

async fn open_within(url: &str, budget: Duration) -> Result<Arc<dyn Backend>, OpenFailure> {
    match tokio::time::timeout(budget, distlock::open(url)).await {
        Ok(Ok(backend)) => Ok(backend),
        Ok(Err(error)) if error.is_transient() => Err(OpenFailure::Transient(error.to_string())),
        // These already name the (redacted) URL and what is wrong with it.
        Ok(Err(
            error @ (distlock::Error::InvalidConfig { .. } | distlock::Error::Unsupported(_)),
        )) => Err(OpenFailure::Final(Failure::usage(error.to_string()))),
        Ok(Err(error)) => Err(OpenFailure::Final(Failure::usage(format!(
            "cannot open the backend `{}`: {error}",
            distlock::redact(url)
        )))),
        Err(_) => Err(OpenFailure::Transient(format!(
            "it did not answer within {}",
            humantime::format_duration(budget)
        ))),
    }
}
