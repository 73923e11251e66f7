//! Our own contending worker process: distlock's client, taking the
//! claim its process's mix gives each task.

use std::path::Path;
use std::time::Duration;

use distlock::{AcquireOptions, Claim, LockClient, LockKind, LockName, LockOptions};
use tokio::process::Command;

use crate::asking;
use crate::commands::Counts;
use crate::mix::Mix;
use crate::outcome::Outcome;
use crate::target::{Server, Target};
use crate::worker::{
    Layout, Take, Taker, WorkerArgs, count_within, drive, hold_then_release, report_worker,
};
/// The commands that start our contending workers, whose tasks take what
/// `mix` gives each.
pub(crate) fn our_workers(
    exe: &Path,
    target: &Target,
    lock: &LockName,
    layout: Layout,
    mix: Mix,
) -> Vec<Command> {
    let mut workers = layout.commands(exe, "worker", &target.url, lock.as_str());
    for command in &mut workers {
        command.args(mix.worker_args());
    }
    workers
}

/// Our client on one name, taking `claim`, which its process's `mix`
/// chose for the task.
#[derive(Debug, Clone)]
struct OurTaker {
    client: LockClient,
    name: LockName,
    mix: Mix,
    claim: Claim,
}

impl Taker for OurTaker {
    async fn take_once(&self, left: Duration, work: Duration) -> Take {
        let guard = match self
            .client
            .acquire_with(
                &self.name,
                AcquireOptions::new().claim(self.claim).timeout(left),
            )
            .await
        {
            Ok(guard) => guard,
            Err(distlock::Error::Timeout { .. }) => return Take::TimedOut,
            Err(_) => return Take::Failed,
        };
        let token = guard.fencing_token();
        hold_then_release(work, token, async { guard.release().await.is_err() }).await
    }

    fn for_task(&self, task: u32) -> Self {
        Self {
            claim: self.mix.claim(task),
            ..self.clone()
        }
    }

    fn kind(&self) -> LockKind {
        self.claim.kind()
    }
}

/// One worker process of ours: `tasks` tasks sharing one client take the
/// lock within the window (see [`drive`]), each the claim `mix` gives it,
/// then report as JSON lines.
pub(crate) async fn worker(args: &WorkerArgs, mix: Mix) -> Outcome<()> {
    let target = Target::open(&args.backend).await?;
    let taker = OurTaker {
        client: LockClient::new(
            asking::recording(target.backend.clone()),
            LockOptions::default(),
        ),
        name: LockName::new(args.lock.as_str()).map_err(|e| e.to_string())?,
        mix,
        claim: mix.claim(0),
    };
    let counted = count_within(args.window(), move || {
        let target = target.clone();
        async move { in_process_counts(&target).await }
    });
    let log = drive(taker, args).await?;
    let commands = counted.await.map_err(|e| e.to_string())??;
    report_worker(log, commands)
}

/// The commands this process counted itself: MongoDB's command monitoring,
/// an object store's HTTP requests. memcached's are counted by the parent
/// from the server's `stats`.
pub(crate) async fn in_process_counts(target: &Target) -> Outcome<Option<Counts>> {
    match target.server {
        Server::Mongo { .. } | Server::ObjectStore(_) => target.counts().await,
        _ => Ok(None),
    }
}
