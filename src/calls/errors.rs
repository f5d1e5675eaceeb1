//! What a round's decision means for its call: the lock, or the error
//! that names what kept the quorum away.

use std::io;

use crate::error::Error;
use crate::rules::{Decision, Report};

/// The error of a round gone from the table before its caller read it:
/// its outcome is unknown.
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub fn unknown() -> Error {
    Error::Io(io::ErrorKind::Other)
}

/// What an acquire round that ended with `decision` means: won, or the
/// error (`report` gives the round's report, asked for errors only).
pub(crate) fn acquire_result(
    decision: Result<Decision, io::ErrorKind>,
    report: impl FnOnce() -> Box<Report>,
) -> Result<(), Error> {
    result_of(decision, report, Error::TooSlow, acquire_refused)
}

/// What an extend round that ended with `decision` means (the lock's
/// validity after it: [`Extend::handle`](super::Extend::handle)).
pub(crate) fn extend_result(
    decision: Result<Decision, io::ErrorKind>,
    report: impl FnOnce() -> Box<Report>,
) -> Result<(), Error> {
    result_of(decision, report, Error::TooSlow, not_held)
}

/// What a release round that ended with `decision` means (the lock is
/// expired, whatever it says): a release too slow for its validity still
/// deleted what it reached, so only the quorum counts.
pub(crate) fn release_result(
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
pub(crate) fn no_quorum(report: Box<Report>, other: fn(Box<Report>) -> Error) -> Error {
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
/// sync ([`NodeState::Unsynced`](crate::NodeState::Unsynced)) make it
/// [`Error::Unfenced`] when their grants would have made a quorum, or when
/// no master refused at all. [`Error::Contended`] thus always means that
/// some master said the resource is held by another.
pub(crate) fn acquire_refused(report: Box<Report>) -> Error {
    let unsynced = report.unsynced() > 0
        && (report.ok() + report.unsynced() >= report.quorum() || report.refused() == 0);
    match no_quorum(report, Error::Contended) {
        Error::Contended(report) if unsynced => Error::Unfenced(report),
        error => error,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::acquire_refused;
    use crate::error::Error;
    use crate::rules::{self, Decision, NodeError, Op, Reply, Round, ServerError};

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
        /// Refuses the client's configuration (a user without the
        /// permissions).
        Misconfigured,
    }

    const ALL: [Does; 7] = [
        Does::Grants,
        Does::Refuses,
        Does::Fails,
        Does::Quarantined,
        Does::Unsynced,
        Does::Silent,
        Does::Misconfigured,
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
                Does::Misconfigured => {
                    let refused = ServerError::new(b"NOPERM this user has no permissions");
                    round.handle_failure(node, NodeError::Server(refused), t0);
                }
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
                    Error::Misconfigured(_) => assert!(report.misconfigured() > others),
                    _ => assert!(report.misconfigured() <= others, "{nodes:?}: {error:?}"),
                }
                match &error {
                    Error::Misconfigured(_) => {}
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
