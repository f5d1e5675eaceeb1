//! Tables, JSON and the SVG plot.

use super::*;

// ---------------------------------------------------------------------------
// Reporting
// ---------------------------------------------------------------------------

pub(crate) fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

pub(crate) fn fmt_us(ns: u64) -> String {
    let v = us(ns);
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

pub(crate) fn pct(h: &Histogram<u64>, p: f64) -> u64 {
    h.value_at_quantile(p / 100.0)
}

pub(crate) fn ratio(a: u64, b: u64) -> String {
    if b == 0 {
        "-".to_owned()
    } else {
        format!("{:.2}", a as f64 / b as f64)
    }
}

pub(crate) type Pick = fn(&Stats) -> &Histogram<u64>;

pub(crate) const PARTS: [(&str, Pick); 3] = [
    ("acquire", |s| &s.acquire),
    ("release", |s| &s.release),
    ("cycle", |s| &s.cycle),
];

pub(crate) fn latency_table(out: &mut String, title: &str, kinds: &[Kind], stats: &[Stats]) {
    let floor = kinds.iter().position(|&k| k == Kind::Floor);
    let floor_q = kinds.iter().position(|&k| k == Kind::FloorQuorum);
    let mine = kinds.iter().position(|&k| k == Kind::Mine);
    let _ = writeln!(
        out,
        "\n## {title}\n(µs; ×fl = ratio to floor (all), ×fq to floor (quorum), ×me to redlock-mio, at p50 and p99)"
    );
    for (part, pick) in PARTS {
        let _ = writeln!(
            out,
            "\n{part:<8} {:<15} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8}  {:>6} {:>6}  {:>6} {:>6}  {:>6} {:>6}",
            "variant",
            "n",
            "p50",
            "p90",
            "p99",
            "p99.9",
            "max",
            "×fl50",
            "×fl99",
            "×fq50",
            "×fq99",
            "×me50",
            "×me99"
        );
        for (k, s) in kinds.iter().zip(stats) {
            let h = pick(s);
            if h.is_empty() {
                let _ = writeln!(out, "{:<8} {:<15} {:>6}  no samples", "", k.name(), 0);
                continue;
            }
            let rel = |r: Option<usize>, p: f64| {
                r.map_or("-".to_owned(), |r| {
                    ratio(pct(h, p), pct(pick(&stats[r]), p))
                })
            };
            let _ = writeln!(
                out,
                "{:<8} {:<15} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8}  {:>6} {:>6}  {:>6} {:>6}  {:>6} {:>6}",
                "",
                k.name(),
                h.len(),
                fmt_us(pct(h, 50.0)),
                fmt_us(pct(h, 90.0)),
                fmt_us(pct(h, 99.0)),
                fmt_us(pct(h, 99.9)),
                fmt_us(h.max()),
                rel(floor, 50.0),
                rel(floor, 99.0),
                rel(floor_q, 50.0),
                rel(floor_q, 99.0),
                rel(mine, 50.0),
                rel(mine, 99.0),
            );
        }
    }
}

pub(crate) fn json_hist(h: &Histogram<u64>) -> String {
    if h.is_empty() {
        return "null".to_owned();
    }
    let mut s = format!("{{\"count\": {}", h.len());
    for p in PCTS {
        let _ = write!(s, ", \"p{p}\": {:.3}", us(pct(h, p)));
    }
    let _ = write!(
        s,
        ", \"max\": {:.3}, \"mean\": {:.3}}}",
        us(h.max()),
        h.mean() / 1000.0
    );
    s
}

pub(crate) fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

pub(crate) fn json_stats(kinds: &[Kind], stats: &[Stats]) -> String {
    let rows: Vec<String> = kinds
        .iter()
        .zip(stats)
        .map(|(k, s)| {
            format!(
                "    {{\"variant\": {}, \"id\": \"{}\", \"cycles\": {}, \"failures\": {}, \
                 \"allocations_per_cycle\": {:.2}, \"note\": {}, \"acquire_us\": {}, \
                 \"release_us\": {}, \"cycle_us\": {}}}",
                json_str(k.name()),
                k.id(),
                s.count(),
                s.failures,
                s.allocs_per_cycle(),
                json_str(&s.note),
                json_hist(&s.acquire),
                json_hist(&s.release),
                json_hist(&s.cycle),
            )
        })
        .collect();
    format!("[\n{}\n  ]", rows.join(",\n"))
}

/// One panel of percentile curves: x = percentile on a log scale of
/// 1 / (1 - p), y = µs on a log scale.
pub(crate) fn svg_panel(
    out: &mut String,
    x0: f64,
    title: &str,
    curves: &[(Kind, &Histogram<u64>)],
) {
    let (w, h, left, top, right, bottom) = (520.0, 380.0, 60.0, 40.0, 20.0, 50.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let points: Vec<(Kind, Vec<f64>)> = curves
        .iter()
        .filter(|(_, hist)| !hist.is_empty())
        .map(|(k, hist)| (*k, PLOT_PCTS.iter().map(|&p| us(pct(hist, p))).collect()))
        .collect();
    let _ = writeln!(
        out,
        r##"<text x="{:.1}" y="22" font-size="14" text-anchor="middle" font-weight="bold">{title}</text>"##,
        x0 + left + pw / 2.0
    );
    if points.is_empty() {
        let _ = writeln!(
            out,
            r##"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">no samples</text>"##,
            x0 + left + pw / 2.0,
            top + ph / 2.0
        );
        return;
    }
    let all = points.iter().flat_map(|(_, v)| v.iter().copied());
    let lo = all.clone().fold(f64::INFINITY, f64::min).max(0.1);
    let hi = all.fold(0.0f64, f64::max).max(lo * 10.0);
    // Decades of µs: 0.1 µs to 1000 s at most.
    let ylo = lo.log10().floor().clamp(-1.0, 8.0);
    let yhi = hi.log10().ceil().clamp(ylo + 1.0, 9.0);
    let xof = |p: f64| (1.0 / (1.0 - p / 100.0)).log10();
    let (xlo, xhi) = (xof(PLOT_PCTS[0]), xof(PLOT_PCTS[PLOT_PCTS.len() - 1]));
    let px = |p: f64| x0 + left + (xof(p) - xlo) / (xhi - xlo) * pw;
    let py = |v: f64| top + ph - (v.log10().max(ylo) - ylo) / (yhi - ylo) * ph;
    let _ = writeln!(
        out,
        r##"<rect x="{:.1}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>"##,
        x0 + left
    );
    for p in [50.0, 90.0, 99.0, 99.9, 99.99] {
        let x = px(p);
        let _ = writeln!(
            out,
            r##"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{:.1}" stroke="#ddd"/><text x="{x:.1}" y="{:.1}" font-size="11" text-anchor="middle">p{p}</text>"##,
            top + ph,
            top + ph + 16.0
        );
    }
    for e in (ylo as i32)..=(yhi as i32) {
        for m in [1.0, 2.0, 5.0] {
            let v = m * 10f64.powi(e);
            if v.log10() > yhi + 1e-9 {
                continue;
            }
            let y = py(v);
            let label = if v >= 1000.0 {
                format!("{} ms", v / 1000.0)
            } else {
                format!("{v} µs")
            };
            let _ = writeln!(
                out,
                r##"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#eee"/><text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end">{label}</text>"##,
                x0 + left,
                x0 + left + pw,
                x0 + left - 4.0,
                y + 3.0
            );
        }
    }
    let _ = writeln!(
        out,
        r##"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">percentile</text>"##,
        x0 + left + pw / 2.0,
        h - 8.0
    );
    for (kind, values) in &points {
        let path: Vec<String> = PLOT_PCTS
            .iter()
            .zip(values)
            .map(|(&p, &v)| format!("{:.1},{:.1}", px(p), py(v)))
            .collect();
        let _ = writeln!(
            out,
            r##"<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>"##,
            kind.color(),
            path.join(" ")
        );
    }
}

/// The legend, one row under the panels.
pub(crate) fn svg_legend(out: &mut String, y: f64, kinds: &[Kind]) {
    for (n, kind) in kinds.iter().enumerate() {
        let x = 30.0 + n as f64 * 143.0;
        let _ = writeln!(
            out,
            r##"<line x1="{x:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{}" stroke-width="3"/><text x="{:.1}" y="{y:.1}" font-size="12">{}</text>"##,
            y - 4.0,
            x + 20.0,
            y - 4.0,
            kind.color(),
            x + 25.0,
            kind.name()
        );
    }
}

pub(crate) fn svg(
    closed: &[(Kind, &Histogram<u64>)],
    paced: &[(Kind, &Histogram<u64>)],
    rate: u64,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="1040" height="410" viewBox="0 0 1040 410" font-family="sans-serif"><rect width="1040" height="410" fill="white"/>"##
    );
    svg_panel(&mut out, 0.0, "closed loop: acquire + release", closed);
    svg_panel(
        &mut out,
        520.0,
        &format!("paced {rate}/s: cycle from intended start"),
        paced,
    );
    let kinds: Vec<Kind> = closed.iter().map(|(k, _)| *k).collect();
    svg_legend(&mut out, 398.0, &kinds);
    out.push_str("</svg>\n");
    out
}

pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".to_owned())
}

pub(crate) fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        // The workspace's target directory, beside this crate's directory.
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"))
        .join("latency")
}
