//! A future that runs to its end even when its caller stops waiting. hyper drops the
//! handler of a client that went away, and a claim protocol dropped between its hold and
//! its settle would leave the user's count held until the consumer resolves it. Spawning
//! the protocol as a task of its own guaranteed the end too, but cost a spawn and one more
//! wake-up per claim (docs/BENCHMARKS.md, "Floors"); this polls it in the handler's task
//! and hands what is left of it to the runtime only if the handler is dropped first.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

type Caught<T> = Result<T, Box<dyn Any + Send>>;

/// Polls `F` in place; if dropped before `F` finished, spawns the rest of `F` on the
/// current runtime. A panic inside `F` is caught and returned as `Err`, as a task's
/// `JoinError` would be, so the caller can still answer.
pub(crate) struct FinishOnDrop<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fut: Option<Pin<Box<AssertUnwindSafe<F>>>>,
}

impl<F> FinishOnDrop<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    pub(crate) fn new(fut: F) -> Self {
        Self {
            fut: Some(Box::pin(AssertUnwindSafe(fut))),
        }
    }
}

impl<F> Future for FinishOnDrop<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    type Output = Caught<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let Some(fut) = this.fut.as_mut() else {
            return Poll::Ready(Err(Box::new("FinishOnDrop polled after it finished")));
        };
        // catch_unwind's poll: a panic inside `F` ends it here, so a future that panicked
        // is never left behind to be spawned and resumed.
        let polled = std::panic::catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(cx)));
        match polled {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => {
                this.fut = None;
                Poll::Ready(Ok(v))
            }
            Err(panic) => {
                this.fut = None;
                Poll::Ready(Err(panic))
            }
        }
    }
}

impl<F> Drop for FinishOnDrop<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn drop(&mut self) {
        let Some(fut) = self.fut.take() else { return };
        // Outside a runtime (it is shutting down, the process with it) nothing can run it.
        // The future stays in its pinned box: handing the box over moves no future.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            drop(rt.spawn(fut));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::oneshot;

    use super::FinishOnDrop;

    /// A step that waits for `go`, then reports on `done`: a claim between its hold and
    /// its settle.
    async fn step(go: oneshot::Receiver<()>, done: oneshot::Sender<u32>) -> u32 {
        go.await.expect("go");
        let _ = done.send(7);
        7
    }

    #[tokio::test]
    async fn a_caller_dropped_midway_leaves_the_rest_running() {
        let (go_tx, go) = oneshot::channel();
        let (done, mut done_rx) = oneshot::channel();
        let mut run = FinishOnDrop::new(step(go, done));
        // Started and waiting, as a claim waits for Redis when its client hangs up.
        assert!(futures::poll!(&mut run).is_pending());
        drop(run);
        go_tx
            .send(())
            .expect("the dropped future's rest still listens");
        let got = tokio::time::timeout(Duration::from_secs(5), &mut done_rx).await;
        assert_eq!(got.expect("the rest ran within 5 s").expect("sent"), 7);
    }

    /// A panic elsewhere in the handler's task, while the protocol waits: unwinding drops
    /// the handler, and the rest still runs.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panic_beside_it_leaves_the_rest_running() {
        let (go_tx, go) = oneshot::channel();
        let (done, done_rx) = oneshot::channel();
        let handler = tokio::spawn(async move {
            let mut run = FinishOnDrop::new(step(go, done));
            assert!(futures::poll!(&mut run).is_pending());
            if std::hint::black_box(true) {
                panic!("a bug outside the protocol");
            }
            run.await.ok()
        });
        assert!(handler.await.unwrap_err().is_panic());
        go_tx.send(()).expect("the rest still listens");
        let got = tokio::time::timeout(Duration::from_secs(5), done_rx).await;
        assert_eq!(got.expect("the rest ran within 5 s").expect("sent"), 7);
    }

    #[tokio::test]
    async fn a_caller_that_waits_gets_the_output_in_place() {
        let (go_tx, go) = oneshot::channel();
        let (done, _done_rx) = oneshot::channel();
        let run = FinishOnDrop::new(step(go, done));
        go_tx.send(()).unwrap();
        assert_eq!(run.await.expect("no panic"), 7);
    }

    #[tokio::test]
    async fn a_panic_inside_is_an_error_for_the_caller() {
        let run = FinishOnDrop::new(async {
            if std::hint::black_box(true) {
                panic!("bug in a step");
            }
            1u32
        });
        assert!(run.await.is_err());
    }
}
