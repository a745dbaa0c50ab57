//! The headline ratios: per device, the comparisons the benchmark exists
//! for, as a markdown table (in the report and printed at the end).

use super::markdown::size_table_header;
use super::model::{CellKey, Run, Verdict, SIZES, TRANSPORTS};
use super::units::ratio_name;
use super::wire::{Operation, Status, Transport};
use std::fmt::Write as _;

/// One compared pair: `numerator / denominator`, above 1 when the left side
/// is slower.
struct Ratio {
    label: String,
    numerator: CellKey,
    denominator: CellKey,
}

/// The per-size rows of `dev`'s table.
fn sized_ratios(run: &Run, dev: &str) -> Vec<Ratio> {
    use Operation::{RegDereg, ReregAccess, ReregPd};
    let mut v = Vec::new();
    for t in TRANSPORTS {
        let path = run
            .ours_path(dev, t, ReregAccess)
            .map_or("not measured", |p| p.label());
        v.push(Ratio {
            label: format!("reg+dereg ÷ rereg ACCESS (ours, {t}; {path}): speed-up of rereg"),
            numerator: CellKey::ours(dev, t, RegDereg),
            denominator: CellKey::ours(dev, t, ReregAccess),
        });
    }
    for op in [ReregAccess, ReregPd, RegDereg] {
        for t in TRANSPORTS {
            v.push(Ratio {
                label: format!("ours ÷ floor, {} ({t})", op.label()),
                numerator: CellKey::ours(dev, t, op),
                denominator: CellKey::floor(dev, t, op),
            });
        }
    }
    for t in TRANSPORTS.into_iter().chain([Transport::Auto]) {
        v.push(Ratio {
            label: format!("ours ({t}) ÷ libibverbs, reg+dereg"),
            numerator: CellKey::ours(dev, t, RegDereg),
            denominator: CellKey::libibverbs(dev, RegDereg),
        });
    }
    v
}

/// The size-independent rows of `dev`'s table.
fn fixed_ratios(dev: &str) -> Vec<Ratio> {
    use Operation::{AllocDeallocPd, ContextOpen};
    [
        (Transport::Ioctl, AllocDeallocPd),
        (Transport::Write, AllocDeallocPd),
        (Transport::Auto, AllocDeallocPd),
        (Transport::Ioctl, ContextOpen),
        (Transport::Auto, ContextOpen),
    ]
    .into_iter()
    .map(|(t, op)| Ratio {
        label: format!("ours ({t}) ÷ libibverbs, {}", op.label()),
        numerator: CellKey::ours(dev, t, op),
        denominator: CellKey::libibverbs(dev, op),
    })
    .collect()
}

/// The headline ratios as a markdown table per device.
pub fn headline(run: &Run) -> String {
    let mut s = String::new();
    for dev in run.devices() {
        let _ = writeln!(s, "**{dev}**\n");
        size_table_header(&mut s, &["ratio"]);
        for r in sized_ratios(run, &dev) {
            let _ = write!(s, "| {} |", r.label);
            for &z in SIZES {
                let cell = match run.verdict(&r.numerator, &r.denominator, z) {
                    Some(v) => verdict_name(&v),
                    None => unsupported_or_dash(run, &r, z),
                };
                let _ = write!(s, " {cell} |");
            }
            s.push('\n');
        }
        for r in fixed_ratios(&dev) {
            let cell = run
                .verdict(&r.numerator, &r.denominator, 0)
                .map(|v| verdict_name(&v))
                .unwrap_or_else(|| "—".into());
            let _ = writeln!(
                s,
                "| {} | {cell} (size-independent) |{}",
                r.label,
                " |".repeat(SIZES.len() - 1)
            );
        }
        s.push('\n');
    }
    s
}

/// A measured ratio, or "noisy (pass 1 / pass 2 …)" when the passes
/// disagree.
pub fn verdict_name(v: &Verdict) -> String {
    match v {
        Verdict::Measured(r) => ratio_name(*r),
        Verdict::Noisy(r) => {
            let each: Vec<String> = r.iter().map(|&x| ratio_name(x)).collect();
            format!("noisy ({})", each.join(" / "))
        }
    }
}

/// "unsupported (who)" when either side of a ratio is, else a dash.
fn unsupported_or_dash(run: &Run, r: &Ratio, size: u64) -> String {
    for k in [&r.numerator, &r.denominator] {
        if run
            .get(k, size)
            .is_some_and(|row| row.status == Status::Unsupported)
        {
            return format!("unsupported ({})", k.imp);
        }
    }
    "—".into()
}
