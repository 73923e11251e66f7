//! The backends the campaign runs against, each described once, in a
//! module of its own: how its server starts, how a client reaches it, and
//! what the scenarios must know of it. A backend joins the campaign with
//! its module here and one line in [`ALL`]; what it does not say, the
//! trait's defaults say for it.

mod etcd;
mod file;
mod form;
mod memcached;
mod mongodb;
mod objectstore;
mod postgres;
mod redis;

use std::sync::Arc;
use std::time::Duration;

use distlock::LockName;
use distlock::testing::Mutation;

use crate::campaign::Kind;
use crate::outcome::Outcome;

pub(crate) use memcached::MEMCACHED;

/// Every backend the campaign runs against, in report order.
pub(crate) const ALL: [Kind; 16] = [
    &file::FILE,
    &mongodb::MONGODB,
    &memcached::MEMCACHED,
    &etcd::ETCD,
    &postgres::POSTGRES,
    &postgres::POSTGRES_ADVISORY,
    &redis::REDIS,
    &redis::REDIS_VOLATILE,
    &redis::REDIS_QUORUM,
    &redis::REDIS_CLUSTER,
    &objectstore::AZURE,
    &objectstore::S3,
    &MONGODB_FAIR,
    &ETCD_FAIR,
    &POSTGRES_FAIR,
    &POSTGRES_ADVISORY_FAIR,
];

/// The backends with a fair mode, in it.
const MONGODB_FAIR: form::Form =
    form::Form::fair(&mongodb::MONGODB, "MongoDB, fair", "mongodb-fair");
const ETCD_FAIR: form::Form = form::Form::fair(&etcd::ETCD, "etcd, fair", "etcd-fair");
const POSTGRES_FAIR: form::Form =
    form::Form::fair(&postgres::POSTGRES, "PostgreSQL, fair", "postgresql-fair");
const POSTGRES_ADVISORY_FAIR: form::Form = form::Form::fair(
    &postgres::POSTGRES_ADVISORY,
    "PostgreSQL, advisory mode, fair",
    "postgresql-advisory-fair",
);

/// Redis (one server, its data persisted) opened through each mutant of
/// `crate::mutants`: R1 must fail on every one. Not in [`ALL`].
pub(crate) const MUTANTS: [Kind; 5] = [
    &form::Form::mutant(&redis::REDIS, "mutant-grants-everyone", |url| {
        crate::mutants::dress(Mutation::GrantsEveryone, &url)
    }),
    &form::Form::mutant(&redis::REDIS, "mutant-repeats-tokens", |url| {
        crate::mutants::dress(Mutation::RepeatsTokens, &url)
    }),
    &form::Form::mutant(&redis::REDIS, "mutant-skips-owner-check", |url| {
        crate::mutants::dress(Mutation::SkipsOwnerCheck, &url)
    }),
    &form::Form::mutant(&redis::REDIS, "mutant-hides-losses", |url| {
        crate::mutants::dress(Mutation::HidesLosses, &url)
    }),
    &form::Form::mutant(&redis::REDIS, "mutant-readers-beside-writers", |url| {
        crate::mutants::dress(Mutation::ReadersBesideWriters, &url)
    }),
];

/// The backend called `text` (as `--backend` takes it, in any case): its
/// option name, or its name in reports; a mutant too.
pub(crate) fn parse(text: &str) -> Option<Kind> {
    ALL.into_iter().chain(MUTANTS).find(|kind| {
        kind.option_name().eq_ignore_ascii_case(text) || kind.name().eq_ignore_ascii_case(text)
    })
}

/// `backend`, once a lock taken and given back through it with a lease of
/// `lease` has made whatever a first acquisition makes (a session, loaded
/// scripts), so that the next acquisition sends only itself.
///
/// # Errors
/// The lock cannot be taken or given back.
pub(crate) async fn warmed_up(
    backend: Arc<dyn distlock::backend::Backend>,
    lease: Duration,
) -> Outcome<Arc<dyn distlock::backend::Backend>> {
    let warm = distlock::LockClient::new(
        backend.clone(),
        distlock::LockOptions::builder().lease(lease).build()?,
    );
    let name = LockName::new(format!("warm-up-{}", std::process::id()))?;
    if let Some(guard) = warm.try_acquire(&name).await? {
        guard.release().await?;
    }
    Ok(backend)
}

/// A loopback port nobody listens on.
///
/// # Errors
/// No port can be bound.
pub(crate) fn closed_port() -> Outcome<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}
