//! The backend: each operation is one command on one lock document.

use std::fmt;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use distlock_core::backend::{
    Abilities, AcquireRequest, Attempt, Backend, Capabilities, Extended, GrantState, HandOver,
    HandOvers, Lease, LeaseId, ReleaseHub, ReleaseWatch, Resumes, ServerInfo, Term, TermLog,
    WaitState, WaiterList, Wakeups,
};
use distlock_core::{Claim, Error, Holder, LockInfo, LockName, Result, Waiter};
use mongodb::bson::{Document, doc};
use mongodb::options::ReturnDocument;
use mongodb::{Client, Collection, Namespace};

use crate::clock::ServerClock;
use crate::config::MongoConfig;
use crate::document::{self, EXPIRES_AT, FENCING_TOKEN, HOLDERS, LOCK_ID, PASSED_TO, lock_id};
use crate::error::{driver, is_duplicate_key};
use crate::fair::{self, PassOn, PlaceId, Places, Standing, passed_to_us};
use crate::grant::{self, stored_id};
use crate::reply::{self, Verdict, no_token};
use crate::terms::{self, TERMS};
use crate::waiting::{self, WriterMark};
use crate::watch::{self, Subject, Watcher};
use crate::{bulk, deployment, exclusive, holders, listing, resume, setup, ttl};

/// Locks kept as documents in one MongoDB collection, judged by the
/// server's clock.
///
/// Open one with [`MongoBackend::open`] or [`MongoBackend::connect`]; see the [crate
/// documentation](crate) for the document shape and the guarantees.
///
/// Dropping the backend stops its release watcher.
pub struct MongoBackend {
    collection: Collection<Document>,
    hub: ReleaseHub,
    watcher: Option<Watcher>,
    clock: ServerClock,
    operation_timeout: Duration,
    /// The collection's namespace, for errors; kept so that a reply, read
    /// on every acquisition, need not build it.
    namespace: Namespace,
    /// In fair mode, the places this backend's waiters keep in line.
    places: Option<Places>,
}

impl fmt::Debug for MongoBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MongoBackend")
            .field("database", &self.collection.namespace().db)
            .field("collection", &self.collection.name())
            .field("write_concern", &self.collection.write_concern())
            .field("release_wakeups", &self.watcher.is_some())
            .field("operation_timeout", &self.operation_timeout)
            .field("fair", &self.places.is_some())
            .finish_non_exhaustive()
    }
}

impl MongoBackend {
    /// Opens the backend at a distlock URL (see [`MongoConfig::parse`])
    /// with every other setting at its default: the one-line form of
    /// `connect(MongoConfig::parse(url)?)`.
    ///
    /// # Errors
    /// As [`MongoConfig::parse`] and [`connect`](Self::connect).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future drops the connection being made.
    pub async fn open(url: &str) -> Result<Self> {
        Self::connect(MongoConfig::parse(url)?).await
    }

    /// Opens the backend in `client`'s database `database`, with every
    /// other setting at its default; the client's own options are used as
    /// they are.
    ///
    /// # Errors
    /// As [`connect`](Self::connect).
    ///
    /// # Cancel safety
    /// As [`connect`](Self::connect).
    pub async fn from_client(client: Client, database: impl Into<String>) -> Result<Self> {
        Self::connect(MongoConfig::new(client).database(database)).await
    }

    /// Connects as `config` says, checks that the server answers, creates
    /// the TTL index and starts the release watcher.
    ///
    /// ```no_run
    /// # async fn run() -> distlock_core::Result<()> {
    /// use distlock_mongodb::{MongoBackend, MongoConfig};
    ///
    /// let config = MongoConfig::parse("mongodb://db1,db2,db3/?replicaSet=rs0")?
    ///     .database("app")
    ///     .collection("locks");
    /// let backend = MongoBackend::connect(config).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a malformed URL or name or a zero
    /// timeout; a backend error when the server cannot be reached within
    /// the connect timeout. Errors never show the URL's password. A failure
    /// to create the TTL index is logged, not returned.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is held until the backend is returned.
    pub async fn connect(config: MongoConfig) -> Result<Self> {
        let (collection, clock) = setup::lock_collection(&config).await?;
        if config.ttl_index {
            ttl::create(&collection, config.operation_timeout, config.fair).await;
        }
        let hub = ReleaseHub::new();
        let places = config.fair.then(Places::new);
        let watcher = if config.release_wakeups
            && watch::change_streams_work(&collection, config.operation_timeout).await
        {
            let subject = match &places {
                Some(places) => Subject::FairLocks(places.clone()),
                None => Subject::Locks,
            };
            Some(Watcher::start(collection.clone(), hub.clone(), subject))
        } else {
            None
        };
        tracing::debug!(
            database = collection.namespace().db,
            collection = collection.name(),
            release_wakeups = watcher.is_some(),
            fair = config.fair,
            "MongoDB lock backend ready"
        );
        Ok(Self {
            namespace: collection.namespace(),
            collection,
            hub,
            watcher,
            clock,
            operation_timeout: config.operation_timeout,
            places,
        })
    }

    /// The lock collection, for inspection and administration.
    pub fn collection(&self) -> &Collection<Document> {
        &self.collection
    }

    /// How the document of `name` is named in errors.
    fn describe(&self, name: &LockName) -> String {
        document::describe(name, &self.namespace)
    }

    /// Finds out whether an acquisition whose reply carried no document
    /// granted the lock: the grant is ours exactly when the stored identity
    /// (or, for a reader or a permit, our entry) is there, since nobody
    /// else can remove a grant before it expires.
    async fn read_back(&self, request: &AcquireRequest) -> Result<Attempt> {
        tracing::debug!(name = %request.name, "the acquire reply had no document; reading it back");
        let found = self
            .collection
            .find_one(document::by_name(&request.name))
            .max_time(request.operation_timeout)
            .await
            .map_err(|error| driver(&format!("acquiring {}", request.name), error))?;
        let token = found.as_ref().and_then(|found| match request.claim {
            Claim::Exclusive => (found.get_str(LOCK_ID).ok()
                == Some(lock_id(request.lease_id).as_str()))
            .then(|| document::read_token(found)),
            _ => holders::entry(found, request.lease_id).map(document::read_token),
        });
        match token {
            Some(token) => Ok(Attempt::Acquired {
                fencing_token: token
                    .map_err(|bad| bad.into_error(self.describe(&request.name)))?
                    .ok_or_else(|| no_token(request))?,
                state: GrantState::none(),
            }),
            None => Ok(Attempt::Held {
                retry_after: Some(Duration::ZERO),
            }),
        }
    }

    /// Sends one acquire command: `pipeline` on `request`'s document,
    /// created if missing, replying with the document as it left it (as
    /// much of it as `projection` keeps).
    async fn send_acquire(
        &self,
        request: &AcquireRequest,
        pipeline: Vec<Document>,
        projection: Document,
    ) -> Result<Sent> {
        let sent = Instant::now();
        let outcome = self
            .collection
            .find_one_and_update(document::by_name(&request.name), pipeline)
            .upsert(true)
            .return_document(ReturnDocument::After)
            .projection(projection)
            .max_time(request.operation_timeout)
            .await;
        let received = Instant::now();
        match outcome {
            Ok(Some(found)) => Ok(Sent::Answered(Answer {
                found,
                sent,
                received,
            })),
            // MongoDB always returns the document of an upsert asked for the
            // new document; a server that does not (see docs/mongodb.md)
            // leaves the outcome to be read back.
            Ok(None) => self.read_back(request).await.map(Sent::Settled),
            // Two first upserts of this name raced and the other inserted
            // the document: not ours this time, but worth trying again now.
            Err(error) if is_duplicate_key(&error) => {
                tracing::debug!(name = %request.name, "lost a race to create the lock document");
                Ok(Sent::Settled(Attempt::Held {
                    retry_after: Some(Duration::ZERO),
                }))
            }
            Err(error) => Err(driver(&format!("acquiring {}", request.name), error)),
        }
    }

    /// The attempt `verdict`, read from `answer`, stands for.
    fn settle_attempt(
        &self,
        request: &AcquireRequest,
        verdict: Verdict,
        answer: &Answer,
    ) -> Result<Attempt> {
        match verdict {
            Verdict::Granted {
                fencing_token,
                acquired_at,
            } => {
                if let Some(acquired_at) = acquired_at {
                    self.clock
                        .observe(acquired_at, answer.sent, answer.received);
                }
                Ok(Attempt::Acquired {
                    fencing_token,
                    state: GrantState::none(),
                })
            }
            Verdict::Conflict(held) => Err(request.claim.conflict(&request.name, held)),
            Verdict::Held { until } => Ok(Attempt::Held {
                retry_after: until.and_then(|until| self.clock.until(until)),
            }),
        }
    }

    /// An exclusive attempt. A wait that will try again keeps its mark's
    /// identity in `wait` for as long as the mark may be stored.
    async fn acquire_exclusive(
        &self,
        request: &AcquireRequest,
        wait: &mut WaitState,
    ) -> Result<Attempt> {
        let mark = request
            .retries
            .then(|| wait.take::<WriterMark>().unwrap_or_else(WriterMark::new));
        if let Some(mark) = &mark {
            // Should the reply be lost, the mark may be stored: the wait's
            // end removes it.
            wait.set(mark.clone());
        }
        let reply = self
            .send_acquire(
                request,
                exclusive::acquire(request, mark.as_ref()),
                // A writer waiting behind readers need not read them all,
                // and no acquirer needs the record of terms.
                doc! { HOLDERS: 0, TERMS: 0 },
            )
            .await?;
        let answer = match reply {
            Sent::Answered(answer) => answer,
            Sent::Settled(attempt) => {
                if matches!(attempt, Attempt::Acquired { .. }) {
                    wait.take::<WriterMark>();
                }
                return Ok(attempt);
            }
        };
        let marked = mark.as_ref().is_some_and(|mark| mark.is_in(&answer.found));
        if !marked {
            // The grant took our mark away, or none was stored.
            wait.take::<WriterMark>();
        }
        let verdict = reply::exclusive(request, &answer.found, &self.namespace)?;
        let attempt = self.settle_attempt(request, verdict, &answer)?;
        Ok(match attempt {
            // The mark lasts a lease from this attempt: try again well
            // within it, so that it does not lapse while we wait.
            Attempt::Held { retry_after } if marked => Attempt::Held {
                retry_after: Some(
                    retry_after.map_or(request.lease / 2, |after| after.min(request.lease / 2)),
                ),
            },
            attempt => attempt,
        })
    }

    /// A fair attempt at the whole lock (see [`fair::acquire`]). A wait
    /// keeps its place's identity in `wait` from its first attempt on. An
    /// attempt asks the server nothing when its place was passed the lock
    /// and heard of it in time to hold it as passed, or when the release
    /// watcher has nothing new for it and its place is not yet due for
    /// renewal.
    async fn acquire_in_line(
        &self,
        places: &Places,
        request: &AcquireRequest,
        wait: &mut WaitState,
    ) -> Result<Attempt> {
        let place = request.retries.then(|| {
            wait.take::<PlaceId>()
                .unwrap_or_else(|| PlaceId::new(places.backend()))
        });
        let mut heard = 0;
        if let Some(place) = &place {
            // Should the reply be lost, the place may be stored: the wait's
            // end gives it up.
            wait.set(place.clone());
            if let Some(fencing_token) = places.take_passed(place, Instant::now()) {
                wait.take::<PlaceId>();
                return Ok(Attempt::Acquired {
                    fencing_token,
                    state: grant::passed_on(place.as_str()),
                });
            }
            if self.watcher.is_some()
                && let Some(quiet) = places.quiet_for(place)
            {
                return Ok(Attempt::Held {
                    retry_after: Some(quiet),
                });
            }
            heard = places.asking(place, &request.name);
        }
        let reply = self
            .send_acquire(
                request,
                fair::acquire(request, place.as_ref()),
                doc! { HOLDERS: 0, TERMS: 0 },
            )
            .await?;
        let answer = match reply {
            Sent::Answered(answer) => answer,
            Sent::Settled(attempt) => {
                if let (Some(place), Attempt::Acquired { .. }) = (&place, &attempt) {
                    wait.take::<PlaceId>();
                    places.forget(place);
                }
                return Ok(attempt);
            }
        };
        let verdict = reply::exclusive(request, &answer.found, &self.namespace)?;
        let attempt = self.settle_attempt(request, verdict, &answer)?;
        let Some(place) = place else {
            return Ok(attempt);
        };
        Ok(match attempt {
            Attempt::Held { retry_after } if place.is_in(&answer.found) => {
                // The place lasts a lease from this attempt: renew it well
                // within, and ask at the holder's end, when the lock may be
                // passed on.
                let renew = fair::renewal(request.lease);
                let within = retry_after.map_or(renew, |after| after.min(renew));
                let standing = place
                    .entry_in(&answer.found)
                    .and_then(|entry| Standing::read(&answer.found, entry, answer.sent));
                places.in_line(&place, heard, within, standing);
                Attempt::Held {
                    retry_after: Some(within),
                }
            }
            attempt => {
                if matches!(attempt, Attempt::Acquired { .. }) {
                    wait.take::<PlaceId>();
                    places.forget(&place);
                }
                attempt
            }
        })
    }

    /// Gives up the place `place` in `request`'s line.
    async fn leave_line(&self, request: &AcquireRequest, place: &PlaceId) -> Result<()> {
        if let Some(places) = &self.places {
            places.forget(place);
        }
        let updated = self
            .collection
            .update_one(
                fair::placed(&request.name, place),
                fair::leave(request, place),
            )
            .await
            .map_err(|error| driver(&format!("ending a wait for {}", request.name), error))?;
        if updated.matched_count == 1 {
            // Readers of this process held back by the line may go now.
            self.hub.notify(&request.name);
        }
        Ok(())
    }

    /// A fair release of the whole lock: the same update grants it to the
    /// first live place in line. A grant to a place of this backend wakes
    /// its waiter at once, without waiting for the change stream, and
    /// tells it the grant, so that it may hold it as passed.
    async fn release_in_line(&self, places: &Places, lease: &Lease) -> Result<bool> {
        let found = self
            .collection
            .find_one_and_update(
                document::live_grant(&lease.name, stored_id(lease)),
                fair::release(),
            )
            .projection(doc! { LOCK_ID: 1, PASSED_TO: 1, FENCING_TOKEN: 1, EXPIRES_AT: 1 })
            .return_document(ReturnDocument::After)
            .max_time(lease.operation_timeout)
            .await
            .map_err(|error| driver(&format!("releasing {}", lease.name), error))?;
        let Some(found) = found else {
            return Ok(false);
        };
        match found.get_str(PASSED_TO) {
            Ok(place) if passed_to_us(place, places.backend()) => {
                if places.tell(place, PassOn::read(&found)).is_some() {
                    self.hub.notify(&lease.name);
                }
            }
            // Passed on to another backend's waiter: its watcher wakes it.
            Ok(_) => {}
            Err(_) => {
                places.tell_name(&lease.name);
                self.hub.notify(&lease.name);
            }
        }
        Ok(true)
    }

    /// A reader's or a permit's attempt.
    async fn acquire_entry(&self, request: &AcquireRequest) -> Result<Attempt> {
        let reply = self
            .send_acquire(
                request,
                holders::acquire(request),
                holders::reply_projection(),
            )
            .await?;
        match reply {
            Sent::Answered(answer) => {
                let verdict = reply::entry(request, &answer.found, &self.namespace)?;
                self.settle_attempt(request, verdict, &answer)
            }
            Sent::Settled(attempt) => Ok(attempt),
        }
    }

    /// Extends one lease, in one update: its end becomes the server's
    /// `$$NOW` plus the lease, shorter ones too.
    async fn extend_one(&self, lease: &Lease) -> Result<bool> {
        let (filter, pipeline) = match lease.claim {
            Claim::Exclusive => (
                document::live_grant(&lease.name, stored_id(lease)),
                exclusive::extend(lease.lease),
            ),
            claim => (
                holders::live_entry(&lease.name, claim, lease.id),
                holders::extend(&[lock_id(lease.id)], lease.lease),
            ),
        };
        let updated = self
            .collection
            .update_one(filter, pipeline)
            .await
            .map_err(|error| driver(&format!("extending {}", lease.name), error))?;
        Ok(updated.matched_count == 1)
    }
}

/// What an acquire command brought back.
enum Sent {
    /// The server's answer.
    Answered(Answer),
    /// An attempt settled without a reply document.
    Settled(Attempt),
}

/// The document as an acquire command left it, and when the command was
/// sent and answered.
struct Answer {
    found: Document,
    sent: Instant,
    received: Instant,
}

#[async_trait]
impl Backend for MongoBackend {
    fn store_name(&self) -> &'static str {
        "mongodb"
    }

    /// The server's version (`buildInfo`) and clock (`hello`'s
    /// `localTime`); either is left out where the server does not give it.
    /// Each of its three steps (those, change streams, the TTL index) has
    /// a quarter of `limit`, so that the answer, with a step that ran out
    /// of time told as a finding, comes back within it.
    async fn server_info(&self, limit: Duration) -> Result<ServerInfo> {
        let step = limit / 4;
        let database = self.collection.client().database("admin");
        let ask = async {
            let hello = database.run_command(doc! { "hello": 1 }).await?;
            let build = database.run_command(doc! { "buildInfo": 1 }).await.ok();
            Ok::<_, mongodb::error::Error>((hello, build))
        };
        let (hello, build) = tokio::time::timeout(step, ask)
            .await
            .map_err(|_| Error::OperationTimeout {
                operation: "server info",
                after: step,
            })?
            .map_err(|error| driver("asking the server for its version and time", error))?;
        let version = build
            .as_ref()
            .and_then(|build| build.get_str("version").ok())
            .map(|version| format!("MongoDB {version}"));
        let clock = hello.get_datetime("localTime").ok().and_then(|time| {
            u64::try_from(time.timestamp_millis())
                .ok()
                .map(|ms| std::time::UNIX_EPOCH + Duration::from_millis(ms))
        });
        Ok(ServerInfo::new(version, clock)
            .with_feature(deployment::majority(
                &hello,
                self.collection.write_concern(),
            ))
            .with_feature(watch::change_streams_feature(&self.collection, step).await)
            .with_feature(
                deployment::ttl_index(&self.collection, step, self.places.is_some()).await,
            ))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::lease_based()
            .with_shared(true)
            .with_semaphores(true)
            .with_fair(self.places.is_some())
    }

    async fn try_acquire(&self, request: &AcquireRequest, wait: &mut WaitState) -> Result<Attempt> {
        match request.claim {
            Claim::Exclusive => match &self.places {
                Some(places) => self.acquire_in_line(places, request, wait).await,
                None => self.acquire_exclusive(request, wait).await,
            },
            Claim::Shared | Claim::Permit { .. } => self.acquire_entry(request).await,
        }
    }

    async fn end_wait(&self, request: &AcquireRequest, mut wait: WaitState) -> Result<()> {
        if let Some(place) = wait.take::<PlaceId>() {
            return self.leave_line(request, &place).await;
        }
        let Some(mark) = wait.take::<WriterMark>() else {
            return Ok(());
        };
        let updated = self
            .collection
            .update_one(
                waiting::marked(&request.name, &mark),
                waiting::unmark(&mark),
            )
            .await
            .map_err(|error| driver(&format!("ending a wait for {}", request.name), error))?;
        if updated.matched_count == 1 {
            // Readers of this process held back by the mark may go now.
            self.hub.notify(&request.name);
        }
        Ok(())
    }

    fn extend_many_limit(&self) -> usize {
        // A few commands extend any number of leases.
        usize::MAX
    }

    async fn extend_many(&self, leases: &[Lease]) -> Extended {
        if let [lease] = leases {
            return Extended::new(vec![self.extend_one(lease).await], None);
        }
        // One client's keeper extends these, with its one operation timeout.
        let timeout = leases.iter().map(|lease| lease.operation_timeout).min();
        let outcomes = bulk::extend_many(
            &self.collection,
            timeout.unwrap_or(self.operation_timeout),
            leases,
        )
        .await;
        Extended::new(outcomes, None)
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        if let (Some(places), Claim::Exclusive) = (&self.places, lease.claim) {
            return self.release_in_line(places, lease).await;
        }
        let (filter, pipeline) = match lease.claim {
            Claim::Exclusive => (
                document::live_grant(&lease.name, stored_id(lease)),
                exclusive::release(),
            ),
            claim => (
                holders::live_entry(&lease.name, claim, lease.id),
                holders::release(claim, lease.id),
            ),
        };
        let updated = self
            .collection
            .update_one(filter, pipeline)
            .await
            .map_err(|error| driver(&format!("releasing {}", lease.name), error))?;
        let released = updated.matched_count == 1;
        if released {
            // Waiters of this process need not wait for the change stream.
            self.hub.notify(&lease.name);
        }
        Ok(released)
    }

    async fn list(&self, limit: Duration) -> Result<Vec<LockInfo>> {
        let rows = self
            .collection
            .aggregate(listing::pipeline())
            .max_time(limit);
        let found = bulk::read_all(rows, "listing locks").await?;
        let mut locks = found
            .iter()
            .filter_map(|row| listing::read(row, &self.namespace).transpose())
            .collect::<Result<Vec<LockInfo>>>()?;
        locks.sort_by(|a, b| (&a.name, a.fencing_token).cmp(&(&b.name, b.fencing_token)));
        Ok(locks)
    }

    /// One update, which core's timer bounds.
    async fn force_release(&self, name: &LockName, _: Duration) -> Result<bool> {
        let updated = self
            .collection
            .update_one(document::any_live_grant(name), exclusive::force_release())
            .await
            .map_err(|error| driver(&format!("force-releasing {name}"), error))?;
        let released = updated.matched_count == 1;
        if released {
            self.hub.notify(name);
        }
        Ok(released)
    }

    /// A later release is an extension.
    fn abilities(&self) -> Abilities<'_> {
        let mut abilities = Abilities::none()
            .with_hand_overs(self)
            .with_term_log(self)
            .with_resumes(self);
        if self.watcher.is_some() {
            abilities = abilities.with_wakeups(self);
        }
        // Only fair mode keeps its waiters, in each lock's line.
        if self.places.is_some() {
            abilities = abilities.with_waiters(self);
        }
        abilities
    }
}

#[async_trait]
impl WaiterList for MongoBackend {
    /// Only waits for the whole lock keep a place in line.
    fn sees_every_wait(&self) -> bool {
        false
    }

    async fn waiters(&self, limit: Duration) -> Result<Vec<(LockName, Waiter)>> {
        let rows = self
            .collection
            .aggregate(fair::waiters::pipeline())
            .max_time(limit);
        let found = bulk::read_all(rows, "listing waiters").await?;
        Ok(found.iter().flat_map(fair::waiters::read).collect())
    }
}

#[async_trait]
impl HandOvers for MongoBackend {
    async fn hand_over(&self, lease: &Lease, next: &AcquireRequest) -> Result<HandOver> {
        let found = self
            .collection
            .find_one_and_update(
                document::live_grant(&lease.name, stored_id(lease)),
                exclusive::hand_over(next),
            )
            .return_document(ReturnDocument::After)
            .max_time(next.operation_timeout)
            .await
            .map_err(|error| driver(&format!("handing over {}", lease.name), error))?;
        // Nothing matched: the old grant had expired or was taken away.
        let Some(found) = found else {
            return Ok(HandOver::NotOurs);
        };
        // A token no grant can follow left the old grant in place: an error,
        // on which the lock client releases it.
        let token = document::read_token(&found)
            .map_err(|bad| bad.into_error(self.describe(&lease.name)))?;
        if found.get_str(LOCK_ID).ok() != Some(lock_id(next.lease_id).as_str()) {
            return Ok(HandOver::NotOurs);
        }
        Ok(HandOver::Granted {
            fencing_token: token.ok_or_else(|| no_token(next))?,
            confirmed_at: None,
            state: GrantState::none(),
        })
    }
}

#[async_trait]
impl Resumes for MongoBackend {
    /// One `findAndModify`, filtered on the grant's name, identity and
    /// token and on its end being after the server's `$$NOW`: the grant
    /// takes `request`'s identity, lease and holder in the same write, or
    /// nothing changes (see `resume`).
    ///
    /// # Errors
    /// A backend error when the command fails; the outcome is then unknown.
    ///
    /// # Cancel safety
    /// One command: applied whole or not at all.
    async fn resume(&self, lease: &Lease, request: &AcquireRequest) -> Result<Option<GrantState>> {
        let Some(filter) = resume::held(lease) else {
            return Ok(None);
        };
        let found = self
            .collection
            .find_one_and_update(filter, resume::take_up(lease, request))
            .projection(doc! { LOCK_ID: 1 })
            .max_time(request.operation_timeout)
            .await
            .map_err(|error| driver(&format!("resuming {}", lease.name), error))?;
        Ok(found.map(|_| GrantState::none()))
    }

    /// A grant passed on in fair mode is named by the place it is stored
    /// under.
    fn stored_identity(&self, lease: &Lease) -> LeaseId {
        grant::stored_lease_id(lease)
    }
}

#[async_trait]
impl TermLog for MongoBackend {
    /// One `find` of the lock document, reading only its record.
    ///
    /// # Errors
    /// A backend error when the read fails; [`Error::InvalidData`] when the
    /// record was edited into another shape.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    async fn terms_after(&self, name: &LockName, after: u64, limit: Duration) -> Result<Vec<Term>> {
        terms::read_after(&self.collection, name, after, limit).await
    }

    /// One update of the lock document, after one `find` of its token
    /// when the grant's answer never came.
    ///
    /// # Errors
    /// A backend error when a read or the write fails.
    ///
    /// # Cancel safety
    /// The update is one write: done or not.
    async fn withdraw(&self, lease: &Lease, holder: &Holder) -> Result<()> {
        terms::withdraw(&self.collection, lease, holder).await
    }
}

impl Wakeups for MongoBackend {
    fn watch(&self, name: &LockName) -> Option<ReleaseWatch> {
        self.watcher.as_ref().map(|_| self.hub.watch(name))
    }
}
