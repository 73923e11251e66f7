//! The `distlock` command (being written).

fn main() {}
