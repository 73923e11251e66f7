//! distlock's Redis backend (docs to come).

#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod config;
mod error;
mod keys;
mod scripts;
mod wake;

pub use backend::RedisBackend;
pub use config::{DEFAULT_PORT, DEFAULT_PREFIX, RedisConfig};
/// The Redis client this backend is built on, at the version it uses.
pub use redis;
