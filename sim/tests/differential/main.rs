//! The differential test that keeps the model faithful: seeded random
//! cases of what the client sends (and what other clients write), run on
//! a real `redis-server` and on the model side by side, every reply and
//! every push each connection receives compared, in order.
//!
//! Time: the server runs under an `LD_PRELOAD` shim whose wall clock the
//! test sets (see `server.rs`), so both sides read the same clock, which
//! stands still between two moves of the case. Expiry, `PTTL`, `TIME` and
//! the time-derived values of the fence scripts (loss ids, the read's
//! server time) are then compared exactly, with no tolerance and no
//! sleep; a real server's clock is never raced.
//!
//! Replies that carry server-specific text compare by kind: errors by
//! their code (`ERR`, `WRONGTYPE`, `NOSCRIPT`, ...; a script's own
//! `FOREIGNKEY` whole), `INFO` by the fields a client reads, `HELLO` by
//! its protocol and role.
//!
//! Pushes: every exchange ends with a `PING`, whose reply the server
//! writes after everything before it, so the frames up to it are all the
//! connection received. After a step that may publish, each other
//! connection that listens is sent a `PING` too, and what came before its
//! reply is held against the pushes the model wrote to it; so is each
//! other connection that has sent `CLIENT TRACKING`, after every step
//! (any command may change a key it tracks, a read that expires one
//! included). Where a server puts a message published to the connection
//! that caused it (before or after that command's reply), and which keys
//! a script's reads track (the script's declared keys, or those of the
//! commands it calls), depends on the server; the model is told which.
//!
//! Client tracking is covered as the loss watch uses it: connections that
//! speak RESP3 turn on `CLIENT TRACKING ON OPTIN NOLOOP` (in the
//! handshake, or later; now and then the default mode, `OPTIN` or
//! `NOLOOP` alone, or `OFF`, and rarely on RESP2, which a server grants
//! and tells nothing) and read lock keys after `CLIENT CACHING YES`, now
//! and then without it, or with a command or a script between; the case's
//! other traffic changes those keys, from the same connection and others
//! (writes, deletions, `PEXPIRE`, scripts, `FLUSHALL`, accesses after the
//! clock passed an expiry), so that every `invalidate` push is compared in
//! order with the replies. The forms of `CLIENT TRACKING` and `CLIENT
//! CACHING` the model refuses (`REDIRECT`, `BCAST`, `PREFIX`, `OPTOUT`,
//! `CACHING NO`) are sent as a server refuses them too, and compare by
//! their error code. The server's background expiry is off (see
//! `server.rs`): a key expires when a command touches it, on both sides.
//!
//! `SIM_DIFF_CASES=N` runs N cases (seeds `0..N`; the default keeps the
//! test short); `SIM_DIFF_SEED=S` runs the case of seed S alone.
//! `REDIS_SERVER=/path` picks the server (a `valkey-server` too). A
//! failure prints the seed, the steps up to the first reply that differs
//! (the shortest failing prefix), and a smaller failing case found by
//! dropping steps.

mod case;
mod compare;
mod generate;
mod server;
mod steps;
mod wire;

use std::time::Instant;

use case::{Failure, Runner, SERVER_START, case_start};
use compare::Tally;
use server::Server;
use steps::Step;

/// Cases run by default: a few seconds on a busy two-core machine.
const DEFAULT_CASES: u64 = 250;

/// At most this many replays go into making a failing case smaller.
const SHRINK_BUDGET: usize = 400;

fn env_u64(name: &str) -> Option<u64> {
    let text = std::env::var(name).ok()?;
    Some(
        text.parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a number")),
    )
}

/// Steps in the case of `seed`.
fn case_len(seed: u64) -> usize {
    30 + (seed % 71) as usize
}

#[test]
fn the_model_replies_as_the_server_does() {
    let seeds = match env_u64("SIM_DIFF_SEED") {
        Some(seed) => seed..seed + 1,
        None => 0..env_u64("SIM_DIFF_CASES").unwrap_or(DEFAULT_CASES),
    };
    let mut server = Server::start(SERVER_START);
    let began = Instant::now();
    let mut steps = 0;
    let mut tally = Tally::new();
    for seed in seeds.clone() {
        let len = case_len(seed);
        match Runner::new(&mut server, case_start(seed)).run_generated(seed, len) {
            Ok(counted) => {
                for (kind, n) in counted {
                    *tally.entry(kind).or_default() += n;
                }
            }
            Err(failure) => {
                let smaller = shrink(&mut server, case_start(seed), &failure.steps);
                panic!("{}", report(seed, &failure, &smaller));
            }
        }
        steps += len;
    }
    let pushes: u64 = tally
        .iter()
        .filter(|(kind, _)| kind.starts_with('>'))
        .map(|(_, n)| n)
        .sum();
    eprintln!(
        "{} cases ({steps} steps, {} replies, {pushes} pushes) on {} agree with the model, in {:.1?}\n\
         frames by kind: {tally:?}",
        seeds.end - seeds.start,
        tally.values().sum::<u64>() - pushes,
        server::binary().display(),
        began.elapsed()
    );
}

/// A smaller failing case: drops steps, and commands within steps, one
/// at a time from the end, keeping each drop after which the case still
/// fails, until a whole pass drops nothing (or the budget is spent).
fn shrink(server: &mut Server, start: u64, steps: &[Step]) -> Failure {
    let mut best = Failure {
        steps: steps.to_vec(),
        message: String::new(),
    };
    let mut replays = 0;
    let mut progress = true;
    while progress && replays < SHRINK_BUDGET {
        progress = false;
        let mut i = best.steps.len();
        while i > 0 && replays < SHRINK_BUDGET {
            i -= 1;
            for candidate in smaller(&best.steps, i) {
                replays += 1;
                if let Err(failure) = Runner::new(server, start).replay(&candidate) {
                    i = i.min(failure.steps.len());
                    best = failure;
                    progress = true;
                    break;
                }
            }
        }
    }
    if best.message.is_empty() {
        if let Err(failure) = Runner::new(server, start).replay(&best.steps) {
            best = failure;
        }
    }
    best
}

/// The cases one drop smaller at step `i`: without the step, or (for a
/// step that sends several commands) without one of its commands.
fn smaller(steps: &[Step], i: usize) -> Vec<Vec<Step>> {
    let mut out = Vec::new();
    if i + 1 < steps.len() {
        let mut without = steps.to_vec();
        without.remove(i);
        out.push(without);
    }
    if let Step::Send { commands, .. } = &steps[i] {
        for j in (0..commands.len()).rev().filter(|_| commands.len() > 1) {
            let mut fewer = steps.to_vec();
            if let Step::Send { commands, .. } = &mut fewer[i] {
                commands.remove(j);
            }
            out.push(fewer);
        }
    }
    out
}

fn report(seed: u64, failure: &Failure, smaller: &Failure) -> String {
    let list = |steps: &[Step]| {
        steps
            .iter()
            .enumerate()
            .map(|(i, step)| format!("  {i:3}. {step}\n"))
            .collect::<String>()
    };
    format!(
        "the model and {} differ, seed {seed} (rerun: SIM_DIFF_SEED={seed})\n\
         shortest failing prefix ({} steps):\n{}\
         at the last step: {}\n\n\
         a smaller failing case ({} steps):\n{}\
         at its last step: {}\n",
        server::binary().display(),
        failure.steps.len(),
        list(&failure.steps),
        failure.message,
        smaller.steps.len(),
        list(&smaller.steps),
        smaller.message,
    )
}
