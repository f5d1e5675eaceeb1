//! The simulated masters as processes: the model, its wall clock, the
//! connections it accepted, pauses, crashes and restarts (empty or from an
//! older snapshot), and the other clients that write to it.

use crate::{Master, Snapshot};

use super::clock::MasterClock;

/// One master's process.
pub(crate) struct MasterProc {
    pub(crate) model: Master,
    pub(crate) clock: MasterClock,
    /// Connections it accepted and has not closed, by id.
    pub(crate) conns: Vec<usize>,
    /// Stopped until then (`SIGSTOP`): it reads nothing, but its host
    /// still accepts connects.
    pub(crate) paused_until: u64,
    /// Down (crashed) until it restarts at this time: connects are
    /// refused.
    pub(crate) down: bool,
    /// Snapshots taken so far (an RDB file, as it was at each time).
    pub(crate) snapshots: Vec<(u64, Snapshot)>,
    /// The other clients' connection to it.
    pub(crate) writer: Option<crate::Conn>,
    /// How far its clock was stepped back so far, ns: keys live that much
    /// longer.
    pub(crate) stepped_back: u64,
    /// Its fence keys (the counter and the loss id) when it crashed.
    pub(crate) fence_keys: FenceKeys,
}

/// A master's fence counter and loss id, as they are at one moment.
pub(crate) type FenceKeys = [Option<Vec<u8>>; 2];

impl MasterProc {
    pub(crate) fn new(model: Master, clock: MasterClock) -> MasterProc {
        MasterProc {
            model,
            clock,
            conns: Vec::new(),
            paused_until: 0,
            down: false,
            snapshots: Vec::new(),
            writer: None,
            stepped_back: 0,
            fence_keys: [None, None],
        }
    }

    /// Its fence counter and loss id at global time `t`.
    pub(crate) fn fence_keys(&self, t: u64) -> FenceKeys {
        let now_us = self.clock.now_us(t);
        [redlock_mio::FENCE_KEY, redlock_mio::FENCE_LOST_KEY].map(|key| {
            self.model
                .get(0, key.as_bytes(), now_us)
                .map(<[u8]>::to_vec)
        })
    }

    /// Whether it runs commands at `t`.
    pub(crate) fn runs(&self, t: u64) -> bool {
        !self.down && self.paused_until <= t
    }
}

/// What the other clients write: commands, each its words, on
/// `resources` (the locks' names) and `channels` (the clients' wake
/// channels), every key they make expiring within `max_ttl_ms`.
pub(crate) fn foreign_write(
    rng: &mut super::rng::Rng,
    resources: &[Vec<u8>],
    channels: &[Vec<u8>],
    max_ttl_ms: u64,
    dead_only: bool,
) -> Vec<Vec<Vec<u8>>> {
    let resource = resources[rng.index(resources.len())].clone();
    let queue = super::queue_key(&resource);
    if dead_only {
        return vec![dead_waiters(rng, &queue)];
    }
    let ttl = rng.range(1, max_ttl_ms).to_string().into_bytes();
    let word = |s: &str| s.as_bytes().to_vec();
    let expire = |key: &[u8]| vec![word("PEXPIRE"), key.to_vec(), ttl.clone()];
    match rng.below(10) {
        // A holder of the resource that is not a Redlock client: it looks
        // like contention (NX: it never takes a key from a holder).
        0 | 1 => vec![vec![
            word("SET"),
            resource,
            word("foreign"),
            word("NX"),
            word("PX"),
            ttl,
        ]],
        // Keys of its own.
        2 => vec![vec![
            word("SET"),
            word("other:key"),
            word("v"),
            word("PX"),
            ttl,
        ]],
        // Junk and strangers in a wait queue, which the scripts skip.
        3 => {
            let member = match rng.below(3) {
                0 => b"junk".to_vec(),
                1 => b"0|1|redlock-mio:wake:0000000000000000".to_vec(),
                _ => format!(
                    "{}|{}|redlock-mio:wake:00000000deadbeef",
                    rng.range(1, 999),
                    rng.below(9)
                )
                .into_bytes(),
            };
            let score = rng.below(1 << 50).to_string().into_bytes();
            vec![
                vec![word("ZADD"), queue.clone(), score, member],
                expire(&queue),
            ]
        }
        // A queue of the wrong type, or a lock key of the wrong type.
        4 => vec![
            vec![word("RPUSH"), queue.clone(), word("x")],
            expire(&queue),
        ],
        // (The world writes a list only where no string is: a lock's key
        // is never taken from its holder.)
        5 => vec![
            vec![word("RPUSH"), resource.clone(), word("x")],
            expire(&resource),
        ],
        // A wake-up nobody sent: a hint, never a grant.
        6 if !channels.is_empty() => {
            let channel = channels[rng.index(channels.len())].clone();
            let payload = match rng.below(3) {
                0 => format!("{}", rng.range(1, 200) << 16 | rng.below(4)),
                1 => format!(
                    "{} {}",
                    rng.range(1, 200) << 16 | rng.below(4),
                    rng.below(500)
                ),
                _ => "garbage".to_owned(),
            };
            vec![vec![word("PUBLISH"), channel, payload.into_bytes()]]
        }
        // The script cache emptied: the next EVALSHA meets NOSCRIPT.
        7 => vec![vec![word("SCRIPT"), word("FLUSH")]],
        // The crate's own keys written by someone else, for a while.
        8 => {
            let key = [redlock_mio::LONGEST_TTL_KEY, redlock_mio::MARKER_KEY][rng.index(2)];
            vec![vec![
                word("SET"),
                word(key),
                word("foreign"),
                word("PX"),
                ttl,
            ]]
        }
        // A crashed process's waiters, in front of a queue that is there
        // (the world adds them only then).
        9 if rng.chance(0.5) => vec![dead_waiters(rng, &queue)],
        _ => vec![vec![word("PING")]],
    }
}

/// A crashed process's waiters (1 to 23 of them), to put in front of
/// `queue`: nobody hears their channel, and a hand-off skips them
/// however many. `ZADDDEAD` is the world's word for a `ZADD` it sends
/// only where the queue is there (one it made would never expire).
fn dead_waiters(rng: &mut super::rng::Rng, queue: &[u8]) -> Vec<Vec<u8>> {
    let mut zadd = vec![b"ZADDDEAD".to_vec(), queue.to_vec()];
    let client = rng.next_u64() | 1;
    for id in 0..rng.range(1, 24) {
        zadd.push(rng.below(1000).to_string().into_bytes());
        zadd.push(format!("50|{id}|redlock-mio:wake:{client:016x}").into_bytes());
    }
    zadd
}
