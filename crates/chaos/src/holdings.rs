//! The grants of a run, as their holders recorded them: what the judge and
//! the history both start from.

use std::collections::HashMap;

use crate::worker::{ClaimSpec, Event};

/// One grant, as its holder recorded it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Holding {
    /// The holder's process.
    pub(crate) pid: u32,
    pub(crate) claim: ClaimSpec,
    pub(crate) token: u64,
    /// When its holder asked for it, if recorded.
    pub(crate) asked_ns: Option<u64>,
    pub(crate) start_ns: u64,
    /// When it stopped being valid; `None` if its process never said (it
    /// was killed, or is still paused).
    pub(crate) end_ns: Option<u64>,
    /// When `lost()` fired, if it did.
    pub(crate) lost_ns: Option<u64>,
    pub(crate) write_ok: Option<bool>,
}

/// The holdings in `events`, with what was recorded of their end.
pub(crate) fn holdings(events: &[Event]) -> Vec<Holding> {
    let mut ends = HashMap::new();
    for event in events {
        if let Event::Ended {
            pid,
            task,
            token,
            at_ns,
            lost_ns,
            write_ok,
            valid_until_ns,
            ..
        } = event
        {
            let end = [*lost_ns, *valid_until_ns]
                .into_iter()
                .flatten()
                .fold(*at_ns, u64::min);
            ends.insert((*pid, *task, *token), (end, *lost_ns, *write_ok));
        }
    }
    // Each task's asks and grants come in order in its process's records.
    let mut asked = HashMap::new();
    events
        .iter()
        .filter_map(|event| match event {
            Event::Asked { pid, task, at_ns } => {
                asked.insert((*pid, *task), *at_ns);
                None
            }
            Event::Acquired {
                pid,
                task,
                claim,
                token,
                at_ns,
                ..
            } => {
                let end = ends.get(&(*pid, *task, *token));
                Some(Holding {
                    pid: *pid,
                    claim: *claim,
                    token: *token,
                    asked_ns: asked.remove(&(*pid, *task)),
                    start_ns: *at_ns,
                    end_ns: end.map(|(end, ..)| *end),
                    lost_ns: end.and_then(|(_, lost, _)| *lost),
                    write_ok: end.and_then(|(.., write)| *write),
                })
            }
            _ => None,
        })
        .collect()
}
