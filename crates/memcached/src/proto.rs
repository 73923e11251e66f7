//! The memcached 1.6 meta protocol: building commands and parsing replies.
//!
//! Only what the backend needs: `mg`, `ms`, `md`, `ma`, `mn` and `stats`.
//! Everything here is pure, so it is tested without a server.
//!
//! Safety of the wire format rests on three rules:
//! - keys are [`Key`]s, which hold only printable ASCII without spaces and
//!   at most [`MAX_KEY_LEN`] bytes, so a key is always exactly one token;
//! - flags are written by this crate from numbers and fixed letters, never
//!   from user input;
//! - values travel as length-prefixed data blocks, so their bytes (`\r\n`
//!   included) are never read as commands.

use std::fmt;
use std::io::Write as _;

use smallvec::SmallVec;

/// The longest key memcached accepts, in bytes.
pub(crate) const MAX_KEY_LEN: usize = 250;

/// The longest reply line accepted before the reply is judged malformed.
const MAX_LINE: usize = 8 * 1024;

/// The largest value accepted in a reply (memcached's default item limit is
/// 1 MiB).
const MAX_VALUE: usize = 16 * 1024 * 1024;

/// A memcached key: 1 to 250 bytes of printable ASCII, no spaces.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct Key(String);

impl Key {
    /// `text` as a key, or `None` if memcached would not read it as one key.
    pub(crate) fn new(text: String) -> Option<Self> {
        let ok = !text.is_empty()
            && text.len() <= MAX_KEY_LEN
            && text.bytes().all(|b| b.is_ascii_graphic());
        ok.then_some(Self(text))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// What kind of reply a command gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expect {
    /// One meta reply (`HD`, `VA`, `EN`, `NS`, `EX`, `NF`, `MN`).
    Meta,
    /// `STAT name value` lines up to `END`.
    Stats,
}

/// Commands to send together in one write, with the replies they expect,
/// in order.
#[derive(Debug, Default, Clone)]
pub(crate) struct Batch {
    bytes: Vec<u8>,
    expect: Vec<Expect>,
}

impl Batch {
    pub(crate) fn new() -> Self {
        // Room for a lock's store and the counter's increment, so that
        // building the common batches takes one allocation, not a few.
        Self {
            bytes: Vec::with_capacity(256),
            expect: Vec::with_capacity(2),
        }
    }

    /// `mg <key> <flags>`.
    pub(crate) fn mg(mut self, key: &Key, flags: impl fmt::Display) -> Self {
        self.line("mg", key, None, flags);
        self
    }

    /// `ms <key> <len> <flags>` and the value as a data block.
    pub(crate) fn ms(mut self, key: &Key, value: &[u8], flags: impl fmt::Display) -> Self {
        self.line("ms", key, Some(value.len()), flags);
        self.bytes.extend_from_slice(value);
        self.bytes.extend_from_slice(b"\r\n");
        self
    }

    /// `md <key> <flags>`.
    pub(crate) fn md(mut self, key: &Key, flags: impl fmt::Display) -> Self {
        self.line("md", key, None, flags);
        self
    }

    /// `ma <key> <flags>`.
    pub(crate) fn ma(mut self, key: &Key, flags: impl fmt::Display) -> Self {
        self.line("ma", key, None, flags);
        self
    }

    /// `mn`: answers `MN`, to check that a server speaks the meta protocol.
    pub(crate) fn mn(mut self) -> Self {
        self.bytes.extend_from_slice(b"mn\r\n");
        self.expect.push(Expect::Meta);
        self
    }

    /// `stats`.
    pub(crate) fn stats(mut self) -> Self {
        self.bytes.extend_from_slice(b"stats\r\n");
        self.expect.push(Expect::Stats);
        self
    }

    /// `stats settings`: how the server was started (`evictions`, …).
    pub(crate) fn stats_settings(mut self) -> Self {
        self.bytes.extend_from_slice(b"stats settings\r\n");
        self.expect.push(Expect::Stats);
        self
    }

    /// Writes `<command> <key>[ <len>][ <flags>]\r\n`. The flags are
    /// formatted straight into the buffer: this is on every operation's path.
    fn line(&mut self, command: &str, key: &Key, len: Option<usize>, flags: impl fmt::Display) {
        self.bytes.extend_from_slice(command.as_bytes());
        self.bytes.push(b' ');
        self.bytes.extend_from_slice(key.as_str().as_bytes());
        if let Some(len) = len {
            write!(self.bytes, " {len}").expect("writing to memory cannot fail");
        }
        let start = self.bytes.len();
        write!(self.bytes, " {flags}").expect("writing to memory cannot fail");
        if self.bytes.len() == start + 1 {
            // No flags: no separator either.
            self.bytes.pop();
        }
        debug_assert!(
            self.bytes[start..]
                .iter()
                .all(|&b| b == b' ' || b.is_ascii_graphic()),
            "flags are written by this crate: {:?}",
            String::from_utf8_lossy(&self.bytes[start..])
        );
        self.bytes.extend_from_slice(b"\r\n");
        self.expect.push(Expect::Meta);
    }

    #[cfg(test)]
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    #[cfg(test)]
    pub(crate) fn expect(&self) -> &[Expect] {
        &self.expect
    }

    pub(crate) fn into_parts(self) -> (Vec<u8>, Vec<Expect>) {
        (self.bytes, self.expect)
    }
}

/// The two-letter code of a meta reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Code {
    /// Success, no value.
    Hd,
    /// Success, with a value.
    Va,
    /// Miss (`mg`).
    En,
    /// Not stored (`ms` in add mode on an existing key, `ma` autovivify).
    Ns,
    /// The compare-and-swap value did not match.
    Ex,
    /// Not found.
    Nf,
    /// The answer to `mn`.
    Mn,
    /// Not a meta reply but `SERVER_ERROR`: the server could not carry the
    /// command out (out of memory, an item too large); the message is the
    /// reply's value. A store refused so has deleted the key's item.
    ServerError,
}

/// A meta reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reply {
    pub(crate) code: Code,
    /// The returned flags, as sent (`c123 t45`): ASCII.
    flags: Inline,
    /// The data block of a `VA` reply, or a `SERVER_ERROR`'s message.
    pub(crate) value: Option<Inline>,
}

/// Bytes of a reply, kept inline when short, as flags and counters are:
/// every command gets a reply, and most would otherwise allocate.
pub(crate) type Inline = SmallVec<[u8; 32]>;

impl Reply {
    /// A command's `SERVER_ERROR`, as a reply of its own.
    pub(crate) fn server_error(message: &str) -> Self {
        Self {
            code: Code::ServerError,
            flags: Inline::new(),
            value: Some(Inline::from_slice(message.as_bytes())),
        }
    }

    /// The token of the returned flag `letter` (`c` in `c123` gives `123`).
    pub(crate) fn flag(&self, letter: char) -> Option<&str> {
        std::str::from_utf8(&self.flags)
            .ok()?
            .split(' ')
            .find_map(|token| token.strip_prefix(letter))
    }

    /// The returned flag `letter` as a number.
    pub(crate) fn flag_u64(&self, letter: char) -> Option<u64> {
        self.flag(letter)?.parse().ok()
    }

    /// The returned flag `letter` as a signed number (`t-1`).
    pub(crate) fn flag_i64(&self, letter: char) -> Option<i64> {
        self.flag(letter)?.parse().ok()
    }

    /// The value as an unsigned number, as `ma … v` returns it.
    pub(crate) fn number(&self) -> Option<u64> {
        std::str::from_utf8(self.value.as_deref()?)
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

/// A parsed reply to one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    Meta(Reply),
    Stats(Vec<(String, String)>),
}

/// The server refused a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// `ERROR`: an unknown command.
    Unknown,
    /// `CLIENT_ERROR <message>`: the command was malformed. The server may
    /// have lost track of the stream, so the connection is closed after it.
    Client(String),
    /// `SERVER_ERROR <message>`: the server could not carry it out (out of
    /// memory, …).
    Server(String),
}

impl Refusal {
    /// Whether the connection should be dropped after this refusal.
    pub(crate) fn poisons_connection(&self) -> bool {
        !matches!(self, Self::Server(_))
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unknown => {
                f.write_str("ERROR (unknown command: is this memcached 1.6 or later?)")
            }
            Self::Client(message) => write!(f, "CLIENT_ERROR {message}"),
            Self::Server(message) => write!(f, "SERVER_ERROR {message}"),
        }
    }
}

/// One command's outcome as the server gave it.
pub(crate) type Outcome = Result<Answer, Refusal>;

/// The byte stream cannot be a memcached reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Malformed(pub(crate) String);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed reply: {}", self.0)
    }
}

/// Parses one reply of kind `expect` from the front of `buf`. Returns how
/// many bytes it took and the outcome, or `None` when more bytes are needed.
pub(crate) fn parse(buf: &[u8], expect: Expect) -> Result<Option<(usize, Outcome)>, Malformed> {
    let Some((line, mut used)) = next_line(buf)? else {
        return Ok(None);
    };
    if let Some(refusal) = refusal(line) {
        return Ok(Some((used, Err(refusal))));
    }
    match expect {
        Expect::Meta => {
            let (code, rest) = split_code(line)?;
            let (value, flags) = if code == Code::Va {
                let (size, flags) = rest.split_once(' ').unwrap_or((rest, ""));
                let size: usize = size
                    .parse()
                    .map_err(|_| Malformed(format!("bad value size in {line:?}")))?;
                if size > MAX_VALUE {
                    return Err(Malformed(format!("value of {size} bytes is too large")));
                }
                let end = used + size + 2;
                if buf.len() < end {
                    return Ok(None);
                }
                if &buf[used + size..end] != b"\r\n" {
                    return Err(Malformed("a data block does not end in CRLF".into()));
                }
                let value = Inline::from_slice(&buf[used..used + size]);
                used = end;
                (Some(value), flags)
            } else {
                (None, rest)
            };
            let reply = Reply {
                code,
                flags: Inline::from_slice(flags.as_bytes()),
                value,
            };
            Ok(Some((used, Ok(Answer::Meta(reply)))))
        }
        Expect::Stats => {
            let mut stats = Vec::new();
            let mut line = line;
            loop {
                if line == "END" {
                    return Ok(Some((used, Ok(Answer::Stats(stats)))));
                }
                let Some(stat) = line.strip_prefix("STAT ") else {
                    return Err(Malformed(format!("unexpected line in stats: {line:?}")));
                };
                let (name, value) = stat.split_once(' ').unwrap_or((stat, ""));
                stats.push((name.to_owned(), value.to_owned()));
                let Some((next, len)) = next_line(&buf[used..])? else {
                    return Ok(None);
                };
                line = next;
                used += len;
            }
        }
    }
}

/// The first line of `buf` without its CRLF, and its length with it.
fn next_line(buf: &[u8]) -> Result<Option<(&str, usize)>, Malformed> {
    let Some(end) = buf.windows(2).position(|pair| pair == b"\r\n") else {
        if buf.len() > MAX_LINE {
            return Err(Malformed(format!("no line end within {MAX_LINE} bytes")));
        }
        return Ok(None);
    };
    let line = std::str::from_utf8(&buf[..end])
        .map_err(|_| Malformed("a reply line is not UTF-8".into()))?;
    Ok(Some((line, end + 2)))
}

fn refusal(line: &str) -> Option<Refusal> {
    if line == "ERROR" {
        return Some(Refusal::Unknown);
    }
    if let Some(message) = line.strip_prefix("CLIENT_ERROR") {
        return Some(Refusal::Client(message.trim().to_owned()));
    }
    if let Some(message) = line.strip_prefix("SERVER_ERROR") {
        return Some(Refusal::Server(message.trim().to_owned()));
    }
    None
}

fn split_code(line: &str) -> Result<(Code, &str), Malformed> {
    let (code, rest) = line.split_once(' ').unwrap_or((line, ""));
    let code = match code {
        "HD" => Code::Hd,
        "VA" => Code::Va,
        "EN" => Code::En,
        "NS" => Code::Ns,
        "EX" => Code::Ex,
        "NF" => Code::Nf,
        "MN" => Code::Mn,
        _ => return Err(Malformed(format!("unknown reply {line:?}"))),
    };
    Ok((code, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(text: &str) -> Key {
        Key::new(text.to_owned()).unwrap()
    }

    fn meta(buf: &[u8]) -> (usize, Reply) {
        match parse(buf, Expect::Meta).unwrap().unwrap() {
            (used, Ok(Answer::Meta(reply))) => (used, reply),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn keys_are_single_printable_tokens() {
        assert!(Key::new("lock:L=a".into()).is_some());
        for bad in ["", "a b", "a\r\nb", "a\0", "é", "a\t"] {
            assert!(Key::new(bad.into()).is_none(), "{bad:?}");
        }
        assert!(Key::new("k".repeat(250)).is_some());
        assert!(Key::new("k".repeat(251)).is_none());
    }

    #[test]
    fn batches_write_commands_in_order() {
        let batch = Batch::new()
            .ms(&key("a"), b"x\r\ny", "ME T2 c")
            .ma(&key("t"), "N0 J5 v")
            .mg(&key("a"), "t")
            .md(&key("a"), "C7")
            .mn()
            .stats();
        assert_eq!(
            batch.bytes(),
            b"ms a 4 ME T2 c\r\nx\r\ny\r\nma t N0 J5 v\r\nmg a t\r\nmd a C7\r\nmn\r\nstats\r\n"
        );
        assert_eq!(batch.expect().len(), 6);
        assert_eq!(batch.expect()[5], Expect::Stats);
    }

    #[test]
    fn parses_status_replies_with_flags() {
        let (used, reply) = meta(b"HD c42 t-1\r\nrest");
        assert_eq!(used, 12);
        assert_eq!(reply.code, Code::Hd);
        assert_eq!(reply.flag_u64('c'), Some(42));
        assert_eq!(reply.flag_i64('t'), Some(-1));
        assert_eq!(reply.flag('x'), None);
        for (text, code) in [
            ("EN", Code::En),
            ("NS c0", Code::Ns),
            ("EX", Code::Ex),
            ("NF", Code::Nf),
            ("MN", Code::Mn),
        ] {
            let line = format!("{text}\r\n");
            assert_eq!(meta(line.as_bytes()).1.code, code);
        }
    }

    #[test]
    fn parses_values_containing_line_ends() {
        let (used, reply) = meta(b"VA 4 c9\r\na\r\nb\r\nnext");
        assert_eq!(used, 15);
        assert_eq!(reply.value.as_deref(), Some(&b"a\r\nb"[..]));
        assert_eq!(reply.flag_u64('c'), Some(9));
        let (_, number) = meta(b"VA 4\r\n1001\r\n");
        assert_eq!(number.number(), Some(1001));
    }

    #[test]
    fn waits_for_whole_replies() {
        for partial in [&b""[..], b"HD", b"HD c1\r", b"VA 3\r\nab", b"VA 3\r\nabc\r"] {
            assert_eq!(parse(partial, Expect::Meta).unwrap(), None, "{partial:?}");
        }
        assert_eq!(
            parse(b"STAT pid 1\r\nSTAT cmd_flush 0\r\n", Expect::Stats).unwrap(),
            None
        );
    }

    #[test]
    fn parses_stats() {
        let buf = b"STAT pid 1\r\nSTAT version 1.6.18\r\nEND\r\nHD\r\n";
        let (used, outcome) = parse(buf, Expect::Stats).unwrap().unwrap();
        assert_eq!(used, buf.len() - 4);
        let Ok(Answer::Stats(stats)) = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(stats[1], ("version".into(), "1.6.18".into()));
    }

    #[test]
    fn refusals_are_outcomes_not_malformed() {
        let cases = [
            (&b"ERROR\r\n"[..], Refusal::Unknown),
            (
                b"CLIENT_ERROR bad command line format\r\n",
                Refusal::Client("bad command line format".into()),
            ),
            (
                b"SERVER_ERROR out of memory storing object\r\n",
                Refusal::Server("out of memory storing object".into()),
            ),
        ];
        for (buf, expected) in cases {
            let (used, outcome) = parse(buf, Expect::Meta).unwrap().unwrap();
            assert_eq!(used, buf.len());
            assert_eq!(outcome, Err(expected.clone()));
            assert_eq!(
                expected.poisons_connection(),
                !matches!(expected, Refusal::Server(_))
            );
        }
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse(b"HELLO\r\n", Expect::Meta).is_err());
        assert!(parse(b"VA x\r\n", Expect::Meta).is_err());
        assert!(parse(b"VA 1\r\nabc\r\n", Expect::Meta).is_err());
        assert!(parse(&[b'a'; MAX_LINE + 1], Expect::Meta).is_err());
        assert!(parse(b"HD\r\n", Expect::Stats).is_err());
    }
}
