//! The file backend: flocks in a directory, no server.

use std::path::Path;
use std::time::Duration;

use distlock::LockName;

use crate::answers::{ClockStep, SecretCase};
use crate::campaign::CampaignBackend;
use crate::campaign::Server;
use crate::outcome::Outcome;
use crate::scratch::{run_dir, unique};
use crate::servers::ServerCommand;

#[derive(Debug)]
pub(crate) struct File;

pub(crate) const FILE: File = File;

#[async_trait::async_trait]
impl CampaignBackend for File {
    fn name(&self) -> &'static str {
        "file"
    }

    fn server(&self) -> Option<ServerCommand> {
        None
    }

    fn without_server(&self) -> &'static str {
        "the file backend's locks live in this machine's kernel"
    }

    fn url(&self, scratch: &Path, _address: &str, _companions: &[String]) -> String {
        format!("file://{}", scratch.join("locks").display())
    }

    fn key_space_url(&self, server: &Server, space: &str) -> Outcome<String> {
        Ok(format!("file://{}", run_dir(server, space)?.display()))
    }

    fn process_bound(&self) -> bool {
        true
    }

    /// The kernel frees the lock with the process; waiters poll.
    fn regrant_bound(&self, _lease: Duration) -> Duration {
        Duration::ZERO
    }

    fn lost_answers(&self) -> &'static [crate::answers::LostAnswer] {
        &[]
    }

    async fn delete_record(&self, server: &Server, name: &LockName) -> Outcome<()> {
        distlock::open(&server.url())
            .await?
            // A local file: the limit is never reached.
            .force_release(name, Duration::from_secs(10))
            .await?;
        Ok(())
    }

    fn secret_cases(&self, server: &Server, canary: &str) -> Outcome<Vec<SecretCase>> {
        let dir = run_dir(server, &unique("r12"))?;
        Ok(vec![
            SecretCase::new(
                "user information in the URL",
                format!("file://u:{canary}@localhost{}", dir.display()),
            )
            .with_note("the file backend has no credentials; "),
            SecretCase::new(
                "user information, no host",
                format!("file://u:{canary}@{}", dir.display()),
            )
            .with_note("the file backend has no credentials; "),
        ])
    }

    fn server_clock(&self) -> Result<ClockStep, &'static str> {
        Err(
            "the file backend has no server, and no clock judges its locks (a flock lasts as long as its process)",
        )
    }

    fn expiry_edges(&self) -> Result<(), &'static str> {
        Err(
            "memcached only; file locks are process-bound flocks: no expiry time, no \
             eviction, no server to restart",
        )
    }
}
