//! distlock MongoDB backend (being written).
