//! Rounds, blocking and async alike: running them on the engine, and what
//! their ends mean for the caller's lock.

use std::io;
use std::time::{Duration, Instant};

use smallvec::SmallVec;

use super::builder::Config;
use super::observe::{self, RoundSpan};
use super::{Lock, Redlock, TOKEN_LEN};
use crate::commands::{Command, Keys};
use crate::driver::{Driver, Full};
use crate::error::Error;
use crate::rules::{self, Decision, Op, Report, Round};
use crate::sync::lock;

/// How a round ended, with its timing, whether or not the driver failed.
pub(crate) struct RoundEnd {
    /// The round as it ended: its nodes' states, for reports and counts.
    pub(crate) round: Round,
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

/// How each round of a call ended, in the order of its commands.
pub(crate) type Ends = SmallVec<[Result<RoundEnd, Error>; 1]>;

impl RoundEnd {
    /// How `round` ended, decided, its caller getting control back at
    /// `ended`: a round of the simulator's client, which no poller runs.
    #[cfg(feature = "sim")]
    pub(crate) fn decided(round: Round, ended: Instant) -> RoundEnd {
        RoundEnd {
            result: Ok(round.decision().unwrap_or(Decision::NoQuorum)),
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
                let round = ids.first().and_then(|&id| driver.round(id)).cloned();
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
                let rounds: Rounds = ids.iter().map(|&id| driver.round(id).cloned()).collect();
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
        done: impl FnOnce(&Driver, &[u64]) -> T,
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
    ) -> impl Fn(&mut Round, &Command<'_>, Instant) + '_ {
        let timeout = match cap {
            Some(cap) => self
                .config
                .request_timeout
                .min(cap.saturating_duration_since(now)),
            None => self.config.request_timeout,
        };
        restarter(&self.config, self.masters.len(), timeout)
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
            // The commands may have gone out before the poller failed.
            result: match polled {
                Ok(()) => Ok(round.decision().unwrap_or(Decision::NoQuorum)),
                Err(kind) => Err(kind),
            },
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
    /// the client is warm.
    pub(super) fn recycle(&self, error: Error) {
        if let Some(report) = error.into_report() {
            let mut spares = lock(&self.spare_reports);
            if spares.len() < spares.capacity() {
                spares.push(report);
            }
        }
    }

    /// After a plain acquire round of `keys` with `token`: the lock, or
    /// the error, after which its release is queued on every master
    /// without waiting.
    pub(super) fn acquired(
        &self,
        keys: Keys<&[u8]>,
        token: [u8; TOKEN_LEN],
        end: &RoundEnd,
    ) -> Result<Lock, Error> {
        match acquire_result(end.result, || self.report(end)) {
            Ok(()) => {
                self.tally(Op::Acquire, end, Ok(()));
                Ok(Lock::new(
                    keys,
                    token,
                    end.valid_until,
                    None,
                    end.round.reached(),
                ))
            }
            Err(error) => Err(self.not_acquired(keys, &token, end, error)),
        }
    }

    /// An acquire of `keys` with `token`, its round ended with `end`,
    /// failed with `error`: queues its release on every master without
    /// waiting, counts the attempt, and returns the error.
    pub(super) fn not_acquired(
        &self,
        keys: Keys<&[u8]>,
        token: &[u8],
        end: &RoundEnd,
        error: Error,
    ) -> Error {
        // Release on all masters, also those that seemed to fail: a reply
        // may have been lost after the server set the key. EVAL cannot meet
        // an empty script cache, so nothing needs to wait for the replies.
        let release = Command::release(keys, token)
            .with_script()
            .reaching(end.round.reached());
        self.engine
            .driver()
            .driver
            .queue(&release, crate::clock::now());
        self.tally(Op::Acquire, end, Err(&error));
        error
    }

    /// After an extend round of `lock`: its validity as the table in
    /// [`Lock`]'s docs says.
    pub(super) fn extended(&self, lock: &mut Lock, end: &RoundEnd) -> Result<(), Error> {
        let result = extend_result(end.result, || self.report(end));
        lock.apply(Validity::after_extend(
            &result,
            end.started,
            end.valid_until,
        ));
        self.tally(Op::Extend, end, result.as_ref().map(|_| ()));
        result
    }

    /// After a release round of `lock`: expired, whatever the outcome.
    pub(super) fn unlocked(&self, lock: &mut Lock, end: &RoundEnd) -> Result<(), Error> {
        lock.apply(Validity::after_release(end.started));
        let result = release_result(end.result, || self.report(end));
        self.tally(Op::Release, end, result.as_ref().map(|_| ()));
        result
    }
}

/// A lock's validity after an extend, a release or a call dropped with its
/// round in flight, as the table in [`Lock`]'s docs gives it. The front
/// ends apply it to their [`Lock`], the simulator's client to its `Held`:
/// one rule for both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Validity {
    /// An extension reached a quorum: valid until then, extended once more.
    Renewed(Instant),
    /// Valid no later than this.
    Capped(Instant),
}

impl Validity {
    /// After an extend round that started at `started`, would grant
    /// validity until `granted` and came to `result`: renewed on success;
    /// gone since the round's start when a quorum said the token no longer
    /// owns the resource; else no more than it granted (masters that
    /// applied it expire the key at its TTL).
    pub(crate) fn after_extend(
        result: &Result<(), Error>,
        started: Instant,
        granted: Instant,
    ) -> Validity {
        match result {
            Ok(()) => Validity::Renewed(granted),
            Err(Error::NotHeld(_)) => Validity::Capped(started),
            Err(_) => Validity::Capped(granted),
        }
    }

    /// After an extend to `ttl_ms`, begun at `begun` by a client that
    /// allows `drift_factor`, whose caller is gone with its round in
    /// flight: no more than it could have granted.
    pub(crate) fn after_dropped_extend(begun: Instant, ttl_ms: u64, drift_factor: f64) -> Validity {
        let whole = Duration::from_millis(ttl_ms);
        let most = whole.saturating_sub(rules::drift(whole, drift_factor));
        Validity::Capped(begun.checked_add(most).unwrap_or(begun))
    }

    /// After a release begun at `at` (its round, or a call dropped with
    /// its round in flight): gone since then, whatever the outcome.
    pub(crate) fn after_release(at: Instant) -> Validity {
        Validity::Capped(at)
    }

    /// Applies it to a lock valid until `valid_until` and extended
    /// `extensions` times.
    pub(crate) fn apply(self, valid_until: &mut Instant, extensions: &mut u32) {
        match self {
            Validity::Renewed(until) => {
                *valid_until = until;
                *extensions = extensions.saturating_add(1);
            }
            Validity::Capped(until) => *valid_until = (*valid_until).min(until),
        }
    }
}

/// What an acquire round that ended with `decision` means: won, or the
/// error (`report` gives the round's report, asked for errors only).
pub(super) fn acquire_result(
    decision: Result<Decision, io::ErrorKind>,
    report: impl FnOnce() -> Box<Report>,
) -> Result<(), Error> {
    result_of(decision, report, Error::TooSlow, acquire_refused)
}

/// What an extend round that ended with `decision` means (the lock's
/// validity after it: [`Redlock::extended`]).
pub(super) fn extend_result(
    decision: Result<Decision, io::ErrorKind>,
    report: impl FnOnce() -> Box<Report>,
) -> Result<(), Error> {
    result_of(decision, report, Error::TooSlow, not_held)
}

/// What a release round that ended with `decision` means (the lock is
/// expired, whatever it says): a release too slow for its validity still
/// deleted what it reached, so only the quorum counts.
pub(super) fn release_result(
    decision: Result<Decision, io::ErrorKind>,
    report: impl FnOnce() -> Box<Report>,
) -> Result<(), Error> {
    result_of(decision, report, not_held, not_held)
}

/// A round's result: `Ok` at a quorum in time, else `too_slow` or
/// `refused` of its report, or the poller's error (the commands may have
/// gone out before it failed).
fn result_of(
    decision: Result<Decision, io::ErrorKind>,
    report: impl FnOnce() -> Box<Report>,
    too_slow: fn(Box<Report>) -> Error,
    refused: fn(Box<Report>) -> Error,
) -> Result<(), Error> {
    match decision {
        Ok(Decision::Quorum { .. }) => Ok(()),
        Ok(Decision::TooSlow) => Err(too_slow(report())),
        Ok(Decision::NoQuorum) => Err(refused(report())),
        Err(kind) => Err(Error::Io(kind)),
    }
}

/// The error of an extend or a release without a quorum.
fn not_held(report: Box<Report>) -> Error {
    no_quorum(report, Error::NotHeld)
}

/// The error for a round that found no quorum: [`Error::Misconfigured`]
/// when masters that refuse the configuration alone prevent a quorum,
/// [`Error::Unavailable`] when the unreachable and quarantined masters do,
/// else `other`.
pub(super) fn no_quorum(report: Box<Report>, other: fn(Box<Report>) -> Error) -> Error {
    let n = report.nodes().len();
    if report.misconfigured() > n - report.quorum() {
        Error::Misconfigured(report)
    } else if report.unreachable() + report.quarantined() > n - report.quorum() {
        // Masters unreachable or quarantined (restart guard) alone kept the
        // quorum away: not the refusals.
        Error::Unavailable(report)
    } else {
        other(report)
    }
}

/// The error for an acquire round without a quorum (`report`), by what
/// kept the quorum away: as [`no_quorum`] says, except that masters out of
/// sync ([`NodeState::Unsynced`](rules::NodeState::Unsynced)) make it
/// [`Error::Unfenced`] when their grants would have made a quorum, or when
/// no master refused at all. [`Error::Contended`] thus always means that
/// some master said the resource is held by another.
pub(super) fn acquire_refused(report: Box<Report>) -> Error {
    let unsynced = report.unsynced() > 0
        && (report.ok() + report.unsynced() >= report.quorum() || report.refused() == 0);
    match no_quorum(report, Error::Contended) {
        Error::Contended(report) if unsynced => Error::Unfenced(report),
        error => error,
    }
}

/// Sets up a round of a command over `masters` masters, waiting for them at
/// most `timeout`: its operation, and the TTL and drift of a grant.
pub(super) fn restarter(
    config: &Config,
    masters: usize,
    timeout: Duration,
) -> impl Fn(&mut Round, &Command<'_>, Instant) + '_ {
    move |round: &mut Round, command: &Command<'_>, now: Instant| {
        let ttl = Duration::from_millis(command.grant_ttl_ms().unwrap_or(0));
        let drift = rules::drift(ttl, config.drift_factor);
        round.restart(command.op(), masters, ttl, drift, timeout, now);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Validity, acquire_refused};
    use crate::error::Error;
    use crate::rules::{self, Decision, NodeError, Op, Reply, Round};

    /// The table of `Lock`'s docs: a successful extend renews, a quorum
    /// that said the token is gone expires the lock at the round's start,
    /// any other failure caps it at what the round granted; a dropped
    /// extend caps it at what it could have granted; a release expires it.
    #[test]
    fn a_locks_validity_after_each_outcome() {
        let t0 = crate::clock::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let report = || {
            Box::new(
                Round::new(
                    Op::Extend,
                    3,
                    Duration::ZERO,
                    Duration::ZERO,
                    Duration::ZERO,
                    t0,
                )
                .report(),
            )
        };
        let after = |validity: Validity| {
            let (mut until, mut extensions) = (at(500), 2);
            validity.apply(&mut until, &mut extensions);
            (until, extensions)
        };
        let extend = |result: Result<(), Error>, granted| {
            after(Validity::after_extend(&result, at(100), at(granted)))
        };
        assert_eq!(extend(Ok(()), 900), (at(900), 3));
        assert_eq!(
            extend(Ok(()), 300),
            (at(300), 3),
            "a shorter TTL shortens it"
        );
        assert_eq!(extend(Err(Error::NotHeld(report())), 900), (at(100), 2));
        assert_eq!(extend(Err(Error::Unavailable(report())), 900), (at(500), 2));
        assert_eq!(extend(Err(Error::TooSlow(report())), 300), (at(300), 2));
        // What the extend could have granted: its TTL less the drift.
        let dropped = Validity::after_dropped_extend(at(0), 1_000, 0.01);
        assert_eq!(
            dropped,
            Validity::Capped(at(1_000) - rules::drift(Duration::from_secs(1), 0.01))
        );
        assert_eq!(
            after(Validity::after_dropped_extend(at(0), 200, 0.01)).0,
            at(200) - rules::drift(Duration::from_millis(200), 0.01)
        );
        assert_eq!(after(Validity::after_release(at(50))), (at(50), 2));
        assert_eq!(after(Validity::after_release(at(700))), (at(500), 2));
    }

    /// What a node does in an acquire round; `Silent`: no answer before
    /// the decision.
    #[derive(Clone, Copy, Debug)]
    enum Does {
        Grants,
        Refuses,
        Fails,
        Quarantined,
        Unsynced,
        Silent,
    }

    const ALL: [Does; 6] = [
        Does::Grants,
        Does::Refuses,
        Does::Fails,
        Does::Quarantined,
        Does::Unsynced,
        Does::Silent,
    ];

    /// The error for a fenced acquire round in which node `i` did
    /// `nodes[i]`, if the round ended without a quorum.
    fn error(nodes: &[Does]) -> Option<Error> {
        let t0 = crate::clock::now();
        let ttl = Duration::from_secs(10);
        let timeout = Duration::from_secs(1);
        let mut round = Round::new(
            Op::Acquire,
            nodes.len(),
            ttl,
            rules::drift(ttl, 0.01),
            timeout,
            t0,
        );
        for (node, does) in nodes.iter().enumerate() {
            match does {
                Does::Grants => round.handle_reply(node, Reply::Count(7), t0),
                Does::Refuses => round.handle_reply(node, Reply::Refused, t0),
                Does::Fails => round.handle_failure(node, NodeError::Closed, t0),
                Does::Quarantined => round.handle_quarantined(node, t0),
                Does::Unsynced => round.handle_reply(node, Reply::Unsynced(3), t0),
                Does::Silent => {}
            }
        }
        (round.decision() == Some(Decision::NoQuorum))
            .then(|| acquire_refused(Box::new(round.report())))
    }

    #[test]
    fn a_round_that_nobody_refused_is_never_contended() {
        use Does::*;
        let kind = |nodes: &[Does]| match error(nodes) {
            Some(Error::Unfenced(_)) => "unfenced",
            Some(Error::Contended(_)) => "contended",
            Some(Error::Unavailable(_)) => "unavailable",
            other => panic!("{nodes:?}: {other:?}"),
        };
        // The first: one master reset, one not answered yet, one that lost
        // its counter.
        let cases: [([Does; 3], &str); 7] = [
            ([Fails, Silent, Unsynced], "unfenced"),
            ([Quarantined, Unsynced, Silent], "unfenced"),
            ([Grants, Unsynced, Refuses], "unfenced"),
            ([Refuses, Unsynced, Silent], "contended"),
            ([Fails, Refuses, Silent], "contended"),
            ([Fails, Fails, Unsynced], "unavailable"),
            ([Fails, Quarantined, Grants], "unavailable"),
        ];
        for (nodes, expected) in cases {
            assert_eq!(kind(&nodes), expected, "{nodes:?}");
        }
    }

    /// Every round of three and five masters that ended without a quorum:
    /// each error names a cause that the report shows.
    #[test]
    fn each_error_names_what_kept_the_quorum_away() {
        for n in [3usize, 5] {
            let mut checked = 0;
            for code in 0..ALL.len().pow(n as u32) {
                let nodes: Vec<Does> = (0..n)
                    .map(|i| ALL[code / ALL.len().pow(i as u32) % ALL.len()])
                    .collect();
                let Some(error) = error(&nodes) else {
                    continue;
                };
                checked += 1;
                let Some(report) = error.report() else {
                    panic!("{nodes:?}: {error:?} has no report");
                };
                let others = n - report.quorum();
                match &error {
                    Error::Contended(_) => {
                        assert!(report.refused() > 0, "{nodes:?}");
                        assert!(
                            report.unreachable() + report.quarantined() <= others,
                            "{nodes:?}"
                        );
                    }
                    Error::Unavailable(_) => {
                        assert!(
                            report.unreachable() + report.quarantined() > others,
                            "{nodes:?}"
                        )
                    }
                    Error::Unfenced(_) => assert!(report.unsynced() > 0, "{nodes:?}"),
                    other => panic!("{nodes:?}: {other:?}"),
                }
            }
            assert!(checked > 100, "{checked} rounds of {n} checked");
        }
    }
}
