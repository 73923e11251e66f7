//! What the campaign's steps return.

/// What the campaign's steps return: any error, with its message.
pub(crate) type Outcome<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;
