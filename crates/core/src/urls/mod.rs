//! Reading backend URLs, written once for every backend.
//!
//! - [`UrlParts`] cuts a URL into scheme, user information, host list,
//!   path, query and fragment, without decoding anything.
//! - [`Query`] reads the query: each `key=value` pair decoded, distlock's
//!   options taken out by name, the rest refused by name or handed on to
//!   a driver as written.
//! - [`parse_hosts`] reads a host list, `host[:port][,host[:port]…]`, with
//!   IPv6 addresses in brackets.
//! - [`percent_decode`] decodes one part, such as a password.
//! - [`redact`], [`secret_options`] and [`user_info`] keep credentials out
//!   of messages.
//!
//! # How a `+` and an escape are read
//! A `+` is a plus sign everywhere in a URL, the query included; a space
//! is written `%20`. That is how every driver we hand a URL to reads it:
//! libpq and `tokio-postgres` decode only `%XX` escapes, and so does the
//! `mongodb` crate's connection-string parser, as the MongoDB
//! connection-string specification asks. Reading `+` as a space, as HTML
//! forms do (`application/x-www-form-urlencoded`), would make one URL mean
//! two things: `?table=a+b` would name the table `a b` for distlock while
//! the driver's options beside it read `a+b`. etcd's and memcached's URLs
//! are distlock's own, and read the same way, so a value means the same on
//! every backend.
//!
//! The rest follows libpq, the strictest of the drivers, so that nothing
//! distlock accepts is read otherwise by a driver:
//! - a `%` must start a two-hex-digit escape, and the decoded text must be
//!   UTF-8, without a NUL (`%00`): otherwise the option is refused by name;
//! - keys are decoded as values are;
//! - a pair without `=` is refused; empty pairs (`a=1&&b=2`, a trailing
//!   `&`) are skipped;
//! - a key given twice is refused by name, whoever reads it: distlock's
//!   own options through [`Query::take`], a driver's through
//!   [`Query::refuse_repeats`], which lets through only what a driver
//!   defines as a list (MongoDB's `readPreferenceTags`).
//!
//! The `url` crate is not used: most of our URLs list several hosts, which
//! it does not parse, and it would add some thirty crates (IDNA tables) to
//! the default build for the one URL it could read, `file://`.

mod escapes;
mod hosts;
mod parts;
mod query;
mod redact;

pub use escapes::{BadEscape, percent_decode};
pub use hosts::{BadHost, HostPort, parse_hosts};
pub use parts::UrlParts;
pub use query::{Query, QueryPair};
pub use redact::{redact, secret_options, user_info};
