//! A hook that spoils one campaign's grant on its way to the caller, so
//! that a test can make a grant its holder never receives.

use std::sync::{Arc, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;

use super::hook::{Answer, Hook};
use crate::backend::Attempt;
use crate::error::Error;
use crate::sync::Mutex;

/// What [`SpoilGrant`] does to the next grant of a campaign that stands
/// with a given value.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Spoil {
    /// Completes the campaign's cancellation as the grant arrives.
    Cancel(Arc<Notify>),
    /// Turns the grant into a transient [`Error::Backend`], as if its
    /// answer were lost.
    LoseAnswer,
    /// Holds the grant's answer back this long.
    Delay(Duration),
}

/// A [`Hook`] that spoils the grant of one campaign, chosen by the value
/// it stands with (the holder's label), once per [`arm`](Self::arm): a
/// test of what an election records for a grant its holder never saw.
#[derive(Debug, Default)]
pub struct SpoilGrant {
    armed: Mutex<Option<(String, Spoil)>>,
    /// The tokens of the grants it spoiled.
    spoiled: Mutex<Vec<u64>>,
}

impl SpoilGrant {
    /// Spoils the next grant to a campaign for `value` as `spoil` says.
    pub fn arm(&self, value: &str, spoil: Spoil) {
        *self.armed.lock().unwrap_or_else(PoisonError::into_inner) = Some((value.into(), spoil));
    }

    /// The fencing tokens of the grants spoiled so far, in order.
    pub fn spoiled(&self) -> Vec<u64> {
        self.spoiled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The spoiling armed for a campaign for `value`, taken.
    fn take_for(&self, value: Option<&str>) -> Option<Spoil> {
        let mut armed = self.armed.lock().unwrap_or_else(PoisonError::into_inner);
        match &*armed {
            Some((armed_for, _)) if Some(armed_for.as_str()) == value => {
                armed.take().map(|(_, spoil)| spoil)
            }
            _ => None,
        }
    }
}

#[async_trait]
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
                    backend: "test",
                    message: "the grant's answer was lost on purpose".into(),
                    source: None,
                });
            }
            Spoil::Delay(delay) => tokio::time::sleep(delay).await,
        }
    }
}
