//! Uncontended cycles: the client's, the backend's own two calls, and
//! memcached's bare recipe, each as often as a round allows.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::backend::{AcquireRequest, Attempt, Backend, Holder, WaitState};
use distlock::{Claim, LockClient, LockName, LockOptions};

use crate::outcome::Outcome;
use crate::target::{Server, Target};
/// The client's `try_acquire` and `release`, as often as `seconds` allows.
pub(crate) async fn client_cycles(
    client: &LockClient,
    name: &LockName,
    seconds: Duration,
) -> Outcome<u64> {
    let started = Instant::now();
    let mut cycles = 0;
    while started.elapsed() < seconds {
        let guard = client
            .try_acquire(name)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("an uncontended lock was held")?;
        guard.release().await.map_err(|e| e.to_string())?;
        cycles += 1;
    }
    Ok(cycles)
}

/// The backend's own `try_acquire` and `release`, as often as `seconds`
/// allows.
pub(crate) async fn backend_cycles(
    backend: &dyn Backend,
    name: &LockName,
    seconds: Duration,
) -> Outcome<u64> {
    cycles_with(backend, name, seconds, |lease| async move {
        backend
            .release(&lease)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .await
}

/// Acquires `name` through `backend` and releases it with `release`, as
/// often as `seconds` allows.
pub(crate) async fn cycles_with<F, Fut>(
    backend: &dyn Backend,
    name: &LockName,
    seconds: Duration,
    release: F,
) -> Outcome<u64>
where
    F: Fn(distlock::backend::Lease) -> Fut,
    Fut: Future<Output = Outcome<()>>,
{
    let holder = Arc::new(Holder::this_process(Some("distlock-bench raw")));
    let started = Instant::now();
    let mut cycles = 0u64;
    while started.elapsed() < seconds {
        let request = AcquireRequest::new(
            name.clone(),
            Claim::Exclusive,
            LockOptions::DEFAULT_LEASE,
            holder.clone(),
        );
        let Attempt::Acquired {
            fencing_token,
            state,
        } = backend
            .try_acquire(&request, &mut WaitState::new())
            .await
            .map_err(|e| e.to_string())?
        else {
            return Err("an uncontended lock was held".into());
        };
        release(request.granted(fencing_token, state)).await?;
        cycles += 1;
    }
    Ok(cycles)
}

/// memcached's bare `add` + CAS delete, on the backend's own key for `name`.
pub(crate) async fn raw_cycles(
    target: &Target,
    name: &LockName,
    seconds: Duration,
) -> Outcome<u64> {
    let Server::Memcached(backend) = &target.server else {
        return Err("the raw recipe is memcached's".into());
    };
    let raw = backend.raw();
    let started = Instant::now();
    let mut cycles = 0u64;
    while started.elapsed() < seconds {
        let grant = raw
            .try_lock(name, LockOptions::DEFAULT_LEASE)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("an uncontended lock was held")?;
        if !raw.unlock(grant).await.map_err(|e| e.to_string())? {
            return Err("a raw grant was gone before its release".into());
        }
        cycles += 1;
    }
    Ok(cycles)
}
