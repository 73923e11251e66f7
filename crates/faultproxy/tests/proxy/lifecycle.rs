//! Shutting the proxy down, or dropping it, ends its listener, its
//! connections and all its tasks.

use std::net::SocketAddr;

use distlock_faultproxy::FaultProxy;
use tokio::net::TcpStream;
use tokio::runtime::Handle;

use crate::support::{connect, echo_server, ending, eventually, round_trip};

fn alive_tasks() -> usize {
    Handle::current().metrics().num_alive_tasks()
}

async fn refuses_connections(addr: SocketAddr) -> bool {
    TcpStream::connect(addr).await.is_err()
}

/// A proxy in front of an echo server, a client that made a round trip
/// through it, and how many tasks were alive before the proxy started.
async fn proxy_in_use() -> (FaultProxy, TcpStream, usize) {
    let echo = echo_server().await;
    let baseline = alive_tasks();
    let proxy = FaultProxy::start(echo).expect("start");
    let mut client = connect(proxy.addr()).await;
    assert_eq!(round_trip(&mut client, b"hello", 5).await, b"hello");
    (proxy, client, baseline)
}

#[tokio::test]
async fn shutdown_closes_everything() {
    let (proxy, mut client, baseline) = proxy_in_use().await;
    let addr = proxy.addr();
    assert!(alive_tasks() > baseline);

    proxy.shutdown().await;
    let _ = ending(&mut client).await;
    assert!(refuses_connections(addr).await, "still listening");
    // The echo server's task for the connection ends once the proxy's
    // upstream side closed; the proxy's own tasks are already gone.
    eventually("every task ended", || alive_tasks() == baseline).await;
}

#[tokio::test]
async fn dropping_the_proxy_stops_it() {
    let (proxy, mut client, baseline) = proxy_in_use().await;
    let addr = proxy.addr();

    drop(proxy);
    let _ = ending(&mut client).await;
    eventually("every task ended", || alive_tasks() == baseline).await;
    assert!(refuses_connections(addr).await, "still listening");
}

#[test]
fn starting_outside_a_runtime_fails_without_panicking() {
    let addr = SocketAddr::from(([127, 0, 0, 1], 9));
    assert!(FaultProxy::start(addr).is_err());
}
