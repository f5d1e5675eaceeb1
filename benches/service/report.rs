//! What a cell measured: the text, the markdown table and the plot.

use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;
use redlock_mio::Stats;

use super::args::{Args, Cell};
use super::markdown::{command, thousands};
use super::masters::{Held, Leftovers};
use super::mix::{self, Hists, Op};

/// One second of a cell's measured window.
pub(crate) struct Sample {
    /// Since the window began.
    pub(crate) at: Duration,
    /// Cycles done since the window began.
    pub(crate) cycles: u64,
    pub(crate) rss: u64,
    pub(crate) heap: u64,
    pub(crate) held: Held,
}

/// Everything one cell measured.
pub(crate) struct Measured {
    pub(crate) cell: Cell,
    pub(crate) callers: usize,
    pub(crate) window: Duration,
    /// Cycles done in the window, counted per caller.
    pub(crate) cycles: u64,
    /// Cycles done in the window, counted by the client's callers together
    /// (the same but for calls that straddle its ends).
    pub(crate) window_cycles: u64,
    /// Refused calls per kind (`Op` order): a `try_lock` that found the lock
    /// held, a wait that ran out, a several-resource lock refused.
    pub(crate) refused: Vec<u64>,
    pub(crate) failed: u64,
    pub(crate) first_error: Option<String>,
    pub(crate) hists: Hists,
    /// Allocations of the whole client (every thread but the sampler's)
    /// in the window.
    pub(crate) allocations: u64,
    pub(crate) uncontended_allocs: f64,
    pub(crate) uncontended_cycles: u64,
    /// Cycles/s of the uncontended load.
    pub(crate) uncontended_rate: f64,
    /// After warm-up, at the end.
    pub(crate) rss: (u64, u64),
    pub(crate) heap: (u64, u64),
    pub(crate) before: Held,
    pub(crate) held_max: Held,
    pub(crate) held_after: Held,
    /// What the masters held once the callers had stopped.
    pub(crate) at_stop: Leftovers,
    /// How long after the callers stopped no lock key nor queue was left.
    pub(crate) left_after: Option<Duration>,
    pub(crate) leftover_keys: u64,
    pub(crate) leftover_queues: u64,
    pub(crate) per_caller: Vec<u64>,
    /// The client's counters after warm-up and at the end.
    pub(crate) client: (Stats, Stats),
    pub(crate) samples: Vec<Sample>,
}

impl Measured {
    pub(crate) fn rate(&self) -> f64 {
        self.cycles as f64 / self.window.as_secs_f64().max(1e-9)
    }

    fn label(&self) -> String {
        match self.cell {
            Cell::Tasks => format!("{} tasks", thousands(self.callers as f64)),
            Cell::Threads => format!("{} threads", thousands(self.callers as f64)),
        }
    }

    fn acquire_all(&self) -> Histogram<u64> {
        let mut all = mix::histogram();
        for h in &self.hists.acquire {
            let _ = all.add(h);
        }
        all
    }

    fn per_cycle(&self, n: u64) -> f64 {
        n as f64 / self.window_cycles.max(1) as f64
    }
}

fn ms(ns: u64) -> String {
    let v = ns as f64 / 1e6;
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn mb(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1024.0 * 1024.0))
}

fn pcts(h: &Histogram<u64>, ps: &[f64]) -> String {
    if h.is_empty() {
        return "–".to_owned();
    }
    ps.iter()
        .map(|&p| ms(h.value_at_quantile(p / 100.0)))
        .collect::<Vec<_>>()
        .join(" / ")
}

/// The best floor: cycles/s and its depth.
fn best(floors: &[(usize, f64)]) -> (usize, f64) {
    floors
        .iter()
        .copied()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or((0, 0.0))
}

fn median(values: &[u64]) -> u64 {
    let mut v = values.to_vec();
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// The counters of the client over the window, per cycle.
fn client_line(m: &Measured) -> String {
    let (a, b) = (&m.client.0, &m.client.1);
    let e = (&a.engine, &b.engine);
    format!(
        "per cycle: {:.2} acquire attempts ({:.2} contended), {:.2} extends, {:.2} releases; \
         engine: {:.2} writes, {:.2} reads, {:.2} polls ({:.2} idle), {:.2} wakes, {:.1} slots scanned",
        m.per_cycle(b.attempts - a.attempts),
        m.per_cycle(b.contended - a.contended),
        m.per_cycle(b.extends - a.extends),
        m.per_cycle(b.releases - a.releases),
        m.per_cycle(e.1.writes - e.0.writes),
        m.per_cycle(e.1.reads - e.0.reads),
        m.per_cycle(e.1.polls - e.0.polls),
        m.per_cycle(e.1.idle_polls - e.0.idle_polls),
        m.per_cycle(e.1.wakes - e.0.wakes),
        m.per_cycle(e.1.scanned - e.0.scanned),
    )
}

fn emptied(m: &Measured) -> String {
    let at_stop = format!(
        "when the callers stopped, {} keys held, {} reserved for a waiter, {} queues",
        m.at_stop.held, m.at_stop.reserved, m.at_stop.queues
    );
    match m.left_after {
        Some(t) => format!("{at_stop}; none left {} ms later", t.as_millis()),
        None => format!(
            "{at_stop}; {} lock keys and {} queues still there 10 s later",
            m.leftover_keys, m.leftover_queues
        ),
    }
}

/// The text report of one cell, on stdout.
pub(crate) fn print(m: &Measured, floors: &[(usize, f64)]) {
    let (k, floor) = best(floors);
    let secs = m.window.as_secs_f64().max(1e-9);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n## {}, one client: {:.0} s measured",
        m.label(),
        secs
    );
    let _ = writeln!(
        out,
        "cycles/s {} ({:.2} × the pipelined floor, {} cycles/s at {k} in flight per connection); \
         refused per second: try_lock {}, waits run out {}, several resources {}; failed calls {}{}",
        thousands(m.rate()),
        m.rate() / floor.max(1e-9),
        thousands(floor),
        thousands(m.refused[Op::Try as usize] as f64 / secs),
        thousands(m.refused[Op::Wait as usize] as f64 / secs),
        thousands(m.refused[Op::Multi as usize] as f64 / secs),
        m.failed,
        m.first_error
            .as_ref()
            .map_or(String::new(), |e| format!(" (the first: {e})"))
    );
    let ps = [50.0, 99.0, 99.9];
    let _ = writeln!(
        out,
        "acquire p50 / p99 / p99.9 (ms): all {}; try_lock {}; lock with a wait {}; several {}; \
         extend {}; unlock {}",
        pcts(&m.acquire_all(), &ps),
        pcts(&m.hists.acquire[Op::Try as usize], &ps),
        pcts(&m.hists.acquire[Op::Wait as usize], &ps),
        pcts(&m.hists.acquire[Op::Multi as usize], &ps),
        pcts(&m.hists.extend, &ps),
        pcts(&m.hists.release, &ps)
    );
    let _ = writeln!(
        out,
        "uncontended (each caller on a resource of its own, try_lock + unlock): {} cycles/s, \
         {:.2} × the floor",
        thousands(m.uncontended_rate),
        m.uncontended_rate / floor.max(1e-9)
    );
    let _ = writeln!(
        out,
        "allocations per cycle: {:.3} under the mixed load (every thread of the client), \
         {:.3} uncontended ({} cycles)",
        m.per_cycle(m.allocations),
        m.uncontended_allocs,
        thousands(m.uncontended_cycles as f64)
    );
    let _ = writeln!(
        out,
        "client process: RSS {} → {} MB, heap {} → {} MB (after warm-up → end)",
        mb(m.rss.0),
        mb(m.rss.1),
        mb(m.heap.0),
        mb(m.heap.1)
    );
    let _ = writeln!(
        out,
        "masters, the sum of {}: used_memory {} MB before, {} MB at most during, {} MB after; \
         DBSIZE {} before, {} at the median and {} at most during, {} after; lock keys and queues: {}",
        super::MASTERS,
        mb(m.before.used_memory),
        mb(m.held_max.used_memory),
        mb(m.held_after.used_memory),
        m.before.keys,
        median(&m.samples.iter().map(|s| s.held.keys).collect::<Vec<_>>()),
        m.held_max.keys,
        m.held_after.keys,
        emptied(m)
    );
    let _ = writeln!(
        out,
        "fairness: Jain {:.3} over {} callers; cycles per caller min {} / median {} / max {}",
        mix::jain(&m.per_caller),
        m.per_caller.len(),
        m.per_caller.iter().min().copied().unwrap_or(0),
        median(&m.per_caller),
        m.per_caller.iter().max().copied().unwrap_or(0)
    );
    let _ = writeln!(out, "{}", client_line(m));
    print!("{out}");
}

/// The table of `benches/README.md`.
pub(crate) fn markdown(
    args: &Args,
    cells: &[Measured],
    floors: &[(usize, f64)],
    load_start: &str,
    load_end: &str,
) -> String {
    let (k, floor) = best(floors);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} ({} s measured per cell after {} s of warm-up; {} resources, Zipf s = {}; \
         acquire in ms; × floor: cycles/s over the pipelined floor's; memory in MB; \
         load average {load_start} at the start, {load_end} at the end):\n",
        command("service"),
        args.secs.as_secs_f64(),
        args.warm_up.as_secs_f64(),
        thousands(args.resources as f64),
        args.zipf
    );
    out.push_str(
        "| callers | cycles/s, mixed / uncontended | × floor, mixed / uncontended | acquire p50 / p99 / p99.9 \
         | allocations per cycle, mixed / uncontended \
         | client RSS, after warm-up → end | client heap, after warm-up → end | masters' used_memory, before / most / after \
         | masters' DBSIZE, most → after | Jain |\n\
         |---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n",
    );
    for m in cells {
        let _ = writeln!(
            out,
            "| {} | {} / {} | {:.2} / {:.2} | {} | {:.3} / {:.3} | {} → {} | {} → {} | {} / {} / {} | {} → {} | {:.3} |",
            m.label(),
            thousands(m.rate()),
            thousands(m.uncontended_rate),
            m.rate() / floor.max(1e-9),
            m.uncontended_rate / floor.max(1e-9),
            pcts(&m.acquire_all(), &[50.0, 99.0, 99.9]),
            m.per_cycle(m.allocations),
            m.uncontended_allocs,
            mb(m.rss.0),
            mb(m.rss.1),
            mb(m.heap.0),
            mb(m.heap.1),
            mb(m.before.used_memory),
            mb(m.held_max.used_memory),
            mb(m.held_after.used_memory),
            thousands(m.held_max.keys as f64),
            thousands(m.held_after.keys as f64),
            mix::jain(&m.per_caller)
        );
    }
    let _ = writeln!(
        out,
        "\nThe pipelined floor in the same run: {}.",
        floors
            .iter()
            .map(|(k, r)| format!("{} cycles/s at {k} in flight", thousands(*r)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = write!(out, "\nThe best, {k} in flight, is the × floor column's. ");
    for m in cells {
        let secs = m.window.as_secs_f64().max(1e-9);
        let _ = write!(
            out,
            "{}: refused per second, try_lock {}, waits run out {}, several resources {}; \
             failed calls {}; lock keys and queues {}; {}. ",
            m.label(),
            thousands(m.refused[Op::Try as usize] as f64 / secs),
            thousands(m.refused[Op::Wait as usize] as f64 / secs),
            thousands(m.refused[Op::Multi as usize] as f64 / secs),
            m.failed,
            emptied(m),
            client_line(m)
        );
    }
    out.push('\n');
    out
}

const COLORS: [&str; 4] = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd"];

/// Two panels against time: cycles/s per second (the floor dashed), and
/// the client's RSS (solid) and heap (dashed).
pub(crate) fn svg(cells: &[Measured], floors: &[(usize, f64)]) -> String {
    let (w, h) = (1040.0, 430.0);
    let mut out = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif"><rect width="{w}" height="{h}" fill="white"/>"##
    );
    out.push('\n');
    let rates: Vec<Vec<(f64, f64)>> = cells
        .iter()
        .map(|m| {
            let mut last = (0.0, 0);
            m.samples
                .iter()
                .map(|s| {
                    let t = s.at.as_secs_f64();
                    let r = (s.cycles - last.1) as f64 / (t - last.0).max(1e-9);
                    last = (t, s.cycles);
                    (t, r)
                })
                .collect()
        })
        .collect();
    let (_, floor) = best(floors);
    let levels: Vec<(f64, usize)> = cells
        .iter()
        .enumerate()
        .map(|(i, m)| (m.uncontended_rate, i))
        .collect();
    panel(
        &mut out,
        0.0,
        "cycles/s, each second (dotted: uncontended)",
        &rates.iter().map(|r| (r.clone(), false)).collect::<Vec<_>>(),
        Some(floor),
        &levels,
        "cycles/s",
    );
    let mut memory = Vec::new();
    for m in cells {
        let to_mb = |b: u64| b as f64 / (1024.0 * 1024.0);
        memory.push((
            m.samples
                .iter()
                .map(|s| (s.at.as_secs_f64(), to_mb(s.rss)))
                .collect(),
            false,
        ));
        memory.push((
            m.samples
                .iter()
                .map(|s| (s.at.as_secs_f64(), to_mb(s.heap)))
                .collect(),
            true,
        ));
    }
    panel(
        &mut out,
        520.0,
        "client process: RSS (solid), heap (dashed)",
        &memory,
        None,
        &[],
        "MB",
    );
    for (i, m) in cells.iter().enumerate() {
        let x = 60.0 + i as f64 * 200.0;
        let _ = writeln!(
            out,
            r##"<line x1="{x:.1}" y1="414" x2="{:.1}" y2="414" stroke="{}" stroke-width="3"/><text x="{:.1}" y="418" font-size="12">{}</text>"##,
            x + 20.0,
            COLORS[i % COLORS.len()],
            x + 25.0,
            m.label()
        );
    }
    if floor > 0.0 {
        let x = 60.0 + cells.len() as f64 * 200.0;
        let _ = writeln!(
            out,
            r##"<line x1="{x:.1}" y1="414" x2="{:.1}" y2="414" stroke="#7f7f7f" stroke-width="2" stroke-dasharray="4 4"/><text x="{:.1}" y="418" font-size="12">the pipelined floor</text>"##,
            x + 20.0,
            x + 25.0
        );
    }
    out.push_str("</svg>\n");
    out
}

/// One panel: lines of (seconds, value), two per cell when `dashed`
/// alternates (cell `i / 2`), else one per cell; from zero up.
fn panel(
    out: &mut String,
    x0: f64,
    title: &str,
    lines: &[(Vec<(f64, f64)>, bool)],
    floor: Option<f64>,
    levels: &[(f64, usize)],
    unit: &str,
) {
    let (w, h, left, top, right, bottom) = (520.0, 390.0, 70.0, 40.0, 20.0, 50.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let _ = writeln!(
        out,
        r##"<text x="{:.1}" y="22" font-size="14" text-anchor="middle" font-weight="bold">{title}</text>"##,
        x0 + left + pw / 2.0
    );
    let tmax = lines
        .iter()
        .flat_map(|(l, _)| l.iter().map(|p| p.0))
        .fold(1.0f64, f64::max);
    let vmax = lines
        .iter()
        .flat_map(|(l, _)| l.iter().map(|p| p.1))
        .chain(floor)
        .chain(levels.iter().map(|l| l.0))
        .fold(1.0f64, f64::max)
        * 1.1;
    // A round step for the grid: 1, 2 or 5 times a power of ten.
    let raw = vmax / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(raw);
    let px = |t: f64| x0 + left + t / tmax * pw;
    let py = |v: f64| top + ph - v / vmax * ph;
    let _ = writeln!(
        out,
        r##"<rect x="{:.1}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>"##,
        x0 + left
    );
    let mut v = 0.0;
    while v <= vmax {
        let y = py(v);
        let _ = writeln!(
            out,
            r##"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#eee"/><text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end">{} {unit}</text>"##,
            x0 + left,
            x0 + left + pw,
            x0 + left - 4.0,
            y + 3.0,
            if v >= 1000.0 {
                thousands(v)
            } else {
                format!("{v}")
            }
        );
        v += step;
    }
    let tstep = if tmax > 20.0 { 10.0 } else { 1.0 };
    let mut t = 0.0;
    while t <= tmax + 1e-9 {
        let x = px(t);
        let _ = writeln!(
            out,
            r##"<text x="{x:.1}" y="{:.1}" font-size="10" text-anchor="middle">{t}</text>"##,
            top + ph + 14.0
        );
        t += tstep;
    }
    let _ = writeln!(
        out,
        r##"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">seconds into the measured window</text>"##,
        x0 + left + pw / 2.0,
        h - 12.0
    );
    if let Some(f) = floor.filter(|f| *f > 0.0) {
        let y = py(f);
        let _ = writeln!(
            out,
            r##"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#7f7f7f" stroke-width="2" stroke-dasharray="4 4"/>"##,
            x0 + left,
            x0 + left + pw
        );
    }
    for &(level, cell) in levels {
        let y = py(level);
        let _ = writeln!(
            out,
            r##"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{}" stroke-width="2" stroke-dasharray="2 3"/>"##,
            x0 + left,
            x0 + left + pw,
            COLORS[cell % COLORS.len()]
        );
    }
    let paired = lines.iter().any(|(_, dashed)| *dashed);
    for (i, (line, dashed)) in lines.iter().enumerate() {
        let cell = if paired { i / 2 } else { i };
        let points: Vec<String> = line
            .iter()
            .map(|&(t, v)| format!("{:.1},{:.1}", px(t), py(v)))
            .collect();
        let _ = writeln!(
            out,
            r##"<polyline fill="none" stroke="{}" stroke-width="2"{} points="{}"/>"##,
            COLORS[cell % COLORS.len()],
            if *dashed {
                r##" stroke-dasharray="6 4""##
            } else {
                ""
            },
            points.join(" ")
        );
    }
}
