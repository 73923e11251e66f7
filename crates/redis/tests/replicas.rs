//! `?wait_replicas=N`, on a primary and a replica of the test's own: a
//! grant counts once the replica has it; with the replica gone, a new
//! grant fails and holds nothing, and the holder gives its lease up in
//! time since no extension is confirmed. And through a proxy that moves
//! the backend's connection to a new one right after the server answered
//! a script, as a reconnect would: `WAIT` goes out with the script it
//! confirms, so it still counts the replicas that have that script's
//! writes, and neither a grant nor an extension is confirmed by a `WAIT`
//! on a connection that wrote nothing.

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::backend::BackendExt;
use distlock_core::backend::{AcquireRequest, Attempt, Backend, WaitState};
use distlock_core::{Claim, Holder, LockClient, LossReason};
use distlock_redis::{RedisBackend, redis};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use support::{OwnServer, backend, client, eventually, grant, options, raw, unique};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_and_extensions_wait_for_the_replicas() {
    let (primary, mut replica) = primary_and_replica().await;
    let mut connection = raw(&primary.url()).await;

    let waiting = format!("{}?wait_replicas=1", primary.url());
    let holder = LockClient::new(Arc::new(backend(&waiting).await), options());
    let name = unique("replicated");
    let guard = holder
        .acquire_with(&name, Duration::from_secs(5))
        .await
        .expect("granted once the replica has it");
    guard.extend().await.expect("an extension the replica has");

    replica.kill();
    let other = unique("unreplicated");
    let error = holder
        .try_acquire(&other)
        .await
        .expect_err("no replica acknowledges the grant");
    let message = error.to_string();
    assert!(message.contains("did not reach 1 replica"), "{message}");
    // The grant the replica never had was released.
    let plain = client(&primary.url()).await;
    let free = plain
        .try_acquire(&other)
        .await
        .expect("try")
        .expect("released");
    assert!(free.release().await.expect("release"));

    let reason = tokio::time::timeout(Duration::from_secs(60), guard.lost())
        .await
        .expect("the holder gives its lease up");
    assert_eq!(reason, LossReason::Expired);
    let _ = guard.release().await;
    let _: () = redis::cmd("PING")
        .query_async(&mut connection)
        .await
        .unwrap();
}

#[tokio::test]
async fn wait_replicas_is_refused_in_quorum_mode_and_must_be_a_number() {
    for (url, says) in [
        (
            "redis://a:1,b:2,c:3?mode=quorum&wait_replicas=1",
            "is for mode=single",
        ),
        ("redis://a:1?wait_replicas=0", "whole number from 1"),
        ("redis://a:1?wait_replicas=two", "whole number from 1"),
    ] {
        let error = distlock_redis::RedisConfig::parse(url).expect_err(url);
        assert!(error.to_string().contains(says), "{url}: {error}");
    }
}

/// A TCP proxy in front of a server that, once armed with a pattern,
/// moves a client's connection to a new server connection at the worst
/// moment: after it relayed the reply to the client's first bytes that
/// hold the pattern, whatever the client sends next goes over a new
/// connection to the server, as after a reconnect of the driver's
/// connection manager between two requests. Replies of both server
/// connections are relayed to the client.
struct SwappingProxy {
    port: u16,
    armed: Arc<Mutex<Option<Vec<u8>>>>,
    swaps: Arc<AtomicUsize>,
}

impl SwappingProxy {
    async fn start(server: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("an address").port();
        let armed = Arc::new(Mutex::new(None));
        let swaps = Arc::new(AtomicUsize::new(0));
        let (armed_, swaps_) = (armed.clone(), swaps.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(serve(client, server, armed_.clone(), swaps_.clone()));
            }
        });
        Self { port, armed, swaps }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Swaps the server connection of the next client bytes that hold
    /// `pattern`, once they are answered.
    fn arm(&self, pattern: &str) {
        *self.armed.lock().unwrap() = Some(pattern.as_bytes().to_vec());
    }

    fn swaps(&self) -> usize {
        self.swaps.load(Ordering::SeqCst)
    }
}

/// A new connection to the server, whose replies go to `replies`.
async fn upstream(server: u16, replies: mpsc::UnboundedSender<Vec<u8>>) -> OwnedWriteHalf {
    let connection = TcpStream::connect(("127.0.0.1", server))
        .await
        .expect("connect to the server");
    let (mut from_server, to_server) = connection.into_split();
    tokio::spawn(async move {
        let mut buffer = vec![0; 64 * 1024];
        while let Ok(read @ 1..) = from_server.read(&mut buffer).await {
            if replies.send(buffer[..read].to_vec()).is_err() {
                return;
            }
        }
    });
    to_server
}

async fn serve(
    client: TcpStream,
    server: u16,
    armed: Arc<Mutex<Option<Vec<u8>>>>,
    swaps: Arc<AtomicUsize>,
) {
    let (mut from_client, mut to_client) = client.into_split();
    let (replies, mut relay) = mpsc::unbounded_channel::<Vec<u8>>();
    // Set once the armed bytes went to the server; `answered` once a
    // reply was relayed after that.
    let watching = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicBool::new(false));
    {
        let (watching, answered) = (watching.clone(), answered.clone());
        tokio::spawn(async move {
            while let Some(reply) = relay.recv().await {
                if to_client.write_all(&reply).await.is_err() {
                    return;
                }
                if watching.load(Ordering::SeqCst) {
                    answered.store(true, Ordering::SeqCst);
                }
            }
        });
    }
    let mut to_server = upstream(server, replies.clone()).await;
    let mut buffer = vec![0; 64 * 1024];
    while let Ok(read @ 1..) = from_client.read(&mut buffer).await {
        let sent = &buffer[..read];
        if answered.swap(false, Ordering::SeqCst) {
            // The client sends again after its armed request was answered:
            // on a new connection from here on.
            watching.store(false, Ordering::SeqCst);
            to_server = upstream(server, replies.clone()).await;
            swaps.fetch_add(1, Ordering::SeqCst);
        }
        {
            let mut armed = armed.lock().unwrap();
            let matches = armed
                .as_deref()
                .is_some_and(|pattern| sent.windows(pattern.len()).any(|at| at == pattern));
            if matches {
                *armed = None;
                watching.store(true, Ordering::SeqCst);
            }
        }
        if to_server.write_all(sent).await.is_err() {
            return;
        }
    }
}

/// A primary and its replica, once the replica is online.
async fn primary_and_replica() -> (OwnServer, OwnServer) {
    let primary = OwnServer::start(&[]).await;
    let port = primary.port().to_string();
    let replica = OwnServer::start(&["--replicaof", "127.0.0.1", &port]).await;
    let connection = raw(&primary.url()).await;
    eventually("the replica is online", || {
        let mut connection = connection.clone();
        async move {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut connection)
                .await
                .unwrap_or_default();
            info.contains("state=online")
        }
    })
    .await;
    (primary, replica)
}

/// A primary, its replica (online), and a proxy in front of the primary.
async fn replicated_through_a_proxy() -> (OwnServer, OwnServer, SwappingProxy) {
    let (primary, replica) = primary_and_replica().await;
    let proxy = SwappingProxy::start(primary.port()).await;
    (primary, replica, proxy)
}

/// An exclusive grant request for `name` with a lease of 6 s: its
/// operation timeout is 2 s, and its WAIT 1 s.
fn request(name: &distlock_core::LockName) -> AcquireRequest {
    AcquireRequest::new(
        name.clone(),
        Claim::Exclusive,
        Duration::from_secs(6),
        Holder::this_process(Some("redis-tests")).into(),
    )
}

/// The replica is stopped (SIGSTOP): the primary still counts it as an
/// online replica, but it acknowledges nothing more. A connection that
/// wrote nothing is answered `WAIT 1` = 1 at once; one that wrote the
/// grant waits, and is answered 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_is_not_confirmed_by_a_wait_on_a_connection_that_wrote_nothing() {
    let (primary, replica, proxy) = replicated_through_a_proxy().await;
    let backend: RedisBackend = backend(&format!("{}?wait_replicas=1", proxy.url())).await;
    // The scripts are loaded while the replica answers.
    let warm = grant(
        &backend,
        &unique("warm"),
        Claim::Exclusive,
        Duration::from_secs(6),
    )
    .await
    .expect("granted while the replica answers");
    assert!(backend.release(&warm).await.expect("release"));

    replica.signal("STOP");
    let name = unique("unconfirmed");
    let exclusive = backend.keys_of(&name).remove(0);
    proxy.arm(&exclusive);
    let outcome = backend
        .try_acquire(&request(&name), &mut WaitState::new())
        .await;
    replica.signal("CONT");
    assert_eq!(
        proxy.swaps(),
        1,
        "the connection moved after the script's answer"
    );
    let error = match outcome {
        Err(error) => error,
        Ok(Attempt::Acquired { fencing_token, .. }) => panic!(
            "granted with token {fencing_token}, confirmed by a WAIT on a connection that wrote \
             nothing, though the replica was stopped"
        ),
        Ok(Attempt::Held { .. }) => panic!("the name was free"),
    };
    let message = error.to_string();
    assert!(
        message.contains("did not reach 1 replica") && message.contains("0 acknowledged it"),
        "{message}"
    );
    // The unconfirmed grant was released.
    let mut connection = raw(&primary.url()).await;
    let exists: i64 = redis::cmd("EXISTS")
        .arg(&exclusive)
        .query_async(&mut connection)
        .await
        .expect("EXISTS");
    assert_eq!(exists, 0, "the grant the replica lacked is gone");
}

/// As above, for an extension: the keeper's pipeline of extensions and
/// its WAIT go out together. (A release waits for no replica, and
/// `?wait_replicas` hands no lock over, so these are the calls that
/// WAIT.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_is_not_confirmed_by_a_wait_on_a_connection_that_wrote_nothing() {
    let (_primary, replica, proxy) = replicated_through_a_proxy().await;
    let backend: RedisBackend = backend(&format!("{}?wait_replicas=1", proxy.url())).await;
    let name = unique("extended");
    let lease = grant(&backend, &name, Claim::Exclusive, Duration::from_secs(6))
        .await
        .expect("granted while the replica answers");
    assert!(
        backend
            .extend(&lease)
            .await
            .expect("an extension the replica has"),
        "extended while the replica answers"
    );

    replica.signal("STOP");
    proxy.arm(&backend.keys_of(&name).remove(0));
    let outcome = backend.extend(&lease).await;
    replica.signal("CONT");
    // The release goes over the new connection.
    let _ = backend.release(&lease).await;
    assert_eq!(
        proxy.swaps(),
        1,
        "the connection moved after the extension's answer"
    );
    let message = match outcome {
        Err(error) => error.to_string(),
        Ok(extended) => panic!(
            "the extension was confirmed ({extended}) by a WAIT on a connection that wrote \
             nothing, though the replica was stopped"
        ),
    };
    assert!(
        message.contains("did not reach 1 replica") && message.contains("0 acknowledged it"),
        "{message}"
    );
}
