//! Rounds as they ended, for the machines' tests (a fake clock, no
//! socket), and the test of `Rewatch`, the rule the machines share.

use std::time::Duration;

use crate::rules::{self, NodeError, Op, Reply, Round};

/// The TTL of the rounds made here.
pub(super) const TTL: Duration = Duration::from_secs(10);

/// What a master does in a round.
#[derive(Debug, Clone, Copy)]
pub(super) enum Does {
    /// Does what was asked, at once.
    Grants,
    /// Refuses: held by another, or not held by the token.
    Refuses,
    /// Its connection fails.
    Fails,
    /// Has not answered when the round is read.
    Silent,
    /// Does what was asked, once the TTL has run out.
    Late,
}

/// A round of `op` over one master per entry of `nodes`, each doing what
/// it says.
pub(super) fn ended(op: Op, nodes: &[Does]) -> Round {
    let t0 = crate::clock::now();
    let timeout = Duration::from_secs(1);
    let mut round = Round::new(op, nodes.len(), TTL, rules::drift(TTL, 0.01), timeout, t0);
    for (node, does) in nodes.iter().enumerate() {
        match does {
            Does::Grants => round.handle_reply(node, Reply::Ok, t0),
            Does::Refuses => round.handle_reply(node, Reply::Refused, t0),
            Does::Fails => round.handle_failure(node, NodeError::Closed, t0),
            Does::Silent => {}
            Does::Late => round.handle_reply(node, Reply::Ok, t0 + TTL),
        }
    }
    round
}

/// A round waits for the masters for the request timeout, cut short by
/// its call's cap, and not at all once the cap has passed.
#[test]
fn a_round_waits_the_request_timeout_and_never_past_its_cap() {
    let now = crate::clock::now();
    let request = Duration::from_secs(2);
    assert_eq!(super::timeout(request, None, now), request);
    let cap = now + Duration::from_millis(500);
    assert_eq!(
        super::timeout(request, Some(cap), now),
        Duration::from_millis(500)
    );
    let far = now + Duration::from_secs(60);
    assert_eq!(super::timeout(request, Some(far), now), request);
    assert_eq!(super::timeout(request, Some(now), now), Duration::ZERO);
}

/// A lock's watch reads its keys again after an extend, ends at a release,
/// and is left alone by the calls that hold no lock: one rule for an ended
/// call and a dropped one alike.
#[test]
fn an_extend_reads_the_watch_again_and_a_release_ends_it() {
    use super::Rewatch;
    assert_eq!(Rewatch::after(Op::Extend), Some(Rewatch::ReadAgain));
    assert_eq!(Rewatch::after(Op::Release), Some(Rewatch::End));
    for op in [
        Op::Acquire,
        Op::Raise,
        Op::FenceRead,
        Op::FenceSync,
        Op::Leave,
    ] {
        assert_eq!(Rewatch::after(op), None, "{op:?}");
    }
}
