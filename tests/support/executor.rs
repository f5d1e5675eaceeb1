//! Futures driven on the test's own thread by the barest executors: no
//! timers, no reactor, nothing but the future's own waker wakes it. What a
//! future of the crate must live with, since it depends on no runtime.

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

/// An executor, as a test that runs the same future under several takes
/// it: runs a future to completion on this thread.
pub type BlockOn = fn(Pin<Box<dyn Future<Output = ()> + '_>>);

/// A waker that unparks the thread that polls.
pub struct Unpark(pub Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// A waker for the current thread.
pub fn unpark_waker() -> Waker {
    Waker::from(Arc::new(Unpark(thread::current())))
}

/// Polls `future` on this thread, parking between polls until its waker
/// unparks it, until it completes.
pub fn bare_block_on<F: Future>(future: F) -> F::Output {
    let waker = unpark_waker();
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(value) = future.as_mut().poll(&mut cx) {
            return value;
        }
        thread::park();
    }
}

/// [`bare_block_on`], giving up (`None`) once `timeout` has passed: for a
/// future that must complete, so that a test fails instead of hanging.
pub fn block_on_for<F: Future>(future: F, timeout: Duration) -> Option<F::Output> {
    let waker = unpark_waker();
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    let deadline = Instant::now() + timeout;
    loop {
        if let Poll::Ready(value) = future.as_mut().poll(&mut cx) {
            return Some(value);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        thread::park_timeout(left);
    }
}
