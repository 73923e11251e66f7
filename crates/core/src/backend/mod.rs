//! What backend authors need, complete in one module: the [`Backend`]
//! trait, the abilities a backend may add to it, and the values it
//! exchanges with core.
//!
//! A backend only tries once, extends, releases and lists. Waiting,
//! timeouts, cancellation, background extension and loss detection are
//! written once, in [`LockClient`](crate::LockClient). The `distlock`
//! crate re-exports this module whole as `distlock::backend`;
//! `docs/writing-a-backend.md` is the guide to it.
//!
//! # What is here
//! - The contract: [`Backend`], with [`AcquireRequest`], [`Attempt`],
//!   [`Lease`], [`LeaseId`], [`Extended`] and [`Capabilities`].
//! - The abilities a backend may add, in [`Abilities`]: [`HandOvers`],
//!   [`DelayedRelease`], [`Resumes`],
//!   [`Session`], [`Wakeups`] and [`WaiterList`].
//! - What a backend keeps beside a grant or a wait: [`GrantState`],
//!   [`WaitState`], and the caller's [`Payload`].
//! - The record of leaders' terms: [`TermLog`] and [`Term`].
//! - Reporting a loss ([`LossReporter`]), waking waiters ([`ReleaseHub`]),
//!   the fencing token's floor ([`token_floor`]), listing ([`LockInfo`],
//!   [`Holder`]) and server information ([`ServerInfo`]).
//! - Reading URLs, below.
//!
//! # Reading URLs
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

pub(crate) mod abilities;
pub(crate) mod capabilities;
pub(crate) mod contract;
pub(crate) mod loss;
pub mod platform;
pub(crate) mod request;
pub(crate) mod resumes;
pub(crate) mod server_info;
pub(crate) mod state;
pub(crate) mod terms;
pub(crate) mod token;
pub(crate) mod urls;
pub(crate) mod waiters;
pub(crate) mod wake;

/// The attribute backends put on their [`Backend`] impl.
pub use async_trait::async_trait;

pub use abilities::{
    Abilities, DelayedRelease, HandOvers, ReleaseLater, Renewal, Session, SessionId, Wakeups,
};
pub use capabilities::Capabilities;
pub use contract::{Backend, BackendExt, Extended};
pub use loss::LossReporter;
pub use request::{AcquireRequest, Attempt, HandOver, Lease, LeaseId};
pub use resumes::{Resumes, Resuming};
pub use server_info::{Feature, FeatureState, ServerInfo};
pub use state::{GrantState, Payload, WaitState};
pub use terms::{TERMS_KEPT, Term, TermLog, withdraw_term};
pub use token::token_floor;
pub use urls::{
    BadEscape, BadHost, HostPort, Query, QueryPair, UrlParts, parse_hosts, percent_decode, redact,
    secret_options, user_info,
};
pub use waiters::WaiterList;
pub use wake::{ReleaseHub, ReleaseWatch};

// What a backend reports in answers, which users read too.
pub use crate::info::{Holder, LockInfo, Waiter, Waiters};
