//! The loss watch: some holders watch their lock (`Client::watch`, the
//! front ends' `Redlock::watch`), a fault removes a lock's key behind its
//! holder's back on one master (an operator's `DEL`, an overwrite with
//! another value, a `FLUSHALL`), and two checkers hold the watch to its
//! documentation, from the masters' true state, never from the library:
//!
//! - No false loss: a watch reports its lock lost only if, at some moment
//!   between its start and the report, fewer than a quorum of the
//!   masters' addresses had held the lock's token at every moment since
//!   the start (a master that is down holds nothing; one that comes back
//!   from a snapshot that holds the token again does not count: a watch
//!   that saw the key gone there does not take it back, and the restart
//!   guard quarantines such a master's grants).
//! - Progress: once such a fault leaves fewer than a quorum holding the
//!   token, and every address without it lost it to such a fault while
//!   watched or never held it while watched (so the watch's reads know
//!   of each; a key gone at its TTL is told only when something touches
//!   it), the watch reports the loss within three one-way trips (the
//!   push, the read and its reply), plus the time its client was paused
//!   on the way. Excused: a watch whose holder began its release or let
//!   the lock go before that bound; a connection of its client cut or
//!   its master paused, crashed or cut off, a socket not opened, a
//!   latency spike on its client's paths, from before the fault (within
//!   a reconnect's bound, a partition's twice its length for the
//!   retransmissions) to the bound (the link is then unknown until a
//!   read after its reconnect); worlds whose clients speak RESP2 (no
//!   push) or name a server twice (the twin is refused, and its key is
//!   never read).
//!
//! The faults and the watches are drawn from a generator of their own,
//! so that a world where nobody watches is the world it was before them.

use super::history::secs;
use super::rng::Rng;
use super::{Ev, World};

/// Mixes the seed into the watches' own generator.
const WATCHES: u64 = 0x3A7C_4E55_3A7C_4E55;

/// One watch of one key of a held lock.
pub(crate) struct Watch {
    client: usize,
    /// The lock, as the history numbers them.
    lock: u64,
    resource: usize,
    token: [u8; 20],
    /// The client's id of the watch.
    id: u64,
    from: u64,
    /// When fewer than a quorum first held the token.
    dipped: Option<u64>,
    /// Per address: whether it held the token at some moment since the
    /// start.
    ever_held: Vec<bool>,
    /// Per address: whether it held the token at every moment since the
    /// start.
    kept: Vec<bool>,
    /// Per address: whether a removal fault took the token from it.
    removed: Vec<bool>,
    /// When its release began, or it was let go.
    released: Option<u64>,
    /// Stopped: its lock is gone.
    closed: bool,
    reported: Option<u64>,
    /// The removal fault that left fewer than a quorum, and the latest
    /// the watch may report it.
    due: Option<(u64, u64)>,
}

/// The watches, the removal faults' generator, and what may excuse a
/// late report.
pub(crate) struct Watching {
    rng: Rng,
    /// The share of locks won that are watched (none in half of the
    /// worlds).
    pub(crate) share: f64,
    /// The mean gap between removal faults.
    gap: u64,
    watches: Vec<Watch>,
    /// The cuts of connections: whose (any client's if `None`), from, to.
    cuts: Vec<(Option<usize>, u64, u64)>,
    /// The reports checked, the losses that had to be reported.
    pub(crate) checked: (u64, u64),
}

impl Watching {
    pub(crate) fn new(seed: u64, params: &super::params::Params) -> Watching {
        let mut rng = Rng::new(seed ^ WATCHES);
        let share = if rng.chance(0.5) {
            0.0
        } else {
            0.3 + 0.7 * rng.unit()
        };
        Watching {
            rng,
            share,
            // Within a lock's life, mostly.
            gap: params.longest().as_nanos() as u64 / 2 + 1,
            watches: Vec::new(),
            cuts: Vec::new(),
            checked: (0, 0),
        }
    }

    /// The time to the next removal fault.
    pub(crate) fn next_gap(&mut self) -> u64 {
        self.rng.exp(self.gap) + 1
    }

    /// Whether any watch is still followed.
    pub(crate) fn any_open(&self) -> bool {
        self.watches.iter().any(|w| !w.closed)
    }

    /// A disturbance that may cut connections: a watch's report may be
    /// late across it.
    pub(crate) fn cut(&mut self, what: &str, client: Option<usize>, from: u64, to: u64) {
        let cuts = [
            "a master's pause",
            "a master's crash",
            "a reset",
            "a master cut off",
            "a client cut off",
            "no socket",
        ];
        if self.share > 0.0 && cuts.contains(&what) {
            // What a partition held gets through at the next
            // retransmission once it heals, which backs off to about
            // the partition's length again.
            let to = match what {
                "a master cut off" | "a client cut off" => to + (to - from),
                _ => to,
            };
            self.cuts.push((client, from, to));
        }
    }
}

impl World {
    /// The first removal fault, in a world where locks are watched.
    pub(crate) fn start_watching(&mut self) {
        if self.watching.share > 0.0 {
            let at = self.watching.next_gap();
            self.at(at, Ev::Remove);
        }
    }

    /// The holder of the lock just won, `held` of task `k` of client `c`,
    /// watches it, as the seed decides.
    pub(super) fn maybe_watch(
        &mut self,
        c: usize,
        lock: u64,
        res: &[usize],
        held: &mut crate::client::Held,
    ) {
        let share = self.watching.share;
        if share == 0.0 || !self.watching.rng.chance(share) {
            return;
        }
        let now = self.local(c);
        self.clients[c].client.watch(held, now);
        let ids: Vec<u64> = held.watch_ids().collect();
        self.note(|| format!("client {c}: watches lock {lock} ({ids:?})"));
        let n = self.params.masters;
        for (&id, &resource) in ids.iter().zip(res) {
            let mut watch = Watch {
                client: c,
                lock,
                resource,
                token: *held.token(),
                id,
                from: self.t,
                dipped: None,
                ever_held: vec![false; n],
                kept: vec![true; n],
                removed: vec![false; n],
                released: None,
                closed: false,
                reported: None,
                due: None,
            };
            self.sample(&mut watch);
            self.watching.watches.push(watch);
        }
    }

    /// Per address: whether it holds `token` in `resource`'s key now.
    fn holders(&self, resource: usize, token: &[u8]) -> Vec<bool> {
        let key = &self.params.resources[resource];
        (0..self.params.masters)
            .map(|i| {
                let master = &self.masters[self.params.proc_of[i]];
                let now_us = master.clock.now_us(self.t);
                !master.down && master.model.get(0, key, now_us) == Some(token)
            })
            .collect()
    }

    fn quorum(&self) -> usize {
        self.params.masters / 2 + 1
    }

    /// What the masters hold of `watch`'s token now.
    fn sample(&self, watch: &mut Watch) {
        let held = self.holders(watch.resource, &watch.token);
        for ((ever, kept), now) in watch.ever_held.iter_mut().zip(&mut watch.kept).zip(&held) {
            *ever |= now;
            *kept &= now;
        }
        if watch.kept.iter().filter(|&&k| k).count() < self.quorum() {
            watch.dipped.get_or_insert(self.t);
        }
    }

    /// What the masters hold of every watch's token now: called before
    /// and after every event, since the masters' keys change only at an
    /// event or at their expiry.
    pub(crate) fn sample_watches(&mut self) {
        let mut watches = std::mem::take(&mut self.watching.watches);
        for watch in watches
            .iter_mut()
            .filter(|w| !w.closed && w.dipped.is_none())
        {
            self.sample(watch);
        }
        self.watching.watches = watches;
    }

    /// After an event of client `c`: the watches it found lost, and those
    /// whose lock is gone or being released.
    pub(crate) fn follow_watches(&mut self, c: usize) {
        while let Some(id) = self.clients[c].client.take_lost() {
            let t = self.t;
            let found = self
                .watching
                .watches
                .iter_mut()
                .find(|w| w.client == c && w.id == id);
            if let Some(watch) = found {
                watch.reported.get_or_insert(t);
                let lock = watch.lock;
                self.note(|| format!("client {c}: watch {id} finds lock {lock} lost"));
            }
        }
        for w in 0..self.watching.watches.len() {
            let watch = &self.watching.watches[w];
            if watch.client != c || watch.closed {
                continue;
            }
            let id = watch.id;
            let held = self.clients[c].tasks.iter().find_map(|task| {
                task.held()
                    .filter(|(held, _)| held.watch_ids().any(|i| i == id))
                    .map(|(_, releasing)| releasing)
            });
            let t = self.t;
            let watch = &mut self.watching.watches[w];
            match held {
                Some(false) => {}
                Some(true) => {
                    watch.released.get_or_insert(t);
                }
                None => {
                    watch.released.get_or_insert(t);
                    watch.closed = true;
                    self.clients[c].client.unwatch_id(id);
                }
            }
        }
    }

    /// The removal fault: a watched lock's key is removed on one master
    /// that holds it (an operator's `DEL`, an overwrite, a `FLUSHALL`).
    pub(crate) fn remove_fault(&mut self) {
        let open: Vec<usize> = (0..self.watching.watches.len())
            .filter(|&w| {
                let watch = &self.watching.watches[w];
                !watch.closed && watch.released.is_none()
            })
            .collect();
        if open.is_empty() {
            return;
        }
        let w = open[self.watching.rng.index(open.len())];
        let (resource, token) = {
            let watch = &self.watching.watches[w];
            (watch.resource, watch.token)
        };
        let holding: Vec<usize> = (self.holders(resource, &token).iter())
            .enumerate()
            .filter_map(|(i, &h)| h.then_some(i))
            .collect();
        if holding.is_empty() {
            return;
        }
        let i = holding[self.watching.rng.index(holding.len())];
        let m = self.params.proc_of[i];
        let key = self.params.resources[resource].clone();
        let before: Vec<Vec<bool>> = (self.watching.watches.iter())
            .map(|w| self.holders(w.resource, &w.token))
            .collect();
        let kind = self.watching.rng.below(10);
        let ttl = (self.params.longest().as_millis() as u64).to_string();
        let words: Vec<&[u8]> = match kind {
            0..5 => vec![b"DEL", &key],
            5..8 => vec![b"SET", &key, b"an operator's", b"PX", ttl.as_bytes()],
            _ => vec![b"FLUSHALL"],
        };
        if !self.command(m, &words) {
            return;
        }
        self.note(|| {
            let words: Vec<String> = words.iter().map(|w| super::show(w)).collect();
            format!("master {m}: an operator's {words:?} behind a holder's back")
        });
        // A grant lost, outside what the lock assumes; the key's waiters
        // are told nothing until its holder's next release or its TTL.
        self.history.losses[m].push(self.t);
        let wiped = kind >= 8;
        if wiped {
            self.history.wipes[m].push(self.t);
        }
        let resource = (!wiped).then_some(resource);
        let to = self.t + self.params.longest().as_nanos() as u64 + self.params.reconnect_bound();
        self.disturb((None, resource, true), to, "a lock's key removed");
        self.oblige(&before);
    }

    /// After a removal fault: each watch it left with fewer than a quorum
    /// holding its token, every address without it known to its reads,
    /// is due to report the loss.
    fn oblige(&mut self, before: &[Vec<bool>]) {
        let twice = self.params.masters != self.params.procs;
        let resp3 = self.params.client_settings.wake;
        let bound = 3 * self.params.one_way();
        let quorum = self.quorum();
        for (w, before) in before.iter().enumerate() {
            let watch = &self.watching.watches[w];
            if watch.closed {
                continue;
            }
            let now = self.holders(watch.resource, &watch.token);
            let watch = &mut self.watching.watches[w];
            for (i, (was, is)) in before.iter().zip(&now).enumerate() {
                if *was && !is {
                    watch.removed[i] = true;
                }
            }
            let known = (0..now.len()).all(|i| now[i] || watch.removed[i] || !watch.ever_held[i]);
            let fewer = now.iter().filter(|&&h| h).count() < quorum;
            if fewer
                && known
                && !twice
                && resp3
                && watch.released.is_none()
                && watch.reported.is_none()
                && watch.due.is_none()
            {
                watch.due = Some((self.t, self.t + bound));
                let (lock, until) = (watch.lock, self.t + bound);
                self.note(|| {
                    format!(
                        "lock {lock}: its watch must report it by {:.6}",
                        secs(until)
                    )
                });
            }
        }
    }

    /// The checkers (see the module docs).
    pub(crate) fn watch_checks(&mut self) -> Vec<String> {
        let mut found = Vec::new();
        for watch in &self.watching.watches {
            let (c, lock) = (watch.client, watch.lock);
            if let Some(reported) = watch.reported {
                self.watching.checked.0 += 1;
                if watch.dipped.is_none_or(|dipped| dipped > reported) {
                    found.push(format!(
                        "client {c}: the watch of lock {lock} reported it lost at {:.6}, but a quorum of masters held its token from the watch's start at {:.6} on",
                        secs(reported),
                        secs(watch.from)
                    ));
                }
            }
            let Some((fault, bound)) = watch.due else {
                continue;
            };
            // The bound, and the client's pauses on the way on top.
            let mut deadline = bound;
            loop {
                let later = bound + self.clients[c].paused_within(fault, deadline);
                if later == deadline {
                    break;
                }
                deadline = later;
            }
            if watch.released.is_some_and(|r| r <= deadline) {
                continue;
            }
            // A disturbance's end counts a reconnect's bound already.
            let overlaps = |from: u64, to: u64| from <= deadline && fault <= to;
            let cut = self
                .watching
                .cuts
                .iter()
                .any(|&(whose, from, to)| whose.is_none_or(|w| w == c) && overlaps(from, to));
            let spike =
                (self.net.spikes.iter()).any(|&(whose, from, to)| whose == c && overlaps(from, to));
            if cut || spike {
                continue;
            }
            self.watching.checked.1 += 1;
            if watch.reported.is_none_or(|r| r > deadline) {
                found.push(format!(
                    "client {c}: lock {lock} lost to a fault at {:.6} (fewer than a quorum of masters hold its token), its watch reported it {} (due by {:.6})",
                    secs(fault),
                    watch
                        .reported
                        .map_or("never".to_owned(), |r| format!("at {:.6}", secs(r))),
                    secs(deadline)
                ));
            }
        }
        found
    }
}
