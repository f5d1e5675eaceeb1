//! A gate that opens once, for a test to hold something (a lock inside
//! `with_lock` or `with_lock_async`, a campaign's workers) until it says
//! so: threads wait for it by blocking, tasks by awaiting [`Gate::opened`],
//! a future that the opening wakes, with no runtime and no timer.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// A one-way gate: closed until [`open`](Gate::open), open for good after.
#[derive(Debug, Default)]
pub struct Gate {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    open: bool,
    wakers: Vec<Waker>,
}

impl Gate {
    /// A closed gate.
    pub fn new() -> Gate {
        Gate::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Opens the gate: wakes every thread and task that waits for it.
    pub fn open(&self) {
        let wakers = {
            let mut state = self.state();
            state.open = true;
            std::mem::take(&mut state.wakers)
        };
        self.changed.notify_all();
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Whether the gate is open.
    pub fn is_open(&self) -> bool {
        self.state().open
    }

    /// Blocks until the gate opens (`true`) or `timeout` has passed
    /// (`false`).
    pub fn wait(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.state();
        while !state.open {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }

    /// A future that completes once the gate is open.
    pub fn opened(&self) -> Opened<'_> {
        Opened(self)
    }
}

/// Completes once its gate is open: see [`Gate::opened`].
#[derive(Debug)]
pub struct Opened<'a>(&'a Gate);

impl Future for Opened<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.0.state();
        if state.open {
            return Poll::Ready(());
        }
        if !state.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            state.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}
