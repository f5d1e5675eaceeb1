//! The SVG plot: acquisitions/s and wait p99 against callers, a line per
//! variant (a client per caller), a dot per shared-client cell, the
//! capacities and the fair-queue wait dashed.

use std::fmt::Write as _;

use super::args::Cell;
use super::report::{Results, Row};
use super::variants::Variant;

/// One line or set of dots of a panel.
struct Series {
    label: String,
    color: &'static str,
    points: Vec<(f64, f64)>,
    /// Dashed line (a reference), or dots (no line).
    style: Style,
}

#[derive(Clone, Copy, PartialEq)]
enum Style {
    Line,
    Dashed,
    Dots,
}

/// A panel at `(left, top)` of `w × h`: log-x callers, `y` linear or log.
struct Panel {
    left: f64,
    top: f64,
    w: f64,
    h: f64,
    title: &'static str,
    log_y: bool,
}

impl Panel {
    fn draw(&self, out: &mut String, series: &[Series]) {
        let points = || series.iter().flat_map(|s| s.points.iter().copied());
        let (x_lo, x_hi) = points().fold((f64::MAX, 1.0f64), |(lo, hi), (x, _)| {
            (lo.min(x), hi.max(x))
        });
        let y_hi = points().map(|(_, y)| y).fold(1e-9, f64::max) * 1.1;
        let y_lo = points()
            .map(|(_, y)| y)
            .fold(y_hi, f64::min)
            .max(y_hi * 1e-6)
            / 1.5;
        let (x_lo, x_hi) = (x_lo.min(x_hi).ln(), x_hi.ln().max(x_lo.ln() + 1.0));
        let x = |v: f64| self.left + self.w * (v.ln() - x_lo) / (x_hi - x_lo);
        let y = |v: f64| {
            let f = if self.log_y {
                (v.max(y_lo).ln() - y_lo.ln()) / (y_hi.ln() - y_lo.ln())
            } else {
                v / y_hi
            };
            self.top + self.h * (1.0 - f)
        };
        let _ = writeln!(
            out,
            "<text x='{}' y='{}'>{}</text>",
            self.left,
            self.top - 10.0,
            self.title
        );
        let ticks: Vec<f64> = if self.log_y {
            let (lo, hi) = (y_lo.log10().floor() as i32, y_hi.log10().ceil() as i32);
            (lo..=hi)
                .map(|e| 10f64.powi(e))
                .filter(|&t| t >= y_lo && t <= y_hi)
                .collect()
        } else {
            (0..=4).map(|k| y_hi * f64::from(k) / 4.0).collect()
        };
        for t in ticks {
            let _ = writeln!(
                out,
                "<line x1='{}' x2='{:.1}' y1='{:.1}' y2='{:.1}' stroke='#eee'/><text x='{:.1}' y='{:.1}' text-anchor='end'>{}</text>",
                self.left,
                self.left + self.w,
                y(t),
                y(t),
                self.left - 6.0,
                y(t) + 4.0,
                tick(t)
            );
        }
        let mut xs: Vec<f64> = points().map(|(x, _)| x).collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        for c in xs {
            let _ = writeln!(
                out,
                "<text x='{:.1}' y='{:.1}' text-anchor='middle'>{c}</text>",
                x(c),
                self.top + self.h + 18.0
            );
        }
        let _ = writeln!(
            out,
            "<text x='{:.1}' y='{:.1}' text-anchor='middle'>callers</text>",
            self.left + self.w / 2.0,
            self.top + self.h + 36.0
        );
        for s in series {
            let coords: Vec<String> = s
                .points
                .iter()
                .map(|&(px, py)| format!("{:.1},{:.1}", x(px), y(py)))
                .collect();
            match s.style {
                Style::Dots => {
                    for &(px, py) in &s.points {
                        let _ = writeln!(
                            out,
                            "<circle cx='{:.1}' cy='{:.1}' r='5' fill='none' stroke='{}' stroke-width='2'/>",
                            x(px),
                            y(py),
                            s.color
                        );
                    }
                }
                Style::Line | Style::Dashed => {
                    let dash = if s.style == Style::Dashed {
                        " stroke-dasharray='4 4'"
                    } else {
                        ""
                    };
                    let _ = writeln!(
                        out,
                        "<polyline fill='none' stroke='{}' stroke-width='2'{dash} points='{}'/>",
                        s.color,
                        coords.join(" ")
                    );
                }
            }
        }
    }
}

/// A tick's label: 3, 30, 300, 0.3, 3,000.
fn tick(v: f64) -> String {
    if v >= 1.0 {
        super::markdown::thousands(v)
    } else {
        format!("{v}")
    }
}

/// The whole plot of `rows`.
pub(crate) fn svg(results: &Results, variants: &[Variant]) -> String {
    let (rows, capacity) = (&results.rows, &results.capacities);
    let (w, h) = (1040.0, 440.0);
    let mut out = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' font-family='sans-serif' font-size='12'>\n\
         <rect width='100%' height='100%' fill='white'/>\n\
         <text x='60' y='18'>one resource, 5 local masters: hold 200 µs, think 2 ms; lines: a client per caller; circles: one client shared by tasks</text>\n"
    );
    let of = |v: Variant, shared: bool, f: &dyn Fn(&Row) -> f64| -> Vec<(f64, f64)> {
        rows.iter()
            .filter(|r| r.variant == v)
            .filter_map(|r| match (r.cell, shared) {
                (Cell::Clients(c), false) | (Cell::Shared(c), true) => Some((c as f64, f(r))),
                _ => None,
            })
            .collect()
    };
    let callers: Vec<f64> = rows.iter().map(|r| r.cell.callers() as f64).collect();
    let (lo, hi) = callers
        .iter()
        .fold((f64::MAX, 1.0f64), |(lo, hi), &c| (lo.min(c), hi.max(c)));
    let mut rate = Vec::new();
    let mut wait = Vec::new();
    for &v in variants {
        for (shared, style) in [(false, Style::Line), (true, Style::Dots)] {
            let label = v.name().to_owned();
            rate.push(Series {
                label: label.clone(),
                color: v.color(),
                points: of(v, shared, &|r| r.figures.rate),
                style,
            });
            wait.push(Series {
                label,
                color: v.color(),
                points: of(v, shared, &|r| {
                    r.figures.wait.value_at_quantile(0.99) as f64 / 1e6
                }),
                style,
            });
        }
    }
    // A library's capacity and fair-queue wait in the colour of its first
    // variant.
    let color = |library: &str| {
        variants
            .iter()
            .find(|v| v.library() == library)
            .map_or("#7f7f7f", |v| v.color())
    };
    for c in capacity {
        rate.push(Series {
            label: format!("capacity, {}", c.library),
            color: color(c.library),
            points: vec![(lo, c.rate()), (hi, c.rate())],
            style: Style::Dashed,
        });
        let fair = |n: f64| n / c.rate() * 1e3;
        wait.push(Series {
            label: format!("fair-queue wait, {}", c.library),
            color: color(c.library),
            points: vec![(lo, fair(lo)), (hi, fair(hi))],
            style: Style::Dashed,
        });
    }
    let panel = |left: f64, title, log_y| Panel {
        left,
        top: 50.0,
        w: 320.0,
        h: 300.0,
        title,
        log_y,
    };
    panel(70.0, "acquisitions/s (dashed: capacity)", false).draw(&mut out, &rate);
    panel(
        470.0,
        "wait p99, ms, log scale (dashed: fair-queue wait)",
        true,
    )
    .draw(&mut out, &wait);
    let mut legend = 60.0;
    let mut shown: Vec<&str> = Vec::new();
    for s in rate.iter().chain(&wait).filter(|s| s.style != Style::Dots) {
        if shown.contains(&s.label.as_str()) {
            continue;
        }
        shown.push(&s.label);
        let dash = if s.style == Style::Dashed {
            " stroke-dasharray='4 4'"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "<line x1='810' x2='830' y1='{:.1}' y2='{:.1}' stroke='{}' stroke-width='2'{dash}/><text x='836' y='{:.1}'>{}</text>",
            legend - 4.0,
            legend - 4.0,
            s.color,
            legend,
            s.label
        );
        legend += 16.0;
    }
    let _ = writeln!(
        out,
        "<circle cx='820' cy='{:.1}' r='5' fill='none' stroke='#333' stroke-width='2'/><text x='836' y='{:.1}'>shared client, tasks</text>",
        legend - 4.0,
        legend
    );
    out.push_str("</svg>\n");
    out
}
