//! The campaign's short form, as CI runs it: every scenario on every
//! backend, judged only on overlaps, lost updates, token order and the
//! histories' linearizability (never on timings). The servers come from `scripts/test`; without them the
//! campaign fails, so a missing server never passes silently.

mod support;

/// Every scenario's id.
const SCENARIOS: [&str; 15] = [
    "R1", "R2", "R3", "R4", "R5", "R6", "R7", "R8", "R9", "R10", "R11", "R12", "R13", "R14", "R15",
];

/// The short form on `backend`.
fn short_form(backend: &str) {
    let (status, written) = support::short_form(backend, &SCENARIOS);
    assert!(
        status.success(),
        "the short form on {backend} found a violation ({status}):\n{written}"
    );
    assert!(written.contains("| held |"), "{written}");
}

#[test]
fn the_short_form_holds_on_the_file_backend() {
    short_form("file");
}

#[test]
fn the_short_form_holds_on_mongodb() {
    short_form("mongodb");
}

#[test]
fn the_short_form_holds_on_memcached() {
    short_form("memcached");
}

#[test]
fn the_short_form_holds_on_etcd() {
    short_form("etcd");
}

#[test]
fn the_short_form_holds_on_postgresql() {
    short_form("postgresql");
}

#[test]
fn the_short_form_holds_on_postgresql_advisory_mode() {
    short_form("postgresql-advisory");
}

#[test]
fn the_short_form_holds_on_redis() {
    short_form("redis");
}

#[test]
fn the_short_form_holds_on_redis_without_persistence() {
    short_form("redis-volatile");
}

#[test]
fn the_short_form_holds_on_redis_in_quorum_mode() {
    short_form("redis-quorum");
}

#[test]
fn the_short_form_holds_on_a_redis_cluster() {
    short_form("redis-cluster");
}

#[test]
fn the_short_form_holds_on_object_storage_on_azurite() {
    short_form("objectstore-azure");
}

#[test]
fn the_short_form_holds_on_object_storage_on_s3() {
    short_form("objectstore-s3");
}

#[test]
fn the_short_form_holds_on_mongodb_in_fair_mode() {
    short_form("mongodb-fair");
}

#[test]
fn the_short_form_holds_on_etcd_in_fair_mode() {
    short_form("etcd-fair");
}

#[test]
fn the_short_form_holds_on_postgresql_in_fair_mode() {
    short_form("postgresql-fair");
}

#[test]
fn the_short_form_holds_on_postgresql_advisory_mode_in_fair_mode() {
    short_form("postgresql-advisory-fair");
}
