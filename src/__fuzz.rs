//! Thin entry points to the crate's private parsers, for the fuzz targets in
//! `fuzz/` (a separate crate). Only compiled with the `fuzzing` feature; not
//! part of the API and not covered by semver.
//!
//! Each function forwards to the parser the library itself uses, converting
//! crate-private result types into public ones and nothing else, so that a
//! fuzz target exercises exactly the code that reads kernel bytes.

use std::io;

/// RDMA netlink reply parsing (`src/netlink.rs`).
pub mod netlink {
    use super::io;
    use crate::netlink as nl;

    /// What a `GET_CHARDEV` reply reported (`ChardevInfo`).
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub struct Chardev {
        /// `RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID`.
        pub driver_id: Option<u32>,
        /// `(major, minor)` from `RDMA_NLDEV_ATTR_CHARDEV`.
        pub dev: Option<(u32, u32)>,
        /// `RDMA_NLDEV_ATTR_CHARDEV_ABI`.
        pub abi: Option<u64>,
        /// `RDMA_NLDEV_ATTR_CHARDEV_NAME`.
        pub name: Option<String>,
    }

    /// A message payload split into `(type, value)` attributes.
    pub fn parse_attrs(payload: &[u8]) -> io::Result<Vec<(u16, &[u8])>> {
        nl::parse_attrs(payload)
    }

    /// A `GET_CHARDEV` reply payload.
    pub fn parse_chardev(payload: &[u8]) -> io::Result<Chardev> {
        nl::parse_chardev(payload).map(|i| Chardev {
            driver_id: i.driver_id,
            dev: i.dev,
            abi: i.abi,
            name: i.name,
        })
    }

    /// One device of a `GET` dump: `(index, name)`.
    pub fn parse_device(payload: &[u8]) -> io::Result<(Option<u32>, Option<String>)> {
        nl::parse_device(payload)
    }

    /// A `SYS_GET` reply payload: the copy-on-fork attribute, if present.
    pub fn parse_copy_on_fork(payload: &[u8]) -> io::Result<Option<bool>> {
        nl::parse_copy_on_fork(payload)
    }

    /// `huge_decode_dev`: the kernel's 64-bit device number as `(major, minor)`.
    pub fn huge_decode_dev(v: u64) -> (u32, u32) {
        nl::huge_decode_dev(v)
    }

    /// The reply state machine of one request with sequence number `seq`.
    pub struct ReplyReader(nl::ReplyReader);

    impl ReplyReader {
        /// A reader waiting for the reply to request `seq`.
        pub fn new(seq: u32) -> Self {
            ReplyReader(nl::ReplyReader::new(seq))
        }

        /// Feeds one datagram; data message payloads go to `on_msg`.
        /// `Ok(true)` when the reply is complete, `Ok(false)` when more
        /// datagrams are expected.
        pub fn feed(
            &mut self,
            datagram: &[u8],
            on_msg: &mut dyn FnMut(&[u8]) -> io::Result<()>,
        ) -> io::Result<bool> {
            self.0
                .feed(datagram, on_msg)
                .map(|p| p == nl::Progress::Done)
        }
    }
}

/// sysfs attribute parsing (`src/device.rs`).
pub mod sysfs {
    /// A decimal `u32` as the kernel prints one (`%u`), strictly.
    pub fn parse_decimal(text: &str) -> Option<u32> {
        crate::device::parse_decimal(text)
    }

    /// `MAJOR:MINOR` of a sysfs `dev` file (its newline already removed).
    pub fn parse_dev(text: &str) -> Option<(u32, u32)> {
        crate::device::parse_dev(text)
    }
}

/// `/proc/self/smaps` parsing (`src/fork/ranges.rs`).
pub mod smaps {
    /// The `KernelPageSize` of the mapping containing `addr`, in bytes.
    pub fn parse_kernel_page_size(smaps: &str, addr: usize) -> Option<usize> {
        crate::fork::ranges::parse_kernel_page_size(smaps, addr)
    }

    /// A mapping header line's `start-end` range.
    pub fn mapping_header(line: &str) -> Option<(usize, usize)> {
        crate::fork::ranges::mapping_header(line)
    }
}
