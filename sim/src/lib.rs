//! A deterministic model of the Redis masters `redlock-mio` talks to, for
//! simulation: a [`Master`] takes the bytes a client sends and gives the
//! bytes a real master would reply, on a clock passed in.
//!
//! It is the building block of the simulator, [`simulate`], in the style
//! of FoundationDB's and TigerBeetle's: the client's sans-IO core (its
//! per-master sessions, its table of rounds and waits, its rules, through
//! `redlock_mio::sim`) runs against simulated masters over a simulated
//! network with simulated clocks, and a seed decides everything. The model
//! reads no real clock, opens no socket and draws nothing at random but
//! from its seed, so the same calls give the same bytes.
//!
//! ```
//! use redlock_mio_sim::{ConnState, Master};
//!
//! let mut clock_us = 1_700_000_000_000_000; // the master's own wall clock
//! let mut master = Master::new(42, clock_us).with_password("secret");
//! let mut conn = master.connect();
//! let mut replies = Vec::new();
//! let sent = b"*2\r\n$4\r\nAUTH\r\n$6\r\nsecret\r\n\
//!              *6\r\n$3\r\nSET\r\n$3\r\nres\r\n$3\r\ntok\r\n$2\r\nNX\r\n$2\r\nPX\r\n$3\r\n100\r\n";
//! assert_eq!(master.handle(&mut conn, sent, clock_us, &mut replies), ConnState::Open);
//! assert_eq!(replies, b"+OK\r\n+OK\r\n");
//!
//! // The key expires on the master's clock: present through its last
//! // millisecond, absent after it.
//! clock_us += 100_999;
//! assert_eq!(master.get(0, b"res", clock_us), Some(&b"tok"[..]));
//! clock_us += 1;
//! assert_eq!(master.get(0, b"res", clock_us), None);
//!
//! // A crash that loses the data set: a new run id, connections closed.
//! master.restart(clock_us);
//! assert_eq!(master.handle(&mut conn, b"*1\r\n$4\r\nPING\r\n", clock_us, &mut replies), ConnState::Closed);
//! ```
//!
//! # What the model implements
//!
//! Exactly what the client sends, what its scripts call, and what the
//! tests need to stand for other clients, with Redis 7's semantics:
//!
//! | command | as the client or a test uses it |
//! |---|---|
//! | `AUTH [user] password`, `HELLO [2\|3 [AUTH user password] [SETNAME name]]` | login ([`Master::with_password`]; only the `default` user exists); `HELLO 3` switches the connection to RESP3 (nulls `_`, `INFO` a verbatim string, `HELLO` a map, pushes `>`) |
//! | `SELECT db` | 16 databases |
//! | `SCRIPT LOAD`, `SCRIPT EXISTS`, `SCRIPT FLUSH`, `EVAL`, `EVALSHA` | the script cache: `SCRIPT LOAD` of a known text gives its SHA-1, `EVAL` of a known text runs and caches it, `EVALSHA` of a SHA-1 not cached is `-NOSCRIPT` |
//! | `INFO [section...]` | `run_id` (40 hex digits, new at every start), `uptime_in_seconds`, `server_time_usec`, `role:master`, `cluster_enabled:0`, whatever the sections asked |
//! | `SET key value [NX\|XX] [GET] [EX s\|PX ms\|KEEPTTL]` | the acquire (`SET NX PX`), the handshake's marker and longest TTL (`SET NX GET`), a hand-off's reservation, other clients' writes |
//! | `GET`, `DEL`, `EXISTS`, `TYPE`, `PTTL`, `PEXPIRE [NX\|XX\|GT\|LT]`, `INCR` | what the scripts call (`PTTL` and `PEXPIRE` on the wait queues too), and other clients' reads and writes |
//! | `ZADD key [NX\|XX] [GT\|LT] [CH] score member...`, `ZREM`, `ZRANGE key start stop [REV]`, `ZCARD`, `ZSCORE`, `ZRANK key member` | the wait queues (`redlock-mio:queue:<key>`): members ordered by score (a double, read as `strtod` reads it), then by their bytes; a set left empty is deleted. `ZADD INCR` and `ZRANGE`'s `BYSCORE`, `BYLEX`, `LIMIT` and `WITHSCORES` are refused with an error that says so |
//! | `SUBSCRIBE channel...`, `UNSUBSCRIBE [channel...]`, `PUBLISH channel message` | the wake-ups: `SUBSCRIBE` and `UNSUBSCRIBE` confirm each channel with a push (`subscribe <channel> <count>`); `PUBLISH` gives how many connections listen and writes `message <channel> <payload>` to each |
//! | `RPUSH` | a key of another type (`WRONGTYPE` where a script expects a string or a sorted set) |
//! | `CLIENT TRACKING ON\|OFF [OPTIN] [NOLOOP]`, `CLIENT CACHING YES` | the loss watch: a RESP3 connection that tracks remembers the keys its read-only commands name (with `OPTIN`, only right after `CLIENT CACHING YES`; a script's reads too, for the keys [`ScriptReads`] says), and any change of such a key (written, deleted, its expiry changed, expired on access, evicted) pushes `invalidate [key]` to it once and forgets the key (after the reply, if its own command changed it); `NOLOOP` leaves a connection untold of its own changes (its scripts' too), the key forgotten all the same; `FLUSHALL` pushes `invalidate` with a null to every tracking connection. `OFF` keeps the keys remembered for when tracking is on again; `ON` again switches the mode. A RESP2 connection may track and is told nothing. `REDIRECT`, `BCAST`, `PREFIX`, `OPTOUT` and `CACHING NO` are refused (with a server's own error where it refuses them) |
//! | `TIME`, `FLUSHALL`, `PING`, `QUIT` | the fence scripts' clock, a wiped master, probes |
//!
//! Every script of [`redlock_mio::scripts`] (release and the release of
//! several keys, which hand each freed key to its first waiter; extend,
//! the all-or-nothing acquire and extend of several keys; the fence
//! scripts: fenced acquire, raise, read, sync; the acquires that wait,
//! fenced or not, and the leave) runs from its own Lua text, in Lua 5.1
//! as on Redis and Valkey: each master has a Lua state of its own and
//! compiles each script once in it, so the simulator checks the scripts
//! the masters run, not a copy. A script gets what Redis 7 gives it in
//! RESP2: `KEYS` and `ARGV` as byte strings; `redis.call` and
//! `redis.pcall`, which run commands through the same table as a client's
//! on a client of the script's own (it starts on the caller's database;
//! `EVAL`, `SCRIPT`, `AUTH`, `HELLO`, `QUIT` and the subscriptions are
//! refused, as `noscript` commands are); `redis.error_reply` and
//! `redis.status_reply`; Redis's conversions (a reply's integer a Lua
//! number, a null `false`, a status `{ok = ...}`, an error `{err = ...}`;
//! a Lua number passed to a command written `%.17g`, one returned
//! truncated to an integer, `true` 1, a table with `err` an error reply);
//! globals that a script may neither set nor read when absent. A
//! `redis.call` that fails ends the script with `<error> script: <sha>,
//! on @user_script:<line>.`, and the writes before it stay (a
//! publication included); `redis.pcall` hands the error on as a value. The time the scripts read (`TIME`) is the master's clock at
//! the script's start.

//! Checks before a command run in Redis's order: unknown command or
//! subcommand, then the number of arguments, then the login (`-NOAUTH`),
//! then subscribe mode. Error replies carry Redis's codes (`ERR`,
//! `WRONGTYPE`, `NOSCRIPT`, `NOAUTH`, `WRONGPASS`, `NOPROTO`, the scripts'
//! own `FOREIGNKEY`); their wording follows Redis 7.0 but is not part of
//! the contract. A connection that has not logged in may send no command
//! of more than 10 words, nor a word of more than 16 KiB: as a server
//! does, the model replies `-ERR Protocol error` and closes it.
//!
//! Connections and pub/sub: the master knows which connection listens to
//! which channels. A push to a connection waits in the master until that
//! connection's next [`Master::handle`], which writes it before the
//! replies, or until [`Master::take_pushes`]; a push caused by the
//! connection's own command (a `PUBLISH`, a script that publishes, on a
//! channel it listens to) goes before that command's reply or after it,
//! as the server modelled does ([`PushOrder`]: Redis 7.0 before, Valkey 8
//! after). A RESP2 connection that listens is in subscribe mode, as on a
//! server: its messages come as arrays (`*3 message <channel> <payload>`),
//! and it may send only `SUBSCRIBE`, `UNSUBSCRIBE`, `PING` (answered
//! `*2 pong <message>`) and `QUIT`; anything else is refused. The client
//! itself subscribes only after `HELLO 3` has succeeded, so it never meets
//! subscribe mode. [`Master::close`] is the client closing a connection:
//! its subscriptions go (a connection dropped without it still counts for
//! `PUBLISH`).
//!
//! Time is the master's own wall clock, passed to every call in
//! microseconds since the Unix epoch (what `TIME` returns). A key with an
//! expiry time `at` in milliseconds is present while the clock's
//! milliseconds are at most `at` and absent after (Redis's `now > at`); a
//! script sees the clock of its start throughout. Restarts are
//! [`Master::restart`] (the data set lost) and [`Master::restore`] (back
//! from a [`Snapshot`] taken earlier, as from an old RDB file); both give a
//! new run id, an empty script cache and close every connection, whose
//! subscriptions go with it. A master short of memory drops a key as its
//! `maxmemory-policy` lets it: [`Master::evict`] ([`Eviction`]: keys with
//! an expiry only, or any key).
//!
//! # What it leaves out
//!
//! - Inline commands (a request that is not a RESP array): the model
//!   replies `-ERR Protocol error` and closes the connection, where a
//!   server would run them. The client never sends them.
//! - Everything not in the table above: transactions, pattern and shard
//!   subscriptions (`PSUBSCRIBE`, `SSUBSCRIBE`), `RESET`, `PUBSUB`,
//!   keyspace notifications, client tracking but as the table says,
//!   blocking commands, other
//!   data types and their commands, the sorted-set options named above,
//!   `EXAT`/`PXAT`, ACL users other than `default`, `CLIENT` but its
//!   tracking, `CONFIG`,
//!   `DEBUG`, the other `INFO` fields.
//! - Orders a server leaves to its hash tables: `UNSUBSCRIBE` without a
//!   channel confirms the channels in byte order, where servers differ.
//! - Scores printed for a RESP2 reply (`ZSCORE`) are `%.17g`, as Redis 7.0
//!   prints them; Valkey prints the shortest text (`0.1` where Redis gives
//!   `0.10000000000000001`). The two agree on integers, which is what the
//!   client's places are.
//! - Of Lua: a script the model does not know (not one of the crate's)
//!   is an error reply. The libraries `bit`, `cjson`, `struct` and
//!   `cmsgpack` are missing, and so is `math.random` (a script that calls
//!   it fails, where the model would draw from the C library's state);
//!   the globals are protected by a metatable, which `rawset` gets past
//!   where Redis's read-only tables hold; a script's own
//!   `pcall(redis.call, ...)` catches an error of the model's, not the
//!   error table.
//! - What a real server does on its own: background expiry (observable
//!   only by a connection that tracks the key, which a server tells of
//!   the expiry when its timers find it, and the model at the access
//!   that expires it), memory and eviction
//!   (a key goes only when the caller says, [`Master::evict`], under the
//!   `maxmemory-policy` it names), query-buffer and output-buffer limits
//!   (a listener that never reads is never cut off), persistence other
//!   than the snapshots the caller takes, replication, script timeouts
//!   (`BUSY`).
//!
//! # How it is kept faithful
//!
//! The differential test (`cargo test -p redlock-mio-sim`, in
//! `tests/differential/`) generates seeded random cases of what the client
//! really sends — its pipelined handshake (with failed logins, `HELLO 3`,
//! `SELECT`, the `SUBSCRIBE` to its wake channel, `CLIENT TRACKING`),
//! `SET NX PX`, every
//! script by `EVALSHA` or `EVAL` — from four connections, some listening
//! to wake channels and some not (one now and then in RESP2 subscribe
//! mode), mixed with other clients' writes (foreign values and keys of
//! another type in the reserved `redlock-mio:` space, on the lock keys and
//! in the wait queues, with members and scores of every form the scripts
//! meet; fence counters and loss ids present, missing, foreign, of another
//! type, for the fenced acquires that wait as for the others),
//! publications on the wake channels, `SCRIPT FLUSH`, `FLUSHALL`,
//! clock moves around the millisecond and second boundaries (which expire
//! reservations and queues), restarts and restores from snapshots. Every
//! other case is mostly the wait queue's, so that queues build up and
//! releases hand keys off. Client tracking is in the cases as the loss
//! watch uses it: connections that speak RESP3 turn on `CLIENT TRACKING
//! ON OPTIN NOLOOP` (now and then another mode, `OFF`, or tracking on
//! RESP2) and read lock keys after `CLIENT CACHING YES` (now and then
//! without it, or with a command or a script between), while the other
//! traffic changes those keys from the same connection and others; the
//! forms the model refuses are sent as a server refuses them too. Each
//! case runs on a real `redis-server` (`REDIS_SERVER` picks the binary;
//! `valkey-server` passes too, the model told where that server puts a
//! push and which keys a script's reads track) and on the model; the
//! model receives the same bytes cut at random places. Every frame each
//! connection receives is compared, replies and pushes (messages and
//! invalidations), in order: exactly, except error wording (by code),
//! `INFO` (by the fields above) and `HELLO` (by protocol and role). The
//! server runs under an `LD_PRELOAD` shim whose wall clock the test sets,
//! with its background expiry off, so expiry, `PTTL`, `TIME`, the fence
//! scripts' loss ids and the invalidations of expired keys compare
//! exactly, with no tolerance and no sleep. A failure prints the seed,
//! the steps up to the first difference and a smaller failing case.
//! `SIM_DIFF_CASES=N` runs a longer campaign, `SIM_DIFF_SEED=S` one
//! case.
//!
//! # The simulator
//!
//! [`simulate`] runs one world from a seed: two to five clients, each the
//! library's core with its own clock (rates up to 0.3% off), driven by
//! this crate's front end ([`client::Client`], which runs the library's
//! own machines through the door `redlock_mio::sim`), against one
//! to five masters with theirs, over a network of FIFO streams with their
//! own delays, spikes and writes cut in pieces. The wall clocks (a
//! waiter's place is its client's) are hours or days apart, or, in half
//! of the worlds, in sync but for some clients' off by a second to an
//! hour. Callers acquire (once, or
//! waiting, with the front end's own pursuit between attempts), hold,
//! extend, release, forget their locks and drop calls half-way, on a few
//! resources (binary names among them), and ask for names in the crate's
//! key space, which must be refused before anything is sent. In some
//! worlds some locks are kept: the caller hands the lock to a keeper, the
//! keeper thread's own machine (`redlock_mio::sim::calls::Keeping`, the
//! library's `calls::Keeping`, which takes every decision of the keeping) driven
//! with the simulated time as the thread drives it: it wakes when the
//! keeping says (late only when its client is paused), extends and
//! releases when it says so, hands each result in, and reports the
//! standings it gives; the holder asks for the release at the end of the
//! intended hold (now and then past a hold limit). All, some or
//! none of a world's clients are fenced: each of their attempts, plain or
//! waiting, is the front ends' own fenced machine (`client/fence.rs`: a
//! read and a sync of the counters when due, the acquire, the raise), run
//! step by step, so that what the checkers hold to the guarantees is the
//! library's code and not a copy of it. The faults: pauses of clients and
//! masters, crashes and restarts (empty, or from an older snapshot; with
//! the restart guard, or delayed past the longest TTL, or neither, which
//! counts as a loss), connections reset, partitions (what they held gets
//! through at its sender's next retransmission once they heal, from
//! sockets the client has closed too), `FLUSHALL` (a loss), steps back of
//! a master's clock, evictions (in some worlds the masters evict under a
//! `volatile-*` policy, keys with an expiry only, or an `allkeys-*` one,
//! any key; the crate asks for `noeviction`, so a lock's key evicted
//! counts as a loss, and a fence counter or loss id evicted leaves
//! fencing's assumptions), an operator's removal of a watched lock's key
//! on one master (a `DEL`, an overwrite, a `FLUSHALL`: in half of the
//! worlds a share of the locks won are watched for a loss,
//! [`client::Client::watch`] as `Redlock::watch` does it, read
//! again after each extend, stopped at the release), and other clients'
//! writes (foreign holders, junk
//! and strangers in the wait queues, keys of the wrong type, wake-ups
//! nobody sent, `SCRIPT FLUSH`).
//!
//! Then the checkers: no two holders of a resource within their
//! validities (each as its client computed it from its round's start,
//! mapped to global time through its clock; a kept lock's renewed only by
//! the extensions that reached a quorum, and no longer counted once its
//! keeper reported it lost), unless every master that granted both lost
//! its data in between; the standings each keeper reports, as
//! `redlock_mio::Standing` documents them (held after an extension that
//! reached a quorum, at risk after one that missed it with validity left,
//! lost once a quorum said the token is gone or the validity ran out,
//! released at the end of the release unless a quorum said the token was
//! gone; nothing else, and nothing after a final one, which every kept
//! lock reaches); each keeper sending, once its release is asked for, the
//! release, once, and nothing after it; each keeper's wakes no later than its documentation
//! promises (a period after the last extension's wake, a quarter period
//! after a missed one, by the validity's end, with the time its client
//! was paused on top); fences that grow in the order
//! holdings of a resource began, as `redlock_mio::fencing` states it
//! (a holding whose acquire started after another began has the larger
//! fence, whatever masters lost of their whole data sets; when no master
//! lost anything, every holding that began later has), unless a master
//! left fencing's assumptions in between (restarted from an older
//! snapshot that brought back an old counter or loss id; its counter or
//! loss id evicted; a start from the clocks after a clock stepped back);
//! every call within its documented bound (a fenced attempt a request
//! timeout per round it ran, at most five and two when no read was due,
//! and the time its client was paused); no fenced attempt `Unfenced`
//! while every master answered its rounds, unless a master lost data or a
//! server is listed twice; nothing but the crate's permanent keys left on
//! any master once the clients are quiet, after the longest TTL and the
//! wait queue's margin; no busy loop; on each master, no acquire that
//! waits taking a key while a waiter of another client, queued there
//! before it and put ahead of it by the bound on a client's clock error
//! (a place within a second of the master's clock), is still queued
//! (the queues watched before and after every script that touches them,
//! `world/places.rs`); a watch that reports its lock lost only once
//! fewer than a quorum of masters held its token since it started, and
//! that reports a loss to an operator's removal within the push's and the
//! read's trips (`world/watch.rs` says what excuses it). Each is proved
//! able to fail by a
//! deliberate [`Regression`], or, where the bug would be the client's,
//! by a patch of `.ci/regressions`.
//! `tests/simulate.rs` runs the short form and says how to run a long
//! campaign and replay a seed.
//!
//! # Adding to it
//!
//! - A command: one arm in `commands::lookup` (name, arity, function) and
//!   its function, in `commands/keys.rs` for commands on keys (on sorted
//!   sets: `commands/zsets.rs`).
//! - A script: nothing here. The model runs every script of
//!   `redlock_mio::scripts::Script::ALL` from its text; only a command the
//!   script calls that the model lacks needs adding (above).
//! - A data type: a variant of `keyspace::Value` with its `TYPE` name.
//!
//! Then cases for it in the differential test's generator, so that a real
//! server checks what was written.

pub mod client;
mod commands;
mod keyspace;
mod master;
mod numbers;
mod pubsub;
mod reply;
mod request;
mod scripts;
mod server;
mod tracking;
mod world;
mod zset;

pub use master::{
    Conn, ConnState, Eviction, HandoffFault, Master, Moment, Observe, PushOrder, ScriptReads,
    Snapshot,
};
pub use reply::Protocol;
pub use world::{Options, Outcome, Regression, simulate};

/// The version the model reports (`INFO`'s `redis_version`, `HELLO`'s
/// `version`): the Redis it follows.
const VERSION: &str = "7.0.0";

/// The next number of SplitMix64 from `state` (which it moves on): the
/// one generator of the model's run ids, the simulator and the
/// differential test, small, seedable and the same everywhere.
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests;
