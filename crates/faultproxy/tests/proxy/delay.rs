//! Delays hold chunks back, keep their order, and can be lifted mid-way.
//! Only lower bounds on timing are asserted.

use std::time::{Duration, Instant};

use distlock_faultproxy::{Direction, Fault, FaultProxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{PATIENCE, assert_silent, connect, echo_server, round_trip};

#[tokio::test]
async fn a_delay_holds_back_both_directions() {
    let proxy = FaultProxy::start(echo_server().await).expect("start");
    let mut client = connect(proxy.addr()).await;
    let delay = Duration::from_millis(200);
    proxy.set_fault(Fault::Delay(delay));

    let started = Instant::now();
    assert_eq!(round_trip(&mut client, b"slow", 4).await, b"slow");
    assert!(
        started.elapsed() >= 2 * delay,
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_one_way_delay_holds_back_its_direction() {
    let proxy = FaultProxy::start(echo_server().await).expect("start");
    let mut client = connect(proxy.addr()).await;
    let delay = Duration::from_millis(300);
    proxy.set_fault(Fault::DelayOne(Direction::ToClient, delay));

    let started = Instant::now();
    assert_eq!(
        round_trip(&mut client, b"late reply", 10).await,
        b"late reply"
    );
    assert!(started.elapsed() >= delay, "took {:?}", started.elapsed());
}

#[tokio::test]
async fn delayed_chunks_keep_their_order() {
    let proxy = FaultProxy::start(echo_server().await).expect("start");
    let mut client = connect(proxy.addr()).await;
    proxy.set_fault(Fault::Delay(Duration::from_millis(50)));

    let mut sent = Vec::new();
    for i in 0..100u32 {
        let piece = format!("<{i}>");
        client.write_all(piece.as_bytes()).await.expect("write");
        sent.extend_from_slice(piece.as_bytes());
    }
    let mut echoed = vec![0; sent.len()];
    tokio::time::timeout(PATIENCE, client.read_exact(&mut echoed))
        .await
        .expect("no echo")
        .expect("read");
    assert_eq!(
        String::from_utf8_lossy(&echoed),
        String::from_utf8_lossy(&sent)
    );
}

#[tokio::test]
async fn clearing_a_delay_releases_what_it_held() {
    let proxy = FaultProxy::start(echo_server().await).expect("start");
    let mut client = connect(proxy.addr()).await;
    proxy.set_fault(Fault::Delay(Duration::from_secs(3600)));
    client.write_all(b"held").await.expect("write");
    assert_silent(&mut client).await;

    // Mid-connection, the held chunk goes as soon as the delay is lifted.
    proxy.clear();
    let mut echoed = [0; 4];
    tokio::time::timeout(PATIENCE, client.read_exact(&mut echoed))
        .await
        .expect("the held chunk was not released")
        .expect("read");
    assert_eq!(&echoed, b"held");
}
