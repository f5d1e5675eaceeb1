//! The engine's side of the loss watch: the cell a watched lock's holder
//! shares with the engine ([`Loss`]), and the calls that start, renew and
//! stop a watch. While anything is watched, the background thread polls
//! (when no caller does), so that the masters' word of a change is read
//! as it comes, not at the next call (see [`crate::flights::Watches`]).

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::task::Waker;
use std::time::{Duration, Instant};

use super::Engine;
use crate::commands::TOKEN_LEN;
use crate::ids::WatchId;
use crate::sync::lock;

/// Whether a watched lock was found lost: set once by the engine, read by
/// the holder (at once, by a blocking wait, or by a future), and told to
/// an optional callback (a keeper's thread).
pub(crate) struct Loss {
    state: Mutex<LossState>,
    changed: Condvar,
}

struct LossState {
    lost: bool,
    wakers: Vec<Waker>,
    on_loss: Option<Box<dyn Fn() + Send>>,
}

impl std::fmt::Debug for Loss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loss")
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl Loss {
    /// A cell not yet lost; `on_loss` runs once when it is found lost.
    pub(crate) fn new(on_loss: Option<Box<dyn Fn() + Send>>) -> Loss {
        Loss {
            state: Mutex::new(LossState {
                lost: false,
                wakers: Vec::new(),
                on_loss,
            }),
            changed: Condvar::new(),
        }
    }

    /// Whether the lock was found lost.
    pub(crate) fn is_lost(&self) -> bool {
        lock(&self.state).lost
    }

    /// The lock was found lost: wakes whoever waits, and runs the
    /// callback once.
    pub(crate) fn tell(&self) {
        let (wakers, on_loss) = {
            let mut state = lock(&self.state);
            if state.lost {
                return;
            }
            state.lost = true;
            (std::mem::take(&mut state.wakers), state.on_loss.take())
        };
        self.changed.notify_all();
        wakers.into_iter().for_each(Waker::wake);
        if let Some(on_loss) = on_loss {
            on_loss();
        }
    }

    /// Waits until the lock is found lost (`true`) or `timeout` passes.
    pub(crate) fn wait(&self, timeout: Duration) -> bool {
        let until = crate::clock::now().checked_add(timeout);
        let mut state = lock(&self.state);
        while !state.lost {
            let left = until.map_or(Duration::MAX, |at| {
                at.saturating_duration_since(crate::clock::now())
            });
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
}

impl Loss {
    /// Whether the lock was found lost; if not, `waker` is woken when it
    /// is.
    pub(crate) fn poll_lost(&self, waker: &Waker) -> bool {
        let mut state = lock(&self.state);
        if !state.lost && !state.wakers.iter().any(|w| w.will_wake(waker)) {
            state.wakers.push(waker.clone());
        }
        state.lost
    }
}

impl Engine {
    /// Watches `key`, held with `token`, for a loss, told to `loss`.
    /// Forgets the watches whose holders are gone.
    pub(crate) fn watch(
        self: &Arc<Self>,
        key: &[u8],
        token: [u8; TOKEN_LEN],
        loss: &Arc<Loss>,
        now: Instant,
    ) -> WatchId {
        let mut guard = lock(&self.driver);
        let shared = &mut *guard;
        let watches = &mut shared.driver.core.watches;
        shared.losses.retain(|&(id, ref holder)| {
            let alive = holder.strong_count() > 0;
            if !alive {
                watches.unwatch(id);
            }
            alive
        });
        let id = shared.driver.watch(key, token, now);
        shared.losses.push((id, Arc::downgrade(loss)));
        // The masters' word comes while no call is made: the background
        // thread reads it.
        self.spawn_background(shared);
        self.kick(shared);
        id
    }

    /// Reads the key of watch `id` again on every master, after this
    /// client extended it.
    pub(crate) fn rearm(&self, id: WatchId) {
        let mut shared = lock(&self.driver);
        shared.driver.rearm(id, crate::clock::now());
    }

    /// Stops watch `id`.
    pub(crate) fn unwatch(&self, id: WatchId) {
        let mut shared = lock(&self.driver);
        shared.driver.core.watches.unwatch(id);
        shared.losses.retain(|&(w, _)| w != id);
    }
}
