//! What the protocol tests share: the servers' URLs, each test under a
//! prefix of its own, and the faults a test injects between the client and
//! a real store (never a mock of the store).

#![allow(dead_code, unreachable_pub)] // each test file uses a part

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use http::Method;
use http::header::{IF_MATCH, IF_NONE_MATCH};
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpResponseBody, HttpService,
    ReqwestConnector,
};
use object_store::path::Path;
use object_store::{
    Attributes, ClientOptions, CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult,
    MultipartUpload, ObjectMeta, ObjectStore, PutMode, PutMultipartOptions, PutOptions, PutPayload,
    PutResult,
};

use distlock_core::testing::required_env;
use distlock_objectstore::ObjectStoreConfig;

/// Runs each case, an `async fn(&str)` of the test file taking a URL, on
/// each store (Azure Blob through Azurite, S3 through moto), as a test of
/// its own under a prefix of its own.
macro_rules! on_every_store {
    ($($case:ident),* $(,)?) => {
        mod azure {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(&super::support::fresh_url("DISTLOCK_TEST_AZURE_URL")).await;
                }
            )*
        }
        mod s3 {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(&super::support::fresh_url("DISTLOCK_TEST_S3_URL")).await;
                }
            )*
        }
    };
}

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

/// A real store as one client sees it, altered in what it reads back and
/// never in what the store does: the store's stamps (`Last-Modified`) of
/// versions this client writes from some moment on read later by a given
/// time, as if the store's clock had jumped; every stamp can be left out,
/// as a store that gives none; and one read can answer a version the
/// store held earlier, as a read does that comes just before a change.
#[derive(Debug)]
pub struct AlteredView {
    inner: Arc<dyn ObjectStore>,
    /// How much later the stamps of versions written from now on read.
    jump: Mutex<Duration>,
    /// The jump in force when each version (by ETag) was written.
    jumped: Mutex<HashMap<String, Duration>>,
    unstamped: AtomicBool,
    replay: Mutex<Option<Replay>>,
}

#[derive(Debug)]
struct Replay {
    location: Path,
    meta: ObjectMeta,
    attributes: Attributes,
    body: Bytes,
}

impl AlteredView {
    pub fn new(inner: Arc<dyn ObjectStore>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            jump: Mutex::new(Duration::ZERO),
            jumped: Mutex::default(),
            unstamped: AtomicBool::new(false),
            replay: Mutex::default(),
        })
    }

    /// The versions this client writes from now on read stamped `by` later
    /// than the store stamped them.
    pub fn clock_jumps(&self, by: Duration) {
        *self.jump.lock().unwrap() = by;
    }

    /// Every read answers without a `Last-Modified` (which `object_store`
    /// reads as the Unix epoch).
    pub fn without_stamps(&self) {
        self.unstamped.store(true, Ordering::SeqCst);
    }

    /// The next read of `location` answers the version it holds now.
    pub async fn replay_next_read(&self, location: &Path) {
        let read = self
            .inner
            .get_opts(location, GetOptions::default())
            .await
            .expect("the version to replay");
        let (meta, attributes) = (read.meta.clone(), read.attributes.clone());
        let body = read.bytes().await.expect("its body");
        *self.replay.lock().unwrap() = Some(Replay {
            location: location.clone(),
            meta,
            attributes,
            body,
        });
    }

    fn replayed(&self, location: &Path) -> Option<GetResult> {
        let mut replay = self.replay.lock().unwrap();
        if replay.as_ref()?.location != *location {
            return None;
        }
        let Replay {
            meta,
            attributes,
            body,
            ..
        } = replay.take()?;
        let len = body.len() as u64;
        Some(GetResult {
            payload: GetResultPayload::Stream(futures::stream::once(async { Ok(body) }).boxed()),
            meta,
            range: 0..len,
            attributes,
            extensions: Default::default(),
        })
    }

    fn restamp(&self, meta: &mut ObjectMeta) {
        if self.unstamped.load(Ordering::SeqCst) {
            meta.last_modified = SystemTime::UNIX_EPOCH.into();
            return;
        }
        let jumped = self.jumped.lock().unwrap();
        if let Some(by) = meta.e_tag.as_ref().and_then(|e_tag| jumped.get(e_tag)) {
            meta.last_modified = (SystemTime::from(meta.last_modified) + *by).into();
        }
    }
}

impl fmt::Display for AlteredView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AlteredView({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for AlteredView {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        options: PutOptions,
    ) -> object_store::Result<PutResult> {
        let jump = *self.jump.lock().unwrap();
        let put = self.inner.put_opts(location, payload, options).await?;
        if let Some(e_tag) = &put.e_tag
            && !jump.is_zero()
        {
            self.jumped.lock().unwrap().insert(e_tag.clone(), jump);
        }
        Ok(put)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        options: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, options).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        if let Some(replayed) = self.replayed(location) {
            return Ok(replayed);
        }
        let mut read = self.inner.get_opts(location, options).await?;
        self.restamp(&mut read.meta);
        Ok(read)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}
