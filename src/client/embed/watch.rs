//! The embedded client's loss watch: [`EmbeddedRedlock::watch`], the
//! losses it reports as completions, and what an extend or a release does
//! to a watch ([`Rewatch`], as for the other front ends).

use std::sync::Arc;

use smallvec::SmallVec;

use super::{EmbeddedRedlock, Ticket};
use crate::calls::Rewatch;
use crate::client::Lock;
use crate::client::watch::Watched;
use crate::driver::Loss;
use crate::ids::WatchId;
use crate::rules::Op;

/// The bit that sets a watch's ticket apart from the tickets of rounds
/// (their ids, which never reach it) and of `lock_until` calls (the top
/// bit).
const WATCH_TAG: u64 = 1 << 62;

impl EmbeddedRedlock {
    /// Watches `lock` for a loss, as [`Redlock::watch`] does: from now
    /// until its release, the masters tell the client's connections when
    /// its keys change, the client reads a key again where one did, and
    /// once fewer masters than a quorum can still hold the lock's token,
    /// [`Lock::is_lost`] says so and the watch's ticket completes
    /// ([`Completion::Lost`], from
    /// [`poll_completion`](Self::poll_completion)). The masters' word
    /// arrives as readable events on the client's tokens, like replies,
    /// and the reads' deadlines are in
    /// [`next_timeout`](Self::next_timeout): the loop that hands the
    /// client its events and the time drives the watch too. An extend
    /// ([`extend`](Self::extend)) reads the keys again; a release
    /// ([`unlock`](Self::unlock)) ends the watch.
    ///
    /// Returns the watch's ticket, or `None` for a lock that is already
    /// watched, or already expired: it is left as it is.
    ///
    /// [`Redlock::watch`]: crate::Redlock::watch
    /// [`Completion::Lost`]: super::Completion::Lost
    pub fn watch(&mut self, lock: &mut Lock) -> Option<Ticket> {
        if lock.watch.is_some() || lock.is_expired() {
            return None;
        }
        let loss = Arc::new(Loss::new(None));
        let now = crate::clock::now();
        let driver = &mut self.base.driver;
        self.holders.sweep(&mut driver.core.watches);
        let token = *lock.token();
        let ids: SmallVec<[WatchId; 1]> = (lock.resources())
            .map(|key| driver.watch(key, token, now))
            .collect();
        let first = ids.first()?.0;
        let ticket = Ticket(WATCH_TAG | first);
        for &id in &ids {
            self.holders.add(id, &loss, ticket);
        }
        lock.watch = Some(Watched::new(ids, loss));
        Some(ticket)
    }

    /// A call of `op` on `lock` went out, or its round ended: `lock`'s
    /// watch, if it has one, does what [`Rewatch`] says.
    pub(super) fn rewatch(&mut self, op: Op, lock: &mut Lock) {
        let now = crate::clock::now();
        let (driver, holders) = (&mut self.base.driver, &mut self.holders);
        crate::client::watch::rewatch(op, lock, |what, id| match what {
            Rewatch::ReadAgain => driver.rearm(id, now),
            Rewatch::End => {
                driver.core.watches.unwatch(id);
                holders.remove(id);
            }
        });
    }

    /// Tells the holders of the locks found lost since the last call, and
    /// queues each watch's ticket for [`poll_completion`](Self::poll_completion).
    pub(super) fn tell_losses(&mut self) {
        let lost = &mut self.lost;
        (self.holders).tell(&mut self.base.driver.core.watches, |ticket| {
            lost.push(ticket);
        });
    }
}
