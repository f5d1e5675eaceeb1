//! [`Stats`]: what a client has done since it was built, counted as it
//! goes (a few relaxed atomic additions per round) and copied on request.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::Error;
use crate::rules::{NodeState, Op};

/// A snapshot of a client's counters since it was built. Made by
/// [`Redlock::stats`](crate::Redlock::stats).
///
/// ```no_run
/// use redlock_mio::Redlock;
///
/// let redlock = Redlock::builder(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]).build()?;
/// // ... the service runs ...
/// let stats = redlock.stats();
/// println!("{} of {} attempts won, {} contended", stats.acquired, stats.attempts, stats.contended);
/// if stats.unavailable > 0 {
///     eprintln!("a majority of masters was out of reach {} times", stats.unavailable);
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Acquire attempts (rounds), retries included.
    pub attempts: u64,
    /// Attempts that won the lock.
    pub acquired: u64,
    /// Attempts that failed because other clients hold the resource.
    pub contended: u64,
    /// Attempts that failed because a majority was unreachable.
    pub unavailable: u64,
    /// Attempts that reached a quorum with no validity left.
    pub too_slow: u64,
    /// Rounds that failed because masters refuse the configuration.
    pub misconfigured: u64,
    /// Fenced attempts that failed for want of a quorum of fence counters
    /// in sync ([`Error::Unfenced`](crate::Error::Unfenced)).
    pub unfenced: u64,
    /// Extend rounds sent.
    pub extends: u64,
    /// Extend rounds that succeeded.
    pub extended: u64,
    /// Release rounds sent by `unlock` (a failed attempt's release is not
    /// counted: it is not waited for).
    pub releases: u64,
    /// Release rounds that reached a quorum.
    pub released: u64,
    /// Rounds whose future was dropped before it took their outcome (see
    /// the cancellation section of [`Redlock::try_lock_async`]): counted
    /// here and, by their operation, in `attempts`, `extends` or
    /// `releases` (in none of their outcomes).
    ///
    /// [`Redlock::try_lock_async`]: crate::Redlock::try_lock_async
    pub abandoned: u64,
    /// Release rounds the client runs on its own for dropped futures and
    /// guards: a dropped acquire's release, a dropped unlock's own round,
    /// or a dropped [`AsyncLockGuard`](crate::AsyncLockGuard)'s release (if
    /// a slot was free for it). Each is followed until every master has
    /// answered it, failed or timed out.
    pub drop_releases: u64,
    /// How many of `drop_releases` have ended. Once the two are equal,
    /// every master has answered (or failed, or timed out on) every release
    /// made for a dropped future or guard; their failures and timeouts are
    /// counted in `masters`.
    pub drop_releases_ended: u64,
    /// Times a caller yielded its CPU to masters on this machine
    /// ([`Builder::yield_to_local_masters`](crate::Builder::yield_to_local_masters)):
    /// a lone thread before each look or wait for replies and once at its
    /// round's decision, a lone task once per round; none while other
    /// rounds are in flight.
    pub yields: u64,
    /// What the client's engine did for all of this: system calls,
    /// wake-ups and the work of its tables.
    pub engine: EngineStats,
    /// Per master, in the order the servers were given.
    pub masters: Vec<MasterStats>,
}

/// The engine's counters in [`Stats`]: the cost of the client's rounds in
/// system calls, wake-ups and table work, for a benchmark or a test to hold
/// to a budget, and for a service to see where its client's time goes.
///
/// A lone caller's `try_lock` + `unlock` on five masters takes one write
/// per master per round (10), at most one read per reply (10), a look or a
/// poll that finds replies per read at most, hardly an idle poll, no
/// wake-up (the caller polls for itself), and scans of the one slot it
/// used.
///
/// ```no_run
/// use std::time::Duration;
/// use redlock_mio::Redlock;
///
/// let redlock = Redlock::builder(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]).build()?;
/// let before = redlock.stats().engine;
/// let mut lock = redlock.try_lock("orders:42", Duration::from_secs(10))?;
/// redlock.unlock(&mut lock)?;
/// let after = redlock.stats().engine;
/// println!("{} writes, {} reads, {} polls", after.writes - before.writes, after.reads - before.reads, after.polls - before.polls);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineStats {
    /// Writes to the masters' sockets (each a system call on a plain
    /// socket): one per master per tick that has something to send.
    pub writes: u64,
    /// Reads from the masters' sockets, including those that found
    /// nothing.
    pub reads: u64,
    /// Waits on the poller for readiness (each a system call), by
    /// callers and by the background thread of the async API.
    pub polls: u64,
    /// Of `polls`, those that returned no event: they timed out (a
    /// deadline or a timer came) or were woken for nothing.
    pub idle_polls: u64,
    /// Looks at the poller that do not wait (each a system call): a lone
    /// caller's looks for its replies while it spins
    /// ([`Builder::spin`](crate::Builder::spin)), and what arrived while
    /// nobody polled, read before new requests go out after a pause of a
    /// millisecond or more.
    pub looks: u64,
    /// Of `looks`, those that found nothing: a spinning caller's looks
    /// before its replies came. Each follows a yield of the CPU, so that
    /// the masters on the same machine answer meanwhile.
    pub idle_looks: u64,
    /// Keys watched for a loss now ([`Redlock::watch`](crate::Redlock::watch),
    /// the keepers' and the scoped calls' locks): one per resource of each
    /// watched lock, until its release.
    pub watched: u64,
    /// Wake-ups of one caller by another or by the background thread: a
    /// thread unparked or a task's waker called at its round's decision,
    /// a hand-off it was told of, a freed slot or the poller handed over,
    /// and the background thread unparked or a poll interrupted so that
    /// queued commands are written.
    pub wakes: u64,
    /// Rests of the background thread while callers poll for the watched
    /// locks, each ended by a look at whether they still do: they double
    /// from a millisecond to 16 ms while the callers keep coming back, so
    /// that a caller that keeps calling beside a watched lock costs a few
    /// dozen a second (see [`limitations`](crate::limitations)).
    pub rests: u64,
    /// Slots of the tables of rounds in flight and of waiting callers
    /// looked at by scans of the whole table (a scan stops at the highest
    /// slot ever used).
    pub scanned: u64,
}

/// One master's counters in [`Stats`].
///
/// ```no_run
/// # let redlock = redlock_mio::Redlock::builder(["redis://10.0.0.1:6379"]).build()?;
/// for master in &redlock.stats().masters {
///     if master.errors + master.timeouts > 0 {
///         eprintln!("{}: {} errors, {} timeouts, {} connects", master.address, master.errors, master.timeouts, master.connects);
///     }
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MasterStats {
    /// The master's address, password masked.
    pub address: String,
    /// Rounds in which this master failed (refused connection, error
    /// reply, protocol error, stall, …).
    pub errors: u64,
    /// Rounds in which this master did not answer in time.
    pub timeouts: u64,
    /// Connects started to it, the first one included.
    pub connects: u64,
    /// Rounds in which it granted while quarantined by the restart guard
    /// (the grant did not count).
    pub quarantined: u64,
    /// Handshakes at which the restart guard found it suspect (restarted,
    /// marker lost, or recently started on first sight).
    pub suspicions: u64,
}

#[derive(Default)]
struct Master {
    errors: AtomicU64,
    timeouts: AtomicU64,
    quarantined: AtomicU64,
}

/// The live counters behind [`Stats`].
pub(super) struct Counters {
    attempts: AtomicU64,
    acquired: AtomicU64,
    contended: AtomicU64,
    unavailable: AtomicU64,
    too_slow: AtomicU64,
    misconfigured: AtomicU64,
    unfenced: AtomicU64,
    extends: AtomicU64,
    extended: AtomicU64,
    releases: AtomicU64,
    released: AtomicU64,
    abandoned: AtomicU64,
    drop_releases: AtomicU64,
    drop_releases_ended: AtomicU64,
    masters: Box<[Master]>,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

fn read(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

impl Counters {
    pub(super) fn new(masters: usize) -> Counters {
        Counters {
            attempts: AtomicU64::new(0),
            acquired: AtomicU64::new(0),
            contended: AtomicU64::new(0),
            unavailable: AtomicU64::new(0),
            too_slow: AtomicU64::new(0),
            misconfigured: AtomicU64::new(0),
            unfenced: AtomicU64::new(0),
            extends: AtomicU64::new(0),
            extended: AtomicU64::new(0),
            releases: AtomicU64::new(0),
            released: AtomicU64::new(0),
            abandoned: AtomicU64::new(0),
            drop_releases: AtomicU64::new(0),
            drop_releases_ended: AtomicU64::new(0),
            masters: (0..masters).map(|_| Master::default()).collect(),
        }
    }

    /// What each master did in a round that ended.
    fn count_masters(&self, nodes: &[NodeState]) {
        for (master, state) in self.masters.iter().zip(nodes) {
            match state {
                NodeState::Failed(_) => bump(&master.errors),
                NodeState::TimedOut => bump(&master.timeouts),
                NodeState::Quarantined => bump(&master.quarantined),
                _ => {}
            }
        }
    }

    /// A round of `op` was given up by its dropped future (a fence round
    /// counts as part of its acquire: only as given up).
    pub(super) fn abandoned(&self, op: Op) {
        bump(&self.abandoned);
        match op {
            Op::Acquire => bump(&self.attempts),
            Op::Extend => bump(&self.extends),
            Op::Release => bump(&self.releases),
            Op::Raise | Op::FenceRead | Op::FenceSync | Op::Leave => {}
        }
    }

    /// A release round started for a dropped future or guard.
    pub(super) fn drop_release(&self) {
        bump(&self.drop_releases);
    }

    /// A release round run for a dropped future ended; `nodes` is what each
    /// master did in it.
    pub(super) fn drop_release_ended(&self, nodes: &[NodeState]) {
        self.count_masters(nodes);
        bump(&self.drop_releases_ended);
    }

    /// A round of `op` ended with `result`; `nodes` is what each master
    /// did in it.
    pub(super) fn count(&self, op: Op, nodes: &[NodeState], result: Result<(), &Error>) {
        self.count_masters(nodes);
        let (sent, succeeded) = match op {
            Op::Acquire => (&self.attempts, &self.acquired),
            Op::Extend => (&self.extends, &self.extended),
            Op::Release => (&self.releases, &self.released),
            // The fence rounds count as part of their acquire; a waiter
            // leaving its queues is no round.
            Op::Raise | Op::FenceRead | Op::FenceSync | Op::Leave => return,
        };
        bump(sent);
        match result {
            Ok(()) => bump(succeeded),
            Err(Error::Misconfigured(_)) => bump(&self.misconfigured),
            Err(error) if op == Op::Acquire => match error {
                Error::Contended(_) => bump(&self.contended),
                Error::Unavailable(_) => bump(&self.unavailable),
                Error::TooSlow(_) => bump(&self.too_slow),
                Error::Unfenced(_) => bump(&self.unfenced),
                _ => {}
            },
            Err(_) => {}
        }
    }

    /// A copy of the counters, with each master's address, connects and
    /// suspicions, and the engine's `yields` and counters.
    pub(super) fn snapshot<'a>(
        &self,
        masters: impl Iterator<Item = (&'a str, (u64, u64))>,
        yields: u64,
        engine: EngineStats,
    ) -> Stats {
        Stats {
            attempts: read(&self.attempts),
            acquired: read(&self.acquired),
            contended: read(&self.contended),
            unavailable: read(&self.unavailable),
            too_slow: read(&self.too_slow),
            misconfigured: read(&self.misconfigured),
            unfenced: read(&self.unfenced),
            extends: read(&self.extends),
            extended: read(&self.extended),
            releases: read(&self.releases),
            released: read(&self.released),
            abandoned: read(&self.abandoned),
            drop_releases: read(&self.drop_releases),
            drop_releases_ended: read(&self.drop_releases_ended),
            yields,
            engine,
            masters: self
                .masters
                .iter()
                .zip(masters)
                .map(|(master, (address, (connects, suspicions)))| MasterStats {
                    address: address.to_owned(),
                    errors: read(&master.errors),
                    timeouts: read(&master.timeouts),
                    connects,
                    quarantined: read(&master.quarantined),
                    suspicions,
                })
                .collect(),
        }
    }
}
