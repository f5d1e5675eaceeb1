//! Futures run side by side on one task, with no runtime: for an executor
//! that runs one future (the bare one of `executor`), a way to run several
//! tasks on its thread at once.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A boxed future that borrows for `'a`.
pub type Task<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// Completes with every output of `tasks`, in their order, once all of
/// them have completed. Each wake-up polls every task still running: any
/// of them may have been the one woken.
pub fn join_all<T>(tasks: Vec<Task<'_, T>>) -> JoinAll<'_, T> {
    JoinAll {
        tasks: tasks.into_iter().map(Some).collect(),
        outputs: Vec::new(),
    }
}

/// See [`join_all`].
pub struct JoinAll<'a, T> {
    tasks: Vec<Option<Task<'a, T>>>,
    outputs: Vec<Option<T>>,
}

// The outputs are never pinned (they are moved out once all are done) and
// the tasks are boxed: nothing here relies on staying in place.
impl<T> Unpin for JoinAll<'_, T> {}

impl<T> Future for JoinAll<'_, T> {
    type Output = Vec<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Vec<T>> {
        let this = self.get_mut();
        if this.outputs.is_empty() {
            this.outputs = this.tasks.iter().map(|_| None).collect();
        }
        for (slot, output) in this.tasks.iter_mut().zip(&mut this.outputs) {
            let polled = slot.as_mut().map(|task| task.as_mut().poll(cx));
            if let Some(Poll::Ready(value)) = polled {
                *output = Some(value);
                *slot = None;
            }
        }
        if this.tasks.iter().any(Option::is_some) {
            return Poll::Pending;
        }
        Poll::Ready(this.outputs.drain(..).flatten().collect())
    }
}
