#![doc = include_str!("../../../README.md")]

mod url;

pub use distlock_core::*;
#[cfg(feature = "file")]
pub use distlock_file as file;

pub use crate::url::{BackendUrl, default_url, open, redact};
