//! The loss watch of a held lock ([`Redlock::watch`]): the client asks
//! each master to tell it when the lock's keys change, reads a key again
//! where one did, and tells the holder once too few masters can still hold
//! its token (see [`crate::flights::Watches`] for the rules, and the
//! engine's side in `driver/engine/watches.rs`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use smallvec::SmallVec;

use super::{Lock, Redlock};
use crate::calls::Rewatch;
use crate::driver::Loss;
use crate::ids::WatchId;
use crate::rules::Op;

/// A lock's watch: one per resource it covers, one cell for the holder.
pub(crate) struct Watched {
    ids: SmallVec<[WatchId; 1]>,
    loss: Arc<Loss>,
}

impl Watched {
    /// The watch of a lock by `ids`, one per resource, told to `loss`.
    pub(super) fn new(ids: SmallVec<[WatchId; 1]>, loss: Arc<Loss>) -> Watched {
        Watched { ids, loss }
    }

    pub(super) fn is_lost(&self) -> bool {
        self.loss.is_lost()
    }

    pub(super) fn wait_lost(&self, timeout: Duration) -> bool {
        self.loss.wait(timeout)
    }

    pub(super) fn signal(&self) -> LockLoss {
        LockLoss {
            loss: Some(Arc::clone(&self.loss)),
        }
    }
}

/// Completes with `true` once a watched lock is found lost, at once with
/// `false` for a lock that is not watched: see [`Lock::lost`]. It holds no
/// borrow of the lock, so that it can move into another task.
#[derive(Clone)]
#[must_use = "futures do nothing unless awaited"]
pub struct LockLoss {
    loss: Option<Arc<Loss>>,
}

impl LockLoss {
    /// The signal of a lock that is not watched.
    pub(super) fn unwatched() -> LockLoss {
        LockLoss { loss: None }
    }
}

impl std::fmt::Debug for LockLoss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockLoss")
            .field("watched", &self.loss.is_some())
            .field("lost", &self.loss.as_ref().is_some_and(|l| l.is_lost()))
            .finish()
    }
}

impl Future for LockLoss {
    type Output = bool;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        match &self.loss {
            None => Poll::Ready(false),
            Some(loss) if loss.poll_lost(cx.waker()) => Poll::Ready(true),
            Some(_) => Poll::Pending,
        }
    }
}

// A lock is the same lock whoever watches it.
impl PartialEq for Watched {
    fn eq(&self, _: &Watched) -> bool {
        true
    }
}

impl Eq for Watched {}

impl std::fmt::Debug for Watched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watched")
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl Redlock {
    /// Watches `lock` for a loss: from now until it is released, the
    /// client hears of it as soon as its keys change on a master (an
    /// operator's `DEL` or `FLUSHALL`, an eviction, an overwrite, an early
    /// expiry, a master restarted empty), reads the key there again, and
    /// once fewer masters than a quorum can still hold the lock's token,
    /// [`Lock::is_lost`] says so, and [`Lock::wait_lost`] and
    /// [`Lock::lost`] (a future) return. A word
    /// of change is never a verdict by itself, nor is a dropped connection
    /// (its master is unknown until a read after the reconnect).
    ///
    /// Nothing is sent for it until a lock is watched: then each
    /// connection asks its server to track keys (`CLIENT TRACKING ON
    /// OPTIN NOLOOP`, at once and in every later handshake), and only the
    /// watch's own reads are tracked. A watch sends one read per master
    /// when it starts and after each extension of the lock (the servers
    /// forget a key this client changed itself), and one where a key
    /// changed. While a lock is watched, the client's background thread
    /// polls whenever no call does, to hear the masters at once (see
    /// [`limitations`](crate::limitations) for what that costs other
    /// calls). A keeper ([`Redlock::keep`]) and the scoped calls
    /// ([`Redlock::with_lock`]) watch their lock by themselves.
    ///
    /// Where a server does not track keys (an ACL without
    /// `client|tracking` and `client|caching`, see
    /// [`operations`](crate::operations); a server older than Redis 6; or
    /// a client built with
    /// [`wake_on_release(false)`](crate::Builder::wake_on_release), which
    /// speaks RESP2) the watch hears nothing from it: a loss there shows
    /// at the watch's reads (when it starts, after each extension, after a
    /// reconnect) and at the lock's next extension, as without a watch. A
    /// lock that is already watched, or already expired, is left as it is.
    pub fn watch(&self, lock: &mut Lock) {
        self.watch_telling(lock, None);
    }

    /// [`watch`](Self::watch), telling `on_loss` once the lock is found
    /// lost.
    pub(super) fn watch_telling(&self, lock: &mut Lock, on_loss: Option<Box<dyn Fn() + Send>>) {
        if lock.watch.is_some() || lock.is_expired() {
            return;
        }
        let loss = Arc::new(Loss::new(on_loss));
        let now = crate::clock::now();
        let ids = (lock.resources())
            .map(|key| self.engine.watch(key, *lock.token(), &loss, now))
            .collect();
        lock.watch = Some(Watched { ids, loss });
    }

    /// A call of `op` on `lock` went out, its round ended or its caller
    /// gone: `lock`'s watch, if it has one, does what [`Rewatch`] says.
    pub(super) fn rewatch(&self, op: Op, lock: &mut Lock) {
        rewatch(op, lock, |what, id| match what {
            Rewatch::ReadAgain => self.engine.rearm(id),
            Rewatch::End => self.engine.unwatch(id),
        });
    }
}

/// What a call of `op` on `lock` does to its watch, if it has one, as
/// [`Rewatch`] says: `act` is told it for each of its watches (after
/// [`Rewatch::End`], the lock has no watch any more). Every front end's
/// one way to follow the rule, with its own I/O.
pub(super) fn rewatch(op: Op, lock: &mut Lock, mut act: impl FnMut(Rewatch, WatchId)) {
    let Some(what) = Rewatch::after(op) else {
        return;
    };
    match what {
        Rewatch::ReadAgain => {
            if let Some(watched) = &lock.watch {
                watched.ids.iter().for_each(|&id| act(what, id));
            }
        }
        Rewatch::End => {
            if let Some(watched) = lock.watch.take() {
                watched.ids.iter().for_each(|&id| act(what, id));
            }
        }
    }
}
