//! The wait queue's cases: acquires that wait (fenced or not) and leaves,
//! with members of every form the scripts meet (the client's, and other
//! clients' malformed ones); other clients' writes into the queues and
//! the fence keys; subscriptions to and publications on the wake
//! channels. The releases that hand keys off are the lock's own (see
//! `command`); the clock moves that expire reservations and queues are
//! the case's.

use redlock_mio::scripts::*;
use redlock_mio::{FENCE_KEY, FENCE_LOST_KEY};
use redlock_mio_sim::Master;

use super::{Generator, exact};
use crate::steps::Command;

/// Reservation windows in ms: the hand-off takes 1 to 9 digits without a
/// leading zero (`[1-9]%d*`, a `PX` its `SET` takes), and drops a member
/// whose window is 0, has a leading zero or 10 digits.
const WINDOWS: [&str; 10] = [
    "1",
    "2",
    "5",
    "50",
    "250",
    "1000",
    "999999999",
    "0",
    "050",
    "1234567890",
];

/// Members of other forms than the client's, which the hand-off drops.
const JUNK_MEMBERS: [&str; 8] = [
    "junk",
    "",
    "5|1|redlock-mio:wake:",
    "5|1|redlock-mio:wake:xyz",
    "+5|1|redlock-mio:wake:ab",
    "5||redlock-mio:wake:ab",
    "5|1|redlock-mio:wake:ab\n",
    "5|1|other:ab",
];

/// Scores that are no client's place: valid ones and those `ZADD`
/// refuses.
const ODD_SCORES: [&str; 8] = ["abc", "1.5", "-inf", "inf", "0x10", "", "nan", "-2.25"];

/// How long a queue outlives the keys that block it, in ms; the last
/// ones are no client's (a fraction, a negative, not a number).
const MARGINS: [&str; 8] = ["0", "1", "250", "1000", "30000", "1.5", "-100", "abc"];

/// Payloads other clients publish on the wake channels: none is a
/// number, so that the tally tells the scripts' wake-ups and hints apart.
const PAYLOADS: [&str; 3] = ["junk", "x 250", ""];

impl Generator {
    /// The queue of a resource, or of a key of the reserved space.
    fn queue_key(&mut self) -> Vec<u8> {
        let resource = self.resource();
        [&b"redlock-mio:queue:"[..], &resource].concat()
    }

    /// One to three resources, the first often one that is held or has
    /// waiters in the model, so that acquires queue and releases hand off.
    fn contended(&mut self, model: &Master, conn: usize, now: u64) -> Vec<Vec<u8>> {
        let db = self.conns[conn].db;
        let mut keys = self.resources();
        let busy: Vec<&str> = super::RESOURCES
            .into_iter()
            .filter(|r| {
                let queue = [&b"redlock-mio:queue:"[..], r.as_bytes()].concat();
                model.get(db, r.as_bytes(), now).is_some()
                    || !model.members(db, &queue, now).is_empty()
            })
            .collect();
        if !busy.is_empty() && self.rng.chance(60) {
            keys[0] = self.rng.pick(&busy).as_bytes().to_vec();
        }
        keys
    }

    /// A wake channel: mostly `conn`'s own, sometimes another client's or
    /// nobody's, now and then one of no client at all.
    fn channel(&mut self, conn: usize) -> Vec<u8> {
        match self.rng.below(10) {
            0..6 => self.channels[conn].clone(),
            6..9 => self.rng.pick(&self.channels),
            _ => self
                .rng
                .pick(&[&b"news"[..], b"redlock-mio:wake:"])
                .to_vec(),
        }
    }

    /// A member as `conn`'s waiters have them (`<window>|<id>|<channel>`),
    /// or, now and then, of another form.
    fn member(&mut self, conn: usize) -> Vec<u8> {
        if self.rng.chance(8) {
            return self.rng.pick(&JUNK_MEMBERS).as_bytes().to_vec();
        }
        let window = if self.rng.chance(85) {
            self.rng.pick(&WINDOWS[..7])
        } else {
            self.rng.pick(&WINDOWS[7..])
        };
        let id = 1 + self.rng.below(4);
        let channel = self.channel(conn);
        [format!("{window}|{id}|").as_bytes(), &channel].concat()
    }

    /// A member of the queue of `key` in the model (one that waits), or a
    /// new one.
    fn queued_member(&mut self, model: &Master, key: &[u8], conn: usize, now: u64) -> Vec<u8> {
        let db = self.conns[conn].db;
        let queue = [&b"redlock-mio:queue:"[..], key].concat();
        let members = model.members(db, &queue, now);
        if !members.is_empty() && self.rng.chance(70) {
            let (member, _) = self.rng.pick(&members);
            return member.to_vec();
        }
        self.member(conn)
    }

    /// A place: the client's wall clock in µs when its waiter began, a
    /// little before now (two waiters may share one), or no clock's.
    fn place(&mut self, now: u64) -> Vec<u8> {
        if self.rng.chance(8) {
            return self.rng.pick(&ODD_SCORES).as_bytes().to_vec();
        }
        let before = self.rng.pick(&[0, 0, 1_000, 2_000, 1_000_000]);
        (now - before).to_string().into_bytes()
    }

    fn margin(&mut self) -> Vec<u8> {
        let margins = if self.rng.chance(90) {
            &MARGINS[..5]
        } else {
            &MARGINS[5..]
        };
        self.rng.pick(margins).as_bytes().to_vec()
    }

    /// One command of the wait queue's cases on `conn`, which listens to
    /// `listens` channels.
    pub(super) fn wait_command(
        &mut self,
        conn: usize,
        model: &Master,
        listens: usize,
        now: u64,
    ) -> Command {
        match self.rng.below(100) {
            0..30 => self.waiting_acquire(conn, model, now),
            30..40 => {
                let keys = self.contended(model, conn, now);
                let db = self.conns[conn].db;
                self.release(keys, model, db, now)
            }
            40..50 => {
                let keys = self.resources();
                let member = self.queued_member(model, &keys[0], conn, now);
                self.script((LEAVE_SCRIPT, LEAVE_SHA1), keys, vec![member])
            }
            50..57 => self.foreign_zadd(conn, now),
            57..59 => {
                let (queue, member) = (self.queue_key(), self.member(conn));
                exact(&[b"ZREM", &queue, &member])
            }
            59..64 => self.fence_write(now),
            64..73 => {
                let queue = self.queue_key();
                match self.rng.below(6) {
                    0 => exact(&[b"ZRANGE", &queue, b"0", b"-1"]),
                    1 => exact(&[b"ZCARD", &queue]),
                    2 => {
                        let resource = self.resource();
                        let member = self.queued_member(model, &resource, conn, now);
                        exact(&[b"ZSCORE", &queue, &member])
                    }
                    3 => exact(&[b"TYPE", &queue]),
                    4 => exact(&[b"PTTL", &queue]),
                    _ => {
                        // A reservation's value, among others.
                        let resource = self.resource();
                        exact(&[b"GET", &resource])
                    }
                }
            }
            73..76 => {
                let queue = self.queue_key();
                let ms = self.rng.pick(&[&b"1"[..], b"100", b"0"]);
                exact(&[b"PEXPIRE", &queue, ms])
            }
            76..83 => {
                let channel = self.channel(conn);
                let payload = self.rng.pick(&PAYLOADS);
                exact(&[b"PUBLISH", &channel, payload.as_bytes()])
            }
            83..91 => {
                let channel = self.channel(conn);
                exact(&[b"SUBSCRIBE", &channel])
            }
            // Without a channel only when it listens to one at most: the
            // order in which servers leave several is their hash table's.
            _ if listens <= 1 && self.rng.chance(30) => exact(&[b"UNSUBSCRIBE"]),
            _ => {
                let channel = self.channel(conn);
                exact(&[b"UNSUBSCRIBE", &channel])
            }
        }
    }

    /// An acquire that waits on one to three resources, often contended,
    /// as a waiter of the model's queues or a new one: fenced in half of
    /// those of a connection with fencing on (the client's), and now and
    /// then elsewhere (refused by `EVALSHA` where it is not loaded).
    fn waiting_acquire(&mut self, conn: usize, model: &Master, now: u64) -> Command {
        let keys = self.contended(model, conn, now);
        let member = self.queued_member(model, &keys[0], conn, now);
        let fenced = self
            .rng
            .chance(if self.conns[conn].fencing { 50 } else { 10 });
        // Now and then a TTL that no client sends, which `SET` refuses
        // once the keys are free.
        let ttl = if self.rng.chance(3) {
            b"0".to_vec()
        } else {
            self.ttl()
        };
        let args = vec![self.token(), ttl, member, self.place(now), self.margin()];
        if fenced {
            let script = (FENCED_WAIT_ACQUIRE_SCRIPT, FENCED_WAIT_ACQUIRE_SHA1);
            self.script(script, Generator::fenced(keys), args)
        } else {
            self.script((WAIT_ACQUIRE_SCRIPT, WAIT_ACQUIRE_SHA1), keys, args)
        }
    }

    /// A write to the fence counter or the loss id, so that the fenced
    /// acquires meet them present, missing, foreign and of another type:
    /// both deleted (a master that lost them), a value the fence scripts
    /// write there (a counter near 2^53, a loss id from the clock), a
    /// foreign one, a list.
    fn fence_write(&mut self, now: u64) -> Command {
        let (counter, lost) = (FENCE_KEY.as_bytes(), FENCE_LOST_KEY.as_bytes());
        let key = self.rng.pick(&[counter, lost]);
        match self.rng.below(10) {
            0..2 => exact(&[b"DEL", counter, lost]),
            2 => exact(&[b"RPUSH", key, b"x"]),
            3..7 if key == counter => {
                let value =
                    self.rng
                        .pick(&[&b"1"[..], b"41", b"9007199254740990", b"9007199254740991"]);
                exact(&[b"SET", key, value])
            }
            3..7 => exact(&[b"SET", key, now.to_string().as_bytes()]),
            _ => {
                let value = self.rng.pick(&super::FOREIGN);
                exact(&[b"SET", key, value.as_bytes()])
            }
        }
    }

    /// Another client's `ZADD` into a queue: a member like the client's or
    /// not, at a place or another score, with options now and then (two
    /// of which conflict).
    fn foreign_zadd(&mut self, conn: usize, now: u64) -> Command {
        let queue = self.queue_key();
        let options: &[&[u8]] = self.rng.pick(&[
            &[][..],
            &[],
            &[b"NX"],
            &[b"XX"],
            &[b"GT", b"CH"],
            &[b"LT"],
            &[b"NX", b"XX"],
            &[b"GT", b"LT"],
        ]);
        let score = self.place(now);
        let member = self.member(conn);
        let mut words = vec![b"ZADD".to_vec(), queue];
        words.extend(options.iter().map(|o| o.to_vec()));
        words.extend([score, member]);
        if self.rng.chance(15) {
            // A second pair, the same member again sometimes.
            let score = self.place(now);
            let member = self.member(conn);
            words.extend([score, member]);
        }
        Command { words }
    }
}
