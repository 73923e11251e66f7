//! Credentials never show in errors or `Debug` output, and unreachable
//! servers fail fast instead of hanging.

use std::net::TcpListener;
use std::time::Duration;

use distlock_mongodb::{MongoBackend, MongoConfig};

use crate::common::*;

const PASSWORD: &str = "s3cr3t-Pa55";

fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn assert_hidden(text: &str) {
    assert!(!text.contains(PASSWORD), "the password shows in: {text}");
}

#[tokio::test]
async fn an_unreachable_server_fails_within_the_connect_timeout_without_the_password() {
    let url = format!("mongodb://alice:{PASSWORD}@127.0.0.1:{}/app", closed_port());
    let config = MongoConfig::new(url.as_str()).connect_timeout(Duration::from_secs(1));
    assert_hidden(&format!("{config:?}"));
    let outcome = tokio::time::timeout(Duration::from_secs(60), MongoBackend::connect(config))
        .await
        .expect("build gives up instead of hanging");
    let error = outcome.expect_err("nothing listens there");
    assert_hidden(&error.to_string());
    assert_hidden(&format!("{error:?}"));
    assert!(error.is_transient(), "{error}");
}

#[tokio::test]
async fn malformed_urls_are_reported_without_the_password() {
    for url in [
        format!("mongodb://alice:{PASSWORD}@/"),
        format!("mongodb://alice:{PASSWORD}@h:notaport/"),
        format!("mongodb://alice:{PASSWORD}@h/?w=1&wtimeoutMS=abc"),
        format!("mongodb://alice:{PASSWORD}@h/?collection=a&collection=b"),
    ] {
        let outcome = match MongoConfig::parse(&url) {
            Ok(config) => {
                MongoBackend::connect(config.connect_timeout(Duration::from_secs(1))).await
            }
            Err(error) => Err(error),
        };
        let error = outcome.expect_err("a malformed URL");
        assert_hidden(&error.to_string());
        assert_hidden(&format!("{error:?}"));
    }
}

#[tokio::test]
async fn a_reachable_server_with_credentials_never_shows_the_password() {
    let shared = shared_url();
    let authority = shared.strip_prefix("mongodb://").expect("a mongodb:// URL");
    let url = format!("mongodb://alice:{PASSWORD}@{authority}");
    let config = MongoConfig::new(url.as_str())
        .collection(unique("credentials"))
        .connect_timeout(Duration::from_secs(2));
    match MongoBackend::connect(config).await {
        Ok(backend) => assert_hidden(&format!("{backend:?}")),
        Err(error) => {
            assert_hidden(&error.to_string());
            assert_hidden(&format!("{error:?}"));
        }
    }
}
