//! The record of an election's terms, beside the lock file: only a
//! campaign writes it, and a record that is not one is a clear error.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::Backend;
use distlock_core::{Error, LockClient};
use distlock_file::FileBackend;

fn client(dir: &std::path::Path) -> LockClient {
    let backend: Arc<dyn Backend> = Arc::new(FileBackend::open(dir).unwrap());
    LockClient::builder().build_shared(backend).unwrap()
}

/// The hidden files of the directory whose names end in `.terms`.
fn term_records(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.to_string_lossy().ends_with(".terms"))
        .collect()
}

#[tokio::test]
async fn only_a_campaign_writes_a_record_and_a_foreign_one_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let client = client(dir.path());
    let plain = client.acquire("jobs").await.unwrap();
    assert!(plain.release().await.unwrap());
    assert!(
        term_records(dir.path()).is_empty(),
        "a plain grant records no term"
    );

    let election = client.election("jobs").unwrap();
    let leading = election
        .campaign("http://a:1", Duration::from_secs(5))
        .await
        .unwrap();
    let records = term_records(dir.path());
    assert_eq!(records.len(), 1, "one record for the election");
    let mut observer = election.observe();
    assert_eq!(observer.next().await.unwrap().term, leading.term());
    assert!(leading.resign().await.unwrap());

    std::fs::write(&records[0], b"not json").unwrap();
    let again = election
        .campaign("http://a:1", Duration::from_secs(5))
        .await;
    match again {
        Err(Error::InvalidData { what, .. }) => {
            assert!(what.ends_with(".terms"), "names the file: {what}")
        }
        other => panic!("a foreign record must be refused, got {other:?}"),
    }
    // The refused campaign left the lock free.
    let plain = client.try_acquire("jobs").await.unwrap();
    assert!(plain.is_some(), "the lock is free after a refused campaign");
}
