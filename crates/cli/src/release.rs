//! `distlock release --force`: take a lock away from whoever holds it.

use distlock::{LockClient, LockName, LockOptions};

use crate::cli::ReleaseArgs;
use crate::exit::Failure;
use crate::open;
use crate::text;

/// Runs `distlock release`; returns the exit code.
pub(crate) async fn release(args: ReleaseArgs) -> Result<u8, Failure> {
    if !args.force {
        return Err(Failure::usage(
            "`distlock release` takes the lock from whoever holds it; add --force to confirm",
        ));
    }
    let name = LockName::new(&args.name)?;
    let url = open::url_or_default(args.backend.backend);
    let backend = open::open_backend(&url).await?;
    let client = LockClient::new(backend, LockOptions::default());
    if client.force_release(&name).await? {
        text::print(&format!("released lock {name} (it was held)\n"))?;
    } else {
        text::print(&format!("lock {name} was not held\n"))?;
    }
    Ok(0)
}
