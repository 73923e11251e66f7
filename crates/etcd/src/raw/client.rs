//! The client: one channel over the members, the calls distlock makes, and
//! a token replaced and the call sent again when etcd refuses it.

use std::fmt;

use futures::channel::mpsc;
use futures::{SinkExt, StreamExt, stream};
use tonic::codec::Streaming;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use super::auth::{AddToken, Auth};
use super::generated::etcdserverpb::{
    DeleteRangeRequest, DeleteRangeResponse, LeaseGrantRequest, LeaseGrantResponse,
    LeaseKeepAliveRequest, LeaseKeepAliveResponse, LeaseRevokeRequest, LeaseRevokeResponse,
    LeaseTimeToLiveRequest, LeaseTimeToLiveResponse, PutRequest, PutResponse, RangeRequest,
    RangeResponse, StatusRequest, StatusResponse, TxnRequest, TxnResponse, WatchCreateRequest,
    WatchRequest, WatchResponse, kv_client::KvClient, lease_client::LeaseClient,
    maintenance_client::MaintenanceClient, watch_client::WatchClient, watch_request,
};
use super::{ConnectOptions, Error};

type Authed = InterceptedService<Channel, AddToken>;

/// A client of one etcd cluster; cheap to clone, and clones share their
/// connections and token.
#[derive(Clone)]
pub struct Client {
    kv: KvClient<Authed>,
    watch: WatchClient<Authed>,
    lease: LeaseClient<Authed>,
    maintenance: MaintenanceClient<Authed>,
    auth: Auth,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

impl Client {
    /// A client of the cluster `options` names. Without credentials
    /// nothing is sent yet: members are connected to at the first call.
    ///
    /// # Errors
    /// [`Error::Setup`] for options that make no client; with
    /// credentials, the status `Authenticate` failed with (etcd answers
    /// `FailedPrecondition` when authentication is not enabled, and
    /// `InvalidArgument` for a wrong user or password).
    ///
    /// # Cancel safety
    /// Cancel safe: dropped, it leaves nothing behind.
    pub async fn connect(options: &ConnectOptions) -> Result<Self, Error> {
        let channel = options.channel()?;
        let auth = Auth::new(channel.clone(), options.credentials.clone());
        auth.authenticate().await?;
        let authed = InterceptedService::new(channel, auth.interceptor());
        Ok(Self {
            kv: KvClient::new(authed.clone()),
            watch: WatchClient::new(authed.clone()),
            lease: LeaseClient::new(authed.clone()),
            maintenance: MaintenanceClient::new(authed),
            auth,
        })
    }

    /// Makes a call with `send`; if etcd refused the token, authenticates
    /// again and makes it once more.
    async fn call<T, F, Fut>(&self, mut send: F) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let sent_with = self.auth.current();
        match send().await {
            Err(Error::Status(status)) if self.auth.should_refresh(&status) => {
                self.auth.refresh(sent_with).await?;
                send().await
            }
            other => other,
        }
    }

    /// Reads a key, or a range of keys (`KV.Range`).
    ///
    /// # Errors
    /// The call's status.
    ///
    /// # Cancel safety
    /// Cancel safe: a read changes nothing.
    pub async fn range(&self, request: RangeRequest) -> Result<RangeResponse, Error> {
        self.call(|| {
            let (mut kv, request) = (self.kv.clone(), request.clone());
            async move { Ok(kv.range(request).await?.into_inner()) }
        })
        .await
    }

    /// Writes a key (`KV.Put`).
    ///
    /// # Errors
    /// The call's status.
    ///
    /// # Cancel safety
    /// Dropped after it was sent, the write may still land.
    pub async fn put(&self, request: PutRequest) -> Result<PutResponse, Error> {
        self.call(|| {
            let (mut kv, request) = (self.kv.clone(), request.clone());
            async move { Ok(kv.put(request).await?.into_inner()) }
        })
        .await
    }

    /// Deletes a key, or a range of keys (`KV.DeleteRange`).
    ///
    /// # Errors
    /// The call's status.
    ///
    /// # Cancel safety
    /// Dropped after it was sent, the delete may still land.
    pub async fn delete_range(
        &self,
        request: DeleteRangeRequest,
    ) -> Result<DeleteRangeResponse, Error> {
        self.call(|| {
            let (mut kv, request) = (self.kv.clone(), request.clone());
            async move { Ok(kv.delete_range(request).await?.into_inner()) }
        })
        .await
    }

    /// Runs a transaction (`KV.Txn`).
    ///
    /// # Errors
    /// The call's status.
    ///
    /// # Cancel safety
    /// Dropped after it was sent, the transaction may still be applied.
    pub async fn txn(&self, request: TxnRequest) -> Result<TxnResponse, Error> {
        self.call(|| {
            let (mut kv, request) = (self.kv.clone(), request.clone());
            async move { Ok(kv.txn(request).await?.into_inner()) }
        })
        .await
    }

    /// Grants a lease of `ttl` seconds (`Lease.LeaseGrant`).
    ///
    /// # Errors
    /// The call's status.
    ///
    /// # Cancel safety
    /// Dropped after it was sent, the lease may still be granted, and then
    /// expires by itself.
    pub async fn lease_grant(&self, ttl: i64) -> Result<LeaseGrantResponse, Error> {
        self.call(|| {
            let mut lease = self.lease.clone();
            async move {
                let request = LeaseGrantRequest { ttl, id: 0 };
                Ok(lease.lease_grant(request).await?.into_inner())
            }
        })
        .await
    }

    /// Revokes lease `id`, deleting every key on it (`Lease.LeaseRevoke`).
    ///
    /// # Errors
    /// The call's status (`NotFound` for a lease that is gone).
    ///
    /// # Cancel safety
    /// Dropped after it was sent, the lease may still be revoked.
    pub async fn lease_revoke(&self, id: i64) -> Result<LeaseRevokeResponse, Error> {
        self.call(|| {
            let mut lease = self.lease.clone();
            async move {
                Ok(lease
                    .lease_revoke(LeaseRevokeRequest { id })
                    .await?
                    .into_inner())
            }
        })
        .await
    }

    /// How long lease `id` has left (`Lease.LeaseTimeToLive`); a TTL of -1
    /// when it is gone.
    ///
    /// # Errors
    /// The call's status.
    ///
    /// # Cancel safety
    /// Cancel safe: a read changes nothing.
    pub async fn lease_time_to_live(&self, id: i64) -> Result<LeaseTimeToLiveResponse, Error> {
        self.call(|| {
            let mut lease = self.lease.clone();
            async move {
                let request = LeaseTimeToLiveRequest { id };
                Ok(lease.lease_time_to_live(request).await?.into_inner())
            }
        })
        .await
    }

    /// Opens a keep-alive stream for lease `id` (`Lease.LeaseKeepAlive`),
    /// sends the first keep-alive and waits for its answer; a TTL of zero
    /// or less in it means the lease is gone.
    ///
    /// # Errors
    /// The call's status; [`Error::Protocol`] when the stream ended before
    /// the answer.
    ///
    /// # Cancel safety
    /// Dropped after it was sent, the keep-alive may still renew the lease.
    pub async fn lease_keep_alive(
        &self,
        id: i64,
    ) -> Result<(LeaseKeepAlive, LeaseKeepAliveResponse), Error> {
        self.call(|| {
            let mut lease = self.lease.clone();
            async move {
                // Queued before the call: etcd answers the call's headers
                // with its first message.
                let (mut requests, queued) = mpsc::channel(1);
                requests
                    .try_send(LeaseKeepAliveRequest { id })
                    .map_err(|_| Error::Protocol("the keep-alive queue refused a request"))?;
                let answers = lease.lease_keep_alive(queued).await?.into_inner();
                let mut stream = LeaseKeepAlive {
                    id,
                    requests,
                    answers,
                };
                let first = stream.answer().await?;
                Ok((stream, first))
            }
        })
        .await
    }

    /// Watches `request`'s key or range (`Watch.Watch`), one watch per
    /// stream. The first message confirms the watch (`created`).
    ///
    /// # Errors
    /// The call's status.
    ///
    /// # Cancel safety
    /// Cancel safe: a watch dropped before it was made changes nothing.
    pub async fn watch(&self, request: WatchCreateRequest) -> Result<WatchStream, Error> {
        self.call(|| {
            let mut watch = self.watch.clone();
            let create = WatchRequest {
                request_union: Some(watch_request::RequestUnion::CreateRequest(request.clone())),
            };
            async move {
                // The request side stays open while the stream is read:
                // etcd may end a watch whose client closed its side.
                let requests = stream::once(async move { create }).chain(stream::pending());
                let responses = watch.watch(requests).await?.into_inner();
                Ok(WatchStream { responses })
            }
        })
        .await
    }

    /// The answering member's status (`Maintenance.Status`): its version,
    /// its id (in the header) and the leader's.
    ///
    /// # Errors
    /// The call's status.
    ///
    /// # Cancel safety
    /// Cancel safe: a read changes nothing.
    pub async fn status(&self) -> Result<StatusResponse, Error> {
        self.call(|| {
            let mut maintenance = self.maintenance.clone();
            async move { Ok(maintenance.status(StatusRequest {}).await?.into_inner()) }
        })
        .await
    }
}

/// An open keep-alive stream for one lease.
#[derive(Debug)]
pub struct LeaseKeepAlive {
    id: i64,
    requests: mpsc::Sender<LeaseKeepAliveRequest>,
    answers: Streaming<LeaseKeepAliveResponse>,
}

impl LeaseKeepAlive {
    /// Sends one more keep-alive and waits for its answer.
    ///
    /// # Errors
    /// The stream's status; [`Error::Protocol`] when it ended.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped between the request and its answer, the
    /// next call reads that answer as its own.
    pub async fn keep_alive(&mut self) -> Result<LeaseKeepAliveResponse, Error> {
        self.requests
            .send(LeaseKeepAliveRequest { id: self.id })
            .await
            .map_err(|_| Error::Protocol("the keep-alive stream is closed"))?;
        self.answer().await
    }

    async fn answer(&mut self) -> Result<LeaseKeepAliveResponse, Error> {
        self.answers.message().await?.ok_or(Error::Protocol(
            "the keep-alive stream ended before its answer",
        ))
    }
}

/// The responses of one watch.
#[derive(Debug)]
pub struct WatchStream {
    responses: Streaming<WatchResponse>,
}

impl WatchStream {
    /// The next response; `None` once etcd ended the stream.
    ///
    /// # Errors
    /// The stream's status (a member gone, a token refused).
    ///
    /// # Cancel safety
    /// Cancel safe: a response not yet read stays for the next call.
    pub async fn message(&mut self) -> Result<Option<WatchResponse>, Error> {
        Ok(self.responses.message().await?)
    }
}
