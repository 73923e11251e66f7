//! How a scenario, a worker or a report fails: with a message that ends
//! the run.

/// Failures end the run with a message.
pub(crate) type Outcome<T> = Result<T, String>;
