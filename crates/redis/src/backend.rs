//! The [`Backend`]: one Redis server, a quorum of them, or a Redis
//! Cluster.

use std::fmt;
use std::time::{Duration, Instant};

use distlock_core::backend::BackendExt;
use distlock_core::backend::{
    Abilities, AcquireRequest, Attempt, Backend, Capabilities, DelayedRelease, Extended, Feature,
    GrantState, HandOver, HandOvers, Lease, LeaseId, ReleaseWatch, Resumes, ServerInfo, Term,
    TermLog, WaitState, WaiterList, Wakeups, async_trait,
};
use distlock_core::{Claim, Error, Holder, LockInfo, LockName, Result, Waiter};
use futures::future::join_all;

use crate::cluster;
use crate::config::{Mode, RedisConfig};
use crate::grant::{HandedOverLock, OnServer, TOKEN_BLOCK};
use crate::keys::KeySpace;
use crate::link::Target;
use crate::node::{Node, WriterMark};
use crate::quorum::{Quorum, call_timeout};
use crate::reply::Answer;
use crate::wake::Subscriber;

/// How long a waiter waits before it tries again, at most, while releases
/// go unheard (too few subscriber connections are open).
const POLL_WHILE_UNHEARD: Duration = Duration::from_secs(1);

/// The most leases one `extend_many` pipelines: one round trip for all.
const EXTEND_MANY_LIMIT: usize = 10_000;

/// What one wait keeps across its attempts.
#[derive(Debug, Clone, Default)]
struct Waiting {
    /// A waiting writer's mark, which keeps later readers out.
    mark: Option<WriterMark>,
    /// In quorum mode, how many attempts in a row split the vote, and
    /// when the next may ask (see [`split_pause`]).
    splits: u32,
    pause_until: Option<Instant>,
}

impl Waiting {
    fn is_empty(&self) -> bool {
        self.mark.is_none() && self.splits == 0
    }
}

/// The longest pause after a split vote.
const MOST_SPLIT_PAUSE: Duration = Duration::from_millis(50);

/// How long a waiting attempt in quorum mode pauses after the `splits`th
/// split vote in a row, when the last attempt took `took`: a random time
/// up to three such attempts and 1 ms, doubled for each split in a row
/// before, up to 50 ms or a tenth of the lease. Contenders that split the
/// servers then come back one by one, and the first takes every server.
fn split_pause(took: Duration, splits: u32, lease: Duration) -> Duration {
    let doubled = 1u32 << splits.saturating_sub(1).min(6);
    let longest = ((took * 3 + Duration::from_millis(1)) * doubled)
        .min(MOST_SPLIT_PAUSE)
        .min(lease / 10);
    longest.mul_f64(rand::random::<f64>())
}

/// distlock's Redis backend; see the [crate docs](crate).
pub struct RedisBackend {
    config: RedisConfig,
    keys: KeySpace,
    /// One node in single mode; every server, in the URL's order, in
    /// quorum mode; one node for the whole cluster in cluster mode.
    nodes: Vec<Node>,
    wakeups: Subscriber,
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("config", &self.config)
            .field("wake_ups", &self.wakeups.is_live())
            .finish_non_exhaustive()
    }
}

impl RedisBackend {
    /// Opens the backend at `url`; see the [crate docs](crate) for the URL.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a bad URL, [`Error::Denied`] for
    /// refused credentials, and a backend error when the server (in quorum
    /// mode, a majority of them; in cluster mode, every seed) cannot be
    /// reached or does not answer as Redis does (in cluster mode, as a
    /// node of a Redis Cluster whose every slot is served).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future drops the connections being made.
    pub async fn open(url: &str) -> Result<Self> {
        Self::connect(RedisConfig::parse(url)?).await
    }

    /// Opens the backend from a parsed configuration. In quorum mode a
    /// majority of the servers must answer; the others are connected to
    /// when they do. In cluster mode one seed that answers is enough: it
    /// names the cluster's masters.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    ///
    /// # Cancel safety
    /// As [`open`](Self::open).
    pub async fn connect(config: RedisConfig) -> Result<Self> {
        // The fields are public: a configuration built in code is checked
        // as a parsed one is.
        crate::config::check_prefix(&config.prefix)?;
        crate::config::check_servers(config.mode, &config.servers)?;
        crate::config::check_cluster_db(config.mode, config.db)?;
        crate::config::check_token_keep(config.token_keep)?;
        if config.wait_replicas.is_some() {
            crate::config::check_wait_replicas(config.mode)?;
        }
        let keys = KeySpace::new(&config.prefix);
        let nodes = match config.mode {
            // One connection reaches every master.
            Mode::Cluster => vec![Node::cluster(&config, keys.clone())?],
            _ => config
                .servers
                .iter()
                .map(|server| Node::new(&config, server, keys.clone()))
                .collect::<Result<Vec<Node>>>()?,
        };
        let answers = join_all(nodes.iter().map(Node::connect)).await;
        let need = config.quorum();
        let answered = answers.iter().filter(|answer| answer.is_ok()).count();
        let mut errors = answers.into_iter().filter_map(Result::err);
        if answered < need {
            if nodes.len() == 1 {
                return Err(errors.next().unwrap_or_else(|| Error::Backend {
                    backend: "redis",
                    message: "connecting to redis failed".into(),
                    source: None,
                }));
            }
            let messages: Vec<String> = errors.map(|error| error.to_string()).collect();
            return Err(Error::Backend {
                backend: "redis",
                message: format!(
                    "{answered} of {} redis servers answered, and quorum mode needs {need}: {}",
                    config.servers.len(),
                    messages.join("; ")
                ),
                source: None,
            });
        }
        for error in errors {
            tracing::warn!(%error, "a redis server did not answer; the quorum holds without it");
        }
        // A release's PUBLISH reaches every node of a cluster over its bus,
        // so a subscriber on any one seed hears it: one on each, heard
        // while any is open.
        let clients = config
            .servers
            .iter()
            .map(|server| Target::server(&config, server))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            wakeups: Subscriber::start(clients, keys.clone(), need),
            keys,
            nodes,
            config,
        })
    }

    /// The configuration this backend was opened with.
    pub fn config(&self) -> &RedisConfig {
        &self.config
    }

    /// The keys `name`'s grants live under (on every server, in quorum
    /// mode): its exclusive grant (a string), its readers or permits (a
    /// sorted set) and their records (a hash), its waiting writers (a
    /// sorted set), its token counter (a string), the mark of an
    /// attempt that waits for the exclusive grant's release (a string),
    /// and the waiting writers' records (a hash). All carry one hash tag,
    /// derived from the name.
    pub fn keys_of(&self, name: &LockName) -> Vec<String> {
        let keys = self.keys.of(name);
        vec![
            keys.exclusive.clone(),
            keys.holders.clone(),
            keys.records.clone(),
            keys.waiting.clone(),
            keys.token.clone(),
            keys.awaited.clone(),
            keys.waiting_records.clone(),
        ]
    }

    /// Whether release wake-ups are on now: the subscriber connection is
    /// open (in quorum mode, those to a majority of the servers). While
    /// they are not, waits poll.
    pub fn wake_ups(&self) -> bool {
        self.wakeups.is_live()
    }

    /// The servers as a quorum, in quorum mode.
    fn quorum(&self) -> Option<Quorum<'_>> {
        (self.config.mode == Mode::Quorum).then(|| Quorum::new(&self.nodes, self.config.quorum()))
    }

    /// The one server of single mode.
    fn single(&self) -> &Node {
        &self.nodes[0]
    }

    /// Extends `leases` on the one server (or cluster), each under the
    /// identity stored for it, waiting for replicas where configured.
    async fn extend_on_server(&self, leases: &[Lease], timeout: Duration) -> Extended {
        if leases.is_empty() {
            return Extended::new(Vec::new(), None);
        }
        if let Some(connection) = self.single().cluster_connection() {
            // No clock: each master has its own. (A cluster does not wait
            // for replicas: `?wait_replicas` is refused.)
            let outcomes = cluster::extend(self.single(), connection, leases, timeout).await;
            return Extended::new(outcomes, None);
        }
        let replicas = self
            .config
            .wait_replicas
            .map(|replicas| crate::replicas::for_extensions(replicas, timeout));
        let (extended, waited) = self
            .single()
            .extend_many_waiting(leases, timeout, replicas)
            .await;
        match (replicas, waited) {
            (Some(replicas), Some(waited)) => {
                let outcomes =
                    crate::replicas::confirm_extensions(extended.outcomes, replicas, waited);
                Extended::new(outcomes, extended.server_time)
            }
            _ => extended,
        }
    }
}

#[async_trait]
impl Backend for RedisBackend {
    fn store_name(&self) -> &'static str {
        "redis"
    }

    /// In quorum mode, each server is asked within `limit`, so that one
    /// that does not answer is told as a finding.
    async fn server_info(&self, limit: Duration) -> Result<ServerInfo> {
        if self.quorum().is_none() {
            return match self.single().cluster_connection() {
                Some(connection) => cluster::server_info(connection, limit).await,
                None => self.single().server_info(limit).await,
            };
        }
        // Every server is read: each holds copies of the locks it granted,
        // so one that may evict or forget them is a finding, named by its
        // address (never with the URL's credentials). The version and the
        // clock are the first answering server's.
        let answers = join_all(self.nodes.iter().map(|node| node.server_info(limit))).await;
        let mut first = None;
        let mut read = Vec::with_capacity(answers.len());
        let mut unread = Vec::new();
        for (answer, server) in answers.into_iter().zip(&self.config.servers) {
            match answer {
                Ok(mut info) => {
                    read.push((server.to_string(), std::mem::take(&mut info.features)));
                    first.get_or_insert((server, info));
                }
                Err(error) => unread.push((server.to_string(), error)),
            }
        }
        let Some((server, info)) = first else {
            return Err(unread.pop().map_or_else(
                || Error::Unsupported("no redis server is configured".into()),
                |(_, error)| error,
            ));
        };
        // A server that did not answer is a finding of every feature: its
        // settings are unknown.
        let names: Vec<&'static str> = read[0].1.iter().map(|feature| feature.name).collect();
        for (address, error) in unread {
            let unknown = names
                .iter()
                .map(|&name| {
                    Feature::degraded(name, format!("not read, as it did not answer: {error}"))
                })
                .collect();
            read.push((address, unknown));
        }
        let version = info.version.map(|version| {
            format!(
                "{version} ({server}, the first answering of {} servers in quorum mode)",
                self.nodes.len()
            )
        });
        Ok(crate::deployment::across("server", &read).into_iter().fold(
            ServerInfo::new(version, info.clock),
            ServerInfo::with_feature,
        ))
    }

    fn capabilities(&self) -> Capabilities {
        // A cluster keeps each name on one master, as one server does.
        let one_copy = self.config.mode != Mode::Quorum;
        Capabilities::lease_based()
            .with_shared(true)
            // Quorum mode: see the quorum module for why not.
            .with_semaphores(one_copy)
            // Quorum mode rolls a failed grant back with time of its own,
            // so it leaves the bound to core.
            .with_bounds_calls(one_copy)
    }

    async fn try_acquire(&self, request: &AcquireRequest, wait: &mut WaitState) -> Result<Attempt> {
        let quorum = self.quorum();
        if quorum.is_some() && matches!(request.claim, Claim::Permit { .. }) {
            return Err(Error::Unsupported(
                "the redis backend's mode=quorum has no semaphores: each server counts only the \
                 permits it holds, so permits granted by different majorities could together \
                 exceed the limit; use mode=single for semaphores"
                    .into(),
            ));
        }
        let mut waiting = wait.take::<Waiting>().unwrap_or_default();
        if let Some(until) = waiting.pause_until.take() {
            // Woken early by another contender's rollback: the pause holds.
            tokio::time::sleep_until(until.into()).await;
        }
        if request.claim == Claim::Exclusive && request.retries && waiting.mark.is_none() {
            waiting.mark = Some(WriterMark(LeaseId::random().to_string()));
        }
        // Kept across the attempt: should the reply be lost, the mark may
        // be stored, and the wait's end removes it. (A first try keeps
        // nothing, and so stores nothing.)
        if !waiting.is_empty() {
            wait.set(waiting.clone());
        }
        let mark = waiting.mark.as_ref();
        let answer = match &quorum {
            Some(quorum) => quorum.acquire(request, mark).await?,
            None => match self.config.wait_replicas {
                None => {
                    self.single()
                        .acquire(request, mark, false, request.operation_timeout)
                        .await?
                }
                // The script and the WAIT that confirms it go in one
                // pipeline, on one connection (see the replicas module).
                Some(replicas) => {
                    let replicas = crate::replicas::for_grant(request, replicas);
                    let (answer, waited) = self
                        .single()
                        .acquire_replicated(request, mark, replicas)
                        .await?;
                    if let Answer::Granted(token) = answer {
                        crate::replicas::confirm_grant(
                            self.single(),
                            request,
                            token,
                            replicas,
                            waited,
                        )
                        .await?;
                    }
                    answer
                }
            },
        };
        let (left, marked) = match answer {
            // Only a quorum's servers abstain, and the quorum counts their
            // votes; on one server a grant is a grant.
            Answer::Granted(fencing_token)
            | Answer::Abstained {
                token: fencing_token,
                ..
            } => {
                wait.take::<Waiting>();
                // A quorum grant keeps its copies' record, to re-create a
                // copy that a server lost (see the quorum module).
                let state = match &quorum {
                    Some(_) => crate::quorum::CopyRecord::state_for(request),
                    None => GrantState::none(),
                };
                return Ok(Attempt::Acquired {
                    fencing_token,
                    state,
                });
            }
            // The writer's mark stays in the wait state: the wait ends on
            // this error, and `end_wait` removes the mark.
            Answer::Conflict(held) => return Err(request.claim.conflict(&request.name, held)),
            Answer::Held { left, marked } => {
                waiting.splits = 0;
                (left, marked)
            }
            Answer::Split { took, marked } => {
                waiting.splits += 1;
                let pause = split_pause(took, waiting.splits, request.lease);
                waiting.pause_until = Some(Instant::now() + pause);
                (Some(pause), marked)
            }
        };
        if !marked {
            waiting.mark = None;
        }
        if waiting.is_empty() {
            wait.take::<Waiting>();
        } else {
            wait.set(waiting);
        }
        let mut retry_after = left;
        if marked {
            // The mark lasts a lease from this attempt: try again well
            // within it, so that it does not lapse.
            retry_after =
                Some(retry_after.map_or(request.lease / 2, |after| after.min(request.lease / 2)));
        }
        if !self.wakeups.is_live() {
            retry_after =
                Some(retry_after.map_or(POLL_WHILE_UNHEARD, |after| after.min(POLL_WHILE_UNHEARD)));
        }
        Ok(Attempt::Held { retry_after })
    }

    async fn end_wait(&self, request: &AcquireRequest, mut wait: WaitState) -> Result<()> {
        let Some(waiting) = wait.take::<Waiting>() else {
            return Ok(());
        };
        match (self.quorum(), &waiting.mark) {
            (_, None) => Ok(()),
            (Some(quorum), Some(mark)) => quorum.end_wait(request, mark).await,
            (None, Some(mark)) => self.single().end_wait(request, mark).await,
        }
    }

    fn extend_many_limit(&self) -> usize {
        EXTEND_MANY_LIMIT
    }

    async fn extend_many(&self, leases: &[Lease]) -> Extended {
        // One client's keeper extends these, with its one operation timeout.
        let Some(timeout) = leases.iter().map(|lease| lease.operation_timeout).min() else {
            return Extended::new(Vec::new(), None);
        };
        match self.quorum() {
            Some(quorum) => {
                let shortest = leases.iter().map(|lease| lease.lease).min();
                let timeout = shortest.map_or(timeout, |lease| call_timeout(timeout, lease));
                // Each server has a clock of its own: none is read.
                Extended::new(quorum.extend_many(leases, timeout).await, None)
            }
            None => {
                // Grants another of this process's took over without a
                // command are no longer on the server: refused unsent.
                let on_server = leases
                    .iter()
                    .map(|lease| OnServer::of(lease) != OnServer::Gone)
                    .collect::<Vec<_>>();
                // Tokio's clock, as core times leases by it.
                let sent_at = tokio::time::Instant::now();
                let extended = if on_server.iter().all(|&on| on) {
                    self.extend_on_server(leases, timeout).await
                } else {
                    let sent: Vec<Lease> = leases
                        .iter()
                        .zip(&on_server)
                        .filter(|&(_, &on)| on)
                        .map(|(lease, _)| lease.clone())
                        .collect();
                    let extended = self.extend_on_server(&sent, timeout).await;
                    let mut answers = extended.outcomes.into_iter();
                    let outcomes = on_server
                        .iter()
                        .map(|&on| {
                            if on {
                                answers.next().unwrap_or(Ok(false))
                            } else {
                                Ok(false)
                            }
                        })
                        .collect();
                    Extended::new(outcomes, extended.server_time)
                };
                for (lease, outcome) in leases.iter().zip(&extended.outcomes) {
                    if let Some(hold) = HandedOverLock::of(lease) {
                        match outcome {
                            Ok(true) => hold.confirm(lease.id, sent_at, lease.lease),
                            Ok(false) => hold.end(lease.id),
                            // Unknown: the hold stays as it was confirmed.
                            Err(_) => {}
                        }
                    }
                }
                extended
            }
        }
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        if let Some(quorum) = self.quorum() {
            return quorum.release(lease).await;
        }
        let OnServer::Stored { id, .. } = OnServer::of(lease) else {
            return Ok(false);
        };
        let released = self
            .single()
            .release(&lease.name, lease.claim, id, lease.operation_timeout)
            .await;
        if let (Ok(_), Some(hold)) = (&released, HandedOverLock::of(lease)) {
            hold.end(lease.id);
        }
        released
    }

    /// A walk of the keys with `SCAN`, as long as it takes: core's timer
    /// bounds it.
    async fn list(&self, _: Duration) -> Result<Vec<LockInfo>> {
        match self.quorum() {
            Some(quorum) => quorum.list().await,
            None => {
                let mut infos: Vec<LockInfo> = self
                    .single()
                    .list()
                    .await?
                    .into_iter()
                    .map(|listed| listed.info)
                    .collect();
                infos.sort_by(|a, b| (&a.name, a.fencing_token).cmp(&(&b.name, b.fencing_token)));
                Ok(infos)
            }
        }
    }

    async fn force_release(&self, name: &LockName, limit: Duration) -> Result<bool> {
        match self.quorum() {
            Some(quorum) => quorum.force_release(name, limit).await,
            None => self.single().force_release(name, limit).await,
        }
    }

    /// No hand-overs in quorum mode, which cannot end one grant and make
    /// the next on every server in one step, nor when a grant waits for
    /// replicas: it counts only once they have it, so the lock is
    /// released, and the waiter acquires it. No record of terms in quorum
    /// mode: each server would keep its own, with the copies of grants
    /// later rolled back, and no one record would hold every term.
    fn abilities(&self) -> Abilities<'_> {
        let mut abilities = Abilities::none()
            .with_wakeups(self)
            .with_delayed_release(self)
            .with_waiters(self)
            .with_resumes(self);
        if self.quorum().is_none() && self.config.wait_replicas.is_none() {
            abilities = abilities.with_hand_overs(self);
        }
        if self.quorum().is_none() {
            abilities = abilities.with_term_log(self);
        }
        abilities
    }
}

/// The waiting writers' marks, in every mode: each wait for the whole
/// lock leaves one (see `ACQUIRE` in the scripts), with its holder and
/// the server's `TIME` when it was first stored. A reader or a permit
/// leaves none, so it waits unlisted. Redis keeps no line: after a
/// release, whichever waiter tries first is granted, so the list is in
/// the order the waits began, not an order of service.
#[async_trait]
impl WaiterList for RedisBackend {
    fn sees_every_wait(&self) -> bool {
        false
    }

    fn serves_in_order(&self) -> bool {
        false
    }

    /// A walk of the keys with `SCAN` (on every server in quorum mode, on
    /// every master in cluster mode), as long as it takes: core's timer
    /// bounds it.
    async fn waiters(&self, _: Duration) -> Result<Vec<(LockName, Waiter)>> {
        let mut waits = match self.quorum() {
            Some(quorum) => quorum.waiters().await?,
            None => self.single().waiters().await?,
        };
        crate::reply::in_listing_order(&mut waits);
        Ok(waits
            .into_iter()
            .map(|wait| (wait.name, wait.waiter))
            .collect())
    }
}

#[async_trait]
impl TermLog for RedisBackend {
    async fn terms_after(&self, name: &LockName, after: u64, limit: Duration) -> Result<Vec<Term>> {
        self.single().terms_after(name, after, limit).await
    }

    /// One script on the record (see `WITHDRAW_TERM` in the scripts).
    async fn withdraw(&self, lease: &Lease, holder: &Holder) -> Result<()> {
        self.single()
            .withdraw_term(
                &lease.name,
                lease.fencing_token,
                lease.id,
                holder,
                lease.operation_timeout,
            )
            .await
    }
}

#[async_trait]
impl DelayedRelease for RedisBackend {
    /// An extension: `PEXPIRE` to the lease on each server, whose clock
    /// then ends it, shorter leases too; in quorum mode on a majority.
    /// Then it is announced on every server where a waiter left its mark:
    /// waiters were told the old lease's time left, and would otherwise
    /// try again only then. The lease's end itself is not announced (an
    /// expiry publishes nothing), but those waiters, told the new time
    /// left, try again at that moment.
    async fn release_after(&self, lease: &Lease, remaining: Duration) -> Result<bool> {
        let shortened = Lease {
            lease: remaining,
            ..lease.clone()
        };
        let cut = self.extend(&shortened).await?;
        if cut {
            // A wake-up is a hint: one that fails leaves the waiters to
            // their timed retries, as before.
            let announcements = self
                .nodes
                .iter()
                .map(|node| node.announce(&lease.name, lease.operation_timeout));
            for outcome in futures::future::join_all(announcements).await {
                if let Err(error) = outcome {
                    tracing::debug!(%error, "announcing a delayed release failed");
                }
            }
        }
        Ok(cut)
    }
}

/// Every mode, every claim it grants: one script per server swaps the
/// grant's identity for the new one, owner-checked, keeping its token
/// (see `RESUME` in the scripts); in quorum mode on a majority (see
/// `Quorum::resume`).
#[async_trait]
impl Resumes for RedisBackend {
    /// With `wait_replicas`, the resume counts only once the replicas have
    /// it, as a grant does: otherwise the new identity is released (the
    /// old one is gone already) and the call fails.
    async fn resume(&self, lease: &Lease, request: &AcquireRequest) -> Result<Option<GrantState>> {
        if let Some(quorum) = self.quorum() {
            return quorum.resume(lease, request).await;
        }
        let replicas = self
            .config
            .wait_replicas
            .map(|replicas| crate::replicas::for_grant(request, replicas));
        let (resumed, waited) = self
            .single()
            .resume(lease, request, request.operation_timeout, replicas)
            .await?;
        if !resumed {
            return Ok(None);
        }
        if let (Some(replicas), Some(waited)) = (replicas, waited) {
            // No term was recorded: there is none to withdraw.
            let request = AcquireRequest {
                records_term: false,
                ..request.clone()
            };
            crate::replicas::confirm_grant(
                self.single(),
                &request,
                lease.fencing_token,
                replicas,
                waited,
            )
            .await?;
        }
        // A fresh grant's state: no hold, so none of the tokens a
        // hand-over reserved for the old process is passed on again.
        Ok(Some(GrantState::none()))
    }

    /// The identity the key stores: for a grant handed over in this
    /// process without a command, the identity of the grant the hand-over
    /// script made, which the key still names.
    fn stored_identity(&self, lease: &Lease) -> LeaseId {
        match OnServer::of(lease) {
            OnServer::Stored { id, .. } => id,
            OnServer::Gone => lease.id,
        }
    }
}

#[async_trait]
impl HandOvers for RedisBackend {
    /// Without a server command when this process took the lock over by
    /// the script below and still has a reserved token, half of the lease
    /// and the same holder and lease for `next` (`HandedOverLock::pass_on`);
    /// otherwise one script that ends `lease` and makes `next`'s grant,
    /// reserving the tokens for the next ones (see `docs/redis.md`,
    /// "Hand-overs without a command"). Quorum mode answers
    /// [`Error::Unsupported`].
    async fn hand_over(&self, lease: &Lease, next: &AcquireRequest) -> Result<HandOver> {
        if lease.claim != Claim::Exclusive || next.claim != Claim::Exclusive {
            return Err(Error::Unsupported(
                "only an exclusive lock is handed over".into(),
            ));
        }
        if self.quorum().is_some() {
            return Err(Error::Unsupported(
                "the redis backend's mode=quorum does not hand a lock over in one step".into(),
            ));
        }
        let OnServer::Stored { id: stored, .. } = OnServer::of(lease) else {
            return Ok(HandOver::NotOurs);
        };
        let hold = HandedOverLock::of(lease);
        if let Some((fencing_token, confirmed_at)) = hold
            .filter(|_| lease.name == next.name)
            .and_then(|hold| hold.pass_on(lease.id, next.lease_id, next.lease, &next.holder))
        {
            // The key stays as it is, under the identity the hold stored;
            // the next grant shares the hold, so it ends when `lease`
            // would have unless the keeper extends it.
            return Ok(HandOver::Granted {
                fencing_token,
                confirmed_at: Some(confirmed_at),
                state: lease.state.clone(),
            });
        }
        // Tokio's clock, as core times leases by it.
        let sent_at = tokio::time::Instant::now();
        let answer = self
            .single()
            .hand_over(lease, stored, next, TOKEN_BLOCK)
            .await?;
        // Answered: the old grant is ours no more, whichever the answer.
        // After an error it stays as it was, so that core's release of it
        // still finds the stored identity.
        if let Some(hold) = hold {
            hold.end(lease.id);
        }
        let Some(fencing_token) = answer else {
            return Ok(HandOver::NotOurs);
        };
        let hold = HandedOverLock::new(
            next.lease_id,
            next.holder.clone(),
            next.lease,
            fencing_token,
            fencing_token + (TOKEN_BLOCK - 1),
            sent_at,
        );
        Ok(HandOver::Granted {
            fencing_token,
            confirmed_at: None,
            state: GrantState::new(hold),
        })
    }
}

impl Wakeups for RedisBackend {
    fn watch(&self, name: &LockName) -> Option<ReleaseWatch> {
        self.wakeups.watch(name)
    }
}
