//! The run as one markdown table (`--markdown`), the table of
//! `benches/README.md`: a row per number of callers, a column per variant,
//! and a line for the floors and the ratios at 64 callers.

use super::Row;
use super::markdown::{command, thousands};

/// The lock variants, in the table's order, with their column headings.
const COLUMNS: [(&str, &str); 5] = [
    ("redlock-mio async, shared", "this crate, async, one client"),
    ("redlock-mio, shared", "this crate, threads, one client"),
    ("redlock-mio, client per thread", "a client per thread"),
    ("rslock 0.10, shared", "`rslock` 0.10, one `LockManager`"),
    ("redis-rs multiplexed", "redis-rs multiplexed"),
];

/// The table of `medians` (the rows of the only pass when `repeat` is 1),
/// under the command line that produced it.
pub(crate) fn markdown(medians: &[Row], repeat: usize, counts: &[usize]) -> String {
    let find = |name: &str, callers: usize| {
        medians
            .iter()
            .find(|r| r.name == name && r.callers == callers)
    };
    let mut out = format!(
        "{}, {}, cycles/s (cycle p99 in µs):\n\n| callers |",
        command("throughput"),
        if repeat > 1 {
            format!("medians of {repeat} passes")
        } else {
            "one pass".to_owned()
        }
    );
    for (_, heading) in COLUMNS {
        out.push_str(&format!(" {heading} |"));
    }
    out.push_str("\n|--:|");
    out.push_str(&"--:|".repeat(COLUMNS.len()));
    out.push('\n');
    for &callers in counts {
        out.push_str(&format!("| {callers} |"));
        for (name, _) in COLUMNS {
            let cell = find(name, callers).map_or("–".to_owned(), |r| {
                format!(
                    "{} ({})",
                    thousands(r.rate),
                    thousands(r.p99 as f64 / 1000.0)
                )
            });
            out.push_str(&format!(" {cell} |"));
        }
        out.push('\n');
    }
    let floor = |k: usize| find(&format!("floor, {k} in flight per connection"), 1);
    let floors: Vec<String> = [1, 16, 64]
        .into_iter()
        .filter_map(|k| Some(format!("{} at K = {k}", thousands(floor(k)?.rate))))
        .collect();
    if !floors.is_empty() {
        out.push_str(&format!(
            "\nThe floor in the same run, cycles/s: {}.",
            floors.join(", ")
        ));
    }
    let failed: u64 = medians.iter().map(|r| r.failed).sum();
    out.push_str(&format!(" Failed attempts, all cells: {failed}.\n"));
    if let Some(callers) = counts.iter().copied().filter(|&c| c <= 64).max() {
        let rate = |name: &str| find(name, callers).map(|r| r.rate);
        let mut ratios = Vec::new();
        for (name, heading) in &COLUMNS[..2] {
            if let (Some(mine), Some(fl), Some(rslock)) = (
                rate(name),
                floor(64).map(|r| r.rate),
                rate("rslock 0.10, shared"),
            ) {
                ratios.push(format!(
                    "{heading} {:.2}× the K = 64 floor and {:.1}× `rslock`",
                    mine / fl,
                    mine / rslock
                ));
            }
        }
        if !ratios.is_empty() {
            out.push_str(&format!("At {callers} callers: {}.\n", ratios.join("; ")));
        }
    }
    out
}
