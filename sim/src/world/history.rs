//! What happened, in global time, and the checkers run over it: no two
//! holders of a resource within their validities (unless every master that
//! granted both lost its data in between), every call within its bound,
//! and (see the world) nothing left on the masters past its own bound.

use std::fmt::Write;

/// One stretch of time during which a client took a lock as held: from
/// the decision that gave it to the end of the validity that decision
/// computed (cut short by a later decision or a release).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Holding {
    pub(crate) resource: usize,
    pub(crate) client: usize,
    /// The lock (an acquisition), unique in the run.
    pub(crate) lock: u64,
    pub(crate) from: u64,
    pub(crate) until: u64,
    /// The masters whose grants made the decision, bit `i` for master `i`.
    pub(crate) grants: u64,
    /// When the round that decided it started.
    pub(crate) t0: u64,
}

/// Everything the checkers look at.
#[derive(Debug, Default)]
pub(crate) struct History {
    pub(crate) holdings: Vec<Holding>,
    /// When each master lost data (a `FLUSHALL`, a restart without its
    /// data or from an older snapshot), by master process.
    pub(crate) losses: Vec<Vec<u64>>,
    /// The master process each address names (grants are by address).
    proc_of: Vec<usize>,
    /// Calls that took longer than their bound.
    pub(crate) slow_calls: Vec<String>,
    /// Anything else a check found wrong as it happened.
    pub(crate) errors: Vec<String>,
}

impl History {
    pub(crate) fn new(proc_of: Vec<usize>) -> History {
        let procs = proc_of.iter().max().map_or(0, |&p| p + 1);
        History {
            losses: vec![Vec::new(); procs],
            proc_of,
            ..History::default()
        }
    }

    /// The master processes of the addresses in `grants`.
    fn procs(&self, grants: u64) -> u64 {
        (0..self.proc_of.len().min(64))
            .filter(|a| grants >> a & 1 == 1)
            .fold(0, |mask, a| mask | 1 << self.proc_of[a])
    }

    /// Whether `grants` counts one master process twice (through two of
    /// its addresses).
    pub(crate) fn counts_twice(&self, grants: u64) -> bool {
        self.procs(grants).count_ones() < grants.count_ones()
    }

    /// Whether master `m` lost data between `from` and `to`.
    fn lost(&self, m: usize, from: u64, to: u64) -> bool {
        self.losses[m].iter().any(|&at| from <= at && at <= to)
    }

    /// Every pair of holdings of one resource by two locks that overlap in
    /// time, unless each master that granted both lost its data between
    /// the two rounds: the violations of mutual exclusion, described.
    pub(crate) fn overlaps(&self, names: &[String]) -> Vec<String> {
        let mut by_resource: Vec<Vec<&Holding>> = vec![Vec::new(); names.len()];
        for h in &self.holdings {
            if h.from < h.until {
                by_resource[h.resource].push(h);
            }
        }
        let mut found = Vec::new();
        for list in &mut by_resource {
            list.sort_by_key(|h| (h.from, h.lock));
            for (i, a) in list.iter().enumerate() {
                for b in &list[i + 1..] {
                    if b.from >= a.until {
                        break;
                    }
                    if a.lock == b.lock || self.excused(a, b) {
                        continue;
                    }
                    found.push(describe(names, a, b));
                    if found.len() >= 5 {
                        return found;
                    }
                }
            }
        }
        found
    }

    /// Whether every master that granted both `a` and `b` lost its data
    /// between the rounds (outside what the lock assumes).
    fn excused(&self, a: &Holding, b: &Holding) -> bool {
        let (from, to) = (a.t0.min(b.t0), a.from.max(b.from));
        let common = self.procs(a.grants) & self.procs(b.grants);
        (0..64)
            .filter(|m| common >> m & 1 == 1)
            .all(|m| self.lost(m, from, to))
    }
}

fn describe(names: &[String], a: &Holding, b: &Holding) -> String {
    let mut text = format!("two holders of {}:", names[a.resource]);
    for h in [a, b] {
        let _ = write!(
            text,
            " [client {} lock {} held {:.6}s..{:.6}s, round from {:.6}s, granted by {:b}]",
            h.client,
            h.lock,
            secs(h.from),
            secs(h.until),
            secs(h.t0),
            h.grants
        );
    }
    text
}

/// Global nanoseconds as seconds, for messages.
pub(crate) fn secs(t: u64) -> f64 {
    t as f64 / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(lock: u64, from: u64, until: u64, grants: u64) -> Holding {
        Holding {
            resource: 0,
            client: lock as usize,
            lock,
            from,
            until,
            grants,
            t0: from,
        }
    }

    #[test]
    fn overlapping_holders_are_found_unless_their_common_masters_lost_data() {
        let names = vec!["r".to_owned()];
        let mut history = History::new(vec![0, 1, 2]);
        history.holdings = vec![held(1, 0, 100, 0b011), held(2, 50, 150, 0b110)];
        assert_eq!(history.overlaps(&names).len(), 1);
        history.losses[1].push(40);
        assert!(history.overlaps(&names).is_empty(), "master 1 lost the key");
        history.holdings.push(held(3, 100, 200, 0b111));
        assert_eq!(history.overlaps(&names).len(), 1, "3 overlaps 2 only");
    }
}
