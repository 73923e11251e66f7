//! Small helpers for showing values to people.

use std::ffi::OsStr;
use std::io::{self, Write};
use std::time::Duration;

use crate::exit::Failure;

/// Writes `text` to stdout. A reader that went away (`distlock list | head
/// -1`) is not an error.
pub(crate) fn print(text: &str) -> Result<(), Failure> {
    let mut stdout = io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(error) if error.kind() != io::ErrorKind::BrokenPipe => {
            Err(Failure::runtime(format!("cannot write to stdout: {error}")))
        }
        _ => Ok(()),
    }
}

/// Writes `distlock: <message>` as a line to stderr. Where nobody reads
/// stderr any more (a closed pipe), the message is dropped: the exit code
/// still tells what happened, where `eprintln!` would panic instead.
pub(crate) fn say(message: &str) {
    let _ = writeln!(io::stderr().lock(), "distlock: {message}");
}

/// Prints `failure`'s message as one line on stderr; control characters
/// from names, URLs or backends are escaped, so they cannot forge lines.
pub(crate) fn report(failure: &Failure) {
    say(&printable(&failure.message));
}

/// `text` with control characters escaped, so that a value from a backend or
/// a command line can never forge extra lines or move the cursor.
pub(crate) fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A command's program, for messages.
pub(crate) fn program(command: &[impl AsRef<OsStr>]) -> String {
    command
        .first()
        .map_or_else(String::new, |p| printable(&p.as_ref().to_string_lossy()))
}

/// A duration with three significant digits at most: `850µs`, `12.3ms`,
/// `1.50s`.
pub(crate) fn short_duration(duration: Duration) -> String {
    let nanos = duration.as_nanos();
    if nanos < 1_000 {
        format!("{nanos}ns")
    } else if nanos < 1_000_000 {
        format!("{}µs", nanos / 1_000)
    } else if nanos < 1_000_000_000 {
        format!("{:.1}ms", duration.as_secs_f64() * 1e3)
    } else {
        format!("{:.2}s", duration.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(printable("a\nb\u{1b}[2J"), "a\\nb\\u{1b}[2J");
        assert_eq!(printable("plain 🦀"), "plain 🦀");
    }

    #[test]
    fn durations_are_short() {
        assert_eq!(short_duration(Duration::from_nanos(850)), "850ns");
        assert_eq!(short_duration(Duration::from_micros(850)), "850µs");
        assert_eq!(short_duration(Duration::from_micros(12_345)), "12.3ms");
        assert_eq!(short_duration(Duration::from_millis(1500)), "1.50s");
    }
}
