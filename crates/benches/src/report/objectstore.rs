//! The report's lines on the object-storage backend: how its requests are
//! counted, the goals and findings that set it beside the raw
//! conditional-put pair on the same store, and what a waiter costs while
//! a lock is held.

use std::fmt::Write;
use std::time::Duration;

use super::{BackendResults, spread};
use crate::commands::Counts;
use crate::markdown::{goal, opt, short};
use crate::objectstore::polling::{Polling, WARM_UP};
use crate::scaling::names::NamesPoint;
use crate::scaling::{OBJECT_STORE_HELD_AT_MOST, OBJECT_STORE_NAMES_AT_MOST, measured};
use crate::uncontended::{Contender, Side};
use crate::url_kind::OBJECT_STORE;

/// The raw pair in the uncontended table.
pub(super) const RAW_PAIR: &str = "**baseline**: the raw conditional-put pair, \
    `PUT If-None-Match: *` of an object naming its holder (refused while it exists) + its \
    delete (which `object_store` sends on Azure as a Blob Batch of one, a `POST`), issued \
    directly through `object_store` on an object of its own";

/// How an object store's requests are counted, for the report's header.
pub(super) const COUNTING: &str = "- **objectstore**: HTTP requests, counted by each \
    process's own client: the backend is opened with an `object_store` HTTP connector \
    (`ObjectStoreConfig::http_connector`) that counts every request it is handed, by method \
    and precondition (`GET`, `PUT If-Match`, `PUT If-None-Match`, `DELETE`), before passing \
    it to `object_store`'s own client. A request `object_store` retries is counted each \
    time it is sent, so the count is what went on the wire, not the calls made. Each worker \
    reads its count when the window opens and when it closes, as MongoDB's, and the \
    parent around each uncontended round; the raw pair's client is built on the same \
    counter. The probe each client makes when it opens (five requests and a delete) falls \
    before any window.";

/// What the object store's waiter sends while a lock is held, measured
/// on the default backoff (a ceiling doubling from 5 ms to 500 ms).
const BACKOFF: &str = "core's jittered backoff with its defaults (each wait drawn up to a \
    ceiling that doubles from 5 ms to 500 ms)";

/// The uncontended goals on an object store: the backend's three requests
/// per cycle, and a rate against the raw pair that those requests allow.
pub(super) fn uncontended_goals(b: &BackendResults) -> Vec<String> {
    let u = &b.uncontended;
    let (Some(client), Some(pair)) = (
        u.side(Contender::Client),
        u.side(Contender::ObjectStoreRawPair),
    ) else {
        return Vec::new();
    };
    let mut goals = Vec::new();
    let (Some(ours), Some(theirs)) = (client.commands_per_cycle(), pair.commands_per_cycle())
    else {
        return goals;
    };
    goals.push(goal(
        ours <= 3.0 + 1e-9,
        format!(
            "{OBJECT_STORE}: 3 requests per cycle (take: `GET` and `PUT If-Match`; release: \
             `PUT If-Match`): {ours:.2} ({}); the raw pair sends {theirs:.2}.",
            breakdown(client),
        ),
    ));
    // Every request is a round trip to the same store, so the pair's
    // requests against ours bound the share ours can reach.
    let share = 0.9 * theirs / ours;
    let ratio = client.per_second() / pair.per_second();
    goals.push(goal(
        ratio >= share,
        format!(
            "{OBJECT_STORE}: the client reaches at least 0.9 of what its requests allow \
             against the raw pair, 0.9 × {theirs:.2} / {ours:.2} = {share:.2} of the pair's \
             cycles: {ratio:.2} ({:.0} against {:.0} cycles/s){}.",
            client.per_second(),
            pair.per_second(),
            spread(client, pair),
        ),
    ));
    goals
}

/// The requests of `side` per cycle, by kind.
fn breakdown(side: &Side) -> String {
    side.commands
        .as_ref()
        .map_or("—".into(), |c| c.per(side.counted_cycles as f64))
}

/// What the uncontended rows on an object store show.
pub(super) fn uncontended_findings(b: &BackendResults) -> Option<String> {
    let u = &b.uncontended;
    let client = u.side(Contender::Client)?;
    let calls = u.side(Contender::BackendCalls)?;
    let pair = u.side(Contender::ObjectStoreRawPair)?;
    let us = |side: &Side| 1e6 / side.per_second();
    let mut t = format!(
        "**objectstore.** A cycle of ours is {} requests ({}): the take reads the lock's \
         object (`GET`) and replaces the free record it finds under the ETag read \
         (`PUT If-Match`) with our grant and a higher token (one more, or the clock in µs if \
         greater); the release replaces our grant, under the ETag our write returned, with a \
         free record that keeps the token. \
         The object stays, so the next take finds it; only a name's first take sees a `404` \
         and creates it (`PUT If-None-Match: *`). The raw pair is {} requests ({}) with no \
         fencing token, no lease (a holder that dies leaves its object for ever) and a \
         release that deletes whatever is there: `object_store` has no conditional delete, \
         and on Azure sends every delete as a Blob Batch (`POST ?comp=batch`, here carrying \
         one delete). The backend's direct calls made {:.2} of the pair's cycles, and the \
         client {:.2} of its backend's: a cycle of the client's took {:.0} µs against the \
         pair's {:.0} µs.",
        opt(client.commands_per_cycle()),
        breakdown(client),
        opt(pair.commands_per_cycle()),
        breakdown(pair),
        calls.per_second() / pair.per_second(),
        client.per_second() / calls.per_second(),
        us(client),
        us(pair),
    );
    let times = |side: &Side| {
        let mut kinds: Vec<String> = side
            .commands
            .iter()
            .flat_map(|c| c.0.keys())
            .filter_map(|kind| Some(format!("{kind} {}", short(side.request_time(kind)?))))
            .collect();
        kinds.sort();
        kinds.join(", ")
    };
    let (ours, theirs) = (times(client), times(pair));
    if !ours.is_empty() && !theirs.is_empty() {
        let _ = write!(
            t,
            " A request's mean time, from the client handing it on to its answer's headers: \
             the client's {ours}; the pair's {theirs}."
        );
        if pair.per_second() < client.per_second() {
            t.push_str(
                " The pair sends fewer requests but made fewer cycles: its requests took \
                 longer each, so on this store what a request asks of the store, not the \
                 number of requests, set the rate.",
            );
        }
    }
    Some(t)
}

/// What a waiter costs on an object store while the lock is held, as
/// measured (see [`crate::objectstore::polling`]).
pub(super) fn polling_findings(label: &str, polling: &Polling) -> String {
    let mut t = format!(
        "**{label}, one waiter while a lock is held.** An object store tells nobody of a \
         release, so a waiter polls with {BACKOFF}, each try one `GET` of the lock's \
         object. One client held a lock with the defaults (a 30 s lease, extended every \
         10 s) while a second waited for it with the defaults; each client's requests were \
         counted apart over {}, from {} after the wait began, once the backoff had reached \
         its ceiling. The waiter sent {} ({}; {:.2} a second): {:.0} requests per \
         waiter-hour. ",
        humantime::format_duration(polling.window),
        humantime::format_duration(WARM_UP),
        requests(polling.waiter.total()),
        whole(&polling.waiter),
        polling.waiter_per_second(),
        polling.waiter_per_hour(),
    );
    let _ = write!(
        t,
        "The holder sent {} over the same time ({}), its keeper's extensions: {:.0} requests per \
         holder-hour. Waiters poll apart, so N waiters send N times the waiter's requests.",
        requests(polling.holder.total()),
        whole(&polling.holder),
        polling.holder_per_hour(),
    );
    t
}

/// `n` requests, in words: `1 request`, `49 requests`.
fn requests(n: u64) -> String {
    format!("{n} {}", if n == 1 { "request" } else { "requests" })
}

/// `counts` as whole requests: `GET 50, PUT If-Match 1`, or `no request`.
fn whole(counts: &Counts) -> String {
    let kinds: Vec<String> = counts
        .0
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(kind, n)| format!("{kind} {n}"))
        .collect();
    if kinds.is_empty() {
        "no request".to_owned()
    } else {
        kinds.join(", ")
    }
}

/// Why the names points above [`OBJECT_STORE_NAMES_AT_MOST`] were left out
/// on `b`, with how the rate fell over the points this run measured.
pub(super) fn names_left_out(b: &BackendResults) -> Option<String> {
    let left_out = &b.curves.names_left_out;
    if left_out.is_empty() {
        return None;
    }
    let points: Vec<String> = left_out.iter().map(usize::to_string).collect();
    let mut t = format!(
        "{}: {} names left out. The backend keeps each name's object after its release (a \
         free record, which keeps its fencing token), and Azurite keeps the metadata of \
         every object in memory (LokiJS) and writes all of it to its index file every 5 s, \
         so every name taken makes the store slower for the next; this run takes at most \
         {OBJECT_STORE_NAMES_AT_MOST}.",
        b.label,
        points.join(" and "),
    );
    let measured: Vec<(usize, &NamesPoint)> = measured(&b.curves.names).collect();
    if let (Some(&(few, first)), Some(&(many, last))) = (measured.first(), measured.last())
        && many > few
    {
        let more: usize = left_out.iter().sum();
        let _ = write!(
            t,
            " The points measured went from {:.0} cycles/s at {few} names to {:.0} at {many}; \
             at that last rate, the names left out would take {} more, and the rate only \
             falls as the objects grow in number.",
            first.cycles_per_second(),
            last.cycles_per_second(),
            humantime::format_duration(Duration::from_secs(
                (more as f64 / last.cycles_per_second()).round() as u64
            )),
        );
    }
    Some(t)
}

/// Why the held-locks points [`OBJECT_STORE_HELD_AT_MOST`] were left
/// out on `b`, with the request rate its uncontended cycles reached.
pub(super) fn held_left_out(b: &BackendResults) -> Option<String> {
    let left_out = &b.curves.held_left_out;
    let smallest = *left_out.iter().min()?;
    let points: Vec<String> = left_out.iter().map(usize::to_string).collect();
    let mut t = format!(
        "{}: {} locks left out. The backend extends each lock it holds with a \
         `PUT If-Match` of its own every third of the lease (an object store has no request \
         that writes several objects), so holding N locks asks the store for N / 10 requests \
         a second on the default 30 s lease, for as long as they are held: {} a second at \
         {smallest} locks, after taking them at 2 requests each; this run holds at most \
         {OBJECT_STORE_HELD_AT_MOST}.",
        b.label,
        points.join(" and "),
        smallest / 10,
    );
    if let Some(client) = b.uncontended.side(Contender::Client)
        && let Some(per_cycle) = client.commands_per_cycle()
    {
        let _ = write!(
            t,
            " One task's uncontended cycles in section 1 reached {:.0} requests a second on \
             this store (Azurite, one Node.js process on the machine's two cores).",
            client.per_second() * per_cycle,
        );
    }
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uncontended::Uncontended;

    /// A side of `cycles` in one second that sent `requests`, each kind
    /// as often per cycle as given.
    fn side(contender: Contender, cycles: u64, requests: &[(&str, u64)]) -> Side {
        Side {
            commands: Some(Counts(
                requests
                    .iter()
                    .map(|&(kind, per)| (kind.to_owned(), per * cycles))
                    .collect(),
            )),
            counted_cycles: cycles,
            ..Side::measured(contender, cycles)
        }
    }

    fn object_store(client: Side, pair: Side) -> BackendResults {
        BackendResults {
            kind: OBJECT_STORE,
            label: OBJECT_STORE.to_owned(),
            scale_out: None,
            advisory_mode: false,
            fair: false,
            url: "az://c/p".to_owned(),
            server_version: None,
            uncontended: Uncontended {
                sides: vec![pair, client],
                quiet: None,
                beside: Vec::new(),
            },
            tooz_uncontended: None,
            contended: Vec::new(),
            kinds: Vec::new(),
            polling: None,
            curves: Default::default(),
        }
    }

    fn met(goals: &[String]) -> Vec<bool> {
        goals.iter().map(|g| g.starts_with("**Met**")).collect()
    }

    #[test]
    fn the_goals_weigh_the_client_against_what_its_requests_allow() {
        let pair = || {
            side(
                Contender::ObjectStoreRawPair,
                100,
                &[("PUT If-None-Match", 1), ("POST", 1)],
            )
        };
        let three = [("GET", 1), ("PUT If-Match", 2)];
        // Three requests against two allow 0.9 × 2/3 = 0.60 of the pair.
        let b = object_store(side(Contender::Client, 61, &three), pair());
        assert_eq!(met(&uncontended_goals(&b)), [true, true]);
        let b = object_store(side(Contender::Client, 59, &three), pair());
        assert_eq!(met(&uncontended_goals(&b)), [true, false]);
        // A fourth request a cycle misses the first goal, and lowers the
        // bar of the second to 0.9 × 2/4 = 0.45.
        let four = [("GET", 2), ("PUT If-Match", 2)];
        let b = object_store(side(Contender::Client, 50, &four), pair());
        let goals = uncontended_goals(&b);
        assert_eq!(met(&goals), [false, true]);
        assert!(goals[1].contains("= 0.45"), "{}", goals[1]);
    }

    #[test]
    fn held_points_left_out_are_said_with_the_rate_they_would_ask() {
        let mut b = object_store(
            side(Contender::Client, 200, &[("GET", 1), ("PUT If-Match", 2)]),
            side(Contender::ObjectStoreRawPair, 100, &[("POST", 1)]),
        );
        assert_eq!(held_left_out(&b), None);
        b.curves.held_left_out = vec![10_000, 100_000];
        let line = held_left_out(&b).unwrap();
        assert!(
            line.starts_with("objectstore: 10000 and 100000 locks left out."),
            "{line}"
        );
        assert!(line.contains("1000 a second at 10000 locks"), "{line}");
        assert!(line.contains("reached 600 requests a second"), "{line}");
    }

    #[test]
    fn names_left_out_are_said_with_how_the_rate_fell() {
        use crate::scaling::Point;
        use crate::scaling::store::Stored;
        let mut b = object_store(
            side(Contender::Client, 200, &[("GET", 1), ("PUT If-Match", 2)]),
            side(Contender::ObjectStoreRawPair, 100, &[("POST", 1)]),
        );
        assert_eq!(names_left_out(&b), None);
        let point = |names: usize, seconds: u64| Point {
            at: names,
            measured: Ok(NamesPoint {
                names,
                elapsed: Duration::from_secs(seconds),
                kept: Stored::default(),
            }),
        };
        b.curves.names = vec![point(100, 1), point(10_000, 200)];
        b.curves.names_left_out = vec![100_000];
        let line = names_left_out(&b).unwrap();
        assert!(
            line.starts_with("objectstore: 100000 names left out."),
            "{line}"
        );
        assert!(
            line.contains("from 100 cycles/s at 100 names to 50 at 10000"),
            "{line}"
        );
        assert!(line.contains("would take 33m 20s more"), "{line}");
    }

    #[test]
    fn requests_are_written_whole() {
        let counts = Counts([("GET".to_owned(), 50), ("PUT If-Match".to_owned(), 1)].into());
        assert_eq!(whole(&counts), "GET 50, PUT If-Match 1");
        assert_eq!(whole(&Counts::default()), "no request");
        assert_eq!(
            (requests(1), requests(49)),
            ("1 request".into(), "49 requests".into())
        );
    }
}
