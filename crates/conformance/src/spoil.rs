//! A hook that spoils one campaign's grant on its way to the caller, so
//! that a case can make a grant its holder never receives on a real
//! backend.

use std::sync::{Mutex, PoisonError};

use distlock_core::Error;
use distlock_core::backend::Attempt;
use distlock_core::testing::{Answer, Hook};
use tokio::sync::Notify;

/// What happens to the next grant of a campaign that stands with a given
/// value.
#[derive(Debug)]
pub(crate) enum Spoil {
    /// The campaign's cancellation completes as the grant arrives.
    Cancel(std::sync::Arc<Notify>),
    /// The grant becomes a transient error, as if its answer were lost.
    LoseAnswer,
}

/// The hook; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct SpoilGrant {
    armed: Mutex<Option<(String, Spoil)>>,
    /// The tokens of the grants it spoiled.
    spoiled: Mutex<Vec<u64>>,
}

impl SpoilGrant {
    /// Spoils the next grant to a campaign for `value`.
    pub(crate) fn arm(&self, value: &str, spoil: Spoil) {
        *self.armed.lock().unwrap_or_else(PoisonError::into_inner) = Some((value.into(), spoil));
    }

    /// The tokens of the grants spoiled so far.
    pub(crate) fn spoiled(&self) -> Vec<u64> {
        self.spoiled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn take_for(&self, label: Option<&str>) -> Option<Spoil> {
        let mut armed = self.armed.lock().unwrap_or_else(PoisonError::into_inner);
        match &*armed {
            Some((value, _)) if Some(value.as_str()) == label => {
                armed.take().map(|(_, spoil)| spoil)
            }
            _ => None,
        }
    }
}

#[distlock_core::backend::async_trait]
impl Hook for SpoilGrant {
    async fn after(&self, answer: Answer<'_>) {
        let Answer::Acquire { request, outcome } = answer else {
            return;
        };
        let Ok(Attempt::Acquired { fencing_token, .. }) = outcome else {
            return;
        };
        if !request.records_term {
            return;
        }
        let token = *fencing_token;
        let Some(spoil) = self.take_for(request.holder.label.as_deref()) else {
            return;
        };
        self.spoiled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(token);
        match spoil {
            Spoil::Cancel(cancel) => cancel.notify_one(),
            Spoil::LoseAnswer => {
                *outcome = Err(Error::Backend {
                    backend: "conformance",
                    message: "the grant's answer was lost on purpose".into(),
                    source: None,
                });
            }
        }
    }
}
