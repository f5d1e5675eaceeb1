//! The table of watches: for each held key a caller asked to watch (the
//! loss watch, [`crate::Redlock::watch`]), what each master was last seen
//! to hold, and the verdict that the lock is lost once too few masters can
//! still hold its token for a quorum. Free of I/O and of the clock: the
//! core hands it what the masters said, and takes from it the reads to
//! send and the watches found lost.
//!
//! Each master's connection asks the server to track the keys it reads
//! after `CLIENT CACHING YES` (`CLIENT TRACKING ON OPTIN NOLOOP`, see
//! [`crate::link`]); the server then says when such a key changes in any
//! way: deleted, overwritten, expired, evicted, flushed. Such a word is
//! not a verdict: it makes the watch read the key again on that master,
//! and only what the read finds counts. A read also tracks the key again
//! (the server forgets a tracked key once it has told of it, and also when
//! this connection changes it itself, as an extension does: see
//! [`Watches::rearm`]). A connection that drops leaves its master unknown
//! until a read after the reconnect: a network blip is not a loss.
//!
//! The lock is lost once more masters are seen without its token than a
//! quorum can spare: the masters that may still hold it are fewer than a
//! quorum, and no extension can win it back.

use crate::commands::TOKEN_LEN;
use crate::ids::WatchId;
use crate::link::{Invalidated, KeyRead};

/// What a master was last seen to hold of a watched key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// The token, as the last read found; the server says when that
    /// changes (if it tracks keys for this client).
    Holds,
    /// A read is out, or due to be sent.
    Reading,
    /// Nothing is known: the connection is down, or the read could not be
    /// sent or failed. Read again once the connection is ready.
    Unknown,
    /// No token: the key is missing or holds another value. Final.
    Gone,
}

/// One watched key.
#[derive(Debug)]
struct Watch {
    id: WatchId,
    key: Vec<u8>,
    token: [u8; TOKEN_LEN],
    /// Per master.
    seen: Vec<Seen>,
    /// Per master: reads sent and not yet answered. Only the last one's
    /// finding stands for holding (and it alone tracks the key again after
    /// an extension sent since an earlier one); any that finds the key
    /// gone stands.
    out: Vec<u16>,
    lost: bool,
}

/// The table of watches (see the module docs).
#[derive(Debug)]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub struct Watches {
    watches: Vec<Watch>,
    masters: usize,
    quorum: usize,
    next: u64,
    /// Reads due to be sent: which watch, which master.
    reads: Vec<(WatchId, usize)>,
    /// Watches found lost and not yet taken.
    lost: Vec<WatchId>,
    /// Masters seen `Unknown` across the table: none is the common case,
    /// and then a connection that comes back costs no scan.
    unknown: usize,
}

#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
impl Watches {
    /// An empty table for `masters` masters, a lock needing `quorum` of
    /// them.
    pub(crate) fn new(masters: usize, quorum: usize) -> Watches {
        Watches {
            watches: Vec::new(),
            masters,
            quorum,
            next: 1,
            reads: Vec::new(),
            lost: Vec::new(),
            unknown: 0,
        }
    }

    /// Whether nothing is watched.
    pub(crate) fn is_empty(&self) -> bool {
        self.watches.is_empty()
    }

    /// How many keys are watched.
    pub(crate) fn len(&self) -> usize {
        self.watches.len()
    }

    /// Watches `key`, held with `token`: every master is read (a master
    /// whose grant was not counted may hold the token all the same).
    pub(crate) fn watch(&mut self, key: &[u8], token: [u8; TOKEN_LEN]) -> WatchId {
        let id = WatchId(self.next);
        self.next += 1;
        self.watches.push(Watch {
            id,
            key: key.to_vec(),
            token,
            seen: vec![Seen::Reading; self.masters],
            out: vec![0; self.masters],
            lost: false,
        });
        self.reads.extend((0..self.masters).map(|i| (id, i)));
        id
    }

    /// Stops watching `id` (its lock was released, or its holder is
    /// gone). Its reads still out find no watch.
    pub fn unwatch(&mut self, id: WatchId) {
        if let Some(at) = self.position(id) {
            let watch = self.watches.swap_remove(at);
            self.unknown -= watch.seen.iter().filter(|&&s| s == Seen::Unknown).count();
        }
        self.reads.retain(|&(read, _)| read != id);
    }

    /// Whether `id` was found lost.
    #[cfg(test)]
    pub(crate) fn is_lost(&self, id: WatchId) -> bool {
        self.position(id).is_some_and(|at| self.watches[at].lost)
    }

    /// This client changed watch `id`'s key itself on the masters in
    /// `masters` (an extension): the servers no longer track it for this
    /// connection and say nothing of its own change (`NOLOOP`), so each
    /// of those masters that may hold it is read again, also one with a
    /// read out (sent before the extension, it tracked the key only until
    /// the extension).
    pub(crate) fn rearm(&mut self, id: WatchId, masters: impl Fn(usize) -> bool) {
        let Some(at) = self.position(id) else {
            return;
        };
        let watch = &mut self.watches[at];
        for (i, seen) in watch.seen.iter_mut().enumerate() {
            if masters(i) && *seen != Seen::Gone {
                self.unknown -= usize::from(*seen == Seen::Unknown);
                *seen = Seen::Reading;
                self.reads.push((id, i));
            }
        }
    }

    /// Master `master` said that `what` changed: each watch of such a key
    /// that master held is read there again. (One with a read out needs
    /// none: that read reaches the server after the change, and finds
    /// what it left.)
    pub(crate) fn handle_invalidate(&mut self, master: usize, what: Invalidated<'_>) {
        for watch in &mut self.watches {
            let hit = match what {
                Invalidated::Key(key) => watch.key == key,
                Invalidated::All => true,
            };
            if hit && !watch.lost && watch.seen[master] == Seen::Holds {
                watch.seen[master] = Seen::Reading;
                self.reads.push((watch.id, master));
            }
        }
    }

    /// The read of watch `id`'s key on master `master` found `read`.
    pub(crate) fn handle_read(&mut self, id: WatchId, master: usize, read: KeyRead<'_>) {
        let Some(at) = self.position(id) else {
            return;
        };
        let watch = &mut self.watches[at];
        let out = &mut watch.out[master];
        *out = out.saturating_sub(1);
        if watch.seen[master] != Seen::Reading {
            return;
        }
        let last = *out == 0;
        watch.seen[master] = match read {
            KeyRead::Value(value) if value == watch.token && last => Seen::Holds,
            KeyRead::Value(value) if value == watch.token => Seen::Reading,
            KeyRead::Value(_) | KeyRead::Missing => Seen::Gone,
            KeyRead::Failed if last => Seen::Unknown,
            KeyRead::Failed => Seen::Reading,
        };
        self.unknown += usize::from(watch.seen[master] == Seen::Unknown);
        self.judge(at);
    }

    /// The read of watch `id` on master `master` could not be sent.
    pub(crate) fn handle_unsent(&mut self, id: WatchId, master: usize) {
        if let Some(at) = self.position(id) {
            let watch = &mut self.watches[at];
            watch.out[master] = watch.out[master].saturating_sub(1);
            let seen = &mut watch.seen[master];
            if *seen == Seen::Reading && watch.out[master] == 0 {
                *seen = Seen::Unknown;
                self.unknown += 1;
            }
        }
    }

    /// Master `master`'s connection dropped: what it holds is unknown
    /// until a read after the reconnect (its reads out are lost).
    pub(crate) fn handle_down(&mut self, master: usize) {
        for watch in &mut self.watches {
            watch.out[master] = 0;
            let seen = &mut watch.seen[master];
            if matches!(seen, Seen::Holds | Seen::Reading) {
                *seen = Seen::Unknown;
                self.unknown += 1;
            }
        }
        self.reads.retain(|&(_, i)| i != master);
    }

    /// Master `master`'s connection is ready: each watch unknown there is
    /// read again.
    pub(crate) fn handle_ready(&mut self, master: usize) {
        if self.unknown == 0 {
            return;
        }
        for watch in &mut self.watches {
            let seen = &mut watch.seen[master];
            if *seen == Seen::Unknown && !watch.lost {
                *seen = Seen::Reading;
                self.unknown -= 1;
                self.reads.push((watch.id, master));
            }
        }
    }

    /// Whether reads are due ([`next_read`](Self::next_read)).
    pub fn has_reads(&self) -> bool {
        !self.reads.is_empty()
    }

    /// The next read due: the watch, its key, the master. Taken, it is
    /// out until answered ([`handle_read`](Self::handle_read)) or found
    /// unsent ([`handle_unsent`](Self::handle_unsent)).
    pub(crate) fn next_read(&mut self) -> Option<(WatchId, &[u8], usize)> {
        loop {
            let (id, master) = self.reads.pop()?;
            if let Some(at) = self.position(id) {
                let watch = &mut self.watches[at];
                watch.out[master] += 1;
                return Some((id, &watch.key, master));
            }
        }
    }

    /// The next watch found lost since the last call.
    pub fn take_lost(&mut self) -> Option<WatchId> {
        self.lost.pop()
    }

    /// Finds watch `at` lost once the masters that may still hold its
    /// token are fewer than a quorum.
    fn judge(&mut self, at: usize) {
        let watch = &mut self.watches[at];
        let gone = watch.seen.iter().filter(|&&s| s == Seen::Gone).count();
        if !watch.lost && self.masters - gone < self.quorum {
            watch.lost = true;
            self.lost.push(watch.id);
        }
    }

    fn position(&self, id: WatchId) -> Option<usize> {
        self.watches.iter().position(|w| w.id == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: [u8; TOKEN_LEN] = [7; TOKEN_LEN];

    /// A table of five masters with one watch whose first reads all found
    /// the token.
    fn held() -> (Watches, WatchId) {
        let mut table = Watches::new(5, 3);
        let id = table.watch(b"orders:42", TOKEN);
        let mut reads = Vec::new();
        while let Some((read, key, master)) = table.next_read() {
            assert_eq!((read, key), (id, &b"orders:42"[..]));
            reads.push(master);
        }
        reads.sort_unstable();
        assert_eq!(reads, [0, 1, 2, 3, 4], "every master is read");
        for i in 0..5 {
            table.handle_read(id, i, KeyRead::Value(&TOKEN));
        }
        (table, id)
    }

    /// Invalidates the key on `master` and answers the read it causes
    /// with `read`.
    fn invalidate(table: &mut Watches, id: WatchId, master: usize, read: KeyRead<'_>) {
        table.handle_invalidate(master, Invalidated::Key(b"orders:42"));
        assert_eq!(
            table.next_read().map(|(w, _, m)| (w, m)),
            Some((id, master))
        );
        table.handle_read(id, master, read);
    }

    #[test]
    fn a_lock_is_lost_once_fewer_masters_than_a_quorum_may_hold_it() {
        let (mut table, id) = held();
        invalidate(&mut table, id, 0, KeyRead::Missing);
        invalidate(&mut table, id, 1, KeyRead::Value(b"another"));
        assert_eq!(table.take_lost(), None, "three masters still hold it");
        assert!(!table.is_lost(id));
        invalidate(&mut table, id, 2, KeyRead::Missing);
        assert_eq!(table.take_lost(), Some(id));
        assert!(table.is_lost(id));
        assert_eq!(table.take_lost(), None, "told once");
    }

    #[test]
    fn a_word_of_change_is_no_verdict_until_a_read_finds_the_key_gone() {
        let (mut table, id) = held();
        for master in 0..3 {
            // The key changed but still holds the token (say, another
            // client's command that failed to change it).
            invalidate(&mut table, id, master, KeyRead::Value(&TOKEN));
        }
        assert_eq!(table.take_lost(), None);
        for master in 0..3 {
            table.handle_invalidate(master, Invalidated::Key(b"orders:42"));
        }
        assert_eq!(table.take_lost(), None, "words alone are no verdict");
        // A failed read says nothing either.
        while let Some((w, _, m)) = table.next_read() {
            table.handle_read(w, m, KeyRead::Failed);
        }
        assert_eq!(table.take_lost(), None);
    }

    #[test]
    fn another_key_changing_reads_nothing_and_a_flush_reads_everything() {
        let (mut table, id) = held();
        table.handle_invalidate(0, Invalidated::Key(b"orders:4"));
        assert_eq!(table.next_read().map(|(w, _, m)| (w, m)), None);
        table.handle_invalidate(1, Invalidated::All);
        assert_eq!(table.next_read().map(|(w, _, m)| (w, m)), Some((id, 1)));
    }

    #[test]
    fn a_dropped_connection_is_unknown_until_read_after_the_reconnect() {
        let (mut table, id) = held();
        for master in 0..3 {
            table.handle_down(master);
        }
        assert_eq!(table.take_lost(), None, "a blip is no loss");
        assert_eq!(table.next_read().map(|(w, _, m)| (w, m)), None);
        for master in 0..3 {
            table.handle_ready(master);
            assert_eq!(
                table.next_read().map(|(w, _, m)| (w, m)),
                Some((id, master))
            );
            // Restarted empty.
            table.handle_read(id, master, KeyRead::Missing);
        }
        assert_eq!(table.take_lost(), Some(id));
    }

    #[test]
    fn only_the_last_read_out_stands_for_holding_and_any_read_for_gone() {
        let (mut table, id) = held();
        // A read out (the key changed), then an extension: the read sent
        // before it tracked the key only until the extension.
        table.handle_invalidate(0, Invalidated::Key(b"orders:42"));
        assert_eq!(table.next_read().map(|(w, _, m)| (w, m)), Some((id, 0)));
        table.rearm(id, |i| i == 0);
        assert_eq!(
            table.next_read().map(|(w, _, m)| (w, m)),
            Some((id, 0)),
            "read again"
        );
        table.handle_read(id, 0, KeyRead::Value(&TOKEN));
        // The second read finds the key gone: deleted after the extension,
        // which the server no longer told this client of.
        table.handle_read(id, 0, KeyRead::Missing);
        table.handle_invalidate(1, Invalidated::Key(b"orders:42"));
        table.handle_invalidate(2, Invalidated::Key(b"orders:42"));
        while let Some((w, _, m)) = table.next_read() {
            table.handle_read(w, m, KeyRead::Missing);
        }
        assert_eq!(table.take_lost(), Some(id), "masters 0, 1 and 2 are gone");
    }

    #[test]
    fn an_extension_reads_again_where_it_went_and_a_stopped_watch_reads_nothing() {
        let (mut table, id) = held();
        table.rearm(id, |i| i < 3);
        let mut reads: Vec<usize> =
            std::iter::from_fn(|| table.next_read().map(|(_, _, m)| m)).collect();
        reads.sort_unstable();
        assert_eq!(reads, [0, 1, 2]);
        table.rearm(id, |_| true);
        table.unwatch(id);
        assert_eq!(table.next_read().map(|(w, _, m)| (w, m)), None);
        assert!(table.is_empty());
        // A late read finds no watch.
        table.handle_read(id, 3, KeyRead::Missing);
        assert_eq!(table.take_lost(), None);
    }
}
