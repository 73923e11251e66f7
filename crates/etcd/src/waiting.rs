//! What a wait keeps across its attempts: its key, and the watch on the
//! key it waits behind.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use crate::session::SessionId;
use crate::watch::Task;

/// What a wait keeps across its attempts: its key, and the watch on the
/// key it waits behind.
#[derive(Debug)]
pub(crate) struct Waiting {
    pub(crate) key: Vec<u8>,
    /// The predecessor watched, by key, and its watch.
    pub(crate) behind: Option<Behind>,
    /// Whether a reply has shown the key written: later attempts then
    /// read, and write again only if the key went.
    pub(crate) written: bool,
}

/// The watch on the key a waiter waits behind.
#[derive(Debug)]
pub(crate) struct Behind {
    pub(crate) key: Vec<u8>,
    /// Set once the watch saw the key deleted (or gave up on it).
    pub(crate) gone: Arc<AtomicBool>,
    /// When the name was last read: a fair waiter whose predecessor is
    /// still there reads again only half a lease after.
    pub(crate) read_at: Instant,
    /// The session that read: a new one means the key went with the old.
    pub(crate) session: SessionId,
    /// Ends the watch when the wait drops it.
    pub(crate) _watch: Task,
}
