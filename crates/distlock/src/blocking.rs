//! Locks for code without an async runtime: the same client, guards and
//! guarantees, behind calls that block.
//!
//! A blocking [`LockClient`] owns a small Tokio runtime of its own (one
//! worker thread), where its keeper extends held leases in the background
//! while your code runs; every call blocks the calling thread until the
//! async client answers. Do not use it inside an async runtime: there,
//! use [`crate::LockClient`]. Called inside one, every call fails with
//! [`Error::Unsupported`] rather than blocking the runtime's thread.
//!
//! # Drop behaviour
//!
//! Dropping a blocking [`LockGuard`] or [`LockSet`] releases its locks
//! before the drop returns, as [`LockGuard::release`] would, waiting at
//! most the client's [operation
//! timeout](crate::LockOptions::operation_timeout) (a set: for all
//! of its locks together). So a program can end by returning from `main`
//! with its guards in scope: each is released before the client, and the
//! runtime it owns, go, and another process can take the names at once,
//! not only when their leases expire. A release still unfinished at the
//! operation timeout carries on in the client's runtime, while a clone of
//! the client is alive; dropping the last one cuts it off, and the lease's
//! expiry is then the safety net, as it is for a process that is killed.
//!
//! Dropped inside an async runtime, whose thread it must not stall, a
//! guard or set releases in the background instead, in the client's
//! runtime, and dropping the client's last clone there too can cut that
//! release off.
//!
//! ```
//! use std::time::Duration;
//!
//! # fn main() -> Result<(), distlock::Error> {
//! let client = distlock::blocking::connect("memory://")?;
//! let guard = client.acquire("nightly-report")?;
//! println!("fencing token {}", guard.fencing_token());
//! guard.release()?;
//!
//! let total = client.with_lock("nightly-report", Duration::from_secs(5), |lock| {
//!     lock.fencing_token + 1
//! })?;
//! assert!(total > 1);
//! # Ok(())
//! # }
//! ```

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use distlock_core::{
    AcquireOptions, Claim, Error, IntoLockClaim, IntoLockName, LockClientBuilder, LockContext,
    LockInfo, LockName, LockOptions, LossReason, Result, RiskReason, TryOptions,
};

/// Opens the backend `url` names, as [`crate::connect`] does, and returns a
/// blocking client of it.
///
/// # Errors
/// As [`crate::connect`]; [`Error::Unsupported`] when called inside an
/// async runtime; a backend error when the runtime cannot be started.
pub fn connect(url: &str) -> Result<LockClient> {
    connect_with(crate::LockClient::builder(), url)
}

/// As [`connect`], starting from the options of `builder`.
///
/// # Errors
/// As [`connect`].
pub fn connect_with(builder: LockClientBuilder, url: &str) -> Result<LockClient> {
    let runtime = Arc::new(Runtime::new()?);
    let client = runtime.block_on(crate::connect_with(builder, url))??;
    Ok(LockClient { client, runtime })
}

/// A blocking lock client; see the [module docs](self). Cheap to clone:
/// clones share the async client and its runtime.
#[derive(Debug, Clone)]
pub struct LockClient {
    client: crate::LockClient,
    runtime: Arc<Runtime>,
}

impl LockClient {
    /// The async client this one drives, for code that mixes both.
    pub fn as_async(&self) -> &crate::LockClient {
        &self.client
    }

    /// The options this client uses.
    pub fn options(&self) -> &LockOptions {
        self.client.options()
    }

    /// Waits for `name`, exclusively, with no deadline; see
    /// [`crate::LockClient::acquire`].
    ///
    /// # Errors
    /// As [`crate::LockClient::acquire`]; [`Error::Unsupported`] inside an
    /// async runtime.
    pub fn acquire(&self, name: impl IntoLockName) -> Result<LockGuard> {
        self.acquire_with(name, AcquireOptions::new())
    }

    /// Waits for `name` as `options` say; see
    /// [`crate::LockClient::acquire_with`].
    ///
    /// # Errors
    /// As [`crate::LockClient::acquire_with`]; [`Error::Unsupported`] inside
    /// an async runtime.
    pub fn acquire_with<'a>(
        &self,
        name: impl IntoLockName,
        options: impl Into<AcquireOptions<'a>>,
    ) -> Result<LockGuard> {
        let guard = self
            .runtime
            .block_on(self.client.acquire_with(name, options))??;
        Ok(self.guard(guard))
    }

    /// Takes up the grant `handle` names, if the store still holds it: a
    /// process restarted while it held a lock carries on with its grant
    /// and its fencing token; see [`crate::LockClient::resume`].
    ///
    /// # Errors
    /// As [`crate::LockClient::resume`]: [`Error::Lost`] when the grant is
    /// gone; [`Error::Unsupported`] inside an async runtime.
    pub fn resume(&self, handle: &crate::ResumeHandle) -> Result<LockGuard> {
        let guard = self.runtime.block_on(self.client.resume(handle))??;
        Ok(self.guard(guard))
    }

    /// Tries once to take `name` exclusively; see
    /// [`crate::LockClient::try_acquire`].
    ///
    /// # Errors
    /// As [`crate::LockClient::try_acquire`]; [`Error::Unsupported`] inside
    /// an async runtime.
    pub fn try_acquire(&self, name: impl IntoLockName) -> Result<Option<LockGuard>> {
        self.try_acquire_with(name, TryOptions::new())
    }

    /// Tries once to take the claim of `options` on `name`; see
    /// [`crate::LockClient::try_acquire_with`].
    ///
    /// # Errors
    /// As [`crate::LockClient::try_acquire_with`]; [`Error::Unsupported`]
    /// inside an async runtime.
    pub fn try_acquire_with(
        &self,
        name: impl IntoLockName,
        options: impl Into<TryOptions>,
    ) -> Result<Option<LockGuard>> {
        let guard = self
            .runtime
            .block_on(self.client.try_acquire_with(name, options))??;
        Ok(guard.map(|guard| self.guard(guard)))
    }

    /// Takes every lock in `locks`, in one canonical order, all or
    /// nothing; see [`crate::LockClient::acquire_all`].
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// # fn main() -> Result<(), distlock::Error> {
    /// let client = distlock::blocking::connect("memory://")?;
    /// let both = client.acquire_all(["accounts/2", "accounts/1"], Duration::from_secs(5))?;
    /// for (name, token) in both.fencing_tokens() {
    ///     println!("{name}: token {token}");
    /// }
    /// assert!(both.release()?);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`crate::LockClient::acquire_all`]: every lock taken is released
    /// before the error returns. [`Error::Unsupported`] inside an async
    /// runtime.
    pub fn acquire_all<'a, L>(
        &self,
        locks: impl IntoIterator<Item = L>,
        options: impl Into<AcquireOptions<'a>>,
    ) -> Result<LockSet>
    where
        L: IntoLockClaim,
    {
        let set = self
            .runtime
            .block_on(self.client.acquire_all(locks, options))??;
        Ok(LockSet {
            set: Some(set),
            runtime: self.runtime.clone(),
            release_within: self.release_within(),
        })
    }

    /// Takes `name` as `options` say, runs `work` on this thread, and
    /// releases on every path, a panic in `work` included (the guard's drop
    /// releases it; see [Drop behaviour](self#drop-behaviour)).
    ///
    /// # Errors
    /// As [`crate::LockClient::with_lock`]; [`Error::Unsupported`] inside an
    /// async runtime.
    pub fn with_lock<'a, T>(
        &self,
        name: impl IntoLockName,
        options: impl Into<AcquireOptions<'a>>,
        work: impl FnOnce(LockContext) -> T,
    ) -> Result<T> {
        let guard = self.acquire_with(name, options)?;
        let context = LockContext {
            name: guard.name().clone(),
            fencing_token: guard.fencing_token(),
            lost: guard.inner().lost_signal(),
        };
        let output = work(context);
        let name = guard.name().to_string();
        if guard.release()? {
            Ok(output)
        } else {
            Err(Error::Lost { name })
        }
    }

    /// The locks held now; see [`crate::LockClient::list`].
    ///
    /// # Errors
    /// As [`crate::LockClient::list`]; [`Error::Unsupported`] inside an
    /// async runtime.
    pub fn list(&self) -> Result<Vec<LockInfo>> {
        self.runtime.block_on(self.client.list())?
    }

    /// Releases `name` whoever holds it; see
    /// [`crate::LockClient::force_release`].
    ///
    /// # Errors
    /// As [`crate::LockClient::force_release`]; [`Error::Unsupported`]
    /// inside an async runtime.
    pub fn force_release(&self, name: impl IntoLockName) -> Result<bool> {
        self.runtime.block_on(self.client.force_release(name))?
    }

    fn guard(&self, guard: crate::LockGuard) -> LockGuard {
        LockGuard {
            guard: Some(guard),
            runtime: self.runtime.clone(),
            release_within: self.release_within(),
        }
    }

    /// How long a dropped guard or set waits for its release.
    fn release_within(&self) -> Duration {
        self.client.options().operation_timeout()
    }
}

/// Proof that this process holds a lock, from a blocking [`LockClient`]:
/// the same guarantees as [`crate::LockGuard`]. Dropping it releases the
/// lock before the drop returns, within the operation timeout; see [Drop
/// behaviour](self#drop-behaviour).
#[must_use = "dropping the guard releases the lock at once"]
#[derive(Debug)]
pub struct LockGuard {
    /// `None` only once released.
    guard: Option<crate::LockGuard>,
    runtime: Arc<Runtime>,
    /// The client's operation timeout: how long a drop waits for the
    /// release.
    release_within: Duration,
}

impl LockGuard {
    fn inner(&self) -> &crate::LockGuard {
        self.guard
            .as_ref()
            .expect("a guard is only emptied by release")
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        self.inner().name()
    }

    /// What this guard holds: the whole lock, a reader's share or a permit.
    pub fn claim(&self) -> Claim {
        self.inner().claim()
    }

    /// The grant's fencing token; see [`crate::LockGuard::fencing_token`].
    pub fn fencing_token(&self) -> u64 {
        self.inner().fencing_token()
    }

    /// Which grant this guard holds, to keep for
    /// [`LockClient::resume`] after a restart; see
    /// [`crate::LockGuard::handle`].
    pub fn handle(&self) -> crate::ResumeHandle {
        self.inner().handle()
    }

    /// Whether the lease is known to be lost.
    pub fn is_lost(&self) -> bool {
        self.inner().is_lost()
    }

    /// Blocks until the lease is lost, and says why; see
    /// [`crate::LockGuard::lost`]. Check [`is_lost`](Self::is_lost) between
    /// steps of work instead, to stop early without waiting.
    ///
    /// # Errors
    /// [`Error::Unsupported`] inside an async runtime.
    pub fn wait_lost(&self) -> Result<LossReason> {
        let signal = self.inner().lost_signal();
        self.runtime.block_on(async move { signal.lost().await })
    }

    /// Whether the lease is in danger now, and why; see
    /// [`crate::LockGuard::risk`].
    pub fn risk(&self) -> Option<RiskReason> {
        self.inner().risk()
    }

    /// Blocks until the lease is in danger or lost, and says why; see
    /// [`crate::LockGuard::at_risk`]. Check [`risk`](Self::risk) between
    /// steps of work instead, to slow down without waiting.
    ///
    /// # Errors
    /// [`Error::Unsupported`] inside an async runtime.
    pub fn wait_at_risk(&self) -> Result<RiskReason> {
        let signal = self.inner().risk_signal();
        self.runtime.block_on(async move { signal.at_risk().await })
    }

    /// Extends the lease now; see [`crate::LockGuard::extend`].
    ///
    /// # Errors
    /// As [`crate::LockGuard::extend`]; [`Error::Unsupported`] inside an
    /// async runtime.
    pub fn extend(&self) -> Result<()> {
        self.runtime.block_on(self.inner().extend())?
    }

    /// Releases the lock, and says whether it was still ours; see
    /// [`crate::LockGuard::release`].
    ///
    /// # Errors
    /// As [`crate::LockGuard::release`]; [`Error::Unsupported`] inside an
    /// async runtime (the guard is then dropped, which releases in the
    /// background).
    pub fn release(mut self) -> Result<bool> {
        let guard = self.guard.take().expect("released once");
        self.runtime.block_on(guard.release())?
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(guard) = self.guard.take() {
            if inside_a_runtime() {
                // Blocking would stall that runtime's thread. The guard's
                // own drop spawns the release; it needs the client's runtime.
                let _entered = self.runtime.handle().enter();
                drop(guard);
            } else {
                // Released before the client, and with it the runtime, can
                // go: a task spawned here would be cut off by that.
                self.runtime
                    .finish_release(guard.release(), self.release_within);
            }
        }
    }
}

/// Several locks held together, from a blocking client's
/// [`acquire_all`](LockClient::acquire_all): the same guarantees as
/// [`crate::LockSet`]. Dropping it releases every lock before the drop
/// returns, within the operation timeout for all of them; see [Drop
/// behaviour](self#drop-behaviour).
#[must_use = "dropping the set releases its locks at once"]
#[derive(Debug)]
pub struct LockSet {
    /// `None` only once released or split.
    set: Option<crate::LockSet>,
    runtime: Arc<Runtime>,
    /// The client's operation timeout: how long a drop waits for the
    /// releases.
    release_within: Duration,
}

impl LockSet {
    fn inner(&self) -> &crate::LockSet {
        self.set.as_ref().expect("a set is only emptied by release")
    }

    /// Every lock's name and fencing token, in the canonical order.
    pub fn fencing_tokens(&self) -> impl Iterator<Item = (&LockName, u64)> {
        self.inner().fencing_tokens()
    }

    /// Whether any of the locks has been lost.
    pub fn is_lost(&self) -> bool {
        self.inner().is_lost()
    }

    /// Blocks until any of the locks is lost, and says which and why; see
    /// [`crate::LockSet::lost`].
    ///
    /// # Errors
    /// [`Error::Unsupported`] inside an async runtime.
    pub fn wait_lost(&self) -> Result<(LockName, LossReason)> {
        self.runtime.block_on(async {
            let (name, reason) = self.inner().lost().await;
            (name.clone(), reason)
        })
    }

    /// The first of the locks that is in danger now, with the reason;
    /// see [`crate::LockSet::risk`].
    pub fn risk(&self) -> Option<(&LockName, RiskReason)> {
        self.inner().risk()
    }

    /// Blocks until any of the locks is in danger or lost, and says which
    /// and why; see [`crate::LockSet::at_risk`].
    ///
    /// # Errors
    /// [`Error::Unsupported`] inside an async runtime.
    pub fn wait_at_risk(&self) -> Result<(LockName, RiskReason)> {
        self.runtime.block_on(async {
            let (name, reason) = self.inner().at_risk().await;
            (name.clone(), reason)
        })
    }

    /// Releases every lock, the last taken first, and says whether all
    /// were still ours; see [`crate::LockSet::release`].
    ///
    /// # Errors
    /// As [`crate::LockSet::release`]; [`Error::Unsupported`] inside an
    /// async runtime (the set is then dropped, which releases in the
    /// background).
    pub fn release(mut self) -> Result<bool> {
        let set = self.set.take().expect("released once");
        self.runtime.block_on(set.release())?
    }

    /// The locks as blocking guards, to release or keep one by one.
    pub fn into_guards(mut self) -> Vec<LockGuard> {
        let set = self.set.take().expect("split once");
        set.into_guards()
            .into_iter()
            .map(|guard| LockGuard {
                guard: Some(guard),
                runtime: self.runtime.clone(),
                release_within: self.release_within,
            })
            .collect()
    }
}

impl Drop for LockSet {
    fn drop(&mut self) {
        if let Some(set) = self.set.take() {
            if inside_a_runtime() {
                // As for a guard: the guards' drops spawn their releases.
                let _entered = self.runtime.handle().enter();
                drop(set);
            } else {
                self.runtime
                    .finish_release(set.release(), self.release_within);
            }
        }
    }
}

/// The runtime a blocking client owns.
#[derive(Debug)]
struct Runtime(Option<tokio::runtime::Runtime>);

impl Runtime {
    fn new() -> Result<Self> {
        refuse_inside_a_runtime()?;
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("distlock-blocking")
            .enable_all()
            .build()
            .map(|runtime| Self(Some(runtime)))
            .map_err(|error| Error::backend("blocking", "cannot start a Tokio runtime", error))
    }

    fn handle(&self) -> &tokio::runtime::Handle {
        self.0.as_ref().expect("present until dropped").handle()
    }

    /// Runs `future` to completion on this thread, unless this thread is
    /// inside an async runtime, where blocking would stall it.
    fn block_on<F: Future>(&self, future: F) -> Result<F::Output> {
        refuse_inside_a_runtime()?;
        Ok(self.handle().block_on(future))
    }

    /// Runs `release`, a dropped guard's or set's, on this thread, which
    /// must not be inside an async runtime, for at most `limit`. The
    /// release futures finish in a spawned task when dropped unfinished;
    /// dropping at the limit inside the runtime lets them spawn it.
    fn finish_release<F: Future>(&self, release: F, limit: Duration) {
        self.handle().block_on(async move {
            // Its outcome has nowhere to go: the drop of a guard has no
            // result, as with the async guard.
            let _ = tokio::time::timeout(limit, release).await;
        });
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // Dropping a runtime blocks; inside another runtime that would
        // panic, so there it is let go in the background.
        if let Some(runtime) = self.0.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                runtime.shutdown_background();
            } else {
                drop(runtime);
            }
        }
    }
}

fn inside_a_runtime() -> bool {
    tokio::runtime::Handle::try_current().is_ok()
}

fn refuse_inside_a_runtime() -> Result<()> {
    if inside_a_runtime() {
        return Err(Error::Unsupported(
            "distlock::blocking was called inside an async runtime, whose thread it would \
             stall; use the async distlock::LockClient there"
                .into(),
        ));
    }
    Ok(())
}
