//! docs/benchmarks-datapath.svg: latency against message size (top row)
//! and bandwidth against message size (bottom row), one log-log panel per
//! target, ours solid and perftest dashed, each test a colour.

use super::DataPath;
use crate::bench::units::size_name;
use std::fmt::Write as _;

/// One line in a panel.
struct Series {
    label: String,
    color: &'static str,
    dash: &'static str,
    points: Vec<(f64, f64)>,
}

const COLORS: [&str; 5] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"];

/// The series of one target's panel: every test of the kind, both tools.
fn series(dp: &DataPath, device: &str, conn: &str, latency: bool) -> Vec<Series> {
    let mut groups: Vec<(String, u64)> = Vec::new();
    for k in dp.cells.keys() {
        if k.device == device && k.conn == conn && k.is_latency() == latency {
            let g = (k.test.clone(), k.qd);
            if !groups.contains(&g) {
                groups.push(g);
            }
        }
    }
    let mut out = Vec::new();
    for (i, (test, qd)) in groups.iter().enumerate() {
        for ours in [true, false] {
            let points = dp
                .cells
                .iter()
                .filter(|(k, _)| {
                    k.device == device && k.conn == conn && &k.test == test && k.qd == *qd
                })
                .filter_map(|(k, c)| {
                    let v = c.summary(ours)?.headline();
                    // Latency in µs.
                    let v = if latency { v / 1e3 } else { v };
                    (v > 0.0).then_some((k.size as f64, v))
                })
                .collect();
            let depth = if latency {
                String::new()
            } else {
                format!(" depth {qd}")
            };
            out.push(Series {
                label: format!("{} {test}{depth}", if ours { "ours" } else { "perftest" }),
                color: COLORS[i % COLORS.len()],
                dash: if ours { "" } else { "6,4" },
                points,
            });
        }
    }
    out
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The plot; empty panels are drawn with their axes only.
pub fn svg(dp: &DataPath) -> String {
    let targets = dp.targets();
    let (pw, ph) = (430.0, 300.0);
    let (ml, mr, mt, mb) = (70.0, 20.0, 40.0, 45.0);
    let legend_h = 120.0;
    let cols = targets.len().max(1) as f64;
    let (width, height) = (pw * cols, 2.0 * (ph + legend_h));
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    for (row, latency) in [(0.0, true), (1.0, false)] {
        for (col, (device, conn)) in targets.iter().enumerate() {
            let x0 = col as f64 * pw;
            let y0 = row * (ph + legend_h);
            let all = series(dp, device, conn, latency);
            let pts: Vec<(f64, f64)> = all.iter().flat_map(|s| s.points.clone()).collect();
            let (xmin, xmax) = bounds(pts.iter().map(|p| p.0), 2.0, 1048576.0);
            let (ymin, ymax) = bounds(pts.iter().map(|p| p.1), 1.0, 1000.0);
            let (lx0, lx1) = (
                xmin.log2().floor(),
                xmax.log2().ceil().max(xmin.log2().floor() + 1.0),
            );
            let (ly0, ly1) = (
                ymin.log10().floor(),
                ymax.log10().ceil().max(ymin.log10().floor() + 1.0),
            );
            let px = |x: f64| x0 + ml + (x.log2() - lx0) / (lx1 - lx0) * (pw - ml - mr);
            let py = |y: f64| y0 + ph - mb - (y.log10() - ly0) / (ly1 - ly0) * (ph - mt - mb);
            let title = format!(
                "{device} {conn}: {}",
                if latency {
                    "latency (µs)"
                } else {
                    "bandwidth (MiB/s)"
                }
            );
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" font-size="13" text-anchor="middle">{}</text>"#,
                x0 + pw / 2.0,
                y0 + 22.0,
                esc(&title)
            );
            let _ = writeln!(
                s,
                r##"<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#444"/>"##,
                x0 + ml,
                y0 + mt,
                pw - ml - mr,
                ph - mt - mb
            );
            // x ticks every factor of 4, y ticks every decade.
            let mut e = lx0;
            while e <= lx1 {
                let x = px(2f64.powf(e));
                let _ = writeln!(
                    s,
                    r##"<line x1="{x}" y1="{}" x2="{x}" y2="{}" stroke="#ddd"/><text x="{x}" y="{}" text-anchor="middle">{}</text>"##,
                    y0 + mt,
                    y0 + ph - mb,
                    y0 + ph - mb + 15.0,
                    esc(&size_name(2f64.powf(e) as u64))
                );
                e += 2.0;
            }
            let mut d = ly0;
            while d <= ly1 {
                let y = py(10f64.powf(d));
                let _ = writeln!(
                    s,
                    r##"<line x1="{}" y1="{y}" x2="{}" y2="{y}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{}</text>"##,
                    x0 + ml,
                    x0 + pw - mr,
                    x0 + ml - 5.0,
                    y + 4.0,
                    10f64.powf(d)
                );
                d += 1.0;
            }
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" text-anchor="middle">message size</text>"#,
                x0 + ml + (pw - ml - mr) / 2.0,
                y0 + ph - 8.0
            );
            for (i, se) in all.iter().enumerate() {
                if se.points.len() > 1 {
                    let path: Vec<String> = se
                        .points
                        .iter()
                        .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
                        .collect();
                    let _ = writeln!(
                        s,
                        r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="1.8" stroke-dasharray="{}"/>"#,
                        path.join(" "),
                        se.color,
                        se.dash
                    );
                }
                for &(x, y) in &se.points {
                    let _ = writeln!(
                        s,
                        r#"<circle cx="{:.1}" cy="{:.1}" r="2.2" fill="{}"/>"#,
                        px(x),
                        py(y),
                        se.color
                    );
                }
                let (lx, ly) = (
                    x0 + ml + (i % 2) as f64 * 180.0,
                    y0 + ph + 5.0 + (i / 2) as f64 * 16.0,
                );
                let _ = writeln!(
                    s,
                    r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{}" stroke-width="2" stroke-dasharray="{}"/><text x="{}" y="{}">{}</text>"#,
                    lx + 22.0,
                    se.color,
                    se.dash,
                    lx + 27.0,
                    ly + 4.0,
                    esc(&se.label)
                );
            }
        }
    }
    s.push_str("</svg>\n");
    s
}

/// The least and greatest of `xs`, or the defaults without any.
fn bounds(xs: impl Iterator<Item = f64>, lo: f64, hi: f64) -> (f64, f64) {
    let v: Vec<f64> = xs.filter(|x| x.is_finite() && *x > 0.0).collect();
    if v.is_empty() {
        return (lo, hi);
    }
    (
        v.iter().copied().fold(f64::MAX, f64::min),
        v.iter().copied().fold(f64::MIN, f64::max),
    )
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    #[test]
    fn one_panel_per_target_and_kind() {
        let mut lines = Vec::new();
        for (size, m) in [(2, 50), (8, 60)] {
            for imp in ["ours", "perftest"] {
                lines.push(format!("@@DATAPATH pass=1 round=1 impl={imp} device=rxe0 conn=loopback test=write_lat size={size} qd=1 inline=220 iters=300 median_ns={m}000 p10_ns=1 p90_ns=1 n=3"));
            }
        }
        let dp = parse(&lines.join("\n"));
        let svg = svg(&dp);
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("rxe0 loopback: latency (µs)"));
        assert!(svg.contains("rxe0 loopback: bandwidth (MiB/s)"));
        assert_eq!(svg.matches("<polyline").count(), 2, "ours and perftest");
        assert!(svg.contains("perftest write_lat"));
        assert!(svg.trim_end().ends_with("</svg>"));
    }
}
