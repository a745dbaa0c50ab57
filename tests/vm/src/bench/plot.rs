//! The one plotter of the report: log-log panels of series against a size,
//! in rows (one y scale per row, so the panels of a row compare at a
//! glance), each panel with its legend under it. docs/benchmarks.svg is one
//! row (verbs latency per device, [`verbs`]); docs/benchmarks-datapath.svg
//! two (data-path latency and bandwidth per target, [`datapath`]).

use super::datapath::DataPath;
use super::model::{CellKey, Run, SIZES};
use super::units::{decade_name, distinct, size_name};
use super::wire::{Operation, Transport};
use std::fmt::Write as _;

/// One plotted line: `(x, y)` points, x a size in bytes.
pub struct Series {
    pub label: String,
    pub color: &'static str,
    /// SVG `stroke-dasharray`; empty for a solid line.
    pub dash: &'static str,
    pub points: Vec<(f64, f64)>,
}

/// One panel: its title and lines.
pub struct Panel {
    pub title: String,
    pub series: Vec<Series>,
}

/// A row of panels sharing the axes.
pub struct Row {
    /// The x ticks, sizes in bytes, ascending; the first and last bound
    /// the axis.
    pub x_ticks: Vec<u64>,
    pub x_label: &'static str,
    pub y_label: &'static str,
    /// The label of the y tick at 10^d.
    pub y_tick: fn(i32) -> String,
    pub panels: Vec<Panel>,
}

/// Escapes text for SVG.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// ` stroke-dasharray="…"`, or nothing for a solid line.
fn dash_attr(dash: &str) -> String {
    if dash.is_empty() {
        String::new()
    } else {
        format!(r#" stroke-dasharray="{dash}""#)
    }
}

/// The plot of `rows`.
pub fn svg(rows: &[Row]) -> String {
    let (pw, ph) = (460.0, 330.0);
    let (ml, mr, mt, mb) = (70.0, 30.0, 40.0, 45.0);
    let most = rows
        .iter()
        .flat_map(|r| r.panels.iter().map(|p| p.series.len()))
        .max()
        .unwrap_or(0);
    let legend_h = 10.0 + 17.0 * most as f64;
    let cols = rows.iter().map(|r| r.panels.len()).max().unwrap_or(0);
    let width = pw * cols.max(1) as f64;
    let height = (ph + legend_h) * rows.len().max(1) as f64;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(
        s,
        r#"<rect width="{width}" height="{height}" fill="white"/>"#
    );
    for (r, row) in rows.iter().enumerate() {
        let oy = r as f64 * (ph + legend_h);
        let ys: Vec<f64> = row
            .panels
            .iter()
            .flat_map(|p| &p.series)
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .filter(|v| v.is_finite() && *v > 0.0)
            .collect();
        // A row without points gets the decade 1–10.
        let lo = ys.iter().cloned().reduce(f64::min).unwrap_or(1.0).max(1.0);
        let hi = ys.iter().cloned().fold(0.0, f64::max).max(lo * 10.0);
        let (dlo, dhi) = (lo.log10().floor(), hi.log10().ceil());
        let (first, last) = match (row.x_ticks.first(), row.x_ticks.last()) {
            (Some(&a), Some(&b)) if b > a => (a, b),
            _ => (SIZES[0], SIZES[SIZES.len() - 1]),
        };
        let (xlo, xhi) = ((first as f64).log2(), (last as f64).log2());
        for (i, panel) in row.panels.iter().enumerate() {
            let ox = i as f64 * pw;
            let (x0, x1, y0, y1) = (ox + ml, ox + pw - mr, oy + mt, oy + ph - mb);
            let x = |size: f64| x0 + (size.log2() - xlo) / (xhi - xlo) * (x1 - x0);
            let y = |v: f64| y1 - (v.log10() - dlo) / (dhi - dlo) * (y1 - y0);
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{}" text-anchor="middle" font-size="14" font-weight="bold">{}</text>"#,
                (x0 + x1) / 2.0,
                oy + 20.0,
                esc(&panel.title)
            );
            let _ = writeln!(
                s,
                r##"<rect x="{x0:.1}" y="{y0:.1}" width="{:.1}" height="{:.1}" fill="none" stroke="#333"/>"##,
                x1 - x0,
                y1 - y0
            );
            let mut d = dlo;
            while d <= dhi + 1e-9 {
                let yy = y(10f64.powf(d));
                let _ = writeln!(
                    s,
                    r##"<line x1="{x0:.1}" y1="{yy:.1}" x2="{x1:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                    x0 - 5.0,
                    yy + 4.0,
                    (row.y_tick)(d as i32)
                );
                d += 1.0;
            }
            for &z in &row.x_ticks {
                let xx = x(z as f64);
                let _ = writeln!(
                    s,
                    r##"<line x1="{xx:.1}" y1="{y0:.1}" x2="{xx:.1}" y2="{y1:.1}" stroke="#eee"/><text x="{xx:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                    y1 + 16.0,
                    size_name(z)
                );
            }
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                (x0 + x1) / 2.0,
                y1 + 34.0,
                row.x_label
            );
            let _ = writeln!(
                s,
                r#"<text transform="translate({:.1},{:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
                ox + 14.0,
                (y0 + y1) / 2.0,
                row.y_label
            );
            for se in panel.series.iter().filter(|se| !se.points.is_empty()) {
                let pts: Vec<String> = se
                    .points
                    .iter()
                    .map(|&(z, v)| format!("{:.1},{:.1}", x(z), y(v)))
                    .collect();
                let _ = writeln!(
                    s,
                    r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2"{}/>"#,
                    pts.join(" "),
                    se.color,
                    dash_attr(se.dash)
                );
                for &(z, v) in &se.points {
                    let _ = writeln!(
                        s,
                        r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{}"/>"#,
                        x(z),
                        y(v),
                        se.color
                    );
                }
            }
            // Legend under the panel.
            for (j, se) in panel.series.iter().enumerate() {
                let ly = oy + ph + 5.0 + j as f64 * 17.0;
                let _ = writeln!(
                    s,
                    r#"<line x1="{:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{}" stroke-width="2"{}/><text x="{:.1}" y="{:.1}">{}</text>"#,
                    x0,
                    x0 + 28.0,
                    se.color,
                    dash_attr(se.dash),
                    x0 + 34.0,
                    ly + 4.0,
                    esc(&se.label)
                );
            }
        }
    }
    s.push_str("</svg>\n");
    s
}

/// docs/benchmarks.svg: per device, the verbs latencies against region
/// size that tell the story (ioctl transport, fork safety off).
pub fn verbs(run: &Run) -> String {
    use Operation::{RegDereg, ReregAccess, ReregTranslation};
    let panel = |dev: &str| {
        let pts = |key: CellKey| -> Vec<(f64, f64)> {
            SIZES
                .iter()
                .filter_map(|&z| run.median(&key, z).map(|m| (z as f64, m)))
                .collect()
        };
        let ours = |op| CellKey::ours(dev, Transport::Ioctl, op);
        let path_of = |op| {
            run.ours_path(dev, Transport::Ioctl, op)
                .map_or("not measured", |p| p.label())
        };
        let line = |label: String, color, dash, points: Vec<(f64, f64)>| Series {
            label: if points.is_empty() {
                format!("{label} (unsupported)")
            } else {
                label
            },
            color,
            dash,
            points,
        };
        Panel {
            title: format!("{dev} (ioctl transport, fork safety off)"),
            series: vec![
                line("ours reg+dereg".into(), "#1f77b4", "", pts(ours(RegDereg))),
                line(
                    "libibverbs reg+dereg".into(),
                    "#7f7f7f",
                    "6,4",
                    pts(CellKey::libibverbs(dev, RegDereg)),
                ),
                line(
                    format!("ours rereg ACCESS ({})", path_of(ReregAccess)),
                    "#2ca02c",
                    "",
                    pts(ours(ReregAccess)),
                ),
                line(
                    "floor rereg ACCESS".into(),
                    "#98df8a",
                    "2,3",
                    pts(CellKey::floor(dev, Transport::Ioctl, ReregAccess)),
                ),
                line(
                    format!("ours rereg TRANSLATION ({})", path_of(ReregTranslation)),
                    "#d62728",
                    "",
                    pts(ours(ReregTranslation)),
                ),
            ],
        }
    };
    svg(&[Row {
        x_ticks: SIZES.to_vec(),
        x_label: "region size",
        y_label: "latency per call (median)",
        y_tick: decade_name,
        panels: run.devices().iter().map(|d| panel(d)).collect(),
    }])
}

/// The data-path tests' colours, one per test (and queue depth).
const COLORS: [&str; 5] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"];

/// docs/benchmarks-datapath.svg: latency (top row) and bandwidth (bottom
/// row) against message size, a panel per target (device and connection),
/// ours solid and perftest dashed, each test a colour.
pub fn datapath(dp: &DataPath) -> String {
    let targets = dp.targets();
    let row = |latency: bool| {
        let panels: Vec<Panel> = targets
            .iter()
            .map(|(device, conn)| {
                let keys = dp.cells.keys().filter(|k| {
                    &k.device == device && &k.conn == conn && k.is_latency() == latency
                });
                let groups = distinct(keys.map(|k| (k.test.clone(), k.qd)));
                let mut series = Vec::new();
                for (i, (test, qd)) in groups.iter().enumerate() {
                    for ours in [true, false] {
                        let points = dp
                            .cells
                            .iter()
                            .filter(|(k, _)| {
                                &k.device == device && &k.conn == conn && &k.test == test
                            })
                            .filter(|(k, _)| k.qd == *qd)
                            .filter_map(|(k, c)| Some((k.size as f64, c.summary(ours)?.headline())))
                            .filter(|&(_, v)| v > 0.0)
                            .collect();
                        let depth = if latency {
                            String::new()
                        } else {
                            format!(" depth {qd}")
                        };
                        let tool = if ours { "ours" } else { "perftest" };
                        series.push(Series {
                            label: format!("{tool} {test}{depth}"),
                            color: COLORS[i % COLORS.len()],
                            dash: if ours { "" } else { "6,4" },
                            points,
                        });
                    }
                }
                Panel {
                    title: format!("{device} {conn}"),
                    series,
                }
            })
            .collect();
        // Every other power of two over the sizes measured.
        let sizes = panels
            .iter()
            .flat_map(|p| &p.series)
            .flat_map(|s| s.points.iter().map(|p| p.0 as u64));
        let (lo, hi) = sizes.fold((u64::MAX, 0), |(lo, hi), z| (lo.min(z), hi.max(z)));
        let mut x_ticks = Vec::new();
        if lo <= hi {
            let mut e = lo.ilog2();
            x_ticks.push(1u64 << e);
            while (1u64 << e) < hi {
                e += 2;
                x_ticks.push(1u64 << e);
            }
        }
        Row {
            x_ticks,
            x_label: "message size",
            y_label: if latency {
                "latency (median)"
            } else {
                "bandwidth (MiB/s)"
            },
            y_tick: if latency {
                decade_name
            } else {
                |d| 10f64.powi(d).to_string()
            },
            panels,
        }
    };
    svg(&[row(true), row(false)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datapath_has_a_latency_and_a_bandwidth_row_per_target() {
        let mut lines = Vec::new();
        for (size, m) in [(2, 50), (8, 60)] {
            for imp in ["ours", "perftest"] {
                lines.push(format!(r#"@@RESULT {{"kind":"datapath","pass":1,"round":1,"impl":"{imp}","device":"rxe0","conn":"loopback","test":"write_lat","size":{size},"qd":1,"inline":220,"iters":300,"median_ns":{m}000,"p10_ns":1,"p90_ns":1,"n":3}}"#));
            }
        }
        let dp = crate::bench::datapath::parse(&crate::bench::results::read(&lines.join("\n")));
        let svg = datapath(&dp);
        assert!(svg.starts_with("<svg"));
        assert_eq!(svg.matches(">rxe0 loopback</text>").count(), 2, "{svg}");
        assert!(svg.contains(">latency (median)</text>"));
        assert!(svg.contains(">bandwidth (MiB/s)</text>"));
        assert_eq!(svg.matches("<polyline").count(), 2, "ours and perftest");
        assert!(svg.contains(">perftest write_lat</text>"));
        assert!(svg.contains(">8 B</text>"), "{svg}");
        assert!(svg.trim_end().ends_with("</svg>"));
    }
}
