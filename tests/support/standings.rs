//! What a keeper told its `on_change` callback: every change of standing,
//! in order, each with when it came and the client's counters then.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use redlock_mio::{Redlock, Standing, Stats};

/// One change: the new standing, when it came, the client's stats then.
pub type Change = (Standing, Instant, Stats);

/// The changes a keeper reported, shared with its callback.
#[derive(Clone, Default)]
pub struct Changes(Arc<Mutex<Vec<Change>>>);

impl Changes {
    pub fn new() -> Changes {
        Changes::default()
    }

    /// A callback for `KeepOptions::on_change` that records each change
    /// with `client`'s stats (a handle of it: the same counters).
    pub fn recorder(&self, client: &Redlock) -> impl Fn(Standing) + Send + 'static {
        let changes = self.clone();
        let client = client.clone();
        move |standing| {
            let stats = client.stats();
            changes.lock().push((standing, Instant::now(), stats));
        }
    }

    /// Every change so far.
    pub fn all(&self) -> Vec<Change> {
        self.lock().clone()
    }

    /// The standings reported so far, in order.
    pub fn standings(&self) -> Vec<Standing> {
        self.lock()
            .iter()
            .map(|(standing, _, _)| *standing)
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Change>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
