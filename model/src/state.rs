//! The state of the modelled system: three masters, the clients, the
//! requests on the wire, the time, and the ghost record of the fences
//! handed out (which only the invariants read).

use crate::config::{Config, EPOCH_TICKS, MAX_CLIENTS, N, READ_US, TICK_US};

/// A lock's token: attempt `attempt` (from 1) of client `client`. Tokens
/// never repeat, as the library's random tokens do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token {
    /// The client that drew it.
    pub client: u8,
    /// Which of its attempts.
    pub attempt: u8,
}

/// A lock key on a master: who holds it, and the first tick at which it
/// may expire (its holder's validity has ended by then).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    /// The token the key holds.
    pub token: Token,
    /// It may expire from this tick on, and never before.
    pub expires: u8,
}

/// One master's data and clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Master {
    /// The resource's lock key.
    pub key: Option<Key>,
    /// `redlock-mio:fence`.
    pub counter: Option<u64>,
    /// `redlock-mio:fence-lost`: the loss id.
    pub lost: Option<u64>,
    /// How far its wall clock is from the true time, in ticks.
    pub offset: i64,
    /// How many times it lost its data: the generation of its loss id.
    pub losses: u8,
    /// How many times its clock stepped.
    pub steps: u8,
    /// How many times a script read its clock (`TIME`).
    pub time_reads: u8,
}

/// The loss id master `m` reports in its generation `losses`. A real loss
/// id is the master's clock when it first found its counter missing; all
/// the protocol asks of it is to differ from every other loss's id,
/// which this one does by construction.
pub fn loss_id(m: usize, losses: u8) -> u64 {
    (u64::from(losses) + 1) << 8 | (m as u64 + 1)
}

/// The master a loss id belongs to, and its generation.
pub fn loss_of(id: u64) -> (usize, u8) {
    (
        ((id & 0xff) as usize).saturating_sub(1),
        ((id >> 8) as u8).wrapping_sub(1),
    )
}

/// A request a client sent to a master, as the script it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Request {
    /// `FENCE_READ_SCRIPT`.
    Read,
    /// `FENCE_SYNC_SCRIPT` with the value, the mode (`start` or a repair)
    /// and the loss ids it may repair (sorted, 0 for none).
    Sync {
        /// `ARGV[1]`; with [`ClockStart::Own`](crate::config::ClockStart::Own)
        /// ignored, each master taking its own clock.
        value: u64,
        /// `ARGV[2] == "start"`.
        start: bool,
        /// `ARGV[3..]`.
        ids: [u64; N],
    },
    /// `FENCED_ACQUIRE_SCRIPT` for the lock's key.
    Acquire {
        /// `ARGV[1]`.
        token: Token,
        /// The first tick the key may expire at: the end of the lock's
        /// validity, `t0 + validity` (`PX ttl` from when the script runs
        /// lasts at least that long).
        expires: u8,
    },
    /// `RAISE_SCRIPT`.
    Raise {
        /// `ARGV[1]`.
        token: Token,
        /// `ARGV[2]`.
        fence: u64,
    },
    /// `RELEASE_SCRIPT`.
    Release {
        /// `ARGV[1]`.
        token: Token,
    },
}

/// A request queued on the connection of `client` to `master`. The
/// connections are FIFO: a master runs each client's requests in the
/// order they were sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Msg {
    /// The client that sent it.
    pub client: u8,
    /// The master it goes to.
    pub master: u8,
    /// Whether its reply goes to the client's round in progress (a
    /// request of a round that has ended, or a release, gets its reply
    /// dropped, as the link drops replies of ended rounds).
    pub live: bool,
    /// What it runs.
    pub request: Request,
}

/// A master's state in a round, as `rules::NodeState` with the values
/// `rules::Round` keeps beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Node {
    /// No answer yet.
    Pending,
    /// Did what was asked; the count (`Reply::Count`), else 0.
    Ok(u64),
    /// Refused.
    Refused,
    /// Counter missing (or, for a read, started from the clock and not
    /// raised since): the loss id (0 if not told) and, for a read, the
    /// larger of the master's clock and its counter (`Reply::UnsyncedRead`),
    /// and the clock alone (which the library's client does not keep:
    /// the model's reverted rule [`ClockStart::One`](crate::config::ClockStart::One)
    /// takes it).
    Unsynced {
        /// The loss id.
        lost: u64,
        /// The larger of a read's `TIME` and counter, else 0.
        clock: u64,
        /// A read's `TIME`, else 0.
        time: u64,
    },
    /// Failed or timed out.
    Failed,
}

/// How a round ended, as `rules::Decision`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decision {
    /// A quorum did what was asked (for an acquire, with validity left).
    Quorum,
    /// A quorum granted an acquire when no validity was left.
    TooSlow,
    /// No quorum.
    NoQuorum,
}

/// The kind of a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// A fence read (waits for every master).
    Read,
    /// A fence sync (waits for every master).
    Sync,
    /// A fenced acquire.
    Acquire,
    /// A raise.
    Raise,
}

/// One round in flight, as `rules::Round`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Round {
    /// What it runs.
    pub op: Op,
    /// Its `t0`, in ticks.
    pub started: u8,
    /// Each master's state.
    pub nodes: [Node; N],
    /// The decision, once taken.
    pub decided: Option<Decision>,
}

/// Where a client's fenced acquire attempt is (`Step` of
/// `src/client/fence.rs`, with what each step keeps).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Between attempts.
    Idle,
    /// Reading every counter.
    Read,
    /// Putting masters back in sync.
    Sync {
        /// Whether the sync starts the counters from the clocks (a start
        /// that reaches a quorum counts as the client's last read).
        start: bool,
    },
    /// Acquiring the lock.
    Acquire,
    /// Raising the counters to `fence`; the lock is valid until
    /// `valid_until`.
    Raise {
        /// The fence counted by the acquire.
        fence: u64,
        /// `t0 + validity`.
        valid_until: u8,
    },
    /// Holding the lock with its fence (until it releases).
    Holding {
        /// The fence.
        fence: u64,
    },
}

/// What a client knows of the masters' counters (`FenceBook`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Book {
    /// Per master: the loss id it reported, and the tick this client
    /// first saw it.
    pub lost: [Option<(u64, u8)>; N],
    /// When the counters were last read.
    pub last_read: Option<u8>,
}

/// One client: its book and its one attempt in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Client {
    /// Its fence book.
    pub book: Book,
    /// Attempts started so far (the current token's `attempt`).
    pub attempts: u8,
    /// Where its attempt is.
    pub phase: Phase,
    /// The round of `phase`, if it runs one.
    pub round: Option<Round>,
    /// The loss ids this client knew of each master when its read round
    /// began (0: none), for [`StartRule::Confirmed`](crate::config::StartRule::Confirmed).
    pub known: [u64; N],
    /// Whether this attempt read again to confirm a start.
    pub reread: bool,
    /// The largest fence of the holdings that had ended (released, or
    /// past their validity) when this client's acquire round began; 0 if
    /// none (ghost state, for [`Order::Ended`](crate::config::Order::Ended)).
    pub after: u64,
}

/// A fence handed out to a holder (ghost state, for the invariants).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Issued {
    /// The fence.
    pub fence: u64,
    /// The masters whose raise the holder saw done, bit `i` for master
    /// `i`: the raise quorum `R` of the proof.
    pub raised: u8,
    /// The holding's token.
    pub token: Token,
    /// The tick its validity ends at.
    pub valid_until: u8,
    /// Whether its holder released it.
    pub released: bool,
}

/// The whole system.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    /// The tick.
    pub now: u8,
    /// The masters.
    pub masters: [Master; N],
    /// The clients (the first `clients` of them are in use).
    pub clients: [Client; MAX_CLIENTS],
    /// How many clients run.
    pub client_count: u8,
    /// The requests on the wire, grouped by (client, master), in the
    /// order sent within each group.
    pub wire: Vec<Msg>,
    /// The fences handed out, in the order their holdings began.
    pub issued: Vec<Issued>,
}

impl State {
    /// The state before anything ran: a new deployment (no counter on any
    /// master), every client idle.
    pub fn initial(config: &Config) -> State {
        let idle = Client {
            book: Book::default(),
            attempts: 0,
            phase: Phase::Idle,
            round: None,
            known: [0; N],
            reread: false,
            after: 0,
        };
        State {
            now: 0,
            masters: config.offsets.map(|offset| Master {
                key: None,
                counter: None,
                lost: None,
                offset,
                losses: 0,
                steps: 0,
                time_reads: 0,
            }),
            clients: [idle; MAX_CLIENTS],
            client_count: config.clients as u8,
            wire: Vec::new(),
            issued: Vec::new(),
        }
    }

    /// Master `m`'s wall clock in microseconds, as its next `TIME` reads
    /// it: its ticks, plus [`READ_US`] for every earlier reading, so that
    /// two readings of one clock differ by more than every fenced
    /// acquisition a bounded run can make (the documented assumption of a
    /// start from the clocks, which only a step back breaks).
    pub fn clock(&self, m: usize) -> u64 {
        let master = &self.masters[m];
        let ticks = EPOCH_TICKS + i64::from(self.now) + master.offset;
        (ticks.max(1) as u64) * TICK_US + READ_US * (u64::from(master.time_reads) + 1)
    }

    /// The clients in use.
    pub fn clients(&self) -> &[Client] {
        &self.clients[..usize::from(self.client_count)]
    }

    /// Where the first request from `client` to `master` sits on the
    /// wire, if any.
    pub fn head(&self, client: u8, master: u8) -> Option<usize> {
        self.wire
            .iter()
            .position(|msg| msg.client == client && msg.master == master)
    }

    /// Queues `request` from `client` to every master, behind what the
    /// client already sent to each.
    pub fn send(&mut self, client: u8, request: Request, live: bool) {
        for master in 0..N as u8 {
            let msg = Msg {
                client,
                master,
                live,
                request,
            };
            // Behind the last of its group, so that groups stay together.
            let at = self
                .wire
                .iter()
                .rposition(|m| (m.client, m.master) <= (client, master))
                .map_or(0, |i| i + 1);
            self.wire.insert(at, msg);
        }
    }

    /// The replies of `client`'s requests still on the wire will find no
    /// round: its round has ended.
    pub fn orphan(&mut self, client: u8) {
        for msg in self.wire.iter_mut().filter(|m| m.client == client) {
            msg.live = false;
        }
    }
}
