//! What a backend says of its server: version, clock and features.

/// What a store's server says of itself, for checking a deployment
/// (`distlock check`); see [`Backend::server_info`](crate::backend::Backend::server_info).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerInfo {
    /// The server's product and version, as it reports them.
    pub version: Option<String>,
    /// The time on the server's clock when it answered, where the server
    /// has a clock distlock reads.
    pub clock: Option<std::time::SystemTime>,
    /// The features of the deployment this backend relies on, as it found
    /// them: change streams, an eviction policy, a private directory, …
    pub features: Vec<Feature>,
}

impl ServerInfo {
    /// What a server said: its version and its clock, where known.
    pub fn new(version: Option<String>, clock: Option<std::time::SystemTime>) -> Self {
        Self {
            version,
            clock,
            features: Vec::new(),
        }
    }

    /// Adds what was found of one feature.
    #[must_use]
    pub fn with_feature(mut self, feature: Feature) -> Self {
        self.features.push(feature);
        self
    }
}

/// One feature of a deployment that a backend relies on, and what the
/// backend found of it; see [`ServerInfo::features`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Feature {
    /// A short name, such as `change streams` or `eviction`.
    pub name: &'static str,
    /// Whether it is there.
    pub state: FeatureState,
    /// What was found, and when it falls short, its cost and the remedy.
    pub detail: String,
}

/// Whether a feature a backend relies on is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FeatureState {
    /// There, and working.
    Present,
    /// Missing or limited: locks stay safe, at a cost the detail states
    /// (waiters that poll, a table that grows, less availability).
    Degraded,
    /// Missing, and without it locks are not safe or do not work.
    Missing,
}

impl Feature {
    /// A feature that is there.
    pub fn present(name: &'static str, detail: impl Into<String>) -> Self {
        Self::new(name, FeatureState::Present, detail)
    }

    /// A feature that is missing or limited, at a cost `detail` states.
    pub fn degraded(name: &'static str, detail: impl Into<String>) -> Self {
        Self::new(name, FeatureState::Degraded, detail)
    }

    /// A feature without which locks are not safe or do not work.
    pub fn missing(name: &'static str, detail: impl Into<String>) -> Self {
        Self::new(name, FeatureState::Missing, detail)
    }

    fn new(name: &'static str, state: FeatureState, detail: impl Into<String>) -> Self {
        Self {
            name,
            state,
            detail: detail.into(),
        }
    }
}
