//! Refusing closes new connections at once and spares existing ones.

use distlock_faultproxy::{Fault, FaultProxy};

use crate::support::{
    Event, assert_server_idle, connect, ending, next_event, recording_server, round_trip,
};

#[tokio::test]
async fn refuse_closes_new_connections_only() {
    let (server, mut events) = recording_server(b"ok").await;
    let proxy = FaultProxy::start(server).expect("start");
    let mut existing = connect(proxy.addr()).await;
    assert_eq!(next_event(&mut events).await, Event::Connected);

    proxy.set_fault(Fault::Refuse);
    let mut refused = connect(proxy.addr()).await;
    // Either a reset or an end of stream: the connection is over.
    let _ = ending(&mut refused).await;
    assert_server_idle(&mut events).await;
    let stats = proxy.stats();
    assert_eq!((stats.accepted, stats.refused), (2, 1));

    assert_eq!(round_trip(&mut existing, b"still", 2).await, b"ok");
    assert_eq!(
        next_event(&mut events).await,
        Event::Received(b"still".to_vec())
    );

    proxy.clear();
    let mut welcome = connect(proxy.addr()).await;
    assert_eq!(round_trip(&mut welcome, b"hi", 2).await, b"ok");
    assert_eq!(next_event(&mut events).await, Event::Connected);
}
