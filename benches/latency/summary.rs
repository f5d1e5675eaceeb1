//! The run as one markdown table (`--markdown`), the table of
//! `benches/README.md`: a row per variant, the healthy closed loop next to
//! the paused master and the contention, and a line for each pair.

use super::*;
use markdown::{command, thousands};

/// What the run measured, for the summary.
pub(crate) struct Summary<'a> {
    pub(crate) args: &'a Args,
    pub(crate) kinds: &'a [Kind],
    pub(crate) closed: &'a [Stats],
    pub(crate) contended: &'a [ContentionResult],
    pub(crate) fault: &'a [(Kind, FaultOutcome)],
    pub(crate) tls: Option<&'a PairRow>,
    pub(crate) fence: Option<&'a PairRow>,
}

/// The name of a variant in the table: this crate in bold, the floors and
/// crates by their ids.
pub(crate) fn label(kind: Kind) -> &'static str {
    match kind {
        Kind::Mine => "**redlock-mio**",
        Kind::MineAsync => "**redlock-mio** async",
        Kind::Redlock => "`redlock` 2.0",
        Kind::Rslock => "`rslock` 0.10",
        Kind::SyncBaseline => "redis-rs sync",
        Kind::AsyncBaseline => "redis-rs async",
        Kind::Floor => "`floor`",
        Kind::FloorQuorum => "`floor_quorum`",
        Kind::FloorClassic => "`floor_quorum` with the classic release",
    }
}

/// This crate first, then the floors, then the peers from the fastest.
fn order(kind: Kind, closed: &Stats) -> (u8, u64) {
    let rank = match kind {
        Kind::Mine => 0,
        Kind::MineAsync => 1,
        Kind::FloorQuorum => 2,
        Kind::FloorClassic => 3,
        Kind::Floor => 4,
        _ => 5,
    };
    (rank, pct(&closed.cycle, 50.0))
}

impl Summary<'_> {
    /// The table, under the command line that produced it.
    pub(crate) fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} (µs; cycle = acquire + release, closed loop, {} cycles each; ×fq = ratio to \
             `floor_quorum` at p50; contention with the 0-1 ms retry wait):\n",
            command("latency"),
            thousands(self.args.cycles as f64)
        );
        let _ = writeln!(
            out,
            "| variant | cycle p50 | cycle p99 | ×fq p50 | allocations per cycle | \
             acquire p50, one master paused | acquisitions/s, 4 threads contending |\n\
             |---|--:|--:|--:|--:|--:|--:|"
        );
        let fq = self
            .kinds
            .iter()
            .position(|&k| k == Kind::FloorQuorum)
            .map(|i| pct(&self.closed[i].cycle, 50.0));
        let mut rows: Vec<(Kind, &Stats)> = self.kinds.iter().copied().zip(self.closed).collect();
        rows.sort_by_key(|&(kind, stats)| order(kind, stats));
        for (kind, stats) in rows {
            let p50 = pct(&stats.cycle, 50.0);
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} |",
                label(kind),
                thousands(us(p50)),
                thousands(us(pct(&stats.cycle, 99.0))),
                fq.map_or("–".to_owned(), |fq| ratio(p50, fq)),
                thousands(stats.allocs_per_cycle()),
                self.paused(kind),
                self.contending(kind, CONTENTION_BACKOFFS[1])
            );
        }
        out.push_str(&self.pairs());
        out.push_str(&self.tight_loop());
        out
    }

    /// Acquire p50 with a master paused, or how long the variant blocked.
    fn paused(&self, kind: Kind) -> String {
        match self.fault.iter().find(|(k, _)| *k == kind) {
            None => "–".to_owned(),
            Some((_, FaultOutcome::Blocked { waited, .. })) => {
                format!("blocked > {} s", waited.as_secs())
            }
            Some((_, FaultOutcome::Done(s))) if s.acquire.is_empty() => "–".to_owned(),
            Some((_, FaultOutcome::Done(s))) => {
                let p50 = thousands(us(pct(&s.acquire, 50.0)));
                // The floors have no timeout: they talk to the live masters.
                if matches!(kind, Kind::Floor | Kind::FloorQuorum | Kind::FloorClassic) {
                    format!("{p50} ({} live masters)", MASTERS - 1)
                } else {
                    p50
                }
            }
        }
    }

    /// Acquisitions per second of 4 contending threads with `backoff`;
    /// marked when a client stopped on an error, whose count is then missing.
    fn contending(&self, kind: Kind, backoff: Duration) -> String {
        self.contended
            .iter()
            .find(|r| r.kind == kind && r.backoff == backoff)
            .map_or("–".to_owned(), |r| {
                let rate = thousands(r.acquired as f64 / r.secs);
                match r.error {
                    Some(_) => format!("{rate} (a client failed)"),
                    None => rate,
                }
            })
    }

    /// The pairs of this crate against itself, as ratios at p50.
    fn pairs(&self) -> String {
        let mut out = String::new();
        for (what, row) in [
            ("TLS against plain TCP", self.tls),
            ("fenced against plain (acquire, raise, release)", self.fence),
        ] {
            if let Some(row) = row {
                let _ = write!(
                    out,
                    "\n{what}: ×{} at p50, ×{} at p99 ({} cycles each, interleaved).\n",
                    ratio(pct(&row.other, 50.0), pct(&row.base, 50.0)),
                    ratio(pct(&row.other, 99.0), pct(&row.base, 99.0)),
                    thousands(row.base.len() as f64)
                );
            }
        }
        out
    }

    /// Contention in a tight loop: this crate against its best peer.
    fn tight_loop(&self) -> String {
        let tight: Vec<&ContentionResult> = self
            .contended
            .iter()
            .filter(|r| r.backoff == CONTENTION_BACKOFFS[0])
            .collect();
        let rate = |r: &&ContentionResult| r.acquired as f64 / r.secs;
        let mine = tight.iter().find(|r| r.kind == Kind::Mine);
        let peer = tight
            .iter()
            .filter(|r| !matches!(r.kind, Kind::Mine | Kind::MineAsync))
            .max_by(|a, b| rate(a).total_cmp(&rate(b)));
        match (mine, peer) {
            (Some(mine), Some(peer)) => format!(
                "\nContention in a tight loop, no retry wait: {} acquisitions/s, the best peer \
                 ({}) {}.\n",
                thousands(rate(mine)),
                label(peer.kind),
                thousands(rate(peer))
            ),
            _ => String::new(),
        }
    }
}
