//! Fenced acquisitions: their rounds (a read of the counters and a sync
//! when due, the acquire, the raise) as a state machine free of I/O,
//! [`FencedAcquire`], which the blocking driver here and the async one
//! (`tasks`) both run, as does the simulator's client (the
//! `redlock-mio-sim` crate's, through [`Host`]); and putting masters that lost their fence counter
//! back in sync. Why this is sound: [`crate::fencing`].
//!
//! Fenced acquires of one client need no turns: the masters serve many
//! clients' fenced acquires at once, and one client's are no different.
//! What the client keeps of the counters ([`FenceBook`]) is updated by its
//! rounds in whatever order they end, and an update out of order only
//! delays a sync: a loss id noted anew restarts its wait, and a master
//! noted in sync forgets its loss until a round sees it again. A sync is
//! planned only for a loss first seen the whole wait before its read
//! began, and the sync script repairs only the loss id it names.

use std::borrow::Cow;
use std::ops::DerefMut;
use std::time::{Duration, Instant};

use smallvec::SmallVec;

use super::rounds::Ends;
use super::{Lock, Redlock, RoundEnd, TOKEN_LEN};
use crate::calls::{Claim, acquire_refused};
use crate::commands::{self, Command, Keys, SyncMode};
use crate::error::Error;
use crate::rules::{self, Decision, NodeState, Op, Report, Round};

/// Reads are not repeated more often than this while a master waits to be
/// put back in sync and cannot be yet.
const READ_EVERY: Duration = Duration::from_secs(1);

/// What this client knows of the masters' fence counters.
#[derive(Debug, Default)]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub struct FenceBook {
    /// Per master: the loss id it reported when its counter was missing,
    /// and when this client first saw that id.
    lost: SmallVec<[Option<(u64, Instant)>; 8]>,
    /// When the counters were last read; `None` until a read finds a
    /// quorum of them in sync, or a start from the clocks reaches a
    /// quorum.
    last_read: Option<Instant>,
}

#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
impl FenceBook {
    /// A book of `masters` masters that knows of no loss and no read.
    pub fn new(masters: usize) -> FenceBook {
        FenceBook {
            lost: SmallVec::from_elem(None, masters),
            last_read: None,
        }
    }

    /// Per master, the loss id it reported and when this client first saw
    /// it: what the model check compares with its own book.
    #[cfg(feature = "sim")]
    pub fn losses(&self) -> &[Option<(u64, Instant)>] {
        &self.lost
    }

    /// When the counters were last read (see [`losses`](Self::losses)).
    #[cfg(feature = "sim")]
    pub fn last_read(&self) -> Option<Instant> {
        self.last_read
    }

    /// Master `node` reported its counter missing, the loss named `id`.
    fn saw_lost(&mut self, node: usize, id: u64, now: Instant) {
        if id == 0 {
            return;
        }
        if let Some(slot) = self.lost.get_mut(node) {
            if !matches!(slot, Some((known, _)) if *known == id) {
                *slot = Some((id, now));
            }
        }
    }

    fn saw_synced(&mut self, node: usize) {
        if let Some(slot) = self.lost.get_mut(node) {
            *slot = None;
        }
    }

    /// The loss id known of each master (0: none).
    fn known_losses(&self) -> SmallVec<[u64; 8]> {
        self.lost
            .iter()
            .map(|slot| slot.map_or(0, |(id, _)| id))
            .collect()
    }

    /// Whether a master has waited `wait` since its loss was first seen.
    fn any_due(&self, now: Instant, wait: Duration) -> bool {
        self.lost
            .iter()
            .flatten()
            .any(|&(_, seen)| due(seen, now, wait))
    }

    /// Whether the counters should be read before the next fenced acquire.
    fn read_due(&self, now: Instant, wait: Duration) -> bool {
        match self.last_read {
            None => true,
            Some(at) => self.any_due(now, wait) && now.saturating_duration_since(at) >= READ_EVERY,
        }
    }

    /// Whether a fenced acquire starting `now` reads the counters first;
    /// if so, the last read before it (`Some(None)`: none yet). A read
    /// after the first is claimed at once, so that the acquires of the
    /// next second do not read too; until a read finds a quorum of the
    /// counters in sync (or a start from the clocks reaches a quorum),
    /// every acquire reads (each needs the counters in sync).
    fn claim_read(&mut self, now: Instant, wait: Duration) -> Option<Option<Instant>> {
        if !self.read_due(now, wait) {
            return None;
        }
        let before = self.last_read;
        if before.is_some() {
            self.last_read = Some(now);
        }
        Some(before)
    }

    /// The read claimed at `at` failed: the next acquire may read again.
    fn unclaim(&mut self, at: Instant, before: Option<Instant>) {
        if self.last_read == Some(at) {
            self.last_read = before;
        }
    }
}

fn due(seen: Instant, now: Instant, wait: Duration) -> bool {
    now.saturating_duration_since(seen) >= wait
}

/// What a [`FencedAcquire`] needs of the client that runs its rounds: the
/// front ends' [`Redlock`] (as `&Redlock`), or the simulator's client, so
/// that both run this one machine.
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub trait Host {
    /// A new token.
    fn token(&mut self) -> [u8; TOKEN_LEN];
    /// How long a lost counter waits before it is put back: the longest
    /// TTL plus its drift.
    fn fence_wait(&self) -> Duration;
    /// The client's clock now.
    fn now(&self) -> Instant;
    /// What this client knows of the masters' counters.
    fn fences(&mut self) -> impl DerefMut<Target = FenceBook>;
    /// The error of a round that could not start.
    fn busy(&self) -> Error;
    /// The report of the round that ended with `end`.
    fn report(&self, end: &RoundEnd) -> Box<Report>;
    /// An acquire whose round ended with `end` failed with `error`:
    /// queues `release` (what [`Claim::release`] says must follow it) on
    /// every master without waiting, counts the attempt, and returns the
    /// error.
    fn not_acquired(&mut self, release: &Command<'_>, end: &RoundEnd, error: Error) -> Error;
    /// An acquire whose round ended with `end` won its lock (raised).
    fn won(&mut self, end: &RoundEnd);
}

impl Host for &Redlock {
    fn token(&mut self) -> [u8; TOKEN_LEN] {
        self.tokens().token()
    }

    fn fence_wait(&self) -> Duration {
        rules::outlived(
            self.config.fencing.unwrap_or_default(),
            self.config.drift_factor,
        )
    }

    fn now(&self) -> Instant {
        crate::clock::now()
    }

    fn fences(&mut self) -> impl DerefMut<Target = FenceBook> {
        Redlock::fences(self)
    }

    fn busy(&self) -> Error {
        Redlock::busy(self)
    }

    fn report(&self, end: &RoundEnd) -> Box<Report> {
        Redlock::report(self, end)
    }

    fn not_acquired(&mut self, release: &Command<'_>, end: &RoundEnd, error: Error) -> Error {
        Redlock::not_acquired(self, release, end, error)
    }

    fn won(&mut self, end: &RoundEnd) {
        self.tally(Op::Acquire, end, Ok(()));
    }
}

/// Records what a round said of each master's counter; returns the
/// largest count among the masters that did what was asked.
fn note_fences(host: &mut impl Host, end: &RoundEnd) -> Option<u64> {
    let (round, now) = (&end.round, end.ended);
    let mut fences = host.fences();
    for (node, state) in round.nodes().iter().enumerate() {
        match state {
            NodeState::Unsynced => fences.saw_lost(node, round.value(node), now),
            NodeState::Ok if round.value(node) > 0 => fences.saw_synced(node),
            _ => {}
        }
    }
    round.max_count()
}

/// The next of `ends`, [`Error::TooManyInFlight`] once they run out (the rounds that
/// could not start).
fn next_end(
    ends: &mut impl Iterator<Item = Result<RoundEnd, Error>>,
    host: &impl Host,
) -> Result<RoundEnd, Error> {
    ends.next().unwrap_or_else(|| Err(host.busy()))
}

/// Counters stay below 2^53, which Lua's numbers (doubles) hold exactly.
const MAX_COUNTER: u64 = 1 << 53;

/// The value to put masters that lost their counter back in sync with,
/// after `read`, a read of every counter: the largest counter of a quorum
/// of masters in sync; or, when every master answered and none is in sync
/// (a new deployment, all lost at once, or a clock start that reached only
/// some masters: those read as out of sync until they raise a fence), the
/// start from the clocks ([`clock_start`]). `None` when neither holds.
/// With the value: whether it starts the counters anew (then every master
/// out of sync is started at once, without waiting).
fn sync_value(read: &Round) -> Option<(u64, bool)> {
    let nodes = read.nodes();
    let synced = nodes.iter().filter(|s| **s == NodeState::Ok).count();
    let lost = nodes.iter().filter(|s| **s == NodeState::Unsynced).count();
    if synced >= rules::quorum(nodes.len()) {
        read.max_count().map(|highest| (highest, false))
    } else if synced == 0 && lost == nodes.len() {
        // Nothing to learn from: start from the clocks.
        clock_start(read).map(|start| (start, true))
    } else {
        None
    }
}

/// Whether every master of `read` (which found them all out of sync)
/// reported a loss this client knew when the read began (`known`): only
/// then may the read start the counters from the clocks.
fn confirmed(read: &Round, known: &[u64]) -> bool {
    (0..read.nodes().len()).all(|node| {
        let lost = read.value(node);
        lost != 0 && known.get(node) == Some(&lost)
    })
}

/// The value a start from the clocks sets on every master, after a read
/// that every master answered out of sync: the largest clock (`TIME` in
/// microseconds, or a counter if one was larger) any of them reported, so
/// that a fast master's earlier start cannot exceed a later start on
/// slower ones (see [`crate::fencing`]). `None` if a master reported no
/// clock, or the value would reach 2^53.
fn clock_start(read: &Round) -> Option<u64> {
    let mut start = 0;
    for node in 0..read.nodes().len() {
        let clock = read.clock(node);
        if clock == 0 {
            return None;
        }
        start = start.max(clock);
    }
    (start > 0 && start < MAX_COUNTER).then_some(start)
}

/// Which rounds a [`FencedAcquire`] runs next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Read every counter (on first use, and when a master that lost its
    /// counter may be put back).
    Read,
    /// Put the masters that lost their counter back in sync.
    Sync,
    /// Acquire every lock, counting fences.
    Acquire,
    /// Raise the counters to the fences of the locks won.
    Raise,
    /// Nothing left to run.
    Done,
}

/// One lock of a [`FencedAcquire`].
#[allow(
    clippy::large_enum_variant,
    reason = "boxing the round would allocate per fenced acquire"
)]
enum Part {
    /// Its acquire has yet to run.
    Waiting,
    /// Its acquire won a quorum (it ended with `end`) and counted `fence`;
    /// its raise has yet to end.
    Granted { end: RoundEnd, fence: u64 },
    /// Decided: the lock, or the error (after which its release is on its
    /// way to every master).
    Done(Result<Lock, Error>),
}

/// The rounds a [`FencedAcquire`] runs next, all in the same tick.
#[derive(Debug)]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub struct NextRounds<'a> {
    /// One round per command.
    pub commands: SmallVec<[Command<'a>; 1]>,
    /// No round runs past this.
    pub cap: Option<Instant>,
    /// The rounds are acquires: a caller that gives up on them while in
    /// flight queues each one's release behind it.
    pub release_on_drop: bool,
}

/// A fenced acquire attempt of one or more locks (each its own lock: a
/// batch), as a state machine free of I/O: [`next`](Self::next) says which
/// rounds to run (all at once), [`handle`](Self::handle) takes how they
/// ended, until there is nothing left to run; [`finish`](Self::finish)
/// gives each lock's result. The blocking and the async drivers run the
/// same machine, so they cannot decide differently.
///
/// The rounds: a read of every counter (and a sync of the masters that may
/// be put back) when due, then every lock's acquire in one tick, then the
/// raise of every lock won in one tick. A lock whose acquire or raise
/// fails has its release queued on every master, without waiting.
///
/// The names (and a waiter's queue member) are borrowed by the front
/// ends, which run an attempt within one call, and owned by the
/// simulator, which keeps an attempt between its events.
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub struct FencedAcquire<'r> {
    /// Each lock's name, or packed names (`many`).
    keys: SmallVec<[Cow<'r, [u8]>; 1]>,
    many: bool,
    ttl_ms: u64,
    deadline: Option<Instant>,
    tokens: SmallVec<[[u8; TOKEN_LEN]; 1]>,
    parts: SmallVec<[Part; 1]>,
    phase: Phase,
    /// How long a lost counter waits before it is put back: the longest
    /// TTL plus its drift.
    wait: Duration,
    /// The read this attempt claimed: when, and the last read before it.
    claim: Option<(Instant, Option<Instant>)>,
    /// The loss ids this client knew of each master (0: none) when the
    /// read began: a start from the clocks needs every master to report
    /// one of those (see `plan_sync`).
    known: SmallVec<[u64; 8]>,
    /// The read was made again, to confirm a start.
    reread: bool,
    /// The sync round's loss ids (packed), value and mode.
    lost_ids: SmallVec<[u8; 128]>,
    sync_value: u64,
    sync_mode: SyncMode,
    /// The caller waits: its queue member, place and margin (see
    /// [`Command::fenced_wait_acquire`]), for an attempt of one lock.
    queue: Option<(Cow<'r, [u8]>, u64, u64)>,
    /// How the acquire round ended for a caller that waits, and when the
    /// keys that refused it expire.
    pub waited: Option<(Round, Option<Duration>)>,
}

impl std::fmt::Debug for FencedAcquire<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedAcquire")
            .field("waiting", &self.waited.is_some())
            .finish_non_exhaustive()
    }
}

#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
impl<'r> FencedAcquire<'r> {
    /// An attempt to acquire each of `keys` for `ttl_ms`, no round running
    /// past `deadline`, by `client` (which has fencing on).
    pub fn new<K: Into<Cow<'r, [u8]>>>(
        mut client: impl Host,
        keys: impl IntoIterator<Item = K>,
        many: bool,
        ttl_ms: u64,
        deadline: Option<Instant>,
    ) -> FencedAcquire<'r> {
        let keys: SmallVec<[Cow<'r, [u8]>; 1]> = keys.into_iter().map(Into::into).collect();
        let tokens = keys.iter().map(|_| client.token()).collect();
        let parts = keys.iter().map(|_| Part::Waiting).collect();
        let wait = client.fence_wait();
        let now = client.now();
        let (claim, known) = {
            let mut fences = client.fences();
            let claim = fences.claim_read(now, wait).map(|before| (now, before));
            (claim, fences.known_losses())
        };
        FencedAcquire {
            keys,
            many,
            ttl_ms,
            deadline,
            tokens,
            parts,
            phase: if claim.is_some() {
                Phase::Read
            } else {
                Phase::Acquire
            },
            wait,
            claim,
            known,
            reread: false,
            lost_ids: SmallVec::new(),
            sync_value: 0,
            sync_mode: SyncMode::Repair,
            queue: None,
            waited: None,
        }
    }

    /// The same attempt for a caller that waits: its acquire queues it
    /// where it is refused (see [`Command::fenced_wait_acquire`]).
    pub fn waiting(
        self,
        (member, place, margin): (impl Into<Cow<'r, [u8]>>, u64, u64),
    ) -> FencedAcquire<'r> {
        FencedAcquire {
            queue: Some((member.into(), place, margin)),
            ..self
        }
    }

    /// The rounds to run next, or `None` once the attempt has ended.
    pub fn next(&self) -> Option<NextRounds<'_>> {
        let one = |command| NextRounds {
            commands: SmallVec::from_buf([command]),
            cap: self.deadline,
            release_on_drop: false,
        };
        match self.phase {
            Phase::Read => Some(one(Command::fence_read())),
            Phase::Sync => Some(one(Command::fence_sync(
                &self.lost_ids,
                self.sync_mode,
                self.sync_value,
            ))),
            Phase::Acquire => Some(NextRounds {
                commands: (0..self.keys.len()).map(|i| self.acquire(i)).collect(),
                cap: self.deadline,
                release_on_drop: true,
            }),
            Phase::Raise => {
                let mut cap = self.deadline;
                let mut commands = SmallVec::new();
                for (i, part) in self.parts.iter().enumerate() {
                    if let Part::Granted { end, fence } = part {
                        commands.push(Command::raise(self.keys(i), &self.tokens[i], *fence));
                        // A raise that ends after its lock's validity is
                        // worth nothing.
                        cap = Some(cap.map_or(end.valid_until, |c| c.min(end.valid_until)));
                    }
                }
                Some(NextRounds {
                    commands,
                    cap,
                    release_on_drop: false,
                })
            }
            Phase::Done => None,
        }
    }

    /// The keys of lock `i`.
    fn keys(&self, i: usize) -> Keys<&[u8]> {
        Keys::new(&self.keys[i], self.many)
    }

    /// What lock `i`'s acquire claims: the release that follows it.
    fn claim(&self, i: usize) -> Claim<'_> {
        Claim::new(self.keys(i), &self.tokens[i])
    }

    /// The acquire of lock `i`.
    fn acquire(&self, i: usize) -> Command<'_> {
        match &self.queue {
            Some((member, place, margin)) => Command::fenced_wait_acquire(
                self.keys(i),
                &self.tokens[i],
                self.ttl_ms,
                (member, *place, *margin),
            ),
            None => Command::fenced_acquire(self.keys(i), &self.tokens[i], self.ttl_ms),
        }
    }

    /// Takes how the rounds [`next`](Self::next) gave ended, in its order
    /// ([`Error::TooManyInFlight`] for those that could not start).
    pub fn handle(&mut self, mut client: impl Host, ends: Ends) {
        let client = &mut client;
        let mut ends = ends.into_iter();
        match self.phase {
            Phase::Read => {
                self.phase = Phase::Acquire;
                match next_end(&mut ends, client) {
                    Ok(read) if read.result.is_ok() => self.plan_sync(client, &read),
                    _ => {
                        if let Some((at, before)) = self.claim {
                            client.fences().unclaim(at, before);
                        }
                    }
                }
            }
            Phase::Sync => {
                self.phase = Phase::Acquire;
                if let Ok(sync) = next_end(&mut ends, client) {
                    if sync.result.is_ok() {
                        let mut fences = client.fences();
                        let nodes = sync.round.nodes();
                        for (node, state) in nodes.iter().enumerate() {
                            if *state == NodeState::Ok {
                                fences.saw_synced(node);
                            }
                        }
                        let done = nodes.iter().filter(|s| **s == NodeState::Ok).count();
                        if self.sync_mode == SyncMode::Start && done >= rules::quorum(nodes.len()) {
                            fences.last_read = Some(sync.ended);
                        }
                    }
                }
            }
            Phase::Acquire => {
                self.phase = Phase::Done;
                for i in 0..self.parts.len() {
                    let end = next_end(&mut ends, client);
                    if let (Some(_), Ok(end)) = (&self.queue, &end) {
                        self.waited = Some((end.round.clone(), rules::free_in(&end.round)));
                    }
                    let part = self.acquired(client, i, end);
                    if matches!(part, Part::Granted { .. }) {
                        self.phase = Phase::Raise;
                    }
                    self.parts[i] = part;
                }
            }
            Phase::Raise => {
                self.phase = Phase::Done;
                for i in 0..self.parts.len() {
                    self.parts[i] = match std::mem::replace(&mut self.parts[i], Part::Waiting) {
                        Part::Granted {
                            end: acquire,
                            fence,
                        } => {
                            let end = next_end(&mut ends, client);
                            self.raised(client, i, acquire, fence, end)
                        }
                        other => other,
                    };
                }
            }
            Phase::Done => {}
        }
    }

    /// After a read of every counter that got answers: notes what it said,
    /// and plans the sync of the masters that may be put back in sync:
    /// those out of sync whose loss this client first saw the longest TTL
    /// (plus drift) ago, or all of them when the counters start anew, set
    /// to [`sync_value`]. Best effort: what fails is tried again later, and
    /// a master out of sync only keeps its grants out of fences.
    fn plan_sync(&mut self, client: &mut impl Host, read: &RoundEnd) {
        note_fences(client, read);
        let mut fences = client.fences();
        let plan = sync_value(&read.round);
        if fences.last_read.is_some() || matches!(plan, Some((_, false))) {
            // Until a read has found a quorum of counters in sync (or a
            // start has reached a quorum), every attempt reads first: one
            // that acquired at once, while a start is under way or after a
            // read that a master did not answer, would find no counter to
            // count. Afterwards reads are spaced (`READ_EVERY`).
            fences.last_read = Some(read.ended);
        }
        let Some((value, start)) = plan else {
            return;
        };
        if start && !confirmed(&read.round, &self.known) {
            // A read is not one moment: a master may have lost its data
            // while the read was under way, after another client started
            // the counters and raised a fence there. A start trusts only
            // losses it knew when its read began; the read is made once
            // more, knowing what this one reported.
            self.known = fences.known_losses();
            if !std::mem::replace(&mut self.reread, true) {
                self.phase = Phase::Read;
            }
            return;
        }
        let nodes = read.round.nodes();
        for (node, slot) in fences.lost.iter().enumerate() {
            if let (Some((id, seen)), Some(NodeState::Unsynced)) = (slot, nodes.get(node)) {
                // Waited for since before the read began: every master
                // ran the read that long after the loss.
                if start || due(*seen, read.started, self.wait) {
                    commands::pack_key(&mut self.lost_ids, id.to_string().as_bytes());
                }
            }
        }
        if !self.lost_ids.is_empty() {
            self.sync_value = value;
            self.sync_mode = if start {
                SyncMode::Start
            } else {
                SyncMode::Repair
            };
            self.phase = Phase::Sync;
        }
    }

    /// After lock `i`'s acquire round.
    fn acquired(&self, client: &mut impl Host, i: usize, end: Result<RoundEnd, Error>) -> Part {
        // Not started: nothing was sent.
        let end = match end {
            Ok(end) => end,
            Err(error) => return Part::Done(Err(error)),
        };
        let error = match end.result {
            // A quorum of grants in sync carries counts.
            Ok(Decision::Quorum { .. }) => match note_fences(client, &end) {
                Some(fence) => return Part::Granted { end, fence },
                None => Error::Unfenced(client.report(&end)),
            },
            Ok(Decision::TooSlow) => Error::TooSlow(client.report(&end)),
            Ok(Decision::NoQuorum) => {
                note_fences(client, &end);
                acquire_refused(client.report(&end))
            }
            // The script may have run before the poller failed.
            Err(kind) => Error::Io(kind),
        };
        let release = self.claim(i).release(Some(&end.round));
        Part::Done(Err(client.not_acquired(&release, &end, error)))
    }

    /// After lock `i`'s raise round (`end`), its acquire having ended with
    /// `acquire` and counted `fence`. The fence is good once a quorum
    /// raised its counter before the lock's validity ran out.
    fn raised(
        &self,
        client: &mut impl Host,
        i: usize,
        acquire: RoundEnd,
        fence: u64,
        end: Result<RoundEnd, Error>,
    ) -> Part {
        let valid_until = acquire.valid_until;
        let raised = end.and_then(|end| {
            note_fences(client, &end);
            match end.result {
                Ok(Decision::Quorum { .. }) if end.ended < valid_until => Ok(()),
                Ok(Decision::Quorum { .. } | Decision::TooSlow) => {
                    Err(Error::TooSlow(client.report(&end)))
                }
                Ok(Decision::NoQuorum) => {
                    let report = client.report(&end);
                    if report.unreachable() > report.nodes().len() - report.quorum() {
                        Err(Error::Unavailable(report))
                    } else {
                        Err(Error::Unfenced(report))
                    }
                }
                Err(kind) => Err(Error::Io(kind)),
            }
        });
        Part::Done(match raised {
            Ok(()) => {
                client.won(&acquire);
                Ok(Lock::new(
                    self.keys(i),
                    self.tokens[i],
                    valid_until,
                    Some(fence),
                    acquire.round.reached(),
                ))
            }
            Err(error) => {
                let release = self.claim(i).release(Some(&acquire.round));
                Err(client.not_acquired(&release, &acquire, error))
            }
        })
    }

    /// The caller gives up on the attempt during its raise: each lock won
    /// is released on every master its acquire went out to, without
    /// waiting (behind the raise on every connection).
    pub(super) fn abandon(&self, client: &Redlock) {
        if self.phase != Phase::Raise {
            return;
        }
        let counters = &client.counters;
        client.engine.abandon(|driver| {
            let now = crate::clock::now();
            for release in self.won() {
                // Followed until every master has answered, as a dropped
                // plain acquire's release is.
                if driver.release_orphan(&release, now) {
                    counters.drop_release();
                }
            }
        });
    }

    /// The releases of the locks won whose raise has yet to end (a lock
    /// is in that state only while the attempt raises): what a caller
    /// that gives up on the attempt now releases.
    pub fn won(&self) -> impl Iterator<Item = Command<'_>> {
        self.parts
            .iter()
            .enumerate()
            .filter_map(|(i, part)| match part {
                Part::Granted { end, .. } => Some(self.claim(i).release(Some(&end.round))),
                _ => None,
            })
    }

    /// Each lock's result, in the order of the keys.
    pub fn finish(self, client: impl Host) -> SmallVec<[Result<Lock, Error>; 1]> {
        self.parts
            .into_iter()
            .map(|part| match part {
                Part::Done(result) => result,
                // (Not reached: a finished attempt decided every lock.)
                Part::Waiting | Part::Granted { .. } => Err(client.busy()),
            })
            .collect()
    }
}

impl Redlock {
    /// A fenced acquire attempt of each of `keys` (their rounds cut short
    /// at `deadline` if one is given), run on this thread; each lock's
    /// result, in order.
    pub(super) fn fenced_attempt<'r>(
        &self,
        keys: impl IntoIterator<Item = &'r [u8]>,
        many: bool,
        ttl_ms: u64,
        deadline: Option<Instant>,
    ) -> SmallVec<[Result<Lock, Error>; 1]> {
        let mut attempt = FencedAcquire::new(self, keys, many, ttl_ms, deadline);
        self.run_fenced(&mut attempt);
        attempt.finish(self)
    }

    /// Runs the rounds of `attempt` on this thread until it has ended.
    pub(super) fn run_fenced(&self, attempt: &mut FencedAcquire<'_>) {
        loop {
            let ends = {
                let Some(next) = attempt.next() else {
                    break;
                };
                self.rounds(&next.commands, next.cap)
            };
            attempt.handle(self, ends);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, reason = "a test fails loudly")]

    use std::time::Duration;

    use smallvec::smallvec;

    use super::{FencedAcquire, Phase};
    use crate::client::observe::RoundSpan;
    use crate::client::rounds::Ends;
    use crate::client::{Lock, Redlock, RoundEnd};
    use crate::commands::{self, Command, Keys, SyncMode};
    use crate::error::Error;
    use crate::rules::{self, Decision, Op, Reply, Round};

    /// A fenced client of three masters that nothing answers (no round
    /// runs here: the tests hand the machine how its rounds ended).
    fn client() -> Redlock {
        Redlock::builder([
            "redis://127.0.0.1:1",
            "redis://127.0.0.1:2",
            "redis://127.0.0.1:3",
        ])
        .fencing(Duration::from_secs(10))
        .build()
        .expect("build")
    }

    /// How a round of `op` ended in which master `i` gave `replies[i]`.
    fn ended(op: Op, replies: impl AsRef<[Reply]>) -> Result<RoundEnd, Error> {
        ended_on(op, replies.as_ref().len(), replies.as_ref())
    }

    /// How a round of `op` over `n` masters ended in which master `i` gave
    /// `replies[i]`, and the others timed out.
    fn ended_on(op: Op, n: usize, replies: &[Reply]) -> Result<RoundEnd, Error> {
        let now = crate::clock::now();
        let ttl = match op {
            Op::Acquire => Duration::from_secs(10),
            _ => Duration::ZERO,
        };
        let timeout = Duration::from_secs(1);
        let mut round = Round::new(op, n, ttl, rules::drift(ttl, 0.01), timeout, now);
        for (node, reply) in replies.iter().enumerate() {
            round.handle_reply(node, *reply, now);
        }
        round.handle_timeout(now + timeout);
        Ok(RoundEnd {
            result: Ok(round.decision().unwrap_or(Decision::NoQuorum)),
            started: round.started(),
            valid_until: round.valid_until(),
            ended: now,
            span: RoundSpan::new(op, 0),
            round,
        })
    }

    /// The ops of the rounds `attempt` runs next.
    fn ops(attempt: &FencedAcquire<'_>) -> Vec<Op> {
        attempt
            .next()
            .map(|next| next.commands.iter().map(Command::op).collect())
            .unwrap_or_default()
    }

    /// A read is not one moment: a master that lost its data while the
    /// read was under way (after another client had started the counters
    /// and raised a fence there) reports a loss the client never saw.
    /// Nothing starts from the clocks until a second read reports the
    /// same losses; if it reports another one, nothing starts at all.
    #[test]
    fn a_start_from_the_clocks_waits_for_losses_it_knew_when_the_read_began() {
        use Reply::UnsyncedRead;
        let client = client();
        let mut attempt = FencedAcquire::new(&client, [&b"a"[..]], false, 10_000, None);
        let read = |lost: [u64; 3]| -> Ends {
            smallvec![ended(
                Op::FenceRead,
                lost.map(|lost| UnsyncedRead { lost, clock: 500 })
            )]
        };
        attempt.handle(&client, read([7, 8, 9]));
        assert_eq!(ops(&attempt), [Op::FenceRead], "read again, not started");
        // Master 2 lost its data again in the meantime: a new loss.
        attempt.handle(&client, read([7, 8, 10]));
        assert_eq!(ops(&attempt), [Op::Acquire], "no start, no third read");
    }

    #[test]
    fn a_first_attempt_reads_starts_the_counters_acquires_and_raises() {
        use Reply::{Count, Ok as Done, Refused, UnsyncedRead};
        let client = client();
        let keys: [&[u8]; 2] = [b"a", b"b"];
        let mut attempt = FencedAcquire::new(&client, keys, false, 10_000, None);
        assert_eq!(ops(&attempt), [Op::FenceRead]);
        // A new deployment: every master answers, none in sync, each with
        // a loss this client did not know when the read began: the read
        // is made again before anything starts.
        let all_lost = |clocks: [u64; 3]| {
            smallvec![ended(
                Op::FenceRead,
                [
                    UnsyncedRead {
                        lost: 7,
                        clock: clocks[0]
                    },
                    UnsyncedRead {
                        lost: 8,
                        clock: clocks[1]
                    },
                    UnsyncedRead {
                        lost: 9,
                        clock: clocks[2]
                    },
                ]
            )]
        };
        attempt.handle(&client, all_lost([300, 500, 400]));
        assert_eq!(ops(&attempt), [Op::FenceRead], "a second read");
        // The same losses again: known, the start is confirmed.
        attempt.handle(&client, all_lost([300, 500, 400]));
        let next = attempt.next().expect("a sync");
        // Every master, at once, from the largest clock.
        let mut ids = Vec::new();
        for id in [&b"7"[..], b"8", b"9"] {
            commands::pack_key(&mut ids, id);
        }
        assert_eq!(
            next.commands[..],
            [Command::fence_sync(&ids, SyncMode::Start, 500)]
        );
        drop(next);
        attempt.handle(&client, smallvec![ended(Op::FenceSync, [Done, Done, Done])]);
        // Both acquires in one tick, released should the caller give up.
        let next = attempt.next().expect("the acquires");
        let acquires: Vec<_> = (0..2)
            .map(|i| Command::fenced_acquire(Keys::One(keys[i]), &attempt.tokens[i], 10_000))
            .collect();
        assert_eq!(next.commands[..], acquires[..]);
        assert!(next.release_on_drop);
        drop(next);
        let ends: Ends = smallvec![
            ended(Op::Acquire, [Count(100), Count(101), Count(99)]),
            ended(Op::Acquire, [Refused, Refused, Refused]),
        ];
        let valid_until = ends[0].as_ref().expect("ended").valid_until;
        attempt.handle(&client, ends);
        // The raise of the lock won, up to its validity.
        let next = attempt.next().expect("the raise");
        assert_eq!(
            next.commands[..],
            [Command::raise(Keys::One(b"a"), &attempt.tokens[0], 101)]
        );
        assert_eq!(next.cap, Some(valid_until));
        assert!(!next.release_on_drop);
        drop(next);
        attempt.handle(&client, smallvec![ended(Op::Raise, [Done, Done, Done])]);
        assert!(attempt.next().is_none());
        let results = attempt.finish(&client);
        let lock = results[0].as_ref().expect("won");
        assert_eq!((lock.resource(), lock.fence()), (&b"a"[..], Some(101)));
        assert!(
            matches!(results[1], Err(Error::Contended(_))),
            "{results:?}"
        );
        // Read, and nothing lost: the next attempt acquires at once.
        let next = FencedAcquire::new(&client, [&b"c"[..]], false, 10_000, None);
        assert_eq!(ops(&next), [Op::Acquire]);
    }

    /// Until a start from the clocks has reached a quorum, every attempt
    /// reads first: one that began while another's start was under way and
    /// acquired at once would find no counter to count.
    #[test]
    fn attempts_read_until_a_start_has_reached_a_quorum() {
        use Reply::{Ok as Done, Refused, UnsyncedRead};
        let client = client();
        let key: [&[u8]; 1] = [b"r"];
        let mut starting = FencedAcquire::new(&client, key, false, 10_000, None);
        let all_lost = || -> Ends {
            smallvec![ended(
                Op::FenceRead,
                [7, 8, 9].map(|lost| UnsyncedRead { lost, clock: 500 })
            )]
        };
        starting.handle(&client, all_lost());
        assert_eq!(ops(&starting), [Op::FenceRead], "read again");
        let meanwhile = FencedAcquire::new(&client, key, false, 10_000, None);
        assert_eq!(
            ops(&meanwhile),
            [Op::FenceRead],
            "before the start is confirmed"
        );
        starting.handle(&client, all_lost());
        assert_eq!(ops(&starting), [Op::FenceSync]);
        let meanwhile = FencedAcquire::new(&client, key, false, 10_000, None);
        assert_eq!(ops(&meanwhile), [Op::FenceRead], "while the start is sent");
        starting.handle(
            &client,
            smallvec![ended(Op::FenceSync, [Done, Refused, Refused])],
        );
        let meanwhile = FencedAcquire::new(&client, key, false, 10_000, None);
        assert_eq!(
            ops(&meanwhile),
            [Op::FenceRead],
            "a start short of a quorum"
        );
        let mut starting = FencedAcquire::new(&client, key, false, 10_000, None);
        starting.handle(&client, all_lost());
        // Master 0 was noted in sync by the start: its loss is news.
        assert_eq!(ops(&starting), [Op::FenceRead]);
        starting.handle(&client, all_lost());
        assert_eq!(ops(&starting), [Op::FenceSync]);
        starting.handle(
            &client,
            smallvec![ended(Op::FenceSync, [Done, Done, Refused])],
        );
        let after = FencedAcquire::new(&client, key, false, 10_000, None);
        assert_eq!(ops(&after), [Op::Acquire], "started on a quorum");
    }

    /// A first read that finds a quorum of counters in sync is the
    /// client's last read: the next attempt acquires at once. One that
    /// finds fewer (a master did not answer, none in sync) is not: the
    /// next attempt reads again.
    #[test]
    fn a_first_read_counts_once_it_finds_a_quorum_in_sync() {
        use Reply::{Count, UnsyncedRead};
        let key: [&[u8]; 1] = [b"r"];
        let in_sync = client();
        let mut attempt = FencedAcquire::new(&in_sync, key, false, 10_000, None);
        attempt.handle(
            &in_sync,
            smallvec![ended(
                Op::FenceRead,
                [Count(9), Count(9), UnsyncedRead { lost: 4, clock: 9 }]
            )],
        );
        let next = FencedAcquire::new(&in_sync, key, false, 10_000, None);
        assert_eq!(ops(&next), [Op::Acquire]);
        let short = client();
        let mut attempt = FencedAcquire::new(&short, key, false, 10_000, None);
        let lost = UnsyncedRead { lost: 4, clock: 9 };
        attempt.handle(&short, smallvec![ended_on(Op::FenceRead, 3, &[lost, lost])]);
        let next = FencedAcquire::new(&short, key, false, 10_000, None);
        assert_eq!(ops(&next), [Op::FenceRead], "a master did not answer");
    }

    /// A read after the first is claimed by the attempt that makes it: the
    /// attempts meanwhile acquire without reading; if it fails, the next
    /// attempt reads.
    #[test]
    fn a_read_is_claimed_and_given_back_when_it_fails() {
        let client = client();
        let now = crate::clock::now();
        let long_ago = now - Duration::from_secs(20);
        {
            let mut fences = client.fences();
            fences.last_read = Some(long_ago);
            fences.lost[1] = Some((5, long_ago));
        }
        let key: [&[u8]; 1] = [b"r"];
        let mut reading = FencedAcquire::new(&client, key, false, 10_000, None);
        assert_eq!(reading.phase, Phase::Read);
        let meanwhile = FencedAcquire::new(&client, key, false, 10_000, None);
        assert_eq!(meanwhile.phase, Phase::Acquire, "the read is claimed");
        // The read could not start.
        reading.handle(&client, Ends::new());
        assert_eq!(reading.phase, Phase::Acquire);
        assert_eq!(client.fences().last_read, Some(long_ago), "given back");
        let next = FencedAcquire::new(&client, key, false, 10_000, None);
        assert_eq!(next.phase, Phase::Read);
    }

    /// Each lock of a fenced attempt gets a token of its own, fresh for
    /// every attempt: two locks (or two attempts) with one token could
    /// release or extend each other.
    #[test]
    fn each_lock_of_each_attempt_has_a_token_of_its_own() {
        let client = client();
        let keys: [&[u8]; 2] = [b"a", b"b"];
        let first = FencedAcquire::new(&client, keys, false, 10_000, None);
        let second = FencedAcquire::new(&client, keys, false, 10_000, None);
        let tokens = [first.tokens[0], first.tokens[1], second.tokens[0]];
        assert!(
            tokens[0] != tokens[1] && tokens[0] != tokens[2] && tokens[1] != tokens[2],
            "{tokens:?}"
        );
    }

    /// A fenced attempt on `r` whose counters were just read and whose
    /// acquire every master granted with a count: its raise is next.
    fn at_its_raise(client: &Redlock) -> FencedAcquire<'static> {
        client.fences().last_read = Some(crate::clock::now());
        let mut attempt = FencedAcquire::new(client, [&b"r"[..]], false, 10_000, None);
        let counted = [Reply::Count(3), Reply::Count(3), Reply::Count(3)];
        attempt.handle(client, smallvec![ended(Op::Acquire, counted)]);
        attempt
    }

    /// A fenced lock counts in the client's statistics as one attempt and
    /// one acquisition once its raise has won it, and not before.
    #[test]
    fn a_lock_won_by_its_raise_counts_as_acquired() {
        use Reply::Ok as Done;
        let client = client();
        let mut attempt = at_its_raise(&client);
        assert_eq!((client.stats().attempts, client.stats().acquired), (0, 0));
        attempt.handle(&client, smallvec![ended(Op::Raise, [Done, Done, Done])]);
        assert!(attempt.finish(&client)[0].is_ok());
        assert_eq!((client.stats().attempts, client.stats().acquired), (1, 1));
    }

    /// A raise that misses a quorum fails the lock, as `Unfenced`.
    #[test]
    fn a_raise_without_a_quorum_fails_the_lock() {
        use Reply::{Count, Refused};
        let client = client();
        let mut attempt = at_its_raise(&client);
        assert_eq!(attempt.phase, Phase::Raise);
        attempt.handle(
            &client,
            smallvec![ended(Op::Raise, [Refused, Refused, Count(1)])],
        );
        let results = attempt.finish(&client);
        assert!(matches!(results[0], Err(Error::Unfenced(_))), "{results:?}");
        assert_eq!(client.stats().unfenced, 1);
    }
    /// A client with fencing whose book has read the counters `ago`, and
    /// in which master `node` lost its counter (loss id 5) `lost_ago`.
    fn with_loss(ago: Duration, node: usize, lost_ago: Duration) -> Redlock {
        let client = client();
        let now = crate::clock::now();
        let mut fences = client.fences();
        fences.last_read = Some(now - ago);
        fences.lost[node] = Some((5, now - lost_ago));
        drop(fences);
        client
    }

    /// Reads repeat only while a loss has waited the longest TTL (and its
    /// drift) and the last read is a second old.
    #[test]
    fn a_read_is_due_for_a_loss_that_waited_long_enough() {
        let long = Duration::from_secs(20);
        let key: [&[u8]; 1] = [b"r"];
        let nothing_lost = client();
        nothing_lost.fences().last_read = Some(crate::clock::now() - long);
        let attempt = FencedAcquire::new(&nothing_lost, key, false, 10_000, None);
        assert_eq!(attempt.phase, Phase::Acquire, "nothing to put back");
        let fresh = with_loss(long, 1, Duration::from_secs(1));
        let attempt = FencedAcquire::new(&fresh, key, false, 10_000, None);
        assert_eq!(attempt.phase, Phase::Acquire, "the loss has not waited");
        let waited = with_loss(long, 1, long);
        let attempt = FencedAcquire::new(&waited, key, false, 10_000, None);
        assert_eq!(attempt.phase, Phase::Read);
    }

    /// A read plans a sync of the losses that waited since before it
    /// began, to the largest counter of the quorum in sync; a sync notes in
    /// sync the masters that did it, and only them.
    #[test]
    fn a_sync_repairs_the_losses_that_waited_and_notes_them() {
        use Reply::{Count, Ok as Done, Refused, Unsynced};
        let long = Duration::from_secs(20);
        let client = with_loss(long, 2, long);
        let mut attempt = FencedAcquire::new(&client, [&b"r"[..]], false, 10_000, None);
        attempt.handle(
            &client,
            smallvec![ended(Op::FenceRead, [Count(40), Count(38), Unsynced(5)])],
        );
        let next = attempt.next().expect("a sync");
        let mut ids = Vec::new();
        commands::pack_key(&mut ids, b"5");
        assert_eq!(
            next.commands[..],
            [Command::fence_sync(&ids, SyncMode::Repair, 40)]
        );
        drop(next);
        attempt.handle(
            &client,
            smallvec![ended(Op::FenceSync, [Refused, Done, Refused])],
        );
        let lost: Vec<bool> = client.fences().lost.iter().map(Option::is_some).collect();
        assert_eq!(lost, [false, false, true], "not repaired there");
    }

    /// A read the poller failed (its round may hold anything) plans
    /// nothing, and is given back.
    #[test]
    fn a_read_whose_round_failed_is_given_back() {
        use Reply::UnsyncedRead;
        let client = client();
        let mut attempt = FencedAcquire::new(&client, [&b"r"[..]], false, 10_000, None);
        let mut read = ended(
            Op::FenceRead,
            [UnsyncedRead {
                lost: 7,
                clock: 300,
            }; 3],
        )
        .expect("ended");
        read.result = Err(std::io::ErrorKind::Other);
        attempt.handle(&client, smallvec![Ok(read)]);
        assert_eq!(attempt.phase, Phase::Acquire, "no sync");
        assert_eq!(client.fences().last_read, None);
    }

    /// The simulator's fenced machine shows the book (feature `sim`) for
    /// the model check to compare with the model's: each master's loss
    /// as this client first saw it, and when the counters were last read.
    #[cfg(feature = "sim")]
    #[test]
    fn the_book_shows_each_loss_as_first_seen_and_the_last_read() {
        use Reply::{Count, Unsynced};
        let client = client();
        let mut attempt = FencedAcquire::new(&client, [&b"r"[..]], false, 10_000, None);
        let read = ended(Op::FenceRead, [Count(4), Unsynced(6), Count(4)]).expect("ended");
        let at = read.ended;
        attempt.handle(&client, smallvec![Ok(read)]);
        let book = client.fences();
        assert_eq!(book.losses(), [None, Some((6, at)), None]);
        assert_eq!(book.last_read(), Some(at));
    }

    /// A fenced acquire's count from a master says it is in sync; a plain
    /// `OK` (a raise's) says nothing of its counter.
    #[test]
    fn only_a_count_notes_a_master_in_sync() {
        use Reply::{Count, Ok as Done, Refused};
        let long = Duration::from_secs(20);
        let client = with_loss(long, 0, long);
        client.fences().lost[1] = Some((6, crate::clock::now()));
        client.fences().last_read = Some(crate::clock::now());
        let mut attempt = FencedAcquire::new(&client, [&b"r"[..]], false, 10_000, None);
        attempt.handle(
            &client,
            smallvec![ended(Op::Acquire, [Refused, Count(3), Count(3)])],
        );
        attempt.handle(&client, smallvec![ended(Op::Raise, [Done, Done, Done])]);
        let lost: Vec<bool> = client.fences().lost.iter().map(Option::is_some).collect();
        assert_eq!(lost, [true, false, false]);
    }

    /// A start from the clocks stays below 2^53, which Lua's numbers hold
    /// exactly.
    #[test]
    fn a_clock_start_stays_below_2_pow_53() {
        use Reply::UnsyncedRead;
        let read = |top: u64| {
            let round = ended(
                Op::FenceRead,
                [
                    UnsyncedRead { lost: 1, clock: 5 },
                    UnsyncedRead {
                        lost: 2,
                        clock: top,
                    },
                    UnsyncedRead { lost: 3, clock: 7 },
                ],
            );
            super::sync_value(&round.expect("ended").round)
        };
        assert_eq!(read((1 << 53) - 1), Some(((1 << 53) - 1, true)));
        assert_eq!(read(1 << 53), None);
        assert_eq!(read(u64::MAX), None);
    }

    /// The lock of an attempt on `masters` masters (all granting) whose
    /// raise ends `late` after the lock's validity (`None`: in time), with
    /// master `i` giving `raise[i]` (the others time out).
    fn raised(masters: usize, raise: &[Reply], late: Option<Duration>) -> Result<Lock, Error> {
        let addresses = (1..=masters).map(|port| format!("redis://127.0.0.1:{port}"));
        let client = Redlock::builder(addresses)
            .fencing(Duration::from_secs(10))
            .build()
            .expect("build");
        client.fences().last_read = Some(crate::clock::now());
        let mut attempt = FencedAcquire::new(&client, [&b"r"[..]], false, 10_000, None);
        let acquire = ended(Op::Acquire, vec![Reply::Count(3); masters]);
        let valid_until = acquire.as_ref().expect("ended").valid_until;
        attempt.handle(&client, smallvec![acquire]);
        let mut end = ended_on(Op::Raise, masters, raise).expect("ended");
        if let Some(late) = late {
            end.ended = valid_until + late;
        }
        attempt.handle(&client, smallvec![Ok(end)]);
        attempt.finish(&client).remove(0)
    }

    /// A raise is good only if a quorum raised before the lock's validity
    /// ran out; one that missed a quorum finds the masters unavailable if
    /// more failed than could (with a quorum left), else the lock unfenced.
    #[test]
    fn a_raise_too_late_or_without_a_quorum_fails_the_lock() {
        use Reply::{Ok as Done, Refused};
        assert!(raised(3, &[Done; 3], None).is_ok());
        for late in [Duration::ZERO, Duration::from_millis(1)] {
            let lock = raised(3, &[Done; 3], Some(late));
            assert!(matches!(lock, Err(Error::TooSlow(_))), "{lock:?}");
        }
        // Five masters: a quorum of three, two may fail.
        let lock = raised(5, &[Done, Done, Refused], None);
        assert!(matches!(lock, Err(Error::Unfenced(_))), "{lock:?}");
        let lock = raised(5, &[Done, Done], None);
        assert!(matches!(lock, Err(Error::Unavailable(_))), "{lock:?}");
    }

    /// A caller that waits sends the fenced acquire that waits.
    #[test]
    fn a_waiting_attempt_queues_its_caller() {
        let client = client();
        client.fences().last_read = Some(crate::clock::now());
        let queue = (&b"50|1|redlock-mio:wake:00000000000000aa"[..], 7, 900);
        let attempt = FencedAcquire::new(&client, [&b"r"[..]], false, 10_000, None).waiting(queue);
        let next = attempt.next().expect("the acquire");
        assert_eq!(
            next.commands[..],
            [Command::fenced_wait_acquire(
                Keys::One(b"r"),
                &attempt.tokens[0],
                10_000,
                queue
            )]
        );
    }

    /// Given up during its raise, an attempt releases each lock it won,
    /// followed to the end; given up before, it has nothing to release.
    #[test]
    fn an_attempt_given_up_during_its_raise_releases_what_it_won() {
        use Reply::{Count, Refused};
        let client = client();
        client.fences().last_read = Some(crate::clock::now());
        let keys: [&[u8]; 2] = [b"a", b"b"];
        let mut attempt = FencedAcquire::new(&client, keys, false, 10_000, None);
        attempt.abandon(&client);
        assert_eq!(client.stats().drop_releases, 0, "nothing won yet");
        attempt.handle(
            &client,
            smallvec![
                ended(Op::Acquire, [Count(3), Count(3), Count(3)]),
                ended(Op::Acquire, [Refused, Refused, Refused]),
            ],
        );
        attempt.abandon(&client);
        assert_eq!(client.stats().drop_releases, 1);
    }

    /// Run for real against masters that refuse every connection: one
    /// result per lock, each the failure of its rounds.
    #[test]
    fn an_attempt_run_on_masters_that_are_down_fails_each_lock() {
        let client = client();
        let keys: [&[u8]; 2] = [b"a", b"b"];
        let results = client.fenced_attempt(keys, false, 10_000, None);
        assert_eq!(results.len(), 2);
        for result in &results {
            assert!(matches!(result, Err(Error::Unavailable(_))), "{result:?}");
        }
    }
}
