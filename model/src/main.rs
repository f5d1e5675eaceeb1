//! `redlock-mio-model`: searches the fencing protocol's states to a depth
//! and prints the counts, or the first counterexample's trace.

use std::process::ExitCode;

use redlock_mio_model::config::{Order, StartRule};
use redlock_mio_model::{ClockStart, Config, search};

const USAGE: &str = "usage: redlock-mio-model [--depth D] [--clients C] [--attempts A] \
[--restarts R] [--ticks T] [--validity V] [--wait W] [--read-every E] [--steps S] [--step-back] \
[--atomic-reads] [--no-timeouts] [--resets] [--lost-replies] [--offsets O0,O1,O2] [--clock-start largest|one|own] [--start direct|confirmed|waited] [--order began|ended] [--fences-only] [--reduce]

Searches every state reachable in up to D steps (default 40) and prints how many
states each depth added; exits 1 with a trace if an invariant breaks.";

fn main() -> ExitCode {
    let (config, depth) = match parse(std::env::args().skip(1)) {
        Ok(Some(parsed)) => parsed,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            eprintln!("{error}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    println!("model: {config}; depth {depth}");
    let outcome = search(&config, depth, |level| {
        println!(
            "depth {:3}: {:10} states ({:9} new) in {:.1?}",
            level.depth, level.states, level.frontier, level.elapsed
        );
    });
    let level = outcome.level;
    match outcome.counterexample {
        Some(trace) => {
            println!(
                "VIOLATION after {} states, {} transitions, in {:.1?}\n{trace}",
                level.states, outcome.transitions, level.elapsed
            );
            ExitCode::FAILURE
        }
        None => {
            let reach = if outcome.complete {
                "every reachable state (the space is exhausted)".to_string()
            } else {
                format!("every state within depth {}", level.depth)
            };
            println!(
                "no violation: {reach}; {} states, {} transitions, {:.1?}",
                level.states, outcome.transitions, level.elapsed
            );
            ExitCode::SUCCESS
        }
    }
}

/// The configuration and depth the arguments ask for; `None` for help.
fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<(Config, usize)>, String> {
    let mut config = Config::default();
    let mut depth = 40;
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--help" | "-h" => return Ok(None),
            "--depth" => depth = number(&value()?)?,
            "--clients" => config.clients = number(&value()?)?,
            "--attempts" => config.attempts = number(&value()?)?,
            "--restarts" => config.restarts = number(&value()?)?,
            "--ticks" => config.ticks = number(&value()?)?,
            "--validity" => config.validity = number(&value()?)?,
            "--wait" => config.wait = number(&value()?)?,
            "--read-every" => config.read_every = number(&value()?)?,
            "--steps" => config.steps = number(&value()?)?,
            "--step-back" => config.step_back = true,
            "--resets" => config.resets = true,
            "--lost-replies" => config.lost_replies = true,
            "--reduce" => config.reduce = true,
            "--fences-only" => config.invariant = false,
            "--order" => {
                config.order = match value()?.as_str() {
                    "began" => Order::Began,
                    "ended" => Order::Ended,
                    other => return Err(format!("unknown order {other}")),
                }
            }
            "--no-timeouts" => config.timeouts = false,
            "--atomic-reads" => config.atomic_reads = true,
            "--offsets" => {
                let text = value()?;
                let offsets: Vec<i64> = text.split(',').map(number).collect::<Result<_, _>>()?;
                config.offsets = offsets
                    .try_into()
                    .map_err(|_| format!("--offsets needs 3 values, got {text}"))?;
            }
            "--start" => {
                config.start = match value()?.as_str() {
                    "direct" => StartRule::Direct,
                    "confirmed" => StartRule::Confirmed,
                    "waited" => StartRule::Waited,
                    other => return Err(format!("unknown start rule {other}")),
                }
            }
            "--clock-start" => {
                let name = value()?;
                config.clock_start =
                    ClockStart::parse(&name).ok_or(format!("unknown clock start {name}"))?;
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    config.check()?;
    Ok(Some((config, depth)))
}

fn number<T: std::str::FromStr>(text: &str) -> Result<T, String> {
    text.parse().map_err(|_| format!("not a number: {text}"))
}
