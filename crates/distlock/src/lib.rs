#![doc = include_str!("../../../README.md")]

mod url;

pub use distlock_core::*;
#[cfg(feature = "etcd")]
pub use distlock_etcd as etcd;
#[cfg(feature = "file")]
pub use distlock_file as file;
#[cfg(feature = "memcached")]
pub use distlock_memcached as memcached;
#[cfg(feature = "mongodb")]
pub use distlock_mongodb as mongodb;
#[cfg(feature = "postgres")]
pub use distlock_postgres as postgres;

pub use crate::url::{BackendUrl, SecretUrl, default_url, open};
pub use distlock_core::urls::redact;
