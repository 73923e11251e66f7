//! What the protocol tests share: the servers' URLs, each test under a
//! prefix of its own, and the faults a test injects between the client and
//! a real store (never a mock of the store).

#![allow(dead_code, unreachable_pub)] // each test file uses a part

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::stream::BoxStream;
use http::Method;
use http::header::{IF_MATCH, IF_NONE_MATCH};
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpResponseBody, HttpService,
    ReqwestConnector,
};
use object_store::path::Path;
use object_store::{
    ClientOptions, CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

use distlock_core::testing::required_env;
use distlock_objectstore::ObjectStoreConfig;

/// The URL of the server `var` names, under a prefix no other test uses.
///
/// # Panics
/// When `var` is not set: a test whose server is missing fails.
pub fn fresh_url(var: &str) -> String {
    let url = required_env(
        var,
        "start the object stores with scripts/test (scripts/servers/objectstore.sh)",
    );
    let run = format!("{:016x}", rand::random::<u64>());
    match url.split_once('?') {
        Some((base, query)) => format!("{}/{run}?{query}", base.trim_end_matches('/')),
        None => format!("{}/{run}", url.trim_end_matches('/')),
    }
}

/// The prefix of `url`: its path, without the bucket.
pub fn prefix_of(url: &str) -> String {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let before_query = after_scheme.split('?').next().unwrap_or_default();
    before_query
        .split_once('/')
        .map_or_else(String::new, |(_, prefix)| prefix.to_owned())
}

/// The client of `url`'s store, as the backend builds it, for reaching
/// behind the backend's back.
pub fn raw_store(url: &str) -> Arc<dyn ObjectStore> {
    ObjectStoreConfig::parse(url)
        .and_then(|config| config.build_client())
        .expect("the store's client")
}

/// A fault for the next conditional write (a `PUT` with `If-Match` or
/// `If-None-Match`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The store gets the request and does it, and the answer is lost: the
    /// client sees `503 Slow Down` instead, and its retry meets the
    /// precondition the write itself changed.
    LoseAnswer,
    /// S3's answer to `If-Match` writes that race: `409 Conflict`, code
    /// `ConditionalRequestConflict`; the store does nothing.
    Conflict,
}

/// Faults queued for the conditional writes of the clients it connects,
/// in order; every other request goes to the store untouched.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    queued: Arc<Mutex<VecDeque<Fault>>>,
    /// How many conditional writes reached the store.
    sent: Arc<Mutex<usize>>,
}

impl Faults {
    /// Queues `fault` for the next `times` conditional writes.
    pub fn next(&self, fault: Fault, times: usize) {
        let mut queued = self.queued.lock().unwrap();
        queued.extend(std::iter::repeat_n(fault, times));
    }

    /// Drops the faults not yet injected.
    pub fn clear(&self) {
        self.queued.lock().unwrap().clear();
    }

    /// The faults queued and not yet injected.
    pub fn left(&self) -> usize {
        self.queued.lock().unwrap().len()
    }

    /// How many conditional writes reached the store.
    pub fn sent(&self) -> usize {
        *self.sent.lock().unwrap()
    }

    fn take(&self) -> Option<Fault> {
        self.queued.lock().unwrap().pop_front()
    }
}

impl HttpConnector for Faults {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(FaultyService {
            inner,
            faults: self.clone(),
        }))
    }
}

#[derive(Debug)]
struct FaultyService {
    inner: HttpClient,
    faults: Faults,
}

#[async_trait]
impl HttpService for FaultyService {
    async fn call(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        let conditional = request.method() == Method::PUT
            && (request.headers().contains_key(IF_MATCH)
                || request.headers().contains_key(IF_NONE_MATCH));
        let fault = if conditional {
            self.faults.take()
        } else {
            None
        };
        if conditional && fault != Some(Fault::Conflict) {
            *self.faults.sent.lock().unwrap() += 1;
        }
        match fault {
            None => self.inner.execute(request).await,
            Some(Fault::LoseAnswer) => {
                let done = self.inner.execute(request).await?;
                assert!(
                    done.status().is_success(),
                    "the write whose answer is to be lost failed: {}",
                    done.status()
                );
                Ok(answer(
                    503,
                    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
                     <Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>",
                ))
            }
            Some(Fault::Conflict) => Ok(answer(
                409,
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
                 <Error><Code>ConditionalRequestConflict</Code>\
                 <Message>A conflicting conditional operation is currently in progress against \
                 this resource. Please try again.</Message></Error>",
            )),
        }
    }
}

fn answer(status: u16, body: &str) -> HttpResponse {
    http::Response::builder()
        .status(status)
        .header("content-type", "application/xml")
        .body(HttpResponseBody::from(body.to_owned()))
        .expect("a valid response")
}

/// A store that ignores every precondition, as some S3-compatible stores
/// do: each conditional write overwrites. The mutant the probe must catch.
#[derive(Debug)]
pub struct IgnoresPreconditions(pub Arc<dyn ObjectStore>);

impl fmt::Display for IgnoresPreconditions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IgnoresPreconditions({})", self.0)
    }
}

#[async_trait]
impl ObjectStore for IgnoresPreconditions {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        options: PutOptions,
    ) -> object_store::Result<PutResult> {
        let options = PutOptions {
            mode: PutMode::Overwrite,
            ..options
        };
        self.0.put_opts(location, payload, options).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        options: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.0.put_multipart_opts(location, options).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.0.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.0.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.0.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.0.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.0.copy_opts(from, to, options).await
    }
}
