//! An explicit-state model check of redlock-mio's fencing protocol
//! (`src/fencing.rs` for the scheme and its proof, `src/scripts.rs` for
//! the scripts, `src/client/fence.rs` for the client's state machine).
//!
//! The model runs [`N`](config::N) = 3 masters and up to three clients. A
//! [`search()`] visits, breadth first, every state reachable in up to a given
//! number of steps, each class of states that differ only by the names of
//! masters or clients once, and checks on every step:
//!
//! - **fences grow** ([`Order::Ended`], the guarantee of
//!   `src/fencing.rs` and the default): a holding gets a fence above the
//!   fences of the holdings that had ended before its acquire round began;
//!   or, with [`Order::Began`], above every fence handed out before it
//!   began (holdings begin in the order of the steps that hand them out,
//!   so no fence is handed out twice either, whether or not the holdings
//!   overlap), which a data loss can break;
//! - **invariant (I)** of the proof: every master of a fence's raise quorum
//!   that has a counter has one at least that fence;
//! - **counters never go back** (nor vanish) on a master that kept its
//!   data.
//!
//! The first violation found is one of the fewest steps; it comes back
//! with a readable trace ([`Counterexample`]). The crate's README gives
//! the runs, their figures, and the counterexamples found.
//!
//! # The model
//!
//! - **Masters**: each has the lock key (its token, and the first tick it
//!   may expire at), the counter `redlock-mio:fence`, the loss id
//!   `redlock-mio:fence-lost`, and a wall clock: the true time plus the
//!   master's offset (by default master 0 runs an hour fast), which may
//!   step. A master runs one request at a time, atomically, as Redis runs
//!   a script ([`scripts`] transcribes the library's). A master may lose
//!   its data a bounded
//!   number of times: key, counter and loss id are gone; the requests
//!   queued on it stay, and run on the empty master, as after a `FLUSHALL`
//!   (a restart fails them instead, which a connection reset, when
//!   enabled, adds).
//! - **Clients**: each runs fenced acquire attempts one after another, the
//!   steps of `FencedAcquire` (read and sync when its `FenceBook` says so,
//!   acquire, raise) with the rules of `rules::Round` (quorum, an acquire
//!   too slow once its validity is gone, reads and syncs waiting for every
//!   master), then holds the lock until it releases it. A failed attempt
//!   releases its key on every master without waiting.
//! - **The wire**: a round sends one request to each master; each
//!   connection (client, master) is FIFO, and every request is run by its
//!   master at a step of its own, so requests of different clients and
//!   masters interleave arbitrarily, and a client may pause anywhere. A
//!   reply reaches the client's round if the round is still in progress
//!   and still waits for that master; a request of an ended round still
//!   runs (late), its reply dropped, as the link drops it. A master that
//!   has not answered may time out at any step (its connection failed, or
//!   the round's deadline came: the model keeps that a deadline exists,
//!   not its length); a reply may be lost after its script ran; a
//!   connection may be reset, losing what is queued on it (the last two
//!   when enabled).
//! - **Time** moves in ticks (a tick is a second of wall clock). A lock's
//!   validity is [`Config::validity`] ticks from its acquire round's `t0`;
//!   a raise that ends at or after it fails the attempt, and the lock's key
//!   may expire at any step from then on, never before. A lost counter is
//!   put back [`Config::wait`] ticks after a client first saw it lost.
//!   A master's `TIME` is its clock in microseconds: ticks plus offset,
//!   plus [`READ_US`](config::READ_US) for every earlier reading of it, so
//!   two readings of one clock differ by more than every fenced
//!   acquisition a run can make: the documented clock assumption of a
//!   start from the clocks, which only a step back breaks.
//!
//! # What ties the model to the library
//!
//! The model's client and scripts are transcriptions, so two tests
//! (`src/tie/`, in the CI form) run the library's own code beside them on
//! the same inputs and fail where they differ:
//!
//! - the client: the library's fenced acquire machine (`FencedAcquire`
//!   and `FenceBook`, driven through `tie::machine::FenceMachine`, the
//!   rounds' decisions those of `rules::Round`) and the model's client take
//!   the same seeded sequences of round outcomes (50 000 cases of up to
//!   four attempts: counts, losses with their ids and clocks, grants,
//!   refusals, failures, at given ticks) and must agree at every step on
//!   the round's decision, the next round (read, sync with its value, mode
//!   and loss ids, acquire, raise to its fence), the outcome (the fence and
//!   its validity, or why the attempt failed), the fence book and the
//!   releases sent; targeted cases pin the confirmed start and the start
//!   from the largest clock;
//! - the scripts: seeded walks over one master run the library's Lua
//!   scripts on a real `redis-server` (started by the test on a free
//!   loopback port) and the model's [`scripts`] on the model's master, and
//!   compare replies, lock key, counter and loss id after every step.
//!
//! Where the library keeps what the model abstracts away (below), the tests
//! keep to the model's inputs: single-key locks, rounds that always start,
//! no deadlines but the time-outs given, clocks below 2^53.
//!
//! # What the model abstracts away
//!
//! - One resource with one key: the counter is shared by every resource,
//!   and the scripts are all or nothing over a lock's keys.
//! - Each client runs one attempt at a time; the library lets threads of
//!   one client run attempts at once over one `FenceBook`. A read's claim
//!   (`claim_read`) is kept; its giving back when a round cannot start
//!   (`Error::TooManyInFlight`, a poller error) is not: rounds always start here.
//! - Extends, the restart guard (off by default; its quarantine only turns
//!   grants into refusals, which a time-out already covers), `NOSCRIPT`
//!   replays, the handshake, `FOREIGNKEY` values and the 2^53 bound: none
//!   takes part in the fencing proof.
//! - A key expires by the true time (the Redlock assumption that clocks
//!   run at rates within the drift); a clock step moves only the `TIME` a
//!   master reports. A key's expiry is bounded below by its lock's
//!   validity, also for an acquire that runs late (the real key outlives
//!   that).
//! - A loss id is a name unique to its master and loss (a real one is the
//!   master's clock when it found its counter missing, unique unless a
//!   clock steps back to the very microsecond).
//! - A round's decision follows from how many masters answered what, in
//!   whatever order: true of `Round::record` for N = 3.
//! - [`Config::atomic_reads`] (off by default) makes a fence read one step
//!   on every master: an idealisation, which the CI form uses to isolate
//!   the clock start from the non-atomic read (see the README).
//!
//! # The search
//!
//! Breadth first, with a visited set of 64-bit fingerprints of the states'
//! classes under renaming ([`search()`]), over every interleaving. With
//! [`Config::reduce`] (`--reduce`) it takes a stubborn set of the enabled
//! steps where it finds a smaller one (partial-order reduction,
//! `reduce.rs`): that keeps every violation of the fence order reachable,
//! but checks invariant (I) and the counters only on the states it visits,
//! and a violation may need more steps. It pays where time-outs and time
//! multiply the interleavings of one client's round (a quarter of the
//! states for one client with time passing), not where two clients' rounds
//! share the masters.
//!
//! # Running it
//!
//! `cargo test -p redlock-mio-model` runs the CI form (`tests/search.rs`);
//! `cargo run --release -p redlock-mio-model -- --help` lists the switches
//! of a longer run.

pub mod config;
pub mod scripts;
pub mod search;
pub mod state;
pub mod step;

mod canon;
mod client;
mod log;
mod reduce;
#[cfg(test)]
mod tie;
mod trace;

pub use config::{ClockStart, Config, Order, StartRule};
pub use search::{Counterexample, Level, Outcome, search};
pub use step::{Action, Violation};
