//! The lock kinds a backend grants, and the row of a scenario that does
//! not apply to it.

use crate::campaign::Server;
use crate::report::Row;
use crate::worker::ClaimSpec;

/// The label of the semaphore [`kinds`] runs.
pub(crate) const SEMAPHORE_OF_3: &str = "semaphore of 3";

/// The lock kinds `server`'s backend grants, each as a list of the claims
/// its processes take: exclusive; readers with one writing process; a
/// semaphore of 3 ([`without_semaphores`] says why one is missing).
pub(crate) fn kinds(server: &Server) -> Vec<(String, Vec<ClaimSpec>)> {
    let mut kinds = vec![("exclusive".to_owned(), vec![ClaimSpec::Exclusive])];
    if server.kind.has_shared() {
        kinds.push((
            "reader-writer".to_owned(),
            vec![ClaimSpec::Exclusive, ClaimSpec::Shared],
        ));
    }
    if server.kind.semaphores().is_ok() {
        kinds.push((
            SEMAPHORE_OF_3.to_owned(),
            vec![ClaimSpec::Permit { limit: 3 }],
        ));
    }
    kinds
}

/// The row of scenario `id`'s semaphore `label` on a backend that grants
/// none, saying why; `None` on one that does.
pub(crate) fn without_semaphores(id: &'static str, server: &Server, label: &str) -> Option<Row> {
    let why = server.kind.semaphores().err()?;
    Some(not_applicable(id, server, label, why))
}

/// The row of scenario `id`, for lock kind `kind`, on a backend it does
/// not apply to, and why.
pub(crate) fn not_applicable(id: &'static str, server: &Server, kind: &str, why: &str) -> Row {
    Row {
        scenario: id,
        backend: server.kind.name(),
        kind: kind.into(),
        verdict: None,
        detail: format!("does not apply: {why}"),
        passed: true,
        overlaps_allowed: None,
        minimum: None,
        applies: false,
    }
}
