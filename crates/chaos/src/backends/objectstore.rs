//! The object-storage backend, one object per lock written under
//! conditions, on each store the tests run: the campaign's own Azurite
//! (Microsoft's Azure Blob emulator) and moto (an S3 emulator, served one
//! request at a time by `scripts/servers/moto_serial.py`).
//!
//! Neither keeps what it acknowledged through a SIGKILL, as real cloud
//! stores do. Azurite keeps its data in a directory but writes its index
//! there only every five seconds, so a restart may bring back an older
//! version of a lock's object; moto keeps everything in memory, so a
//! restart loses every object. Holders learn it at their next extension,
//! as on a server that forgets ([`OnRestart::Forgotten`]). Tokens must
//! still rise across such a loss, which the backend's clock floor on every
//! grant provides.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use distlock::LockName;
use distlock::objectstore::object_store::ObjectStoreExt;
use distlock::objectstore::object_store::path::Path as ObjectPath;
use distlock::objectstore::{ObjectStoreBackend, ObjectStoreConfig};

use super::closed_port;
use crate::answers::{ClockStep, LostAnswer, OnRestart, SecretCase};
use crate::campaign::CampaignBackend;
use crate::campaign::Server;
use crate::outcome::Outcome;
use crate::servers::ServerCommand;

/// The object-storage backend on one store.
#[derive(Debug)]
pub(crate) struct ObjectStore {
    cloud: Cloud,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cloud {
    /// Azure Blob, on Azurite.
    Azure,
    /// S3, on moto.
    S3,
}

pub(crate) const AZURE: ObjectStore = ObjectStore {
    cloud: Cloud::Azure,
};
pub(crate) const S3: ObjectStore = ObjectStore { cloud: Cloud::S3 };

/// Azurite's one account, which `scripts/servers/objectstore.sh` also
/// names, with its key in `AZURE_STORAGE_ACCOUNT_KEY`.
const ACCOUNT: &str = "devstoreaccount1";

/// The container (or bucket) the campaign's locks live in.
const CONTAINER: &str = "chaos";

/// The script that makes a container (object_store has no call for it).
const CONTAINER_SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../scripts/servers/azure_container.py"
);

fn azurite_args(port: u16, data: &Path) -> Vec<OsString> {
    let port = port.to_string();
    let location = data.join("azurite");
    let mut args: Vec<OsString> = ["--blobHost", "127.0.0.1", "--blobPort", &port, "--location"]
        .map(OsString::from)
        .to_vec();
    args.push(location.into());
    // As scripts/servers/objectstore.sh starts it: object_store may ask
    // for a newer API version than this Azurite knows.
    for flag in [
        "--silent",
        "--disableTelemetry",
        "--skipApiVersionCheck",
        "--loose",
    ] {
        args.push(flag.into());
    }
    args
}

/// moto's, through `moto_serial.py`: in memory, with the bucket made
/// before it listens.
fn moto_args(port: u16, _data: &Path) -> Vec<OsString> {
    vec![port.to_string().into(), CONTAINER.into()]
}

impl ObjectStore {
    /// The URL of the store at `address`, its locks under `prefix`.
    fn url_of(&self, address: &str, prefix: &str) -> String {
        match self.cloud {
            Cloud::Azure => {
                format!("az://{CONTAINER}/{prefix}?endpoint=http://{address}/{ACCOUNT}")
            }
            Cloud::S3 => {
                format!("s3://{CONTAINER}/{prefix}?endpoint=http://{address}&region=us-east-1")
            }
        }
    }

    fn scheme(&self) -> &'static str {
        match self.cloud {
            Cloud::Azure => "az",
            Cloud::S3 => "s3",
        }
    }
}

#[async_trait::async_trait]
impl CampaignBackend for ObjectStore {
    fn name(&self) -> &'static str {
        match self.cloud {
            Cloud::Azure => "object storage (Azurite)",
            Cloud::S3 => "object storage (S3, moto)",
        }
    }

    fn option_name(&self) -> &'static str {
        match self.cloud {
            Cloud::Azure => "objectstore-azure",
            Cloud::S3 => "objectstore-s3",
        }
    }

    fn server(&self) -> Option<ServerCommand> {
        Some(match self.cloud {
            Cloud::Azure => ServerCommand::plain("AZURITE_BIN", azurite_args),
            Cloud::S3 => ServerCommand::plain("MOTO_SERIAL_BIN", moto_args),
        })
    }

    fn url(&self, _scratch: &Path, address: &str, _companions: &[String]) -> String {
        self.url_of(address, "locks")
    }

    /// Makes Azurite's container, on the first start and after a restart
    /// that lost it (its creation may be among the writes a SIGKILL takes
    /// back); an existing container is fine. moto makes its bucket itself.
    fn ready(&self, server: &Server) -> Outcome<()> {
        if self.cloud == Cloud::S3 {
            return Ok(());
        }
        let key = std::env::var("AZURE_STORAGE_ACCOUNT_KEY").map_err(|_| {
            "AZURE_STORAGE_ACCOUNT_KEY is not set: run through scripts/test or scripts/chaos, \
             which start Azurite and name its account"
        })?;
        let status = std::process::Command::new("python3")
            .arg(CONTAINER_SCRIPT)
            .arg(format!("http://{}", server.address()))
            .arg(ACCOUNT)
            .arg(key)
            .arg(CONTAINER)
            .stdin(std::process::Stdio::null())
            .status()?;
        if !status.success() {
            return Err(format!("making the container {CONTAINER} failed ({status})").into());
        }
        Ok(())
    }

    fn key_space_url(&self, server: &Server, space: &str) -> Outcome<String> {
        Ok(self.url_of(&server.address(), space))
    }

    fn on_restart(&self) -> OnRestart {
        OnRestart::Forgotten
    }

    fn has_shared(&self) -> bool {
        false
    }

    fn semaphores(&self) -> Result<(), &'static str> {
        Err("the object-storage backend grants exclusive locks only (docs/objectstore.md)")
    }

    /// A waiter sees the dead holder's last version at its next poll after
    /// that write, and takes over once it has seen it unchanged for the
    /// whole lease.
    fn regrant_bound(&self, lease: Duration) -> Duration {
        lease + distlock::LockOptions::DEFAULT_BACKOFF_MAX
    }

    /// Every take reads before it writes, so the proxy's shot is kept for
    /// the first write: the read passes, and the write's answer is lost.
    fn lost_answers(&self) -> &'static [LostAnswer] {
        &[LostAnswer::ResetAfterWrite]
    }

    async fn delete_record(&self, server: &Server, name: &LockName) -> Outcome<()> {
        let url = server.url();
        let backend = ObjectStoreBackend::open(&url).await?;
        let store = ObjectStoreConfig::parse(&url)?.build_client()?;
        store
            .delete(&ObjectPath::from(backend.lock_key(name)))
            .await?;
        Ok(())
    }

    fn secret_cases(&self, server: &Server, canary: &str) -> Outcome<Vec<SecretCase>> {
        let scheme = self.scheme();
        let url = self.url_of(&server.address(), "locks");
        let with_user = url.replacen(
            &format!("{scheme}://"),
            &format!("{scheme}://alice:{canary}@"),
            1,
        );
        let in_endpoint = url.replacen("http://", &format!("http://alice:{canary}@"), 1);
        let closed = self
            .url_of(&format!("127.0.0.1:{}", closed_port()?), "locks")
            .replacen(
                &format!("{scheme}://"),
                &format!("{scheme}://alice:{canary}@"),
                1,
            );
        Ok(vec![
            SecretCase::new("user and password in the URL", with_user),
            SecretCase::new("a password in the endpoint", in_endpoint),
            SecretCase::new("a password, and an endpoint at a closed port", closed),
        ])
    }

    fn parse_url(&self, url: &str) -> Option<(&'static str, Result<String, distlock::Error>)> {
        Some((
            "`ObjectStoreConfig::parse`",
            ObjectStoreConfig::parse(url).map(|config| format!("{config:?}")),
        ))
    }

    fn server_clock(&self) -> Result<ClockStep, &'static str> {
        Err(
            "the object-storage backend reads no clock of the store's: a waiter counts a \
             holder's lease on its own monotonic clock, from the first read that returned the \
             holder's version",
        )
    }

    fn expiry_edges(&self) -> Result<(), &'static str> {
        Err("memcached only; an object never expires or is evicted by the store")
    }
}
