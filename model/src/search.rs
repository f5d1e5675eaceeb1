//! The breadth-first search: every state reachable in up to `depth`
//! steps, each class of symmetric states once, the invariants checked on
//! every step. The first violation found is one of the fewest steps; its
//! trace is rebuilt by replaying the path the search took.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::{BuildHasherDefault, Hasher};
use std::time::{Duration, Instant};

use crate::canon::Canon;
use crate::config::Config;
use crate::log::Log;
use crate::reduce::Reducer;
use crate::state::State;
use crate::step::{Action, Violation};

/// A hasher that passes a fingerprint through: the fingerprints are
/// hashes already.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u64(&mut self, i: u64) {
        self.0 = i;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Each visited state's fingerprint, with its parent's.
type Visited = HashMap<u64, u64, BuildHasherDefault<PassThrough>>;

/// How far a search got after each depth.
#[derive(Debug, Clone, Copy)]
pub struct Level {
    /// Every state reachable in this many steps or fewer has been seen.
    pub depth: usize,
    /// Distinct states (up to symmetry) seen so far.
    pub states: usize,
    /// States first reached at this depth.
    pub frontier: usize,
    /// Time since the search began.
    pub elapsed: Duration,
}

/// One step of a counterexample.
#[derive(Debug, Clone)]
pub struct TraceStep {
    /// The step.
    pub action: Action,
    /// What it did, in words.
    pub lines: Vec<String>,
    /// The tick after it.
    pub now: u8,
}

/// A path from the initial state to a broken invariant.
#[derive(Debug, Clone)]
pub struct Counterexample {
    /// The invariant broken by the last step.
    pub violation: Violation,
    /// The steps, the last one breaking it.
    pub steps: Vec<TraceStep>,
}

/// What a search found.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The last depth searched in full.
    pub level: Level,
    /// Whether no state was left unexplored: the whole space within the
    /// configuration's bounds has been seen.
    pub complete: bool,
    /// Steps taken (transitions tried).
    pub transitions: u64,
    /// The first violation, with its trace.
    pub counterexample: Option<Counterexample>,
}

/// Searches every state of `config` reachable in up to `depth` steps,
/// telling `progress` after each depth.
pub fn search(config: &Config, depth: usize, mut progress: impl FnMut(&Level)) -> Outcome {
    let started = Instant::now();
    let initial = State::initial(config);
    let canon = Canon::new(config.clients, &config.offsets);
    let root = canon.fingerprint(&initial);
    let mut visited = Visited::default();
    visited.insert(root, root);
    let mut frontier = vec![(initial, root)];
    let mut actions = Vec::new();
    let mut reducer = Reducer::new(config);
    let mut transitions = 0;
    let mut level = Level {
        depth: 0,
        states: 1,
        frontier: 1,
        elapsed: started.elapsed(),
    };
    for d in 1..=depth {
        let mut next = Vec::new();
        for (state, fp) in &frontier {
            state.actions(config, &mut actions);
            if config.reduce {
                reducer.reduce(state, config, &mut actions);
            }
            for &action in &actions {
                transitions += 1;
                match state.apply(action, config, &mut Log::off()) {
                    Ok(after) => {
                        let f = canon.fingerprint(&after);
                        if let Entry::Vacant(slot) = visited.entry(f) {
                            slot.insert(*fp);
                            next.push((after, f));
                        }
                    }
                    Err(_) => {
                        let counterexample = rebuild(config, &visited, *fp, &canon);
                        return Outcome {
                            level,
                            complete: false,
                            transitions,
                            counterexample,
                        };
                    }
                }
            }
        }
        if next.is_empty() {
            return Outcome {
                level,
                complete: true,
                transitions,
                counterexample: None,
            };
        }
        frontier = next;
        level = Level {
            depth: d,
            states: visited.len(),
            frontier: frontier.len(),
            elapsed: started.elapsed(),
        };
        progress(&level);
    }
    Outcome {
        level,
        complete: false,
        transitions,
        counterexample: None,
    }
}

/// The trace to the state `last` (then one more step, the one that
/// breaks an invariant), replayed from the initial state along the
/// fingerprints the search kept.
fn rebuild(config: &Config, visited: &Visited, last: u64, canon: &Canon) -> Option<Counterexample> {
    let mut path = vec![last];
    let mut at = last;
    while let Some(&parent) = visited.get(&at) {
        if parent == at {
            break;
        }
        path.push(parent);
        at = parent;
    }
    path.reverse();
    let mut state = State::initial(config);
    let mut steps = Vec::new();
    let mut actions = Vec::new();
    for &target in &path[1..] {
        state.actions(config, &mut actions);
        let (action, after, lines) = actions.iter().find_map(|&action| {
            let mut log = Log::on();
            let after = state.apply(action, config, &mut log).ok()?;
            (canon.fingerprint(&after) == target).then(|| (action, after, log.into_lines()))
        })?;
        steps.push(TraceStep {
            action,
            lines,
            now: after.now,
        });
        state = after;
    }
    state.actions(config, &mut actions);
    let (action, violation, lines) = actions.iter().find_map(|&action| {
        let mut log = Log::on();
        let violation = state.apply(action, config, &mut log).err()?;
        Some((action, violation, log.into_lines()))
    })?;
    steps.push(TraceStep {
        action,
        lines,
        now: state.now,
    });
    Some(Counterexample { violation, steps })
}
