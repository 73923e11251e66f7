//! Extensions as history operations: a hook around a holder's backend that
//! records every extension its keeper sends, and what the store answered,
//! on the campaign's one monotonic clock. An extension that succeeds after
//! its lease had ended (by another grant, a release, a release by force)
//! has no place in the lock model, which is how a lock that hides its
//! losses, or extends without the owner check, shows in the history.
//!
//! Backends that keep their grants on a session (etcd) renew the session
//! instead, and make no extension to record.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use distlock::backend::Backend;
use distlock::testing::{Answer, Call, Hook, TestBackend};
use distlock_history::{Call as HistoryCall, Done, Op};

use crate::clock::now_ns;

/// The extensions one process's backend made.
#[derive(Debug)]
pub(crate) struct Extensions {
    /// The process the history puts them under.
    process: u64,
    /// When each extension on its way was sent, by lock name and token.
    sent: Mutex<HashMap<(String, u64), u64>>,
    ops: Mutex<Vec<Op>>,
}

impl Extensions {
    /// `backend`, with every extension through it recorded under `process`.
    pub(crate) fn record(
        backend: Arc<dyn Backend>,
        process: u64,
    ) -> (Arc<dyn Backend>, Arc<Extensions>) {
        let extensions = Arc::new(Extensions {
            process,
            sent: Mutex::default(),
            ops: Mutex::default(),
        });
        let recorded = TestBackend::wrapping(backend)
            .with_hook(extensions.clone())
            .shared();
        (recorded, extensions)
    }

    /// The extensions recorded so far; one still on its way is left out.
    pub(crate) fn ops(&self) -> Vec<Op> {
        self.ops
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[distlock::backend::async_trait]
impl Hook for Extensions {
    async fn before(&self, call: Call<'_>) -> distlock::Result<()> {
        if let Call::Extend(leases) = call {
            let at = now_ns();
            let mut sent = self.sent.lock().unwrap_or_else(PoisonError::into_inner);
            for lease in leases {
                sent.insert((lease.name.to_string(), lease.fencing_token), at);
            }
        }
        Ok(())
    }

    async fn after(&self, answer: Answer<'_>) {
        let Answer::Extend { leases, outcomes } = answer else {
            return;
        };
        let at = now_ns();
        let mut sent = self.sent.lock().unwrap_or_else(PoisonError::into_inner);
        let mut ops = self.ops.lock().unwrap_or_else(PoisonError::into_inner);
        for (lease, outcome) in leases.iter().zip(outcomes.iter()) {
            let name = lease.name.to_string();
            let since = sent
                .remove(&(name.clone(), lease.fencing_token))
                .unwrap_or(0);
            let outcome = match outcome {
                Ok(true) => Done::Ok,
                Ok(false) => Done::Refused,
                Err(_) => Done::Unknown,
            };
            let call = HistoryCall::Extend {
                name,
                token: lease.fencing_token,
                outcome,
            };
            ops.push(match outcome {
                // An error may come after the store extended the lease.
                Done::Unknown => Op::pending(self.process, since, call),
                _ => Op::new(self.process, since, at, call),
            });
        }
    }
}
