//! The proxy against real servers on loopback: each fault, resets, and
//! the proxy's lifecycle.

mod blackhole;
mod delay;
mod drop;
mod lifecycle;
mod pass_through;
mod refuse;
mod reset;
mod support;
