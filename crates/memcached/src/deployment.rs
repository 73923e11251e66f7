//! What `distlock check` says of a memcached deployment: the protocol the
//! backend speaks, and whether the servers may evict a held lock.

use distlock_core::backend::Feature;

/// The meta protocol (memcached 1.6 or later), which opening the backend
/// already required of every server it reached.
pub(crate) fn meta_protocol(servers: usize) -> Feature {
    let which = if servers == 1 {
        "the server answers".to_owned()
    } else {
        format!("all {servers} servers answer")
    };
    Feature::present(
        "meta protocol",
        format!("{which} the meta protocol (memcached 1.6 or later)"),
    )
}

/// Whether the servers evict items under memory pressure, from each
/// server's `stats settings` (by address). memcached does by default, and
/// an evicted lock can be granted again before its holder's next extension
/// notices; `-M` makes a full server refuse new items instead.
pub(crate) fn eviction(settings: &[(String, Vec<(String, String)>)]) -> Feature {
    let evicting: Vec<&str> = settings
        .iter()
        .filter(|(_, pairs)| {
            // Unknown is taken as the default, which evicts.
            !pairs
                .iter()
                .any(|(name, value)| name == "evictions" && value == "off")
        })
        .map(|(address, _)| address.as_str())
        .collect();
    if evicting.is_empty() {
        Feature::present(
            "eviction",
            "no server evicts items (-M): a full server refuses new locks instead of \
             dropping held ones",
        )
    } else {
        Feature::degraded(
            "eviction",
            format!(
                "{} evict{} items when memory runs out (memcached's default): a held lock can \
                 be evicted and granted to another before its holder's next extension notices; \
                 start memcached with -M, or use it for efficiency locks only",
                evicting.join(", "),
                if evicting.len() == 1 { "s" } else { "" }
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use distlock_core::backend::FeatureState;

    use super::*;

    fn server(address: &str, evictions: &str) -> (String, Vec<(String, String)>) {
        (
            address.to_owned(),
            vec![
                ("maxbytes".to_owned(), "67108864".to_owned()),
                ("evictions".to_owned(), evictions.to_owned()),
            ],
        )
    }

    #[test]
    fn servers_started_with_m_evict_nothing() {
        let feature = eviction(&[server("a:1", "off"), server("b:2", "off")]);
        assert_eq!(feature.state, FeatureState::Present);
    }

    #[test]
    fn each_evicting_server_is_named() {
        let feature = eviction(&[
            server("a:1", "on"),
            server("b:2", "off"),
            server("c:3", "on"),
        ]);
        assert_eq!(feature.state, FeatureState::Degraded);
        assert!(
            feature.detail.starts_with("a:1, c:3 evict items"),
            "{}",
            feature.detail
        );
    }

    #[test]
    fn a_server_that_does_not_say_is_taken_to_evict() {
        let feature = eviction(&[("a:1".to_owned(), Vec::new())]);
        assert_eq!(feature.state, FeatureState::Degraded);
        assert!(
            feature.detail.starts_with("a:1 evicts items"),
            "{}",
            feature.detail
        );
    }
}
