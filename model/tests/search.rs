//! The CI form of the model check: two clients of one fenced acquire
//! each, three masters (master 0 an hour fast) that may each lose their
//! data once, no time passing, fence reads that run on every master at
//! once, no time-outs; every interleaving (no reduction), so that every
//! invariant is checked on every state, to a depth of 20 steps.
//!
//! With the library's start from the largest clock nothing breaks within
//! that depth; with the fix reverted (each master from its own clock, or
//! every master from one master's clock) the search finds a master of a
//! fence's raise quorum started below that fence by the skew; without the
//! skew, the reverted rules break nothing there either. Run with
//! `--nocapture` to see the counts and the traces.

#![allow(clippy::expect_used, reason = "a test fails loudly")]

use redlock_mio_model::config::N;
use redlock_mio_model::{ClockStart, Config, Outcome, StartRule, Violation, search};

/// The depth the CI form searches to: the reverted rules break invariant
/// (I) in 18 steps.
const DEPTH: usize = 20;

/// An hour in microseconds, less a minute of slack.
const SKEW_US: u64 = 3_540_000_000;

/// The CI form: atomic reads, no timeouts, the library's rules but for
/// `clock_start`. A reverted clock start is searched with the direct start
/// (no confirming read), which shows its violation in fewer steps.
fn ci(clock_start: ClockStart) -> Config {
    let start = match clock_start {
        ClockStart::Largest => StartRule::Confirmed,
        ClockStart::One | ClockStart::Own => StartRule::Direct,
    };
    Config {
        atomic_reads: true,
        timeouts: false,
        clock_start,
        start,
        ..Config::default()
    }
}

/// Reads that are not one moment, no timeouts, to `READ_DEPTH`.
fn reads_overtaken(start: StartRule) -> Config {
    Config {
        atomic_reads: false,
        timeouts: false,
        start,
        ..Config::default()
    }
}

/// Deep enough for a loss to overtake a read that then starts the
/// counters (22 steps).
const READ_DEPTH: usize = 24;

fn run(config: &Config) -> Outcome {
    let outcome = search(config, DEPTH, |_| {});
    let level = outcome.level;
    println!(
        "{config}\n  depth {} reached, {} states, {} transitions, {:.1?}",
        level.depth, level.states, outcome.transitions, level.elapsed
    );
    if let Some(trace) = &outcome.counterexample {
        println!("{trace}");
    }
    outcome
}

/// The search reached `depth` with no violation, over a state space that
/// did not shrink by accident.
fn holds(outcome: &Outcome, depth: usize, at_least: usize) {
    assert!(
        outcome.counterexample.is_none(),
        "{}",
        outcome
            .counterexample
            .as_ref()
            .map_or(String::new(), ToString::to_string)
    );
    assert_eq!(outcome.level.depth, depth);
    assert!(
        outcome.level.states >= at_least,
        "only {} states",
        outcome.level.states
    );
}

/// The search found a master of a fence's raise quorum left with a
/// counter below that fence by about the skew, within `DEPTH` steps.
fn skewed_below(outcome: &Outcome) {
    let trace = outcome.counterexample.as_ref().expect("a counterexample");
    assert!(trace.steps.len() <= DEPTH, "{trace}");
    match trace.violation {
        Violation::BelowRaised {
            master,
            counter,
            fence,
        } => {
            assert!(master < N);
            assert!(fence - counter > SKEW_US, "{trace}");
        }
        ref other => panic!("not the skewed start: {other}"),
    }
    let text = trace.to_string();
    assert!(text.contains("restarts empty"), "{text}");
    assert!(text.contains("FENCE_SYNC start"), "{text}");
}

#[test]
fn the_largest_clock_start_breaks_nothing() {
    holds(&run(&ci(ClockStart::Largest)), DEPTH, 100_000);
}

#[test]
fn starting_each_master_from_its_own_clock_is_caught() {
    skewed_below(&run(&ci(ClockStart::Own)));
}

#[test]
fn starting_every_master_from_one_masters_clock_is_caught() {
    skewed_below(&run(&ci(ClockStart::One)));
}

/// The violations above come from the skew: with every clock together,
/// the reverted rules hold as far.
#[test]
fn without_skew_the_reverted_starts_break_nothing() {
    for rule in [ClockStart::Own, ClockStart::One] {
        let config = Config {
            offsets: [0; N],
            ..ci(rule)
        };
        holds(&run(&config), DEPTH, 20_000);
    }
}

/// A start on a read that a master's loss overtook (another client
/// started the counters and raised a fence there meanwhile) is started
/// below that fence: the rule before the confirming read.
#[test]
fn a_start_on_a_read_a_loss_overtook_is_caught() {
    let outcome = search(&reads_overtaken(StartRule::Direct), READ_DEPTH, |_| {});
    let trace = outcome.counterexample.expect("the overtaken read");
    assert!(trace.to_string().contains("FENCE_SYNC start"), "{trace}");
}

/// The library's rule: a start trusts only losses known when its read
/// began, confirmed by a second read.
#[test]
fn the_confirmed_start_breaks_nothing() {
    let outcome = search(&reads_overtaken(StartRule::Confirmed), READ_DEPTH, |_| {});
    holds(&outcome, READ_DEPTH, 400_000);
}

/// The partial-order reduction finds the same violation at the same
/// depth, and none where the full search finds none.
#[test]
fn the_reduction_agrees_with_the_full_search() {
    let reduced = |rule| Config {
        reduce: true,
        ..ci(rule)
    };
    let full = run(&ci(ClockStart::Own));
    let cut = run(&reduced(ClockStart::Own));
    skewed_below(&cut);
    let steps = |o: &Outcome| o.counterexample.as_ref().map(|t| t.steps.len());
    assert_eq!(steps(&cut), steps(&full));
    holds(&run(&reduced(ClockStart::Largest)), DEPTH, 50_000);
}
