//! The scenarios, each in a module of its own, and their list. What the
//! scenarios share lives beside them: the campaign's [`Settings`], holder
//! processes in [`holder`](crate::holder), each run's name and directory
//! in [`scratch`](crate::scratch), and the lock kinds a backend grants in
//! [`kinds`].

mod churn;
mod clock_shift;
mod delayed_write;
mod failover;
mod forced;
mod kill;
mod kinds;
mod lost_ack;
mod memcached_edges;
mod names;
mod network;
mod pause;
mod resume;
mod secrets;
mod server_clock;
mod slow_renewal;
mod tokens;

use crate::campaign::Server;
use crate::outcome::Outcome;
use crate::report::{Row, ScenarioInfo};
use crate::settings::Settings;

/// A scenario: what it is, and how it runs on one backend.
pub(crate) struct Scenario {
    pub(crate) info: ScenarioInfo,
    pub(crate) run: fn(&mut Server, &Settings) -> Outcome<Vec<Row>>,
}

/// Every scenario, in order.
pub(crate) fn all() -> Vec<Scenario> {
    vec![
        churn::SCENARIO,
        pause::SCENARIO,
        delayed_write::SCENARIO,
        kill::SCENARIO,
        lost_ack::SCENARIO,
        failover::SCENARIO,
        tokens::SCENARIO,
        clock_shift::SCENARIO,
        slow_renewal::SCENARIO,
        memcached_edges::SCENARIO,
        names::SCENARIO,
        secrets::SCENARIO,
        server_clock::SCENARIO,
        forced::SCENARIO,
        resume::SCENARIO,
    ]
}
