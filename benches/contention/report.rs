//! The tables: human-readable as the cells end, and as markdown
//! (`--markdown`) under the command line that produced them.

use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;

use super::analyse::{Figures, histogram};
use super::args::Cell;
use super::cpu::Cpu;
use super::crash::{Trial, WAITERS};
use super::markdown::{command, thousands};
use super::variants::Variant;

/// One library's capacity: one client locking back to back, in slices
/// spread over the run.
pub(crate) struct Capacity {
    pub(crate) library: &'static str,
    /// The variant whose client measures it.
    pub(crate) variant: Variant,
    /// Acquire + hold + release cycles per second, per slice.
    rates: Vec<f64>,
    /// The uncontended acquires of every slice, ns.
    acquire: Histogram<u64>,
    /// The CPU of every slice, and the acquisitions it bought.
    cpu: Cpu,
    acquired: usize,
}

impl Capacity {
    pub(crate) fn new(variant: Variant) -> Capacity {
        Capacity {
            library: variant.library(),
            variant,
            rates: Vec::new(),
            acquire: histogram(),
            cpu: Cpu::default(),
            acquired: 0,
        }
    }

    /// Adds a slice that ran at `rate` with these acquires, taking `cpu`
    /// for `acquired` acquisitions.
    pub(crate) fn add(&mut self, rate: f64, acquire: &Histogram<u64>, cpu: Cpu, acquired: usize) {
        self.rates.push(rate);
        let _ = self.acquire.add(acquire);
        self.cpu.add(cpu);
        self.acquired += acquired;
    }

    /// The median of the slices' rates.
    pub(crate) fn rate(&self) -> f64 {
        let mut rates = self.rates.clone();
        rates.sort_by(f64::total_cmp);
        rates.get(rates.len() / 2).copied().unwrap_or(f64::NAN)
    }
}

/// Everything a run measured.
pub(crate) struct Results {
    pub(crate) rows: Vec<Row>,
    pub(crate) capacities: Vec<Capacity>,
    /// The crashed holder's trials, per variant.
    pub(crate) crashes: Vec<(Variant, Vec<Trial>)>,
}

/// One measured cell of one variant.
pub(crate) struct Row {
    pub(crate) cell: Cell,
    pub(crate) variant: Variant,
    /// The capacity of the variant's library, acquisitions/s.
    pub(crate) capacity: f64,
    pub(crate) figures: Figures,
}

impl Row {
    /// The wait of a fair queue: each of the C callers waits for the
    /// others' cycles, one capacity-bound cycle each.
    pub(crate) fn fair_wait(&self) -> f64 {
        self.cell.callers() as f64 / self.capacity * 1e9
    }

    fn cells(&self) -> Vec<String> {
        let f = &self.figures;
        let p = |h: &Histogram<u64>, q: f64| {
            if h.is_empty() {
                "–".to_owned()
            } else {
                ms(h.value_at_quantile(q) as f64)
            }
        };
        let wait99 = f.wait.value_at_quantile(0.99) as f64;
        let mut errors = f.errors.clone();
        if f.violated {
            errors = format!("EXCLUSION VIOLATED; {errors}");
        }
        vec![
            self.cell.label(),
            self.variant.name().to_owned(),
            thousands(f.rate),
            format!("{:.2}", f.rate / self.capacity),
            p(&f.wait, 0.5),
            p(&f.wait, 0.99),
            ms(self.fair_wait()),
            format!("{:.1}", wait99 / self.fair_wait()),
            p(&f.handoff, 0.5),
            p(&f.handoff, 0.99),
            if f.handoff.is_empty() {
                "–".to_owned()
            } else {
                format!("{:.0} %", f.to_waiter * 100.0)
            },
            format!("{:.1}", f.attempts_per),
            format!("{:.3}", f.jain),
            f.cpu.per(f.acquired),
            errors,
        ]
    }
}

const HEADINGS: [&str; 15] = [
    "callers",
    "variant",
    "acquisitions/s",
    "× capacity",
    "wait p50",
    "wait p99",
    "fair-queue wait",
    "p99 / fair",
    "hand-off p50",
    "hand-off p99",
    "to a waiter",
    "attempts / acquisition",
    "Jain",
    "CPU µs / acquisition, client + masters",
    "errors",
];

/// Nanoseconds as milliseconds, to about three significant digits.
pub(crate) fn ms(ns: f64) -> String {
    let v = ns / 1e6;
    if v < 10.0 {
        format!("{v:.2}")
    } else if v < 100.0 {
        format!("{v:.1}")
    } else {
        thousands(v)
    }
}

/// The heading of the human-readable table.
pub(crate) fn header() -> String {
    let short = [
        "callers", "variant", "acq/s", "×cap", "wait50", "wait99", "fair", "99/fair", "hand50",
        "hand99", "waiter", "att/acq", "Jain", "cpu µs", "errors",
    ];
    line(&short.map(str::to_owned))
}

fn line(cells: &[String]) -> String {
    let widths = [10, 23, 6, 5, 7, 7, 6, 7, 7, 7, 6, 7, 5, 11, 0];
    let mut out = String::new();
    for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
        if i < 2 {
            let _ = write!(out, "{cell:<width$} ");
        } else {
            let _ = write!(out, "{cell:>width$} ");
        }
    }
    out.trim_end().to_owned()
}

/// A row of the human-readable table (times in ms).
pub(crate) fn human(row: &Row) -> String {
    line(&row.cells())
}

/// The capacities in a sentence.
pub(crate) fn capacities_line(capacities: &[Capacity]) -> String {
    let parts: Vec<String> = capacities
        .iter()
        .map(|c| {
            let low = c.rates.iter().copied().fold(f64::INFINITY, f64::min);
            let high = c.rates.iter().copied().fold(0.0, f64::max);
            format!(
                "{} {} acquisitions/s (median of {} slices, from {} to {}; uncontended acquire p50 {} ms; CPU per acquisition {} µs, client + masters)",
                c.library,
                thousands(c.rate()),
                c.rates.len(),
                thousands(low),
                thousands(high),
                ms(c.acquire.value_at_quantile(0.5) as f64),
                c.cpu.per(c.acquired)
            )
        })
        .collect();
    format!(
        "Capacity, one client back to back (acquire, hold, release), measured before the cells and after each: {}.",
        parts.join("; ")
    )
}

/// The crashed holder's trials of `variant` in one line.
pub(crate) fn crash_line(variant: Variant, trials: &[Trial]) -> [String; 5] {
    let mut delays: Vec<i64> = trials.iter().map(|t| t.delay).collect();
    delays.sort_unstable();
    let mut attempts: Vec<u64> = trials.iter().map(|t| t.attempts).collect();
    attempts.sort_unstable();
    let signed = |ns: i64| {
        if ns < 0 {
            format!("-{}", ms(ns.unsigned_abs() as f64))
        } else {
            ms(ns as f64)
        }
    };
    let mut errors: Vec<String> = trials.iter().filter_map(|t| t.error.clone()).collect();
    if trials.iter().any(|t| t.violated) {
        errors.insert(0, "EXCLUSION VIOLATED".to_owned());
    }
    [
        variant.name().to_owned(),
        delays
            .get(delays.len() / 2)
            .map_or("–".to_owned(), |&d| signed(d)),
        delays.last().map_or("–".to_owned(), |&d| signed(d)),
        attempts
            .get(attempts.len() / 2)
            .map_or("–".to_owned(), |a| a.to_string()),
        errors.first().cloned().unwrap_or_else(|| "–".to_owned()),
    ]
}

/// Everything as markdown, under the command line that produced it.
pub(crate) fn markdown(results: &Results, run: Duration, crash_ttl: Duration) -> String {
    let Results {
        rows,
        capacities,
        crashes,
    } = results;
    let mut out = format!(
        "{}, {:?} per cell; times in ms; × capacity: acquisitions/s over the capacity of the \
         variant's library; fair-queue wait: callers / capacity:\n\n",
        command("contention"),
        run
    );
    if !rows.is_empty() {
        out.push_str(&format!("| {} |\n", HEADINGS.join(" | ")));
        out.push_str("|--:|---|");
        out.push_str(&"--:|".repeat(HEADINGS.len() - 3));
        out.push_str("---|\n");
        for row in rows {
            out.push_str(&format!("| {} |\n", row.cells().join(" | ")));
        }
        out.push('\n');
    }
    out.push_str(&capacities_line(capacities));
    out.push('\n');
    if !crashes.is_empty() {
        let trials = crashes.first().map_or(0, |(_, t)| t.len());
        out.push_str(&format!(
            "\nCrashed holder: a holder takes the lock for {crash_ttl:?} and never releases it; \
             {WAITERS} waiters, {trials} trial(s); the replacement delay runs from the holder's key \
             expiry to the first waiter's acquire returned (ms):\n\n\
             | variant | replacement delay, median | replacement delay, max | attempts meanwhile, median | errors |\n\
             |---|--:|--:|--:|---|\n"
        ));
        for (variant, trials) in crashes {
            out.push_str(&format!(
                "| {} |\n",
                crash_line(*variant, trials).join(" | ")
            ));
        }
    }
    out
}
