//! Reading backend URLs, written once for every backend: see
//! [the module's docs](super#reading-urls).

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
