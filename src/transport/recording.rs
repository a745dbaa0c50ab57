//! A fake kernel that records every command: for tests that must prove what
//! was (or was not) sent, and for fault injection.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Mutex;

use super::{RawCommand, Transport, TransportKind};
use crate::error::Errno;
use uverbs_uapi as sys;
use zerocopy::{FromBytes, Immutable, IntoBytes};

/// One command as the transport received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedCommand {
    /// `IB_USER_VERBS_CMD_*`.
    pub code: u32,
    /// The core request bytes.
    pub core_in: Vec<u8>,
    /// The driver-private input bytes.
    pub uhw_in: Vec<u8>,
    /// The size of the core response buffer.
    pub core_out_len: usize,
    /// The size of the driver-private response buffer.
    pub uhw_out_len: usize,
}

impl RecordedCommand {
    /// The core request decoded as `T` (a uapi request struct), or `None`
    /// when fewer than `size_of::<T>()` bytes were recorded. Longer requests
    /// decode their first bytes, as the kernel reads a request.
    ///
    /// `T` must be plain data ([`FromBytes`]: every bit pattern valid), so
    /// no recorded bytes can make an invalid value:
    ///
    /// ```
    /// # use uverbs::transport::RecordedCommand;
    /// let rec = RecordedCommand {
    ///     code: uverbs::uverbs_uapi::IB_USER_VERBS_CMD_DEALLOC_PD,
    ///     core_in: 7u32.to_ne_bytes().to_vec(),
    ///     uhw_in: vec![],
    ///     core_out_len: 0,
    ///     uhw_out_len: 0,
    /// };
    /// let req: Option<uverbs::uverbs_uapi::ib_uverbs_dealloc_pd> = rec.request();
    /// assert_eq!(req.map(|r| r.pd_handle), Some(7));
    /// let wide: Option<u64> = rec.request();
    /// assert_eq!(wide, None, "4 bytes are too short for a u64");
    /// ```
    ///
    /// A reference is not plain data (eight zero bytes would be a null
    /// `&u64`), so asking for one does not compile:
    ///
    /// ```compile_fail,E0277
    /// # use uverbs::transport::RecordedCommand;
    /// # let rec = RecordedCommand {
    /// #     code: 0,
    /// #     core_in: vec![0; 8],
    /// #     uhw_in: vec![],
    /// #     core_out_len: 0,
    /// #     uhw_out_len: 0,
    /// # };
    /// let null: Option<&'static u64> = rec.request();
    /// ```
    pub fn request<T: FromBytes>(&self) -> Option<T> {
        T::read_from_prefix(&self.core_in)
            .ok()
            .map(|(value, _rest)| value)
    }
}

#[derive(Clone, Copy, Debug)]
struct FakeMr {
    pd: u32,
    lkey: u32,
}

#[derive(Debug, Default)]
struct FakeKernel {
    log: Vec<RecordedCommand>,
    failures: HashMap<u32, VecDeque<Errno>>,
    next_handle: u32,
    next_key: u32,
    pds: BTreeSet<u32>,
    mrs: BTreeMap<u32, FakeMr>,
    async_fd: Option<u32>,
}

/// A [`Transport`] that simulates a small, well-behaved uverbs device and
/// records every command it receives.
///
/// It models handles, PD use counts and keys the way rxe does on Linux 6.12
/// for PD and access changes (in place, keys unchanged), accepts translation
/// changes too, and answers like the kernel's core checks: `EINVAL` for
/// `flags == 0` or unknown handles, `EOPNOTSUPP` for unknown flag bits,
/// `EBUSY` for a PD still in use. [`fail_next`](Self::fail_next) injects an
/// errno into the next command with a given code.
#[derive(Debug, Default)]
pub struct RecordingTransport {
    kernel: Mutex<FakeKernel>,
}

impl RecordingTransport {
    /// A fresh fake device with no objects.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes the next command with this code fail with `errno` (queued: call
    /// twice to fail the next two). The failing command is still recorded.
    pub fn fail_next(&self, code: u32, errno: Errno) {
        self.lock()
            .failures
            .entry(code)
            .or_default()
            .push_back(errno);
    }

    /// Makes `GET_CONTEXT` answer this `async_fd` number (default `-1`),
    /// e.g. the number of a descriptor the test owns, to check that the
    /// context does not take it over.
    pub fn answer_async_fd(&self, async_fd: u32) {
        self.lock().async_fd = Some(async_fd);
    }

    /// Every command received so far, in order.
    pub fn commands(&self) -> Vec<RecordedCommand> {
        self.lock().log.clone()
    }

    /// How many commands were received.
    pub fn count(&self) -> usize {
        self.lock().log.len()
    }

    /// How many commands with this code were received.
    pub fn count_of(&self, code: u32) -> usize {
        self.lock().log.iter().filter(|c| c.code == code).count()
    }

    /// Live protection domains in the fake kernel.
    pub fn live_pds(&self) -> usize {
        self.lock().pds.len()
    }

    /// Live memory regions in the fake kernel.
    pub fn live_mrs(&self) -> usize {
        self.lock().mrs.len()
    }

    /// The PD handle a live MR belongs to.
    pub fn mr_pd(&self, mr_handle: u32) -> Option<u32> {
        self.lock().mrs.get(&mr_handle).map(|mr| mr.pd)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FakeKernel> {
        self.kernel
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Writes `value`'s bytes at the start of `out`; `ENOSPC` when it is too small.
fn write_out<T: IntoBytes + Immutable>(out: &mut [u8], value: T) -> Result<(), Errno> {
    value.write_to_prefix(out).map_err(|_| Errno::NOSPC)
}

/// The recorded request as `T`; `ENOSPC` when it is too short, like the
/// kernel's check of a write command's length.
fn request_of<T: FromBytes>(rec: &RecordedCommand) -> Result<T, Errno> {
    rec.request().ok_or(Errno::NOSPC)
}

impl FakeKernel {
    fn handle(&mut self) -> u32 {
        self.next_handle += 1;
        self.next_handle
    }

    fn key(&mut self, handle: u32) -> u32 {
        self.next_key = self.next_key.wrapping_add(0x1d);
        (handle << 8) | (self.next_key & 0xff)
    }

    fn check_access(access: u32) -> Result<(), Errno> {
        let needs_local = sys::IB_UVERBS_ACCESS_REMOTE_WRITE | sys::IB_UVERBS_ACCESS_REMOTE_ATOMIC;
        if access & needs_local != 0 && access & sys::IB_UVERBS_ACCESS_LOCAL_WRITE == 0 {
            return Err(Errno::INVAL);
        }
        Ok(())
    }

    fn answer(&mut self, rec: &RecordedCommand, cmd: &mut RawCommand<'_>) -> Result<(), Errno> {
        match rec.code {
            sys::IB_USER_VERBS_CMD_GET_CONTEXT => {
                // Just a number: a fake installs no descriptor, and the
                // context adopts none from it (`-1` unless a test chose one).
                let resp = sys::ib_uverbs_get_context_resp {
                    async_fd: self.async_fd.unwrap_or(u32::MAX),
                    num_comp_vectors: 1,
                };
                write_out(cmd.core_out, resp)
            }
            sys::IB_USER_VERBS_CMD_QUERY_DEVICE => {
                let resp = sys::ib_uverbs_query_device_resp {
                    fw_ver: 1,
                    max_mr_size: u64::MAX,
                    page_size_cap: 0xffff_f000,
                    max_mr: 1024,
                    max_pd: 64,
                    phys_port_cnt: 1,
                    ..Default::default()
                };
                write_out(cmd.core_out, resp)
            }
            sys::IB_USER_VERBS_CMD_ALLOC_PD => {
                let pd_handle = self.handle();
                self.pds.insert(pd_handle);
                write_out(cmd.core_out, sys::ib_uverbs_alloc_pd_resp { pd_handle })
            }
            sys::IB_USER_VERBS_CMD_DEALLOC_PD => {
                let req: sys::ib_uverbs_dealloc_pd = request_of(rec)?;
                if !self.pds.contains(&req.pd_handle) {
                    return Err(Errno::INVAL);
                }
                if self.mrs.values().any(|mr| mr.pd == req.pd_handle) {
                    return Err(Errno::BUSY);
                }
                self.pds.remove(&req.pd_handle);
                Ok(())
            }
            sys::IB_USER_VERBS_CMD_REG_MR => {
                let req: sys::ib_uverbs_reg_mr = request_of(rec)?;
                if req.start & 0xfff != req.hca_va & 0xfff || req.length == 0 {
                    return Err(Errno::INVAL);
                }
                Self::check_access(req.access_flags)?;
                if !self.pds.contains(&req.pd_handle) {
                    return Err(Errno::INVAL);
                }
                let mr_handle = self.handle();
                let lkey = self.key(mr_handle);
                self.mrs.insert(
                    mr_handle,
                    FakeMr {
                        pd: req.pd_handle,
                        lkey,
                    },
                );
                write_out(
                    cmd.core_out,
                    sys::ib_uverbs_reg_mr_resp {
                        mr_handle,
                        lkey,
                        rkey: lkey,
                    },
                )
            }
            sys::IB_USER_VERBS_CMD_REREG_MR => {
                let req: sys::ib_uverbs_rereg_mr = request_of(rec)?;
                if req.flags == 0 {
                    return Err(Errno::INVAL);
                }
                if req.flags & !7 != 0 {
                    return Err(Errno::OPNOTSUPP);
                }
                let Some(mut mr) = self.mrs.get(&req.mr_handle).copied() else {
                    return Err(Errno::INVAL);
                };
                if req.flags & 4 != 0 {
                    Self::check_access(req.access_flags)?;
                }
                if req.flags & 2 != 0 {
                    if !self.pds.contains(&req.pd_handle) {
                        return Err(Errno::INVAL);
                    }
                    mr.pd = req.pd_handle;
                }
                if req.flags & 1 != 0 {
                    if req.length == 0 || req.start & 0xfff != req.hca_va & 0xfff {
                        return Err(Errno::INVAL);
                    }
                    mr.lkey = self.key(req.mr_handle);
                }
                self.mrs.insert(req.mr_handle, mr);
                write_out(
                    cmd.core_out,
                    sys::ib_uverbs_rereg_mr_resp {
                        lkey: mr.lkey,
                        rkey: mr.lkey,
                    },
                )
            }
            sys::IB_USER_VERBS_CMD_DEREG_MR => {
                let req: sys::ib_uverbs_dereg_mr = request_of(rec)?;
                self.mrs
                    .remove(&req.mr_handle)
                    .map(|_| ())
                    .ok_or(Errno::INVAL)
            }
            _ => Err(Errno::OPNOTSUPP),
        }
    }
}

// SAFETY: commands are answered once, only `core_out` is written (never UHW
// out, so 0 is returned), after zeroing both outputs.
unsafe impl Transport for RecordingTransport {
    fn kind(&self) -> TransportKind {
        TransportKind::Fake
    }

    unsafe fn execute(&self, cmd: &mut RawCommand<'_>) -> Result<usize, Errno> {
        cmd.core_out.fill(0);
        cmd.uhw_out.fill(0);
        let rec = RecordedCommand {
            code: cmd.code,
            core_in: cmd.core_in.to_vec(),
            uhw_in: cmd.uhw_in.to_vec(),
            core_out_len: cmd.core_out.len(),
            uhw_out_len: cmd.uhw_out.len(),
        };
        let mut kernel = self.lock();
        kernel.log.push(rec.clone());
        if let Some(errno) = kernel
            .failures
            .get_mut(&rec.code)
            .and_then(VecDeque::pop_front)
        {
            return Err(errno);
        }
        kernel.answer(&rec, cmd)?;
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(code: u32, core_in: &[u8]) -> RecordedCommand {
        RecordedCommand {
            code,
            core_in: core_in.to_vec(),
            uhw_in: Vec::new(),
            core_out_len: 0,
            uhw_out_len: 0,
        }
    }

    #[test]
    fn request_of_too_few_bytes_is_none() {
        // 36 of REG_MR's 40 bytes: the old decoder asserted (a panic).
        let short = recorded(sys::IB_USER_VERBS_CMD_REG_MR, &[0xa5; 36]);
        assert_eq!(short.request::<sys::ib_uverbs_reg_mr>(), None);
        let empty = recorded(sys::IB_USER_VERBS_CMD_DEREG_MR, &[]);
        assert_eq!(empty.request::<sys::ib_uverbs_dereg_mr>(), None);
        assert_eq!(empty.request::<u64>(), None);
    }

    #[test]
    fn request_decodes_exact_and_longer_bytes() {
        let mut bytes = 0x1234_5678u32.to_ne_bytes().to_vec();
        let exact = recorded(sys::IB_USER_VERBS_CMD_DEREG_MR, &bytes);
        assert_eq!(
            exact.request(),
            Some(sys::ib_uverbs_dereg_mr {
                mr_handle: 0x1234_5678
            })
        );
        bytes.extend_from_slice(&[0xff; 4]);
        let longer = recorded(sys::IB_USER_VERBS_CMD_DEREG_MR, &bytes);
        assert_eq!(
            longer
                .request::<sys::ib_uverbs_dereg_mr>()
                .map(|r| r.mr_handle),
            Some(0x1234_5678)
        );
        // Not 8-aligned in the Vec is fine: the value is copied out.
        let reg = sys::ib_uverbs_reg_mr {
            start: 0x1000,
            length: 0x2000,
            hca_va: 0x1000,
            pd_handle: 3,
            access_flags: 1,
            ..Default::default()
        };
        let mut unaligned = vec![0u8];
        unaligned.extend_from_slice(reg.as_bytes());
        let rec = recorded(sys::IB_USER_VERBS_CMD_REG_MR, &unaligned[1..]);
        assert_eq!(rec.request(), Some(reg));
    }

    /// A raw command whose request is shorter than the kernel struct gets
    /// the kernel's answer, `ENOSPC`, instead of a panic in the fake kernel.
    #[test]
    fn short_request_is_refused_with_enospc() {
        let fake = RecordingTransport::new();
        for code in [
            sys::IB_USER_VERBS_CMD_DEALLOC_PD,
            sys::IB_USER_VERBS_CMD_REG_MR,
            sys::IB_USER_VERBS_CMD_REREG_MR,
            sys::IB_USER_VERBS_CMD_DEREG_MR,
        ] {
            let mut raw = RawCommand {
                code,
                core_in: &[0; 2],
                uhw_in: &[],
                core_out: &mut [],
                uhw_out: &mut [],
            };
            // SAFETY: the fake kernel touches no memory outside `raw`.
            let result = unsafe { fake.execute(&mut raw) };
            assert_eq!(result, Err(Errno::NOSPC), "command {code}");
        }
        assert_eq!(fake.count(), 4, "each refused command is still recorded");
    }

    #[test]
    fn write_out_refuses_a_small_buffer() {
        let resp = sys::ib_uverbs_reg_mr_resp {
            mr_handle: 1,
            lkey: 2,
            rkey: 3,
        };
        let mut small = [0u8; 11];
        assert_eq!(write_out(&mut small, resp), Err(Errno::NOSPC));
        assert_eq!(small, [0; 11], "nothing written on failure");
        let mut fits = [0u8; 12];
        write_out(&mut fits, resp).unwrap();
        assert_eq!(fits, *resp.as_bytes());
    }
}
