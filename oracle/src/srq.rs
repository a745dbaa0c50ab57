//! mlx5_ib's shared receive queues (Linux 6.12,
//! `drivers/infiniband/hw/mlx5/srq.c` and the core's
//! `uverbs_std_types_srq.c`, `uverbs_cmd.c`): CREATE_SRQ as the ioctl
//! method libibverbs 44 sends it and as the write command uverbs sends,
//! both with mlx5's driver data (the WQE buffer and doorbell record the
//! library allocated); MODIFY_SRQ and QUERY_SRQ (write commands);
//! DESTROY_SRQ in both forms. The device's side (taking the WQEs a QP on
//! the SRQ receives into) is here too, for `device.rs`.

use uverbs_uapi::*;
use zerocopy::{FromBytes, IntoBytes};

use crate::ioctl::{Call, Errno};
use crate::kernel::Mlx5Kernel;

/// `1 << log_max_srq_sz` of the emulated device (a ConnectX-5's 2^15).
pub const MAX_SRQ_WQES: u32 = 1 << 15;
/// `max_wqe_sz_rq / sizeof(struct mlx5_wqe_data_seg)`: 512-byte WQEs.
pub const MAX_SRQ_SGE: u32 = 512 / 16;
/// The SRQ numbers handed out start here.
const FIRST_SRQN: u32 = 0x200;
/// `IB_SRQ_MAX_WR` of `ib_srq_attr_mask`.
const SRQ_MAX_WR: u32 = 1;
/// `IB_SRQ_LIMIT`.
const SRQ_LIMIT: u32 = 2;
/// `MLX5_INVALID_LKEY`: ends an SRQ WQE's scatter list.
const INVALID_LKEY: u32 = 0x100;

/// An SRQ the kernel made, and the device's view of its list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Srq {
    /// The uverbs handle.
    pub handle: u32,
    /// The device's SRQ number.
    pub srqn: u32,
    /// The PD (a uverbs handle).
    pub pd: u32,
    /// WQEs in the buffer (`msrq.max`, a power of two).
    pub max: u32,
    /// SGEs per WQE as asked (`msrq.max_gs`).
    pub max_gs: u32,
    /// log2 of a WQE's bytes.
    pub wqe_shift: u32,
    /// What the core received: `max_wr`, `max_sge`, `srq_limit`.
    pub asked: (u32, u32, u32),
    /// The driver data it was created with.
    pub req: mlx5_ib_create_srq,
    /// What its async events carry (`user_handle`).
    pub user_handle: u64,
    /// The armed limit (the firmware's `lwm`); 0 when not armed.
    pub limit: u32,
    /// Limit events raised (the device disarms after each).
    pub limit_events: u32,
    /// The device's consumer counter: WQEs taken.
    pub consumed: u32,
    /// The WQE the device takes next (it follows `next_wqe_index`).
    pub head: u32,
}

impl Srq {
    /// The doorbell record's counter: WQEs posted (16 bits).
    ///
    /// # Safety
    ///
    /// The record the library named is readable.
    pub unsafe fn posted(&self) -> u16 {
        // SAFETY: the caller's promise.
        let b = unsafe { std::slice::from_raw_parts(self.req.db_addr as *const u8, 4) };
        u32::from_be_bytes(b.try_into().expect("4 bytes")) as u16
    }

    /// WQE `n`'s bytes.
    ///
    /// # Safety
    ///
    /// The buffer the library named is readable.
    pub unsafe fn wqe(&self, n: u32) -> &[u8] {
        let size = 1usize << self.wqe_shift;
        let at = ((n & (self.max - 1)) as usize) << self.wqe_shift;
        // SAFETY: the caller's promise; within the buffer of `max` WQEs.
        unsafe { std::slice::from_raw_parts((self.req.buf_addr as usize + at) as *const u8, size) }
    }
}

/// One data segment of an SRQ WQE: byte count, lkey, address.
pub type SrqSge = (u32, u32, u64);

impl Mlx5Kernel {
    /// `mlx5_ib_create_srq` of a user basic SRQ (the sizes' checks, then
    /// `create_srq_user`'s), shared by both forms of the command. Answers
    /// the handle, the `max_wr` and `max_sge` the core copies back, and
    /// the driver answer.
    fn create_srq(
        &mut self,
        pd: u32,
        max_wr: u32,
        max_sge: u32,
        srq_limit: u32,
        user_handle: u64,
        uhw: &[u8],
    ) -> Result<(u32, u32, u32, mlx5_ib_create_srq_resp), Errno> {
        if !self.pds.contains_key(&pd) {
            return Err(libc::EINVAL);
        }
        if max_wr >= MAX_SRQ_WQES || max_sge > MAX_SRQ_SGE {
            return Err(libc::EINVAL);
        }
        let max = (max_wr + 1).next_power_of_two();
        let desc = (16 + max_sge * 16).next_power_of_two().max(32);
        // create_srq_user: the request up to its size; reserved words
        // zero; anything past it zero.
        let mut req = mlx5_ib_create_srq::default();
        let n = uhw.len().min(size_of::<mlx5_ib_create_srq>());
        req.as_mut_bytes()[..n].copy_from_slice(&uhw[..n]);
        if req.reserved0 != 0 || req.reserved1 != 0 {
            return Err(libc::EINVAL);
        }
        if uhw.len() > n && uhw[n..].iter().any(|&b| b != 0) {
            return Err(libc::EINVAL);
        }
        // A basic SRQ: no user index is read (get_srq_user_index is for
        // XRC and tag matching). ib_umem_get of the buffer, the doorbell
        // record's page.
        if req.buf_addr == 0 || req.db_addr == 0 || req.db_addr % 4 != 0 {
            return Err(libc::EFAULT);
        }
        let handle = self.handle();
        let srqn = FIRST_SRQN + self.srqs_created;
        self.srqs_created += 1;
        self.srqs.insert(
            handle,
            Srq {
                handle,
                srqn,
                pd,
                max,
                max_gs: max_sge,
                wqe_shift: desc.trailing_zeros(),
                asked: (max_wr, max_sge, srq_limit),
                req,
                user_handle,
                // mlx5_ib_create_srq does not pass the limit asked at
                // create to the firmware: not armed.
                limit: 0,
                limit_events: 0,
                consumed: 0,
                head: 0,
            },
        );
        Ok((
            handle,
            max - 1,
            max_sge,
            mlx5_ib_create_srq_resp { srqn, reserved: 0 },
        ))
    }

    /// `UVERBS_METHOD_SRQ_CREATE` (what libibverbs 44 sends first).
    pub(crate) fn create_srq_method(&mut self, call: &mut Call) -> Result<(), Errno> {
        let get = |id| call.input_u64(id).ok_or(libc::EINVAL);
        let (max_sge, max_wr) = (
            get(UVERBS_ATTR_CREATE_SRQ_MAX_SGE)? as u32,
            get(UVERBS_ATTR_CREATE_SRQ_MAX_WR)? as u32,
        );
        let limit = get(UVERBS_ATTR_CREATE_SRQ_LIMIT)? as u32;
        let user_handle = get(UVERBS_ATTR_CREATE_SRQ_USER_HANDLE)?;
        // IB_UVERBS_SRQT_BASIC only (XRC and tag matching: not modelled).
        if call.input_u64(UVERBS_ATTR_CREATE_SRQ_TYPE).unwrap_or(0) != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        let pd = call
            .handle(UVERBS_ATTR_CREATE_SRQ_PD_HANDLE)
            .ok_or(libc::EINVAL)? as u32;
        let uhw = call.input(UVERBS_ATTR_UHW_IN).unwrap_or_default();
        let (handle, max_wr, max_sge, resp) =
            self.create_srq(pd, max_wr, max_sge, limit, user_handle, &uhw)?;
        call.set_data(UVERBS_ATTR_CREATE_SRQ_HANDLE, u64::from(handle))?;
        call.write_output(UVERBS_ATTR_CREATE_SRQ_RESP_MAX_WR, &max_wr.to_le_bytes())?;
        call.write_output(UVERBS_ATTR_CREATE_SRQ_RESP_MAX_SGE, &max_sge.to_le_bytes())?;
        write_uhw(call, resp.as_bytes())
    }

    /// The write command CREATE_SRQ (`ib_uverbs_create_srq`).
    pub(crate) fn create_srq_write(&mut self, call: &mut Call) -> Result<(), Errno> {
        let cmd: ib_uverbs_create_srq = core_in(call)?;
        let uhw = call.input(UVERBS_ATTR_UHW_IN).unwrap_or_default();
        let (handle, max_wr, max_sge, resp) = self.create_srq(
            cmd.pd_handle,
            cmd.max_wr,
            cmd.max_sge,
            cmd.srq_limit,
            cmd.user_handle,
            &uhw,
        )?;
        let core = ib_uverbs_create_srq_resp {
            srq_handle: handle,
            max_wr,
            max_sge,
            srqn: 0,
        };
        call.write_output(UVERBS_ATTR_CORE_OUT, core.as_bytes())?;
        write_uhw(call, resp.as_bytes())
    }

    /// The write command MODIFY_SRQ and `mlx5_ib_modify_srq`: no resize;
    /// a limit below the SRQ's WQEs arms it.
    pub(crate) fn modify_srq(&mut self, call: &mut Call) -> Result<(), Errno> {
        let cmd: ib_uverbs_modify_srq = core_in(call)?;
        let srq = self.srqs.get_mut(&cmd.srq_handle).ok_or(libc::EINVAL)?;
        if cmd.attr_mask & SRQ_MAX_WR != 0 {
            return Err(libc::EINVAL);
        }
        if cmd.attr_mask & SRQ_LIMIT != 0 {
            if cmd.srq_limit >= srq.max {
                return Err(libc::EINVAL);
            }
            srq.limit = cmd.srq_limit;
        }
        Ok(())
    }

    /// The write command QUERY_SRQ and `mlx5_ib_query_srq`.
    pub(crate) fn query_srq(&mut self, call: &mut Call) -> Result<(), Errno> {
        let cmd: ib_uverbs_query_srq = core_in(call)?;
        let srq = self.srqs.get(&cmd.srq_handle).ok_or(libc::EINVAL)?;
        let resp = ib_uverbs_query_srq_resp {
            max_wr: srq.max - 1,
            max_sge: srq.max_gs,
            srq_limit: srq.limit,
            reserved: 0,
        };
        call.write_output(UVERBS_ATTR_CORE_OUT, resp.as_bytes())
    }

    /// DESTROY_SRQ of `handle` (either form): `EBUSY` while a QP uses it.
    fn destroy_srq(&mut self, handle: u32) -> Result<(), Errno> {
        if !self.srqs.contains_key(&handle) {
            return Err(libc::EINVAL);
        }
        if self.qps.values().any(|q| q.srq == Some(handle)) {
            return Err(libc::EBUSY);
        }
        self.srqs.remove(&handle);
        Ok(())
    }

    /// `UVERBS_METHOD_SRQ_DESTROY`: no events were reported.
    pub(crate) fn destroy_srq_method(&mut self, call: &mut Call) -> Result<(), Errno> {
        let handle = call
            .handle(UVERBS_ATTR_DESTROY_SRQ_HANDLE)
            .ok_or(libc::EINVAL)?;
        self.destroy_srq(handle as u32)?;
        let resp = ib_uverbs_destroy_srq_resp::default();
        call.write_output(UVERBS_ATTR_DESTROY_SRQ_RESP, resp.as_bytes())
    }

    /// The write command DESTROY_SRQ.
    pub(crate) fn destroy_srq_write(&mut self, call: &mut Call) -> Result<(), Errno> {
        let cmd: ib_uverbs_destroy_srq = core_in(call)?;
        self.destroy_srq(cmd.srq_handle)?;
        let resp = ib_uverbs_destroy_srq_resp::default();
        call.write_output(UVERBS_ATTR_CORE_OUT, resp.as_bytes())
    }

    /// The device: whether SRQ `handle` has a posted WQE it has not taken.
    ///
    /// # Safety
    ///
    /// The SRQ's doorbell record is readable.
    pub(crate) unsafe fn srq_ready(&self, handle: u32) -> bool {
        let Some(srq) = self.srqs.get(&handle) else {
            return false;
        };
        // SAFETY: the caller's promise.
        unsafe { srq.posted() != srq.consumed as u16 }
    }

    /// The device takes SRQ `handle`'s next WQE: its index (the CQE's
    /// `wqe_counter`) and data segments up to an invalid lkey; the next
    /// one is the WQE its `next_wqe_index` names. Past the limit the SRQ
    /// raises its event and is disarmed.
    ///
    /// # Safety
    ///
    /// The SRQ's buffer and doorbell record are readable, and
    /// [`srq_ready`](Self::srq_ready).
    pub(crate) unsafe fn srq_take(&mut self, handle: u32) -> (u16, Vec<SrqSge>) {
        let srq = self.srqs.get_mut(&handle).expect("a live SRQ");
        let index = srq.head;
        // SAFETY: the caller's promise.
        let wqe = unsafe { srq.wqe(index) }.to_vec();
        let be32 = |b: &[u8]| u32::from_be_bytes(b.try_into().expect("4 bytes"));
        let sges = wqe[16..]
            .chunks_exact(16)
            .take(srq.max_gs as usize)
            .map(|s| {
                (
                    be32(&s[..4]),
                    be32(&s[4..8]),
                    u64::from_be_bytes(s[8..].try_into().expect("8 bytes")),
                )
            })
            .take_while(|s| s.1 != INVALID_LKEY)
            .collect();
        srq.head = u32::from(u16::from_be_bytes([wqe[2], wqe[3]]));
        srq.consumed = srq.consumed.wrapping_add(1);
        // SAFETY: the caller's promise.
        let left = unsafe { srq.posted() }.wrapping_sub(srq.consumed as u16);
        if srq.limit != 0 && u32::from(left) < srq.limit {
            srq.limit = 0;
            srq.limit_events += 1;
        }
        (index as u16, sges)
    }
}

/// The core request of a write command, as `T`.
fn core_in<T: FromBytes>(call: &Call) -> Result<T, Errno> {
    let input = call.input(UVERBS_ATTR_CORE_IN).ok_or(libc::EINVAL)?;
    T::read_from_prefix(&input)
        .map(|(t, _)| t)
        .map_err(|_| libc::EINVAL)
}

/// `ib_copy_to_udata` of `min(outlen, sizeof)` bytes of the driver answer.
fn write_uhw(call: &mut Call, bytes: &[u8]) -> Result<(), Errno> {
    let room = call.output_len(UVERBS_ATTR_UHW_OUT).unwrap_or(0);
    if room == 0 {
        return Ok(());
    }
    call.write_output(UVERBS_ATTR_UHW_OUT, &bytes[..room.min(bytes.len())])
}
