//! Rounds, blocking and async alike: running them on the engine, and
//! handing how they ended to the calls' machines (`crate::calls`), which
//! say what that means for the caller's lock.

use std::io;
use std::time::Instant;

use smallvec::SmallVec;

use super::observe::{self, RoundSpan};
use super::{Lock, Redlock};
use crate::calls::{self, Acquired, Claim, Extend, Release, Validity};
use crate::commands::Command;
use crate::driver::{Driver, Full};
use crate::error::Error;
use crate::ids::RoundId;
use crate::rules::{Decision, Op, Report, Round};
use crate::sync::lock;

/// How a round ended, with its timing, whether or not the driver failed.
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub struct RoundEnd {
    /// The round as it ended: its nodes' states, for reports and counts.
    pub round: Round,
    /// The decision, or the poller's error.
    pub(super) result: Result<Decision, io::ErrorKind>,
    /// `t0` of the round.
    pub(super) started: Instant,
    /// `t0 + ttl - drift`: the most a lock touched by the round may claim.
    pub(super) valid_until: Instant,
    /// When the call got control back.
    pub(super) ended: Instant,
    pub(super) span: RoundSpan,
}

impl std::fmt::Debug for RoundEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoundEnd")
            .field("result", &self.result)
            .field("started", &self.started)
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

/// How each round of a call ended, in the order of its commands.
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub type Ends = SmallVec<[Result<RoundEnd, Error>; 1]>;

#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
impl RoundEnd {
    /// How `round` ended, decided, its caller getting control back at
    /// `ended`: a round of the simulator's client, which no poller runs.
    #[cfg(feature = "sim")]
    pub fn decided(round: Round, ended: Instant) -> RoundEnd {
        RoundEnd {
            result: calls::decision(&round, Ok(())),
            started: round.started(),
            valid_until: round.valid_until(),
            ended,
            span: RoundSpan::new(round.op(), 0),
            round,
        }
    }
}

/// A call's rounds as they ended (copied out of the engine's table).
pub(super) type Rounds = SmallVec<[Option<Round>; 1]>;

/// A call's tracing spans, one per round.
pub(super) type Spans = SmallVec<[RoundSpan; 1]>;

/// Opens the span of each command's round.
pub(super) fn spans(commands: &[Command<'_>]) -> Spans {
    commands
        .iter()
        .map(|c| RoundSpan::new(c.op(), c.resource_len()))
        .collect()
}

/// Boxes for the reports of the failed attempts of waiting callers made
/// ahead, so that up to this many callers that wait at once allocate
/// nothing from the start (more do until as many boxes came back).
const SPARE_REPORTS: usize = 16;

/// The spare report boxes of a client with `max_in_flight` rounds in
/// flight: room for one per round, [`SPARE_REPORTS`] of them made now.
#[allow(
    clippy::vec_box,
    reason = "the boxes are what is kept: each goes back into an error"
)]
pub(super) fn spare_reports(max_in_flight: usize) -> Vec<Box<Report>> {
    let mut spares = Vec::with_capacity(max_in_flight);
    spares.extend((0..SPARE_REPORTS.min(max_in_flight)).map(|_| Box::new(Report::blank())));
    spares
}

impl Redlock {
    /// Counts the round just run, of `op`, that ended with `result` (and
    /// records it in its span and the metrics, with those features).
    pub(super) fn tally(&self, op: Op, end: &RoundEnd, result: Result<(), &Error>) {
        let nodes = end.round.nodes();
        self.counters.count(op, nodes, result);
        let elapsed = end.ended.saturating_duration_since(end.started);
        observe::round_ended(&end.span, op, result, elapsed, nodes, &self.masters);
    }

    /// Runs one round of `command`, for at most the request timeout, and
    /// never past `cap`. (The path of every single-resource call: the
    /// round is copied out of the engine's table straight into its end,
    /// with none of a batch's per-round collections.)
    ///
    /// # Errors
    ///
    /// [`Error::TooManyInFlight`] when the client stayed at its cap of rounds in
    /// flight for a request timeout (nothing was sent).
    pub(super) fn round(
        &self,
        command: &Command<'_>,
        cap: Option<Instant>,
    ) -> Result<RoundEnd, Error> {
        let span = RoundSpan::new(command.op(), command.resource_len());
        // The driver's events (reconnects, dropped connections) nest in
        // the round's span.
        let (run, _) = span.in_scope(|| {
            self.run(std::slice::from_ref(command), cap, |driver, ids| {
                let round = ids
                    .first()
                    .and_then(|&id| driver.core.flights.round(id))
                    .cloned();
                (round, crate::clock::now())
            })
        });
        match run {
            Ok(((Some(round), ended), polled)) => {
                Ok(self.end(round, span, ended, polled.map_err(|e| e.kind())))
            }
            Ok(((None, _), _)) | Err(_) => Err(self.busy()),
        }
    }

    /// Runs one round per command, all at once, each for at most the
    /// request timeout and never past `cap`; returns how each ended, in
    /// order: [`Error::TooManyInFlight`] for those that could not start (nothing of
    /// theirs was sent).
    pub(super) fn rounds(&self, commands: &[Command<'_>], cap: Option<Instant>) -> Ends {
        let spans = spans(commands);
        let run = || {
            self.run(commands, cap, |driver, ids| {
                let rounds: Rounds = ids
                    .iter()
                    .map(|&id| driver.core.flights.round(id).cloned())
                    .collect();
                (rounds, crate::clock::now())
            })
        };
        // The driver's events (reconnects, dropped connections) nest in
        // the span of a single round.
        let (run, now) = match &spans[..] {
            [span] => span.in_scope(run),
            _ => run(),
        };
        match run {
            Ok(((rounds, ended), polled)) => self.ends(
                commands.len(),
                rounds,
                spans,
                ended,
                polled.map_err(|e| e.kind()),
            ),
            Err(_full) => self.ends(commands.len(), Rounds::new(), spans, now, Ok(())),
        }
    }

    /// Runs one round per command on the engine, each for at most the
    /// request timeout and never past `cap`; `done` makes the call's
    /// result from the rounds as they ended. Returns the engine's answer
    /// and the call's start.
    fn run<T>(
        &self,
        commands: &[Command<'_>],
        cap: Option<Instant>,
        done: impl FnOnce(&Driver, &[RoundId]) -> T,
    ) -> (Result<(T, io::Result<()>), Full>, Instant) {
        let now = crate::clock::now();
        let restart = self.restarter(cap, now);
        let wait_until = now.checked_add(self.config.request_timeout).unwrap_or(now);
        (self.engine.run(commands, wait_until, restart, done), now)
    }

    /// Sets up each round of a call: its operation, TTL and drift, over
    /// every master, for at most the request timeout and never past `cap`.
    pub(super) fn restarter(
        &self,
        cap: Option<Instant>,
        now: Instant,
    ) -> impl Fn(&mut Round, &Command<'_>, Instant) {
        let timeout = calls::timeout(self.config.request_timeout, cap, now);
        calls::restarter(self.config.drift_factor, self.masters.len(), timeout)
    }

    /// How each of a call's `n` rounds ended: `rounds` as they ended (the
    /// first ones; [`Error::TooManyInFlight`] for those that never started), at
    /// `ended`, with the poller's error if it failed.
    pub(super) fn ends(
        &self,
        n: usize,
        rounds: Rounds,
        spans: Spans,
        ended: Instant,
        polled: Result<(), io::ErrorKind>,
    ) -> Ends {
        let mut ends: Ends = rounds
            .into_iter()
            .zip(spans)
            .map(|(round, span)| {
                let round = round.ok_or_else(|| self.busy())?;
                Ok(self.end(round, span, ended, polled))
            })
            .collect();
        while ends.len() < n {
            ends.push(Err(self.busy()));
        }
        ends
    }

    /// How `round` ended, the call getting control back at `ended`, with
    /// the poller's error if it failed.
    fn end(
        &self,
        round: Round,
        span: RoundSpan,
        ended: Instant,
        polled: Result<(), io::ErrorKind>,
    ) -> RoundEnd {
        RoundEnd {
            result: calls::decision(&round, polled),
            started: round.started(),
            valid_until: round.valid_until(),
            ended,
            span,
            round,
        }
    }

    /// The error of a round that could not start: the client stayed at its
    /// cap of rounds in flight.
    pub(super) fn busy(&self) -> Error {
        Error::TooManyInFlight {
            limit: self.config.max_in_flight,
        }
    }

    /// The per-node report of the round that ended with `end`, the masters
    /// named by their addresses (allocates: for errors only).
    pub(super) fn report(&self, end: &RoundEnd) -> Box<Report> {
        let report = end.round.report().with_masters(self.masters.clone());
        match lock(&self.spare_reports).pop() {
            Some(mut spare) => {
                *spare = report;
                spare
            }
            None => Box::new(report),
        }
    }

    /// A caller that waits for a lock drops `error` and tries again: the
    /// box of its report goes back to the client, for the next report (up
    /// to one per round in flight), so that a wait allocates nothing once
    /// the client is warm ([`spare_reports`] made the first boxes).
    pub(super) fn recycle(&self, error: Error) {
        if let Some(report) = error.into_report() {
            let mut spares = lock(&self.spare_reports);
            if spares.len() < spares.capacity() {
                spares.push(report);
            }
        }
    }

    /// After a plain acquire's round (of `claim`, an attempt's or a
    /// waiting caller's): the lock, or the error, after which its release
    /// is queued on every master without waiting.
    pub(super) fn acquired(&self, claim: Claim<'_>, end: &RoundEnd) -> Result<Lock, Error> {
        match claim.handle(&end.round, end.result, || self.report(end)) {
            Acquired::Won(lock) => {
                self.tally(Op::Acquire, end, Ok(()));
                Ok(lock)
            }
            Acquired::Lost { error, release } => Err(self.not_acquired(&release, end, error)),
        }
    }

    /// An acquire whose round ended with `end` failed with `error`: queues
    /// `release` (what the acquire's machine says must follow it) without
    /// waiting, counts the attempt, and returns the error.
    pub(super) fn not_acquired(
        &self,
        release: &Command<'_>,
        end: &RoundEnd,
        error: Error,
    ) -> Error {
        self.engine
            .driver()
            .driver
            .queue(release, crate::clock::now());
        self.tally(Op::Acquire, end, Err(&error));
        error
    }

    /// After an extend's round: its result, and the lock's validity as
    /// the table in [`Lock`]'s docs says.
    pub(super) fn extended(&self, end: &RoundEnd) -> (Result<(), Error>, Validity) {
        let (result, validity) = Extend::handle(&end.round, end.result, || self.report(end));
        self.tally(Op::Extend, end, result.as_ref().map(|_| ()));
        (result, validity)
    }

    /// After a release round of `lock`: expired, whatever the outcome.
    pub(super) fn unlocked(&self, lock: &mut Lock, end: &RoundEnd) -> Result<(), Error> {
        self.rewatch(Op::Release, lock);
        let (result, validity) = Release::handle(&end.round, end.result, || self.report(end));
        lock.apply(validity);
        self.tally(Op::Release, end, result.as_ref().map(|_| ()));
        result
    }
}
