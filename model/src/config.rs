//! What a search explores: how many clients, attempts, data losses, ticks
//! and clock steps, which faults, and how a start from the clocks is taken.

use std::fmt;

/// The number of masters.
pub const N: usize = 3;

/// The quorum of [`N`] masters: `N / 2 + 1`, as `rules::quorum`.
pub const Q: usize = N / 2 + 1;

/// The most clients a search runs.
pub const MAX_CLIENTS: usize = 3;

/// Microseconds of wall clock per tick: a tick is a second.
pub const TICK_US: u64 = 1_000_000;

/// The masters' wall clocks start this many ticks after 1970, so that
/// every clock reading and loss id is positive, as a real `TIME` is.
pub const EPOCH_TICKS: i64 = 1_000_000_000;

/// How far a master's clock moves on between two readings of it, in
/// microseconds, at the least: more than the fenced acquisitions of a
/// run ([`Config::check`] makes sure).
pub const READ_US: u64 = 64;

/// How far ahead, in ticks, the fast master's clock runs by default: an
/// hour, as in `tests/clock_skew.rs`.
pub const FAST_TICKS: i64 = 3_600;

/// How far a clock step moves a master's clock, in ticks.
pub const STEP_TICKS: i64 = 60;

/// How a start from the clocks (every master answered a read out of
/// sync) picks the value it sets on every master.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClockStart {
    /// The library's rule (`clock_start` in `src/client/fence.rs`): the
    /// largest clock (or counter) any of the N masters reported in the
    /// read.
    Largest,
    /// The fix reverted: the `TIME` one master reported in the read (any
    /// one: the search tries each, as if the client took the first
    /// answer), for every master.
    One,
    /// The fix reverted as the code was before it: each master starts
    /// from its own `TIME`, read when the sync runs there.
    Own,
}

impl ClockStart {
    /// The rule named `name` (`largest`, `one` or `own`).
    pub fn parse(name: &str) -> Option<ClockStart> {
        match name {
            "largest" => Some(ClockStart::Largest),
            "one" => Some(ClockStart::One),
            "own" => Some(ClockStart::Own),
            _ => None,
        }
    }
}

impl fmt::Display for ClockStart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ClockStart::Largest => "largest",
            ClockStart::One => "one",
            ClockStart::Own => "own",
        })
    }
}

/// When a read that found every master out of sync starts the counters
/// from the clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StartRule {
    /// At once, on any read that found every master out of sync: the
    /// library's rule before the confirming read (a loss during the read
    /// breaks it).
    Direct,
    /// The library's rule (`plan_sync`): only if every master reported
    /// the loss id this client already knew of it when the read began;
    /// else the client reads once more at once (the second read began
    /// after the first ended, so some moment lies between every master's
    /// two answers, when none was in sync).
    Confirmed,
    /// A rule the library does not have, to try: only once every loss
    /// was first seen the wait (longest TTL and drift) before the read
    /// began, as a repair waits.
    Waited,
}

/// Which holdings a new holding's fence must be above.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Order {
    /// Every holding that began before it: holds while no master loses
    /// its data, and fails where a lost key lets two holdings overlap.
    Began,
    /// Every holding that had ended (released, or past its validity)
    /// before its acquire round began: the guarantee of
    /// `src/fencing.rs`.
    Ended,
}

/// The bounds and switches of one search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Clients, each with its own fence book and one fenced acquire at a
    /// time (1 to [`MAX_CLIENTS`]).
    pub clients: usize,
    /// Fenced acquire attempts per client.
    pub attempts: u8,
    /// Data losses (a restart with no data) per master.
    pub restarts: u8,
    /// The last tick: time runs from tick 0 to this one.
    pub ticks: u8,
    /// A lock's validity in ticks, `ttl - drift`: a holder's raise must
    /// end before `t0 + validity`, and a key set at tick `t` may expire
    /// from tick `t + validity` on.
    pub validity: u8,
    /// The wait before a lost counter is put back, `longest_ttl + drift`
    /// in ticks. The library's configuration makes it at least
    /// [`validity`](Self::validity); a smaller one breaks that assumption.
    pub wait: u8,
    /// `READ_EVERY` in ticks: reads are not repeated more often.
    pub read_every: u8,
    /// Clock steps per master (each [`STEP_TICKS`] forward).
    pub steps: u8,
    /// Whether a clock step may also go back (which the documented
    /// assumption of a start from the clocks rules out).
    pub step_back: bool,
    /// Whether a client's fence read runs on every master in one step
    /// (an idealisation: a read is N requests that the masters run when
    /// they get them). A start from the clocks then rests on a snapshot of
    /// the masters.
    pub atomic_reads: bool,
    /// Whether a master that has not answered a round may time out (its
    /// connection failing, or the round's deadline coming) before it
    /// runs the request.
    pub timeouts: bool,
    /// Whether a connection may be reset, losing the requests queued on
    /// it (each such request's master counts as failed for its round).
    pub resets: bool,
    /// Whether a reply may be lost after its script ran (the round then
    /// times that master out).
    pub lost_replies: bool,
    /// Each master's clock offset, in ticks.
    pub offsets: [i64; N],
    /// How a start from the clocks picks its value.
    pub clock_start: ClockStart,
    /// When a start from the clocks is made.
    pub start: StartRule,
    /// Which holdings a new fence must be above.
    pub order: Order,
    /// Whether invariant (I) of the proof is checked besides the fence
    /// order (off: a violation shows as a fence that did not grow).
    pub invariant: bool,
    /// Whether the search takes stubborn sets (partial-order reduction)
    /// instead of every enabled step.
    pub reduce: bool,
}

impl Default for Config {
    /// Two clients of one attempt each, one loss per master, master 0 an
    /// hour fast, no time passing, the library's clock start: the form
    /// that finds the skewed clock violation when the fix is reverted.
    fn default() -> Config {
        Config {
            clients: 2,
            attempts: 1,
            restarts: 1,
            ticks: 0,
            validity: 1,
            wait: 1,
            read_every: 1,
            steps: 0,
            step_back: false,
            atomic_reads: false,
            timeouts: true,
            resets: false,
            lost_replies: false,
            offsets: [FAST_TICKS, 0, 0],
            clock_start: ClockStart::Largest,
            start: StartRule::Confirmed,
            order: Order::Ended,
            invariant: true,
            reduce: false,
        }
    }
}

impl Config {
    /// Why this configuration cannot be searched, if it cannot.
    pub fn check(&self) -> Result<(), String> {
        if self.clients == 0 || self.clients > MAX_CLIENTS {
            return Err(format!("clients must be 1 to {MAX_CLIENTS}"));
        }
        if self.attempts == 0 || self.attempts > 15 {
            return Err("attempts must be 1 to 15".into());
        }
        if (self.clients * usize::from(self.attempts)) as u64 >= READ_US {
            return Err(format!("clients x attempts must stay below {READ_US}"));
        }
        if self.validity == 0 {
            return Err("validity must be at least one tick".into());
        }
        if self.ticks > 200 {
            return Err("ticks must be at most 200".into());
        }
        Ok(())
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{N} masters (offsets {:?} ticks), {} clients x {} attempts, {} losses per master, \
             ticks 0..={}, validity {}, wait {}, read every {}, {} clock steps per master{}, \
             atomic reads {}, timeouts {}, resets {}, lost replies {}, clock start: {} ({:?}), {}",
            self.offsets,
            self.clients,
            self.attempts,
            self.restarts,
            self.ticks,
            self.validity,
            self.wait,
            self.read_every,
            self.steps,
            if self.step_back { " (back too)" } else { "" },
            on(self.atomic_reads),
            on(self.timeouts),
            on(self.resets),
            on(self.lost_replies),
            self.clock_start,
            self.start,
            if self.reduce {
                "partial-order reduction"
            } else {
                "every interleaving"
            },
        )
    }
}

fn on(flag: bool) -> &'static str {
    if flag { "on" } else { "off" }
}
