//! The plot, docs/benchmarks.svg: one log-log panel per device, latency
//! against region size, for the series that tell the story.

use super::model::{CellKey, Run, SIZES};
use super::units::{decade_name, size_name};
use super::wire::{Operation, Transport};
use std::fmt::Write as _;

/// One plotted series.
struct Series {
    label: String,
    color: &'static str,
    dash: &'static str,
    points: Vec<(u64, f64)>,
}

/// `dev`'s series: ioctl transport, fork safety off.
fn series(run: &Run, dev: &str) -> Vec<Series> {
    use Operation::{RegDereg, ReregAccess, ReregTranslation};
    let pts = |key: CellKey| -> Vec<(u64, f64)> {
        SIZES
            .iter()
            .filter_map(|&z| run.median(&key, z).map(|m| (z, m)))
            .collect()
    };
    let ours = |op| CellKey::ours(dev, Transport::Ioctl, op);
    let path_of = |op| {
        run.ours_path(dev, Transport::Ioctl, op)
            .map_or("not measured", |p| p.label())
    };
    vec![
        Series {
            label: "ours reg+dereg".into(),
            color: "#1f77b4",
            dash: "",
            points: pts(ours(RegDereg)),
        },
        Series {
            label: "libibverbs reg+dereg".into(),
            color: "#7f7f7f",
            dash: "6,4",
            points: pts(CellKey::libibverbs(dev, RegDereg)),
        },
        Series {
            label: format!("ours rereg ACCESS ({})", path_of(ReregAccess)),
            color: "#2ca02c",
            dash: "",
            points: pts(ours(ReregAccess)),
        },
        Series {
            label: "floor rereg ACCESS".into(),
            color: "#98df8a",
            dash: "2,3",
            points: pts(CellKey::floor(dev, Transport::Ioctl, ReregAccess)),
        },
        Series {
            label: format!("ours rereg TRANSLATION ({})", path_of(ReregTranslation)),
            color: "#d62728",
            dash: "",
            points: pts(ours(ReregTranslation)),
        },
    ]
}

/// Escapes text for SVG.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The plot: one log-log panel per device, latency vs region size.
pub fn svg(run: &Run) -> String {
    let devices = run.devices();
    let (pw, ph) = (460.0, 330.0);
    let (ml, mr, mt, mb) = (70.0, 30.0, 40.0, 45.0);
    let legend_h = 95.0;
    let width = pw * devices.len().max(1) as f64;
    let height = ph + legend_h;
    let all: Vec<Vec<Series>> = devices.iter().map(|d| series(run, d)).collect();
    let ys: Vec<f64> = all
        .iter()
        .flatten()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect();
    let lo = ys.iter().cloned().fold(f64::INFINITY, f64::min).max(1.0);
    let hi = ys.iter().cloned().fold(0.0, f64::max).max(lo * 10.0);
    let (dlo, dhi) = (lo.log10().floor(), hi.log10().ceil());
    let (xlo, xhi) = (
        (SIZES[0] as f64).log2(),
        (SIZES[SIZES.len() - 1] as f64).log2(),
    );
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(
        s,
        r#"<rect width="{width}" height="{height}" fill="white"/>"#
    );
    for (i, (dev, ser)) in devices.iter().zip(&all).enumerate() {
        let ox = i as f64 * pw;
        let (x0, x1, y0, y1) = (ox + ml, ox + pw - mr, mt, ph - mb);
        let x = |size: u64| x0 + ((size as f64).log2() - xlo) / (xhi - xlo) * (x1 - x0);
        let y = |ns: f64| y1 - (ns.log10() - dlo) / (dhi - dlo) * (y1 - y0);
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="20" text-anchor="middle" font-size="14" font-weight="bold">{} (ioctl transport, fork safety off)</text>"#,
            (x0 + x1) / 2.0,
            esc(dev)
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
                decade_name(d as i32)
            );
            d += 1.0;
        }
        for &z in SIZES {
            let xx = x(z);
            let _ = writeln!(
                s,
                r##"<line x1="{xx:.1}" y1="{y0:.1}" x2="{xx:.1}" y2="{y1:.1}" stroke="#eee"/><text x="{xx:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                y1 + 16.0,
                size_name(z)
            );
        }
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">region size</text>"#,
            (x0 + x1) / 2.0,
            y1 + 34.0
        );
        let _ = writeln!(
            s,
            r#"<text transform="translate({:.1},{:.1}) rotate(-90)" text-anchor="middle">latency per call (median)</text>"#,
            ox + 14.0,
            (y0 + y1) / 2.0
        );
        for se in ser {
            if se.points.is_empty() {
                continue;
            }
            let pts: Vec<String> = se
                .points
                .iter()
                .map(|&(z, v)| format!("{:.1},{:.1}", x(z), y(v)))
                .collect();
            let dash = if se.dash.is_empty() {
                String::new()
            } else {
                format!(r#" stroke-dasharray="{}""#, se.dash)
            };
            let _ = writeln!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2"{dash}/>"#,
                pts.join(" "),
                se.color
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
        for (j, se) in ser.iter().enumerate() {
            let ly = ph + 5.0 + j as f64 * 17.0;
            let dash = if se.dash.is_empty() {
                String::new()
            } else {
                format!(r#" stroke-dasharray="{}""#, se.dash)
            };
            let label = if se.points.is_empty() {
                format!("{} (unsupported)", se.label)
            } else {
                se.label.clone()
            };
            let _ = writeln!(
                s,
                r#"<line x1="{:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{}" stroke-width="2"{dash}/><text x="{:.1}" y="{:.1}">{}</text>"#,
                x0,
                x0 + 28.0,
                se.color,
                x0 + 34.0,
                ly + 4.0,
                esc(&label)
            );
        }
    }
    s.push_str("</svg>\n");
    s
}
