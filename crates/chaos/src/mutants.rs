//! Mutants: Redis opened through a `MutantBackend` with one deliberate
//! defect, so that the campaign's checks are shown able to fail. A worker
//! opens a URL `mutant+<mutation>+<url>` this way; `--backend
//! mutant-<mutation>` runs R1 on one.

use std::sync::Arc;

use distlock::backend::Backend;
use distlock::testing::{MutantBackend, Mutation};

use crate::outcome::Outcome;

const PREFIX: &str = "mutant+";

/// `url`, to be opened through `mutation`.
pub(crate) fn dress(mutation: Mutation, url: &str) -> String {
    format!("{PREFIX}{}+{url}", mutation.name())
}

/// The mutation a dressed URL asks for, and the URL under it; `None` for
/// a plain URL.
///
/// # Errors
/// A dressed URL whose mutation is unknown.
pub(crate) fn undress(url: &str) -> Outcome<Option<(Mutation, &str)>> {
    let Some(rest) = url.strip_prefix(PREFIX) else {
        return Ok(None);
    };
    let (name, inner) = rest
        .split_once('+')
        .ok_or_else(|| format!("{PREFIX}… needs a mutation and a URL: {PREFIX}<mutation>+<url>"))?;
    let mutation = Mutation::from_name(name).ok_or_else(|| {
        let known: Vec<_> = Mutation::ALL.iter().map(|m| m.name()).collect();
        format!("unknown mutation {name}; use one of {}", known.join(", "))
    })?;
    Ok(Some((mutation, inner)))
}

/// `backend`, opened from a dressed URL's inner URL, with its mutation.
pub(crate) fn wrap(mutation: Mutation, backend: Arc<dyn Backend>) -> Arc<dyn Backend> {
    MutantBackend::new(backend, mutation).shared()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dressed_url_undresses_to_its_mutation_and_url() {
        for mutation in Mutation::ALL {
            let dressed = dress(mutation, "redis://127.0.0.1:6379");
            let (found, url) = undress(&dressed).unwrap().unwrap();
            assert_eq!((found, url), (mutation, "redis://127.0.0.1:6379"));
        }
        assert!(undress("redis://127.0.0.1:6379").unwrap().is_none());
        assert!(undress("mutant+nothing+redis://x").is_err());
    }
}
