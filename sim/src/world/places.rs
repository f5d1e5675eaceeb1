//! The bound on a client's clock error in the wait queues. A waiter
//! claims a place, its client's wall clock in µs when its wait began, and
//! each master takes it within a second of its own clock (`place()` in
//! `src/scripts/waiting.lua`), so that a waiter whose client's clock is
//! wrong goes ahead of the others, or behind them, by a second at most
//! (`Script::WaitAcquire`). As a promise on each entry a master puts in a
//! queue: with `c` the place claimed and `M` the master's clock as it
//! queues the waiter, the entry's place is `c` when `c` is within a second
//! of `M` (clients whose clocks are right keep the order of their wall
//! clocks), and between `M - 1 s` and `M + 1 s` otherwise.
//!
//! The check, on each master and for each key: when an acquire that waits
//! (plain or fenced) takes the key, no waiter of another client that was
//! queued there before the taker first was, and is still queued after,
//! stands ahead of the taker by that promise: the highest place the
//! promise allows its entry is not below the lowest it allows any entry
//! of the taker there (and the taker's place now, had it been queued).
//! Two waiters whose clocks are both wrong are ordered so once one was
//! queued more than two seconds of the master's clock before the other,
//! sooner where a clock is right; a waiter the promise does not put ahead
//! may be overtaken, and each one that is, still queued once another
//! client's later waiter took the key, is counted as an overtake checked.
//! The places are whole microseconds, which a score (a double) holds
//! exactly, and the clock read here is the one the script reads (`TIME`,
//! the master's clock as the script starts): the comparison needs no
//! slack.
//!
//! Why a violation is one. The masters' queues are watched just before
//! and just after every script that touches them (the acquires that
//! wait, the releases, the leave): an entry is known, with the clock and
//! the claim it was put in with, only if its own waiter's attempt put it
//! in and it has been seen at every such script since, with its score
//! unchanged. Whatever else changes a queue (an expiry, a restart, a
//! restore from a snapshot, a `FLUSHALL`, an eviction, another client's
//! writes) shows at the next script that touches it: an entry gone is
//! forgotten, an entry that appears or changes has no known place and is
//! held to nothing (nor is a taker that ever had such an entry). Under
//! the promise, a waiter `A` so held ahead of the taker `B` has a lower
//! place than every entry `B` ever had there. `B` took the key as first
//! in line (`A` was ahead of it), or under a reservation that a hand-off
//! made when it took `B`'s entry off the queue as first in line (`A` was
//! queued then, since before `B` first was, and ahead of it), or because
//! its turn came (which drops the entries before it, `A`'s among them, in
//! that very run): none leaves `A` queued. So nothing needs an excuse:
//! a paused or unheard waiter leaves the queue when the key is handed to
//! it, reserved or dropped, or when a turn passes it; a waiter of several
//! resources leaves the queues of the keys free for it by its own
//! attempt; each master orders its own queue, so quorums do not enter;
//! and each master places by its own clock, read here as it queued each
//! waiter (steps back included), so the masters' clock offsets do not
//! enter either.
//!
//! Left out: waiters of one client (their places come from one clock),
//! and keys taken by acquires that do not wait, which never look at the
//! queues.

use std::collections::BTreeMap;

use redlock_mio::scripts::Script;

use crate::{Master, Moment};

/// A second, in µs.
const SECOND_US: u64 = 1_000_000;

/// The scripts that touch the wait queues.
const QUEUED: [Script; 5] = [
    Script::WaitAcquire,
    Script::FencedWaitAcquire,
    Script::Release,
    Script::ReleaseMany,
    Script::Leave,
];

/// Where an entry was put in by its waiter's own attempt.
#[derive(Debug, Clone, Copy)]
struct Known {
    /// Global time.
    at: u64,
    /// The place claimed, and the master's clock then, in µs.
    claim: u64,
    clock: u64,
}

impl Known {
    /// The lowest and highest places the promise allows the entry.
    fn bounds(&self) -> (u64, u64) {
        if self.claim.abs_diff(self.clock) <= SECOND_US {
            (self.claim, self.claim)
        } else {
            (self.clock.saturating_sub(SECOND_US), self.clock + SECOND_US)
        }
    }
}

/// An entry of a queue, as last seen.
#[derive(Debug, Clone)]
struct Entry {
    member: Vec<u8>,
    score: f64,
    known: Option<Known>,
}

/// Every entry a waiter had in one queue.
#[derive(Debug, Clone, Copy)]
struct Had {
    /// When the first was put in.
    first: u64,
    /// The lowest place the promise allows any of them; none if one had
    /// no known place.
    lowest: Option<u64>,
}

/// One key's queue on one master.
#[derive(Debug)]
struct Queue {
    /// The queue's key.
    name: Vec<u8>,
    entries: Vec<Entry>,
    had: BTreeMap<Vec<u8>, Had>,
}

impl Queue {
    fn new(key: &[u8]) -> Queue {
        Queue {
            name: super::queue_key(key),
            entries: Vec::new(),
            had: BTreeMap::new(),
        }
    }

    /// `member` had an entry, put in as `known` says (if known).
    fn had(&mut self, member: &[u8], at: u64, known: Option<Known>) {
        let lowest = known.map(|k| k.bounds().0);
        let had = self
            .had
            .entry(member.to_vec())
            .or_insert(Had { first: at, lowest });
        had.first = had.first.min(at);
        had.lowest = match (had.lowest, lowest) {
            (Some(a), Some(b)) => Some(a.min(b)),
            _ => None,
        };
    }

    /// The queue is now `members`: an entry seen before with the same
    /// score stays what it was; one put in by `put` (the waiter whose
    /// attempt runs, as it puts it in) is known; any other is not.
    fn see(&mut self, members: &[(&[u8], f64)], at: u64, put: Option<(&[u8], Known)>) {
        let same = |(e, &(member, score)): (&Entry, &(&[u8], f64))| {
            e.member == member && e.score.to_bits() == score.to_bits()
        };
        if members.len() == self.entries.len() && self.entries.iter().zip(members).all(same) {
            // Most often nothing changed: nothing to make.
            return;
        }
        let mut entries = Vec::with_capacity(members.len());
        for &(member, score) in members {
            let before = self
                .entries
                .iter()
                .find(|e| e.member == member && e.score.to_bits() == score.to_bits());
            let known = match (before, put) {
                (Some(e), _) => e.known,
                (None, Some((m, known))) if m == member => {
                    self.had(member, at, Some(known));
                    Some(known)
                }
                (None, _) => {
                    self.had(member, at, None);
                    None
                }
            };
            entries.push(Entry {
                member: member.to_vec(),
                score,
                known,
            });
        }
        self.entries = entries;
    }
}

/// The queues as watched, and what the check found.
#[derive(Debug, Default)]
pub(crate) struct Places {
    /// Per master process, per key.
    queues: Vec<BTreeMap<Vec<u8>, Queue>>,
    /// The clients' wake channels, by client.
    channels: Vec<Vec<u8>>,
    /// Whether each key of the running acquire that waits held its token
    /// before it ran.
    held: Vec<bool>,
    /// Waiters still queued after another client's later waiter took the
    /// key: each held to the bound.
    pub(crate) overtakes: u64,
    pub(crate) errors: Vec<String>,
}

/// A script that touches the queues, as run: which, its resources' keys,
/// its arguments.
struct Run<'w> {
    script: Script,
    keys: &'w [Vec<u8>],
    args: &'w [Vec<u8>],
}

impl Places {
    pub(crate) fn new(procs: usize, channels: Vec<Vec<u8>>) -> Places {
        Places {
            queues: (0..procs).map(|_| BTreeMap::new()).collect(),
            channels,
            ..Places::default()
        }
    }

    /// Master process `m` is about to run `words` (`Moment::Before`) or
    /// has run them, at global time `at`, its clock reading `now_us`.
    pub(crate) fn ran(
        &mut self,
        m: usize,
        at: u64,
        master: &Master,
        now_us: u64,
        words: &[Vec<u8>],
        moment: Moment,
    ) {
        let Some(run) = parse(words) else {
            return;
        };
        let waits = matches!(run.script, Script::WaitAcquire | Script::FencedWaitAcquire);
        // The waiter's member, its claim and token, for an acquire that
        // waits: `ARGV` is the token, the TTL, the member, the place.
        let waiter = match run.args {
            [token, _, member, claim, ..] if waits => std::str::from_utf8(claim)
                .ok()
                .and_then(|c| c.parse::<u64>().ok())
                .map(|claim| (token, member, claim)),
            _ => None,
        };
        if moment == Moment::Before {
            self.held.clear();
        }
        for (i, key) in run.keys.iter().enumerate() {
            if !self.queues[m].contains_key(key) {
                self.queues[m].insert(key.clone(), Queue::new(key));
            }
            let Some(queue) = self.queues[m].get_mut(key) else {
                continue;
            };
            let members = master.members(0, &queue.name, now_us);
            let Some((token, member, claim)) = waiter else {
                queue.see(&members, at, None);
                continue;
            };
            let holds = master.get(0, key, now_us) == Some(token.as_slice());
            if moment == Moment::Before {
                queue.see(&members, at, None);
                self.held.push(holds);
                continue;
            }
            let known = Known {
                at,
                claim,
                clock: now_us,
            };
            queue.see(&members, at, Some((member, known)));
            if holds && !self.held.get(i).copied().unwrap_or(true) {
                self.took(m, key, member, known);
            }
        }
    }

    /// The waiter `member` took `key` on master `m` at `known.at` (its
    /// place as it would be put in now: `known`): the waiters of other
    /// clients still queued there that were before it are held to the
    /// bound.
    fn took(&mut self, m: usize, key: &[u8], member: &[u8], now: Known) {
        let Some(queue) = self.queues[m].get(key) else {
            return;
        };
        let (mut first, mut lowest) = (now.at, now.bounds().0);
        if let Some(had) = queue.had.get(member) {
            let Some(had_lowest) = had.lowest else {
                return;
            };
            first = first.min(had.first);
            lowest = lowest.min(had_lowest);
        }
        let taker = channel(member);
        for entry in &queue.entries {
            let Some(known) = entry.known else {
                continue;
            };
            if channel(&entry.member) == taker || known.at >= first {
                continue;
            }
            self.overtakes += 1;
            let highest = known.bounds().1;
            if highest >= lowest || self.errors.len() >= 5 {
                continue;
            }
            let who = |member: &[u8]| {
                self.channels
                    .iter()
                    .position(|c| c.as_slice() == channel(member))
                    .map_or("?".to_owned(), |c| c.to_string())
            };
            self.errors.push(format!(
                "master {m}: client {}'s waiter (first queued for {} at {:.6}s) took it at {:.6}s while client {}'s waiter, queued there at {:.6}s, was still queued, {:.3} s ahead of it by the bound on a client's clock error (claimed {} µs at the master's {} µs: placed at {highest} µs at most, the taker at {lowest} µs at least)",
                who(member),
                super::show(key),
                super::history::secs(first),
                super::history::secs(now.at),
                who(&entry.member),
                super::history::secs(known.at),
                (lowest - highest) as f64 / 1e6,
                known.claim,
                known.clock,
            ));
        }
    }
}

/// The channel an entry's waiter is told on (`<window>|<id>|<channel>`).
fn channel(member: &[u8]) -> &[u8] {
    let mut parts = member.splitn(3, |&b| b == b'|');
    parts.nth(2).unwrap_or(member)
}

/// `words` as a script that touches the queues (by `EVALSHA` of its
/// SHA-1, or `EVAL` of its text), if they are one.
fn parse(words: &[Vec<u8>]) -> Option<Run<'_>> {
    let [command, body, count, rest @ ..] = words else {
        return None;
    };
    let script = QUEUED.into_iter().find(|s| {
        (command.eq_ignore_ascii_case(b"EVALSHA") && body.eq_ignore_ascii_case(s.sha1().as_bytes()))
            || (command.eq_ignore_ascii_case(b"EVAL") && body[..] == *s.text().as_bytes())
    })?;
    let count: usize = std::str::from_utf8(count).ok()?.parse().ok()?;
    if count > rest.len() {
        return None;
    }
    let (keys, args) = rest.split_at(count);
    // The fenced acquire's first two keys are its counter and loss id.
    let skip = if script == Script::FencedWaitAcquire {
        2
    } else {
        0
    };
    Some(Run {
        script,
        keys: keys.get(skip..)?,
        args,
    })
}

#[cfg(test)]
mod tests {
    use redlock_mio::scripts::Script;

    use super::{Places, SECOND_US};
    use crate::tests::request;
    use crate::{Conn, HandoffFault, Master};

    /// The masters' clock when the test begins, µs.
    const T0: u64 = 1_700_000_000_000_000;
    const HOUR_US: u64 = 3600 * SECOND_US;

    fn channel(client: u8) -> Vec<u8> {
        format!("redlock-mio:wake:00000000000000{client:02x}").into_bytes()
    }

    /// Waiter `id` of client `client`: its member.
    fn member(client: u8, id: u8) -> Vec<u8> {
        [format!("100|{id}|").as_bytes(), &channel(client)].concat()
    }

    /// One master whose runs the checker watches, a connection for the
    /// clients' commands, and one listening to every client's channel
    /// (so that a hand-off hears each waiter).
    struct Rig {
        master: Master,
        conn: Conn,
        places: Places,
        now_us: u64,
    }

    impl Rig {
        fn new(master: Master) -> Rig {
            let mut master = master;
            let mut listener = master.connect();
            let mut out = Vec::new();
            let channels: Vec<Vec<u8>> = (0..3).map(channel).collect();
            let mut subscribe: Vec<&[u8]> = vec![b"SUBSCRIBE"];
            subscribe.extend(channels.iter().map(Vec::as_slice));
            master.handle(&mut listener, &request(&subscribe), T0, &mut out);
            let conn = master.connect();
            Rig {
                master,
                conn,
                places: Places::new(1, channels),
                now_us: T0,
            }
        }

        fn run(&mut self, words: &[&[u8]]) -> Vec<u8> {
            let mut out = Vec::new();
            let (places, now_us) = (&mut self.places, self.now_us);
            let at = (now_us - T0) * 1000;
            self.master.handle_observed(
                &mut self.conn,
                &request(words),
                now_us,
                &mut out,
                &mut |master, words, moment| places.ran(0, at, master, now_us, words, moment),
            );
            out
        }

        /// Waiter `id` of client `client`, claiming `claim`, tries for
        /// `r` with `token`.
        fn wait(&mut self, client: u8, id: u8, claim: u64, token: &[u8]) -> Vec<u8> {
            let text = Script::WaitAcquire.text().as_bytes();
            let (member, claim) = (member(client, id), claim.to_string());
            self.run(&[
                b"EVAL",
                text,
                b"1",
                b"r",
                token,
                b"10000",
                &member,
                claim.as_bytes(),
                b"500",
            ])
        }

        fn release(&mut self, token: &[u8]) {
            let text = Script::Release.text().as_bytes();
            self.run(&[b"EVAL", text, b"1", b"r", token]);
        }
    }

    /// Client 0 holds `r`; client 1's waiter, whose clock is an hour
    /// fast, queues; `later` µs on, client 2's, whose clock is an hour
    /// slow, queues too; then `between` runs, the holder releases, and
    /// each waiter tries again.
    fn fast_then_slow(master: Master, later: u64, between: &[&[u8]]) -> Places {
        let mut rig = Rig::new(master);
        rig.run(&[b"SET", b"r", b"holder", b"PX", b"10000"]);
        let fast = T0 + HOUR_US;
        assert_eq!(rig.wait(1, 1, fast, b"one"), b"+WAIT 10000\r\n");
        rig.now_us += later;
        let slow = T0 + later - HOUR_US;
        assert!(rig.wait(2, 2, slow, b"two").starts_with(b"+WAIT"));
        if !between.is_empty() {
            rig.run(between);
        }
        rig.release(b"holder");
        rig.wait(1, 1, fast, b"one");
        rig.wait(2, 2, slow, b"two");
        rig.places
    }

    #[test]
    fn a_waiter_goes_ahead_by_the_bound_at_most() {
        // Queued half a second after one an hour fast, a waiter an hour
        // slow stands ahead of it (a second at most each way): an
        // overtake within the bound.
        let places = fast_then_slow(Master::new(1, T0), SECOND_US / 2, &[]);
        assert_eq!(places.overtakes, 1);
        assert!(places.errors.is_empty(), "{:?}", places.errors);
        // Queued three seconds later, it stands behind.
        let places = fast_then_slow(Master::new(1, T0), 3 * SECOND_US, &[]);
        assert_eq!(places.overtakes, 0);
        assert!(places.errors.is_empty(), "{:?}", places.errors);
    }

    #[test]
    fn a_waiter_ahead_past_the_bound_is_found() {
        let master = Master::new(1, T0).with_handoff_fault(HandoffFault::PlaceAsClaimed);
        let places = fast_then_slow(master, 3 * SECOND_US, &[]);
        assert_eq!(places.overtakes, 1);
        assert_eq!(places.errors.len(), 1, "{:?}", places.errors);
        assert!(
            places.errors[0].contains("client 2's waiter"),
            "{:?}",
            places.errors
        );
    }

    /// An entry changed by something else than its waiter's attempt (a
    /// restore, a foreign write) has no known place any more, and holds
    /// nobody to anything.
    #[test]
    fn an_entry_changed_otherwise_has_no_known_place() {
        let behind = (T0 + 5 * HOUR_US).to_string();
        let member = member(1, 1);
        let zadd: [&[u8]; 5] = [
            b"ZADD",
            b"redlock-mio:queue:r",
            b"XX",
            behind.as_bytes(),
            &member,
        ];
        let places = fast_then_slow(Master::new(1, T0), 3 * SECOND_US, &zadd);
        assert_eq!(places.overtakes, 0);
        assert!(places.errors.is_empty(), "{:?}", places.errors);
    }
}
