//! The handle entity locks use on the caller's collection: the caller's
//! handle may prefer secondaries or another read concern for its own reads,
//! but a lock read from a secondary that lags could show a lease as lost
//! that is ours, or as ours after someone else took it.

use mongodb::Collection;
use mongodb::bson::Document;
use mongodb::options::{CollectionOptions, ReadConcern, ReadPreference, SelectionCriteria};

/// `collection` with every command sent to the primary, and reads made
/// with read concern `local`, so that they see the primary's latest writes,
/// ours included; writes keep `collection`'s write concern.
///
/// Change streams accept only `majority` (or no read concern), so the
/// release watcher sets its own.
pub(crate) fn on_primary(collection: &Collection<Document>) -> Collection<Document> {
    let namespace = collection.namespace();
    let options = CollectionOptions::builder()
        .selection_criteria(SelectionCriteria::ReadPreference(ReadPreference::Primary))
        .read_concern(ReadConcern::local())
        .write_concern(collection.write_concern().cloned())
        .build();
    collection
        .client()
        .database(&namespace.db)
        .collection_with_options(&namespace.coll, options)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::Client;
    use mongodb::options::{Acknowledgment, ClientOptions, ServerAddress, WriteConcern};

    /// A client that is never asked anything: building handles sends nothing.
    fn client() -> Client {
        let options = ClientOptions::builder()
            .hosts(vec![ServerAddress::Tcp {
                host: "127.0.0.1".into(),
                port: Some(9),
            }])
            .build();
        Client::with_options(options).unwrap()
    }

    #[tokio::test]
    async fn reads_go_to_the_primary_whatever_the_callers_handle_prefers() {
        let callers = CollectionOptions::builder()
            .selection_criteria(SelectionCriteria::ReadPreference(
                ReadPreference::SecondaryPreferred { options: None },
            ))
            .read_concern(ReadConcern::available())
            .write_concern(WriteConcern::builder().w(Acknowledgment::Majority).build())
            .build();
        let theirs = client()
            .database("app")
            .collection_with_options::<Document>("reports", callers);

        let ours = on_primary(&theirs);
        assert!(matches!(
            ours.selection_criteria(),
            Some(SelectionCriteria::ReadPreference(ReadPreference::Primary))
        ));
        assert_eq!(ours.read_concern(), Some(&ReadConcern::local()));
        assert_eq!(ours.write_concern(), theirs.write_concern());
        assert_eq!(ours.namespace(), theirs.namespace());
    }
}
