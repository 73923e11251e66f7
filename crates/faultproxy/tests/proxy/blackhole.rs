//! A blackhole swallows everything, on old and new connections, and what
//! it swallowed stays lost once it is cleared.

use distlock_faultproxy::{Fault, FaultProxy};
use tokio::io::AsyncWriteExt;

use crate::support::{assert_silent, connect, echo_server, eventually, round_trip};

#[tokio::test]
async fn a_blackhole_swallows_and_heals() {
    let proxy = FaultProxy::start(echo_server().await).expect("start");
    let mut old = connect(proxy.addr()).await;
    assert_eq!(round_trip(&mut old, b"before", 6).await, b"before");

    proxy.set_fault(Fault::Blackhole);
    let mut new = connect(proxy.addr()).await;
    old.write_all(b"lost").await.expect("write old");
    new.write_all(b"gone").await.expect("write new");
    assert_silent(&mut old).await;
    assert_silent(&mut new).await;
    eventually("both requests are swallowed", || {
        proxy.stats().swallowed_to_server == 8
    })
    .await;
    assert_eq!(proxy.stats().bytes_to_server, 6);

    proxy.clear();
    let mut healed = connect(proxy.addr()).await;
    assert_eq!(round_trip(&mut healed, b"after", 5).await, b"after");
    // The old connection survived, and the swallowed bytes do not resurface.
    assert_eq!(round_trip(&mut old, b"again", 5).await, b"again");
}
