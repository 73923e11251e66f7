//! The [`Backend`] on one Redis server.

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use distlock_core::{
    AcquireRequest, Attempt, Backend, Capabilities, Claim, Error, GrantState, HandOver, HandOvers,
    Holder, Lease, LeaseId, LockInfo, LockKind, LockName, MAX_PERMITS, Permits, ReleaseWatch,
    Result, ServerInfo, WaitState, Wakeups, async_trait,
};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Script, Value};

use crate::config::RedisConfig;
use crate::deployment;
use crate::error::{copy, from_redis, timed_out, unexpected};
use crate::keys::{KeySpace, NameKeys, Record, Stored};
use crate::scripts::SCRIPTS;
use crate::wake::Subscriber;

/// How long sent data may go unacknowledged, and how long a connection
/// may idle before the kernel probes it: a server cut off silently (a
/// firewall dropping the flow) is then noticed in seconds rather than the
/// kernel's default quarter of an hour, and the connection manager
/// reconnects.
const DEAD_PEER: Duration = Duration::from_secs(10);

/// The main connection's TCP settings; see [`DEAD_PEER`].
fn tcp_settings() -> redis::io::tcp::TcpSettings {
    let keepalive = redis::io::tcp::socket2::TcpKeepalive::new().with_time(DEAD_PEER);
    let settings = redis::io::tcp::TcpSettings::default().set_keepalive(keepalive);
    // Where the kernel has TCP_USER_TIMEOUT (elsewhere keepalive alone
    // notices a dead peer, more slowly).
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "fuchsia"))]
    let settings = settings.set_user_timeout(DEAD_PEER);
    settings
}

/// How long asking the server for its version and time may take.
const INFO_TIMEOUT: Duration = Duration::from_secs(10);

/// How long opening the backend may take.
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// The bound on `list` and `force_release`, which carry no client's
/// operation timeout.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a waiter waits before it tries again, at most, while releases
/// go unheard (the subscriber connection is down).
const POLL_WHILE_UNHEARD: Duration = Duration::from_secs(1);

/// How long a name's token counter outlives its latest grant. Past that,
/// the next token comes from the server's clock alone (tokens are
/// `max(previous + 1, server time in µs)`), so the counter only has to
/// outlive clock steps backwards.
const COUNTER_TTL: Duration = Duration::from_secs(30 * 86_400);

/// The most leases one `extend_many` pipelines: one round trip for all.
const EXTEND_MANY_LIMIT: usize = 10_000;

/// How many keys one `SCAN` step asks for.
const SCAN_COUNT: usize = 1000;

/// distlock's Redis backend; see the [crate docs](crate).
pub struct RedisBackend {
    config: RedisConfig,
    keys: KeySpace,
    connection: ConnectionManager,
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

/// What a waiting writer keeps across the attempts of one wait: the
/// identity of its mark, which keeps later readers out.
#[derive(Debug, Clone)]
struct WriterMark(String);

impl RedisBackend {
    /// Opens the backend at `url`; see the [crate docs](crate) for the URL.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a bad URL, [`Error::Unsupported`] for a
    /// mode this version lacks, [`Error::Denied`] for refused credentials,
    /// and a backend error when the server cannot be reached or does not
    /// answer as Redis does.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future drops the connection being made.
    pub async fn open(url: &str) -> Result<Self> {
        Self::connect(RedisConfig::parse(url)?).await
    }

    /// Opens the backend from a parsed configuration.
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
        let client = redis::Client::open(config.connection_info())
            .map_err(|e| from_redis("opening the redis backend", e))?;
        let manager = ConnectionManagerConfig::new()
            .set_tcp_settings(tcp_settings())
            .set_connection_timeout(OPEN_TIMEOUT)
            .set_number_of_retries(2)
            .set_max_delay(1000);
        let what = "connecting to redis";
        let mut connection = tokio::time::timeout(
            OPEN_TIMEOUT,
            ConnectionManager::new_with_config(client.clone(), manager),
        )
        .await
        .map_err(|_| timed_out("connect", OPEN_TIMEOUT))?
        .map_err(|e| from_redis(what, e))?;
        // A server that is not Redis may accept the connection; it does
        // not answer PING with PONG.
        let pong = tokio::time::timeout(
            OPEN_TIMEOUT,
            redis::cmd("PING").query_async::<Value>(&mut connection),
        )
        .await
        .map_err(|_| timed_out("connect", OPEN_TIMEOUT))?
        .map_err(|e| from_redis(what, e))?;
        if !matches!(&pong, Value::SimpleString(text) if text == "PONG") {
            return Err(unexpected(what, &pong));
        }
        let keys = KeySpace::new(&config.prefix);
        Ok(Self {
            wakeups: Subscriber::start(client, keys.clone()),
            keys,
            connection,
            config,
        })
    }

    /// The configuration this backend was opened with.
    pub fn config(&self) -> &RedisConfig {
        &self.config
    }

    /// The keys `name`'s grants live under: its exclusive grant (a string),
    /// its readers or permits (a sorted set) and their records (a hash),
    /// its waiting writers (a sorted set) and its token counter (a string).
    /// All carry one hash tag, derived from the name.
    pub fn keys_of(&self, name: &LockName) -> Vec<String> {
        let keys = self.keys.of(name);
        vec![
            keys.exclusive,
            keys.holders,
            keys.records,
            keys.waiting,
            keys.token,
        ]
    }

    /// Whether release wake-ups are on now: the subscriber connection is
    /// open. While it is not, waits poll.
    pub fn wake_ups(&self) -> bool {
        self.wakeups.is_live()
    }

    /// Runs `script` with `keys` and `args`, within `timeout`. The script
    /// is sent by its SHA, and loaded and sent again once if the server
    /// does not have it.
    async fn run(
        &self,
        operation: &'static str,
        what: &str,
        timeout: Duration,
        script: &Script,
        keys: &[&str],
        args: &[&[u8]],
    ) -> Result<Value> {
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(*key);
        }
        for arg in args {
            invocation.arg(*arg);
        }
        let mut connection = self.connection.clone();
        tokio::time::timeout(timeout, invocation.invoke_async::<Value>(&mut connection))
            .await
            .map_err(|_| timed_out(operation, timeout))?
            .map_err(|e| from_redis(what, e))
    }

    /// One attempt, with the writer's `mark` when it waits.
    async fn attempt(&self, request: &AcquireRequest, mark: Option<&WriterMark>) -> Result<Value> {
        let keys = self.keys.of(&request.name);
        let (claim, limit) = claim_code(request.claim);
        let id = request.lease_id.to_string();
        let lease = millis(request.lease);
        let record = Record::json(&request.name, &request.holder);
        let mark = mark.map_or("", |mark| mark.0.as_str());
        self.run(
            "acquire",
            &format!("acquiring {}", request.name),
            request.operation_timeout,
            &SCRIPTS.acquire,
            &[
                &keys.exclusive,
                &keys.holders,
                &keys.records,
                &keys.waiting,
                &keys.token,
            ],
            &[
                claim.as_bytes(),
                id.as_bytes(),
                lease.as_bytes(),
                record.as_bytes(),
                mark.as_bytes(),
                limit.to_string().as_bytes(),
                MAX_PERMITS.to_string().as_bytes(),
                millis(COUNTER_TTL).as_bytes(),
            ],
        )
        .await
    }

    /// Sends one `EVALSHA` of the extend script per lease, in one pipeline.
    async fn extend_pipeline(&self, leases: &[Lease]) -> redis::RedisResult<Vec<Value>> {
        let script = &SCRIPTS.extend;
        let mut pipe = redis::pipe();
        for lease in leases {
            let keys = self.keys.of(&lease.name);
            let (claim, _) = claim_code(lease.claim);
            pipe.cmd("EVALSHA")
                .arg(script.get_hash())
                .arg(3)
                .arg(&keys.exclusive)
                .arg(&keys.holders)
                .arg(&keys.records)
                .arg(claim)
                .arg(lease.id.to_string())
                .arg(millis(lease.lease));
        }
        let mut connection = self.connection.clone();
        let replies = match connection.req_packed_commands(&pipe, 0, leases.len()).await {
            // The connection dropped (a server restart): the connection
            // manager opens another, and extending again is harmless.
            Err(error) if error.is_connection_dropped() || error.is_io_error() => {
                tracing::debug!(%error, "extending again on a new connection");
                connection
                    .req_packed_commands(&pipe, 0, leases.len())
                    .await?
            }
            other => other?,
        };
        if !replies.iter().any(is_noscript) {
            return Ok(replies);
        }
        // Extending again is harmless: each extension runs the lease from
        // the server's now.
        script.prepare_invoke().load_async(&mut connection).await?;
        connection.req_packed_commands(&pipe, 0, leases.len()).await
    }

    /// Reads the live grants of the names whose tags are `tags`, in one
    /// pipeline.
    async fn inspect(&self, tags: &[String], out: &mut Vec<LockInfo>) -> Result<()> {
        if tags.is_empty() {
            return Ok(());
        }
        let script = &SCRIPTS.inspect;
        let mut pipe = redis::pipe();
        let all: Vec<NameKeys> = tags.iter().map(|tag| self.keys.of_tag(tag)).collect();
        for keys in &all {
            pipe.cmd("EVALSHA")
                .arg(script.get_hash())
                .arg(3)
                .arg(&keys.exclusive)
                .arg(&keys.holders)
                .arg(&keys.records);
        }
        let mut connection = self.connection.clone();
        let what = "listing locks";
        let mut replies = connection
            .req_packed_commands(&pipe, 0, tags.len())
            .await
            .map_err(|e| from_redis(what, e))?;
        if replies.iter().any(is_noscript) {
            script
                .prepare_invoke()
                .load_async(&mut connection)
                .await
                .map_err(|e| from_redis(what, e))?;
            replies = connection
                .req_packed_commands(&pipe, 0, tags.len())
                .await
                .map_err(|e| from_redis(what, e))?;
        }
        for (tag, reply) in tags.iter().zip(replies) {
            match reply {
                Value::Array(fields) => read_grants(tag, &fields, out),
                Value::ServerError(error) => return Err(from_redis(what, error.into())),
                other => return Err(unexpected(what, &other)),
            }
        }
        Ok(())
    }

    async fn list_all(&self) -> Result<Vec<LockInfo>> {
        let mut connection = self.connection.clone();
        let pattern = self.keys.grant_pattern();
        let mut cursor: u64 = 0;
        let mut seen = BTreeSet::new();
        let mut infos = Vec::new();
        loop {
            let (next, found): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT)
                .query_async(&mut connection)
                .await
                .map_err(|e| from_redis("listing locks", e))?;
            let tags: Vec<String> = found
                .iter()
                .filter_map(|key| self.keys.tag_of_grant_key(key))
                .filter(|tag| seen.insert((*tag).to_owned()))
                .map(str::to_owned)
                .collect();
            self.inspect(&tags, &mut infos).await?;
            if next == 0 {
                break;
            }
            cursor = next;
        }
        infos.sort_by(|a, b| (&a.name, a.fencing_token).cmp(&(&b.name, b.fencing_token)));
        Ok(infos)
    }
}

#[async_trait]
impl Backend for RedisBackend {
    fn store_name(&self) -> &'static str {
        "redis"
    }

    async fn server_info(&self) -> Result<ServerInfo> {
        let mut connection = self.connection.clone();
        let ask = async {
            let info: String = redis::cmd("INFO")
                .arg("server")
                .query_async(&mut connection)
                .await?;
            let time: (u64, u64) = redis::cmd("TIME").query_async(&mut connection).await?;
            let features = deployment::features(&mut connection).await;
            Ok::<_, redis::RedisError>((info, time, features))
        };
        let (info, (seconds, micros), features) = tokio::time::timeout(INFO_TIMEOUT, ask)
            .await
            .map_err(|_| timed_out("server info", INFO_TIMEOUT))?
            .map_err(|e| from_redis("asking the server for its version and time", e))?;
        let version = info
            .lines()
            .find_map(|line| line.strip_prefix("redis_version:"))
            .map(|version| format!("Redis {}", version.trim()));
        let clock =
            std::time::UNIX_EPOCH + Duration::from_secs(seconds) + Duration::from_micros(micros);
        Ok(features.into_iter().fold(
            ServerInfo::new(version, Some(clock)),
            ServerInfo::with_feature,
        ))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::lease_based()
            .with_shared(true)
            .with_semaphores(true)
            .with_bounds_calls(true)
    }

    async fn try_acquire(&self, request: &AcquireRequest, wait: &mut WaitState) -> Result<Attempt> {
        let mark = (request.claim == Claim::Exclusive && request.retries).then(|| {
            wait.take::<WriterMark>()
                .unwrap_or_else(|| WriterMark(LeaseId::random().to_string()))
        });
        if let Some(mark) = &mark {
            // Should the reply be lost, the mark may be stored: the wait's
            // end removes it.
            wait.set(mark.clone());
        }
        let what = format!("acquiring {}", request.name);
        let reply = self.attempt(request, mark.as_ref()).await?;
        let fields = match &reply {
            Value::Array(fields) => fields,
            other => return Err(unexpected(&what, other)),
        };
        match (fields.first().and_then(int), fields.get(1), fields.get(2)) {
            (Some(1), Some(token), _) => {
                wait.take::<WriterMark>();
                let fencing_token = int(token)
                    .and_then(|token| u64::try_from(token).ok())
                    .ok_or_else(|| unexpected(&what, &reply))?;
                Ok(Attempt::Acquired {
                    fencing_token,
                    state: GrantState::none(),
                })
            }
            (Some(0), Some(left), Some(marked)) => {
                let marked = int(marked) == Some(1);
                if !marked {
                    wait.take::<WriterMark>();
                }
                let mut retry_after = int(left)
                    .and_then(|left| u64::try_from(left).ok())
                    .map(Duration::from_millis);
                if marked {
                    // The mark lasts a lease from this attempt: try again
                    // well within it, so that it does not lapse.
                    retry_after = Some(
                        retry_after.map_or(request.lease / 2, |after| after.min(request.lease / 2)),
                    );
                }
                if !self.wakeups.is_live() {
                    retry_after = Some(
                        retry_after
                            .map_or(POLL_WHILE_UNHEARD, |after| after.min(POLL_WHILE_UNHEARD)),
                    );
                }
                Ok(Attempt::Held { retry_after })
            }
            (Some(2), Some(kind), Some(limit)) => {
                // The writer's mark stays in the wait state: the wait ends
                // on this error, and `end_wait` removes the mark.
                let held = match (text(kind).as_deref(), int(limit)) {
                    (Some("s"), _) => Claim::Shared,
                    (Some("p"), Some(limit)) => Claim::Permit {
                        limit: u32::try_from(limit).unwrap_or(0),
                    },
                    _ => Claim::Exclusive,
                };
                Err(request.claim.conflict(&request.name, held))
            }
            _ => Err(unexpected(&what, &reply)),
        }
    }

    async fn end_wait(&self, request: &AcquireRequest, mut wait: WaitState) -> Result<()> {
        let Some(mark) = wait.take::<WriterMark>() else {
            return Ok(());
        };
        let keys = self.keys.of(&request.name);
        self.run(
            "end_wait",
            &format!("ending a wait for {}", request.name),
            request.operation_timeout,
            &SCRIPTS.end_wait,
            &[&keys.waiting],
            &[mark.0.as_bytes(), keys.channel.as_bytes()],
        )
        .await
        .map(drop)
    }

    async fn extend(&self, lease: &Lease) -> Result<bool> {
        self.extend_many(std::slice::from_ref(lease))
            .await
            .pop()
            .unwrap_or(Ok(false))
    }

    fn extend_many_limit(&self) -> usize {
        EXTEND_MANY_LIMIT
    }

    async fn extend_many(&self, leases: &[Lease]) -> Vec<Result<bool>> {
        if leases.is_empty() {
            return Vec::new();
        }
        // One client's keeper extends these, with its one operation timeout.
        let timeout = leases
            .iter()
            .map(|lease| lease.operation_timeout)
            .min()
            .unwrap_or(ADMIN_TIMEOUT);
        let what = match leases {
            [one] => format!("extending {}", one.name),
            _ => format!("extending {} leases", leases.len()),
        };
        let replies = match tokio::time::timeout(timeout, self.extend_pipeline(leases)).await {
            Ok(Ok(replies)) if replies.len() == leases.len() => replies,
            Ok(Ok(replies)) => {
                let error = unexpected(&what, &Value::Array(replies));
                return leases.iter().map(|_| Err(copy(&error))).collect();
            }
            Ok(Err(error)) => {
                let error = from_redis(&what, error);
                return leases.iter().map(|_| Err(copy(&error))).collect();
            }
            Err(_) => {
                return leases
                    .iter()
                    .map(|_| Err(timed_out("extend", timeout)))
                    .collect();
            }
        };
        replies
            .into_iter()
            .map(|reply| match reply {
                Value::Int(extended) => Ok(extended == 1),
                Value::ServerError(error) => Err(from_redis(&what, error.into())),
                other => Err(unexpected(&what, &other)),
            })
            .collect()
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        let keys = self.keys.of(&lease.name);
        let (claim, _) = claim_code(lease.claim);
        let what = format!("releasing {}", lease.name);
        let reply = self
            .run(
                "release",
                &what,
                lease.operation_timeout,
                &SCRIPTS.release,
                &[&keys.exclusive, &keys.holders, &keys.records],
                &[
                    claim.as_bytes(),
                    lease.id.to_string().as_bytes(),
                    keys.channel.as_bytes(),
                ],
            )
            .await?;
        int(&reply)
            .map(|freed| freed == 1)
            .ok_or_else(|| unexpected(&what, &reply))
    }

    async fn list(&self) -> Result<Vec<LockInfo>> {
        tokio::time::timeout(ADMIN_TIMEOUT, self.list_all())
            .await
            .map_err(|_| timed_out("list", ADMIN_TIMEOUT))?
    }

    async fn force_release(&self, name: &LockName) -> Result<bool> {
        let keys = self.keys.of(name);
        let what = format!("force-releasing {name}");
        let reply = self
            .run(
                "force_release",
                &what,
                ADMIN_TIMEOUT,
                &SCRIPTS.force_release,
                &[&keys.exclusive, &keys.holders, &keys.records],
                &[keys.channel.as_bytes()],
            )
            .await?;
        int(&reply)
            .map(|freed| freed == 1)
            .ok_or_else(|| unexpected(&what, &reply))
    }

    fn hand_overs(&self) -> Option<&dyn HandOvers> {
        Some(self)
    }

    fn wakeups(&self) -> Option<&dyn Wakeups> {
        Some(self)
    }
}

#[async_trait]
impl HandOvers for RedisBackend {
    async fn hand_over(&self, lease: &Lease, next: &AcquireRequest) -> Result<HandOver> {
        if lease.claim != Claim::Exclusive || next.claim != Claim::Exclusive {
            return Err(Error::Unsupported(
                "only an exclusive lock is handed over".into(),
            ));
        }
        let keys = self.keys.of(&lease.name);
        let what = format!("handing over {}", lease.name);
        let record = Record::json(&next.name, &next.holder);
        let reply = self
            .run(
                "hand_over",
                &what,
                next.operation_timeout,
                &SCRIPTS.hand_over,
                &[&keys.exclusive, &keys.token],
                &[
                    lease.id.to_string().as_bytes(),
                    next.lease_id.to_string().as_bytes(),
                    millis(next.lease).as_bytes(),
                    record.as_bytes(),
                    millis(COUNTER_TTL).as_bytes(),
                ],
            )
            .await?;
        match int(&reply).map(u64::try_from) {
            Some(Ok(0)) => Ok(HandOver::NotOurs),
            Some(Ok(fencing_token)) => Ok(HandOver::Granted {
                fencing_token,
                confirmed_at: None,
                state: GrantState::none(),
            }),
            _ => Err(unexpected(&what, &reply)),
        }
    }
}

impl Wakeups for RedisBackend {
    fn watch(&self, name: &LockName) -> Option<ReleaseWatch> {
        self.wakeups.watch(name)
    }
}

/// A claim as the scripts name it, with its limit (0 but for permits).
fn claim_code(claim: Claim) -> (&'static str, u32) {
    match claim {
        Claim::Exclusive => ("x", 0),
        Claim::Shared => ("s", 0),
        Claim::Permit { limit } => ("p", limit),
    }
}

/// A duration in whole milliseconds, at least 1, as Redis takes it.
fn millis(duration: Duration) -> String {
    duration.as_millis().max(1).to_string()
}

fn int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    }
}

fn bytes(value: &Value) -> Option<&[u8]> {
    match value {
        Value::BulkString(bytes) => Some(bytes),
        _ => None,
    }
}

fn is_noscript(reply: &Value) -> bool {
    matches!(reply, Value::ServerError(error) if error.code() == "NOSCRIPT")
}

/// Adds the live grants of one name, as the inspect script read them, to
/// `out`. Grants whose records do not parse, or whose name does not give
/// this tag, are not ours and are left out.
fn read_grants(tag: &str, fields: &[Value], out: &mut Vec<LockInfo>) {
    let ours = |stored: &Stored| -> Option<LockName> {
        let name = LockName::new(&stored.record.name).ok()?;
        (crate::keys::tag(&name) == tag).then_some(name)
    };
    let info = |name: LockName, kind, permits, holder: Holder, token, left: i64| LockInfo {
        name,
        kind,
        permits,
        holder: Some(holder),
        fencing_token: Some(token),
        expires_in: u64::try_from(left).ok().map(Duration::from_millis),
    };
    if let (Some(value), Some(left)) = (fields.first().and_then(bytes), fields.get(1).and_then(int))
        && let Some(stored) = Stored::parse_exclusive(value)
        && let Some(name) = ours(&stored)
    {
        out.push(info(
            name,
            LockKind::Exclusive,
            None,
            stored.record.holder,
            stored.token,
            left,
        ));
    }
    let kind = fields.get(2).and_then(text);
    let limit = fields
        .get(3)
        .and_then(int)
        .and_then(|limit| u32::try_from(limit).ok())
        .unwrap_or(0);
    let grants = fields.get(4..).unwrap_or_default();
    let in_use = u32::try_from(grants.len() / 3).unwrap_or(u32::MAX);
    let (kind, permits) = match kind.as_deref() {
        Some("s") => (LockKind::Shared, None),
        Some("p") => (LockKind::Semaphore, Some(Permits { in_use, limit })),
        _ => return,
    };
    for grant in grants.chunks_exact(3) {
        if let (Some(left), Some(value)) = (int(&grant[1]), bytes(&grant[2]))
            && let Some(stored) = Stored::parse(value)
            && let Some(name) = ours(&stored)
        {
            out.push(info(
                name,
                kind,
                permits,
                stored.record.holder,
                stored.token,
                left,
            ));
        }
    }
}
