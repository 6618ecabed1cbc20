//! The load bench's scaling curve: turns/s and server CPU per turn against the providers
//! per turn (1, 2, 4, 8, 16 by default), for ctxd, the same-hop baseline and the raw
//! baseline, as a table on standard output and a two-panel SVG chart. The cost of a turn
//! must grow with the providers' I/O (the same-hop server's curve), not faster.

use std::fmt::Write as _;

/// One provider count's closed-loop figures.
pub(crate) struct Point {
    pub(crate) providers: usize,
    pub(crate) ctxd_turns_per_second: f64,
    pub(crate) same_hop_turns_per_second: f64,
    pub(crate) raw_turns_per_second: f64,
    /// Server-process CPU µs per turn.
    pub(crate) ctxd_cpu_us: f64,
    pub(crate) same_hop_cpu_us: f64,
}

/// The table printed after the runs.
pub(crate) fn table(points: &[Point]) -> String {
    let mut text = String::from(
        "  N  ctxd turns/s  same-hop turns/s  raw turns/s  ÷ same-hop  ctxd µs/turn  same-hop µs/turn  ctxd − same-hop µs  ctxd µs per provider\n",
    );
    for p in points {
        let _ = writeln!(
            text,
            "{:>3} {:>13.0} {:>17.0} {:>12.0} {:>11.3} {:>13.0} {:>17.0} {:>19.0} {:>21.1}",
            p.providers,
            p.ctxd_turns_per_second,
            p.same_hop_turns_per_second,
            p.raw_turns_per_second,
            p.ctxd_turns_per_second / p.same_hop_turns_per_second,
            p.ctxd_cpu_us,
            p.same_hop_cpu_us,
            p.ctxd_cpu_us - p.same_hop_cpu_us,
            p.ctxd_cpu_us / p.providers as f64
        );
    }
    text
}

struct Series {
    name: &'static str,
    color: &'static str,
    dash: &'static str,
    values: Vec<f64>,
}

/// Two panels: turns/s (log scale) and server CPU µs per turn (linear), both over the
/// providers per turn on a log2 axis.
pub(crate) fn chart(points: &[Point], note: &str) -> String {
    const W: f64 = 470.0;
    const H: f64 = 380.0;
    const LEFT: f64 = 70.0;
    const RIGHT: f64 = 18.0;
    const TOP: f64 = 58.0;
    const BOTTOM: f64 = 92.0;
    let mut svg = String::new();
    let width = 2.0 * W + 20.0;
    let height = H + 60.0;
    let _ = write!(
        svg,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/><text x="{}" y="24" text-anchor="middle" font-size="16">ctxd scaling with providers per turn (closed loop, traces on)</text><text x="{}" y="{}" text-anchor="middle" fill="#555">{}</text>"##,
        width / 2.0,
        width / 2.0,
        height - 12.0,
        super::xml(note)
    );
    let providers: Vec<f64> = points.iter().map(|p| p.providers as f64).collect();
    let panels = [
        (
            "turns/s",
            true,
            vec![
                Series {
                    name: "ctxd",
                    color: super::COLOR_CTXD,
                    dash: "none",
                    values: points.iter().map(|p| p.ctxd_turns_per_second).collect(),
                },
                Series {
                    name: "same-hop baseline",
                    color: super::COLOR_COMPARE,
                    dash: "7 4",
                    values: points.iter().map(|p| p.same_hop_turns_per_second).collect(),
                },
                Series {
                    name: "raw (no-hop) baseline",
                    color: super::COLOR_BASE,
                    dash: "2 3",
                    values: points.iter().map(|p| p.raw_turns_per_second).collect(),
                },
            ],
        ),
        (
            "server CPU µs per turn",
            false,
            vec![
                Series {
                    name: "ctxd",
                    color: super::COLOR_CTXD,
                    dash: "none",
                    values: points.iter().map(|p| p.ctxd_cpu_us).collect(),
                },
                Series {
                    name: "same-hop baseline",
                    color: super::COLOR_COMPARE,
                    dash: "7 4",
                    values: points.iter().map(|p| p.same_hop_cpu_us).collect(),
                },
            ],
        ),
    ];
    let (x_lo, x_hi) = (
        providers
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min)
            .log2(),
        providers.iter().copied().fold(0.0, f64::max).log2(),
    );
    let x_span = (x_hi - x_lo).max(1.0);
    for (index, (label, log, series)) in panels.iter().enumerate() {
        let x0 = 10.0 + index as f64 * W;
        let (px, py, pw, ph) = (x0 + LEFT, TOP, W - LEFT - RIGHT, H - TOP - BOTTOM);
        let all = series.iter().flat_map(|s| s.values.iter().copied());
        let hi = all.clone().fold(0.0, f64::max).max(1.0);
        let lo = all.fold(f64::INFINITY, f64::min).max(1.0);
        let (y_lo, y_hi) = if *log {
            (super::nice_below(lo).log10(), super::nice_above(hi).log10())
        } else {
            (0.0, super::nice_above(hi))
        };
        let y_of = |v: f64| {
            let v = if *log { v.max(1.0).log10() } else { v };
            py + ph - (v - y_lo) / (y_hi - y_lo).max(f64::EPSILON) * ph
        };
        let x_of = |providers: f64| px + (providers.log2() - x_lo) / x_span * pw;
        let _ = write!(
            svg,
            r##"<text x="{}" y="{}" text-anchor="middle" font-size="14">{label}</text><rect x="{px}" y="{py}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>"##,
            px + pw / 2.0,
            py - 10.0
        );
        let ticks: Vec<f64> = if *log {
            super::log_ticks(10f64.powf(y_lo), 10f64.powf(y_hi))
        } else {
            (0..=5).map(|k| y_hi * k as f64 / 5.0).collect()
        };
        for tick in ticks {
            let y = y_of(tick);
            let _ = write!(
                svg,
                r##"<line x1="{px}" x2="{}" y1="{y}" y2="{y}" stroke="#eee"/><text x="{}" y="{}" text-anchor="end">{}</text>"##,
                px + pw,
                px - 6.0,
                y + 4.0,
                super::ms_label(tick)
            );
        }
        for &p in &providers {
            let x = x_of(p);
            let _ = write!(
                svg,
                r##"<line x1="{x}" x2="{x}" y1="{py}" y2="{}" stroke="#eee"/><text x="{x}" y="{}" text-anchor="middle">{p}</text>"##,
                py + ph,
                py + ph + 16.0
            );
        }
        let _ = write!(
            svg,
            r##"<text x="{}" y="{}" text-anchor="middle">providers per turn</text>"##,
            px + pw / 2.0,
            py + ph + 34.0
        );
        for (k, s) in series.iter().enumerate() {
            let path: Vec<String> = providers
                .iter()
                .zip(&s.values)
                .map(|(&p, &v)| format!("{:.1},{:.1}", x_of(p), y_of(v)))
                .collect();
            let _ = write!(
                svg,
                r##"<polyline points="{}" fill="none" stroke="{}" stroke-width="2" stroke-dasharray="{}"/>"##,
                path.join(" "),
                s.color,
                s.dash
            );
            for point in &path {
                let (x, y) = point.split_once(',').unwrap();
                let _ = write!(
                    svg,
                    r##"<circle cx="{x}" cy="{y}" r="3" fill="{}"/>"##,
                    s.color
                );
            }
            let ly = py + ph + 52.0 + 14.0 * (k as f64);
            let _ = write!(
                svg,
                r##"<line x1="{px}" x2="{}" y1="{}" y2="{}" stroke="{}" stroke-width="2" stroke-dasharray="{}"/><text x="{}" y="{}">{}</text>"##,
                px + 28.0,
                ly - 4.0,
                ly - 4.0,
                s.color,
                s.dash,
                px + 34.0,
                ly,
                s.name
            );
        }
    }
    svg.push_str("</svg>\n");
    svg
}
