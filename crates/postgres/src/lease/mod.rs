//! Lease mode: each decision is one statement on one lock row.
//!
//! Its statements are in [`statements`], fair mode's in [`fair`]; a
//! name's [`gate`] keeps its tokens increasing across the deletion of its
//! row; what a wait keeps between attempts is in [`waiting`].

mod fair;
mod gate;
mod statements;
mod waiting;

use std::collections::HashSet;
use std::time::Duration;

use distlock_core::backend::{
    AcquireRequest, Attempt, Capabilities, Extended, GrantState, HandOver, Lease, WaitState,
};
use distlock_core::{Claim, LockInfo, LockKind, LockName, Result, Waiter};
use tokio_postgres::Row;
use tokio_postgres::types::{ToSql, Type};

use self::fair::{FairStatements, Found};
use self::statements::{ClaimKind, Statements};
use self::waiting::{Due, InLine, PlaceId, WriterMark};
use crate::clock::server_time;
use crate::error::{copy, notification_queue_full};
use crate::pool::Connections;
use crate::prepared::Params;
use crate::rows::{self, HeldBy, get, holder_json, micros};
use crate::store::Store;
use crate::sweep::Sweep;
use crate::table::TableName;
use crate::terms::{self, TermRecord};
use crate::wake::{Channels, Listener, POLL_WHILE_RECONNECTING, WakeUps};

/// The most leases one bulk extension carries: one statement extends them
/// all, within one operation timeout. On a server busy with commits, one
/// lease's row cost about 0.2 ms, so 10,000 leases ran past a 3 s timeout
/// and were sent again, and lost; 1,000 take a fraction of it.
pub(crate) const EXTEND_MANY_LIMIT: usize = 1_000;

/// How long counting a line of waiters ([`PostgresBackend::queued`]) may
/// take: no client's operation timeout comes with it.
///
/// [`PostgresBackend::queued`]: crate::PostgresBackend::queued
const QUEUED_TIMEOUT: Duration = Duration::from_secs(10);

/// Locks kept as rows of one PostgreSQL table, judged by the server's
/// clock. See the [crate documentation](crate) for the guarantees, and
/// `docs/postgres.md` for the table.
pub(crate) struct LeaseMode {
    pub(crate) store: Store,
    statements: Statements,
    /// Fair mode's statements, when it is on.
    fair: Option<FairStatements>,
}

impl LeaseMode {
    /// Lease mode on `table`, whose releases `listener` hears; it records
    /// election terms when `records_terms` (their table is there), and
    /// serves waiters in the order they asked when `fair`.
    pub(crate) fn new(
        connections: Connections,
        table: &TableName,
        channels: Channels,
        listener: Listener,
        records_terms: bool,
        fair: bool,
    ) -> Self {
        let statements = Statements::new(table);
        let terms_table = table.terms();
        let fair = fair.then(|| FairStatements::new(table, records_terms.then_some(&terms_table)));
        let sweep = Sweep::lease(connections.clone(), statements.sweep.clone());
        let terms =
            records_terms.then(|| TermRecord::new(connections.clone(), &terms_table, Some(table)));
        Self {
            store: Store::new(connections, channels, listener, terms, sweep),
            fair,
            statements,
        }
    }

    /// How many waiters have a live place in `name`'s line: none
    /// outside fair mode. See
    /// [`PostgresBackend::queued`](crate::PostgresBackend::queued).
    ///
    /// # Errors
    /// A backend error.
    ///
    /// # Cancel safety
    /// A read: dropping the future changes nothing.
    pub(crate) async fn queued(&self, name: &LockName) -> Result<usize> {
        let Some(fair) = &self.fair else {
            return Ok(0);
        };
        let bytes = name.as_str().as_bytes();
        let what = format!("counting the places in line for {name}");
        let rows = self
            .store
            .connections
            .query(
                &what,
                &fair.queued,
                &[(&bytes, Type::BYTEA)],
                QUEUED_TIMEOUT,
            )
            .await?;
        match rows.first() {
            Some(row) => Ok(usize::try_from(get::<i64>(row, 0, &what)?).unwrap_or(0)),
            None => Ok(0),
        }
    }

    /// Runs `sql`, a statement that may free `name`, with `params` and then
    /// the channel and payload that announce it (see [`Announced`]); sent
    /// once more without the notification when the server's queue is full.
    async fn freeing(
        &self,
        what: &str,
        sql: &str,
        name: &LockName,
        params: &Params<'_>,
        timeout: Duration,
    ) -> Result<Vec<Row>> {
        self.freeing_then(what, sql, name, params, &[], timeout)
            .await
    }

    /// As [`freeing`](Self::freeing), with `trailing` after the channel
    /// and the payload.
    async fn freeing_then(
        &self,
        what: &str,
        sql: &str,
        name: &LockName,
        params: &Params<'_>,
        trailing: &Params<'_>,
        timeout: Duration,
    ) -> Result<Vec<Row>> {
        let mut announced = Announced::new(self.store.channels, name);
        loop {
            let mut all = params.to_vec();
            all.push((&announced.channel, Type::TEXT));
            all.push((&announced.payload, Type::TEXT));
            all.extend_from_slice(trailing);
            let outcome = self.store.connections.query(what, sql, &all, timeout).await;
            drop(all);
            if !announced.without_notification_after(&outcome) {
                return outcome;
            }
        }
    }

    /// One fair attempt at the whole lock (see [`fair`]): the
    /// grant made to this wait's place taken over, or the lock if nobody
    /// holds or waits, or this wait's place in line taken or renewed.
    async fn wait_in_line(
        &self,
        fair: &FairStatements,
        request: &AcquireRequest,
        wait: &mut WaitState,
    ) -> Result<Attempt> {
        let calls = self.store.listener.calls();
        if let Some(left) = self.not_called(request, wait) {
            // Woken by a release that granted another's place: ours keeps
            // its turn, and the store has nothing new for us yet.
            return Ok(Attempt::Held {
                retry_after: Some(left),
            });
        }
        let place = request.retries.then(|| {
            wait.get::<InLine>()
                .map_or_else(PlaceId::new, |line| line.place.clone())
        });
        let asked = place.as_ref().map(|place| {
            // Should the reply be lost, the place may be stored: the
            // wait's end gives it up.
            wait.set(InLine {
                place: place.clone(),
                due: None,
            });
            calls.asking(place.as_str())
        });
        let sent_at = tokio::time::Instant::now();
        let name = request.name.as_str().as_bytes();
        let id = request.lease_id.to_string();
        let place_id = place.as_ref().map(PlaceId::as_str);
        let lease_us = micros(request.lease);
        let holder = holder_json(&request.holder);
        let term_holder = terms::recorded(request, self.store.terms.is_some())?
            .then(|| terms::holder_json(&request.holder));
        let rows = self
            .freeing(
                &format!("acquiring {}", request.name),
                &fair.attempt,
                &request.name,
                &[
                    (&name, Type::BYTEA),
                    (&id, Type::TEXT),
                    (&place_id, Type::TEXT),
                    (&lease_us, Type::INT8),
                    (&holder, Type::TEXT),
                    (&term_holder, Type::TEXT),
                ],
                request.operation_timeout,
            )
            .await?;
        let Some(row) = rows.first() else {
            // Another made or deleted the row at the same moment: ask again.
            return Ok(Attempt::Held {
                retry_after: Some(Duration::ZERO),
            });
        };
        match Found::read(row, &request.name)? {
            Found::Acquired(fencing_token) => {
                if let Some(line) = wait.take::<InLine>() {
                    calls.forget(line.place.as_str());
                }
                Ok(Attempt::Acquired {
                    fencing_token,
                    state: GrantState::none(),
                })
            }
            Found::Held {
                claim,
                first_expiry,
            } => {
                if let Some(claim) = claim
                    && !request.claim.same_family(claim)
                {
                    return Err(request.claim.conflict(&request.name, claim));
                }
                // The grant comes with a notification; without one, the
                // holder's lease ends, and the next attempt passes the
                // lock on. The place lasts a lease from this attempt:
                // renew it well within.
                let mut retry_after = first_expiry
                    .unwrap_or(Duration::ZERO)
                    .min(request.lease / 2);
                if self.store.listener.state() == WakeUps::Reconnecting {
                    retry_after = retry_after.min(POLL_WHILE_RECONNECTING);
                }
                if let (Some(place), Some(asked)) = (place, asked) {
                    wait.set(InLine {
                        place,
                        due: Some(Due {
                            at: sent_at + retry_after,
                            asked,
                        }),
                    });
                }
                Ok(Attempt::Held {
                    retry_after: Some(retry_after),
                })
            }
        }
    }

    /// How long until a waiting attempt is due to ask the store, when no
    /// release called its place since it last asked and wake-ups are
    /// heard; `None` when it is to ask now.
    fn not_called(&self, request: &AcquireRequest, wait: &WaitState) -> Option<Duration> {
        let line = wait.get::<InLine>()?;
        let due = line.due?;
        if !request.retries || self.store.listener.state() != WakeUps::Listening {
            return None;
        }
        let left = due
            .at
            .checked_duration_since(tokio::time::Instant::now())
            .filter(|left| !left.is_zero())?;
        (!self
            .store
            .listener
            .calls()
            .called(line.place.as_str(), due.asked))
        .then_some(left)
    }

    /// Why an attempt that was not granted found `request.name` held; a
    /// waiting writer's mark is added or refreshed on the way.
    async fn why_held(
        &self,
        request: &AcquireRequest,
        mark: Option<&WriterMark>,
        wait: &mut WaitState,
    ) -> Result<Attempt> {
        let name = request.name.as_str().as_bytes();
        let mark_id = mark.map(WriterMark::as_str);
        let lease_us = micros(request.lease);
        // The mark records who waits, for `list`.
        let holder = holder_json(&request.holder);
        let rows = self
            .store
            .connections
            .query(
                &format!("acquiring {}", request.name),
                &self.statements.held,
                &[
                    (&name, Type::BYTEA),
                    (&mark_id, Type::TEXT),
                    (&lease_us, Type::INT8),
                    (&holder, Type::TEXT),
                ],
                request.operation_timeout,
            )
            .await?;
        let Some(row) = rows.first() else {
            // The row went between the two statements: nothing holds it.
            wait.take::<WriterMark>();
            return Ok(Attempt::Held {
                retry_after: Some(Duration::ZERO),
            });
        };
        let held = HeldBy::read(row, &request.name)?;
        if !held.marked {
            wait.take::<WriterMark>();
        }
        if let Some(claim) = held.claim
            && !request.claim.same_family(claim)
        {
            return Err(request.claim.conflict(&request.name, claim));
        }
        // A release wakes a waiter; without one, the name comes free when
        // the first holder's lease ends, or, for a reader kept out by
        // writers' marks alone, when the first mark does. Nothing left
        // between the two statements: try again now.
        let mut retry_after = held
            .first_expiry
            .or(held.first_mark_expiry)
            .unwrap_or(Duration::ZERO);
        if held.marked {
            // The mark lasts a lease from this attempt: try again well
            // within it, so that it does not lapse while we wait.
            retry_after = retry_after.min(request.lease / 2);
        }
        if self.store.listener.state() == WakeUps::Reconnecting {
            // Releases go unheard until the listening connection is back.
            retry_after = retry_after.min(POLL_WHILE_RECONNECTING);
        }
        Ok(Attempt::Held {
            retry_after: Some(retry_after),
        })
    }
}

/// The calls of [`Backend`](distlock_core::backend::Backend) that lease mode
/// answers its own way; the backend answers the rest for both modes.
impl LeaseMode {
    pub(crate) fn capabilities(&self) -> Capabilities {
        Capabilities::lease_based()
            .with_shared(true)
            .with_semaphores(true)
            .with_fair(self.fair.is_some())
    }

    pub(crate) async fn try_acquire(
        &self,
        request: &AcquireRequest,
        wait: &mut WaitState,
    ) -> Result<Attempt> {
        if let Some(fair) = &self.fair
            && request.claim == Claim::Exclusive
        {
            return self.wait_in_line(fair, request, wait).await;
        }
        let asked = ClaimKind::of(request.claim);
        let mark = (asked == ClaimKind::Exclusive && request.retries)
            .then(|| wait.take::<WriterMark>().unwrap_or_else(WriterMark::new));
        if let Some(mark) = &mark {
            // Should the reply be lost, the mark may be stored: the wait's
            // end removes it.
            wait.set(mark.clone());
        }
        let name = request.name.as_str().as_bytes();
        let id = request.lease_id.to_string();
        let kind = asked.kind();
        let limit = request
            .claim
            .limit()
            .map(|limit| i32::try_from(limit).unwrap_or(i32::MAX));
        let lease_us = micros(request.lease);
        let holder = holder_json(&request.holder);
        let mark_id = mark.as_ref().map(WriterMark::as_str);
        let what = format!("acquiring {}", request.name);
        let params: [(&(dyn ToSql + Sync), Type); 7] = [
            (&name, Type::BYTEA),
            (&id, Type::TEXT),
            (&kind, Type::TEXT),
            (&limit, Type::INT4),
            (&lease_us, Type::INT8),
            (&holder, Type::TEXT),
            (&mark_id, Type::TEXT),
        ];
        // A campaign's statement also takes the holder with its label
        // whole; a plain acquire sends what it always did.
        let (term_holder, campaign_params);
        let (sql, params): (&str, &Params<'_>) =
            if terms::recorded(request, self.store.terms.is_some())? {
                term_holder = terms::holder_json(&request.holder);
                campaign_params = [params.as_slice(), &[(&term_holder, Type::TEXT)]].concat();
                (&self.statements.campaign, &campaign_params)
            } else {
                (self.statements.acquire(asked), &params)
            };
        let rows = self
            .store
            .connections
            .query(&what, sql, params, request.operation_timeout)
            .await?;
        match rows.first() {
            Some(row) => {
                // Our mark, if any, went with the grant.
                wait.take::<WriterMark>();
                Ok(Attempt::Acquired {
                    fencing_token: rows::token(get(row, 0, &what)?, &what)?,
                    state: GrantState::none(),
                })
            }
            None => self.why_held(request, mark.as_ref(), wait).await,
        }
    }

    pub(crate) async fn end_wait(
        &self,
        request: &AcquireRequest,
        mut wait: WaitState,
    ) -> Result<()> {
        if let Some(fair) = &self.fair
            && let Some(InLine { place, .. }) = wait.take::<InLine>()
        {
            self.store.listener.calls().forget(place.as_str());
            // The place goes, and a grant made to it passes on, its term
            // withdrawn where terms are recorded.
            let name = request.name.as_str().as_bytes();
            let place_id = place.as_str();
            let holder = terms::holder_json(&request.holder);
            let (sql, trailing): (&str, &Params<'_>) = match &fair.leave {
                Some(leave) => (leave, &[(&holder, Type::TEXT)]),
                None => (&fair.release, &[]),
            };
            return self
                .freeing_then(
                    &format!("ending a wait for {}", request.name),
                    sql,
                    &request.name,
                    &[(&name, Type::BYTEA), (&place_id, Type::TEXT)],
                    trailing,
                    request.operation_timeout,
                )
                .await
                .map(drop);
        }
        let Some(mark) = wait.take::<WriterMark>() else {
            return Ok(());
        };
        let name = request.name.as_str().as_bytes();
        let mark_id = mark.as_str();
        self.freeing(
            &format!("ending a wait for {}", request.name),
            &self.statements.end_wait,
            &request.name,
            &[(&name, Type::BYTEA), (&mark_id, Type::TEXT)],
            request.operation_timeout,
        )
        .await
        .map(drop)
    }

    pub(crate) async fn extend_many(&self, leases: &[Lease]) -> Extended {
        // One client's keeper extends these, with its one operation timeout.
        let Some(timeout) = leases.iter().map(|lease| lease.operation_timeout).min() else {
            return Extended::new(Vec::new(), None);
        };
        let names: Vec<&[u8]> = leases
            .iter()
            .map(|lease| lease.name.as_str().as_bytes())
            .collect();
        let ids: Vec<String> = leases.iter().map(|lease| lease.id.to_string()).collect();
        let lease_us: Vec<i64> = leases.iter().map(|lease| micros(lease.lease)).collect();
        let what = match leases {
            [one] => format!("extending {}", one.name),
            _ => format!("extending {} leases", leases.len()),
        };
        let extended = self
            .store
            .connections
            .query(
                &what,
                &self.statements.extend,
                &[
                    (&names, Type::BYTEA_ARRAY),
                    (&ids, Type::TEXT_ARRAY),
                    (&lease_us, Type::INT8_ARRAY),
                ],
                timeout,
            )
            .await
            .and_then(|rows| {
                let mut extended = HashSet::new();
                let mut now_us = None;
                for row in &rows {
                    extended.extend(get::<Vec<String>>(row, 1, &what)?);
                    now_us = Some(get::<i64>(row, 2, &what)?);
                }
                Ok((extended, now_us))
            });
        match extended {
            Ok((extended, now_us)) => Extended::new(
                ids.iter().map(|id| Ok(extended.contains(id))).collect(),
                // No row comes back when none was extended: no reading.
                now_us.and_then(server_time),
            ),
            Err(error) => Extended::new(leases.iter().map(|_| Err(copy(&error))).collect(), None),
        }
    }

    pub(crate) async fn release(&self, lease: &Lease) -> Result<bool> {
        let name = lease.name.as_str().as_bytes();
        let id = lease.id.to_string();
        // In fair mode the release also grants the first waiter's place.
        let sql = match &self.fair {
            Some(fair) => &fair.release,
            None => &self.statements.release,
        };
        self.freeing(
            &format!("releasing {}", lease.name),
            sql,
            &lease.name,
            &[(&name, Type::BYTEA), (&id, Type::TEXT)],
            lease.operation_timeout,
        )
        .await
        .map(|rows| !rows.is_empty())
    }

    /// Whether waiting writers keep places in line (fair mode).
    pub(crate) fn is_fair(&self) -> bool {
        self.fair.is_some()
    }

    /// In fair mode, every place in line, with its name, in line order
    /// (places record no time of their first attempt); otherwise every
    /// live writer's mark, in the order the waits began, with how long
    /// each has waited by the server's clock. Readers and permits leave
    /// neither, and wait unlisted.
    pub(crate) async fn waiters(&self, limit: Duration) -> Result<Vec<(LockName, Waiter)>> {
        let sql = match &self.fair {
            Some(fair) => &fair.waiters,
            None => &self.statements.waiters,
        };
        let rows = self
            .store
            .connections
            .query("listing waiters", sql, &[], limit)
            .await?;
        let what = "a listed waiter";
        rows.iter()
            .map(|row| {
                let name = rows::name(row, what)?;
                let holder: Option<String> = get(row, 1, what)?;
                let waited_us: Option<i64> = match self.fair {
                    Some(_) => None,
                    None => get(row, 2, what)?,
                };
                let waiter = Waiter {
                    // Only a whole lock's wait keeps a place or a mark.
                    kind: LockKind::Exclusive,
                    holder: holder.and_then(|json| serde_json::from_str(&json).ok()),
                    waiting_for: waited_us.map(rows::duration),
                };
                Ok((name, waiter))
            })
            .collect()
    }

    pub(crate) async fn list(&self, limit: Duration) -> Result<Vec<LockInfo>> {
        let rows = self
            .store
            .connections
            .query("listing locks", &self.statements.list, &[], limit)
            .await?;
        rows.iter().map(rows::lock_info).collect()
    }

    pub(crate) async fn force_release(&self, name: &LockName, limit: Duration) -> Result<bool> {
        let bytes = name.as_str().as_bytes();
        self.freeing(
            &format!("force-releasing {name}"),
            &self.statements.force_release,
            name,
            &[(&bytes, Type::BYTEA)],
            limit,
        )
        .await
        .map(|rows| !rows.is_empty())
    }

    /// Takes up the grant `lease` names (by its name, identity, token and
    /// claim) under `request`'s identity, in one statement; see
    /// [`Resumes`](distlock_core::backend::Resumes) and
    /// [`statements`]'s `resume`. `None` when no such grant lives.
    pub(crate) async fn resume(
        &self,
        lease: &Lease,
        request: &AcquireRequest,
    ) -> Result<Option<GrantState>> {
        // A token no grant of this table can have (they are the server's
        // clock in µs) holds nothing.
        let Ok(token) = i64::try_from(lease.fencing_token) else {
            return Ok(None);
        };
        let name = lease.name.as_str().as_bytes();
        let old = lease.id.to_string();
        let kind = ClaimKind::of(lease.claim).kind();
        let limit = lease
            .claim
            .limit()
            .map(|limit| i32::try_from(limit).unwrap_or(i32::MAX));
        let new = request.lease_id.to_string();
        let lease_us = micros(request.lease);
        let holder = holder_json(&request.holder);
        let rows = self
            .store
            .connections
            .query(
                &format!("resuming {}", lease.name),
                &self.statements.resume,
                &[
                    (&name, Type::BYTEA),
                    (&old, Type::TEXT),
                    (&token, Type::INT8),
                    (&kind, Type::TEXT),
                    (&limit, Type::INT4),
                    (&new, Type::TEXT),
                    (&lease_us, Type::INT8),
                    (&holder, Type::TEXT),
                ],
                request.operation_timeout,
            )
            .await?;
        // The state a fresh grant of any claim gets in this mode.
        Ok((!rows.is_empty()).then(GrantState::none))
    }

    /// Hands the lock `lease` holds to `next`, in one statement.
    pub(crate) async fn hand_over(&self, lease: &Lease, next: &AcquireRequest) -> Result<HandOver> {
        let name = lease.name.as_str().as_bytes();
        let old = lease.id.to_string();
        let new = next.lease_id.to_string();
        let lease_us = micros(next.lease);
        let holder = holder_json(&next.holder);
        let what = format!("handing over {}", lease.name);
        let rows = self
            .store
            .connections
            .query(
                &what,
                &self.statements.hand_over,
                &[
                    (&name, Type::BYTEA),
                    (&old, Type::TEXT),
                    (&new, Type::TEXT),
                    (&lease_us, Type::INT8),
                    (&holder, Type::TEXT),
                ],
                next.operation_timeout,
            )
            .await?;
        match rows.first() {
            Some(row) => Ok(HandOver::Granted {
                fencing_token: rows::token(get(row, 0, &what)?, &what)?,
                confirmed_at: None,
                state: GrantState::none(),
            }),
            None => Ok(HandOver::NotOurs),
        }
    }
}

/// The notification a statement that frees a name sends with its write.
///
/// PostgreSQL refuses to commit a transaction that notifies while its
/// notification queue is full (a listening session somewhere has stopped
/// reading it), and the write is then undone with it. A release must not
/// fail for that: the write is sent again without the notification, and
/// waiters of other processes find the name free when they next poll.
struct Announced {
    channel: Option<String>,
    payload: String,
}

impl Announced {
    fn new(channels: Channels, name: &LockName) -> Self {
        let (channel, payload) = channels.announce(name);
        Self {
            channel: Some(channel),
            payload,
        }
    }

    /// Whether the statement that gave `outcome` is to be sent again,
    /// without the notification: it failed on a full queue, with one.
    fn without_notification_after<T>(&mut self, outcome: &Result<T>) -> bool {
        let Err(error) = outcome else {
            return false;
        };
        if self.channel.is_none() || !notification_queue_full(error) {
            return false;
        }
        tracing::warn!(
            error = %error,
            "PostgreSQL's notification queue is full; freeing the name without waking its \
             waiters, which find it free when they next poll"
        );
        self.channel = None;
        true
    }
}
