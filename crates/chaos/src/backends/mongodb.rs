//! MongoDB, on the campaign's own SecantusDB.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use distlock::LockName;

use super::closed_port;
use crate::answers::{ClockStep, LostAnswer, SecretCase};
use crate::campaign::CampaignBackend;
use crate::campaign::Server;
use crate::outcome::Outcome;
use crate::servers::ServerCommand;

#[derive(Debug)]
pub(crate) struct MongoDb;

pub(crate) const MONGODB: MongoDb = MongoDb;

/// The database the campaign's locks live in.
const DATABASE: &str = "distlock_chaos";

/// `--sync-on-commit`: without it, SecantusDB acknowledges a majority write
/// before its log reaches the file, and a SIGKILL loses it (7 to 93 of
/// about 2,400 acknowledged `$inc`s per kill, in five trials), where mongod
/// journals a majority write before acknowledging it. The campaign kills
/// the server, so it runs it as mongod would behave.
fn args(port: u16, data: &Path) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["--port".into(), port.to_string().into()];
    args.push("--storage-path".into());
    args.push(data.join("mongodb").into());
    args.extend(
        [
            "--enable-test-commands",
            "--cache-size",
            "256M",
            "--sync-on-commit",
        ]
        .map(OsString::from),
    );
    args
}

#[async_trait::async_trait]
impl CampaignBackend for MongoDb {
    fn name(&self) -> &'static str {
        "MongoDB"
    }

    fn server(&self) -> Option<ServerCommand> {
        Some(ServerCommand::plain("SECANTUSD_BIN", args))
    }

    /// A proxy in between hides the replica set's member list from the
    /// driver, so it must not go looking for the members.
    fn url(&self, _scratch: &Path, address: &str, _companions: &[String]) -> String {
        format!("mongodb://{address}/{DATABASE}?directConnection=true")
    }

    fn key_space_url(&self, server: &Server, space: &str) -> Outcome<String> {
        Ok(format!("{}&collection={space}", server.url()))
    }

    /// Expiry is judged on the server's clock to the millisecond.
    fn regrant_bound(&self, lease: Duration) -> Duration {
        lease
    }

    fn lost_answers(&self) -> &'static [LostAnswer] {
        &[LostAnswer::FailPoint, LostAnswer::ResetAfterRequest]
    }

    /// Without release wake-ups: a change stream's `getMore`s are requests
    /// of their own, which the proxy's shot might hit instead of the
    /// acquisition.
    async fn open_quiet(
        &self,
        url: &str,
        _lease: Duration,
    ) -> Outcome<Arc<dyn distlock::backend::Backend>> {
        Ok(Arc::new(
            distlock::mongodb::MongoBackend::connect(
                distlock::mongodb::MongoConfig::parse(url)?.release_wakeups(false),
            )
            .await?,
        ))
    }

    async fn delete_record(&self, server: &Server, name: &LockName) -> Outcome<()> {
        // The driver's URL: without distlock's own options (a fair form's).
        let (driver_url, _) = distlock::mongodb::split_collection_option(&server.url())?;
        let client = mongodb::Client::with_uri_str(driver_url).await?;
        client
            .database(DATABASE)
            .collection::<mongodb::bson::Document>(distlock::mongodb::DEFAULT_COLLECTION)
            .delete_one(mongodb::bson::doc! { "_id": name.as_str() })
            .await?;
        Ok(())
    }

    fn secret_cases(&self, server: &Server, canary: &str) -> Outcome<Vec<SecretCase>> {
        let fast = "serverSelectionTimeoutMS=1500&connectTimeoutMS=1500";
        Ok(vec![
            SecretCase::new(
                "bad host (a closed port)",
                format!(
                    "mongodb://alice:{canary}@127.0.0.1:{}/{DATABASE}?{fast}",
                    closed_port()?
                ),
            ),
            SecretCase::new(
                "bad credentials (no such user)",
                format!(
                    "mongodb://alice:{canary}@{}/{DATABASE}?directConnection=true&{fast}",
                    server.address()
                ),
            ),
            SecretCase::new(
                "a URL the driver refuses",
                format!("mongodb://alice:{canary}@127.0.0.1:notaport/{DATABASE}"),
            ),
        ])
    }

    fn parse_url(&self, url: &str) -> Option<(&'static str, Result<String, distlock::Error>)> {
        Some((
            "`MongoConfig::parse`",
            distlock::mongodb::MongoConfig::parse(url).map(|config| format!("{config:?}")),
        ))
    }

    /// SecantusDB reads the time through libc, which libfaketime moves,
    /// and judges every lease by it (`$$NOW`).
    fn server_clock(&self) -> Result<ClockStep, &'static str> {
        Ok(ClockStep {
            clock_moves: true,
            leases_follow: true,
            why: "SecantusDB judges leases by its wall clock (`$$NOW`)",
        })
    }

    fn expiry_edges(&self) -> Result<(), &'static str> {
        Err(
            "memcached only; MongoDB judges leases in milliseconds on the server's clock \
             (`$$NOW`), never evicts a lock document, and keeps its locks across restarts \
             (R6)",
        )
    }
}
