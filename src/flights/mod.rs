//! Rounds in flight: the many rounds a shared client runs at once over the
//! same connections, and who waits for each. Free of I/O and of threads:
//! the driver feeds it outcomes and the time, and asks which waiters to
//! wake; a fake clock tests it.
//!
//! Each round lives in a slot of a table allocated once, up to the
//! client's cap on rounds in flight, and is named by an id that is never
//! reused: the slot's index in the low 16 bits, a sequence number above
//! them. A reply that arrives for a round that has ended (its id no longer
//! in its slot) is matched to its request by the connection and dropped;
//! it can never count for the round that took the slot next.
//!
//! A round whose caller is gone (a dropped future) is not ended while its
//! commands may still be written: it is *orphaned* ([`orphan`]), or its
//! slot passes to the release that must follow it ([`pass_to_release`]).
//! Either way a round with no caller stays in the table until every
//! master has answered it, failed or timed out, and is then ended by the
//! driver ([`reap`]).
//!
//! [`orphan`]: Flights::orphan
//! [`pass_to_release`]: Flights::pass_to_release
//! [`reap`]: Flights::reap

#[cfg(any(test, feature = "fuzzing"))]
#[cfg_attr(not(feature = "fuzzing"), allow(unreachable_pub))]
pub(crate) mod fuzz;
#[cfg(test)]
mod tests;
mod waits;
mod watches;

#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub use waits::Waits;
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub use watches::Watches;

use std::cell::Cell;
use std::time::Instant;

use crate::commands::Outcome;
use crate::rules::{NodeError, Round};

/// The most rounds a table can hold: slot indices take 16 bits of an id.
pub(crate) const MAX_FLIGHTS: usize = 1 << 16;

use crate::ids::RoundId;

/// Rounds in flight, each with an optional waiter `W` to wake when it is
/// decided.
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub struct Flights<W> {
    slots: Vec<Slot<W>>,
    /// Indices of free slots.
    free: Vec<u32>,
    /// Ids handed out so far: the next id's sequence number.
    seq: u64,
    /// Slots in use.
    live: usize,
    /// One past the highest slot index ever used: scans stop there (free
    /// slots are taken lowest first, so a lone caller scans one slot).
    high: usize,
    /// Rounds whose waiter was woken at their decision and has not come
    /// for them yet (see [`unclaimed`](Self::unclaimed)).
    unclaimed: usize,
    /// Ids of the rounds decided (or given a waiter once decided) since the
    /// last [`wake_decided`](Self::wake_decided), in order: it looks at
    /// those alone, not at every slot (under load, every caller looks once
    /// a round, and the table spans hundreds of cache lines). Room for as
    /// many as there are slots, allocated once; should it fill up (nobody
    /// wakes anyone: the embedded API), `rescan` is set and the next look
    /// goes over every slot.
    decided: Vec<RoundId>,
    rescan: bool,
    /// Rounds in flight whose caller is gone (see [`orphan`](Self::orphan)).
    orphans: usize,
    /// Slots looked at by the scans of the table so far (each scan counts
    /// `high`): a cost the engine's counters report
    /// ([`crate::EngineStats::scanned`]), so that a test can hold a lone
    /// caller's cycle to its budget.
    scanned: Cell<u64>,
}

impl<W> std::fmt::Debug for Flights<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flights")
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

struct Slot<W> {
    /// The id of the round in this slot; `RoundId::FREE` when free.
    id: RoundId,
    round: Round,
    waiter: Option<W>,
    /// Its waiter was woken and counts in `unclaimed`.
    unclaimed: bool,
    /// Its decision is in `decided` (or was, and has been looked at).
    noted: bool,
    /// Its caller is gone: it ends once no master is left to answer it.
    orphan: bool,
}

impl<W> Slot<W> {
    /// Whether its round is decided and was not noted so far (it is now):
    /// its id goes to the list of decided rounds.
    fn newly_decided(&mut self) -> bool {
        if self.noted || self.round.decision().is_none() {
            return false;
        }
        self.noted = true;
        true
    }
}

#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
impl<W> Flights<W> {
    /// One past the highest slot in use, for a scan, which is counted.
    fn scan(&self) -> usize {
        self.scanned.set(self.scanned.get() + self.high as u64);
        self.high
    }

    /// Slots looked at by scans so far.
    pub(crate) fn scanned(&self) -> u64 {
        self.scanned.get()
    }

    /// A table for up to `cap` rounds (at least 1, at most
    /// [`MAX_FLIGHTS`]) over `masters` masters, allocated now.
    pub(crate) fn new(cap: usize, masters: usize) -> Flights<W> {
        let cap = cap.clamp(1, MAX_FLIGHTS);
        let now = crate::clock::now();
        let idle = || {
            let mut round = Round::new(
                crate::rules::Op::Release,
                masters,
                Default::default(),
                Default::default(),
                Default::default(),
                now,
            );
            round.handle_timeout(now);
            round
        };
        Flights {
            slots: (0..cap)
                .map(|_| Slot {
                    id: RoundId::FREE,
                    round: idle(),
                    waiter: None,
                    unclaimed: false,
                    noted: false,
                    orphan: false,
                })
                .collect(),
            free: (0..cap as u32).rev().collect(),
            seq: 1,
            live: 0,
            high: 0,
            scanned: Cell::new(0),
            unclaimed: 0,
            decided: Vec::with_capacity(cap),
            rescan: false,
            orphans: 0,
        }
    }

    /// The most rounds in flight at once.
    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Rounds in flight now.
    #[allow(
        clippy::len_without_is_empty,
        reason = "a count of rounds, not a collection's length"
    )]
    pub fn len(&self) -> usize {
        self.live
    }

    /// Takes a free slot for a new round and returns its id, or `None` when
    /// all are taken. The round must be restarted by the caller
    /// ([`update`](Self::update)) before anything is delivered to it.
    pub(crate) fn begin(&mut self) -> Option<RoundId> {
        let index = self.free.pop()?;
        let id = RoundId::new(self.seq, u64::from(index));
        self.seq += 1;
        let slot = &mut self.slots[index as usize];
        slot.id = id;
        slot.waiter = None;
        slot.noted = false;
        slot.orphan = false;
        self.live += 1;
        self.high = self.high.max(index as usize + 1);
        Some(id)
    }

    fn slot(&self, id: RoundId) -> Option<&Slot<W>> {
        let slot = self.slots.get(id.index())?;
        (id != RoundId::FREE && slot.id == id).then_some(slot)
    }

    fn slot_mut(&mut self, id: RoundId) -> Option<&mut Slot<W>> {
        let slot = self.slots.get_mut(id.index())?;
        (id != RoundId::FREE && slot.id == id).then_some(slot)
    }

    /// Whether round `id` is in flight.
    pub(crate) fn is_live(&self, id: RoundId) -> bool {
        self.slot(id).is_some()
    }

    /// Round `id`, if it is in flight.
    pub fn round(&self, id: RoundId) -> Option<&Round> {
        self.slot(id).map(|slot| &slot.round)
    }

    /// Lets `change` change round `id`, if it is in flight (to restart it,
    /// or to count a node that failed it).
    pub(crate) fn update(&mut self, id: RoundId, change: impl FnOnce(&mut Round)) {
        if let Some(slot) = self.slot_mut(id) {
            change(&mut slot.round);
            if slot.newly_decided() {
                self.push_decided(id);
            }
        }
    }

    /// Lists round `id` as decided; with the list full, the next look goes
    /// over every slot instead.
    fn push_decided(&mut self, id: RoundId) {
        if self.decided.len() < self.decided.capacity() {
            self.decided.push(id);
        } else {
            self.rescan = true;
        }
    }

    /// Whether round `id` is decided; a round not in flight counts as
    /// decided (there is nothing left to wait for).
    pub(crate) fn is_decided(&self, id: RoundId) -> bool {
        self.slot(id)
            .is_none_or(|slot| slot.round.decision().is_some())
    }

    /// Ends round `id` and frees its slot; its id is dead from now on.
    pub(crate) fn finish(&mut self, id: RoundId) {
        self.claim(id);
        if let Some(slot) = self.slot_mut(id) {
            slot.id = RoundId::FREE;
            slot.waiter = None;
            let orphan = std::mem::take(&mut slot.orphan);
            let index = id.index() as u32;
            self.free.push(index);
            self.live -= 1;
            self.orphans -= usize::from(orphan);
        }
    }

    /// Round `id`'s caller is gone, its commands queued: the round stays in
    /// flight, waited for by nobody, until no master is left to answer it
    /// (see [`reap`](Self::reap)). Its replies still reach it, so that the
    /// client knows when each master has applied (or failed) its command.
    /// Returns whether it was in flight.
    pub fn orphan(&mut self, id: RoundId) -> bool {
        self.claim(id);
        let Some(slot) = self.slot_mut(id) else {
            return false;
        };
        slot.waiter = None;
        if !std::mem::replace(&mut slot.orphan, true) {
            self.orphans += 1;
        }
        true
    }

    /// Round `id`'s caller is gone and what it did must be undone (an
    /// acquire, which may have set its key, is followed by its release):
    /// the round ends, and its slot passes at once to a new round, orphaned
    /// (see [`orphan`](Self::orphan)), whose id is returned. The caller
    /// restarts that round ([`update`](Self::update)) and queues its
    /// command behind the ended one's on every connection.
    ///
    /// The slot never changes hands through the free list: the release
    /// always has one, and the round's commands are tracked from the
    /// moment they can be written until the release has been answered.
    /// `None` if round `id` is not in flight.
    pub(crate) fn pass_to_release(&mut self, id: RoundId) -> Option<RoundId> {
        self.claim(id);
        let next = RoundId::new(self.seq, id.index() as u64);
        let slot = self.slot_mut(id)?;
        slot.id = next;
        slot.waiter = None;
        slot.noted = false;
        let was_orphan = std::mem::replace(&mut slot.orphan, true);
        self.seq += 1;
        self.orphans += usize::from(!was_orphan);
        Some(next)
    }

    /// Rounds in flight whose caller is gone.
    pub(crate) fn orphans(&self) -> usize {
        self.orphans
    }

    /// Ends every orphaned round that no master is left to answer (each
    /// answered, failed or timed out), handing each to `ended` first;
    /// returns how many slots that freed.
    pub(crate) fn reap(&mut self, mut ended: impl FnMut(&Round)) -> usize {
        if self.orphans == 0 {
            return 0;
        }
        let mut freed = 0;
        for i in 0..self.scan() {
            let slot = &self.slots[i];
            if slot.id != RoundId::FREE && slot.orphan && !slot.round.has_pending() {
                ended(&slot.round);
                let id = slot.id;
                self.finish(id);
                freed += 1;
            }
        }
        freed
    }

    /// Hands the outcome of node `node`'s command to round `id`, if it is
    /// in flight.
    pub(crate) fn deliver(&mut self, id: RoundId, node: usize, outcome: Outcome, now: Instant) {
        let Some(slot) = self.slot_mut(id) else {
            return;
        };
        let round = &mut slot.round;
        match outcome {
            Outcome::Reply(reply) => round.handle_reply(node, reply, now),
            Outcome::Server(error) => round.handle_failure(node, NodeError::Server(error), now),
            Outcome::Quarantined => round.handle_quarantined(node, now),
            Outcome::Failed(error) => round.handle_failure(node, error, now),
            Outcome::NoScript | Outcome::Unexpected => {}
        }
        if slot.newly_decided() {
            self.push_decided(id);
        }
    }

    /// Master `master` failed (its connection closed after `error`): every
    /// round in flight that still waits for its reply counts it as failed
    /// (each round's command went to every connection when it started, so
    /// a round still waiting for this master lost its request with the
    /// connection).
    pub(crate) fn fail_master(&mut self, master: usize, error: &NodeError, now: Instant) {
        for i in 0..self.scan() {
            let slot = &mut self.slots[i];
            if slot.id != RoundId::FREE {
                slot.round.handle_failure(master, error.clone(), now);
                if slot.newly_decided() {
                    let id = slot.id;
                    self.push_decided(id);
                }
            }
        }
    }

    /// The time is `now`: rounds past their deadline count the nodes that
    /// have not answered as timed out.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        for i in 0..self.scan() {
            let slot = &mut self.slots[i];
            // (A decided round still counts the nodes it never heard from
            // as timed out: their connections are marked late when it ends.)
            if slot.id != RoundId::FREE && now >= slot.round.deadline() {
                slot.round.handle_timeout(now);
                if slot.newly_decided() {
                    let id = slot.id;
                    self.push_decided(id);
                }
            }
        }
    }

    /// The earliest deadline of the undecided rounds in flight, and of the
    /// orphaned ones still waiting for a master.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let high = self.scan();
        self.slots[..high]
            .iter()
            .filter(|slot| {
                slot.id != RoundId::FREE
                    && (slot.round.decision().is_none()
                        || (slot.orphan && slot.round.has_pending()))
            })
            .map(|slot| slot.round.deadline())
            .min()
    }

    /// Sets who waits for round `id` (replacing any earlier waiter).
    pub fn set_waiter(&mut self, id: RoundId, waiter: W) {
        let Some(slot) = self.slot_mut(id) else {
            return;
        };
        if slot.orphan {
            // Nobody waits for a round whose caller is gone.
            return;
        }
        slot.waiter = Some(waiter);
        if slot.round.decision().is_some() {
            // Decided already (and perhaps looked at, with no waiter then).
            slot.noted = true;
            self.push_decided(id);
        }
    }

    /// Takes the waiters of the decided rounds, for `wake`; those for
    /// which it returns `true` are expected back: each counts as
    /// [`unclaimed`](Self::unclaimed) until its round is
    /// [`claim`](Self::claim)d or finished.
    pub(crate) fn wake_decided(&mut self, mut wake: impl FnMut(W) -> bool) {
        if std::mem::take(&mut self.rescan) {
            self.decided.clear();
            for i in 0..self.scan() {
                let id = self.slots[i].id;
                self.wake_one(id, &mut wake);
            }
            return;
        }
        // (Taken out and put back: its room stays allocated.)
        let mut decided = std::mem::take(&mut self.decided);
        for id in decided.drain(..) {
            self.wake_one(id, &mut wake);
        }
        self.decided = decided;
    }

    /// Wakes the waiter of round `id` with `wake`, if it is decided.
    fn wake_one(&mut self, id: RoundId, wake: &mut impl FnMut(W) -> bool) {
        let Some(slot) = self.slot_mut(id) else {
            return;
        };
        if slot.round.decision().is_none() {
            return;
        }
        if let Some(waiter) = slot.waiter.take() {
            if wake(waiter) && !slot.unclaimed {
                slot.unclaimed = true;
                self.unclaimed += 1;
            }
        }
    }

    /// How many waiters were woken at their rounds' decisions and have not
    /// come for them yet. While some have not, whoever writes for them
    /// may wait for what they will queue next, and write it all at once.
    pub(crate) fn unclaimed(&self) -> usize {
        self.unclaimed
    }

    /// The waiter of round `id` came for it: it no longer counts as
    /// unclaimed.
    pub(crate) fn claim(&mut self, id: RoundId) {
        if let Some(slot) = self.slot_mut(id) {
            if slot.unclaimed {
                slot.unclaimed = false;
                self.unclaimed -= 1;
            }
        }
    }

    /// Takes the waiter of one undecided round for which `pick` says yes,
    /// if any: whoever must take over the polling when its current driver
    /// leaves.
    pub(crate) fn take_undecided_waiter(&mut self, pick: impl Fn(&W) -> bool) -> Option<W> {
        let high = self.scan();
        self.slots[..high]
            .iter_mut()
            .filter(|slot| slot.id != RoundId::FREE && slot.round.decision().is_none())
            .find_map(|slot| slot.waiter.take_if(|w| pick(w)))
    }

    /// Whether some round in flight is undecided and its waiter, if it has
    /// one, is one `pick` says yes to.
    pub(crate) fn any_undecided(&self, pick: impl Fn(&W) -> bool) -> bool {
        let high = self.scan();
        self.slots[..high]
            .iter()
            .filter(|slot| slot.id != RoundId::FREE && slot.round.decision().is_none())
            .any(|slot| slot.waiter.as_ref().is_some_and(&pick))
    }
}
