//! How the report writes numbers (sizes, latencies, ratios), lists and
//! what the console left out.

/// `items` without repeats, in first-seen order (the report lists
/// devices, cells and groups in the order the console printed them).
pub fn distinct<T: PartialEq>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut out = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

/// `text`, or `instead` where it is empty (the console did not say).
pub fn or_if_empty<'a>(text: &'a str, instead: &'a str) -> &'a str {
    if text.is_empty() {
        instead
    } else {
        text
    }
}

/// `4 KiB`, `256 MiB`.
pub fn size_name(size: u64) -> String {
    match size {
        0 => "—".into(),
        s if s >= 1 << 30 && s % (1 << 30) == 0 => format!("{} GiB", s >> 30),
        s if s >= 1 << 20 && s % (1 << 20) == 0 => format!("{} MiB", s >> 20),
        s if s >= 1 << 10 && s % (1 << 10) == 0 => format!("{} KiB", s >> 10),
        s => format!("{s} B"),
    }
}

/// A latency in readable units (3 significant digits).
pub fn time_name(ns: f64) -> String {
    let (v, unit) = if ns >= 1e9 {
        (ns / 1e9, "s")
    } else if ns >= 1e6 {
        (ns / 1e6, "ms")
    } else if ns >= 1e3 {
        (ns / 1e3, "µs")
    } else {
        (ns, "ns")
    };
    let digits = if v >= 100.0 {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.digits$} {unit}")
}

/// `10^d` ns as a round label: `1 µs`, `100 ms`.
pub fn decade_name(d: i32) -> String {
    let units = ["ns", "µs", "ms", "s"];
    let u = (d.max(0) / 3).min(3);
    format!(
        "{} {}",
        10u64.pow((d - u * 3).max(0) as u32),
        units[u as usize]
    )
}

/// A ratio with 3 significant digits: `1.05×`, `31.4×`, `1041×`.
pub fn ratio_name(r: f64) -> String {
    if r >= 100.0 {
        format!("{r:.0}×")
    } else if r >= 10.0 {
        format!("{r:.1}×")
    } else {
        format!("{r:.2}×")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(size_name(4096), "4 KiB");
        assert_eq!(size_name(256 << 20), "256 MiB");
        assert_eq!(size_name(0), "—");
        assert_eq!(time_name(4_900.0), "4.90 µs");
        assert_eq!(time_name(123_456_789.0), "123 ms");
        assert_eq!(decade_name(3), "1 µs");
        assert_eq!(decade_name(5), "100 µs");
        assert_eq!(decade_name(7), "10 ms");
        assert_eq!(ratio_name(1.048), "1.05×");
        assert_eq!(ratio_name(1041.2), "1041×");
    }
}
