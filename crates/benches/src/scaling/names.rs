//! The names curve: distinct names, each taken once and given back at
//! once (per-entity locks), through one client; cycles per second, and
//! what the store keeps afterwards.

use std::time::{Duration, Instant};

use distlock::{LockClient, LockOptions};

use super::store::{self, Stored};
use super::taking::cycle_all;
use crate::names::bench_name;
use crate::outcome::Outcome;
use crate::target::Target;

/// One point of the names curve.
#[derive(Debug, Clone)]
pub(crate) struct NamesPoint {
    pub(crate) names: usize,
    /// From the first acquisition to the last release.
    pub(crate) elapsed: Duration,
    /// What the store kept after every name was given back, less what it
    /// kept before.
    pub(crate) kept: Stored,
}

impl NamesPoint {
    pub(crate) fn cycles_per_second(&self) -> f64 {
        self.names as f64 / self.elapsed.as_secs_f64()
    }
}

/// Takes `names` fresh names once each on `target` and gives each back at
/// once, then reads what the store keeps. MongoDB's documents are deleted
/// afterwards (see [`Target::forget`]); the other stores keep theirs.
pub(crate) async fn names(target: &Target, names: usize) -> Outcome<NamesPoint> {
    let client = LockClient::new(target.backend.clone(), LockOptions::default());
    let prefix = bench_name("names");
    let before = store::read(target).await?;
    let started = Instant::now();
    cycle_all(&client, &prefix, names).await?;
    let elapsed = started.elapsed();
    let after = store::read(target).await?;
    target.forget(prefix.as_str()).await;
    Ok(NamesPoint {
        names,
        elapsed,
        kept: after.since(before),
    })
}
