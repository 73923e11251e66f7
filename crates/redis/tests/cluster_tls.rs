//! Cluster mode over TLS (`rediss://…?mode=cluster&ca=…`): a 3-master
//! cluster of the test's own that serves TLS alone (`port 0`, `tls-port`,
//! `tls-cluster yes`), with a throwaway CA. Locks are taken, extended,
//! listed and released through it, and a CA that did not sign the nodes'
//! certificates is refused with an error that says so.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use distlock_core::LockName;
use distlock_core::backend::Backend;
use distlock_redis::RedisBackend;

use distlock_core::testing::ADMIN_LIMIT;
use support::cluster::{OwnCluster, names_on};
use support::tls::Certificates;
use support::{backend, client, grant_each};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_over_tls_takes_extends_lists_and_releases_locks() {
    let certificates = Certificates::new();
    let cluster = OwnCluster::start(3, false, Some(&certificates), &[]).await;
    let url = cluster.url();
    let backend = backend(&url).await;
    let mut connection = cluster.masters[0].connection().await;
    // Two names on each master, of every kind in turn.
    let mut names: Vec<LockName> = Vec::new();
    for master in 0..cluster.masters.len() {
        names.extend(names_on(&cluster, &backend, &mut connection, master, 2, "tls").await);
    }
    let leases = grant_each(&backend, &names).await;

    let extended = backend.extend_many(&leases).await.outcomes;
    assert_eq!(extended.len(), leases.len());
    for (lease, outcome) in leases.iter().zip(&extended) {
        assert!(
            *outcome.as_ref().expect("extend over TLS"),
            "{}",
            lease.name
        );
    }
    let listed: BTreeSet<LockName> = backend
        .list(ADMIN_LIMIT)
        .await
        .expect("list over TLS")
        .into_iter()
        .map(|info| info.name)
        .collect();
    let granted: BTreeSet<LockName> = names.iter().cloned().collect();
    assert_eq!(listed, granted, "every master's locks are listed");
    for lease in &leases {
        assert!(backend.release(lease).await.expect("release over TLS"));
    }
    assert!(backend.list(ADMIN_LIMIT).await.expect("list").is_empty());

    // And through a client, whose keeper extends over TLS.
    let locks = client(&url).await;
    let guard = locks
        .acquire_with(&names[0], Duration::from_secs(5))
        .await
        .expect("acquire over TLS");
    guard.extend().await.expect("extend over TLS");
    assert!(guard.release().await.expect("release"));
    let info = backend
        .server_info(ADMIN_LIMIT)
        .await
        .expect("server info over TLS");
    assert!(
        info.version.expect("a version").contains("cluster mode"),
        "the cluster's version"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_over_tls_with_another_ca_is_refused_with_a_certificate_error() {
    let certificates = Certificates::new();
    let cluster = OwnCluster::start(3, false, Some(&certificates), &[]).await;
    let stranger = Certificates::new();
    let url = cluster.url().replace(
        &certificates.ca().display().to_string(),
        &stranger.ca().display().to_string(),
    );
    assert!(url.contains(&stranger.ca().display().to_string()), "{url}");
    let error = RedisBackend::open(&url)
        .await
        .expect_err("certificates no trusted CA signed");
    let message = error.to_string();
    assert!(
        message.contains("certificate") && message.contains("?ca="),
        "the error names the certificate and the CA option: {message}"
    );
    assert!(
        !message.contains("cluster-enabled"),
        "the error does not blame the cluster's settings: {message}"
    );
}
