//! Resets: of every connection at once, and of the connection that
//! carries the next request, before its reply.

use std::io::ErrorKind;

use distlock_faultproxy::{Fault, FaultProxy};
use tokio::io::AsyncWriteExt;

use crate::support::{Event, connect, ending, next_event, recording_server, round_trip};

#[tokio::test]
async fn reset_all_resets_both_sides() {
    let (server, mut events) = recording_server(b"ok").await;
    let proxy = FaultProxy::start(server).expect("start");
    let mut client = connect(proxy.addr()).await;
    assert_eq!(round_trip(&mut client, b"hello", 2).await, b"ok");
    assert_eq!(next_event(&mut events).await, Event::Connected);
    assert_eq!(
        next_event(&mut events).await,
        Event::Received(b"hello".to_vec())
    );

    proxy.reset_all();
    assert_eq!(ending(&mut client).await, Err(ErrorKind::ConnectionReset));
    assert_eq!(
        next_event(&mut events).await,
        Event::Ended(Err(ErrorKind::ConnectionReset))
    );
    assert_eq!(proxy.stats().resets, 1);

    // Only the connections open at the time were reset.
    let mut later = connect(proxy.addr()).await;
    assert_eq!(round_trip(&mut later, b"later", 2).await, b"ok");
}

#[tokio::test]
async fn reset_after_request_loses_the_acknowledgement() {
    let (server, mut events) = recording_server(b"ack").await;
    let proxy = FaultProxy::start(server).expect("start");
    let mut bystander = connect(proxy.addr()).await;
    assert_eq!(next_event(&mut events).await, Event::Connected);
    let mut client = connect(proxy.addr()).await;
    assert_eq!(next_event(&mut events).await, Event::Connected);

    proxy.set_fault(Fault::ResetAfterRequest);
    client.write_all(b"write x").await.expect("write");
    assert_eq!(
        next_event(&mut events).await,
        Event::Received(b"write x".to_vec())
    );
    assert_eq!(ending(&mut client).await, Err(ErrorKind::ConnectionReset));
    assert_eq!(
        next_event(&mut events).await,
        Event::Ended(Err(ErrorKind::ConnectionReset))
    );
    let stats = proxy.stats();
    assert_eq!((stats.bytes_to_client, stats.resets), (0, 1));

    // The shot is taken: everything else passes again.
    assert_eq!(proxy.fault(), Fault::None);
    assert_eq!(round_trip(&mut bystander, b"read x", 3).await, b"ack");
}

#[tokio::test]
async fn a_shot_kept_for_a_start_lets_other_requests_pass() {
    let (server, mut events) = recording_server(b"ack").await;
    let proxy = FaultProxy::start(server).expect("start");
    let mut client = connect(proxy.addr()).await;
    assert_eq!(next_event(&mut events).await, Event::Connected);

    proxy.set_fault(Fault::ResetAfterRequestStarting(b"PUT "));
    // A read passes, answered, and leaves the shot armed.
    assert_eq!(round_trip(&mut client, b"GET x", 3).await, b"ack");
    assert_eq!(
        next_event(&mut events).await,
        Event::Received(b"GET x".to_vec())
    );
    assert_eq!(proxy.fault(), Fault::ResetAfterRequestStarting(b"PUT "));

    // The write reaches the server, and its answer is lost.
    client.write_all(b"PUT x").await.expect("write");
    assert_eq!(
        next_event(&mut events).await,
        Event::Received(b"PUT x".to_vec())
    );
    assert_eq!(ending(&mut client).await, Err(ErrorKind::ConnectionReset));
    assert_eq!(proxy.stats().resets, 1);
    assert_eq!(proxy.fault(), Fault::None);
}
