//! The SVG plot of cycles/s against callers.

/// A line chart of cycles/s against callers (log scale), one line per
/// variant, the floors as dashed horizontal lines.
pub(crate) fn svg(at: &[(&str, usize, f64)], floors: &[(usize, f64)]) -> String {
    use std::fmt::Write as _;
    let (w, h, left, right, top, bottom) = (760.0, 420.0, 70.0, 230.0, 30.0, 50.0);
    let mut names: Vec<&str> = Vec::new();
    for (name, _, _) in at {
        if !names.contains(name) {
            names.push(name);
        }
    }
    let callers: Vec<usize> = {
        let mut c: Vec<usize> = at.iter().map(|(_, c, _)| *c).collect();
        c.sort_unstable();
        c.dedup();
        c
    };
    let top_rate = at
        .iter()
        .map(|(_, _, r)| *r)
        .chain(floors.iter().map(|(_, r)| *r))
        .fold(1.0, f64::max)
        * 1.05;
    let (lo, hi) = (
        (*callers.first().unwrap_or(&1) as f64).ln(),
        (*callers.last().unwrap_or(&1) as f64).ln().max(1.0),
    );
    let x = |c: usize| left + (w - left - right) * ((c as f64).ln() - lo) / (hi - lo).max(1e-9);
    let y = |r: f64| top + (h - top - bottom) * (1.0 - r / top_rate);
    let colors = [
        "#d62728", "#ff7f0e", "#1f77b4", "#9467bd", "#2ca02c", "#8c564b",
    ];
    let mut out = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' font-family='sans-serif' font-size='12'>\n\
         <rect width='100%' height='100%' fill='white'/>\n\
         <text x='{left}' y='18'>acquire + release cycles/s against concurrent callers, 5 local masters</text>\n"
    );
    for &c in &callers {
        let _ = writeln!(
            out,
            "<text x='{:.1}' y='{:.1}' text-anchor='middle'>{c}</text>",
            x(c),
            h - bottom + 18.0
        );
    }
    for k in 0..=4 {
        let r = top_rate * f64::from(k) / 4.0;
        let _ = writeln!(
            out,
            "<line x1='{left}' x2='{:.1}' y1='{:.1}' y2='{:.1}' stroke='#eee'/><text x='{:.1}' y='{:.1}' text-anchor='end'>{:.0}</text>",
            w - right,
            y(r),
            y(r),
            left - 6.0,
            y(r) + 4.0,
            r
        );
    }
    let _ = writeln!(
        out,
        "<text x='{:.1}' y='{:.1}' text-anchor='middle'>callers (threads or tasks)</text>",
        (left + w - right) / 2.0,
        h - 12.0
    );
    let mut legend = top + 10.0;
    for (k, r) in floors {
        let _ = writeln!(
            out,
            "<line x1='{left}' x2='{:.1}' y1='{:.1}' y2='{:.1}' stroke='#7f7f7f' stroke-dasharray='4 4'/>\
             <text x='{:.1}' y='{:.1}' fill='#7f7f7f'>floor, {k} in flight</text>",
            w - right,
            y(*r),
            y(*r),
            w - right + 8.0,
            y(*r) + 4.0
        );
    }
    for (i, name) in names.iter().enumerate() {
        let color = colors[i % colors.len()];
        let points: Vec<String> = at
            .iter()
            .filter(|(n, _, _)| n == name)
            .map(|(_, c, r)| format!("{:.1},{:.1}", x(*c), y(*r)))
            .collect();
        let _ = writeln!(
            out,
            "<polyline fill='none' stroke='{color}' stroke-width='2' points='{}'/>",
            points.join(" ")
        );
        legend += 16.0;
        let _ = writeln!(
            out,
            "<rect x='{:.1}' y='{:.1}' width='12' height='3' fill='{color}'/><text x='{:.1}' y='{:.1}'>{name}</text>",
            w - right + 8.0,
            h - bottom - 110.0 + legend - 6.0,
            w - right + 24.0,
            h - bottom - 110.0 + legend
        );
    }
    out.push_str("</svg>\n");
    out
}
