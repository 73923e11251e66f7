//! What `distlock run` holds while CMD runs: one lock, or several taken
//! together (`distlock run A B C -- CMD`), with what CMD is told of them
//! and how their loss is noticed.

use std::ffi::OsString;

use distlock::{LockGuard, LockName, LockSet, LossReason, RiskReason, RiskSignal};
use tokio::task::JoinHandle;

use crate::text;

/// The locks `run` holds, in the order they were taken.
pub(crate) struct Held {
    set: LockSet,
}

impl Held {
    pub(crate) fn new(set: LockSet) -> Self {
        Self { set }
    }

    /// The first lock, the only one of a run of one name.
    pub(crate) fn first(&self) -> &LockGuard {
        &self.set.guards()[0]
    }

    /// The names, for messages: `a`, or `a, b`.
    pub(crate) fn names(&self) -> String {
        let names: Vec<&str> = self
            .set
            .guards()
            .iter()
            .map(|guard| guard.name().as_str())
            .collect();
        names.join(", ")
    }

    /// What CMD finds in its environment: for one lock `DISTLOCK_NAME` and
    /// `DISTLOCK_FENCING_TOKEN`; for several, `DISTLOCK_FENCING_TOKENS`
    /// (see [`fencing_tokens`]).
    pub(crate) fn environment(&self) -> Vec<(&'static str, OsString)> {
        match self.set.guards() {
            [one] => vec![
                ("DISTLOCK_NAME", one.name().as_str().into()),
                (
                    "DISTLOCK_FENCING_TOKEN",
                    one.fencing_token().to_string().into(),
                ),
            ],
            _ => vec![(
                "DISTLOCK_FENCING_TOKENS",
                fencing_tokens(self.set.fencing_tokens()).into(),
            )],
        }
    }

    /// The lock lost first, and why; see [`LockSet::lost`].
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub(crate) async fn lost(&self) -> (&LockName, LossReason) {
        self.set.lost().await
    }

    /// Says on stderr when a lock is in danger of being lost, and when it
    /// is confirmed again, until the returned value is dropped.
    pub(crate) fn warn_of_dangers(&self) -> DangerWarnings {
        let tasks = self
            .set
            .guards()
            .iter()
            .map(|guard| {
                let name = text::printable(guard.name().as_str());
                tokio::spawn(warn_of(name, guard.risk_signal()))
            })
            .collect();
        DangerWarnings { tasks }
    }

    /// The first lock that was lost, if one was.
    pub(crate) fn lost_one(&self) -> Option<&LockName> {
        self.set
            .guards()
            .iter()
            .find(|guard| guard.is_lost())
            .map(LockGuard::name)
    }

    /// Releases every lock; see [`LockSet::release`].
    pub(crate) async fn release(self) -> distlock::Result<bool> {
        self.set.release().await
    }
}

/// The tasks that warn of the locks' dangers; dropping it stops them.
pub(crate) struct DangerWarnings {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for DangerWarnings {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Warns of each danger to the lock `name` until it is lost: its loss is
/// reported by `run` itself.
async fn warn_of(name: String, risk: RiskSignal) {
    loop {
        match risk.at_risk().await {
            RiskReason::Lost(_) => return,
            reason => text::say(&format!(
                "lock {name} at risk: {reason}; the command runs on"
            )),
        }
        if risk.safe_again().await.is_err() {
            return;
        }
        text::say(&format!("lock {name} confirmed again"));
    }
}

/// `DISTLOCK_FENCING_TOKENS`: `name=token` pairs joined by commas, in the
/// order the locks were taken. Each name is percent-encoded: every byte
/// other than ASCII letters, digits and `-._~/:` becomes `%XX` (upper-case
/// hex), so that any name, `=`, `,`, `%`, a newline or a NUL in it
/// included, survives and can be decoded.
pub(crate) fn fencing_tokens<'a>(pairs: impl Iterator<Item = (&'a LockName, u64)>) -> String {
    pairs
        .map(|(name, token)| format!("{}={token}", encode(name.as_str())))
        .collect::<Vec<_>>()
        .join(",")
}

fn encode(name: &str) -> String {
    let mut encoded = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/:".contains(&byte) {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// The locks and the command of `distlock run`'s positional arguments.
///
/// `--` separates the names from CMD: `run A B C -- CMD` holds A, B and
/// C. Without `--`, the first argument is the one name: `run A CMD ARGS…`.
/// `dashes_before_command` says that the parser took a `--` right before
/// `command` (in `run A -- CMD`), which then holds all of CMD.
pub(crate) fn names_and_command(
    first: &str,
    command: &[OsString],
    dashes_before_command: bool,
) -> Result<(Vec<String>, Vec<OsString>), String> {
    let separator = (!dashes_before_command)
        .then(|| command.iter().position(|argument| argument == "--"))
        .flatten();
    let Some(separator) = separator else {
        return Ok((vec![first.to_owned()], command.to_vec()));
    };
    let mut names = vec![first.to_owned()];
    let given = &command[..separator];
    // After the first name every argument is positional, so an option
    // there would silently become a lock's name.
    if let Some(option) = given
        .iter()
        .find(|name| name.to_string_lossy().starts_with('-'))
    {
        return Err(format!(
            "{} stands among the lock names: with several names, put the options before \
             them (`distlock run --wait 5s A B -- CMD`)",
            option.to_string_lossy()
        ));
    }
    for name in given {
        names.push(name.to_str().map(str::to_owned).ok_or_else(|| {
            format!(
                "the lock name {} is not UTF-8; lock names are text",
                name.to_string_lossy()
            )
        })?);
    }
    let command = command[separator + 1..].to_vec();
    if command.is_empty() {
        return Err(format!(
            "no command after `--`: `distlock run {} -- CMD [ARGS…]`",
            names.join(" ")
        ));
    }
    Ok((names, command))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    #[test]
    fn names_before_dashes_are_all_held() {
        let (names, command) =
            names_and_command("a", &args(&["b", "c", "--", "make", "-j"]), false).unwrap();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(command, args(&["make", "-j"]));
    }

    #[test]
    fn without_dashes_the_first_argument_is_the_one_name() {
        let (names, command) = names_and_command("a", &args(&["echo", "hi"]), false).unwrap();
        assert_eq!(names, ["a"]);
        assert_eq!(command, args(&["echo", "hi"]));
    }

    #[test]
    fn dashes_the_parser_took_leave_the_command_whole() {
        // `distlock run a -- sh -c x -- y`: CMD is everything after the first `--`.
        let (names, command) =
            names_and_command("a", &args(&["sh", "-c", "x", "--", "y"]), true).unwrap();
        assert_eq!(names, ["a"]);
        assert_eq!(command, args(&["sh", "-c", "x", "--", "y"]));
    }

    #[test]
    fn an_option_among_several_names_is_refused() {
        let error =
            names_and_command("a", &args(&["b", "--wait", "5", "--", "true"]), false).unwrap_err();
        assert!(
            error.starts_with("--wait stands among the lock names"),
            "{error}"
        );
    }

    #[test]
    fn dashes_with_no_command_after_them_are_refused() {
        let error = names_and_command("a", &args(&["b", "--"]), false).unwrap_err();
        assert!(error.contains("no command after `--`"), "{error}");
    }

    #[test]
    fn every_name_survives_the_tokens_encoding() {
        let names = [
            "plain/name",
            "a=b,c",
            "100%",
            "line\nbreak",
            "nul\0byte",
            "é",
        ];
        let names: Vec<LockName> = names
            .iter()
            .map(|name| LockName::new(*name).unwrap())
            .collect();
        let encoded = fencing_tokens(names.iter().zip(1..));
        assert_eq!(
            encoded,
            "plain/name=1,a%3Db%2Cc=2,100%25=3,line%0Abreak=4,nul%00byte=5,%C3%A9=6"
        );
        // Exactly one `=` and no `,` inside a pair, whatever the name.
        for pair in encoded.split(',') {
            assert_eq!(pair.matches('=').count(), 1, "{pair}");
        }
    }
}
