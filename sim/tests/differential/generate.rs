//! Seeded random cases: the commands the client sends (its handshake, the
//! lock's `SET NX PX` and scripts, the fence scripts, the wait queue's
//! scripts, the loss watch's tracking and reads), other clients' writes to
//! the same keys (foreign values in the reserved space and the queues,
//! keys of another type), subscriptions and publications on the wake
//! channels, clock moves, restarts and snapshots. The wait queue's part is
//! in `generate/waits.rs`, client tracking's in `generate/tracking.rs`.
//!
//! The generator reads the model's keys to pick arguments that matter (a
//! fence sync names the loss id the master holds, a raise the counter
//! near its value): what the model holds is what the real server holds
//! until the first difference, which ends the case anyway.

mod tracking;
mod waits;

use redlock_mio::scripts::*;
use redlock_mio::{FENCE_KEY, FENCE_LOST_KEY, LONGEST_TTL_KEY, MARKER_KEY};
use redlock_mio_sim::{Conn, Master, Protocol};

use super::case::CONNS;
use super::server::PASSWORD;
use super::steps::{Command, Step, fence_scripts, fenced_wait_scripts, lock_scripts, wait_scripts};

/// SplitMix64: small, seedable, the same everywhere.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        redlock_mio_sim::splitmix64(&mut self.0)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True with probability `percent` / 100.
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    pub(crate) fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())].clone()
    }
}

/// The resources the lock commands name.
const RESOURCES: [&str; 4] = ["a", "b", "c", "d"];

/// Keys of the reserved space, which other clients may fill with foreign
/// values (the queues of the resources among them).
const RESERVED: [&str; 6] = [
    FENCE_KEY,
    FENCE_LOST_KEY,
    MARKER_KEY,
    LONGEST_TTL_KEY,
    "redlock-mio:queue:a",
    "redlock-mio:queue:b",
];

/// TTLs in ms: expiry at the next millisecond, within a few, never, and
/// so far off (2e14) that Lua's own number-to-text would write an
/// exponent, where `+WAIT` must print every digit.
const TTLS: [u64; 9] = [
    1,
    2,
    3,
    10,
    100,
    1_000,
    30_000,
    2_147_483_647,
    200_000_000_000_000,
];

/// Clock moves in µs, around the millisecond and second boundaries.
const ADVANCES: [u64; 12] = [
    0, 1, 500, 999, 1_000, 1_001, 2_000, 3_000, 10_000, 999_999, 1_000_000, 40_000_000,
];

/// Values other clients write in the reserved space: good and bad
/// counters and loss ids (the fence scripts' `ok` accepts positive
/// decimals of at most 16 digits below 2^53).
const FOREIGN: [&str; 16] = [
    "1",
    "42",
    "0",
    "007",
    "-5",
    "abc",
    "",
    " 12",
    "1e5",
    "0x10",
    "9007199254740991",
    "9007199254740992",
    "1234567890123456",
    "12345678901234567",
    "client:someone",
    "60000",
];

/// Fence values a raise or a sync sends besides those near the counter.
const FENCES: [u64; 7] = [
    1,
    2,
    1_000,
    9_007_199_254_740_991,
    9_007_199_254_740_992,
    9_007_199_254_740_993,
    u64::MAX,
];

/// What the generator believes of a connection.
#[derive(Clone, Copy, Default)]
struct Belief {
    open: bool,
    handshaken: bool,
    db: usize,
    /// Its handshake did not log in: it is refused until it does.
    locked_out: bool,
    /// It speaks RESP3, has the wait scripts and listens to its wake
    /// channel: the client with wake-ups on.
    wake: bool,
    /// It loaded the fence scripts (and, with wake-ups on, the fenced
    /// acquire that waits): the client with fencing on.
    fencing: bool,
}

/// How often each connection sends, in percent.
const CONN_SHARES: [u64; CONNS] = [40, 25, 20, 15];

/// The generator of one case.
pub(crate) struct Generator {
    rng: Rng,
    tokens: Vec<Vec<u8>>,
    conns: [Belief; CONNS],
    /// The wake channels: one for each connection's client, and one that
    /// nobody's.
    channels: Vec<Vec<u8>>,
    /// The share in percent of the wait queue's commands among those of
    /// a client with wake-ups on: most in every other case, so that
    /// queues build up, hand-offs follow and time expires them.
    waits: u64,
    snapshot: bool,
}

fn words(parts: &[&[u8]]) -> Vec<Vec<u8>> {
    parts.iter().map(|p| p.to_vec()).collect()
}

fn exact(parts: &[&[u8]]) -> Command {
    Command {
        words: words(parts),
    }
}

impl Generator {
    pub(crate) fn new(seed: u64) -> Generator {
        let mut rng = Rng::new(seed);
        let tokens = (0..3)
            .map(|i| {
                if i == 2 {
                    b"token-ascii".to_vec()
                } else {
                    (0..20).map(|_| rng.next() as u8).collect()
                }
            })
            .collect();
        let channels = (0..=CONNS)
            .map(|i| {
                let id = rng.next();
                // One in upper case: the scripts' `%x` reads both.
                let hex = if i == 2 {
                    format!("{id:016X}")
                } else {
                    format!("{id:016x}")
                };
                format!("redlock-mio:wake:{hex}").into_bytes()
            })
            .collect();
        Generator {
            rng,
            tokens,
            conns: [Belief::default(); CONNS],
            channels,
            waits: if seed % 2 == 0 { 80 } else { 40 },
            snapshot: false,
        }
    }

    /// The next step, at `now` (µs), with `model` and its connections
    /// (`conns`) as they stand.
    pub(crate) fn next(&mut self, model: &Master, conns: &[Option<Conn>], now: u64) -> Step {
        let mut draw = self.rng.next() % 100;
        let conn = CONN_SHARES
            .iter()
            .position(|&share| {
                let this = draw < share;
                draw = draw.saturating_sub(share);
                this
            })
            .unwrap_or(0);
        let belief = self.conns[conn];
        if !belief.open {
            self.conns[conn] = Belief {
                open: true,
                ..Belief::default()
            };
            return Step::Connect(conn);
        }
        if !belief.handshaken {
            self.conns[conn].handshaken = true;
            let handshake = self.handshake(conn);
            return self.send(conn, handshake);
        }
        match self.rng.below(100) {
            0..12 => Step::Advance(self.rng.pick(&ADVANCES)),
            12 => {
                self.conns = [Belief::default(); CONNS];
                Step::Restart {
                    from_snapshot: self.snapshot && self.rng.chance(60),
                }
            }
            13..16 => {
                self.snapshot = true;
                Step::Snapshot
            }
            16 => {
                self.conns[conn] = Belief::default();
                self.next(model, conns, now)
            }
            _ if belief.locked_out && self.rng.chance(50) => {
                // It logs in at last, as a client that retries does.
                self.conns[conn].locked_out = false;
                self.send(conn, vec![exact(&[b"AUTH", PASSWORD.as_bytes()])])
            }
            _ => {
                let (listens, resp2) = conns[conn].as_ref().map_or((Vec::new(), false), |c| {
                    (model.channels(c), c.protocol() == Protocol::Resp2)
                });
                if resp2 && !listens.is_empty() && self.rng.chance(50) {
                    // A RESP2 connection in subscribe mode, where little
                    // runs: it leaves it, one channel at a time.
                    let leave = listens.iter().map(|c| exact(&[b"UNSUBSCRIBE", c]));
                    return self.send(conn, leave.collect());
                }
                let count = self.rng.pick(&[1, 1, 1, 2, 3, 5]);
                // What it listens to after the step's first command is
                // not known here.
                let listens = if count == 1 {
                    listens.len()
                } else {
                    usize::MAX
                };
                let waits = if belief.wake { self.waits } else { 15 };
                let tracks = conns[conn].as_ref();
                let tracking = self.tracking_share(model, tracks);
                let mode = tracks.and_then(|c| model.tracking(c));
                let commands = (0..count)
                    .flat_map(|_| {
                        if self.rng.chance(tracking) {
                            self.tracking_commands(conn, model, mode, count == 1, now)
                        } else if self.rng.chance(waits) {
                            vec![self.wait_command(conn, model, listens, now)]
                        } else {
                            vec![self.command(conn, model, now)]
                        }
                    })
                    .collect();
                self.send(conn, commands)
            }
        }
    }

    fn send(&mut self, conn: usize, commands: Vec<Command>) -> Step {
        let cuts = (0..self.rng.below(4))
            .map(|_| self.rng.next() % 1000)
            .collect();
        Step::Send {
            conn,
            commands,
            cuts,
        }
    }

    /// A connection's handshake, as the client pipelines it (login,
    /// `HELLO 3` if releases tell its waiters, database, scripts, `INFO`,
    /// marker, longest TTL, then `SUBSCRIBE` to its wake channel and
    /// `CLIENT TRACKING` for its loss watch), with a few of the ways it
    /// can go wrong.
    fn handshake(&mut self, conn: usize) -> Vec<Command> {
        let mut out = Vec::new();
        let pass = PASSWORD.as_bytes();
        // Now and then a login that fails (the connection stays out
        // until a later AUTH), or none.
        let login = self.rng.below(50);
        self.conns[conn].locked_out = login < 3;
        match login {
            0 => out.push(exact(&[b"AUTH", b"wrong"])),
            1 => out.push(exact(&[b"AUTH", b"nobody", pass])),
            2 => {}
            3..6 => out.push(exact(&[b"AUTH", b"default", pass])),
            6..11 => out.push(exact(&[b"HELLO", b"3", b"AUTH", b"default", pass])),
            _ => out.push(exact(&[b"AUTH", pass])),
        }
        // The last connection stands for other clients, most of which
        // do not wait.
        let wake = self.rng.chance(if conn + 1 == CONNS { 25 } else { 80 });
        self.conns[conn].wake = wake;
        if wake {
            out.push(exact(&[b"HELLO", b"3"]));
        }
        if self.rng.chance(25) {
            out.push(exact(&[b"SELECT", b"1"]));
            self.conns[conn].db = 1;
        }
        let fencing = self.rng.chance(60);
        self.conns[conn].fencing = fencing;
        for (text, _) in lock_scripts()
            .iter()
            .chain(if fencing { fence_scripts() } else { &[] })
            .chain(if wake { wait_scripts() } else { &[] })
            .chain(if wake && fencing {
                fenced_wait_scripts()
            } else {
                &[]
            })
        {
            out.push(exact(&[b"SCRIPT", b"LOAD", text.as_bytes()]));
        }
        if self.rng.chance(70) {
            out.push(exact(&[b"INFO", b"server", b"replication", b"cluster"]));
        }
        if self.rng.chance(50) {
            let marker = self
                .rng
                .pick(&[&b"client:0123456789abcdef"[..], b"client:ffff", b"1"]);
            out.push(exact(&[
                b"SET",
                MARKER_KEY.as_bytes(),
                marker,
                b"NX",
                b"GET",
            ]));
        }
        if self.rng.chance(50) {
            let ms = self.rng.pick(&[&b"60000"[..], b"30000"]);
            out.push(exact(&[
                b"SET",
                LONGEST_TTL_KEY.as_bytes(),
                ms,
                b"NX",
                b"GET",
            ]));
        }
        if wake {
            out.push(exact(&[b"SUBSCRIBE", &self.channels[conn]]));
        }
        // The loss watch's tracking, which the client asks for once
        // `HELLO 3` has succeeded; rarely on RESP2, where a server grants
        // it and tells nothing.
        if self.rng.chance(if wake { 60 } else { 5 }) {
            out.push(exact(&[b"CLIENT", b"TRACKING", b"ON", b"OPTIN", b"NOLOOP"]));
        }
        out
    }

    fn token(&mut self) -> Vec<u8> {
        if self.rng.chance(5) {
            (0..20).map(|_| self.rng.next() as u8).collect()
        } else {
            self.rng.pick(&self.tokens)
        }
    }

    /// A release of `keys` (one key, or several, which may be one), often
    /// by the token the first holds.
    fn release(&mut self, keys: Vec<Vec<u8>>, model: &Master, db: usize, now: u64) -> Command {
        let script = if keys.len() > 1 || self.rng.chance(20) {
            (RELEASE_MANY_SCRIPT, RELEASE_MANY_SHA1)
        } else {
            (RELEASE_SCRIPT, RELEASE_SHA1)
        };
        let args = vec![self.held_token(model, db, &keys[0], now)];
        self.script(script, keys, args)
    }

    /// A token for a release of `key`: often the one it holds (a
    /// reservation's value too, as another client might send it), so
    /// that releases free keys and hand them off.
    fn held_token(&mut self, model: &Master, db: usize, key: &[u8], now: u64) -> Vec<u8> {
        match model.get(db, key, now) {
            Some(held) if self.rng.chance(60) => held.to_vec(),
            _ => self.token(),
        }
    }

    fn ttl(&mut self) -> Vec<u8> {
        self.rng.pick(&TTLS).to_string().into_bytes()
    }

    fn resource(&mut self) -> Vec<u8> {
        self.rng.pick(&RESOURCES).as_bytes().to_vec()
    }

    /// One to three resources (a name may repeat, which the scripts
    /// meet as they come).
    fn resources(&mut self) -> Vec<Vec<u8>> {
        (0..1 + self.rng.below(3))
            .map(|_| self.resource())
            .collect()
    }

    fn any_key(&mut self) -> Vec<u8> {
        if self.rng.chance(40) {
            self.rng.pick(&RESERVED).as_bytes().to_vec()
        } else {
            self.resource()
        }
    }

    /// `EVALSHA sha n keys... args...`, or `EVAL` with the text.
    fn script(
        &mut self,
        (text, sha): (&str, &str),
        keys: Vec<Vec<u8>>,
        args: Vec<Vec<u8>>,
    ) -> Command {
        let mut words = if self.rng.chance(80) {
            vec![b"EVALSHA".to_vec(), sha.as_bytes().to_vec()]
        } else {
            vec![b"EVAL".to_vec(), text.as_bytes().to_vec()]
        };
        words.push(keys.len().to_string().into_bytes());
        words.extend(keys);
        words.extend(args);
        Command { words }
    }

    /// The fence keys, then `keys`.
    fn fenced(keys: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        let mut all = vec![
            FENCE_KEY.as_bytes().to_vec(),
            FENCE_LOST_KEY.as_bytes().to_vec(),
        ];
        all.extend(keys);
        all
    }

    /// A fence value: near what the counter holds, or one of [`FENCES`].
    fn fence_value(&mut self, model: &Master, db: usize, now: u64) -> Vec<u8> {
        let counter = model
            .get(db, FENCE_KEY.as_bytes(), now)
            .and_then(|c| std::str::from_utf8(c).ok()?.parse::<u64>().ok());
        match counter {
            Some(c) if self.rng.chance(60) => {
                c.saturating_add(self.rng.pick(&[0, 1, 7])).to_string()
            }
            _ => self.rng.pick(&FENCES).to_string(),
        }
        .into_bytes()
    }

    /// One command on connection `conn`.
    fn command(&mut self, conn: usize, model: &Master, now: u64) -> Command {
        let db = self.conns[conn].db;
        // Keys for a script of one key or of several (which may be one).
        let one_or_many = |generator: &mut Generator| {
            let keys = generator.resources();
            let many = keys.len() > 1 || generator.rng.chance(20);
            (keys, many)
        };
        match self.rng.below(100) {
            0..14 => {
                let (key, token, ttl) = (self.resource(), self.token(), self.ttl());
                exact(&[b"SET", &key, &token, b"NX", b"PX", &ttl])
            }
            14..20 => {
                let (keys, args) = (self.resources(), vec![self.token(), self.ttl()]);
                self.script((ACQUIRE_MANY_SCRIPT, ACQUIRE_MANY_SHA1), keys, args)
            }
            20..28 => {
                let (keys, many) = one_or_many(self);
                let script = if many {
                    (EXTEND_MANY_SCRIPT, EXTEND_MANY_SHA1)
                } else {
                    (EXTEND_SCRIPT, EXTEND_SHA1)
                };
                let args = vec![self.token(), self.ttl()];
                self.script(script, keys, args)
            }
            28..37 => {
                let keys = self.resources();
                self.release(keys, model, db, now)
            }
            37..43 => {
                let (keys, args) = (
                    Generator::fenced(self.resources()),
                    vec![self.token(), self.ttl()],
                );
                self.script((FENCED_ACQUIRE_SCRIPT, FENCED_ACQUIRE_SHA1), keys, args)
            }
            43..48 => {
                let keys = Generator::fenced(self.resources());
                let args = vec![self.token(), self.fence_value(model, db, now)];
                self.script((RAISE_SCRIPT, RAISE_SHA1), keys, args)
            }
            48..53 => self.script(
                (FENCE_READ_SCRIPT, FENCE_READ_SHA1),
                Generator::fenced(vec![]),
                vec![],
            ),
            53..57 => {
                let mode = self.rng.pick(&[&b"start"[..], b"repair"]).to_vec();
                let mut args = vec![self.fence_value(model, db, now), mode];
                let lost = model
                    .get(db, FENCE_LOST_KEY.as_bytes(), now)
                    .map(<[u8]>::to_vec);
                for _ in 0..self.rng.below(3) {
                    match &lost {
                        Some(id) if self.rng.chance(70) => args.push(id.clone()),
                        _ => args.push(self.rng.pick(&FOREIGN).as_bytes().to_vec()),
                    }
                }
                self.script(
                    (FENCE_SYNC_SCRIPT, FENCE_SYNC_SHA1),
                    Generator::fenced(vec![]),
                    args,
                )
            }
            57..63 => {
                let (key, value) = (self.any_key(), self.rng.pick(&FOREIGN).as_bytes().to_vec());
                if self.rng.chance(30) {
                    let ttl = self.ttl();
                    exact(&[b"SET", &key, &value, b"PX", &ttl])
                } else {
                    exact(&[b"SET", &key, &value])
                }
            }
            63..66 => {
                let key = self.any_key();
                exact(&[b"RPUSH", &key, b"x"])
            }
            66..70 => {
                let (a, b) = (self.any_key(), self.any_key());
                exact(&[b"DEL", &a, &b])
            }
            70..80 => {
                let key = self.any_key();
                let verb = self.rng.pick(&[&b"GET"[..], b"PTTL", b"TYPE", b"EXISTS"]);
                exact(&[verb, &key])
            }
            80..82 => {
                let key = self.any_key();
                exact(&[b"INCR", &key])
            }
            82..84 => {
                let key = self.any_key();
                let ms = self
                    .rng
                    .pick(&[&b"0"[..], b"-1", b"1", b"5", b"100000", b"x"]);
                exact(&[b"PEXPIRE", &key, ms])
            }
            84..87 => {
                let marker = self.rng.pick(&[&b"client:0123456789abcdef"[..], b"1"]);
                let (key, value) = if self.rng.chance(50) {
                    (MARKER_KEY, marker)
                } else {
                    (LONGEST_TTL_KEY, &b"60000"[..])
                };
                exact(&[b"SET", key.as_bytes(), value, b"NX", b"GET"])
            }
            87..89 => exact(&[b"SCRIPT", b"FLUSH"]),
            89..91 => {
                let shas = [
                    RELEASE_SHA1,
                    FENCE_READ_SHA1,
                    "0000000000000000000000000000000000000000",
                ];
                let sha = self.rng.pick(&shas);
                exact(&[b"SCRIPT", b"EXISTS", sha.as_bytes()])
            }
            91 => exact(&[b"FLUSHALL"]),
            92 => exact(&[b"TIME"]),
            93 => exact(&[b"INFO", b"server", b"replication", b"cluster"]),
            94 => {
                let proto = self.rng.pick(&[&b"2"[..], b"3"]);
                exact(&[b"HELLO", proto])
            }
            95 => {
                let db = self.rng.below(2);
                self.conns[conn].db = db;
                exact(&[b"SELECT", db.to_string().as_bytes()])
            }
            96 => {
                self.conns[conn] = Belief::default();
                exact(&[b"QUIT"])
            }
            97..99 => self.odd(),
            _ => exact(&[b"PING"]),
        }
    }

    /// A command the client never sends but a server answers all the
    /// same: logins again, the other options of `SET` and `PEXPIRE`, and
    /// malformed commands, whose errors must have the server's codes.
    fn odd(&mut self) -> Command {
        let key = self.any_key();
        let pass = PASSWORD.as_bytes();
        let sha = RELEASE_SHA1.as_bytes();
        let odd: [&[&[u8]]; 26] = [
            &[b"AUTH", pass],
            &[b"AUTH", b"wrong"],
            &[b"AUTH", b"default", b"wrong"],
            &[b"AUTH", b"a", b"b", b"c"],
            &[b"HELLO", b"4"],
            &[b"HELLO", b"x"],
            &[b"HELLO", b"2", b"SETNAME", b"sim"],
            &[b"HELLO", b"3", b"FOO"],
            &[b"SELECT", b"16"],
            &[b"SELECT", b"-1"],
            &[b"GET"],
            &[b"NOSUCHCOMMAND", b"x"],
            &[b"SET", &key, b"v", b"XX"],
            &[b"SET", &key, b"v", b"EX", b"1"],
            &[b"SET", &key, b"v", b"KEEPTTL"],
            &[b"SET", &key, b"v", b"NX", b"GET"],
            &[b"SET", &key, b"v", b"PX", b"0"],
            &[b"SET", &key, b"v", b"NX", b"XX"],
            &[b"SET", &key, b"v", b"PX", b"1", b"KEEPTTL"],
            &[b"PEXPIRE", &key, b"100000", b"GT"],
            &[b"PEXPIRE", &key, b"100", b"LT"],
            &[b"PEXPIRE", &key, b"1", b"NX", b"XX"],
            &[b"EVALSHA", sha, b"-1"],
            &[b"EVALSHA", sha, b"3", b"a"],
            &[b"EVALSHA", b"abc", b"0"],
            &[b"SCRIPT", b"FLUSH", b"x"],
        ];
        exact(self.rng.pick(&odd))
    }
}
