//! The parent's side of the instances: starting them, asking each who
//! leads, killing one, and stopping the rest.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

use crate::BoxError;
use crate::instance::LISTENING;
use crate::wire::LeaderAnswer;

/// How long an instance may take to connect and start serving.
const START_WITHIN: Duration = Duration::from_secs(60);

/// How long a stopped instance may take to resign and exit before it is
/// killed.
const STOP_WITHIN: Duration = Duration::from_secs(10);

/// One running instance, killed if dropped.
pub(crate) struct Instance {
    pub(crate) number: u64,
    /// Where it serves, which is also the value it campaigns with.
    pub(crate) base: String,
    child: Child,
    /// Closed to stop it.
    stdin: Option<ChildStdin>,
}

/// What the instances are started with.
pub(crate) struct Launch<'a> {
    pub(crate) url: &'a str,
    pub(crate) election: &'a str,
    pub(crate) job_file: &'a Path,
}

impl Launch<'_> {
    /// Starts instance `number`, a copy of this program, on a port it
    /// picks, and returns once it serves. Its output is printed behind
    /// `[instance N]`.
    pub(crate) async fn start(&self, number: u64) -> Result<Instance, BoxError> {
        let mut child = Command::new(std::env::current_exe()?)
            .args(["serve", "--port", "0", "--instance", &number.to_string()])
            .args(["--election", self.election, "--job-file"])
            .arg(self.job_file)
            // Not an argument: any user can read another's arguments.
            .env("DISTLOCK_URL", self.url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take();
        let stdout = child
            .stdout
            .take()
            .ok_or("the instance's output is not piped")?;
        let mut lines = BufReader::new(stdout).lines();
        let first = tokio::time::timeout(START_WITHIN, lines.next_line())
            .await
            .map_err(|_| format!("instance {number} did not start within {START_WITHIN:?}"))??;
        let base = first
            .as_deref()
            .and_then(|line| line.strip_prefix(LISTENING))
            .ok_or_else(|| format!("instance {number} exited before serving"))?
            .to_owned();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                println!("  [instance {number}] {line}");
            }
        });
        Ok(Instance {
            number,
            base,
            child,
            stdin,
        })
    }
}

impl Instance {
    /// Asks the instance who leads.
    pub(crate) async fn ask(&self, http: &reqwest::Client) -> Result<LeaderAnswer, BoxError> {
        let answer = http
            .get(format!("{}/leader", self.base))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        Ok(answer)
    }

    /// Asks the instance whether it is healthy: its `GET /healthz` status
    /// and what it said.
    pub(crate) async fn health(&self, http: &reqwest::Client) -> Result<(u16, String), BoxError> {
        let answer = http.get(format!("{}/healthz", self.base)).send().await?;
        let status = answer.status().as_u16();
        Ok((status, answer.text().await?))
    }

    /// Its process id, while it runs.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Kills its process with SIGKILL, so that it cannot resign, and reaps
    /// it.
    pub(crate) async fn kill(mut self) -> std::io::Result<()> {
        self.child.start_kill()?;
        self.child.wait().await?;
        Ok(())
    }

    /// Closes its input, which it takes as the sign to resign and exit.
    pub(crate) fn ask_to_stop(&mut self) {
        drop(self.stdin.take());
    }

    /// Waits for it to exit after [`ask_to_stop`](Self::ask_to_stop), and
    /// kills it if it has not within a few seconds.
    pub(crate) async fn stopped(mut self) -> std::io::Result<()> {
        if tokio::time::timeout(STOP_WITHIN, self.child.wait())
            .await
            .is_err()
        {
            eprintln!(
                "instance {} did not stop when asked; killing it",
                self.number
            );
            return self.kill().await;
        }
        Ok(())
    }
}

/// Stops every instance, asking all first, so that none is elected as
/// another resigns.
pub(crate) async fn stop_all(mut instances: Vec<Instance>) -> std::io::Result<()> {
    for instance in &mut instances {
        instance.ask_to_stop();
    }
    for instance in instances {
        instance.stopped().await?;
    }
    Ok(())
}
