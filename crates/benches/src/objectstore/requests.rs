//! Counting the HTTP requests an object-storage client sends: an
//! `object_store` connector that hands every request to `object_store`'s
//! own HTTP client and counts it first, by method and precondition
//! (`GET`, `PUT If-Match`, `PUT If-None-Match`, `DELETE`, …), and timed,
//! from the moment it is handed on until its answer's headers came back.
//! Retries are requests of their own, so they count too: what is counted
//! is what went on the wire.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use distlock::objectstore::object_store;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpService, ReqwestConnector,
};

use crate::commands::Counts;

/// The requests counted so far, and what the store says it is.
#[derive(Debug, Default)]
struct Tally {
    by_kind: BTreeMap<String, u64>,
    /// The time the requests of each kind took, in microseconds.
    micros_by_kind: BTreeMap<String, u64>,
    /// The `Server` header of the last answer (Azurite's names its version).
    server: Option<String>,
}

/// Counts the requests of every client built through it; clones share
/// the counts.
#[derive(Debug, Clone, Default)]
pub(crate) struct Requests(Arc<Mutex<Tally>>);

impl Requests {
    /// The requests counted so far, by kind.
    pub(crate) fn snapshot(&self) -> Counts {
        Counts(self.tally().by_kind.clone())
    }

    /// The time the requests counted so far took, by kind, in
    /// microseconds (a request still waiting for its answer is not in it).
    pub(crate) fn micros(&self) -> Counts {
        Counts(self.tally().micros_by_kind.clone())
    }

    /// The store's `Server` header, once an answer has come.
    pub(crate) fn server(&self) -> Option<String> {
        self.tally().server.clone()
    }

    fn tally(&self) -> std::sync::MutexGuard<'_, Tally> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a request is counted as: its method, and the precondition it
/// carries, if any.
pub(crate) fn kind_of(method: &str, if_match: bool, if_none_match: bool) -> String {
    match (if_match, if_none_match) {
        (true, _) => format!("{method} If-Match"),
        (false, true) => format!("{method} If-None-Match"),
        (false, false) => method.to_owned(),
    }
}

impl HttpConnector for Requests {
    fn connect(&self, options: &object_store::ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(Counted {
            inner,
            requests: self.clone(),
        }))
    }
}

/// One client's requests, counted, then sent by `inner`.
#[derive(Debug)]
struct Counted {
    inner: HttpClient,
    requests: Requests,
}

#[distlock::backend::async_trait]
impl HttpService for Counted {
    async fn call(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        let kind = kind_of(
            request.method().as_str(),
            request.headers().contains_key("if-match"),
            request.headers().contains_key("if-none-match"),
        );
        *self
            .requests
            .tally()
            .by_kind
            .entry(kind.clone())
            .or_default() += 1;
        let sent = Instant::now();
        let answered = self.inner.execute(request).await;
        let took = u64::try_from(sent.elapsed().as_micros()).unwrap_or(u64::MAX);
        let mut tally = self.requests.tally();
        *tally.micros_by_kind.entry(kind).or_default() += took;
        let response = answered?;
        if let Some(server) = response.headers().get("server")
            && let Ok(server) = server.to_str()
            && tally.server.as_deref() != Some(server)
        {
            tally.server = Some(server.to_owned());
        }
        drop(tally);
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_told_apart_by_their_precondition() {
        assert_eq!(kind_of("GET", false, false), "GET");
        assert_eq!(kind_of("PUT", true, false), "PUT If-Match");
        assert_eq!(kind_of("PUT", false, true), "PUT If-None-Match");
        assert_eq!(kind_of("DELETE", false, false), "DELETE");
    }
}
