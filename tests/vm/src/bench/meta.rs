//! Facts about the machine and the run, for the report's header.

use crate::util::run_captured;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

/// What the report's header says about the host, the guest and the run.
pub struct Meta {
    /// `YYYY-MM-DD HH:MM UTC`.
    pub date: String,
    /// The host CPU's model name.
    pub host_cpu: String,
    /// Cores available to the host process.
    pub host_cores: usize,
    /// The host kernel release.
    pub host_kernel: String,
    /// `qemu-system-x86_64 --version`'s first line.
    pub qemu: String,
    /// `rustc --version`.
    pub rustc: String,
    /// The Debian version of libibverbs-dev.
    pub libibverbs: String,
    /// Seconds of qemu; `None` when regenerated from a saved log.
    pub vm_secs: Option<f64>,
    /// Seconds of the whole `cargo vm bench`.
    pub total_secs: f64,
}

fn first_line(cmd: &mut Command) -> String {
    run_captured("bench: version", cmd)
        .ok()
        .and_then(|s| s.lines().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

impl Meta {
    /// Asks the host (`/proc`, rustc) now; `qemu` and `libibverbs` are the
    /// versions of the harness's unpacked qemu and libibverbs-dev.
    pub fn collect(
        qemu: String,
        libibverbs: String,
        vm_secs: Option<f64>,
        total_secs: f64,
    ) -> Meta {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let host_cpu = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
            .unwrap_or_else(|| "unknown CPU".into());
        Meta {
            date: utc_now(),
            host_cpu,
            host_cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            host_kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            qemu,
            rustc: first_line(Command::new("rustc").arg("--version")),
            libibverbs,
            vm_secs,
            total_secs,
        }
    }
}

/// Today's UTC date and time, `YYYY-MM-DD HH:MM UTC`.
fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    civil_time(secs)
}

/// Seconds since the epoch as `YYYY-MM-DD HH:MM UTC`.
fn civil_time(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(civil_time(0), "1970-01-01 00:00 UTC");
        assert_eq!(
            civil_time(951_782_400 + 3_600 + 120),
            "2000-02-29 01:02 UTC"
        );
        assert_eq!(civil_time(1_798_588_800), "2026-12-30 00:00 UTC");
        assert!(utc_now().ends_with("UTC"));
    }
}
