//! The matrix: every front end × mode × situation × resource name of the
//! public API, each cell played out against real masters and held to the
//! same checkers. Each feature's own tests pass; the bugs the matrix is
//! for live at the edges between features (a reserved name with fencing,
//! an async fenced call that retries, skewed clocks with fencing...).
//!
//! The dimensions:
//!
//! - **front end**: blocking (`Redlock`), async under tokio's
//!   current-thread runtime, smol, and the bare executor (no timers, see
//!   `support::executor`), embedded (`EmbeddedRedlock` in the caller's
//!   `mio` loop);
//! - **mode**: a shape (one lock; several resources, `try_lock_all` /
//!   `lock_all`; a batch, `try_lock_many` / `unlock_many`; kept, `keep`;
//!   scoped, `with_lock` / `with_lock_async`), plain or fenced
//!   (`Builder::fencing`). Where a front end lacks a mode the cell asserts
//!   the documented refusal (embedded with fencing: `NotEmbeddable`) or is
//!   skipped, saying why ([`Cell::support`]);
//! - **situation**: free; contended, then released while a call that waits
//!   is queued (the waiter must be handed the lock and told); a minority of
//!   masters paused; a majority paused (`Unavailable` by the documented
//!   bound, never a hang); a master restarted empty while the lock is held
//!   and while a waiter is queued; one master's wall clock an hour ahead
//!   (`support::clock`: fences start from the largest clock);
//! - **resource name**: binary (all 256 byte values), maximal
//!   (`MAX_RESOURCE_LEN` bytes), or in the crate's key space (refused with
//!   `ReservedResource` before anything is sent, whatever the front end,
//!   mode and situation).
//!
//! The checkers of every cell: the outcome is the documented one; no two
//! holdings of a resource overlap; fences grow in the order holdings
//! began; every call returns within its documented bound, proven by
//! counters and reports (the paused masters timed out in the error's
//! report, the number of attempts, no round waiting for a paused
//! minority), with only a generous outer timeout to fail rather than
//! hang; nothing is left on any master afterwards (no lock, no waiter's
//! queue entry); a reserved name leaves the masters' command counts
//! untouched.
//!
//! Each situation is a test of its own with a cluster of its own, reused
//! by its cells one after the other (each cell on names of its own, so
//! that what one leaves is seen by its own checkers); the cells are the
//! rows of a table, and a failing one is named with its row. The default
//! run is the whole product, nothing sampled: 150 rows per situation, of
//! which 90 run and 60 are skipped, each for a reason the summary prints
//! (the async API has no several-resource or batch calls; the embedded
//! client has one-lock calls only). `mixed_campaign` runs every mode at once on the
//! same masters (see `campaign`).
//!
//! ```text
//! cargo nextest run -E 'test(/^matrix::/)'
//! REDIS_SERVER=/path/to/valkey-server cargo nextest run -E 'test(/^matrix::/)'
//! ```

mod campaign;
mod cell;
mod embedded;
mod front;

use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::clock;
use crate::support::cluster::{Cluster, ClusterOptions};
use crate::support::executor::BlockOn;
use front::Call;
use redlock_mio::{MARKER_KEY, MAX_RESOURCE_LEN, MAX_TIMEOUT, RESERVED_PREFIX};

/// Every lock's TTL: longer than `PATIENCE`, so that a key that expires on
/// its own can never pass for one that was released or handed over.
const TTL: Duration = Duration::from_secs(30);
/// The deployment's longest TTL, for fencing and the restart guard.
const LONGEST: Duration = Duration::from_secs(60);
/// How often a keeper extends in the matrix: several times in a cell.
const KEEP_PERIOD: Duration = Duration::from_millis(50);
/// The bound on anything a cell waits for that must happen: never reached
/// when things work.
const PATIENCE: Duration = Duration::from_secs(20);
/// How far the skewed master's wall clock runs ahead, in microseconds.
const HOUR_US: i64 = 3_600_000_000;
/// The outer bound on a whole cell, to fail rather than hang.
const CELL_TIMEOUT: Duration = Duration::from_secs(90);

/// A front end of the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Front {
    Blocking,
    Tokio,
    Smol,
    Bare,
    Embedded,
}

const FRONTS: [Front; 5] = [
    Front::Blocking,
    Front::Tokio,
    Front::Smol,
    Front::Bare,
    Front::Embedded,
];

impl Front {
    /// The executor of an async front end.
    fn executor(self) -> Option<BlockOn> {
        let name = match self {
            Front::Tokio => "tokio current-thread",
            Front::Smol => "smol",
            Front::Bare => "bare",
            Front::Blocking | Front::Embedded => return None,
        };
        crate::executors::all()
            .into_iter()
            .find_map(|(n, run)| (n == name).then_some(run))
    }
}

/// What a mode's calls acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Single,
    Multi,
    Batch,
    Kept,
    Scoped,
}

const SHAPES: [Shape; 5] = [
    Shape::Single,
    Shape::Multi,
    Shape::Batch,
    Shape::Kept,
    Shape::Scoped,
];

impl Shape {
    /// Whether the shape has a call that does not wait (a scope always
    /// waits) and one that waits (a batch never does).
    fn has(self, call: Call) -> bool {
        !matches!(
            (self, call),
            (Shape::Scoped, Call::Try) | (Shape::Batch, Call::Wait)
        )
    }

    /// How many names its calls take.
    fn names(self) -> usize {
        match self {
            Shape::Multi | Shape::Batch => 3,
            _ => 1,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mode {
    shape: Shape,
    fenced: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Situation {
    Free,
    Contended,
    MinorityPaused,
    MajorityPaused,
    RestartedEmpty,
    /// One master's wall clock an hour ahead (fences start from the
    /// largest clock).
    SkewedClock,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Name {
    Binary,
    Maximal,
    Reserved,
}

const NAMES: [Name; 3] = [Name::Binary, Name::Maximal, Name::Reserved];

/// How the clients of a situation are configured.
#[derive(Debug, Clone, Copy)]
struct Tuning {
    request_timeout: Duration,
    retry_count: u32,
    retry_delay: Duration,
    retry_jitter: Duration,
    /// The restart guard (with the longest TTL).
    guard: bool,
    /// How long a call that waits with a deadline waits.
    wait: Duration,
}

impl Situation {
    fn tuning(self) -> Tuning {
        let settled = Tuning {
            // Long: a healthy round never nears it on a busy machine.
            request_timeout: Duration::from_secs(1),
            retry_count: 3,
            // A waiter only tries again when told (or when it reconnects):
            // its retry delay outlasts every test.
            retry_delay: MAX_TIMEOUT,
            retry_jitter: Duration::ZERO,
            guard: false,
            wait: PATIENCE,
        };
        match self {
            Situation::Free
            | Situation::MinorityPaused
            | Situation::Contended
            | Situation::SkewedClock => settled,
            // Short: every call there runs into it.
            Situation::MajorityPaused => Tuning {
                request_timeout: Duration::from_millis(150),
                retry_count: 1,
                retry_delay: Duration::from_millis(50),
                retry_jitter: Duration::from_millis(10),
                wait: Duration::from_millis(500),
                ..settled
            },
            Situation::RestartedEmpty => Tuning {
                guard: true,
                ..settled
            },
        }
    }

    /// Three masters; with the restart guard, each provisioned with its
    /// marker (new masters that granted nothing), so that only the one
    /// restarted empty is quarantined.
    fn cluster(self) -> Cluster {
        let options = ClusterOptions::new(3);
        let cluster = match self {
            Situation::SkewedClock => clock::skewed(options, 0, HOUR_US).start(),
            _ => options.start(),
        };
        if self.tuning().guard {
            for i in 0..cluster.len() {
                cluster.set(i, MARKER_KEY, "provisioned");
            }
        }
        cluster
    }
}

/// Whether a front end has a mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Support {
    Runs,
    /// The documented refusal: the cell asserts it.
    Refused,
    Skipped(&'static str),
}

/// One row of the table.
#[derive(Debug, Clone, Copy)]
struct Cell {
    index: usize,
    front: Front,
    mode: Mode,
    situation: Situation,
    name: Name,
}

impl fmt::Display for Cell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fencing = if self.mode.fenced { "fenced" } else { "plain" };
        write!(
            f,
            "cell {} [{:?} × {fencing} {:?} × {:?} × {:?} name]",
            self.index, self.front, self.mode.shape, self.situation, self.name
        )
    }
}

impl Cell {
    fn support(&self) -> Support {
        let async_front = matches!(self.front, Front::Tokio | Front::Smol | Front::Bare);
        match (self.front, self.mode.shape) {
            (_, Shape::Multi) if async_front => {
                Support::Skipped("the async API has no try_lock_all / lock_all")
            }
            (_, Shape::Batch) if async_front => {
                Support::Skipped("the async API has no try_lock_many / unlock_many")
            }
            (Front::Embedded, Shape::Single) if self.mode.fenced => Support::Refused,
            (Front::Embedded, Shape::Single) => Support::Runs,
            (Front::Embedded, _) => Support::Skipped(
                "EmbeddedRedlock has try_lock, lock_until and unlock only \
                 (a keeper or a scope needs a Redlock's threads)",
            ),
            _ => Support::Runs,
        }
    }

    /// An ASCII tag of the cell's `kind` of name number `k`: every name of
    /// the cell starts with one, so that no two cells share a key.
    fn tag(&self, kind: u8, k: usize) -> String {
        format!("matrix:{}:{}{k}:", self.index, kind as char)
    }

    /// The names its calls take: binary ones hold every byte value once
    /// (rotated, so that each name differs past its tag); maximal ones
    /// are `MAX_RESOURCE_LEN` bytes; of reserved ones, the second (or
    /// only) is in the crate's key space.
    fn names(&self) -> Vec<Vec<u8>> {
        let binary = |k: usize| -> Vec<u8> {
            let bytes = (0..=255u8).map(|b| b.wrapping_add(k as u8 * 85));
            self.tag(b'b', k).bytes().chain(bytes).collect()
        };
        let count = self.mode.shape.names();
        (0..count)
            .map(|k| match self.name {
                Name::Binary => binary(k),
                Name::Maximal => binary(k)
                    .into_iter()
                    .cycle()
                    .take(MAX_RESOURCE_LEN)
                    .collect(),
                Name::Reserved if k == count / 2 => {
                    [RESERVED_PREFIX.as_bytes(), &binary(k)].concat()
                }
                Name::Reserved => binary(k),
            })
            .collect()
    }
}

/// Every cell of `situation`, in a fixed order.
fn cells(situation: Situation) -> Vec<Cell> {
    let mut cells = Vec::new();
    for front in FRONTS {
        for shape in SHAPES {
            for fenced in [false, true] {
                for name in NAMES {
                    cells.push(Cell {
                        index: cells.len(),
                        front,
                        mode: Mode { shape, fenced },
                        situation,
                        name,
                    });
                }
            }
        }
    }
    cells
}

/// Runs every cell of `situation` on one cluster, one after the other,
/// each on a thread of its own under `CELL_TIMEOUT`; a failure names its
/// cell.
fn table(situation: Situation) {
    let cluster = Arc::new(situation.cluster());
    let started = Instant::now();
    let mut ran = 0;
    let mut total = cell::Tally::default();
    let mut skipped: Vec<(&str, usize)> = Vec::new();
    for cell in cells(situation) {
        if let Support::Skipped(why) = cell.support() {
            match skipped.iter_mut().find(|(w, _)| *w == why) {
                Some((_, n)) => *n += 1,
                None => skipped.push((why, 1)),
            }
            continue;
        }
        let tally = run_cell(&cluster, cell);
        total.holdings += tally.holdings;
        total.errors += tally.errors;
        ran += 1;
    }
    eprintln!(
        "matrix {situation:?}: {ran} cells in {:?} ({} holdings, {} documented errors); skipped: {skipped:?}",
        started.elapsed(),
        total.holdings,
        total.errors,
    );
}

fn run_cell(cluster: &Arc<Cluster>, cell: Cell) -> cell::Tally {
    let (send, done) = mpsc::channel();
    let thread = {
        let cluster = Arc::clone(cluster);
        thread::Builder::new()
            .name(cell.to_string())
            .spawn(move || {
                let outcome = panic::catch_unwind(AssertUnwindSafe(|| cell::run(&cluster, &cell)));
                let _ = send.send(outcome.map_err(|panic| message(&*panic)));
            })
            .expect("spawn a cell")
    };
    match done.recv_timeout(CELL_TIMEOUT) {
        Ok(Ok(tally)) => {
            let _ = thread.join();
            tally
        }
        Ok(Err(message)) => panic!("{cell}: {message}"),
        Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
            // The cell's thread keeps the cluster: stop the masters, so
            // that no server outlives the test.
            for i in 0..cluster.len() {
                cluster.kill(i);
            }
            panic!("{cell}: did not end within {CELL_TIMEOUT:?}");
        }
    }
}

/// A panic's message.
fn message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

#[test]
fn free() {
    table(Situation::Free);
}

#[test]
fn contended_then_released() {
    table(Situation::Contended);
}

#[test]
fn minority_paused() {
    table(Situation::MinorityPaused);
}

#[test]
fn majority_paused() {
    table(Situation::MajorityPaused);
}

#[test]
fn restarted_empty() {
    table(Situation::RestartedEmpty);
}

#[test]
fn skewed_clock() {
    table(Situation::SkewedClock);
}

#[test]
fn mixed_campaign() {
    campaign::run();
}
