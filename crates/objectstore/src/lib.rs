//! distlock's object-storage backend: leases kept as objects in a bucket
//! (Amazon S3 and S3-compatible stores, Azure Blob Storage, Google Cloud
//! Storage), written only under the store's preconditions, through the
//! [`object_store`] crate.
//!
//! How it works (the record, each operation's requests, the probe) and how
//! it is tested is in `docs/objectstore.md` in the repository; this page
//! says what a caller can rely on.
//!
//! ```no_run
//! use distlock_objectstore::{Cloud, ObjectStoreBackend, ObjectStoreConfig};
//! # async fn example() -> Result<(), distlock_core::Error> {
//!
//! // From a URL: credentials come from the cloud's usual environment.
//! let backend = ObjectStoreBackend::open("s3://my-bucket/locks").await?;
//! // … or from a configuration, here an S3-compatible store.
//! let config = ObjectStoreConfig::new(Cloud::S3, "my-bucket")
//!     .prefix("team/locks")
//!     .endpoint("http://127.0.0.1:9000");
//! let backend = ObjectStoreBackend::connect(config).await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Opening
//! [`ObjectStoreBackend::open`], `distlock::connect` and the `distlock`
//! command take the same URLs:
//!
//! ```text
//! s3://bucket[/prefix][?endpoint=…&region=…&timeout=…&check=false]
//! gs://bucket[/prefix][?endpoint=…&timeout=…&check=false]
//! az://container[/prefix][?account=…&endpoint=…&timeout=…&check=false]
//! ```
//!
//! | option | default | meaning |
//! | --- | --- | --- |
//! | `endpoint` | the cloud's | the store's URL: an S3-compatible store, an emulator; `http://` allows plain HTTP |
//! | `region` | the environment's | S3's region |
//! | `account` | the environment's | Azure's storage account |
//! | `timeout` | `5s` | the longest one request may take, its retries included |
//! | `check` | `true` | `false` opens without probing the store's preconditions |
//!
//! Credentials are never in the URL: each cloud's client reads them from
//! its usual environment variables (`AWS_ACCESS_KEY_ID` and
//! `AWS_SECRET_ACCESS_KEY`, or a role through the instance's metadata;
//! `GOOGLE_APPLICATION_CREDENTIALS`; `AZURE_STORAGE_ACCOUNT_NAME` and
//! `AZURE_STORAGE_ACCOUNT_KEY`, …), as [`object_store`] documents for
//! each builder's `from_env`, and no message shows them. Each cloud is a feature of this crate (`s3`, `gcs`,
//! `azure`; distlock's `objectstore-s3` and so on), so a user of one does
//! not build the others. [`ObjectStoreBackend::builder`] takes a client
//! built by hand, for settings the URL does not reach.
//!
//! # The probe
//! Some S3-compatible stores accept `If-None-Match` and `If-Match` and
//! overwrite anyway; on them, two clients could hold one lock. Opening
//! writes an object of its own under `<prefix>/probe/`, checks that a
//! second create and a replace under a stale ETag are refused and that a
//! replace under the current one is kept, and deletes it. A store that
//! fails is refused with [`Error::Unsupported`] naming what it ignored,
//! unless the check is off (`check=false`). `distlock check` runs the same
//! probe.
//!
//! # What a caller can rely on
//! - **Only the holder ends or extends its lock.** Every write is
//!   conditional on the ETag the writer read or last wrote, and carries
//!   the grant's random identity. Only a forced release frees another's
//!   lock.
//! - **Expiry trusts no clock's time, only its rate.** A store keeps no
//!   expiry of its own for an object, so a waiter presumes a holder dead
//!   only once it has read the same version of the lock's object for the
//!   holder's whole lease, counted on its own monotonic clock from the
//!   first read that returned it. The holder counts its lease from the
//!   sending of its last write that succeeded, less the client's safety
//!   margin, so its lease always ends first, as long as the two machines'
//!   clocks run at the same rate to within that margin (the method of the
//!   AWS DynamoDB lock client).
//! - **The take-over delay.** A lock whose holder died is taken over one
//!   lease after a waiter first reads its last version, plus up to a poll:
//!   for a waiter already waiting, between the lease less one extension
//!   cadence and the lease plus two polls after the holder's death (with
//!   the defaults, 20 to 31 s); for one that comes later, a lease from its
//!   first read. Never sooner than the lease after the holder's last
//!   successful write.
//! - **Fencing tokens** are kept in the object and raised by each grant
//!   under its precondition, so they increase strictly while the object
//!   exists; a release keeps them. When the object is missing (first use,
//!   or deleted by a lifecycle rule or a person), the next token is this
//!   machine's clock in microseconds: greater than every token of the lost
//!   object as long as the clocks of the machines that create it agree to
//!   within the time since it was created, less one microsecond per grant.
//! - **A lost answer** is no loss: a write whose answer was lost is retried
//!   by the HTTP client and meets its own precondition, and a conditional
//!   write that fails is read back; an object holding the write's own
//!   identity means it landed. A `409 Conflict` (S3, under writes that
//!   race) means another client wrote first: the lock is held, ask again.
//! - **Waiting polls**: a store reports nothing, so the core's jittered
//!   backoff (by default at most every 500 ms) reads the object, never
//!   later than the moment the holder's lease would be over. Each poll is
//!   one `GET`; raise the backoff's maximum to poll less.
//!   `docs/objectstore.md` says what that costs in requests and money.
//! - **Resuming** a grant after a restart
//!   ([`LockClient::resume`](distlock_core::LockClient::resume),
//!   `distlock run --resume-file`): an `If-Match` write on the version
//!   that holds the grant puts the new identity in it, with the same
//!   token, so that a take-over, a second resume and the old holder's
//!   next extension all find it changed (the old holder then reports its
//!   loss). No write can be conditional on the time, so expiry is judged
//!   after it, by the store's clock alone: the grant is kept only if the
//!   store's `Last-Modified` of that write is at least a second less than
//!   the old lease after its stamp of the old grant's last write (stamps
//!   are whole seconds). Otherwise the resume is [`Error::Lost`] and frees
//!   the lock, keeping the token. So a grant in the last second of its
//!   lease is lost to a resume; a lease under a second, and a store that
//!   gives no `Last-Modified`, are refused with [`Error::Unsupported`].
//! - **Exclusive locks only**: readers and semaphore permits would need
//!   several objects changed in one step; they answer
//!   [`Error::Unsupported`]. There is no hand-over, no fair mode and no
//!   leader-election record of terms.
//! - **Listing** walks `<prefix>/locks/` and reads each object: every
//!   holder in every process, each with an estimate of its lease left (this
//!   machine's clock against the store's time of the last write).
//!
//! # Tested against
//! Azure Blob, through Azurite (Microsoft's emulator), and S3, through moto
//! (an emulator, served one request at a time), in CI: the backend's
//! protocol tests, the conformance suite and the chaos campaign's short
//! form, on each. AWS documents S3's conditional writes as atomic. Google
//! Cloud Storage is built through the same `object_store` calls but
//! untested: no emulator that honours its generation preconditions
//! installs here. `object_store`'s local file system store cannot be used:
//! it has no conditional replace.
//!
//! [`Error::Unsupported`]: distlock_core::Error::Unsupported
//! [`Error::Lost`]: distlock_core::Error::Lost

#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod config;
mod exclusive;
mod grant;
mod keys;
mod probe;
mod record;
mod sightings;
mod stamps;
mod store;

/// The `object_store` crate this backend is built on, for
/// [`ObjectStoreBackend::builder`].
pub use object_store;

pub use crate::backend::{ObjectStoreBackend, ObjectStoreBackendBuilder};
pub use crate::config::{Cloud, ObjectStoreConfig};
pub use crate::keys::MAX_PREFIX_LEN;
