//! What `distlock check` says of an etcd deployment: whether the watch
//! API answers, which wakes waiters and reports a holder's lost key.

use std::time::Duration;

use distlock_core::backend::Feature;

use crate::raw::Client;
use crate::raw::etcdserverpb::WatchCreateRequest;

/// Opens a watch on `key` (under the backend's prefix; nothing is
/// written) and waits for etcd to confirm it, within `timeout`.
pub(crate) async fn watch(client: &Client, key: Vec<u8>, timeout: Duration) -> Feature {
    const NAME: &str = "watch";
    let confirmed = async {
        let mut stream = client
            .watch(WatchCreateRequest {
                key,
                ..WatchCreateRequest::default()
            })
            .await?;
        Ok::<_, crate::raw::Error>(stream.message().await?.is_some_and(|first| first.created))
    };
    // The stream ends when it is dropped, with the future.
    match tokio::time::timeout(timeout, confirmed).await {
        Ok(Ok(true)) => Feature::present(
            NAME,
            "the watch API answers: a release wakes the next waiter, and a holder sees its \
             key deleted, at once",
        ),
        Ok(Ok(false)) => Feature::degraded(
            NAME,
            "the watch was not confirmed: waiters fall back to trying again after a while",
        ),
        Ok(Err(error)) => Feature::degraded(
            NAME,
            format!(
                "opening a watch failed ({error}): waiters fall back to trying again after a \
                 while; with authentication on, the user needs read access to the prefix"
            ),
        ),
        Err(_) => Feature::degraded(
            NAME,
            format!("etcd did not confirm a watch within {timeout:?}"),
        ),
    }
}
