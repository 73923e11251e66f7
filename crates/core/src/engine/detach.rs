//! Futures that finish even when their caller stops waiting.
//!
//! Acquiring and releasing must not be cut off halfway: a grant nobody
//! hears of would stay held until it expires. Running each call in a task of
//! its own would be safe but costs a hop between threads on every call.
//! [`Detach`] runs the call inline instead, and only when the caller drops
//! it unfinished moves the rest of the call into a spawned task, which then
//! hands the result to an `orphan` handler (to release an unwanted grant).

use std::future::{Future, Ready};
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The orphan handler of [`Detach::new`]: drops the output.
type Discard<T> = fn(T) -> Ready<()>;

/// A future that, if dropped before it completes, completes in the
/// background. The handler `F` is kept inline: a boxed closure would cost
/// every call an allocation, and most calls complete.
pub(crate) struct Detach<T, F = Discard<T>, Fut = Ready<()>>
where
    T: Send + 'static,
    F: FnOnce(T) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    future: Option<BoxFuture<T>>,
    orphan: Option<F>,
    handler_output: PhantomData<fn() -> Fut>,
}

impl<T: Send + 'static> Detach<T> {
    /// Wraps `future`; its output is dropped if nobody waits for it.
    pub(crate) fn new(future: impl Future<Output = T> + Send + 'static) -> Self {
        Detach::with_orphan(future, |output| {
            drop(output);
            std::future::ready(())
        })
    }
}

impl<T, F, Fut> Detach<T, F, Fut>
where
    T: Send + 'static,
    F: FnOnce(T) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    /// Wraps `future`; if nobody waits for it, its output goes to `orphan`.
    pub(crate) fn with_orphan(future: impl Future<Output = T> + Send + 'static, orphan: F) -> Self {
        Self {
            future: Some(Box::pin(future)),
            orphan: Some(orphan),
            handler_output: PhantomData,
        }
    }
}

// Nothing is pinned in place: the future is boxed, and the handler is only
// moved out, never polled.
impl<T, F, Fut> Unpin for Detach<T, F, Fut>
where
    T: Send + 'static,
    F: FnOnce(T) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
}

impl<T, F, Fut> Future for Detach<T, F, Fut>
where
    T: Send + 'static,
    F: FnOnce(T) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let future = self
            .future
            .as_mut()
            .expect("Detach polled after it completed");
        match future.as_mut().poll(cx) {
            Poll::Ready(output) => {
                self.future = None;
                Poll::Ready(output)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T, F, Fut> Drop for Detach<T, F, Fut>
where
    T: Send + 'static,
    F: FnOnce(T) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    fn drop(&mut self) {
        let Some(future) = self.future.take() else {
            return;
        };
        let orphan = self.orphan.take();
        // Without a runtime nothing can run; the lease's expiry is then the
        // safety net, as the guard's docs say.
        if let Some(runtime) = crate::sync::Runtime::current() {
            runtime.spawn(async move {
                let output = future.await;
                if let Some(orphan) = orphan {
                    orphan(output).await;
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    #[tokio::test]
    async fn an_abandoned_future_finishes_and_reaches_its_orphan_handler() {
        let reached = Arc::new(AtomicBool::new(false));
        let flag = reached.clone();
        let slow = Detach::with_orphan(
            async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                7
            },
            move |value| async move {
                assert_eq!(value, 7);
                flag.store(true, Ordering::SeqCst);
            },
        );
        assert!(
            tokio::time::timeout(Duration::from_millis(1), slow)
                .await
                .is_err()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(reached.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_completed_future_does_not_reach_the_orphan_handler() {
        let reached = Arc::new(AtomicBool::new(false));
        let flag = reached.clone();
        let quick = Detach::with_orphan(async { 1 }, move |_| async move {
            flag.store(true, Ordering::SeqCst);
        });
        assert_eq!(quick.await, 1);
        tokio::task::yield_now().await;
        assert!(!reached.load(Ordering::SeqCst));
    }
}
