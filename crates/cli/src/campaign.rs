//! `distlock campaign`: run a command while this instance leads an
//! election, and with `--again` campaign anew after each loss.

use crate::cli::{CampaignArgs, RunArgs};
use crate::exit::{Failure, LOST};
use crate::run;
use crate::text;

/// Runs `distlock campaign`; returns the exit code.
pub(crate) async fn campaign(args: CampaignArgs) -> Result<u8, Failure> {
    loop {
        let outcome = run::run(RunArgs {
            name: args.name.clone(),
            backend: args.backend.clone(),
            wait: None,
            no_wait: false,
            shared: false,
            permits: None,
            lease: args.lease,
            max_hold: None,
            min_hold: None,
            kill_grace: args.kill_grace,
            quiet: args.quiet,
            conflict_exit_code: None,
            resume_file: None,
            command: args.command.clone(),
            // CMD came after `--`, whole.
            dashes_before_command: true,
            label: Some(args.value.clone()),
        })
        .await;
        match outcome {
            Err(failure) if failure.code == LOST && args.again => {
                // Said once, and then the campaign goes on.
                text::report(&failure);
            }
            other => return other,
        }
    }
}
