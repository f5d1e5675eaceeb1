//! Callers waiting to be told that a lock was handed to them, free of I/O
//! and of threads, beside the rounds in flight.
//!
//! A caller that waits for a contended lock takes a slot here for the
//! whole call; its id (never reused: slot index in the low 16 bits, a
//! sequence above) goes into its queue entries on the masters, and a
//! release that hands it the lock publishes that id on the client's
//! channel. Each master that tells it counts once; once a quorum has, the
//! masters that granted nothing else are enough for its next round, and
//! its waiter is woken. A master whose grant its last attempt had, that
//! attempt having failed, counts as having told it
//! ([`handle_granted`](Waits::handle_granted)). A wake-up for an id that
//! has left its slot is dropped. A connection that comes back after a drop may have lost
//! wake-ups: every waiter is woken (a waiter woken for nothing only makes
//! an attempt early).

use std::cell::Cell;
use std::time::{Duration, Instant};

use crate::ids::{INDEX_BITS, WaitId};

/// Callers waiting to be told, each with an optional waiter `W` to wake.
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub struct Waits<W> {
    slots: Vec<Slot<W>>,
    /// Indices of free slots.
    free: Vec<u32>,
    /// The next id's sequence number.
    seq: u64,
    /// Masters told must reach this for a wait to be woken.
    quorum: u32,
    /// Ids of the waits told since the last [`wake_told`](Self::wake_told),
    /// room for one per slot, allocated once (a slot is listed once per
    /// arming).
    told: Vec<WaitId>,
    /// Waiters of waits whose time to try at has come, to wake.
    hints: Vec<W>,
    /// Waits given a time to try at: while there are none, the timer
    /// checks look at no slot.
    hinted: usize,
    /// One past the highest slot index ever used: the scans stop there, so
    /// that a client whose callers never wait (every lone `try_lock` and
    /// `unlock` hands the poller over, which asks this table) looks at no
    /// slot, and one whose callers wait looks at as many slots as have
    /// been in use at once.
    high: usize,
    /// Slots looked at by the scans of the table so far (each scan counts
    /// `high`): a cost the engine's counters report
    /// ([`crate::EngineStats::scanned`]), so that a test can hold a lone
    /// caller's cycle to its budget.
    scanned: Cell<u64>,
    /// How much later than the first time to try at that the masters'
    /// times for the same hand-off may fall (see
    /// [`handle_hint`](Self::handle_hint)): the request timeout, past
    /// which a master's answer counts for nothing anyway.
    spread: Duration,
}

impl<W> std::fmt::Debug for Waits<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waits").finish_non_exhaustive()
    }
}

struct Slot<W> {
    /// The id of the wait in this slot; `WaitId::FREE` when free.
    id: WaitId,
    /// Masters that told it since it was last armed, bit `i` for master
    /// `i` (masters past the 64th count in bit 63).
    masters: u64,
    /// Listed in `told` since it was last armed.
    listed: bool,
    /// The latest time a master told it to try at, since it was armed:
    /// by then, the reservations of every master that told it have
    /// expired.
    hinted: Option<Instant>,
    /// The first time to try at since it was armed: later hints move
    /// `hinted` no further than `spread` past it. `None` with `hinted`
    /// set: a time carried over an attempt, which the next hand-off's
    /// time replaces.
    first_hint: Option<Instant>,
    /// The masters that gave a time to try at since `first_hint` was set
    /// (bit `i` for master `i`, past the 64th in bit 63): a time from one
    /// of them again is its newer word.
    hinters: u64,
    waiter: Option<W>,
}

#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
impl<W> Waits<W> {
    /// One past the highest slot in use, for a scan, which is counted.
    fn scan(&self) -> usize {
        self.scanned.set(self.scanned.get() + self.high as u64);
        self.high
    }

    /// Slots looked at by scans so far.
    pub(crate) fn scanned(&self) -> u64 {
        self.scanned.get()
    }

    /// A table for up to `cap` waits (at least 1, at most 2^16) over
    /// `masters` masters, allocated now.
    pub(crate) fn new(cap: usize, masters: usize, spread: Duration) -> Waits<W> {
        let cap = cap.clamp(1, 1 << INDEX_BITS);
        Waits {
            slots: (0..cap)
                .map(|_| Slot {
                    id: WaitId::FREE,
                    masters: 0,
                    listed: false,
                    hinted: None,
                    first_hint: None,
                    hinters: 0,
                    waiter: None,
                })
                .collect(),
            free: (0..cap as u32).rev().collect(),
            seq: 1,
            quorum: crate::rules::quorum(masters) as u32,
            told: Vec::with_capacity(cap),
            hints: Vec::with_capacity(cap),
            hinted: 0,
            high: 0,
            scanned: Cell::new(0),
            spread,
        }
    }

    /// Whether no caller waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.free.len() == self.slots.len()
    }

    /// Takes a free slot for a new wait and returns its id, or `None` when
    /// all are taken.
    pub fn begin(&mut self) -> Option<WaitId> {
        let index = self.free.pop()?;
        let id = WaitId::new(self.seq, u64::from(index));
        self.seq += 1;
        let slot = &mut self.slots[index as usize];
        slot.id = id;
        slot.masters = 0;
        slot.listed = false;
        slot.hinted = None;
        slot.first_hint = None;
        slot.hinters = 0;
        slot.waiter = None;
        self.high = self.high.max(index as usize + 1);
        Some(id)
    }

    fn slot(&self, id: WaitId) -> Option<&Slot<W>> {
        let slot = self.slots.get(id.index())?;
        (id != WaitId::FREE && slot.id == id).then_some(slot)
    }

    fn slot_mut(&mut self, id: WaitId) -> Option<&mut Slot<W>> {
        let slot = self.slots.get_mut(id.index())?;
        (id != WaitId::FREE && slot.id == id).then_some(slot)
    }

    /// Ends wait `id`: its slot is free, later wake-ups for it are
    /// dropped, its waiter (if any) is returned.
    pub fn end(&mut self, id: WaitId) -> Option<W> {
        let index = id.index() as u32;
        let slot = self.slot_mut(id)?;
        slot.id = WaitId::FREE;
        let waiter = slot.waiter.take();
        let hinted = slot.hinted.take().is_some();
        self.free.push(index);
        self.hinted -= usize::from(hinted);
        waiter
    }

    /// Forgets what told wait `id` so far, at `now`: called before each
    /// attempt, so that only the wake-ups after it count for the wait that
    /// follows. A time to try at that is still ahead stays: the attempt
    /// made before it finds the key still kept for the waiters the time
    /// waits out (a reservation, the windows before a turn), and nobody
    /// tells the time again. It is carried, not of the next hand-off: a
    /// time a later release tells replaces it, earlier or later.
    pub fn arm(&mut self, id: WaitId, now: Instant) {
        if let Some(slot) = self.slot_mut(id) {
            slot.masters = 0;
            slot.listed = false;
            slot.first_hint = None;
            slot.hinters = 0;
            if slot.hinted.is_some_and(|at| at <= now) {
                slot.hinted = None;
                self.hinted -= 1;
            }
        }
    }

    /// Whether wait `id` still waits: its call has not ended.
    pub(crate) fn is_waiting(&self, id: WaitId) -> bool {
        self.slot(id).is_some()
    }

    /// Whether a quorum of masters told wait `id` since it was armed (or
    /// it is not a wait any more: nothing to wait for).
    pub fn is_told(&self, id: WaitId) -> bool {
        self.slot(id)
            .is_none_or(|slot| slot.masters.count_ones() >= self.quorum)
    }

    /// Sets `waiter` to be woken when wait `id` is told.
    pub fn set_waiter(&mut self, id: WaitId, waiter: W) {
        if let Some(slot) = self.slot_mut(id) {
            slot.waiter = Some(waiter);
        }
    }

    /// Takes wait `id`'s waiter back (its caller stopped waiting).
    pub fn take_waiter(&mut self, id: WaitId) -> Option<W> {
        self.slot_mut(id)?.waiter.take()
    }

    /// Master `node` told wait `id` (a release handed it a lock there).
    pub(crate) fn handle_wake(&mut self, id: WaitId, node: usize) {
        self.tell(id, 1 << node.min(63));
    }

    /// The masters of `masters` (bit `i` for master `i`, those past the
    /// 64th in bit 63) granted wait `id`'s attempt, which failed: each
    /// counts as having told it (see `calls::Granted`). The key there is
    /// free for the caller, and no release tells it there again (the grant
    /// took its queue entry); a tell from there that came before the
    /// attempt was armed was forgotten with the arming. Without this, a
    /// waiter whose quorum includes such a master waits for its fallback.
    pub fn handle_granted(&mut self, id: WaitId, masters: u64) {
        self.tell(id, masters);
    }

    /// The masters of `masters` told wait `id`: once a quorum has since it
    /// was armed, it is listed to be woken.
    fn tell(&mut self, id: WaitId, masters: u64) {
        let quorum = self.quorum;
        let Some(slot) = self.slot_mut(id) else {
            return;
        };
        slot.masters |= masters;
        if slot.masters.count_ones() >= quorum && !slot.listed {
            slot.listed = true;
            self.told.push(id);
        }
    }

    /// A master told wait `id` to try at `at`, should nobody hand it the
    /// lock before (the waiter before it may never come). Its waiter is
    /// woken then ([`handle_timeout`](Self::handle_timeout)), not now: a
    /// waiter next in line is usually handed the lock long before.
    ///
    /// The masters that tell it of one hand-off give times a little apart
    /// (each its own reservation's end, as it saw it); the latest counts, so
    /// that every one of those reservations has ended by then. But a time
    /// more than `spread` past the first one is another hand-off's (a
    /// release that came later): it moves the attempt no further, or a
    /// waiter under frequent releases would be told to wait again and again
    /// and never make its attempt. A sooner time from a master that
    /// already gave one is that master's newer word (a later script's,
    /// such as a leave's that tells again): it starts over from there.
    pub(crate) fn handle_hint(&mut self, id: WaitId, master: usize, at: Instant) {
        let spread = self.spread;
        let Some(slot) = self.slot_mut(id) else {
            return;
        };
        let bit = 1 << master.min(63);
        match (slot.hinted, slot.first_hint) {
            // Another master's time for the same hand-off, or this
            // master's again, no sooner.
            (Some(latest), Some(first)) if slot.hinters & bit == 0 || at >= latest => {
                let cap = first.checked_add(spread).unwrap_or(first);
                slot.hinted = Some(latest.max(at.min(cap)));
                slot.hinters |= bit;
            }
            // The first time, one that replaces a time carried over an
            // attempt, or a master's sooner newer word (a later script's,
            // the waiters before it gone): it starts over.
            (hinted, _) => {
                slot.hinted = Some(at);
                slot.first_hint = Some(at);
                slot.hinters = bit;
                if hinted.is_none() {
                    self.hinted += 1;
                }
            }
        }
    }

    /// The earliest time a waiting caller was told to try at, if any.
    pub(crate) fn next_hint(&self) -> Option<Instant> {
        if self.hinted == 0 {
            return None;
        }
        let high = self.scan();
        self.slots[..high]
            .iter()
            .filter(|slot| slot.id != WaitId::FREE && slot.waiter.is_some())
            .filter_map(|slot| slot.hinted)
            .min()
    }

    /// The time is `now`: the waiters told to try by now are woken (with
    /// [`wake_told`](Self::wake_told)).
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        if self.hinted == 0 {
            return;
        }
        let high = self.scan();
        for slot in &mut self.slots[..high] {
            if slot.id != WaitId::FREE && slot.hinted.is_some_and(|at| at <= now) {
                if let Some(waiter) = slot.waiter.take() {
                    self.hints.push(waiter);
                }
            }
        }
    }

    /// The latest time a master told wait `id` to try at, since it was
    /// armed.
    pub fn hinted(&self, id: WaitId) -> Option<Instant> {
        match self.slots.get(id.index()) {
            Some(slot) if id != WaitId::FREE && slot.id == id => slot.hinted,
            _ => None,
        }
    }

    /// Master `node` came back after its connection dropped: it may have
    /// lost wake-ups, so every wait counts as told by a quorum.
    pub(crate) fn handle_reconnect(&mut self) {
        let high = self.scan();
        for slot in &mut self.slots[..high] {
            if slot.id != WaitId::FREE {
                slot.masters = u64::MAX;
                if !slot.listed {
                    slot.listed = true;
                    self.told.push(slot.id);
                }
            }
        }
    }

    /// Hands `wake` the waiter of every wait told since the last call (or
    /// given a time to try at).
    pub(crate) fn wake_told(&mut self, mut wake: impl FnMut(W)) {
        for waiter in self.hints.drain(..) {
            wake(waiter);
        }
        for i in 0..self.told.len() {
            let id = self.told[i];
            if let Some(waiter) = self.slot_mut(id).and_then(|slot| slot.waiter.take()) {
                wake(waiter);
            }
        }
        self.told.clear();
    }

    /// Takes the waiter of a wait not told yet that `pick` chooses (a
    /// thread, to take the poller over), if there is one.
    pub(crate) fn take_untold_waiter(&mut self, pick: impl Fn(&W) -> bool) -> Option<W> {
        let quorum = self.quorum;
        let high = self.scan();
        self.slots[..high]
            .iter_mut()
            .filter(|slot| slot.id != WaitId::FREE && slot.masters.count_ones() < quorum)
            .find(|slot| slot.waiter.as_ref().is_some_and(&pick))
            .and_then(|slot| slot.waiter.take())
    }

    /// Whether a wait has a waiter that `pick` chooses.
    pub(crate) fn any_waiter(&self, pick: impl Fn(&W) -> bool) -> bool {
        let high = self.scan();
        self.slots[..high]
            .iter()
            .any(|slot| slot.id != WaitId::FREE && slot.waiter.as_ref().is_some_and(&pick))
    }
}

#[cfg(test)]
mod tests {
    use super::{WaitId, Waits};

    /// The masters' times for one hand-off may be this far apart.
    const SPREAD: std::time::Duration = std::time::Duration::from_millis(50);

    /// A table over three masters with one wait, its waiter `"w"` set.
    fn one_waiter() -> (Waits<&'static str>, WaitId) {
        let mut waits = Waits::new(4, 3, SPREAD);
        let id = waits.begin().unwrap_or(WaitId::FREE);
        waits.set_waiter(id, "w");
        (waits, id)
    }

    /// A time after every hint of these tests: arming then forgets them.
    fn past_every_hint() -> std::time::Instant {
        std::time::Instant::now() + std::time::Duration::from_secs(3600)
    }

    #[test]
    fn arming_keeps_a_time_to_try_at_that_is_still_ahead() {
        let t0 = std::time::Instant::now();
        let ms = std::time::Duration::from_millis;
        let (mut waits, id) = one_waiter();
        waits.handle_hint(id, 0, t0 + ms(200));
        // An attempt before that time finds the key still kept for others.
        waits.arm(id, t0 + ms(100));
        assert_eq!(waits.hinted(id), Some(t0 + ms(200)));
        assert_eq!(waits.next_hint(), Some(t0 + ms(200)));
        // One at or after it has made the attempt the time called for.
        waits.arm(id, t0 + ms(200));
        assert_eq!(waits.hinted(id), None);
        assert_eq!(waits.next_hint(), None);
    }

    #[test]
    fn a_masters_sooner_word_replaces_its_earlier_one() {
        let t0 = std::time::Instant::now();
        let ms = std::time::Duration::from_millis;
        let (mut waits, id) = one_waiter();
        // Two scripts on each master, the second telling again sooner
        // (the waiters before it left): each master's last word counts.
        for master in 0..3 {
            waits.handle_hint(id, master, t0 + ms(300));
            waits.handle_hint(id, master, t0 + ms(200));
        }
        assert_eq!(waits.hinted(id), Some(t0 + ms(200)));
        assert_eq!(waits.next_hint(), Some(t0 + ms(200)));
        // A later word of one master, later: no further than the spread.
        waits.handle_hint(id, 1, t0 + ms(900));
        assert_eq!(waits.hinted(id), Some(t0 + ms(200) + SPREAD));
    }

    #[test]
    fn a_later_hand_offs_time_replaces_a_carried_one() {
        let t0 = std::time::Instant::now();
        let ms = std::time::Duration::from_millis;
        let (mut waits, id) = one_waiter();
        waits.handle_hint(id, 0, t0 + ms(300));
        waits.arm(id, t0 + ms(100));
        // A release after the attempt tells an earlier time: it counts,
        // though the carried one is later (and its masters' times group as
        // one hand-off's again).
        waits.handle_hint(id, 1, t0 + ms(180));
        waits.handle_hint(id, 2, t0 + ms(190));
        assert_eq!(waits.hinted(id), Some(t0 + ms(190)));
        assert_eq!(waits.next_hint(), Some(t0 + ms(190)));
        waits.handle_timeout(t0 + ms(190));
        let mut woken = Vec::new();
        waits.wake_told(|w| woken.push(w));
        assert_eq!(woken, ["w"]);
        waits.end(id);
        assert_eq!(waits.next_hint(), None, "the count of hinted waits follows");
    }

    /// Each scan of the table counts the slots it looks at, up to the
    /// highest slot ever used and no further (the engine reports the
    /// count, and the budget tests hold a lone caller's cycle to it): none
    /// before a wait began, two per scan of a table of four with two
    /// waits, still two once the first slot is free again.
    #[test]
    fn each_scan_counts_the_slots_up_to_the_highest_ever_used() {
        let mut waits: Waits<()> = Waits::new(4, 3, SPREAD);
        waits.handle_reconnect();
        assert_eq!(waits.scanned(), 0);
        let first = waits.begin().unwrap_or(WaitId::FREE);
        let _second = waits.begin();
        waits.handle_reconnect();
        assert_eq!(waits.scanned(), 2);
        assert!(!waits.any_waiter(|_| true));
        assert_eq!(waits.scanned(), 4);
        waits.end(first);
        waits.handle_reconnect();
        assert_eq!(waits.scanned(), 6);
    }

    /// A master that gives the same time to try at again (a later script
    /// telling again, nothing sooner) is not a sooner word: the hand-off's
    /// times still group from the first one, and a later master's time
    /// moves the attempt no further than the spread past it.
    #[test]
    fn a_masters_same_time_again_keeps_the_hand_offs_first_time() {
        let t0 = std::time::Instant::now();
        let ms = std::time::Duration::from_millis;
        let (mut waits, id) = one_waiter();
        waits.handle_hint(id, 0, t0 + ms(100));
        waits.handle_hint(id, 1, t0 + ms(130));
        waits.handle_hint(id, 1, t0 + ms(130));
        assert_eq!(waits.hinted(id), Some(t0 + ms(130)));
        waits.handle_hint(id, 2, t0 + ms(170));
        assert_eq!(waits.hinted(id), Some(t0 + ms(100) + SPREAD));
        assert_eq!(waits.next_hint(), Some(t0 + ms(150)));
    }

    #[test]
    fn a_wait_is_told_once_a_quorum_of_masters_told_it() {
        let mut waits: Waits<&str> = Waits::new(4, 5, SPREAD);
        let id = waits.begin().unwrap_or(WaitId::FREE);
        waits.arm(id, past_every_hint());
        waits.set_waiter(id, "caller");
        waits.handle_wake(id, 0);
        waits.handle_wake(id, 0);
        waits.handle_wake(id, 3);
        assert!(!waits.is_told(id), "two masters of five are no quorum");
        let mut woken = Vec::new();
        waits.wake_told(|w| woken.push(w));
        assert!(woken.is_empty());
        waits.handle_wake(id, 4);
        assert!(waits.is_told(id));
        waits.wake_told(|w| woken.push(w));
        assert_eq!(woken, ["caller"]);
    }

    #[test]
    fn arming_forgets_what_told_the_last_attempt() {
        let mut waits: Waits<()> = Waits::new(1, 3, SPREAD);
        let id = waits.begin().unwrap_or(WaitId::FREE);
        waits.handle_wake(id, 0);
        waits.handle_wake(id, 1);
        assert!(waits.is_told(id));
        waits.arm(id, past_every_hint());
        assert!(!waits.is_told(id));
    }

    /// Masters whose grant a failed attempt had count as tells since the
    /// arming, with the masters that tell it after: a tell that came
    /// before the arming is forgotten, and that master tells no more.
    #[test]
    fn masters_that_granted_a_failed_attempt_count_as_telling_it() {
        let mut waits: Waits<&str> = Waits::new(2, 3, SPREAD);
        let id = waits.begin().unwrap_or(WaitId::FREE);
        waits.set_waiter(id, "caller");
        waits.handle_wake(id, 1);
        waits.arm(id, past_every_hint());
        waits.handle_wake(id, 2);
        assert!(!waits.is_told(id), "master 1's tell came before the arming");
        waits.handle_granted(id, 0b010);
        assert!(waits.is_told(id));
        let mut woken = Vec::new();
        waits.wake_told(|w| woken.push(w));
        assert_eq!(woken, ["caller"]);
        waits.arm(id, past_every_hint());
        waits.handle_granted(id, 0b001);
        assert!(!waits.is_told(id), "one master of three is no quorum");
    }

    #[test]
    fn a_wake_up_for_an_ended_wait_reaches_nobody() {
        let mut waits: Waits<&str> = Waits::new(1, 1, SPREAD);
        let old = waits.begin().unwrap_or(WaitId::FREE);
        waits.end(old);
        let new = waits.begin().unwrap_or(WaitId::FREE);
        assert_ne!(old, new, "ids are never reused");
        waits.arm(new, past_every_hint());
        waits.set_waiter(new, "new");
        waits.handle_wake(old, 0);
        assert!(!waits.is_told(new));
        let mut woken = Vec::new();
        waits.wake_told(|w| woken.push(w));
        assert!(woken.is_empty());
    }

    #[test]
    fn a_reconnect_wakes_every_waiter() {
        let mut waits: Waits<u8> = Waits::new(4, 3, SPREAD);
        let a = waits.begin().unwrap_or(WaitId::FREE);
        let b = waits.begin().unwrap_or(WaitId::FREE);
        waits.set_waiter(a, 1);
        waits.set_waiter(b, 2);
        waits.handle_reconnect();
        let mut woken = Vec::new();
        waits.wake_told(|w| woken.push(w));
        woken.sort_unstable();
        assert_eq!(woken, [1, 2]);
        assert!(waits.is_told(a) && waits.is_told(b));
    }

    #[test]
    fn a_time_to_try_at_wakes_its_waiter_then_not_before() {
        let t0 = std::time::Instant::now();
        let ms = std::time::Duration::from_millis;
        let mut waits: Waits<&str> = Waits::new(2, 3, SPREAD);
        let id = waits.begin().unwrap_or(WaitId::FREE);
        waits.set_waiter(id, "second in line");
        assert_eq!(waits.next_hint(), None);
        waits.handle_hint(id, 0, t0 + ms(200));
        waits.handle_hint(id, 1, t0 + ms(150));
        assert_eq!(
            waits.hinted(id),
            Some(t0 + ms(200)),
            "the latest master's time"
        );
        assert_eq!(waits.next_hint(), Some(t0 + ms(200)));
        let mut woken = Vec::new();
        waits.handle_timeout(t0 + ms(199));
        waits.wake_told(|w| woken.push(w));
        assert!(woken.is_empty());
        assert!(!waits.is_told(id), "a time to try at is no hand-over");
        waits.handle_timeout(t0 + ms(200));
        waits.wake_told(|w| woken.push(w));
        assert_eq!(woken, ["second in line"]);
        waits.arm(id, past_every_hint());
        assert_eq!((waits.hinted(id), waits.next_hint()), (None, None));
    }

    /// An id that left its slot is no wait any more, whatever the slot's
    /// next wait is told or was told to try at.
    #[test]
    fn an_ended_waits_id_asks_nothing_of_its_slots_next_wait() {
        let t0 = std::time::Instant::now();
        let mut waits: Waits<&str> = Waits::new(1, 3, SPREAD);
        let old = waits.begin().unwrap_or(WaitId::FREE);
        waits.handle_hint(old, 0, t0);
        waits.end(old);
        let new = waits.begin().unwrap_or(WaitId::FREE);
        waits.handle_hint(new, 0, t0);
        assert!(waits.is_told(old), "nothing to wait for");
        assert!(!waits.is_told(new));
        assert_eq!(waits.hinted(old), None);
        assert_eq!(waits.hinted(new), Some(t0));
        assert!(waits.is_told(WaitId::FREE), "the id no wait has");
    }

    /// A master's later time to try at for the same hand-off replaces an
    /// earlier one; a wait whose waiter was taken back has nobody to wake
    /// at its time.
    #[test]
    fn times_to_try_at_keep_the_latest_and_need_a_waiter() {
        let t0 = std::time::Instant::now();
        let ms = std::time::Duration::from_millis;
        let mut waits: Waits<&str> = Waits::new(1, 3, SPREAD);
        let id = waits.begin().unwrap_or(WaitId::FREE);
        waits.handle_hint(id, 0, t0 + ms(150));
        waits.handle_hint(id, 1, t0 + ms(200));
        assert_eq!(waits.hinted(id), Some(t0 + ms(200)));
        assert_eq!(waits.next_hint(), None, "nobody to wake");
        waits.set_waiter(id, "caller");
        assert_eq!(waits.next_hint(), Some(t0 + ms(200)));
        assert_eq!(waits.take_waiter(id), Some("caller"));
        assert_eq!(waits.take_waiter(id), None);
        assert_eq!(waits.next_hint(), None);
        waits.handle_timeout(t0 + ms(200));
        waits.handle_wake(id, 0);
        waits.handle_wake(id, 1);
        let mut woken = Vec::new();
        waits.wake_told(|w| woken.push(w));
        assert!(woken.is_empty(), "the waiter was taken back");
    }

    /// The thread that takes the poller over is the waiter of a wait not
    /// told yet, never one a quorum told (it is about to be woken).
    #[test]
    fn only_an_untold_waits_waiter_takes_over() {
        let mut waits: Waits<&str> = Waits::new(4, 3, SPREAD);
        let told = waits.begin().unwrap_or(WaitId::FREE);
        let untold = waits.begin().unwrap_or(WaitId::FREE);
        waits.set_waiter(told, "told");
        waits.set_waiter(untold, "untold");
        waits.handle_wake(told, 0);
        waits.handle_wake(told, 2);
        waits.handle_wake(untold, 1);
        assert!(waits.any_waiter(|w| *w == "told"));
        assert_eq!(waits.take_untold_waiter(|w| *w == "nobody"), None);
        assert_eq!(waits.take_untold_waiter(|_| true), Some("untold"));
        assert_eq!(waits.take_untold_waiter(|_| true), None);
        assert!(!waits.any_waiter(|w| *w == "untold"));
        assert!(waits.any_waiter(|_| true), "the told one stays");
        // Told by all three: still told, never untold.
        waits.handle_wake(told, 1);
        assert_eq!(waits.take_untold_waiter(|_| true), None);
    }

    /// The count of waits given a time to try at follows them as they are
    /// armed and ended: once none is left, the timer checks look at no
    /// slot.
    #[test]
    fn the_hinted_count_follows_the_waits() {
        let t0 = std::time::Instant::now();
        let mut waits: Waits<()> = Waits::new(3, 3, SPREAD);
        let ids = [(); 3].map(|()| waits.begin().unwrap_or(WaitId::FREE));
        for id in ids {
            waits.handle_hint(id, 0, t0);
        }
        waits.handle_hint(ids[0], 0, t0);
        assert_eq!(waits.hinted, 3, "each wait once");
        waits.end(ids[0]);
        waits.arm(ids[1], past_every_hint());
        assert_eq!(waits.hinted, 1);
        waits.end(ids[1]);
        waits.end(ids[2]);
        assert_eq!(waits.hinted, 0);
    }

    #[test]
    fn the_table_is_bounded_and_slots_come_back() {
        let mut waits: Waits<()> = Waits::new(2, 3, SPREAD);
        let a = waits.begin();
        assert!(a.is_some() && waits.begin().is_some());
        assert_eq!(waits.begin(), None);
        waits.end(a.unwrap_or(WaitId::FREE));
        assert!(waits.begin().is_some());
    }

    /// Times to try at from later hand-offs (releases one after another)
    /// move the attempt no further than the spread past the first: the
    /// waiter makes its attempt, however often the lock changes hands.
    #[test]
    fn later_hand_offs_never_put_the_attempt_off_past_the_spread() {
        let t0 = std::time::Instant::now();
        let ms = std::time::Duration::from_millis;
        let mut waits: Waits<&str> = Waits::new(1, 3, SPREAD);
        let id = waits.begin().unwrap_or(WaitId::FREE);
        waits.handle_hint(id, 0, t0 + ms(400));
        waits.handle_hint(id, 1, t0 + ms(420));
        assert_eq!(waits.hinted(id), Some(t0 + ms(420)), "the same hand-off");
        for later in 1..10 {
            waits.handle_hint(id, 0, t0 + ms(400 + 400 * later));
        }
        assert_eq!(waits.hinted(id), Some(t0 + ms(400) + SPREAD));
        waits.handle_hint(id, 2, t0 + ms(100));
        assert_eq!(
            waits.hinted(id),
            Some(t0 + ms(400) + SPREAD),
            "never sooner from another master"
        );
        waits.arm(id, past_every_hint());
        waits.handle_hint(id, 0, t0 + ms(2000));
        assert_eq!(
            waits.hinted(id),
            Some(t0 + ms(2000)),
            "a new attempt, a new first time"
        );
    }
}
