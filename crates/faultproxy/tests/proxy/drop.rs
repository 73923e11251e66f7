//! Dropping one direction: requests that vanish, or replies that do.

use distlock_faultproxy::{Direction, Fault, FaultProxy};
use tokio::io::AsyncWriteExt;

use crate::support::{
    Event, assert_server_idle, assert_silent, connect, eventually, next_event, recording_server,
    round_trip,
};

#[tokio::test]
async fn lost_replies_reach_the_server_but_not_the_client() {
    let (server, mut events) = recording_server(b"ok").await;
    let proxy = FaultProxy::start(server).expect("start");
    let mut client = connect(proxy.addr()).await;
    assert_eq!(next_event(&mut events).await, Event::Connected);

    proxy.set_fault(Fault::Drop(Direction::ToClient));
    client.write_all(b"request").await.expect("write");
    assert_eq!(
        next_event(&mut events).await,
        Event::Received(b"request".to_vec())
    );
    assert_silent(&mut client).await;
    eventually("the reply is swallowed", || {
        proxy.stats().swallowed_to_client == 2
    })
    .await;

    proxy.clear();
    assert_eq!(round_trip(&mut client, b"next", 2).await, b"ok");
    assert_eq!(
        next_event(&mut events).await,
        Event::Received(b"next".to_vec())
    );
}

#[tokio::test]
async fn lost_requests_reach_nobody() {
    let (server, mut events) = recording_server(b"ok").await;
    let proxy = FaultProxy::start(server).expect("start");
    let mut client = connect(proxy.addr()).await;
    assert_eq!(next_event(&mut events).await, Event::Connected);

    proxy.set_fault(Fault::Drop(Direction::ToServer));
    client.write_all(b"request").await.expect("write");
    eventually("the request is swallowed", || {
        proxy.stats().swallowed_to_server == 7
    })
    .await;
    assert_server_idle(&mut events).await;
    assert_silent(&mut client).await;

    proxy.clear();
    assert_eq!(round_trip(&mut client, b"next", 2).await, b"ok");
    assert_eq!(
        next_event(&mut events).await,
        Event::Received(b"next".to_vec())
    );
}
