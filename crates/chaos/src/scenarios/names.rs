//! R11: lock names made to break key spaces and protocols: every name is
//! either refused as invalid, or taken, listed under exactly its own name,
//! and released, and none of them reaches anything else.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::backend::Backend;
use distlock::{Error, LockClient, LockGuard, LockName, LockOptions, MAX_NAME_LEN};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::Scenario;
use super::memcached_edges::memcached_text;
use super::network::runtime;
use crate::backends::MEMCACHED;
use crate::campaign::CampaignBackend;
use crate::campaign::Server;
use crate::judge::Verdict;
use crate::outcome::Outcome;
use crate::report::{Row, ScenarioInfo, minimum};
use crate::scratch::unique;
use crate::settings::{ADMIN_LIMIT, Settings};

pub(super) const SCENARIO: Scenario = Scenario {
    info: ScenarioInfo {
        id: "R11",
        title: "Name fuzz",
        what: "100,000 names, or as many as 10 minutes allow (short form: 2,000), from a \
               fixed-seed generator, mixing `$`, `.`, \
               `$$NOW`, NUL, CR/LF, `flush_all`, `\\r\\nflush_all\\r\\n`, `{}`, quotes, spaces, \
               `%`-escapes, paths, unicode (accents, CJK, emoji, joiners, right-to-left marks), \
               the empty name and lengths up to 1 KiB and just over (exactly 1,024 and 1,025 \
               bytes among them), taken 1,000 at a time (short form: 500; PostgreSQL's advisory \
               mode, where each lock held is a server connection: 100), each batch in a key \
               space of its own beside a canary lock, listed, and released. Must hold: a name is \
               refused with `InvalidName` exactly when it is empty or over 1,024 bytes; every \
               other name is granted, shows in `list()` under exactly its own bytes, and its \
               release returns `true`; `list()` shows no other name; and nothing is injected: \
               each batch's canary is still held, listed and released at the batch's end, as is a \
               canary lock held (and extended) throughout in a key space of its own, and on \
               memcached a canary item that a `flush_all` would delete is still there (a \
               disturbed canary counts as an overlap).",
        untimed: true,
    },
    run,
};

/// How many backend calls are in flight at once.
const IN_FLIGHT: usize = 32;

/// The canary's lease, extended every third of it.
const CANARY_LEASE: Duration = Duration::from_secs(30);

fn run(server: &mut Server, settings: &Settings) -> Outcome<Vec<Row>> {
    let runtime = runtime()?;
    Ok(vec![runtime.block_on(fuzz(server, settings))?])
}

/// What the run found.
#[derive(Debug, Default)]
struct Found {
    generated: usize,
    refused: usize,
    /// Names refused that are valid, or accepted that are not, or refused
    /// with another error than `InvalidName`.
    misjudged: Vec<String>,
    granted: usize,
    /// Fresh names that were found held, or could not be taken.
    not_granted: Vec<String>,
    /// Granted names that `list()` did not show, or showed otherwise.
    unlisted: Vec<String>,
    /// Names `list()` showed that nobody took.
    strays: Vec<String>,
    /// Releases that did not return `true`.
    bad_releases: Vec<String>,
    /// Rounds whose canary was not listed as itself, was lost, or could
    /// not be released.
    round_canaries_disturbed: usize,
    /// Time spent taking, listing and releasing.
    taking: Duration,
    listing: Duration,
    releasing: Duration,
}

impl Found {
    fn failures(&self) -> usize {
        self.misjudged.len()
            + self.not_granted.len()
            + self.unlisted.len()
            + self.strays.len()
            + self.bad_releases.len()
            + self.round_canaries_disturbed
    }
}

/// How long the full form goes on starting batches.
const FULL_FORM_LIMIT: Duration = Duration::from_secs(600);

async fn fuzz(server: &Server, settings: &Settings) -> Outcome<Row> {
    let total = settings.pick(100_000, 2_000);
    // Each batch is held at once: no more than the backend can hold.
    let batch = settings
        .pick(1_000, 500)
        .min(server.kind.max_held().unwrap_or(usize::MAX));
    let started = Instant::now();
    // The home canary, in a key space of its own, extended throughout: an
    // injection that reached across key spaces (a dropped collection, a
    // `flush_all`) would show at its next extension, or in a listing. Its
    // lease is long enough to ride out a backend slowed down by the fuzz,
    // which is not what this checks.
    let home = distlock::open(&key_space(server, "home")?).await?;
    let canary_name = LockName::new(unique("r11-canary"))?;
    let canary_client = LockClient::new(
        home.clone(),
        LockOptions::builder().lease(CANARY_LEASE).build()?,
    );
    let canary = canary_client
        .acquire_with(&canary_name, Duration::from_secs(30))
        .await?;
    let canary_token = canary.fencing_token();
    let canary_item = if server.kind.name() == MEMCACHED.name() {
        Some(store_canary_item(server)?)
    } else {
        None
    };

    let mut names = Names::new(0x5eed_0fd1_5710_c0de);
    let mut found = Found::default();
    let mut done = 0;
    let mut rounds = 0;
    // Where each lock is a server connection (PostgreSQL's advisory mode),
    // 100,000 names take far longer than elsewhere: the full form starts no
    // batch after this long, and says how many names it tried.
    while done < total && (settings.short || started.elapsed() < FULL_FORM_LIMIT) {
        let count = batch.min(total - done);
        let raw: Vec<String> = (0..count).map(|_| names.next()).collect();
        done += count;
        rounds += 1;
        // Each round has a key space of its own, so that listing and
        // releasing cost the same in the last round as in the first.
        let backend = distlock::open(&key_space(server, &format!("round{rounds}"))?).await?;
        round(&backend, raw, &mut found).await?;
    }

    // The home canary, untouched by any of it.
    let listed = home.list(ADMIN_LIMIT).await?;
    let canary_listed = listed
        .iter()
        .find(|info| info.name == canary_name)
        .is_some_and(|info| info.fencing_token.is_none_or(|token| token == canary_token));
    found.strays.extend(
        listed
            .iter()
            .filter(|info| info.name != canary_name)
            .map(|info| format!("{:?} listed beside the home canary", info.name.as_str())),
    );
    let canary_lost = if canary.is_lost() {
        Some(canary.lost().await)
    } else {
        None
    };
    let canary_released = matches!(canary.release().await, Ok(true));
    let item_intact = match &canary_item {
        Some((key, value)) => canary_item_intact(server, key, value)?,
        None => true,
    };
    let injected = !canary_listed
        || canary_lost.is_some()
        || !canary_released
        || !item_intact
        || found.round_canaries_disturbed > 0;

    let mut problems: Vec<String> = Vec::new();
    for (what, list) in [
        ("misjudged by `LockName::new`", &found.misjudged),
        ("not granted", &found.not_granted),
        ("not listed as themselves", &found.unlisted),
        ("listed but never taken", &found.strays),
        ("releases not `true`", &found.bad_releases),
    ] {
        if !list.is_empty() {
            problems.push(format!(
                "{} {what}, e.g. {}",
                list.len(),
                list.iter().take(2).cloned().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    if found.round_canaries_disturbed > 0 {
        problems.push(format!(
            "the round's canary was disturbed in {} of {rounds} rounds",
            found.round_canaries_disturbed
        ));
    }
    let canary_note = format!(
        "home canary lock {}{}{}; {rounds} rounds' canary locks {}",
        if canary_listed && canary_lost.is_none() && canary_released {
            "intact"
        } else {
            "DISTURBED"
        },
        canary_lost.map_or(String::new(), |reason| format!(" (lost: {reason})")),
        match canary_item {
            Some(_) if item_intact => ", canary item intact",
            Some(_) => ", canary item GONE",
            None => "",
        },
        if found.round_canaries_disturbed == 0 {
            "intact"
        } else {
            "DISTURBED"
        },
    );
    Ok(Row {
        scenario: "R11",
        backend: server.kind.name(),
        kind: "exclusive".into(),
        // A disturbed canary is a lock taken from its holder: an overlap,
        // which the short form judges too.
        verdict: Some(Verdict {
            acquisitions: found.granted + 1 + rounds,
            overlaps: usize::from(injected),
            losses: usize::from(canary_lost.is_some()),
            failed: found.not_granted.len(),
            ..Verdict::default()
        }),
        passed: found.failures() == 0 && !injected,
        detail: format!(
            "{} names, {batch} at a time: {} refused as invalid, {} granted, listed and \
             released; {canary_note}; \
             {}; took {}s (taking {}s, listing {}s, releasing {}s)",
            found.generated,
            found.refused,
            found.granted,
            if problems.is_empty() {
                "no mismatch".to_owned()
            } else {
                problems.join("; ")
            },
            started.elapsed().as_secs(),
            found.taking.as_secs(),
            found.listing.as_secs(),
            found.releasing.as_secs(),
        ),
        overlaps_allowed: None,
        minimum: minimum(found.granted > 0, || {
            format!("{} names granted", found.granted)
        }),
        applies: true,
    })
}

/// The server's URL with a key space of this run's own called `space`, so
/// that `list()` shows only its locks.
fn key_space(server: &Server, space: &str) -> Outcome<String> {
    server
        .kind
        .key_space_url(server, &format!("r11_{}_{space}", std::process::id()))
}

/// One round, on a key space of its own: takes a canary, validates `raw`,
/// takes every valid name, lists, releases them all, and checks that the
/// canary is still held and listed as it was.
async fn round(backend: &Arc<dyn Backend>, raw: Vec<String>, found: &mut Found) -> Outcome<()> {
    // Long leases: the keeper has nothing to do for the names under test.
    let options = LockOptions::builder()
        .lease(Duration::from_secs(120))
        .label("distlock-chaos")
        .build()?;
    let client = LockClient::new(backend.clone(), options);
    let canary_name = LockName::new(unique("r11-round-canary"))?;
    let canary = client
        .acquire_with(&canary_name, Duration::from_secs(30))
        .await?;
    let canary_token = canary.fencing_token();

    let mut valid = Vec::new();
    let mut seen = HashSet::new();
    for text in raw {
        found.generated += 1;
        let should_pass = !text.is_empty() && text.len() <= MAX_NAME_LEN;
        match LockName::new(&text) {
            Ok(name) if should_pass => {
                if seen.insert(name.clone()) {
                    valid.push(name);
                }
            }
            Err(Error::InvalidName { .. }) if !should_pass => found.refused += 1,
            outcome => found.misjudged.push(format!(
                "{} of {} bytes: {}",
                shown(&text),
                text.len(),
                match outcome {
                    Ok(_) => "accepted".to_owned(),
                    Err(error) => format!("refused: {error}"),
                }
            )),
        }
    }

    let phase = Instant::now();
    let limit = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut taking = JoinSet::new();
    for name in valid {
        let (client, limit) = (client.clone(), limit.clone());
        taking.spawn(async move {
            let _permit = limit.acquire_owned().await;
            let outcome = client.try_acquire(&name).await;
            (name, outcome)
        });
    }
    let mut held: HashMap<LockName, LockGuard> = HashMap::new();
    while let Some(taken) = taking.join_next().await {
        match taken? {
            (name, Ok(Some(guard))) => {
                found.granted += 1;
                held.insert(name, guard);
            }
            (name, Ok(None)) => found
                .not_granted
                .push(format!("{} was held", shown(name.as_str()))),
            (name, Err(error)) => found
                .not_granted
                .push(format!("{}: {error}", shown(name.as_str()))),
        }
    }

    found.taking += phase.elapsed();

    let phase = Instant::now();
    let listed = backend.list(ADMIN_LIMIT).await?;
    found.listing += phase.elapsed();
    let mut listed_names = HashSet::new();
    let mut canary_listed = false;
    for info in &listed {
        if info.name == canary_name {
            canary_listed = info.fencing_token.is_none_or(|token| token == canary_token);
        } else if held.contains_key(&info.name) {
            listed_names.insert(info.name.clone());
        } else {
            found
                .strays
                .push(format!("{} listed", shown(info.name.as_str())));
        }
    }
    for name in held.keys() {
        if !listed_names.contains(name) {
            found
                .unlisted
                .push(format!("{} not listed", shown(name.as_str())));
        }
    }

    let phase = Instant::now();
    let mut releasing = JoinSet::new();
    for (name, guard) in held {
        let limit = limit.clone();
        releasing.spawn(async move {
            let _permit = limit.acquire_owned().await;
            (name, guard.release().await)
        });
    }
    while let Some(released) = releasing.join_next().await {
        match released? {
            (_, Ok(true)) => {}
            (name, outcome) => found
                .bad_releases
                .push(format!("{}: {outcome:?}", shown(name.as_str()))),
        }
    }
    found.releasing += phase.elapsed();

    let intact = canary_listed && !canary.is_lost() && matches!(canary.release().await, Ok(true));
    found.round_canaries_disturbed += usize::from(!intact);
    Ok(())
}

/// A name for a report: escaped, and cut short.
fn shown(name: &str) -> String {
    let escaped = format!("{name:?}");
    match escaped.char_indices().nth(60) {
        Some((end, _)) => format!("{}…\"", &escaped[..end]),
        None => escaped,
    }
}

/// Stores an item that never expires on the campaign's memcached, which a
/// `flush_all` (or any stray command) would delete or change.
fn store_canary_item(server: &Server) -> Outcome<(String, String)> {
    let key = unique("r11-canary-item");
    let value = unique("still-here");
    let reply = memcached_text(
        &server.address(),
        format!("set {key} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes(),
        |line| !line.is_empty(),
    )?;
    if reply.trim_end() != "STORED" {
        return Err(format!("memcached answered {reply:?} to storing the canary item").into());
    }
    Ok((key, value))
}

fn canary_item_intact(server: &Server, key: &str, value: &str) -> Outcome<bool> {
    let reply = memcached_text(
        &server.address(),
        format!("get {key}\r\n").as_bytes(),
        |line| line == "END",
    )?;
    Ok(reply == format!("VALUE {key} 0 {}\r\n{value}\r\nEND\r\n", value.len()))
}

/// The pieces names are made of.
const PIECES: &[&str] = &[
    "$",
    ".",
    "$$NOW",
    "$where",
    "$set",
    "\0",
    "\r",
    "\n",
    "\r\n",
    "flush_all",
    "\r\nflush_all\r\n",
    "flush_all\r\n",
    "{}",
    "{",
    "}",
    "{\"$gt\":\"\"}",
    "\"",
    "'",
    "`",
    " ",
    "\t",
    "%",
    "%00",
    "%0D%0A",
    "%25",
    "/",
    "\\",
    "..",
    "../",
    "*",
    "?",
    "#",
    "=",
    "&",
    ":",
    "@",
    ",",
    "L=",
    "T#",
    "lock:",
    "é",
    "ß",
    "日本語",
    "🦀",
    "👩‍👩‍👧",
    "\u{202e}",
    "\u{200b}",
    "\u{feff}",
    "e\u{301}",
    "\u{7f}",
    "\u{85}",
    "a",
    "Z",
    "0",
    "9",
];

/// A fixed-seed generator of names (splitmix64), so that every run tries
/// the same ones.
struct Names {
    state: u64,
}

impl Names {
    fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next_u64() % bound as u64) as usize
    }

    /// How long the next name is, in bytes: mostly short; many around
    /// memcached's 250-byte keys; many near 1 KiB, and just over.
    fn length(&mut self) -> usize {
        match self.below(100) {
            0 => 0,
            1 => MAX_NAME_LEN,
            2 => MAX_NAME_LEN + 1,
            3..=42 => 1 + self.below(32),
            43..=62 => 33 + self.below(230),
            63..=72 => 235 + self.below(30),
            73..=87 => MAX_NAME_LEN - 30 + self.below(31),
            _ => MAX_NAME_LEN + 1 + self.below(80),
        }
    }

    /// The next name: pieces and random characters up to its length, then
    /// ASCII to make the length exact.
    fn next(&mut self) -> String {
        let length = self.length();
        let mut name = String::with_capacity(length);
        loop {
            let piece = match self.below(10) {
                0..=5 => PIECES[self.below(PIECES.len())].to_owned(),
                6 | 7 => char::from(b' ' + self.below(95) as u8).to_string(),
                _ => self.any_char().to_string(),
            };
            if name.len() + piece.len() > length {
                break;
            }
            name.push_str(&piece);
        }
        while name.len() < length {
            name.push(char::from(b'!' + self.below(94) as u8));
        }
        name
    }

    /// Any Unicode scalar value, control characters and private use
    /// included.
    fn any_char(&mut self) -> char {
        loop {
            let limit = match self.below(4) {
                0 => 0x80,
                1 => 0x800,
                2 => 0x1_0000,
                _ => 0x11_0000,
            };
            if let Some(c) = char::from_u32(self.below(limit) as u32) {
                return c;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_same_every_run_and_reach_every_length() {
        let mut one = Names::new(7);
        let mut two = Names::new(7);
        let names: Vec<String> = (0..5_000).map(|_| one.next()).collect();
        assert!(names.iter().all(|name| *name == two.next()));
        for length in [0, MAX_NAME_LEN, MAX_NAME_LEN + 1] {
            assert!(names.iter().any(|name| name.len() == length), "{length}");
        }
        assert!(names.iter().any(|name| name.contains('\0')));
        assert!(names.iter().any(|name| name.contains("\r\nflush_all\r\n")));
        assert!(names.iter().all(|name| name.len() <= MAX_NAME_LEN + 80));
    }
}
