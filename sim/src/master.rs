//! [`Master`]: one simulated master, its connections, restarts and
//! snapshots.

use crate::commands::execute;
use crate::keyspace::{Keyspace, Now, Value};
use crate::reply::{Protocol, Reply};
use crate::request::{Next, Requests};
use crate::server::Server;

/// One Redis master, in memory and deterministic: request bytes in, reply
/// bytes out, on a clock the caller passes in.
///
/// Every call that can see time takes `now_us`, the master's own wall
/// clock in microseconds since the Unix epoch (what `TIME` returns). Keys
/// expire on that clock in milliseconds: a key set with `PX ttl` at `now`
/// is absent once the clock has passed `now / 1000 + ttl` ms. The master
/// never reads a real clock and draws nothing at random but from its seed,
/// so the same calls give the same bytes.
///
/// ```
/// use redlock_mio_sim::Master;
///
/// let now_us = 1_700_000_000_000_000;
/// let mut master = Master::new(7, now_us);
/// let mut conn = master.connect();
/// let mut out = Vec::new();
/// // Pipelined, and split anywhere.
/// let request = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
/// master.handle(&mut conn, &request[..20], now_us, &mut out);
/// master.handle(&mut conn, &request[20..], now_us, &mut out);
/// assert_eq!(out, b"+OK\r\n$1\r\nv\r\n");
/// ```
#[derive(Debug, Clone)]
pub struct Master {
    server: Server,
    /// Draws the run ids.
    seed: u64,
    /// Counts the starts: a connection of an earlier one is closed.
    generation: u64,
    push_order: PushOrder,
}

/// A deliberate fault of a master's wait queue, which the scripts that
/// free a key and the acquires that wait run (see
/// [`redlock_mio::scripts`]): each breaks one promise of the waiting
/// calls, of progress or of order. The faulted master runs the scripts'
/// real text with the fault patched in, under the real SHA-1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandoffFault {
    /// The hand-off does nothing: a key freed is left free, and no
    /// waiter is told.
    Untold,
    /// The hand-off's loops (the reservation's and the telling's) each
    /// look at this many entries at most before they give up: past as
    /// many entries nobody hears, the key is left free and nobody told.
    SkipCapped(usize),
    /// A waiter's turn never comes: an attempt hands a free key to the
    /// first in line, however long its turn has been over.
    TurnIgnored,
    /// The acquire that waits queues a waiter where a key holds it out
    /// but leaves the other keys as they are: a key handed to a waiter
    /// for several resources stays reserved for it, while another of its
    /// keys is held, until its window ends.
    KeptForSeveral,
    /// The acquire that waits queues a waiter at the place its client
    /// claims, whatever the master's clock says: a waiter whose client's
    /// wall clock is slow goes ahead of every other by as much.
    PlaceAsClaimed,
}

/// What [`Master::handle_observed`] shows each command to: the master as
/// it is, the command's words, and when.
pub type Observe<'o> = dyn FnMut(&Master, &[Vec<u8>], Moment) + 'o;

/// When [`Master::handle_observed`] shows a command to its observer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moment {
    /// Just before the command runs.
    Before,
    /// Just after it ran.
    After,
}

/// Where a master writes a push to the connection whose command caused it
/// (a `PUBLISH`, or a script that publishes, on a channel that connection
/// listens to), against that command's reply. Pushes caused by other
/// connections come before the replies to whatever the connection sends
/// next, in either case. An invalidation of a key the connection tracks,
/// caused by its own command, comes after that command's reply (and after
/// what it published to itself) in either case: both servers hold it back
/// until the command is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PushOrder {
    /// Before the reply: Redis 7.0, the default.
    #[default]
    BeforeReply,
    /// After the reply (before the next one): Valkey 8, which holds such
    /// pushes back until the command has replied (as, by its source,
    /// Redis does from 7.2 on).
    AfterReply,
}

/// Which keys a connection that tracks every read (or ran the script right
/// after `CLIENT CACHING YES`) is told of when a script it runs calls a
/// read-only command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScriptReads {
    /// The keys the script declared (`EVAL`'s, the whole of `KEYS`), at
    /// each read-only command it calls, whatever that command names: Redis
    /// 7.0, the default.
    #[default]
    DeclaredKeys,
    /// The keys the command names: Valkey 8 (as, by its source, Redis
    /// from 7.2 on).
    CalledKeys,
}

/// One client connection to a [`Master`], from [`Master::connect`]. It
/// keeps what a server keeps per connection (the bytes of a command not
/// yet whole, the selected database, the login, the protocol); the master
/// keeps its subscriptions, until [`Master::close`].
#[derive(Debug)]
pub struct Conn {
    session: crate::server::Session,
    requests: Requests,
    /// The master's start it was opened in.
    generation: u64,
    closed: bool,
}

/// Whether a connection is still open after [`Master::handle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnState {
    /// It takes more requests.
    Open,
    /// The master closed it: it asked to (`QUIT`), sent bytes a server
    /// refuses, or the master restarted since it was opened. Bytes sent
    /// to it are dropped.
    Closed,
}

/// Which keys a [`Master`] short of memory may evict
/// ([`Master::evict`]): its `maxmemory-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eviction {
    /// `volatile-lru`, `volatile-random` and the like: keys with an
    /// expiry only (the locks' keys, the wait queues), never the crate's
    /// permanent keys.
    Volatile,
    /// `allkeys-lru`, `allkeys-random` and the like: any key, the fence
    /// counter and the restart guard's marker included.
    AllKeys,
}

/// The data set of a [`Master`] at one moment ([`Master::snapshot`]),
/// which a restart can come back with ([`Master::restore`]): what an RDB
/// file keeps. Scripts are not in it, as they are not in an RDB file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    dbs: Vec<Keyspace>,
}

impl Master {
    /// A master started at `now_us`, empty, without a password. `seed`
    /// draws its run ids (at this start and every restart).
    pub fn new(seed: u64, now_us: u64) -> Master {
        let mut master = Master {
            server: Server::new(String::new(), Now(now_us), None),
            seed,
            generation: 0,
            push_order: PushOrder::BeforeReply,
        };
        master.start(Now(now_us));
        master
    }

    /// The same master with `requirepass password`: connections must log
    /// in (`AUTH password` or `AUTH default password`) first.
    pub fn with_password(mut self, password: impl AsRef<[u8]>) -> Master {
        self.server.password = Some(password.as_ref().to_vec());
        self
    }

    /// The same master writing a push to the connection that caused it
    /// where `order` says (see [`PushOrder`]).
    pub fn with_push_order(mut self, order: PushOrder) -> Master {
        self.push_order = order;
        self
    }

    /// The same master remembering, for a connection that tracks, the
    /// keys `reads` says when its script reads (see [`ScriptReads`]).
    pub fn with_script_reads(mut self, reads: ScriptReads) -> Master {
        self.server.script_reads = reads;
        self
    }

    /// The same master with a deliberate fault, for proving that a
    /// simulation's checkers catch a master that grants a lock twice:
    /// `SET ... NX` sets the key even when it exists.
    pub fn with_double_grants(mut self) -> Master {
        self.server.double_grants = true;
        self
    }

    /// The same master with a deliberate fault of its wait queue's
    /// hand-off, for proving that a simulation's progress checkers catch
    /// it (see [`HandoffFault`]). The master runs the scripts' real text
    /// with the fault patched in.
    ///
    /// # Panics
    ///
    /// If the scripts no longer hold the text the fault patches: the
    /// fault must be remade against them, never silently lost.
    pub fn with_handoff_fault(mut self, fault: HandoffFault) -> Master {
        crate::scripts::check_fault(fault);
        self.server.handoff_fault = Some(fault);
        self.server.lua = crate::scripts::Interpreter::default();
        self
    }

    /// A new connection.
    pub fn connect(&mut self) -> Conn {
        Conn {
            session: self.server.open_session(),
            requests: Requests::default(),
            generation: self.generation,
            closed: false,
        }
    }

    /// Takes bytes a client sent on `conn` at `now_us`, runs every command
    /// they complete, in order, and appends the replies to `out`. A
    /// command split across calls runs when its last byte arrives. The
    /// pushes written to `conn` since its last call come first (see
    /// [`take_pushes`](Self::take_pushes)), and those its own commands
    /// cause go with their replies (see [`PushOrder`]).
    pub fn handle(
        &mut self,
        conn: &mut Conn,
        input: &[u8],
        now_us: u64,
        out: &mut Vec<u8>,
    ) -> ConnState {
        self.handle_observed(conn, input, now_us, out, &mut |_, _, _| {})
    }

    /// As [`handle`](Self::handle), and shows `observe` the master just
    /// before each command runs and just after, with the command's words:
    /// a checker sees the keyspace between two pipelined commands, and
    /// what one command changed.
    pub fn handle_observed(
        &mut self,
        conn: &mut Conn,
        input: &[u8],
        now_us: u64,
        out: &mut Vec<u8>,
        observe: &mut Observe<'_>,
    ) -> ConnState {
        if self.is_closed(conn) {
            return ConnState::Closed;
        }
        self.take_pushes(conn, out);
        conn.requests.push(input);
        loop {
            match conn.requests.next(conn.session.authenticated) {
                Next::Partial => return ConnState::Open,
                Next::Invalid(reason) => {
                    Reply::error(format!("ERR {reason}")).encode(conn.session.protocol, out);
                    self.end(conn);
                    return ConnState::Closed;
                }
                Next::Command(words) => {
                    observe(self, &words, Moment::Before);
                    let reply = execute(&mut self.server, &mut conn.session, &words, Now(now_us));
                    observe(self, &words, Moment::After);
                    if self.push_order == PushOrder::AfterReply {
                        reply.encode(conn.session.protocol, out);
                    }
                    self.write_pushes(conn, out);
                    if self.push_order == PushOrder::BeforeReply {
                        reply.encode(conn.session.protocol, out);
                    }
                    self.write_after_reply(conn, out);
                    if conn.session.closing {
                        self.end(conn);
                        return ConnState::Closed;
                    }
                }
            }
        }
    }

    /// Appends to `out` the pushes written to `conn` since its last call
    /// or its last [`handle`](Self::handle): the messages published on the
    /// channels it listens to (`>3 message <channel> <payload>` in RESP3,
    /// an array of the same in RESP2) and the invalidations of the keys it
    /// tracks (`>2 invalidate <keys or null>`, RESP3 only), in the order
    /// they were written.
    /// A real server writes them to the socket at once; a simulation
    /// reads them when it delivers that connection's bytes.
    pub fn take_pushes(&mut self, conn: &Conn, out: &mut Vec<u8>) {
        if self.is_closed(conn) {
            return;
        }
        self.write_pushes(conn, out);
        self.write_after_reply(conn, out);
    }

    /// Appends to `out` the pushes written to `conn` that wait for it.
    fn write_pushes(&mut self, conn: &Conn, out: &mut Vec<u8>) {
        for push in self.server.pubsub.take(conn.session.id) {
            push.encode(conn.session.protocol, out);
        }
    }

    /// Appends to `out` the pushes `conn`'s own command caused that a
    /// server writes after that command's reply: the invalidations of the
    /// keys it tracks, which a server holds back until the command is
    /// done, whatever its order for publications ([`PushOrder`]).
    fn write_after_reply(&mut self, conn: &Conn, out: &mut Vec<u8>) {
        for push in self.server.pubsub.take_after_reply(conn.session.id) {
            push.encode(conn.session.protocol, out);
        }
    }

    /// The client closes `conn`: the master forgets its subscriptions, as
    /// a server does when the socket closes. A connection dropped without
    /// this still counts as a listener for `PUBLISH`.
    pub fn close(&mut self, mut conn: Conn) {
        if !self.is_closed(&conn) {
            self.end(&mut conn);
        }
    }

    /// The channels `conn` listens to, in byte order.
    pub fn channels(&self, conn: &Conn) -> Vec<&[u8]> {
        if self.is_closed(conn) {
            return Vec::new();
        }
        self.server.pubsub.channels(conn.session.id).collect()
    }

    /// Whether `conn` tracks keys (`CLIENT TRACKING ON`), and if so
    /// whether only its reads after `CLIENT CACHING YES` (`OPTIN`): for a
    /// test that picks what to send.
    pub fn tracking(&self, conn: &Conn) -> Option<bool> {
        if self.is_closed(conn) {
            return None;
        }
        let mode = self.server.tracking.mode(conn.session.id)?;
        Some(mode.optin)
    }

    /// Whether `conn` is closed: it was closed, or the master has
    /// restarted since it was opened.
    fn is_closed(&self, conn: &Conn) -> bool {
        conn.closed || conn.generation != self.generation
    }

    /// The master closes `conn`.
    fn end(&mut self, conn: &mut Conn) {
        conn.closed = true;
        self.server.pubsub.forget(conn.session.id);
        self.server.tracking.disable(conn.session.id);
    }

    /// A restart at `now_us` that lost every key (no persistence): a new
    /// run id, no script cached, every connection closed (and its
    /// subscriptions gone).
    pub fn restart(&mut self, now_us: u64) {
        for db in &mut self.server.dbs {
            db.clear();
        }
        self.start(Now(now_us));
    }

    /// A restart at `now_us` from `snapshot` (an RDB file, maybe an old
    /// one): its keys come back, with their expiry times (a key whose time
    /// has passed is not loaded, as a master loading an RDB file skips it:
    /// no later access finds it to expire); a new run id, no script
    /// cached, every connection closed.
    pub fn restore(&mut self, snapshot: &Snapshot, now_us: u64) {
        self.server.dbs = snapshot.dbs.clone();
        for db in &mut self.server.dbs {
            db.drop_expired(Now(now_us));
        }
        self.start(Now(now_us));
    }

    /// The data set now, for a later [`restore`](Self::restore).
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            dbs: self.server.dbs.clone(),
        }
    }

    /// A key of database `db` evicted at `now_us`, as a server short of
    /// memory does under `policy` (the connections that track it are
    /// told): the `pick`-th (modulo their number, in
    /// key order) of the live keys `policy` may evict. The model keeps no
    /// access times, so the least recently used and a random key are
    /// alike to it: which one goes is the caller's draw. The key, if
    /// there was one to evict.
    pub fn evict(
        &mut self,
        db: usize,
        policy: Eviction,
        pick: u64,
        now_us: u64,
    ) -> Option<Vec<u8>> {
        let volatile = policy == Eviction::Volatile;
        let key = self
            .server
            .dbs
            .get_mut(db)?
            .evict(volatile, pick, Now(now_us));
        self.server.signal_changes(None);
        key
    }

    /// The run id `INFO` gives: 40 hex digits, new at every start.
    pub fn run_id(&self) -> &str {
        &self.server.run_id
    }

    /// The string `key` holds in database `db` at `now_us`, without
    /// touching the master (for checks of what a master holds): `None` if
    /// the key is missing, expired, or of another type.
    pub fn get(&self, db: usize, key: &[u8], now_us: u64) -> Option<&[u8]> {
        match self.server.dbs.get(db)?.peek(key, Now(now_us))? {
            Value::Str(bytes) => Some(bytes),
            _ => None,
        }
    }

    /// Every key of database `db` live at `now_us`, in order, with when it
    /// expires (ms on the master's clock; `None` for never), without
    /// touching the master.
    pub fn keys(&self, db: usize, now_us: u64) -> Vec<(&[u8], Option<i64>)> {
        self.server
            .dbs
            .get(db)
            .map(|d| d.live_keys(Now(now_us)).collect())
            .unwrap_or_default()
    }

    /// The members of the sorted set `key` holds in database `db` at
    /// `now_us` (a wait queue), in order, with their scores, without
    /// touching the master: empty if the key is missing, expired, or of
    /// another type.
    pub fn members(&self, db: usize, key: &[u8], now_us: u64) -> Vec<(&[u8], f64)> {
        match self
            .server
            .dbs
            .get(db)
            .and_then(|d| d.peek(key, Now(now_us)))
        {
            Some(Value::Zset(zset)) => zset.range(0, -1, false),
            _ => Vec::new(),
        }
    }

    /// A start at `now`: the script cache is empty, connections of the
    /// previous start are closed, and the run id is new.
    fn start(&mut self, now: Now) {
        self.generation += 1;
        self.server.scripts.clear();
        self.server.pubsub.clear();
        self.server.tracking.clear();
        self.server.started = now;
        self.server.run_id = run_id(self.seed, self.generation);
    }
}

impl Conn {
    /// The protocol the connection speaks (`HELLO 3` switches it).
    pub fn protocol(&self) -> Protocol {
        self.session.protocol
    }
}

/// The run id of start `generation` of a master seeded `seed`: 40 hex
/// digits of SplitMix64.
fn run_id(seed: u64, generation: u64) -> String {
    let mut state = seed ^ generation.wrapping_mul(0xA076_1D64_78BD_642F);
    let mut next = || crate::splitmix64(&mut state);
    let (a, b, c) = (next(), next(), next());
    format!("{a:016x}{b:016x}{:08x}", c >> 32)
}
