//! One Redis server, or one Redis Cluster, and the backend's operations on
//! it, each one script (or one pipeline of them). Single mode uses one
//! node; quorum mode asks every node and counts their answers; cluster
//! mode uses one node whose connection reaches every master.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::{AcquireRequest, Extended, Lease, LeaseId, ServerInfo, Term};
use distlock_core::{Claim, Error, Holder, LockName, Result};
use redis::aio::ConnectionLike;
use redis::cluster_async::ClusterConnection;
use redis::{Script, Value};

use crate::config::{RedisConfig, RedisServer};
use crate::deployment;
use crate::error::{copy, from_redis, timed_out, unexpected};
use crate::grant::OnServer;
use crate::keys::{KeySpace, NameKeys, Record, parse_term};
use crate::link::{Connection, Link, Target};
use crate::reply::{
    Answer, Listed, ListedWait, int, is_noscript, read_grants, read_time, read_waits,
};
use crate::scripts::{CounterScripts, SCRIPTS};
use crate::slots::{OnMaster, SlotCache, SlotOwners};

/// How many keys one `SCAN` step asks for.
const SCAN_COUNT: usize = 1000;

/// `WAIT`, sent at the end of a call's pipeline: for how many replicas,
/// and how long the server may wait for them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Replicas {
    pub(crate) count: u32,
    pub(crate) within: Duration,
}

impl Replicas {
    /// Adds `WAIT count within` to `pipe`.
    fn append_to(self, pipe: &mut redis::Pipeline) {
        let millis = u64::try_from(self.within.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        pipe.cmd("WAIT").arg(self.count).arg(millis);
    }

    /// How many replicas acknowledged, from `WAIT`'s reply.
    fn read(self, what: &str, reply: Value) -> Result<u64> {
        match reply {
            Value::Int(acknowledged) => {
                u64::try_from(acknowledged).map_err(|_| unexpected(what, &Value::Int(acknowledged)))
            }
            Value::ServerError(error) => Err(from_redis(what, error.into())),
            other => Err(unexpected(what, &other)),
        }
    }
}

/// What a waiting writer keeps across the attempts of one wait: the
/// identity of its mark, which keeps later readers out.
#[derive(Debug, Clone)]
pub(crate) struct WriterMark(pub(crate) String);

/// One server, or one cluster: its connection, and the keys of the prefix.
#[derive(Clone)]
pub(crate) struct Node {
    link: Link,
    keys: KeySpace,
    /// ` on host:port` in quorum mode, where errors must say which server
    /// answered; empty with one server or a cluster.
    on: String,
    /// In cluster mode, which master serves which slot, to batch
    /// extensions per master.
    slots: SlotCache,
    /// Whether the driver may run a call's script twice: a cluster
    /// connection sends a command again when the connection broke before
    /// its answer. Releases then remember what they ended (see
    /// `RELEASE_EXCLUSIVE` in the scripts).
    resends: bool,
    /// The scripts that write the token counter, keeping it for the
    /// configured `token_keep`.
    counter: Arc<CounterScripts>,
}

impl Node {
    /// The node of `server`, not yet connected.
    pub(crate) fn new(config: &RedisConfig, server: &RedisServer, keys: KeySpace) -> Result<Self> {
        let on = if config.servers.len() > 1 {
            format!(" on {server}")
        } else {
            String::new()
        };
        let client = Target::server(config, server)?;
        Ok(Self {
            link: Link::new(Target::Server(client), on.clone()),
            keys,
            on,
            slots: SlotCache::default(),
            resends: false,
            counter: CounterScripts::keeping(config.token_keep),
        })
    }

    /// The node of the cluster whose seeds `config` names, not yet
    /// connected.
    pub(crate) fn cluster(config: &RedisConfig, keys: KeySpace) -> Result<Self> {
        Ok(Self {
            link: Link::new(Target::cluster(config)?, String::new()),
            keys,
            on: String::new(),
            slots: SlotCache::default(),
            resends: true,
            counter: CounterScripts::keeping(config.token_keep),
        })
    }

    /// Opens the connection; see [`Link::open`].
    pub(crate) async fn connect(&self) -> Result<()> {
        self.link.open().await
    }

    /// Runs `script` with `keys` and `args`, within `timeout`. The script
    /// is sent by its SHA, and loaded and sent again once if the server
    /// does not have it. `what` is written out only for an error.
    async fn run(
        &self,
        operation: &'static str,
        what: &(dyn fmt::Display + Sync),
        timeout: Duration,
        script: &Script,
        keys: &[&str],
        args: &[&[u8]],
    ) -> Result<Value> {
        self.run_waiting(operation, what, timeout, script, keys, args, None)
            .await
            .map(|(reply, _)| reply)
    }

    /// [`run`](Self::run), and with `replicas`, `WAIT` for them in the same
    /// pipeline, on the same connection: `WAIT` counts the replicas that
    /// have this connection's writes, so it must follow the script there.
    /// Sent as a second request, a reconnect between the two would run it
    /// on a connection that wrote nothing, which it answers at once.
    #[allow(clippy::too_many_arguments)]
    async fn run_waiting(
        &self,
        operation: &'static str,
        what: &(dyn fmt::Display + Sync),
        timeout: Duration,
        script: &Script,
        keys: &[&str],
        args: &[&[u8]],
        replicas: Option<Replicas>,
    ) -> Result<(Value, Option<Result<u64>>)> {
        // Written straight into one command, without the driver's
        // invocation, which copies each argument twice.
        let mut eval = redis::cmd("EVALSHA");
        eval.arg(script.get_hash()).arg(keys.len());
        for key in keys {
            eval.arg(*key);
        }
        for arg in args {
            eval.arg(*arg);
        }
        let call = async {
            let mut connection = self.link.get()?;
            let Some(replicas) = replicas else {
                let reply = match eval.query_async::<Value>(&mut connection).await {
                    Err(error) if error.kind() == redis::ErrorKind::NoScriptError => {
                        match script.load_async(&mut connection).await {
                            Ok(_) => eval.query_async::<Value>(&mut connection).await,
                            Err(error) => Err(error),
                        }
                    }
                    reply => reply,
                };
                return reply
                    .map(|reply| (reply, None))
                    .map_err(|e| from_redis(&what.to_string(), e));
            };
            let mut pipe = redis::pipe();
            pipe.add_command(eval);
            replicas.append_to(&mut pipe);
            let sent = async {
                let replies = connection.req_packed_commands(&pipe, 0, 2).await?;
                if !replies.first().is_some_and(is_noscript) {
                    return Ok(replies);
                }
                // The script did not run, and the WAIT after it confirmed
                // nothing of ours: load it, and send both again.
                script.load_async(&mut connection).await?;
                connection.req_packed_commands(&pipe, 0, 2).await
            };
            let what = what.to_string();
            let mut replies = sent.await.map_err(|e| from_redis(&what, e))?;
            let (Some(waited), Some(reply), true) =
                (replies.pop(), replies.pop(), replies.is_empty())
            else {
                return Err(unexpected(&what, &Value::Array(replies)));
            };
            let reply = match reply {
                Value::ServerError(error) => return Err(from_redis(&what, error.into())),
                reply => reply,
            };
            Ok((reply, Some(replicas.read(&what, waited))))
        };
        tokio::time::timeout(timeout, call)
            .await
            .map_err(|_| timed_out(operation, timeout))?
    }

    /// One attempt, with the writer's `mark` when it waits, within
    /// `timeout`. A `provisional` grant is one copy of a quorum grant: its
    /// token stays marked as its own until the grant is decided and
    /// [`raise`](Self::raise) writes the grant's.
    pub(crate) async fn acquire(
        &self,
        request: &AcquireRequest,
        mark: Option<&WriterMark>,
        provisional: bool,
        timeout: Duration,
    ) -> Result<Answer> {
        self.acquire_waiting(request, mark, provisional, timeout, None)
            .await
            .map(|(answer, _)| answer)
    }

    /// One attempt on one server, as [`acquire`](Self::acquire), followed
    /// by `WAIT` for `replicas` in the same pipeline: the answer, and how
    /// many replicas acknowledged the attempt's writes.
    pub(crate) async fn acquire_replicated(
        &self,
        request: &AcquireRequest,
        mark: Option<&WriterMark>,
        replicas: Replicas,
    ) -> Result<(Answer, Result<u64>)> {
        let (answer, waited) = self
            .acquire_waiting(
                request,
                mark,
                false,
                request.operation_timeout,
                Some(replicas),
            )
            .await?;
        let waited = waited.unwrap_or_else(|| Err(unexpected("waiting for replicas", &Value::Nil)));
        Ok((answer, waited))
    }

    async fn acquire_waiting(
        &self,
        request: &AcquireRequest,
        mark: Option<&WriterMark>,
        provisional: bool,
        timeout: Duration,
        replicas: Option<Replicas>,
    ) -> Result<(Answer, Option<Result<u64>>)> {
        let keys = self.keys.of(&request.name);
        let (claim, limit) = claim_code(request.claim);
        let id = request.lease_id.to_string();
        let lease = millis(request.lease);
        let record = Record::json(&request.name, &request.holder);
        let mark = mark.map_or("", |mark| mark.0.as_str());
        let what = Doing::new("acquiring", &request.name, &self.on);
        // A waiting writer's mark goes with its record, under one more key.
        // A campaign records its term with its grant, under another;
        // quorum mode's copies keep no record (see `RedisBackend::abilities`),
        // and read the server's epoch instead, to learn whether it abstains.
        let (script, used, eighth) = if provisional {
            (&self.counter.acquire, 8, self.keys.epoch())
        } else if request.records_term {
            (&self.counter.campaign, 8, keys.terms.as_str())
        } else if !mark.is_empty() {
            (&self.counter.acquire, 7, keys.terms.as_str())
        } else {
            (&self.counter.acquire, 6, keys.terms.as_str())
        };
        let names: [&str; 8] = [
            &keys.exclusive,
            &keys.holders,
            &keys.records,
            &keys.waiting,
            &keys.token,
            &keys.awaited,
            &keys.waiting_records,
            eighth,
        ];
        let limit = limit.to_string();
        let args: [&[u8]; 7] = [
            claim.as_bytes(),
            id.as_bytes(),
            lease.as_bytes(),
            record.as_bytes(),
            if provisional { b"~" } else { b"" },
            mark.as_bytes(),
            if limit == "0" { b"" } else { limit.as_bytes() },
        ];
        // The optional arguments that are empty at the end are left off:
        // each one sent costs the script call a copy.
        let sent = args.len()
            - args[4..]
                .iter()
                .rev()
                .take_while(|arg| arg.is_empty())
                .count();
        let (reply, waited) = self
            .run_waiting(
                "acquire",
                &what,
                timeout,
                script,
                &names[..used],
                &args[..sent],
                replicas,
            )
            .await?;
        let answer = Answer::parse(&reply).ok_or_else(|| unexpected(&what.to_string(), &reply))?;
        Ok((answer, waited))
    }

    /// The terms of `name`'s election kept after `after`, oldest first.
    /// An observer reads them before it waits for the next release, so
    /// the read also asks that the release be announced (see the terms
    /// script).
    pub(crate) async fn terms_after(
        &self,
        name: &LockName,
        after: u64,
        timeout: Duration,
    ) -> Result<Vec<Term>> {
        let keys = self.keys.of(name);
        let what = format!("reading the terms of {name}{}", self.on);
        let reply = self
            .run(
                "read terms",
                &what,
                timeout,
                &SCRIPTS.terms,
                &[&keys.terms, &keys.exclusive, &keys.awaited],
                &[],
            )
            .await?;
        let entries: Vec<Vec<u8>> =
            redis::from_redis_value(&reply).map_err(|_| unexpected(&what, &reply))?;
        let mut terms = Vec::with_capacity(entries.len());
        for entry in entries.iter().rev() {
            let term = parse_term(entry).ok_or_else(|| Error::InvalidData {
                what: what.clone(),
                field: keys.terms.clone(),
                reason: "holds an entry that is not a term; something else wrote under the \
                         backend's prefix"
                    .into(),
            })?;
            if term.term > after {
                terms.push(term);
            }
        }
        Ok(terms)
    }

    /// Removes term `term` of `name`'s election, if it was recorded for
    /// `holder`, giving its previous term to the one after it; with `term`
    /// 0, the term of the exclusive grant `id` holds, if it still holds
    /// one (see `WITHDRAW_TERM` in the scripts).
    pub(crate) async fn withdraw_term(
        &self,
        name: &LockName,
        term: u64,
        id: LeaseId,
        holder: &Holder,
        timeout: Duration,
    ) -> Result<()> {
        let keys = self.keys.of(name);
        let what = format!("withdrawing a term of {name}{}", self.on);
        let term = if term == 0 {
            String::new()
        } else {
            term.to_string()
        };
        let record = Record::json(name, holder);
        self.run(
            "withdraw term",
            &what,
            timeout,
            &SCRIPTS.withdraw_term,
            &[&keys.terms, &keys.exclusive],
            &[
                term.as_bytes(),
                id.to_string().as_bytes(),
                record.as_bytes(),
            ],
        )
        .await?;
        Ok(())
    }

    /// Raises `name`'s token counter to at least `token`, and writes
    /// `token` into the copy of grant `id`, if this server holds it.
    pub(crate) async fn raise(
        &self,
        name: &LockName,
        claim: Claim,
        id: LeaseId,
        token: u64,
        timeout: Duration,
    ) -> Result<()> {
        let keys = self.keys.of(name);
        let (claim, _) = claim_code(claim);
        self.run(
            "acquire",
            &format!("raising the token counter of {name}{}", self.on),
            timeout,
            &self.counter.raise,
            &[&keys.token, &keys.exclusive, &keys.records],
            &[
                token.to_string().as_bytes(),
                claim.as_bytes(),
                id.to_string().as_bytes(),
            ],
        )
        .await
        .map(drop)
    }

    /// Removes a waiting writer's mark and its record.
    pub(crate) async fn end_wait(&self, request: &AcquireRequest, mark: &WriterMark) -> Result<()> {
        let keys = self.keys.of(&request.name);
        self.run(
            "end_wait",
            &format!("ending a wait for {}{}", request.name, self.on),
            request.operation_timeout,
            &SCRIPTS.end_wait,
            &[&keys.waiting, &keys.waiting_records],
            &[mark.0.as_bytes(), keys.channel.as_bytes()],
        )
        .await
        .map(drop)
    }

    /// Extends every lease that is still ours, in one pipeline, within
    /// `timeout`: for each, whether it was, and the server's clock read
    /// at the end of the same pipeline. A cluster's leases are extended by
    /// [`cluster::extend`](crate::cluster::extend), one pipeline per master.
    pub(crate) async fn extend_many(&self, leases: &[Lease], timeout: Duration) -> Extended {
        self.extend_many_waiting(leases, timeout, None).await.0
    }

    /// [`extend_many`](Self::extend_many) on one server, and with
    /// `replicas`, `WAIT` for them at the end of the same pipeline: how
    /// many replicas acknowledged the extensions (see
    /// [`run_waiting`](Self::run_waiting) for why one pipeline).
    pub(crate) async fn extend_many_waiting(
        &self,
        leases: &[Lease],
        timeout: Duration,
        replicas: Option<Replicas>,
    ) -> (Extended, Option<Result<u64>>) {
        let what = match leases {
            [one] => format!("extending {}{}", one.name, self.on),
            _ => format!("extending {} leases{}", leases.len(), self.on),
        };
        let failed = |error: Error| {
            let waited = replicas.map(|_| Err(copy(&error)));
            let outcomes = leases.iter().map(|_| Err(copy(&error))).collect();
            (Extended::new(outcomes, None), waited)
        };
        let expected = leases.len() + 1 + usize::from(replicas.is_some());
        let call = self.extend_pipeline(&what, leases, replicas);
        let mut replies = match tokio::time::timeout(timeout, call).await {
            Ok(Ok(replies)) if replies.len() == expected => replies,
            Ok(Ok(replies)) => return failed(unexpected(&what, &Value::Array(replies))),
            Ok(Err(error)) => return failed(error),
            Err(_) => return failed(timed_out("extend", timeout)),
        };
        let waited = replicas.map(|replicas| {
            let waited = replies.pop().unwrap_or(Value::Nil);
            replicas.read(&what, waited)
        });
        let server_time = replies.pop().and_then(|time| read_time(&time));
        let outcomes = replies
            .into_iter()
            .map(|reply| match reply {
                Value::Int(extended) => Ok(extended == 1),
                Value::ServerError(error) => Err(from_redis(&what, error.into())),
                other => Err(unexpected(&what, &other)),
            })
            .collect();
        (Extended::new(outcomes, server_time), waited)
    }

    /// Sends one `EVALSHA` of the extend script per lease, `TIME`, and
    /// with `replicas` `WAIT`, in one pipeline.
    async fn extend_pipeline(
        &self,
        what: &str,
        leases: &[Lease],
        replicas: Option<Replicas>,
    ) -> Result<Vec<Value>> {
        let mut connection = self.link.get()?;
        self.extend_on(&mut connection, leases, replicas)
            .await
            .map_err(|e| from_redis(what, e))
    }

    async fn extend_on(
        &self,
        connection: &mut Connection,
        leases: &[Lease],
        replicas: Option<Replicas>,
    ) -> redis::RedisResult<Vec<Value>> {
        let script = &SCRIPTS.extend;
        let mut pipe = self.extend_pipe(leases.iter());
        // The clock is read with the extensions, in the same round trip;
        // then the replicas are waited for, on the same connection.
        pipe.cmd("TIME");
        let mut count = leases.len() + 1;
        if let Some(replicas) = replicas {
            replicas.append_to(&mut pipe);
            count += 1;
        }
        // Extending again is harmless: each extension runs the lease from
        // the server's now (and the whole pipeline goes again, its WAIT
        // after its extensions).
        send_again_if_lost(connection, &pipe, count, script, "extending").await
    }

    /// Re-creates the copies of quorum grants that this server lost, each
    /// `(lease, record)` with the record its copies store, in one
    /// pipeline within `timeout`, only where nothing holds the name (see
    /// `MEND` in the scripts): for each, whether it made the copy.
    pub(crate) async fn mend_many(
        &self,
        copies: &[(&Lease, &str)],
        timeout: Duration,
    ) -> Result<Vec<Result<bool>>> {
        let what = format!("re-creating {} copies{}", copies.len(), self.on);
        let script = &self.counter.mend;
        let mut pipe = redis::pipe();
        for (lease, record) in copies {
            let keys = self.keys.of_uncached(&lease.name);
            let (claim, _) = claim_code(lease.claim);
            pipe.cmd("EVALSHA")
                .arg(script.get_hash())
                .arg(4)
                .arg(&keys.exclusive)
                .arg(&keys.holders)
                .arg(&keys.records)
                .arg(&keys.token)
                .arg(claim)
                .arg(lease.id.to_string())
                .arg(millis(lease.lease))
                .arg(lease.fencing_token)
                .arg(*record);
        }
        let call = async {
            let mut connection = self.link.get()?;
            // Sent again, a copy made finds itself there and makes nothing.
            send_again_if_lost(&mut connection, &pipe, copies.len(), script, "mending")
                .await
                .map_err(|e| from_redis(&what, e))
        };
        let replies = tokio::time::timeout(timeout, call)
            .await
            .map_err(|_| timed_out("mend", timeout))??;
        if replies.len() != copies.len() {
            return Err(unexpected(&what, &Value::Array(replies)));
        }
        Ok(replies
            .into_iter()
            .map(|reply| match reply {
                Value::Int(made) => Ok(made == 1),
                Value::ServerError(error) => Err(from_redis(&what, error.into())),
                other => Err(unexpected(&what, &other)),
            })
            .collect())
    }

    /// One `EVALSHA` of the extend script per lease.
    pub(crate) fn extend_pipe<'l>(
        &self,
        leases: impl Iterator<Item = &'l Lease>,
    ) -> redis::Pipeline {
        let mut pipe = redis::pipe();
        for lease in leases {
            // Not kept: a batch may name more than the cache holds.
            let keys = self.keys.of_uncached(&lease.name);
            let (claim, _) = claim_code(lease.claim);
            let (id, token) = stored_as(lease);
            pipe.cmd("EVALSHA")
                .arg(SCRIPTS.extend.get_hash())
                .arg(3)
                .arg(&keys.exclusive)
                .arg(&keys.holders)
                .arg(&keys.records)
                .arg(claim)
                .arg(id)
                .arg(millis(lease.lease))
                .arg(token);
        }
        pipe
    }

    /// Extends `lease` alone, by a call the driver routes by its keys'
    /// slot (following `MOVED` and `ASK`), within `timeout`.
    pub(crate) async fn extend_one(&self, lease: &Lease, timeout: Duration) -> Result<bool> {
        let keys = self.keys.of(&lease.name);
        let (claim, _) = claim_code(lease.claim);
        let (id, token) = stored_as(lease);
        let what = format!("extending {}{}", lease.name, self.on);
        let reply = self
            .run(
                "extend",
                &what,
                timeout,
                &SCRIPTS.extend,
                &[&keys.exclusive, &keys.holders, &keys.records],
                &[
                    claim.as_bytes(),
                    id.as_bytes(),
                    millis(lease.lease).as_bytes(),
                    token.as_bytes(),
                ],
            )
            .await?;
        int(&reply)
            .map(|extended| extended == 1)
            .ok_or_else(|| unexpected(&what, &reply))
    }

    /// The slot of `name`'s keys, in cluster mode.
    pub(crate) fn slot_of(&self, name: &LockName) -> u16 {
        crate::slots::slot(self.keys.of(name).exclusive.as_bytes())
    }

    /// The cluster's slot map, as last read.
    pub(crate) fn slot_cache(&self) -> &SlotCache {
        &self.slots
    }

    /// Ends grant `id` of `name` if it is still there: whether it was, and
    /// live.
    pub(crate) async fn release(
        &self,
        name: &LockName,
        claim: Claim,
        id: LeaseId,
        timeout: Duration,
    ) -> Result<bool> {
        let keys = self.keys.of(name);
        let (claim, _) = claim_code(claim);
        let what = Doing::new("releasing", name, &self.on);
        let id = id.to_string();
        let remembered = self.remembered(timeout);
        let names = keys.ended_by_release();
        let args: [&[u8]; 5] = [
            claim.as_bytes(),
            id.as_bytes(),
            keys.channel.as_bytes(),
            remembered.keep.as_bytes(),
            remembered.call.as_bytes(),
        ];
        // Elsewhere the last key and arguments are left off: each one sent
        // costs the script call a copy.
        let (used, sent) = if self.resends { (5, 5) } else { (4, 3) };
        let reply = self
            .run(
                "release",
                &what,
                timeout,
                &SCRIPTS.release,
                &names[..used],
                &args[..sent],
            )
            .await?;
        int(&reply)
            .map(|freed| freed == 1)
            .ok_or_else(|| unexpected(&what.to_string(), &reply))
    }

    /// What a release or forced release sends so that, run twice, it
    /// answers as it did the first time: in cluster mode, how long to
    /// remember it (the call's timeout, after which nobody waits for its
    /// answer) and an identity of the call's own; elsewhere nothing.
    fn remembered(&self, timeout: Duration) -> Remembered {
        if !self.resends {
            return Remembered::default();
        }
        Remembered {
            keep: millis(timeout),
            call: LeaseId::random().to_string(),
        }
    }

    /// Announces a delayed release of `name` to the waiters that found it
    /// held, if any (see `ANNOUNCE` in the scripts).
    pub(crate) async fn announce(&self, name: &LockName, timeout: Duration) -> Result<()> {
        let keys = self.keys.of(name);
        self.run(
            "announce",
            &Doing::new("announcing a delayed release of", name, &self.on),
            timeout,
            &SCRIPTS.announce,
            &[&keys.awaited],
            &[keys.channel.as_bytes()],
        )
        .await
        .map(drop)
    }

    /// Ends every grant of `name`: whether a live one ended.
    pub(crate) async fn force_release(&self, name: &LockName, timeout: Duration) -> Result<bool> {
        let keys = self.keys.of(name);
        let what = format!("force-releasing {name}{}", self.on);
        let remembered = self.remembered(timeout);
        let names = keys.ended_by_release();
        let args: [&[u8]; 3] = [
            keys.channel.as_bytes(),
            remembered.keep.as_bytes(),
            remembered.call.as_bytes(),
        ];
        let (used, sent) = if self.resends { (5, 3) } else { (4, 1) };
        let reply = self
            .run(
                "force_release",
                &what,
                timeout,
                &SCRIPTS.force_release,
                &names[..used],
                &args[..sent],
            )
            .await?;
        int(&reply)
            .map(|freed| freed == 1)
            .ok_or_else(|| unexpected(&what, &reply))
    }

    /// Ends the exclusive grant `lease`, stored under `stored`, and makes
    /// `next`'s in one script that takes `tokens` fencing tokens from the
    /// counter: the first of them, or `None` when the old grant was no
    /// longer ours.
    pub(crate) async fn hand_over(
        &self,
        lease: &Lease,
        stored: LeaseId,
        next: &AcquireRequest,
        tokens: u64,
    ) -> Result<Option<u64>> {
        let keys = self.keys.of(&lease.name);
        let what = format!("handing over {}{}", lease.name, self.on);
        let record = Record::json(&next.name, &next.holder);
        let reply = self
            .run(
                "hand_over",
                &what,
                next.operation_timeout,
                &self.counter.hand_over,
                &[&keys.exclusive, &keys.token],
                &[
                    stored.to_string().as_bytes(),
                    next.lease_id.to_string().as_bytes(),
                    millis(next.lease).as_bytes(),
                    record.as_bytes(),
                    tokens.to_string().as_bytes(),
                ],
            )
            .await?;
        match int(&reply).map(u64::try_from) {
            Some(Ok(0)) => Ok(None),
            Some(Ok(fencing_token)) => Ok(Some(fencing_token)),
            _ => Err(unexpected(&what, &reply)),
        }
    }

    /// Takes up grant `lease` (found by its name, claim, identity and
    /// token) under `request`'s identity, lease and holder, in one script
    /// within `timeout` (see `RESUME` in the scripts): whether it was
    /// held and is now `request`'s. With `replicas`, `WAIT` for them in the
    /// same pipeline, and how many acknowledged.
    pub(crate) async fn resume(
        &self,
        lease: &Lease,
        request: &AcquireRequest,
        timeout: Duration,
        replicas: Option<Replicas>,
    ) -> Result<(bool, Option<Result<u64>>)> {
        let keys = self.keys.of(&lease.name);
        let (claim, limit) = claim_code(lease.claim);
        let what = Doing::new("resuming", &lease.name, &self.on);
        let record = Record::json(&request.name, &request.holder);
        let (reply, waited) = self
            .run_waiting(
                "resume",
                &what,
                timeout,
                &self.counter.resume,
                &[&keys.exclusive, &keys.holders, &keys.records, &keys.token],
                &[
                    claim.as_bytes(),
                    lease.id.to_string().as_bytes(),
                    lease.fencing_token.to_string().as_bytes(),
                    request.lease_id.to_string().as_bytes(),
                    millis(request.lease).as_bytes(),
                    record.as_bytes(),
                    limit.to_string().as_bytes(),
                ],
                replicas,
            )
            .await?;
        let resumed = int(&reply).ok_or_else(|| unexpected(&what.to_string(), &reply))?;
        Ok((resumed == 1, waited))
    }

    /// Every live grant under the prefix, walked with `SCAN` (never
    /// `KEYS`).
    pub(crate) async fn list(&self) -> Result<Vec<Listed>> {
        Ok(self.walk(Walk::Grants).await?.grants)
    }

    /// Every live waiting writer's mark under the prefix, with its record,
    /// walked as [`list`](Self::list) walks the grants, in no set order.
    pub(crate) async fn waiters(&self) -> Result<Vec<ListedWait>> {
        Ok(self.walk(Walk::Waits).await?.waits)
    }

    /// Walks the prefix with `SCAN` for the keys `walk` reads, on every
    /// master of a cluster.
    async fn walk(&self, walk: Walk) -> Result<Found> {
        let what = format!("{}{}", walk.doing(), self.on);
        let mut seen = BTreeSet::new();
        let mut found = Found::default();
        match self.link.get()? {
            Connection::Cluster(mut cluster) => {
                // Each master's keys, by its own SCAN; a key that moves
                // meanwhile may be seen on two, and is read once.
                let owners = SlotOwners::read(&mut cluster).await?;
                for master in owners.masters() {
                    let what = format!("{what} on {master}");
                    let mut on = OnMaster::new(cluster.clone(), master);
                    self.walk_on(
                        &mut on,
                        Some(&mut cluster),
                        &what,
                        walk,
                        &mut seen,
                        &mut found,
                    )
                    .await?;
                }
            }
            mut server => {
                self.walk_on(&mut server, None, &what, walk, &mut seen, &mut found)
                    .await?;
            }
        }
        Ok(found)
    }

    /// A walk on one server, or one master of a cluster (then `keyed`
    /// reads a name whose slot moved by routing on its keys).
    async fn walk_on(
        &self,
        connection: &mut (impl ConnectionLike + Send),
        mut keyed: Option<&mut ClusterConnection>,
        what: &str,
        walk: Walk,
        seen: &mut BTreeSet<String>,
        found: &mut Found,
    ) -> Result<()> {
        let pattern = match walk {
            Walk::Grants => self.keys.grant_pattern(),
            Walk::Waits => self.keys.waiting_pattern(),
        };
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT)
                .query_async(connection)
                .await
                .map_err(|e| from_redis(what, e))?;
            let tags: Vec<String> = keys
                .iter()
                .filter_map(|key| match walk {
                    Walk::Grants => self.keys.tag_of_grant_key(key),
                    Walk::Waits => self.keys.tag_of_waiting_key(key),
                })
                .filter(|tag| seen.insert((*tag).to_owned()))
                .map(str::to_owned)
                .collect();
            let read = self.inspect(connection, what, walk, &tags, found).await;
            match (read, keyed.as_deref_mut()) {
                (Ok(()), _) => {}
                // A slot moved under the walk: each name alone, routed by
                // its keys.
                (Err(error), Some(cluster)) => {
                    tracing::debug!(%error, "reading listed names one by one");
                    self.slots.forget();
                    for tag in &tags {
                        self.inspect(cluster, what, walk, std::slice::from_ref(tag), found)
                            .await?;
                    }
                }
                (Err(error), None) => return Err(error),
            }
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }

    /// Reads what `walk` reads of the names whose tags are `tags` (their
    /// live grants, or their live waiting writers), in one pipeline.
    async fn inspect(
        &self,
        connection: &mut (impl ConnectionLike + Send),
        what: &str,
        walk: Walk,
        tags: &[String],
        out: &mut Found,
    ) -> Result<()> {
        if tags.is_empty() {
            return Ok(());
        }
        let script = match walk {
            Walk::Grants => &SCRIPTS.inspect,
            Walk::Waits => &SCRIPTS.waiters,
        };
        let mut pipe = redis::pipe();
        let all: Vec<NameKeys> = tags.iter().map(|tag| self.keys.of_tag(tag)).collect();
        for keys in &all {
            let call = pipe.cmd("EVALSHA").arg(script.get_hash());
            match walk {
                Walk::Grants => call
                    .arg(3)
                    .arg(&keys.exclusive)
                    .arg(&keys.holders)
                    .arg(&keys.records),
                Walk::Waits => call.arg(2).arg(&keys.waiting).arg(&keys.waiting_records),
            };
        }
        let mut replies = connection.req_packed_commands(&pipe, 0, tags.len()).await;
        // One server answers NOSCRIPT in the replies; a cluster's driver
        // fails the pipeline with it.
        let noscript = match &replies {
            Ok(replies) => replies.iter().any(is_noscript),
            Err(error) => error.kind() == redis::ErrorKind::NoScriptError,
        };
        if noscript {
            script
                .prepare_invoke()
                .load_async(connection)
                .await
                .map_err(|e| from_redis(what, e))?;
            replies = connection.req_packed_commands(&pipe, 0, tags.len()).await;
        }
        let replies = replies.map_err(|e| from_redis(what, e))?;
        for (tag, reply) in tags.iter().zip(replies) {
            match reply {
                Value::Array(fields) => match walk {
                    Walk::Grants => read_grants(tag, &fields, &mut out.grants),
                    Walk::Waits => read_waits(tag, &fields, &mut out.waits),
                },
                Value::ServerError(error) => return Err(from_redis(what, error.into())),
                other => return Err(unexpected(what, &other)),
            }
        }
        Ok(())
    }

    /// The server's version and clock, asked within `timeout`.
    pub(crate) async fn server_info(&self, timeout: Duration) -> Result<ServerInfo> {
        deployment::server_info(&mut self.link.get()?, &self.on, timeout).await
    }

    /// The connection to the cluster, in cluster mode, for cluster mode's
    /// own operations (see [`crate::cluster`]).
    pub(crate) fn cluster_connection(&self) -> Option<ClusterConnection> {
        match self.link.get() {
            Ok(Connection::Cluster(connection)) => Some(connection),
            _ => None,
        }
    }
}

/// Sends `pipe`, `count` replies long, whose scripts are all `script`:
/// again on a new connection when the connection dropped (a server
/// restart: the connection manager opens another), and again once
/// `script` is loaded when the server lacked it. Only for pipelines that
/// may run twice; `doing` names what it does, for the log.
async fn send_again_if_lost(
    connection: &mut Connection,
    pipe: &redis::Pipeline,
    count: usize,
    script: &Script,
    doing: &str,
) -> redis::RedisResult<Vec<Value>> {
    let replies = match connection.req_packed_commands(pipe, 0, count).await {
        Err(error) if error.is_connection_dropped() || error.is_io_error() => {
            tracing::debug!(%error, "{doing} again on a new connection");
            connection.req_packed_commands(pipe, 0, count).await?
        }
        other => other?,
    };
    if !replies.iter().any(is_noscript) {
        return Ok(replies);
    }
    script.prepare_invoke().load_async(connection).await?;
    connection.req_packed_commands(pipe, 0, count).await
}

/// What a walk of the prefix reads of each name it finds.
#[derive(Debug, Clone, Copy)]
enum Walk {
    /// The live grants, of the names with an `x` or `s` key.
    Grants,
    /// The live waiting writers, of the names with a `w` key.
    Waits,
}

impl Walk {
    fn doing(self) -> &'static str {
        match self {
            Self::Grants => "listing locks",
            Self::Waits => "listing waiters",
        }
    }
}

/// What a walk found.
#[derive(Default)]
struct Found {
    grants: Vec<Listed>,
    waits: Vec<ListedWait>,
}

/// What a call does, for its errors (`acquiring NAME on host:port`): only
/// written out when there is one.
struct Doing<'a> {
    verb: &'static str,
    name: &'a LockName,
    on: &'a str,
}

impl<'a> Doing<'a> {
    fn new(verb: &'static str, name: &'a LockName, on: &'a str) -> Self {
        Self { verb, name, on }
    }
}

impl fmt::Display for Doing<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}{}", self.verb, self.name, self.on)
    }
}

/// What a release sends in cluster mode to be answered the same when the
/// driver runs it twice; empty elsewhere.
#[derive(Default)]
struct Remembered {
    /// How long, in ms.
    keep: String,
    /// The call's own identity.
    call: String,
}

/// A claim as the scripts name it, with its limit (0 but for permits).
fn claim_code(claim: Claim) -> (&'static str, u32) {
    match claim {
        Claim::Exclusive => ("x", 0),
        Claim::Shared => ("s", 0),
        Claim::Permit { limit } => ("p", limit),
    }
}

/// The identity the extend script checks for `lease`, and the token it
/// writes (empty: none). A grant no longer on the server (see
/// [`OnServer::Gone`]) is never sent; should one be, the nil identity,
/// which no grant has, is refused.
fn stored_as(lease: &Lease) -> (String, String) {
    match OnServer::of(lease) {
        OnServer::Stored { id, token } => (
            id.to_string(),
            token.map(|token| token.to_string()).unwrap_or_default(),
        ),
        OnServer::Gone => ("0".repeat(32), String::new()),
    }
}

/// A duration in whole milliseconds, at least 1, as Redis takes it.
fn millis(duration: Duration) -> String {
    duration.as_millis().max(1).to_string()
}
