//! Fenced acquisitions: the two rounds of a fenced acquire, and putting
//! masters that lost their fence counter back in sync. Why this is sound:
//! [`crate::fencing`].

use std::time::{Duration, Instant};

use smallvec::SmallVec;

use super::rounds::acquire_refused;
use super::{Redlock, RoundEnd};
use crate::commands::{self, Command};
use crate::error::Error;
use crate::rules::{self, Decision, NodeState, Op, Round};

/// Reads are not repeated more often than this while a master waits to be
/// put back in sync and cannot be yet.
const READ_EVERY: Duration = Duration::from_secs(1);

/// Counters stay below 2^53, which Lua's numbers (doubles) hold exactly.
const MAX_COUNTER: u64 = 1 << 53;

/// What a sync round sends after a read: the value, and the mode
/// ([`commands::SYNC_START`] or [`commands::SYNC_REPAIR`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SyncPlan {
    pub(super) value: u64,
    pub(super) mode: &'static [u8],
}

/// What this client knows of the masters' fence counters.
#[derive(Debug, Default)]
pub(super) struct FenceBook {
    /// Per master: the loss id it reported when its counter was missing,
    /// and when this client first saw that id.
    lost: SmallVec<[Option<(u64, Instant)>; 8]>,
    /// When the counters were last read; `None` before the first read.
    last_read: Option<Instant>,
}

impl FenceBook {
    pub(super) fn new(masters: usize) -> FenceBook {
        FenceBook {
            lost: SmallVec::from_elem(None, masters),
            last_read: None,
        }
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

    /// Whether a master has waited `wait` since its loss was first seen.
    fn any_due(&self, now: Instant, wait: Duration) -> bool {
        self.lost
            .iter()
            .flatten()
            .any(|&(_, seen)| due(seen, now, wait))
    }

    /// After a read (`round`, ended at `now`, whose largest count in sync
    /// is `highest`): what to sync, packing into `ids` the loss ids it may
    /// repair; `None` if nothing. With a quorum in sync, the masters that
    /// have waited `wait` since their loss was first seen get `highest`.
    /// With every master answered and none in sync, every one is started
    /// from the largest clock any of them reported (see
    /// [`clock_start`]).
    pub(super) fn plan_sync(
        &mut self,
        round: &Round,
        highest: Option<u64>,
        now: Instant,
        wait: Duration,
        ids: &mut SmallVec<[u8; 128]>,
    ) -> Option<SyncPlan> {
        self.last_read = Some(now);
        let nodes = round.nodes();
        let synced = nodes.iter().filter(|s| **s == NodeState::Ok).count();
        let lost = nodes.iter().filter(|s| **s == NodeState::Unsynced).count();
        let plan = if synced >= rules::quorum(nodes.len()) {
            SyncPlan {
                value: highest?,
                mode: commands::SYNC_REPAIR,
            }
        } else if synced == 0 && lost == nodes.len() {
            // Nothing to learn from: start from the clocks.
            SyncPlan {
                value: clock_start(round)?,
                mode: commands::SYNC_START,
            }
        } else {
            return None;
        };
        let start = plan.mode == commands::SYNC_START;
        for (node, slot) in self.lost.iter().enumerate() {
            if let (Some((id, seen)), Some(NodeState::Unsynced)) = (slot, nodes.get(node)) {
                if start || due(*seen, now, wait) {
                    commands::pack_key(ids, id.to_string().as_bytes());
                }
            }
        }
        (!ids.is_empty()).then_some(plan)
    }

    /// Whether the counters should be read before the next fenced acquire.
    fn read_due(&self, now: Instant, wait: Duration) -> bool {
        match self.last_read {
            None => true,
            Some(at) => self.any_due(now, wait) && now.saturating_duration_since(at) >= READ_EVERY,
        }
    }
}

fn due(seen: Instant, now: Instant, wait: Duration) -> bool {
    now.saturating_duration_since(seen) >= wait
}

/// The value a start from the clocks sets on every master, after a read
/// that every master answered out of sync: the largest clock (`TIME` in
/// microseconds, or a counter if one was larger) any of them reported, so
/// that a fast master's earlier start cannot exceed a later start on
/// slower ones (see [`crate::fencing`]). `None` if a master reported no
/// clock, or the value would reach 2^53.
fn clock_start(round: &Round) -> Option<u64> {
    let mut start = 0;
    for node in 0..round.nodes().len() {
        let clock = round.clock(node);
        if clock == 0 {
            return None;
        }
        start = start.max(clock);
    }
    (start > 0 && start < MAX_COUNTER).then_some(start)
}

impl Redlock {
    /// After an acquire round that reached a quorum: for a fenced acquire,
    /// notes what it said of the counters and runs the raise round; the
    /// fence, or `None` for a plain acquire.
    pub(super) fn fence(
        &self,
        acquire: &Command<'_>,
        end: &RoundEnd,
        deadline: Option<Instant>,
    ) -> Result<Option<u64>, Error> {
        if !acquire.fenced {
            return Ok(None);
        }
        // A quorum of grants in sync carries counts.
        let fence = self
            .note_fences(end)
            .ok_or_else(|| Error::Unfenced(self.report(end)))?;
        self.raise(acquire, fence, end.valid_until, deadline)?;
        Ok(Some(fence))
    }

    /// The error for an acquire round without a quorum: see
    /// [`acquire_refused`].
    pub(super) fn refused(&self, fenced: bool, end: &RoundEnd) -> Error {
        if fenced {
            self.note_fences(end);
        }
        acquire_refused(self.report(end))
    }

    /// The second round: raise the counters to `fence` where the lock's
    /// keys still hold its token. The fence is good once a quorum did so
    /// before the lock's validity ran out.
    fn raise(
        &self,
        acquire: &Command<'_>,
        fence: u64,
        valid_until: Instant,
        deadline: Option<Instant>,
    ) -> Result<(), Error> {
        let command = Command {
            op: Op::Fence,
            ttl_ms: fence,
            fenced: false,
            ..*acquire
        };
        let cap = deadline.map_or(valid_until, |d| d.min(valid_until));
        let end = self.round(&command, Some(cap))?;
        self.note_fences(&end);
        match end.result {
            Ok(Decision::Quorum { .. }) if end.ended < valid_until => Ok(()),
            Ok(Decision::Quorum { .. } | Decision::TooSlow) => {
                Err(Error::TooSlow(self.report(&end)))
            }
            Ok(Decision::NoQuorum) => {
                let report = self.report(&end);
                if report.unreachable() > report.nodes().len() - report.quorum() {
                    Err(Error::Unavailable(report))
                } else {
                    Err(Error::Unfenced(report))
                }
            }
            Err(kind) => Err(Error::Io(kind)),
        }
    }

    /// Records what a round said of each master's counter; returns the
    /// largest count among the masters that did what was asked.
    fn note_fences(&self, end: &RoundEnd) -> Option<u64> {
        let (round, now) = (&end.round, end.ended);
        let mut fences = self.fences();
        for (node, state) in round.nodes().iter().enumerate() {
            match state {
                NodeState::Unsynced => fences.saw_lost(node, round.value(node), now),
                NodeState::Ok if round.value(node) > 0 => fences.saw_synced(node),
                _ => {}
            }
        }
        round.max_count()
    }

    /// Before a fenced acquire: on first use, and when a master that lost
    /// its counter has waited the longest TTL (plus drift) since this
    /// client first saw it so, reads every counter and puts back in sync
    /// the masters that may be: with the largest counter of a quorum of
    /// masters in sync, or, when every master answered and none is in sync
    /// (a new deployment, all lost at once, or a clock start that reached
    /// only some masters: those read as out of sync until they raise a
    /// fence), all with the largest clock in microseconds any of them
    /// reported ([`FenceBook::plan_sync`]). Best effort: what fails is
    /// tried again later, and a master out of sync only keeps its grants
    /// out of fences.
    pub(super) fn sync_fences(&self, deadline: Option<Instant>) {
        let Some(longest) = self.config.fencing else {
            return;
        };
        let wait = longest.saturating_add(rules::drift(longest, self.config.drift_factor));
        let now = Instant::now();
        if !self.fences().read_due(now, wait) {
            return;
        }
        let read = Command {
            op: Op::FenceRead,
            resource: b"",
            token: b"",
            ttl_ms: 0,
            eval: false,
            many: false,
            fenced: false,
            reach: 0,
        };
        let Ok(end) = self.round(&read, deadline) else {
            return;
        };
        if end.result.is_err() {
            return;
        }
        let highest = self.note_fences(&end);
        let mut ids: SmallVec<[u8; 128]> = SmallVec::new();
        let plan = self
            .fences()
            .plan_sync(&end.round, highest, end.ended, wait, &mut ids);
        let Some(plan) = plan else {
            return;
        };
        let sync = Command {
            op: Op::FenceSync,
            resource: &ids,
            token: plan.mode,
            ttl_ms: plan.value,
            ..read
        };
        let Ok(end) = self.round(&sync, deadline) else {
            return;
        };
        let mut fences = self.fences();
        if end.result.is_ok() {
            for (node, state) in end.round.nodes().iter().enumerate() {
                if *state == NodeState::Ok {
                    fences.saw_synced(node);
                }
            }
        }
    }
}
