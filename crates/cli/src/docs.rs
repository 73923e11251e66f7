//! Shell completions and the manual page, both made from the clap
//! definition, so that neither can fall behind the command.

use std::io::Write;

use clap::CommandFactory;

use crate::cli::{Cli, Shell};
use crate::exit::Failure;
use crate::text;

/// Writes the completion script for `shell` to stdout; returns the exit
/// code.
pub(crate) fn completions(shell: Shell) -> u8 {
    let shell = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut offered(), "distlock", &mut script);
    write_out(&script)
}

/// The command as a shell should offer it: the generators list hidden
/// subcommands too, and the internal ones (`__exec`, `__demo-worker`) are
/// not for people to type.
fn offered() -> clap::Command {
    let full = Cli::command();
    let visible: Vec<clap::Command> = full
        .get_subcommands()
        .filter(|sub| !sub.is_hide_set())
        .cloned()
        .collect();
    let mut bare = clap::Command::new("distlock").subcommands(visible);
    if let Some(about) = full.get_about() {
        bare = bare.about(about.clone());
    }
    if let Some(version) = full.get_version() {
        bare = bare.version(version.to_owned());
    }
    bare
}

/// Writes the manual page of distlock, or of one of its subcommands as
/// `distlock-NAME`, in roff, to stdout; returns the exit code.
pub(crate) fn man(subcommand: Option<&str>) -> u8 {
    let mut command = Cli::command();
    command.build();
    let command = match subcommand {
        None => command,
        Some(name) => match command
            .get_subcommands()
            .find(|sub| sub.get_name() == name && !sub.is_hide_set())
        {
            Some(sub) => sub
                .clone()
                .name(format!("distlock-{name}"))
                .version(env!("CARGO_PKG_VERSION")),
            None => {
                let known: Vec<&str> = command
                    .get_subcommands()
                    .filter(|sub| !sub.is_hide_set() && sub.get_name() != "help")
                    .map(|sub| sub.get_name())
                    .collect();
                return report(Failure::usage(format!(
                    "no subcommand `{}`; distlock man takes one of {}",
                    text::printable(name),
                    known.join(", ")
                )));
            }
        },
    };
    let mut page = Vec::new();
    if let Err(error) = clap_mangen::Man::new(command).render(&mut page) {
        return report(Failure::runtime(format!(
            "cannot make the manual page: {error}"
        )));
    }
    write_out(&page)
}

fn write_out(bytes: &[u8]) -> u8 {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => 0,
        Err(error) => report(Failure::runtime(format!("cannot write to stdout: {error}"))),
    }
}

fn report(failure: Failure) -> u8 {
    text::report(&failure);
    failure.code
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_definition_is_valid_for_the_generators() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
