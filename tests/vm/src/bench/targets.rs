//! The verbs bench's targets, as data: docs/bench-targets.json (beside
//! the report it feeds, compiled in), checked against the run as measured.

use super::model::{CellKey, Run, SIZES};
use super::units::{ratio_name, size_name};
use super::wire::{Operation, ReregPath, Transport};
use serde::Deserialize;

/// The targets file, docs/bench-targets.json.
const FILE: &str = include_str!("../../../../docs/bench-targets.json");

/// The targets file: the section's heading and note, and the targets in
/// the report's order.
#[derive(Debug, Deserialize)]
pub struct Targets {
    pub title: String,
    pub note: String,
    pub targets: Vec<Check>,
}

/// One target of the file.
#[derive(Debug, Deserialize)]
#[serde(tag = "check", rename_all = "snake_case", deny_unknown_fields)]
pub enum Check {
    /// ours reg+dereg ÷ ours rereg ACCESS on the first device named
    /// `device…`, at `size`, at least `at_least`.
    ReregSpeedup {
        device: String,
        size: u64,
        transport: Transport,
        at_least: f64,
    },
    /// ours ÷ the floor for `op`, the worst cell ours ran in place.
    OursFloor {
        op: Operation,
        transport: Transport,
        at_most: f64,
    },
    /// ours over `transport` ÷ libibverbs for `op`, the worst cell.
    OursLibibverbs {
        op: Operation,
        transport: Transport,
        at_most: f64,
    },
}

impl Targets {
    /// The targets of docs/bench-targets.json, or what is wrong with it.
    pub fn load() -> Result<Targets, String> {
        Targets::parse(FILE).map_err(|e| format!("docs/bench-targets.json: {e}"))
    }

    fn parse(text: &str) -> Result<Targets, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// Each target and how `run` did, in the file's order.
    pub fn check(&self, run: &Run) -> Vec<Target> {
        self.targets.iter().map(|c| c.check(run)).collect()
    }
}

impl Check {
    fn check(&self, run: &Run) -> Target {
        use Operation::{RegDereg, ReregAccess};
        let devices = run.devices();
        match self {
            Check::ReregSpeedup {
                device,
                size,
                transport: t,
                at_least,
            } => {
                let dev = devices
                    .iter()
                    .find(|d| d.starts_with(device.as_str()))
                    .cloned()
                    .unwrap_or_else(|| format!("{device}0"));
                let r = run.ratio(
                    &CellKey::ours(&dev, *t, RegDereg),
                    &CellKey::ours(&dev, *t, ReregAccess),
                    *size,
                );
                Target {
                    label: format!(
                        "rereg ACCESS on {dev} ≥ {at_least:.0}× faster than dereg+reg at {} ({t})",
                        size_name(*size)
                    ),
                    measured: r.map(ratio_name).unwrap_or_else(|| "not measured".into()),
                    met: r.map(|r| r >= *at_least),
                }
            }
            Check::OursFloor {
                op,
                transport: t,
                at_most,
            } => {
                let ratios = devices.iter().flat_map(|dev| {
                    let (ours, floor) = (CellKey::ours(dev, *t, *op), CellKey::floor(dev, *t, *op));
                    SIZES.iter().filter_map(move |&z| {
                        run.get(&ours, z)
                            .filter(|r| r.path == Some(ReregPath::InPlace))?;
                        Some((
                            run.ratio(&ours, &floor, z)?,
                            format!("{dev} {}", size_name(z)),
                        ))
                    })
                });
                Worst::target(
                    format!(
                        "ours ÷ floor ≤ {at_most:?} for {} in place ({t})",
                        op.label()
                    ),
                    Worst::of(ratios),
                    *at_most,
                )
            }
            Check::OursLibibverbs {
                op,
                transport: t,
                at_most,
            } => {
                let sizes = if op.is_sized() { SIZES } else { &[0u64][..] };
                let ratios = devices.iter().flat_map(|dev| {
                    let (ours, ibv) = (CellKey::ours(dev, *t, *op), CellKey::libibverbs(dev, *op));
                    sizes.iter().filter_map(move |&z| {
                        let at = if z == 0 {
                            dev.clone()
                        } else {
                            format!("{dev} {}", size_name(z))
                        };
                        Some((run.ratio(&ours, &ibv, z)?, at))
                    })
                });
                Worst::target(
                    format!("ours ({t}) ÷ libibverbs ≤ {at_most:?} for {}", op.label()),
                    Worst::of(ratios),
                    *at_most,
                )
            }
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed file reads, and a broken one is an error that says
    /// where.
    #[test]
    fn the_file_reads_and_errors_are_clear() {
        let t = Targets::load().unwrap();
        assert_eq!(t.targets.len(), 14);
        let e = Targets::parse(
            r#"{"title":"t","note":"n","targets":[{"check":"rereg_speedup","device":"rxe"}]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("missing field `size`"), "{e}");
        let e = Targets::parse(r#"{"title":"t","note":"n","targets":[{"check":"ours_floor","op":"rereg_mw","transport":"ioctl","at_most":1}]}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown op=\"rereg_mw\""), "{e}");
    }

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
