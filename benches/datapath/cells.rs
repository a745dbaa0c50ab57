//! The data-path cells: which device and connection, which test, size and
//! queue depth, and the parameters both implementations get.

/// How the two QPs of a cell are connected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conn {
    /// RoCE loopback by hand (GID index 0), the out-of-band exchange over
    /// TCP on 127.0.0.1: perftest without `-R`.
    Loopback,
    /// The rdma_cm at this address (perftest's `-R`).
    Cm(&'static str),
}

impl Conn {
    pub fn name(self) -> &'static str {
        match self {
            Conn::Loopback => "loopback",
            Conn::Cm(_) => "cm",
        }
    }
}

pub use crate::test_kind::Test;

/// One cell: everything both implementations are given.
#[derive(Clone, Copy, Debug)]
pub struct Cell {
    pub device: &'static str,
    pub conn: Conn,
    pub test: Test,
    pub size: usize,
    /// Requests outstanding (perftest's tx depth `-t`); 1 for latency.
    pub qd: usize,
    /// Sends of up to this many bytes go inline (perftest's `-I`); the
    /// same value for both, so both inline exactly the same messages.
    pub inline: usize,
    /// Iterations per run (perftest's `-n`).
    pub iters: usize,
}

impl Cell {
    /// The cell's fields in a result line.
    pub fn fields(&self) -> serde_json::Value {
        serde_json::json!({
            "device": self.device,
            "conn": self.conn.name(),
            "test": self.test.name(),
            "size": self.size,
            "qd": self.qd,
            "inline": self.inline,
            "iters": self.iters,
        })
    }

    /// The words identifying the cell (`UVERBS_DP_ONLY` picks by them).
    pub fn key(&self) -> String {
        format!(
            "device={} conn={} test={} size={} qd={} inline={} iters={}",
            self.device,
            self.conn.name(),
            self.test.name(),
            self.size,
            self.qd,
            self.inline,
            self.iters
        )
    }
}

/// Where the cells run: rxe0 by hand and over the cm, siw0 over the cm
/// (iWARP connects no other way), at the guest's per-device addresses.
pub const TARGETS: [(&str, Conn); 3] = [
    ("rxe0", Conn::Loopback),
    ("rxe0", Conn::Cm("192.0.2.1")),
    ("siw0", Conn::Cm("198.51.100.1")),
];

/// Latency sizes: 2 B to 64 KiB, powers of 4 from 2, and 64 KiB.
pub const LAT_SIZES: [usize; 9] = [2, 8, 32, 128, 512, 2048, 8192, 32768, 65536];
/// Bandwidth sizes: 4 KiB to 1 MiB, powers of 4.
pub const BW_SIZES: [usize; 5] = [4096, 16384, 65536, 262144, 1 << 20];
/// Bandwidth queue depths.
pub const BW_DEPTHS: [usize; 2] = [1, 64];
/// What the latency cells send inline: nothing. perftest 4.5 inlines (220 B
/// for write_lat, 236 for send_lat) only on devices it recognises, and rxe
/// and siw are not among them (`ctx_set_max_inline`: 0 for an unknown
/// device, whatever `-I` says), so "inline where both allow" is never.
/// Our `perf` is told 0 too.
pub const LAT_INLINE: usize = 0;

/// Iterations per run: latency `lat_iters`; bandwidth enough for about
/// `bw_bytes` but between 32 and 1000.
pub fn iterations(test: Test, size: usize, lat_iters: usize, bw_bytes: usize) -> usize {
    if test.is_lat() {
        lat_iters
    } else {
        (bw_bytes / size).clamp(32, 1000)
    }
}

/// Every cell, in run order, narrowed by `keep`.
pub fn all(lat_iters: usize, bw_bytes: usize, keep: impl Fn(&Cell) -> bool) -> Vec<Cell> {
    let mut cells = Vec::new();
    for (device, conn) in TARGETS {
        for test in Test::ALL {
            let (sizes, depths, inline): (&[usize], &[usize], usize) = if test.is_lat() {
                // READ carries no inline data.
                let inline = if test == Test::ReadLat { 0 } else { LAT_INLINE };
                (&LAT_SIZES, &[1], inline)
            } else {
                (&BW_SIZES, &BW_DEPTHS, 0)
            };
            for &size in sizes {
                for &qd in depths {
                    let cell = Cell {
                        device,
                        conn,
                        test,
                        size,
                        qd,
                        inline,
                        iters: iterations(test, size, lat_iters, bw_bytes),
                    };
                    if keep(&cell) {
                        cells.push(cell);
                    }
                }
            }
        }
    }
    cells
}
