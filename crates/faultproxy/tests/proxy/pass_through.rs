//! With no fault, the proxy is invisible.

use distlock_faultproxy::FaultProxy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{connect, echo_server, ending, round_trip};

#[tokio::test]
async fn bytes_pass_both_ways() {
    let proxy = FaultProxy::start(echo_server().await).expect("start");
    let mut client = connect(proxy.addr()).await;
    assert_eq!(round_trip(&mut client, b"hello", 5).await, b"hello");
    assert_eq!(round_trip(&mut client, b"again", 5).await, b"again");

    let stats = proxy.stats();
    assert_eq!(stats.accepted, 1);
    assert_eq!(stats.active, 1);
    assert_eq!(stats.bytes_to_server, 10);
    assert_eq!(stats.bytes_to_client, 10);
    assert_eq!(stats.swallowed_to_server + stats.swallowed_to_client, 0);
}

#[tokio::test]
async fn large_payloads_arrive_whole_and_in_order() {
    let proxy = FaultProxy::start(echo_server().await).expect("start");
    let mut client = connect(proxy.addr()).await;
    let payload: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let (mut rd, mut wr) = client.split();
    let write = async {
        wr.write_all(&payload).await.expect("write");
        // The end of stream travels through the proxy and back.
        wr.shutdown().await.expect("shutdown");
    };
    let mut echoed = Vec::new();
    let read = async { rd.read_to_end(&mut echoed).await.expect("read") };
    tokio::join!(write, read);
    assert!(echoed == payload, "the echo differs from the payload");
    assert_eq!(proxy.stats().bytes_to_client, payload.len() as u64);
}

#[tokio::test]
async fn a_server_close_reaches_the_client() {
    let proxy = FaultProxy::start(echo_server().await).expect("start");
    let mut client = connect(proxy.addr()).await;
    client.shutdown().await.expect("shutdown");
    assert_eq!(ending(&mut client).await, Ok(()));
}
