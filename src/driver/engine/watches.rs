//! The engine's side of the loss watch: the cell a watched lock's holder
//! shares with the engine ([`Loss`]), and the calls that start, renew and
//! stop a watch. While anything is watched, the background thread polls
//! (when no caller does), so that the masters' word of a change is read
//! as it comes, not at the next call (see [`crate::flights::Watches`]).

use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::task::Waker;
use std::time::{Duration, Instant};

use super::Engine;
use crate::commands::TOKEN_LEN;
use crate::flights::Watches;
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
    /// callback once. Whether it was not lost before.
    pub(crate) fn tell(&self) -> bool {
        let (wakers, on_loss) = {
            let mut state = lock(&self.state);
            if state.lost {
                return false;
            }
            state.lost = true;
            (std::mem::take(&mut state.wakers), state.on_loss.take())
        };
        self.changed.notify_all();
        wakers.into_iter().for_each(Waker::wake);
        if let Some(on_loss) = on_loss {
            on_loss();
        }
        true
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

/// The holders of the watched keys, each told through its cell when its
/// watch finds the lock lost, with a `T` of the caller's (the embedded
/// client's watch ticket). A holder that is gone (a watched `Lock`
/// dropped unreleased) is forgotten, and its watch stopped: its key's
/// expiry would find it lost at the latest.
#[derive(Debug)]
pub(crate) struct Holders<T = ()>(Vec<(WatchId, Weak<Loss>, T)>);

impl<T> Default for Holders<T> {
    fn default() -> Self {
        Holders(Vec::new())
    }
}

impl<T: Copy> Holders<T> {
    /// Watch `id` tells `loss`, and `tag` to [`tell`](Self::tell)'s caller.
    pub(crate) fn add(&mut self, id: WatchId, loss: &Arc<Loss>, tag: T) {
        self.0.push((id, Arc::downgrade(loss), tag));
    }

    /// Watch `id` stopped.
    pub(crate) fn remove(&mut self, id: WatchId) {
        self.0.retain(|&(w, _, _)| w != id);
    }

    /// Forgets the holders that are gone, stopping their watches.
    pub(crate) fn sweep(&mut self, watches: &mut Watches) {
        self.0.retain(|&(id, ref holder, _)| {
            let alive = holder.strong_count() > 0;
            if !alive {
                watches.unwatch(id);
            }
            alive
        });
    }

    /// Tells the holders of the watches found lost since the last call,
    /// and `told` the tag of the watch that first found each lock lost (a
    /// lock of several resources has a watch per resource); stops the
    /// watches of holders that are gone.
    pub(crate) fn tell(&mut self, watches: &mut Watches, mut told: impl FnMut(T)) {
        while let Some(id) = watches.take_lost() {
            let holder = self.0.iter().find(|(w, _, _)| *w == id);
            match holder.and_then(|(_, loss, tag)| Some((loss.upgrade()?, *tag))) {
                Some((loss, tag)) => {
                    if loss.tell() {
                        told(tag);
                    }
                }
                None => {
                    watches.unwatch(id);
                    self.remove(id);
                }
            }
        }
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
        shared.losses.sweep(&mut shared.driver.core.watches);
        let id = shared.driver.watch(key, token, now);
        shared.losses.add(id, loss, ());
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
        shared.losses.remove(id);
    }
}
