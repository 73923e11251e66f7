//! What the servers keep on disk: the durability settings scripts/bench
//! started each kind of server with, for the report, and the servers it
//! started beside them with other settings, for measured-only rows of what
//! durability costs.

use crate::outcome::Outcome;

/// One kind of server's durability, as the script that started it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Durability {
    /// A kind of backend as the report names it (`PostgreSQL`, `Redis`,
    /// …), or another word for a line that is not a backend's (`disk`).
    pub(crate) kind: String,
    /// The settings, read back from the servers where they can say.
    pub(crate) settings: String,
    /// What an acquisition or a release waits for on disk; empty for a
    /// line that is not a backend's.
    pub(crate) waits: String,
}

/// A server beside a backend's, with other durability settings, on which
/// the uncontended scenario also runs the lock client (a measured-only row).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MeasuredServer {
    /// The URL of the backend it stands beside, as given with `--backend`.
    pub(crate) beside: String,
    /// Its settings, as the row names them.
    pub(crate) settings: String,
    /// Its URL, in the form the backend's is.
    pub(crate) url: String,
}

/// The `--durability KIND SETTINGS WAITS` triples given.
pub(crate) fn durabilities(values: &[String]) -> Outcome<Vec<Durability>> {
    Ok(triples(values, "--durability")?
        .map(|[kind, settings, waits]| Durability {
            kind,
            settings,
            waits,
        })
        .collect())
}

/// The `--measured-server BACKEND SETTINGS URL` triples given.
pub(crate) fn measured_servers(values: &[String]) -> Outcome<Vec<MeasuredServer>> {
    Ok(triples(values, "--measured-server")?
        .map(|[beside, settings, url]| MeasuredServer {
            beside,
            settings,
            url,
        })
        .collect())
}

/// `values` three at a time, as an option taking three values gives them.
fn triples(values: &[String], option: &str) -> Outcome<impl Iterator<Item = [String; 3]>> {
    if !values.len().is_multiple_of(3) {
        return Err(format!("{option} takes three values each time"));
    }
    Ok(values
        .chunks_exact(3)
        .map(|three| [three[0].clone(), three[1].clone(), three[2].clone()])
        .collect::<Vec<_>>()
        .into_iter())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(values: &[&str]) -> Vec<String> {
        values.iter().map(|v| (*v).to_owned()).collect()
    }

    #[test]
    fn triples_become_lines_and_servers() {
        let lines = durabilities(&strings(&[
            "Redis",
            "appendonly yes",
            "nothing",
            "disk",
            "ext4",
            "",
        ]))
        .unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].kind, "Redis");
        assert_eq!(lines[1].waits, "");
        let servers = measured_servers(&strings(&["redis://a", "always", "redis://b"])).unwrap();
        assert_eq!(servers[0].beside, "redis://a");
        assert_eq!(servers[0].url, "redis://b");
        assert!(measured_servers(&strings(&["redis://a", "always"])).is_err());
    }
}
