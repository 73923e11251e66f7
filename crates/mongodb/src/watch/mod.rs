//! Release wake-ups: one change stream per backend on the watched
//! collection, filtered to the names this process waits for.
//!
//! The lock collection's backend starts its watcher when it is built; an
//! entity collection's, on the first wait, once a probe has shown that the
//! server supports change streams ([`LazyWatcher`]).

mod lazy;
mod stream;
mod subject;

pub(crate) use self::lazy::{LazyWatcher, change_streams_feature, change_streams_work};
pub(crate) use self::stream::Watcher;
pub(crate) use self::subject::Subject;
