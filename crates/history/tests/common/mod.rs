//! Short builders for hand-made histories: times are nanoseconds, names
//! and resources plain strings.

#![allow(dead_code, unreachable_pub)]

use distlock_history::{Acquired, Call, Done, History, Op, Read, Share};

pub fn granted(process: u64, invoke: u64, complete: u64, name: &str, token: u64) -> Op {
    Op::new(
        process,
        invoke,
        complete,
        Call::Acquire {
            name: name.into(),
            outcome: Acquired::Granted { token },
        },
    )
}

pub fn not_granted(process: u64, invoke: u64, complete: u64, name: &str) -> Op {
    Op::new(
        process,
        invoke,
        complete,
        Call::Acquire {
            name: name.into(),
            outcome: Acquired::NotGranted,
        },
    )
}

/// An acquire that never answered.
pub fn acquiring(process: u64, invoke: u64, name: &str) -> Op {
    Op::pending(
        process,
        invoke,
        Call::Acquire {
            name: name.into(),
            outcome: Acquired::Unknown,
        },
    )
}

pub fn release(
    process: u64,
    invoke: u64,
    complete: u64,
    name: &str,
    token: u64,
    outcome: Done,
) -> Op {
    Op::new(
        process,
        invoke,
        complete,
        Call::Release {
            name: name.into(),
            token,
            outcome,
        },
    )
}

/// A release that never answered.
pub fn releasing(process: u64, invoke: u64, name: &str, token: u64) -> Op {
    Op::pending(
        process,
        invoke,
        Call::Release {
            name: name.into(),
            token,
            outcome: Done::Unknown,
        },
    )
}

pub fn extend(
    process: u64,
    invoke: u64,
    complete: u64,
    name: &str,
    token: u64,
    outcome: Done,
) -> Op {
    Op::new(
        process,
        invoke,
        complete,
        Call::Extend {
            name: name.into(),
            token,
            outcome,
        },
    )
}

/// An administrator's release of `name` from whoever holds it.
pub fn forced(process: u64, invoke: u64, complete: u64, name: &str, outcome: Done) -> Op {
    Op::new(
        process,
        invoke,
        complete,
        Call::ForceRelease {
            name: name.into(),
            outcome,
        },
    )
}

pub fn write(
    process: u64,
    invoke: u64,
    complete: u64,
    resource: &str,
    token: u64,
    value: u64,
    outcome: Done,
) -> Op {
    Op::new(
        process,
        invoke,
        complete,
        Call::FencedWrite {
            resource: resource.into(),
            token,
            value,
            outcome,
        },
    )
}

/// A write that never answered.
pub fn writing(process: u64, invoke: u64, resource: &str, token: u64, value: u64) -> Op {
    Op::pending(
        process,
        invoke,
        Call::FencedWrite {
            resource: resource.into(),
            token,
            value,
            outcome: Done::Unknown,
        },
    )
}

pub fn read(
    process: u64,
    invoke: u64,
    complete: u64,
    resource: &str,
    token: Option<u64>,
    outcome: Read,
) -> Op {
    Op::new(
        process,
        invoke,
        complete,
        Call::FencedRead {
            resource: resource.into(),
            token,
            outcome,
        },
    )
}

/// A validity of lease `token` from `from` to `until`.
pub fn held(process: u64, from: u64, until: u64, name: &str, token: u64, share: Share) -> Op {
    Op::held(process, from, until, name, token, share)
}

pub fn history(ops: impl IntoIterator<Item = Op>) -> History {
    History::from_ops(ops).expect("a well-formed history")
}
