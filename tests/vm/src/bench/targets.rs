//! The targets of issue #6, checked against the run as measured.

use super::model::{CellKey, Run, SIZES, TRANSPORTS};
use super::units::{ratio_name, size_name};
use super::wire::{Operation, ReregPath, Transport};

/// One target and how the run did.
pub struct Target {
    /// What the target asks.
    pub label: String,
    /// The measured ratio, or the worst of several, or "not measured".
    pub measured: String,
    /// Whether it was met; `None` when not measured.
    pub met: Option<bool>,
}

/// The largest ratio of several cells, where it was, and how many cells.
struct Worst {
    ratio: f64,
    at: String,
    cells: usize,
}

impl Worst {
    /// The first largest of `(ratio, where)`; `None` without any.
    fn of(ratios: impl IntoIterator<Item = (f64, String)>) -> Option<Worst> {
        let mut worst: Option<Worst> = None;
        for (ratio, at) in ratios {
            let cells = worst.as_ref().map_or(0, |w| w.cells) + 1;
            if worst.as_ref().is_none_or(|w| ratio > w.ratio) {
                worst = Some(Worst { ratio, at, cells });
            } else if let Some(w) = &mut worst {
                w.cells = cells;
            }
        }
        worst
    }

    /// A target "the worst ratio ≤ `limit`".
    fn target(label: String, worst: Option<Worst>, limit: f64) -> Target {
        Target {
            label,
            measured: worst.as_ref().map_or_else(
                || "not measured".into(),
                |w| {
                    format!(
                        "worst {} ({}) of {} cells",
                        ratio_name(w.ratio),
                        w.at,
                        w.cells
                    )
                },
            ),
            met: worst.map(|w| w.ratio <= limit),
        }
    }
}

/// Targets of issue #6, in the report's order.
pub fn targets(run: &Run) -> Vec<Target> {
    use Operation::{AllocDeallocPd, RegDereg, ReregAccess, ReregPd};
    let mut out = Vec::new();
    let devices = run.devices();
    let rxe = devices
        .iter()
        .find(|d| d.starts_with("rxe"))
        .map_or("rxe0", String::as_str);
    // rereg ACCESS is much faster than a fresh registration on rxe.
    for (size, want) in [(1u64 << 20, 50.0), (256 << 20, 1000.0)] {
        for t in TRANSPORTS {
            let r = run.ratio(
                &CellKey::ours(rxe, t, RegDereg),
                &CellKey::ours(rxe, t, ReregAccess),
                size,
            );
            out.push(Target {
                label: format!(
                    "rereg ACCESS on {rxe} ≥ {want:.0}× faster than dereg+reg at {} ({t})",
                    size_name(size)
                ),
                measured: r.map(ratio_name).unwrap_or_else(|| "not measured".into()),
                met: r.map(|r| r >= want),
            });
        }
    }
    // ours / floor ≤ 1.05 for rereg, wherever rereg runs in place.
    for op in [ReregAccess, ReregPd] {
        for t in TRANSPORTS {
            let ratios = devices.iter().flat_map(|dev| {
                let (ours, floor) = (CellKey::ours(dev, t, op), CellKey::floor(dev, t, op));
                SIZES.iter().filter_map(move |&z| {
                    run.get(&ours, z)
                        .filter(|r| r.path == Some(ReregPath::InPlace))?;
                    Some((
                        run.ratio(&ours, &floor, z)?,
                        format!("{dev} {}", size_name(z)),
                    ))
                })
            });
            out.push(Worst::target(
                format!("ours ÷ floor ≤ 1.05 for {} in place ({t})", op.label()),
                Worst::of(ratios),
                1.05,
            ));
        }
    }
    // ours / libibverbs ≤ 1.0, over each transport and the default (auto).
    for (op, sizes) in [(RegDereg, SIZES), (AllocDeallocPd, &[0u64][..])] {
        for t in TRANSPORTS.into_iter().chain([Transport::Auto]) {
            let ratios = devices.iter().flat_map(|dev| {
                let (ours, ibv) = (CellKey::ours(dev, t, op), CellKey::libibverbs(dev, op));
                sizes.iter().filter_map(move |&z| {
                    let at = if z == 0 {
                        dev.clone()
                    } else {
                        format!("{dev} {}", size_name(z))
                    };
                    Some((run.ratio(&ours, &ibv, z)?, at))
                })
            });
            out.push(Worst::target(
                format!("ours ({t}) ÷ libibverbs ≤ 1.0 for {}", op.label()),
                Worst::of(ratios),
                1.0,
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worst_is_the_first_largest() {
        assert!(Worst::of([]).is_none());
        let w = Worst::of([(1.0, "a".into()), (1.2, "b".into()), (1.2, "c".into())]).unwrap();
        assert_eq!((w.ratio, w.at.as_str(), w.cells), (1.2, "b", 3));
        let t = Worst::target("t".into(), Some(w), 1.05);
        assert_eq!(t.measured, "worst 1.20× (b) of 3 cells");
        assert_eq!(t.met, Some(false));
        let none = Worst::target("t".into(), None, 1.05);
        assert_eq!((none.measured.as_str(), none.met), ("not measured", None));
    }
}
