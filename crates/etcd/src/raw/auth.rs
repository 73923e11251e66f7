//! User and password authentication: etcd's `Authenticate` call gives a
//! token, and every other call carries it in its `token` header. A token
//! etcd refuses (expired, or from before an auth change) is replaced once
//! per refusal, by whichever call saw it first.

use std::sync::{Arc, PoisonError, RwLock};

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::transport::Channel;
use tonic::{Code, Request, Status};

use super::Error;
use super::generated::etcdserverpb::AuthenticateRequest;
use super::generated::etcdserverpb::auth_client::AuthClient;

/// The header etcd reads the token from.
const TOKEN_HEADER: &str = "token";

type Token = MetadataValue<Ascii>;

/// The token, shared by every clone of a client.
#[derive(Clone)]
pub(super) struct Auth {
    credentials: Option<Arc<(String, String)>>,
    token: Arc<RwLock<Option<Token>>>,
    /// One refresh at a time: calls refused together authenticate once.
    refreshing: Arc<tokio::sync::Mutex<()>>,
    /// On the bare channel: `Authenticate` carries no token.
    client: AuthClient<Channel>,
}

impl Auth {
    pub(super) fn new(channel: Channel, credentials: Option<(String, String)>) -> Self {
        Self {
            credentials: credentials.map(Arc::new),
            token: Arc::default(),
            refreshing: Arc::default(),
            client: AuthClient::new(channel),
        }
    }

    /// What adds the token to each call.
    pub(super) fn interceptor(&self) -> AddToken {
        AddToken(self.token.clone())
    }

    /// The token calls are sent with now.
    pub(super) fn current(&self) -> Option<Token> {
        self.token
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether a call that ended with `status` should get a new token and
    /// be sent again: etcd refused its token, and there are credentials to
    /// get another with.
    pub(super) fn should_refresh(&self, status: &Status) -> bool {
        self.credentials.is_some() && status.code() == Code::Unauthenticated
    }

    /// Authenticates, if there are credentials, and keeps the token.
    pub(super) async fn authenticate(&self) -> Result<(), Error> {
        let Some(credentials) = &self.credentials else {
            return Ok(());
        };
        let (name, password) = credentials.as_ref().clone();
        let answer = self
            .client
            .clone()
            .authenticate(AuthenticateRequest { name, password })
            .await?
            .into_inner();
        let mut token = Token::try_from(answer.token)
            .map_err(|_| Error::Protocol("etcd's token is not a valid header value"))?;
        // Shown as "Sensitive" by Debug, and never indexed by HPACK.
        token.set_sensitive(true);
        *self.token.write().unwrap_or_else(PoisonError::into_inner) = Some(token);
        Ok(())
    }

    /// Authenticates again, unless another call already replaced `refused`.
    pub(super) async fn refresh(&self, refused: Option<Token>) -> Result<(), Error> {
        let _one_at_a_time = self.refreshing.lock().await;
        if self.current() != refused {
            return Ok(());
        }
        self.authenticate().await
    }
}

/// Adds the current token, if any, to each call's headers.
#[derive(Clone)]
pub(super) struct AddToken(Arc<RwLock<Option<Token>>>);

impl Interceptor for AddToken {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let token = self
            .0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(token) = token {
            request.metadata_mut().insert(TOKEN_HEADER, token);
        }
        Ok(request)
    }
}
