//! Who waits in fair mode: the sessions in the server's own queue of a
//! name's key (its `pg_locks` rows not granted), in the order the server
//! will grant them (see [`super::statements`]'s `waiters`).
//!
//! The server knows no holder of ours, so a wait in line names its holder
//! in its session's `application_name`, set for the one statement that
//! waits and undone when it ends ([`application_name`]); the listing
//! reads it back through `pg_stat_activity` ([`holder_of`]), which shows
//! every session's application name to every role. The name is the
//! waiting statement's own, so it needs nothing of the session to last.

use std::time::Duration;

use distlock_core::{Holder, LockKind, LockName, Result, Waiter};
use tokio_postgres::Row;

use crate::rows::{self, get};

/// How much of an application name the server keeps, in bytes
/// (`NAMEDATALEN - 1`).
const APPLICATION_NAME_BYTES: usize = 63;

/// The first word of a waiter's application name.
const PREFIX: &str = "distlock";

/// The application name of a session that waits in line for `holder`:
/// `distlock <pid> <host>`, and ` <label>` when it has one, each field
/// with `%`, spaces and every byte outside printable ASCII escaped as
/// `%XX` (the server would change them), all within the server's 63
/// bytes. Host and label are cut, at a character, to share what is left
/// after the pid: each keeps up to half, and what one leaves the other
/// may use.
pub(super) fn application_name(holder: &Holder) -> String {
    let mut name = format!("{PREFIX} {} ", holder.pid);
    let left = APPLICATION_NAME_BYTES.saturating_sub(name.len());
    match &holder.label {
        None => name.push_str(&escaped(&holder.host, left)),
        Some(label) => {
            // The space between host and label.
            let left = left.saturating_sub(1);
            let (host_bytes, label_bytes) =
                shares(escaped_len(&holder.host), escaped_len(label), left);
            name.push_str(&escaped(&holder.host, host_bytes));
            name.push(' ');
            name.push_str(&escaped(label, label_bytes));
        }
    }
    name
}

/// The bytes that two fields of escaped lengths `first` and `second` get
/// out of `left`: all they need if both fit, else each up to half, and
/// the rest to the one that needs more.
fn shares(first: usize, second: usize, left: usize) -> (usize, usize) {
    let half = left / 2;
    if first + second <= left {
        (first, second)
    } else if first <= half {
        (first, left - first)
    } else if second <= left - half {
        (left - second, second)
    } else {
        (half, left - half)
    }
}

/// Whether `byte` goes into an application name as it is.
fn plain(byte: u8) -> bool {
    byte.is_ascii_graphic() && byte != b'%'
}

/// `text`'s length once escaped.
fn escaped_len(text: &str) -> usize {
    text.bytes().map(|b| if plain(b) { 1 } else { 3 }).sum()
}

/// `text` escaped, cut at a character to at most `max` bytes.
fn escaped(text: &str, max: usize) -> String {
    let mut out = String::new();
    for c in text.chars() {
        let mut bytes = [0; 4];
        let bytes = c.encode_utf8(&mut bytes).as_bytes();
        let len = bytes
            .iter()
            .map(|&b| if plain(b) { 1 } else { 3 })
            .sum::<usize>();
        if out.len() + len > max {
            break;
        }
        for &b in bytes {
            if plain(b) {
                out.push(char::from(b));
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    out
}

/// `field` with its escapes undone; `None` unless it is an escaped UTF-8
/// text.
fn unescaped(field: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(field.len());
    let mut rest = field.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    String::from_utf8(bytes).ok()
}

/// The holder a waiter's application name names ([`application_name`]);
/// `None` for any other name (a transaction lock's wait, another
/// program's session).
pub(super) fn holder_of(application_name: &str) -> Option<Holder> {
    let mut fields = application_name.split(' ');
    if fields.next()? != PREFIX {
        return None;
    }
    let pid = fields.next()?;
    if !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let pid = pid.parse().ok()?;
    let host = unescaped(fields.next()?)?;
    let label = match fields.next() {
        Some(label) => Some(unescaped(label)?),
        None => None,
    };
    if fields.next().is_some() {
        return None;
    }
    Some(Holder { host, pid, label })
}

/// Reads a row of the waiters statement: the name, the waiting session's
/// application name, and how long it has waited in µs by the server's
/// clock (`NULL` for the moment before the server records it).
pub(super) fn read(row: &Row) -> Result<(LockName, Waiter)> {
    let what = "a listed waiter";
    let name = rows::name(row, what)?;
    let application: Option<String> = get(row, 1, what)?;
    let waited_us: Option<i64> = get(row, 2, what)?;
    let waiter = Waiter {
        // Only a whole lock is waited for in the server's queue.
        kind: LockKind::Exclusive,
        holder: application.as_deref().and_then(holder_of),
        waiting_for: waited_us
            .and_then(|us| u64::try_from(us).ok())
            .map(Duration::from_micros),
    };
    Ok((name, waiter))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(host: &str, pid: u32, label: Option<&str>) -> Holder {
        Holder {
            host: host.to_owned(),
            pid,
            label: label.map(str::to_owned),
        }
    }

    #[test]
    fn a_waiters_holder_comes_back_whole_when_it_fits() {
        for who in [
            holder("web-1", 4242, Some("first-waiter")),
            holder("web-1", u32::MAX, None),
            holder("web-1", 7, Some("")),
            holder("h ö%st", 7, Some("a label 💡")),
        ] {
            let name = application_name(&who);
            assert!(name.len() <= APPLICATION_NAME_BYTES, "{name}");
            assert!(
                name.bytes().all(|b| b.is_ascii_graphic() || b == b' '),
                "{name}"
            );
            assert_eq!(holder_of(&name), Some(who), "{name}");
        }
    }

    #[test]
    fn long_hosts_and_labels_share_the_servers_63_bytes() {
        let host = "ip-172-31-22-4.eu-west-1.compute.internal";
        let label = "nightly-report-for-the-accounts-department";
        let name = application_name(&holder(host, 1_234_567, Some(label)));
        assert_eq!(name.len(), APPLICATION_NAME_BYTES, "{name}");
        let back = holder_of(&name).expect("ours");
        assert_eq!(back.pid, 1_234_567);
        assert!(
            host.starts_with(&back.host) && back.host.len() >= 17,
            "{back:?}"
        );
        let cut = back.label.expect("a label");
        assert!(label.starts_with(&cut) && cut.len() >= 17, "{cut}");
        // A short label leaves the rest to the host, and the other way.
        let name = application_name(&holder(host, 1, Some("x")));
        assert_eq!(holder_of(&name).map(|h| h.host), Some(host.to_owned()));
        let name = application_name(&holder("h", 1, Some(label)));
        assert_eq!(
            holder_of(&name).and_then(|h| h.label),
            Some(label.to_owned())
        );
        // Escapes are never cut in two, nor characters.
        let name = application_name(&holder("h", 1, Some(&"é".repeat(40))));
        let cut = holder_of(&name).and_then(|h| h.label).expect("a label");
        assert!(!cut.is_empty() && cut.chars().all(|c| c == 'é'), "{cut}");
    }

    #[test]
    fn other_application_names_name_no_holder() {
        for other in [
            "",
            "psql",
            "distlock",
            "distlock x h",
            "distlock -1 h",
            "distlock 1",
            "distlock 1 h l extra",
            "distlock 1 h%",
            "distlock 1 h%zz",
            "distlock 1 %FF",
        ] {
            assert_eq!(holder_of(other), None, "{other:?}");
        }
    }

    #[test]
    fn shares_give_each_half_and_the_rest_to_the_other() {
        assert_eq!(shares(3, 4, 10), (3, 4));
        assert_eq!(shares(2, 20, 10), (2, 8));
        assert_eq!(shares(20, 2, 10), (8, 2));
        assert_eq!(shares(20, 20, 11), (5, 6));
        assert_eq!(shares(0, 0, 0), (0, 0));
    }
}
