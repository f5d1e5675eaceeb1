//! The rounds in flight with a fake clock: ids, slots, deadlines, waiters.

#![allow(clippy::expect_used, reason = "a test fails loudly")]

use std::time::{Duration, Instant};

use super::*;
use crate::commands::Outcome;
use crate::rules::{Decision, NodeState, Op, Reply};

const MS: Duration = Duration::from_millis(1);
const TTL: Duration = Duration::from_secs(10);

fn start(flights: &mut Flights<&'static str>, now: Instant, timeout: Duration) -> RoundId {
    let id = flights.begin().expect("a free slot");
    flights.update(id, |round| {
        round.restart(Op::Acquire, 3, TTL, MS, timeout, now)
    });
    id
}

/// Two of the three nodes answer round `id` with `reply` at `at`: a
/// quorum, whatever the third says.
fn decide(flights: &mut Flights<&'static str>, id: RoundId, reply: Reply, at: Instant) {
    for node in 0..2 {
        flights.deliver(id, node, Outcome::Reply(reply), at);
    }
}

/// One round per name, started at `now` with a 50 ms timeout, each waited
/// for by its name.
fn waited(
    flights: &mut Flights<&'static str>,
    now: Instant,
    names: &[&'static str],
) -> Vec<RoundId> {
    names
        .iter()
        .map(|&name| {
            let id = start(flights, now, 50 * MS);
            flights.set_waiter(id, name);
            id
        })
        .collect()
}

/// The waiters `wake_decided` wakes now, in order; `back`: whether they
/// are expected back (unclaimed).
fn wake(flights: &mut Flights<&'static str>, back: bool) -> Vec<&'static str> {
    let mut woken = Vec::new();
    flights.wake_decided(|w| {
        woken.push(w);
        back
    });
    woken
}

#[test]
fn each_round_decides_on_its_own_replies() {
    let t0 = Instant::now();
    let mut flights = Flights::new(4, 3);
    let a = start(&mut flights, t0, 50 * MS);
    let b = start(&mut flights, t0, 50 * MS);
    assert_ne!(a, b);
    assert_eq!(flights.len(), 2);
    decide(&mut flights, a, Reply::Ok, t0 + MS);
    decide(&mut flights, b, Reply::Refused, t0 + MS);
    assert!(matches!(
        flights.round(a).and_then(Round::decision),
        Some(Decision::Quorum { .. })
    ));
    assert_eq!(
        flights.round(b).and_then(Round::decision),
        Some(Decision::NoQuorum)
    );
}

#[test]
fn a_freed_slot_gets_a_new_id_and_old_replies_miss_it() {
    let t0 = Instant::now();
    let mut flights = Flights::new(1, 3);
    let old = start(&mut flights, t0, 50 * MS);
    flights.finish(old);
    assert!(!flights.is_live(old));
    let new = start(&mut flights, t0 + MS, 50 * MS);
    assert_ne!(old, new, "a slot's next round has another id");
    // Two late grants for the old round: they must not count for the new
    // one, which took the same slot.
    decide(&mut flights, old, Reply::Ok, t0 + 2 * MS);
    let round = flights.round(new).expect("live");
    assert!(round.nodes().iter().all(|s| *s == NodeState::Pending));
    assert_eq!(round.decision(), None);
    assert!(
        flights.is_decided(old),
        "an ended round has nothing to wait for"
    );
}

#[test]
fn the_cap_holds_and_frees() {
    let t0 = Instant::now();
    let mut flights = Flights::new(2, 3);
    let a = start(&mut flights, t0, 50 * MS);
    let _b = start(&mut flights, t0, 50 * MS);
    assert_eq!(flights.begin(), None, "two of two in flight");
    flights.finish(a);
    flights.finish(a); // twice: no effect
    assert_eq!(flights.len(), 1);
    assert!(flights.begin().is_some());
    assert_eq!(flights.begin(), None);
    assert_eq!(flights.capacity(), 2);
}

#[test]
fn deadlines_are_per_round() {
    let t0 = Instant::now();
    let mut flights = Flights::new(4, 3);
    let short = start(&mut flights, t0, 10 * MS);
    let long = start(&mut flights, t0, 50 * MS);
    assert_eq!(flights.next_deadline(), Some(t0 + 10 * MS));
    flights.handle_timeout(t0 + 10 * MS);
    assert_eq!(
        flights.round(short).and_then(Round::decision),
        Some(Decision::NoQuorum)
    );
    assert_eq!(flights.round(long).and_then(Round::decision), None);
    assert_eq!(
        flights.next_deadline(),
        Some(t0 + 50 * MS),
        "decided rounds have no deadline left"
    );
}

#[test]
fn a_failed_node_fails_only_the_rounds_waiting_for_it() {
    let t0 = Instant::now();
    let mut flights = Flights::new(4, 3);
    let answered = start(&mut flights, t0, 50 * MS);
    let waiting = start(&mut flights, t0, 50 * MS);
    flights.deliver(answered, 2, Outcome::Reply(Reply::Ok), t0 + MS);
    flights.fail_master(2, &NodeError::Closed, t0 + 2 * MS);
    assert_eq!(
        flights.round(answered).expect("live").nodes()[2],
        NodeState::Ok
    );
    assert_eq!(
        flights.round(waiting).expect("live").nodes()[2],
        NodeState::Failed(NodeError::Closed)
    );
}

#[test]
fn waiters_are_woken_once_decided_and_one_takes_over() {
    let t0 = Instant::now();
    let mut flights = Flights::new(4, 3);
    let a = waited(&mut flights, t0, &["a", "b"])[0];
    let mut woken = Vec::new();
    woken.extend(wake(&mut flights, false));
    assert!(woken.is_empty(), "nothing decided yet");
    decide(&mut flights, a, Reply::Ok, t0 + MS);
    woken.extend(wake(&mut flights, false));
    assert_eq!(woken, ["a"]);
    woken.extend(wake(&mut flights, false));
    assert_eq!(woken, ["a"], "a waiter is woken once");
    assert!(flights.any_undecided(|w| *w == "b"));
    assert_eq!(flights.take_undecided_waiter(|w| *w == "c"), None);
    assert_eq!(flights.take_undecided_waiter(|_| true), Some("b"));
    assert_eq!(flights.take_undecided_waiter(|_| true), None);
    assert!(!flights.any_undecided(|_| true));
}

#[test]
fn woken_waiters_are_unclaimed_until_they_come_back() {
    let t0 = Instant::now();
    let mut flights = Flights::new(4, 3);
    let ids = waited(&mut flights, t0, &["task", "thread", "late"]);
    for &id in &ids[..2] {
        decide(&mut flights, id, Reply::Ok, t0 + MS);
    }
    // Only the waiters the caller says will come back count.
    flights.wake_decided(|w| w != "thread");
    assert_eq!(flights.unclaimed(), 1);
    // Woken again (a new waiter set on a decided round): counted once.
    flights.set_waiter(ids[0], "task");
    flights.wake_decided(|_| true);
    assert_eq!(flights.unclaimed(), 1);
    flights.claim(ids[0]);
    assert_eq!(flights.unclaimed(), 0);
    flights.claim(ids[0]);
    assert_eq!(flights.unclaimed(), 0, "claimed once");
    // Finishing a round claims it; a late decision counts when woken.
    flights.handle_timeout(t0 + 60 * MS);
    flights.wake_decided(|_| true);
    assert_eq!(flights.unclaimed(), 1, "the timed-out round's waiter");
    flights.finish(ids[2]);
    assert_eq!(flights.unclaimed(), 0);
    flights.finish(ids[2]);
    assert_eq!(flights.unclaimed(), 0);
}

/// The decided rounds are remembered for the next look at them, in a list
/// as long as the table; when nobody looks for longer than that, the next
/// look goes over every slot, and no waiter is missed.
#[test]
fn decisions_past_the_list_are_found_by_a_full_look() {
    let t0 = Instant::now();
    let mut flights = Flights::new(2, 3);
    for _ in 0..10 {
        let id = start(&mut flights, t0, 50 * MS);
        decide(&mut flights, id, Reply::Ok, t0 + MS);
        flights.finish(id);
    }
    let late = waited(&mut flights, t0, &["late"])[0];
    decide(&mut flights, late, Reply::Ok, t0 + MS);
    let mut woken = Vec::new();
    woken.extend(wake(&mut flights, true));
    assert_eq!(woken, ["late"]);
    assert_eq!(flights.unclaimed(), 1);
    // The list is in use again.
    let next = waited(&mut flights, t0, &["next"])[0];
    decide(&mut flights, next, Reply::Ok, t0 + MS);
    woken.extend(wake(&mut flights, true));
    assert_eq!(woken, ["late", "next"]);
}

/// Waiters are woken in the order their rounds were decided, each once.
#[test]
fn waiters_are_woken_in_the_order_of_decisions() {
    let t0 = Instant::now();
    let mut flights = Flights::new(4, 3);
    let ids = waited(&mut flights, t0, &["first", "second", "third"]);
    for id in [ids[2], ids[0]] {
        decide(&mut flights, id, Reply::Refused, t0 + MS);
    }
    // A third reply to a decided round does not note it again.
    flights.deliver(ids[2], 2, Outcome::Reply(Reply::Refused), t0 + MS);
    let mut woken = Vec::new();
    woken.extend(wake(&mut flights, false));
    assert_eq!(woken, ["third", "first"]);
    flights.handle_timeout(t0 + 50 * MS);
    woken.extend(wake(&mut flights, false));
    assert_eq!(woken, ["third", "first", "second"]);
}

/// A dropped acquire's slot passes to its release even in a full table,
/// and stays taken (waited for by nobody) until every node has answered
/// it, failed or timed out; only then is it free for a new round.
#[test]
fn a_release_takes_its_acquires_slot_until_every_node_is_done() {
    let t0 = Instant::now();
    let mut flights = Flights::new(1, 3);
    let acquire = start(&mut flights, t0, 50 * MS);
    flights.set_waiter(acquire, "task");
    let release = flights.pass_to_release(acquire).expect("in flight");
    assert_ne!(release, acquire);
    assert!(!flights.is_live(acquire) && flights.is_live(release));
    assert_eq!((flights.len(), flights.orphans()), (1, 1));
    assert_eq!(flights.begin(), None, "the table stays full");
    flights.update(release, |round| {
        round.restart(Op::Release, 3, TTL, MS, 50 * MS, t0 + MS)
    });
    // The acquire's waiter went with it; nobody waits for the release.
    assert!(wake(&mut flights, true).is_empty());
    flights.set_waiter(release, "late");
    decide(&mut flights, release, Reply::Ok, t0 + 2 * MS);
    assert!(wake(&mut flights, true).is_empty());
    let mut ended = Vec::new();
    assert_eq!(flights.reap(|round| ended.push(round.nodes().to_vec())), 0);
    assert_eq!(flights.next_deadline(), Some(t0 + 51 * MS));
    flights.handle_timeout(t0 + 51 * MS);
    assert_eq!(flights.reap(|round| ended.push(round.nodes().to_vec())), 1);
    assert_eq!(
        ended,
        [vec![NodeState::Ok, NodeState::Ok, NodeState::TimedOut]]
    );
    assert_eq!((flights.len(), flights.orphans()), (0, 0));
    assert!(flights.begin().is_some(), "the slot is free again");
}

/// The release that takes a dropped acquire's slot has an id of its own,
/// and so has every round after it in that slot: a late reply to either
/// never reaches a round that came later.
#[test]
fn a_passed_slot_never_gives_an_id_twice() {
    let t0 = Instant::now();
    let mut flights = Flights::new(1, 3);
    let acquire = start(&mut flights, t0, 50 * MS);
    let release = flights.pass_to_release(acquire).expect("in flight");
    flights.update(release, |round| {
        round.restart(Op::Release, 3, TTL, MS, 50 * MS, t0)
    });
    for node in 0..3 {
        flights.deliver(release, node, Outcome::Reply(Reply::Ok), t0 + MS);
    }
    assert_eq!(flights.reap(|_| {}), 1);
    let next = start(&mut flights, t0 + 2 * MS, 50 * MS);
    assert!(next != acquire && next != release, "{next:?}");
    decide(&mut flights, release, Reply::Ok, t0 + 3 * MS);
    decide(&mut flights, acquire, Reply::Ok, t0 + 3 * MS);
    assert_eq!(flights.round(next).and_then(Round::decision), None);
}

/// A slot freed before its round was decided is not looked at by the
/// timer: its round's deadline passing lists nothing as decided.
#[test]
fn a_freed_slot_is_not_timed_out() {
    let t0 = Instant::now();
    let mut flights = Flights::new(2, 3);
    let ended = start(&mut flights, t0, 10 * MS);
    let live = start(&mut flights, t0, 50 * MS);
    flights.finish(ended);
    flights.handle_timeout(t0 + 20 * MS);
    assert!(flights.decided.is_empty(), "{:?}", flights.decided);
    flights.handle_timeout(t0 + 50 * MS);
    assert_eq!(flights.decided, [live]);
}

/// Each scan of the table counts the slots it looks at, up to the highest
/// slot ever used and no further (the engine reports the count, and the
/// budget tests hold a lone caller's cycle to it): none before a round
/// began, two per scan of a table of four with two rounds, still two once
/// the first slot is free again.
#[test]
fn each_scan_counts_the_slots_up_to_the_highest_ever_used() {
    let t0 = Instant::now();
    let mut flights = Flights::new(4, 3);
    let _ = flights.next_deadline();
    assert_eq!(flights.scanned(), 0);
    let first = start(&mut flights, t0, 50 * MS);
    let _second = start(&mut flights, t0, 50 * MS);
    let _ = flights.next_deadline();
    assert_eq!(flights.scanned(), 2);
    flights.handle_timeout(t0);
    assert_eq!(flights.scanned(), 4);
    flights.finish(first);
    let _ = flights.next_deadline();
    assert_eq!(flights.scanned(), 6);
}
