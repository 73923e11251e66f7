//! A backend in another form: the same server and the same facts, with
//! clients that open it otherwise, under names of its own, for some of
//! the scenarios.
//!
//! - Its fair form (`fair=true`, see `Capabilities::fair`): clients wait
//!   in the store's queue. It runs the scenarios whose promises fair mode
//!   keeps unchanged while it changes how a lock passes on: R1 (churn), R4
//!   (a killed holder), R5 (a lost answer) and R15 (a killed holder
//!   resumed, whose place at the head of the line must stay).
//! - Its mutants: clients open it through a `MutantBackend` with one
//!   deliberate defect (see `crate::mutants`), so that R1 must fail. They
//!   are not in the campaign's list, only in `--backend`: the campaign's
//!   checks are shown able to fail on them.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use distlock::LockName;

use crate::answers::{ClockStep, Detour, LostAnswer, OnRestart, SecretCase};
use crate::campaign::Server;
use crate::campaign::{CampaignBackend, Kind};
use crate::outcome::Outcome;
use crate::servers::ServerCommand;

/// `of` in another form, under its own names.
#[derive(Debug)]
pub(crate) struct Form {
    of: Kind,
    name: &'static str,
    option_name: &'static str,
    scenarios: &'static [&'static str],
    /// Its clients' URL, from `of`'s.
    dress: fn(String) -> String,
}

impl Form {
    /// `of` in fair mode.
    pub(crate) const fn fair(of: Kind, name: &'static str, option_name: &'static str) -> Self {
        Self {
            of,
            name,
            option_name,
            scenarios: &["R1", "R4", "R5", "R15"],
            dress: fair,
        }
    }

    /// `of` opened through a mutant: `name` is both its names, and
    /// `dress` prefixes its URL for `crate::mutants::open`.
    pub(crate) const fn mutant(of: Kind, name: &'static str, dress: fn(String) -> String) -> Self {
        Self {
            of,
            name,
            option_name: name,
            scenarios: &["R1", "R14"],
            dress,
        }
    }
}

/// `url` with `fair=true` added to its query.
fn fair(url: String) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}fair=true")
}

#[async_trait::async_trait]
impl CampaignBackend for Form {
    fn name(&self) -> &'static str {
        self.name
    }

    fn option_name(&self) -> &'static str {
        self.option_name
    }

    fn scenarios(&self) -> Option<&'static [&'static str]> {
        Some(self.scenarios)
    }

    fn server(&self) -> Option<ServerCommand> {
        self.of.server()
    }

    fn has_server(&self) -> bool {
        self.of.has_server()
    }

    fn without_server(&self) -> &'static str {
        self.of.without_server()
    }

    fn url(&self, scratch: &Path, address: &str, companions: &[String]) -> String {
        (self.dress)(self.of.url(scratch, address, companions))
    }

    fn companions(&self) -> usize {
        self.of.companions()
    }

    fn ready(&self, server: &Server) -> Outcome<()> {
        self.of.ready(server)
    }

    fn restart_downtime(&self) -> Duration {
        self.of.restart_downtime()
    }

    fn faulted_servers(&self) -> usize {
        self.of.faulted_servers()
    }

    fn route_through(&self, server: &Server, proxies: &[String]) -> Outcome<Option<Detour>> {
        self.of.route_through(server, proxies)
    }

    fn one_client_faulted(&self) -> Result<(), &'static str> {
        self.of.one_client_faulted()
    }

    fn key_space_url(&self, server: &Server, space: &str) -> Outcome<String> {
        Ok((self.dress)(self.of.key_space_url(server, space)?))
    }

    fn process_bound(&self) -> bool {
        self.of.process_bound()
    }

    fn ends_with_holder(&self) -> bool {
        self.of.ends_with_holder()
    }

    fn min_lease(&self) -> Duration {
        self.of.min_lease()
    }

    fn on_restart(&self) -> OnRestart {
        self.of.on_restart()
    }

    fn has_shared(&self) -> bool {
        self.of.has_shared()
    }

    fn semaphores(&self) -> Result<(), &'static str> {
        self.of.semaphores()
    }

    fn max_held(&self) -> Option<usize> {
        self.of.max_held()
    }

    fn regrant_bound(&self, lease: Duration) -> Duration {
        self.of.regrant_bound(lease)
    }

    fn lost_answers(&self) -> &'static [LostAnswer] {
        self.of.lost_answers()
    }

    async fn open_quiet(
        &self,
        url: &str,
        lease: Duration,
    ) -> Outcome<Arc<dyn distlock::backend::Backend>> {
        self.of.open_quiet(url, lease).await
    }

    async fn prepare_name(&self, server: &Server, name: &LockName) -> Outcome<()> {
        self.of.prepare_name(server, name).await
    }

    async fn delete_record(&self, server: &Server, name: &LockName) -> Outcome<()> {
        self.of.delete_record(server, name).await
    }

    fn secret_cases(&self, server: &Server, canary: &str) -> Outcome<Vec<SecretCase>> {
        self.of.secret_cases(server, canary)
    }

    fn parse_url(&self, url: &str) -> Option<(&'static str, Result<String, distlock::Error>)> {
        self.of.parse_url(url)
    }

    fn server_clock(&self) -> Result<ClockStep, &'static str> {
        self.of.server_clock()
    }

    fn expiry_edges(&self) -> Result<(), &'static str> {
        self.of.expiry_edges()
    }
}
