//! The keeping of a lock, driven with instants made up by the test and
//! the results its keeper would hand in: every transition, and that
//! nothing goes out after the release.

use std::time::{Duration, Instant};

use super::{Keeping, KeepingStep};
use crate::calls::tests::{Does, ended};
use crate::calls::{Extend, Release, decision};
use crate::error::Error;
use crate::rules::Op;
use crate::rules::keep::Standing;

const MS: Duration = Duration::from_millis(1);
const TTL: Duration = Duration::from_millis(300);
/// A third of the TTL: the period when none is asked.
const PERIOD: Duration = Duration::from_millis(100);

/// An extend's result after its masters did what `nodes` says.
fn extended(nodes: &[Does]) -> Result<(), Error> {
    let round = ended(Op::Extend, nodes);
    Extend::handle(&round, decision(&round, Ok(())), || {
        Box::new(round.report())
    })
    .0
}

/// A release's result after its masters did what `nodes` says.
fn released(nodes: &[Does]) -> Result<(), Error> {
    let round = ended(Op::Release, nodes);
    Release::handle(&round, decision(&round, Ok(())), || {
        Box::new(round.report())
    })
    .0
}

/// A quorum extended or released it.
fn won() -> Result<(), Error> {
    extended(&[Does::Grants, Does::Grants, Does::Refuses])
}

/// A quorum said the token no longer owns the resource.
fn not_held() -> Result<(), Error> {
    extended(&[Does::Refuses, Does::Refuses, Does::Grants])
}

/// The masters were out of reach.
fn unavailable() -> Result<(), Error> {
    extended(&[Does::Fails, Does::Fails, Does::Grants])
}

/// A keeping started at `t0` for a lock valid for a TTL, with the
/// default period and no hold limit.
fn started(t0: Instant) -> Keeping {
    Keeping::new(TTL, None, None, t0 + TTL, t0)
}

/// A keeping started at `t0`, woken a period later with its extension
/// handed out; and that wake.
fn extending(t0: Instant) -> (Keeping, Instant) {
    let mut keeping = started(t0);
    let wake = t0 + PERIOD;
    assert_eq!(keeping.handle_wake(wake, t0 + TTL), None);
    assert_eq!(keeping.poll(), KeepingStep::Extend);
    (keeping, wake)
}

/// `keeping`, asked for the release at `now` (the lock valid until
/// `valid_until`) with the standing `reported`, hands out its release.
fn ask(keeping: &mut Keeping, now: Instant, valid_until: Instant, reported: Option<Standing>) {
    assert_eq!(keeping.handle_asked(now, valid_until), reported);
    assert_eq!(keeping.poll(), KeepingStep::Release);
    assert_eq!(
        keeping.poll(),
        KeepingStep::InFlight,
        "the release goes out once"
    );
}

#[test]
fn it_waits_a_third_of_the_ttl_or_the_period_asked() {
    let t0 = Instant::now();
    assert_eq!(
        started(t0).poll(),
        KeepingStep::Wait {
            until: Some(t0 + PERIOD)
        }
    );
    let mut keeping = Keeping::new(TTL, Some(40 * MS), None, t0 + TTL, t0);
    assert_eq!(
        keeping.poll(),
        KeepingStep::Wait {
            until: Some(t0 + 40 * MS)
        }
    );
}

/// Woken for its extension, it hands it out once; the extension passes,
/// the lock is held, and the next one is a period after the wake.
#[test]
fn a_wake_on_time_hands_out_one_extension_and_a_success_is_held() {
    let t0 = Instant::now();
    let (mut keeping, wake) = extending(t0);
    assert_eq!(keeping.poll(), KeepingStep::InFlight, "handed out once");
    // Neither a wake nor an ask is seen while the extension is out.
    assert_eq!(keeping.handle_wake(wake + TTL, wake), None);
    assert_eq!(keeping.handle_asked(wake + MS, wake + TTL), None);
    assert_eq!(keeping.poll(), KeepingStep::InFlight);
    let end = wake + 20 * MS;
    assert_eq!(
        keeping.handle_extended(&won(), end, end + TTL),
        Some(Standing::Held)
    );
    assert_eq!(
        keeping.poll(),
        KeepingStep::Wait {
            until: Some(wake + PERIOD)
        }
    );
    // A result with no extension out changes nothing.
    assert_eq!(keeping.handle_extended(&won(), end, end + TTL), None);
    assert_eq!(
        keeping.poll(),
        KeepingStep::Wait {
            until: Some(wake + PERIOD)
        }
    );
}

/// A wake before the extension is due (for the validity's end) hands out
/// nothing: the keeper waits for the end, which says lost.
#[test]
fn an_early_wake_waits_and_the_validity_end_loses_the_lock() {
    let t0 = Instant::now();
    let end = t0 + 60 * MS;
    let mut keeping = Keeping::new(TTL, None, None, end, t0);
    assert_eq!(keeping.poll(), KeepingStep::Wait { until: Some(end) });
    assert_eq!(keeping.handle_wake(end - MS, end), None);
    assert_eq!(keeping.poll(), KeepingStep::Wait { until: Some(end) });
    assert_eq!(keeping.handle_wake(end, end), Some(Standing::Lost));
    assert_eq!(keeping.poll(), KeepingStep::Wait { until: None });
    // Lost: no wake extends it again; the ask releases it, still lost.
    assert_eq!(keeping.handle_wake(end + PERIOD, end), None);
    assert_eq!(keeping.poll(), KeepingStep::Wait { until: None });
    ask(&mut keeping, end + PERIOD, end, None);
    assert_eq!(keeping.handle_released(&won()), Some(Standing::Lost));
    assert_eq!(keeping.poll(), KeepingStep::Done(Standing::Lost));
}

/// A missed extension puts the lock at risk, and is tried again a
/// quarter period after its wake.
#[test]
fn a_missed_extension_is_at_risk_and_tried_again_after_a_quarter_period() {
    let t0 = Instant::now();
    for missed in [unavailable(), Err(Error::TooManyInFlight { limit: 1 })] {
        let (mut keeping, wake) = extending(t0);
        assert_eq!(
            keeping.handle_extended(&missed, wake + 10 * MS, t0 + TTL),
            Some(Standing::AtRisk)
        );
        let retry = wake + PERIOD / 4;
        assert_eq!(keeping.poll(), KeepingStep::Wait { until: Some(retry) });
        assert_eq!(keeping.handle_wake(retry, t0 + TTL), None);
        assert_eq!(keeping.poll(), KeepingStep::Extend);
    }
    // Missed past the validity: lost.
    let (mut keeping, wake) = extending(t0);
    let capped = wake + 10 * MS;
    assert_eq!(
        keeping.handle_extended(&unavailable(), capped, capped),
        Some(Standing::Lost)
    );
    assert_eq!(keeping.poll(), KeepingStep::Wait { until: None });
}

/// A quorum saying the token is gone, or an extension refused as
/// expired, loses the lock: it is never extended again.
#[test]
fn a_lock_gone_at_an_extension_is_lost_and_never_extended_again() {
    let t0 = Instant::now();
    for gone in [not_held(), Err(Error::Expired)] {
        let (mut keeping, wake) = extending(t0);
        assert_eq!(
            keeping.handle_extended(&gone, wake + MS, wake),
            Some(Standing::Lost)
        );
        assert_eq!(keeping.poll(), KeepingStep::Wait { until: None });
        let later = t0 + 10 * PERIOD;
        assert_eq!(keeping.handle_wake(later, later + TTL), None);
        assert_eq!(keeping.poll(), KeepingStep::Wait { until: None });
    }
}

/// At the limit on extensions nothing changes until the validity's end,
/// which says lost.
#[test]
fn at_the_extension_limit_it_waits_for_the_validity_end() {
    let t0 = Instant::now();
    let (mut keeping, wake) = extending(t0);
    let end = t0 + TTL;
    let limit = Err(Error::ExtensionLimit { limit: 3 });
    assert_eq!(keeping.handle_extended(&limit, wake, end), None);
    assert_eq!(keeping.poll(), KeepingStep::Wait { until: Some(end) });
    assert_eq!(keeping.handle_wake(end - MS, end), None);
    assert_eq!(keeping.poll(), KeepingStep::Wait { until: Some(end) });
    assert_eq!(keeping.handle_wake(end, end), Some(Standing::Lost));
}

/// Past its hold limit (counted from the start) it extends no more.
#[test]
fn past_the_hold_limit_it_extends_no_more() {
    let t0 = Instant::now();
    let mut keeping = Keeping::new(TTL, None, Some(PERIOD + MS), t0 + TTL, t0);
    let wake = t0 + PERIOD;
    assert_eq!(keeping.handle_wake(wake, t0 + TTL), None);
    assert_eq!(keeping.poll(), KeepingStep::Extend);
    let end = wake + TTL;
    assert_eq!(
        keeping.handle_extended(&won(), wake, end),
        Some(Standing::Held)
    );
    let wake = t0 + 2 * PERIOD;
    assert_eq!(keeping.handle_wake(wake, end), None);
    assert_eq!(keeping.poll(), KeepingStep::Wait { until: Some(end) });
    assert_eq!(keeping.handle_wake(end, end), Some(Standing::Lost));
}

/// The holder's ask ends the extending: the release goes out once, and
/// its end is the final standing, after which nothing goes out.
#[test]
fn an_ask_sends_the_release_once_and_ends_released() {
    let t0 = Instant::now();
    let end = t0 + TTL;
    let mut keeping = started(t0);
    // A result with no release out changes nothing.
    assert_eq!(keeping.handle_released(&won()), None);
    ask(&mut keeping, t0 + MS, end, None);
    // A second ask, a wake, an extension's result: nothing changes.
    assert_eq!(keeping.handle_asked(t0 + 2 * MS, end), None);
    assert_eq!(keeping.handle_wake(t0 + PERIOD, end), None);
    assert_eq!(keeping.handle_extended(&won(), t0 + PERIOD, end), None);
    assert_eq!(keeping.poll(), KeepingStep::InFlight);
    assert_eq!(keeping.handle_released(&won()), Some(Standing::Released));
    assert_eq!(keeping.poll(), KeepingStep::Done(Standing::Released));
    assert_eq!(keeping.handle_released(&won()), None, "once");
    assert_eq!(keeping.poll(), KeepingStep::Done(Standing::Released));
}

/// The release's end is released unless the lock was gone: a quorum said
/// the token no longer owned it (lost); a release that failed otherwise
/// is still a release.
#[test]
fn the_final_standing_is_lost_only_if_the_release_found_the_lock_gone() {
    let t0 = Instant::now();
    let end = t0 + TTL;
    let refused = released(&[Does::Refuses, Does::Refuses, Does::Grants]);
    assert!(matches!(refused, Err(Error::NotHeld(_))), "{refused:?}");
    let failed = released(&[Does::Fails, Does::Fails, Does::Grants]);
    for (result, last) in [
        (released(&[Does::Grants; 3]), Standing::Released),
        (refused, Standing::Lost),
        (failed, Standing::Released),
    ] {
        let mut keeping = started(t0);
        ask(&mut keeping, t0 + MS, end, None);
        assert_eq!(keeping.handle_released(&result), Some(last));
        assert_eq!(keeping.poll(), KeepingStep::Done(last));
    }
}

/// An ask seen once the validity ran out is a loss, reported before the
/// release goes out; the release's end says lost too.
#[test]
fn an_ask_past_the_validity_is_a_loss() {
    let t0 = Instant::now();
    let end = t0 + TTL;
    let mut keeping = started(t0);
    ask(&mut keeping, end, end, Some(Standing::Lost));
    assert_eq!(keeping.handle_released(&won()), Some(Standing::Lost));
    assert_eq!(keeping.poll(), KeepingStep::Done(Standing::Lost));
}

/// From the holder's ask on, whatever the keeper hands in and whenever,
/// the keeping never hands out an extension, and hands out the release
/// once.
#[test]
fn nothing_is_extended_after_the_ask_and_the_release_goes_out_once() {
    let t0 = Instant::now();
    let end = t0 + TTL;
    let results = [won(), not_held(), unavailable(), Err(Error::Expired)];
    for asked_at in [t0 + MS, t0 + PERIOD, end, end + PERIOD] {
        let mut keeping = started(t0);
        let _ = keeping.handle_asked(asked_at, end);
        let mut releases = 0;
        for step in 0..40u32 {
            let now = asked_at + step * 10 * MS;
            let result = &results[step as usize % results.len()];
            let _ = match step % 5 {
                0 => keeping.handle_wake(now, now + TTL),
                1 => keeping.handle_extended(result, now, now + TTL),
                2 => keeping.handle_asked(now, now + TTL),
                3 if step > 20 => keeping.handle_released(result),
                _ => None,
            };
            match keeping.poll() {
                KeepingStep::Extend => panic!("an extension after the ask, at step {step}"),
                KeepingStep::Release => releases += 1,
                KeepingStep::Wait { .. } => panic!("a wait after the ask, at step {step}"),
                KeepingStep::InFlight | KeepingStep::Done(_) => {}
            }
        }
        assert_eq!(releases, 1);
        assert!(matches!(keeping.poll(), KeepingStep::Done(_)));
    }
}
