//! The acquire that waits, driven with a fake clock and no socket.

#![allow(clippy::expect_used, reason = "a test fails loudly")]

use std::time::{Duration, Instant};

use super::{Granted, Pursue, Step};
use crate::calls::decision;
use crate::calls::wait::{Times, Wait};
use crate::commands::{Command, Keys, wake_channel};
use crate::error::Error;
use crate::flights::Waits;
use crate::ids::WaitId;
use crate::rules::wait::Terms;
use crate::rules::{NodeError, Op, Reply, Round, drift};

const MS: Duration = Duration::from_millis(1);
const TIMEOUT: Duration = Duration::from_millis(100);
const TTL: Duration = Duration::from_secs(10);
const TOKEN: [u8; 20] = [7; 20];
const KEYS: Keys<&[u8]> = Keys::One(b"r");
/// The wait of the calls that have one.
const WAIT: WaitId = WaitId::from_wire(5);

fn times() -> Times {
    Times {
        request_timeout: TIMEOUT,
        retry_delay: 200 * MS,
        retry_jitter: 100 * MS,
    }
}

/// A call on `terms`, with wait 5 if `waits`.
fn call(terms: Terms, waits: bool) -> Pursue<&'static [u8]> {
    let wait = waits.then(|| Wait::new(WAIT, &wake_channel(1), 42, times()).expect("fits"));
    Pursue::new(KEYS, TTL.as_millis() as u64, terms, times(), wait)
}

/// An acquire round over three masters that answered as `replies` say
/// (`None`: no answer), at `t0`.
fn round(replies: [Option<Reply>; 3], t0: Instant) -> Round {
    let mut round = Round::new(Op::Acquire, 3, TTL, drift(TTL, 0.01), TIMEOUT, t0);
    for (node, reply) in replies.into_iter().enumerate() {
        if let Some(reply) = reply {
            round.handle_reply(node, reply, t0);
        }
    }
    round
}

fn queued(ms: u64) -> Option<Reply> {
    Some(Reply::Queued {
        expires_in_ms: Some(ms),
    })
}

/// Refused everywhere, the keys expiring in 300 ms or more.
fn refused(t0: Instant) -> Round {
    round([queued(300), queued(400), queued(500)], t0)
}

/// Sends an attempt of `call` and hands it `round`, at `now`, the draws
/// being `units`: whether a release must follow.
fn attempt(call: &mut Pursue<&'static [u8]>, round: &Round, units: [f64; 2], now: Instant) -> bool {
    assert!(matches!(call.poll(), Step::Attempt { .. }));
    let _ = call.command(TOKEN);
    assert_eq!(call.poll(), Step::InFlight);
    let mut units = units.into_iter();
    let attempted = call.handle_attempt(
        round,
        decision(round, Ok(())),
        || Box::new(round.report()),
        || units.next().expect("two draws"),
        now,
    );
    attempted.release.is_some()
}

fn member() -> Wait {
    Wait::new(WAIT, &wake_channel(1), 42, times()).expect("fits")
}

/// The leave of [`KEYS`] by `wait`'s member.
/// The leave of `wait`, sent to the masters of `masters`.
fn leave_of(wait: &Wait, masters: u64) -> Option<Command<'_>> {
    Some(
        Command::leave(KEYS, wait.queue().0)
            .with_script()
            .only_to(masters),
    )
}

#[test]
fn an_attempt_that_wins_ends_the_call_and_leaves_nothing_queued() {
    let now = crate::clock::now();
    let mut call = call(Terms::Retries(3), true);
    assert_eq!(
        call.poll(),
        Step::Attempt {
            arm: Some(WAIT),
            cap: None
        }
    );
    let won = round([Some(Reply::Ok); 3], now);
    assert!(!attempt(&mut call, &won, [0.5, 0.5], now), "no release");
    assert_eq!(call.poll(), Step::Done);
    let lock = call.result().expect("over").expect("won");
    assert_eq!(lock.token(), &TOKEN);
    assert!(call.result().is_none(), "taken once");
    let leave = call.leave().expect("a wait");
    assert_eq!(leave.wait, WAIT);
    assert_eq!(leave.command, None, "every master granted");
    assert!(call.leave().is_none(), "once");
}

#[test]
fn a_failed_attempt_releases_where_it_went_and_waits_for_the_expiry() {
    let now = crate::clock::now();
    let mut call = call(Terms::Retries(3), true);
    let refused = refused(now);
    let _ = call.command(TOKEN);
    let mut units = [0.5, 0.0].into_iter();
    let attempted = call.handle_attempt(
        &refused,
        decision(&refused, Ok(())),
        || Box::new(refused.report()),
        || units.next().expect("two draws"),
        now,
    );
    // Every master refused it: none set the key, and the release goes
    // nowhere.
    let release = Command::release(KEYS, &TOKEN)
        .with_script()
        .reaching(0)
        .only_to(0);
    assert_eq!(attempted.release, Some(release));
    assert!(matches!(attempted.outcome, Err(Error::Contended(_))));
    // Not told: the next attempt at the fallback, when two keys of three
    // expired (400 ms), with the margin and no jitter, before the retry
    // delay's draw (200 ms; the retries' bound caps the wait at it).
    assert_eq!(
        call.poll(),
        Step::Wait {
            told: Some(WAIT),
            until: now + 200 * MS
        }
    );
    assert!(matches!(call.handle_timeout(), Some(Error::Contended(_))));
    assert!(matches!(
        call.poll(),
        Step::Attempt {
            arm: Some(WAIT),
            ..
        }
    ));
}

#[test]
fn not_told_it_attempts_when_the_blocking_keys_expire() {
    let now = crate::clock::now();
    let deadline = now + Duration::from_secs(5);
    let mut call = call(Terms::Deadline(deadline), true);
    assert!(attempt(&mut call, &refused(now), [0.5, 0.0], now));
    assert_eq!(
        call.poll(),
        Step::Wait {
            told: Some(WAIT),
            until: now + 401 * MS
        }
    );
    assert!(call.handle_timeout().is_some());
    assert_eq!(
        call.poll(),
        Step::Attempt {
            arm: Some(WAIT),
            cap: Some(deadline)
        }
    );
}

#[test]
fn told_it_attempts_at_once() {
    let now = crate::clock::now();
    let mut call = call(Terms::Deadline(now + Duration::from_secs(5)), true);
    assert!(attempt(&mut call, &refused(now), [0.5, 0.5], now));
    assert!(matches!(call.poll(), Step::Wait { .. }));
    let spent = call.handle_told(now + MS);
    assert!(
        matches!(spent, Some(Error::Contended(_))),
        "not the outcome"
    );
    assert!(matches!(call.poll(), Step::Attempt { .. }));
    let won = round([Some(Reply::Ok); 3], now + 2 * MS);
    assert!(!attempt(&mut call, &won, [0.5, 0.5], now + 2 * MS));
    assert!(matches!(call.result(), Some(Ok(_))));
    // Refused before: a master may still hold an entry... but every master
    // answered and granted, so they took them.
    assert_eq!(call.leave().expect("a wait").command, None);
}

#[test]
fn retries_spent_stop_with_the_last_error() {
    let now = crate::clock::now();
    let mut call = call(Terms::Retries(1), false);
    assert_eq!(
        call.poll(),
        Step::Attempt {
            arm: None,
            cap: None
        }
    );
    assert!(attempt(&mut call, &refused(now), [0.5, 0.5], now));
    assert!(matches!(call.poll(), Step::Wait { told: None, .. }));
    assert!(call.handle_timeout().is_some());
    let failed = round([Some(Reply::Ok), None, None], now);
    let mut failed = failed;
    failed.handle_failure(1, NodeError::Closed, now);
    failed.handle_failure(2, NodeError::Closed, now);
    assert!(attempt(&mut call, &failed, [0.5, 0.5], now));
    assert_eq!(call.poll(), Step::Done);
    assert!(matches!(call.result(), Some(Err(Error::Unavailable(_)))));
    assert!(call.leave().is_none(), "no wait");
}

#[test]
fn an_error_that_cannot_pass_stops_at_once() {
    let now = crate::clock::now();
    let mut call = call(Terms::Retries(5), true);
    let _ = call.command(TOKEN);
    call.handle_unsent(Error::DeadlinePassed, || 0.5, now);
    assert_eq!(call.poll(), Step::Done);
    assert!(matches!(call.result(), Some(Err(Error::DeadlinePassed))));
}

#[test]
fn a_deadline_caps_each_attempt_and_a_late_telling_ends_the_call() {
    let now = crate::clock::now();
    let deadline = now + Duration::from_secs(1);
    let latest = deadline - TIMEOUT;
    let mut call = call(Terms::Deadline(deadline), true);
    assert!(matches!(call.poll(), Step::Attempt { cap: Some(d), .. } if d == deadline));
    assert!(attempt(&mut call, &refused(now), [0.5, 0.5], now));
    // Told once an attempt would end past the deadline: the last error.
    assert!(call.handle_told(latest + MS).is_none());
    assert_eq!(call.poll(), Step::Done);
    assert!(matches!(call.result(), Some(Err(Error::Contended(_)))));
    // Failing at the latest start: no more attempts.
    let mut call = self::call(Terms::Deadline(deadline), true);
    assert!(attempt(&mut call, &refused(now), [0.5, 0.5], latest));
    assert_eq!(call.poll(), Step::Done);
}

#[test]
fn the_leave_goes_where_a_master_may_have_queued_the_caller() {
    let now = crate::clock::now();
    let wait = member();
    // Refused on one master, granted on the others: queued there alone.
    let mut call = call(Terms::Retries(3), true);
    let one = round([queued(300), Some(Reply::Ok), Some(Reply::Ok)], now);
    assert!(!attempt(&mut call, &one, [0.5, 0.5], now), "won");
    assert_eq!(
        call.leave().expect("a wait").command,
        leave_of(&wait, 0b001)
    );
    // Refused on two, then won with one of them still to answer: the
    // other one took the entry off, the silent one may keep it.
    let mut call = self::call(Terms::Retries(3), true);
    let two = round([queued(300), queued(300), Some(Reply::Ok)], now);
    assert!(attempt(&mut call, &two, [0.5, 0.5], now));
    let _ = call.handle_told(now + MS);
    let won = round([None, Some(Reply::Ok), Some(Reply::Ok)], now + MS);
    assert!(!attempt(&mut call, &won, [0.5, 0.5], now + MS), "won");
    assert_eq!(
        call.leave().expect("a wait").command,
        leave_of(&wait, 0b001)
    );
    // A master the command never reached holds nothing.
    let mut call = self::call(Terms::Retries(3), true);
    let mut lagging = round([Some(Reply::Ok), Some(Reply::Ok), None], now);
    lagging.handle_failure(2, NodeError::Lagging, now);
    assert!(!attempt(&mut call, &lagging, [0.5, 0.5], now));
    assert_eq!(call.leave().expect("a wait").command, None);
    // A fenced attempt's acquire round is noted the same way.
    let mut call = self::call(Terms::Retries(3), true);
    let fenced = call.fenced();
    assert_eq!(fenced.keys, KEYS);
    assert_eq!(fenced.queue, Some(member().queue()));
    let waited = Some((refused(now), Some(400 * MS)));
    let busy = Error::TooManyInFlight { limit: 1 };
    call.handle_fenced(waited, Err(busy), || 0.0, now);
    assert!(matches!(call.poll(), Step::Wait { until, .. } if until == now + 100 * MS));
    assert_eq!(
        call.leave().expect("a wait").command,
        leave_of(&wait, 0b111)
    );
}

#[test]
fn a_call_dropped_with_its_attempt_under_way_leaves_the_queues() {
    let now = crate::clock::now();
    // Its first attempt under way: any master may queue it.
    let mut call = call(Terms::Retries(3), true);
    let command = call.command(TOKEN);
    let wait = member();
    let (member, place, margin) = wait.queue();
    assert_eq!(
        command,
        Command::wait_acquire(
            KEYS,
            &TOKEN,
            TTL.as_millis() as u64,
            (member, place, margin)
        )
    );
    let leave = call.leave().expect("a wait");
    assert_eq!(leave.wait, WAIT);
    assert_eq!(leave.command, leave_of(&wait, u64::MAX));
    // Dropped between attempts, after one was refused: the same.
    let mut call = self::call(Terms::Retries(3), true);
    assert!(attempt(&mut call, &refused(now), [0.5, 0.5], now));
    assert_eq!(
        call.leave().expect("a wait").command,
        leave_of(&wait, 0b111)
    );
    // A round gone from the table: released everywhere, its outcome
    // unknown (the call ends), still queued.
    let mut call = self::call(Terms::Retries(3), true);
    let _ = call.command(TOKEN);
    let release = call.handle_lost(|| 0.5, now);
    assert_eq!(
        release,
        Command::release(KEYS, &TOKEN)
            .with_script()
            .reaching(u64::MAX)
    );
    assert_eq!(call.poll(), Step::Done);
    assert_eq!(
        call.leave().expect("a wait").command,
        leave_of(&wait, u64::MAX)
    );
}

#[test]
fn an_attempt_that_could_not_go_out_leaves_the_queues_as_they_were() {
    let now = crate::clock::now();
    let mut call = call(Terms::Retries(3), true);
    let _ = call.command(TOKEN);
    call.handle_unsent(Error::TooManyInFlight { limit: 1 }, || 0.5, now);
    assert!(matches!(call.poll(), Step::Wait { .. }), "it may pass");
    assert_eq!(
        call.leave().expect("a wait").command,
        None,
        "nothing went out"
    );
}

/// Sends a plain attempt of `call` and hands it `round`, at `now`: the
/// masters to count as having told its wait.
fn granted_after(call: &mut Pursue<&'static [u8]>, round: &Round, now: Instant) -> Option<Granted> {
    let _ = call.command(TOKEN);
    let report = || Box::new(round.report());
    call.handle_attempt(round, decision(round, Ok(())), report, || 0.5, now)
        .granted
}

/// A failed attempt that a master refused hands back the masters whose
/// grant it had (counted ones only), plain or fenced; one refused nowhere
/// (the caller is queued nowhere) or without a wait hands back none.
#[test]
fn a_failed_attempt_hands_back_the_masters_that_granted_it() {
    let now = crate::clock::now();
    let mut split = round([None, Some(Reply::Ok), queued(30_000)], now);
    split.handle_quarantined(0, now);
    let granted = Some(Granted {
        wait: WAIT,
        masters: 0b010,
    });
    let mut plain = call(Terms::Retries(3), true);
    assert_eq!(
        granted_after(&mut plain, &split, now),
        granted,
        "master 1; the quarantined 0 never counts"
    );
    assert!(matches!(
        plain.poll(),
        Step::Wait {
            told: Some(WAIT),
            ..
        }
    ));
    let mut fenced = call(Terms::Retries(3), true);
    let _ = fenced.fenced();
    let busy = Error::TooManyInFlight { limit: 1 };
    let waited = Some((split.clone(), None));
    assert_eq!(
        fenced.handle_fenced(waited, Err(busy), || 0.5, now),
        granted
    );
    // Refused nowhere: masters failed, and none will tell it.
    let mut failed = round([Some(Reply::Ok), None, None], now);
    failed.handle_failure(1, NodeError::Closed, now);
    failed.handle_failure(2, NodeError::Closed, now);
    let mut refused_nowhere = call(Terms::Retries(3), true);
    assert_eq!(granted_after(&mut refused_nowhere, &failed, now), None);
    let mut no_wait = call(Terms::Retries(3), false);
    assert_eq!(granted_after(&mut no_wait, &split, now), None);
}

/// What a master restarted empty while a caller waits brings out. The
/// holder's release tells the waiter on master 1; the reconnect to master 0
/// wakes it, and arming its attempt forgets that tell. The attempt takes
/// the key reserved for it on master 1, is refused on master 2 (the
/// release has not reached it yet), which then tells it, and master 0
/// grants in quarantine and never tells. Master 1's grant counts as its
/// tell: told by a quorum, the waiter makes the attempt that wins, instead
/// of waiting for its fallback (here, its retry delay, 200 ms; in the
/// matrix, longer than any test).
#[test]
fn a_grant_of_a_failed_attempt_counts_as_that_masters_tell() {
    let now = crate::clock::now();
    let mut waits: Waits<&str> = Waits::new(4, 3, TIMEOUT);
    let id = waits.begin().expect("room");
    let wait = Wait::new(id, &wake_channel(1), 42, times()).expect("fits");
    let mut call = Pursue::new(
        KEYS,
        TTL.as_millis() as u64,
        Terms::Retries(3),
        times(),
        Some(wait),
    );
    let arm = |call: &Pursue<&'static [u8]>, waits: &mut Waits<&str>| {
        if let Step::Attempt {
            arm: Some(armed), ..
        } = call.poll()
        {
            waits.arm(armed, now + Duration::from_secs(3600));
        }
    };
    // Queued on every master behind the holder.
    arm(&call, &mut waits);
    assert!(attempt(&mut call, &refused(now), [0.5, 0.0], now));
    waits.set_waiter(id, "waiter");
    // Master 0 restarted empty; the holder's release reaches master 1.
    waits.handle_wake(id, 1);
    waits.handle_reconnect();
    let mut woken = Vec::new();
    waits.wake_told(|w| woken.push(w));
    assert_eq!(woken, ["waiter"], "woken by the reconnect");
    assert!(call.handle_told(now + MS).is_some());
    arm(&call, &mut waits);
    let mut split = round([None, Some(Reply::Ok), queued(30_000)], now + MS);
    split.handle_quarantined(0, now + MS);
    // The release reaches master 2 after the attempt's refusal there.
    waits.handle_wake(id, 2);
    if let Some(granted) = granted_after(&mut call, &split, now + 2 * MS) {
        waits.handle_granted(granted.wait, granted.masters);
    }
    assert_eq!(
        call.poll(),
        Step::Wait {
            told: Some(id),
            until: now + 2 * MS + 200 * MS
        }
    );
    waits.set_waiter(id, "waiter");
    assert!(waits.is_told(id), "masters 1 (its grant) and 2 told it");
    let mut woken = Vec::new();
    waits.wake_told(|w| woken.push(w));
    assert_eq!(woken, ["waiter"]);
}

/// Past the 64th master, grants share the last bit of the mask: two of
/// them still count as that bit set, never as cancelling each other.
#[test]
fn grants_past_the_64th_master_share_its_bit() {
    let now = crate::clock::now();
    let mut round = Round::new(Op::Acquire, 67, TTL, drift(TTL, 0.01), TIMEOUT, now);
    round.handle_reply(0, Reply::Ok, now);
    round.handle_reply(64, Reply::Ok, now);
    round.handle_reply(65, Reply::Ok, now);
    round.handle_reply(66, queued(30_000).expect("a reply"), now);
    let mut call = call(Terms::Retries(3), true);
    assert!(matches!(call.poll(), Step::Attempt { .. }));
    let granted = granted_after(&mut call, &round, now).expect("a master refused it");
    assert_eq!(granted.masters, 1 | 1 << 63);
}
