//! A small etcd v3 client: the calls this backend makes, on etcd's gRPC
//! API, for tests and tools that need to look at or change what the
//! backend wrote (feature `raw-client`).
//!
//! It covers what distlock uses and no more: `KV` (`Range`, `Put`,
//! `DeleteRange`, `Txn`), `Lease` (`LeaseGrant`, `LeaseRevoke`,
//! `LeaseKeepAlive`, `LeaseTimeToLive`), `Watch`, `Maintenance.Status`,
//! and `Auth.Authenticate` for user and password. The messages are etcd's
//! own ([`etcdserverpb`], [`mvccpb`]), generated from trimmed `.proto`
//! files and committed, so building needs no `protoc`; fields distlock
//! does not use are left out.
//!
//! It is not a general etcd client, and it may change in any release of
//! this crate: a program of your own is better served by `etcd-client`.
//!
//! ```no_run
//! # async fn example() -> Result<(), distlock_etcd::raw::Error> {
//! use distlock_etcd::raw::{Client, ConnectOptions, etcdserverpb::RangeRequest};
//!
//! let client = Client::connect(&ConnectOptions::new(["http://127.0.0.1:2379"])).await?;
//! let answer = client
//!     .range(RangeRequest { key: b"distlock/".to_vec(), range_end: b"distlock0".to_vec(), ..Default::default() })
//!     .await?;
//! println!("{} keys", answer.kvs.len());
//! # Ok(())
//! # }
//! ```

mod auth;
mod client;
mod connect;
mod error;
mod generated;
mod redact;

pub use client::{Client, LeaseKeepAlive, WatchStream};
pub use connect::ConnectOptions;
pub use error::Error;
pub use generated::{etcdserverpb, mvccpb};
