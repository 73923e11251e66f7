//! State a backend owns and core carries for it: per grant, and per wait.
//!
//! Core never looks inside. A grant's state comes back with every
//! extension and release of that grant, so a backend needs no table of its
//! own beside the trait; a wait's state comes back with every attempt of
//! one wait, and to [`Backend::end_wait`](crate::backend::Backend::end_wait) when the
//! wait ends without a grant.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

/// What a backend keeps for one grant: an open file, a pinned connection,
/// the key the grant lives under. Cheap to clone (shared).
///
/// It is dropped when the grant's guard is done with it: after the release,
/// or, where a guard is dropped with no runtime left to run a release, at
/// once. A backend whose grant ends when its state is dropped (a file lock
/// ends when its file closes) learns of that drop this way.
#[derive(Clone, Default)]
pub struct GrantState(Option<Arc<dyn Any + Send + Sync>>);

impl GrantState {
    /// State holding `value`.
    pub fn new<T: Any + Send + Sync>(value: T) -> Self {
        Self(Some(Arc::new(value)))
    }

    /// No state, for backends that need none. It costs no allocation.
    pub const fn none() -> Self {
        Self(None)
    }

    /// State holding the value `shared` points to, without a second
    /// allocation: a backend that keeps weak references to its grants (to
    /// list them) or shares one value among grants passes its own `Arc`.
    pub fn from_arc<T: Any + Send + Sync>(shared: Arc<T>) -> Self {
        Self(Some(shared))
    }

    /// The value, if this state holds a `T`.
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.0.as_deref()?.downcast_ref()
    }

    /// A shared handle on the value, if this state holds a `T`.
    pub fn get_arc<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.0.clone()?.downcast().ok()
    }
}

impl fmt::Debug for GrantState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "GrantState(..)"
        } else {
            "GrantState(none)"
        })
    }
}

/// What a caller hands its backend with every attempt of one call, beside
/// the name: an entity lock's value to insert when the entity is missing,
/// for example. Cheap to clone (shared). Backends that take nothing from
/// their callers ignore it.
#[derive(Clone, Default)]
pub struct Payload(Option<Arc<dyn Any + Send + Sync>>);

impl Payload {
    /// A payload holding `value`.
    pub fn new<T: Any + Send + Sync>(value: T) -> Self {
        Self(Some(Arc::new(value)))
    }

    /// No payload. It costs no allocation.
    pub const fn none() -> Self {
        Self(None)
    }

    /// The value, if this payload holds a `T`.
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.0.as_deref()?.downcast_ref()
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Payload(..)"
        } else {
            "Payload(none)"
        })
    }
}

/// What a backend keeps for one wait, across its attempts: a waiting-writer
/// marker's identity, a queue key. Empty when a wait begins.
#[derive(Default)]
pub struct WaitState(Option<Box<dyn Any + Send + Sync>>);

impl WaitState {
    /// Empty state, as a wait begins with.
    pub const fn new() -> Self {
        Self(None)
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// The value, if this state holds a `T`.
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.0.as_deref()?.downcast_ref()
    }

    /// Keeps `value`, replacing what was kept.
    pub fn set<T: Any + Send + Sync>(&mut self, value: T) {
        self.0 = Some(Box::new(value));
    }

    /// Takes the value out, if this state holds a `T`.
    pub fn take<T: Any>(&mut self) -> Option<T> {
        match self.0.take()?.downcast::<T>() {
            Ok(value) => Some(*value),
            Err(other) => {
                self.0 = Some(other);
                None
            }
        }
    }
}

impl fmt::Debug for WaitState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "WaitState(..)"
        } else {
            "WaitState(empty)"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_give_back_only_their_own_type() {
        let grant = GrantState::new(7u32);
        assert_eq!(grant.get::<u32>(), Some(&7));
        assert_eq!(grant.get::<u64>(), None);
        assert_eq!(GrantState::none().get::<u32>(), None);

        let mut wait = WaitState::new();
        assert!(wait.is_empty());
        wait.set(5u8);
        assert_eq!(wait.take::<u16>(), None);
        assert_eq!(wait.get::<u8>(), Some(&5));
        assert_eq!(wait.take::<u8>(), Some(5));
        assert!(wait.is_empty());
    }
}
