//! mlx5_ib's side of the commands a verbs data path sends, as Linux 6.12
//! answers them (`drivers/infiniband/hw/mlx5/main.c`, `cq.c`; QPs in
//! [`crate::qp`], SRQs in [`crate::srq`]), for one
//! device of one port, and a log of every command with its driver data.
//!
//! What it does not have it refuses as a kernel without it would: DEVX
//! (`EPERM`, a user without `CAP_NET_RAW`), the extended and plain
//! QUERY_DEVICE (`EOPNOTSUPP`, which libibverbs tolerates at open), every
//! other object (`EOPNOTSUPP`).

use std::collections::{BTreeMap, BTreeSet};

use uverbs_uapi::*;
use zerocopy::{FromBytes, IntoBytes};

use crate::ioctl::{Call, Errno};
use crate::qp::Qp;
use crate::srq::Srq;

/// Blue-flame registers per UAR page (`MLX5_NON_FP_BFREGS_PER_UAR`).
pub const BFREGS_PER_UAR: u32 = 2;
/// The most blue-flame registers a context may ask for here (the device's
/// UARs, `calc_total_bfregs`).
pub const MAX_BFREGS: u32 = 512;
/// Bytes of a UAR page (`MLX5_ADAPTER_PAGE_SIZE`) and of a system page here.
pub const UAR_PAGE: usize = 4096;
/// The first page offset of the mmap entries the kernel hands out
/// (`MLX5_IB_MMAP_OFFSET_START << 16`).
const FIRST_ENTRY_PGOFF: u64 = 9 << 16;
/// The device's UAR index of the first page allocated on demand.
const FIRST_DYN_UAR: u32 = 0x20;
/// The PD numbers handed out start here (any 24-bit value would do).
const FIRST_PDN: u32 = 0x42;
/// The CQ numbers handed out start here.
const FIRST_CQN: u32 = 0x80;

/// One command as the kernel received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    /// `UVERBS_OBJECT_*` (mlx5's from 0x1000).
    pub object: u16,
    /// The method of the object.
    pub method: u16,
    /// The write command an `INVOKE_WRITE` carries.
    pub write_cmd: Option<u32>,
    /// The core request of a write command (`UVERBS_ATTR_CORE_IN`),
    /// empty if none.
    pub core_in: Vec<u8>,
    /// The driver's input (`UVERBS_ATTR_UHW_IN`), empty if none.
    pub uhw_in: Vec<u8>,
    /// The room for the driver's answer (`UVERBS_ATTR_UHW_OUT`), 0 if none.
    pub uhw_out_len: usize,
    /// 0, or the errno it was refused with.
    pub errno: Errno,
    /// The ioctl's header and attributes as the caller laid them out,
    /// before the answer (the bytes libibverbs and uverbs must agree on).
    pub frame: Vec<u8>,
}

/// A CQ the kernel made: where its CQEs and doorbell record are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cq {
    /// The uverbs handle.
    pub handle: u32,
    /// The device's CQ number.
    pub cqn: u32,
    /// Its entries (a power of two).
    pub entries: u32,
    /// The driver data it was created with.
    pub req: mlx5_ib_create_cq,
    /// CQEs the device has written (its producer counter).
    pub produced: u32,
    /// The completion channel its events go to (the read end's number).
    pub channel: Option<i32>,
    /// What its events carry (`user_handle`).
    pub user_handle: u64,
    /// The CQ doorbell (arm word and CQ number) that fired the last
    /// event: the CQ is armed again only by a different one (a new
    /// sequence number, as after each event read).
    pub fired_arm: u64,
}

/// A memory region the kernel registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mr {
    /// The PD it is in (a uverbs handle).
    pub pd: u32,
    /// Its range.
    pub start: u64,
    /// Its length.
    pub length: u64,
    /// `IB_ACCESS_*`.
    pub access: u32,
    /// Its keys (one value for both, as mlx5's mkeys).
    pub key: u32,
    /// Whether its pinned pages are writable (`ib_umem::writable`).
    pub writable: bool,
}

/// `ib_access_writable`: access that needs the pages pinned writable.
fn access_writable(access: u32) -> bool {
    access
        & (IB_UVERBS_ACCESS_LOCAL_WRITE
            | IB_UVERBS_ACCESS_REMOTE_WRITE
            | IB_UVERBS_ACCESS_REMOTE_ATOMIC
            | IB_UVERBS_ACCESS_MW_BIND)
        != 0
}

/// `ib_check_mr_access` for a device without on-demand paging or flush.
fn check_mr_access(access: u32) -> Result<(), Errno> {
    let needs_local_write = IB_UVERBS_ACCESS_REMOTE_ATOMIC | IB_UVERBS_ACCESS_REMOTE_WRITE;
    if access & needs_local_write != 0 && access & IB_UVERBS_ACCESS_LOCAL_WRITE == 0 {
        return Err(libc::EINVAL);
    }
    // IB_ACCESS_SUPPORTED: up to HUGETLB, and the flush bits.
    let supported = ((IB_UVERBS_ACCESS_HUGETLB << 1) - 1)
        | IB_UVERBS_ACCESS_FLUSH_GLOBAL
        | IB_UVERBS_ACCESS_FLUSH_PERSISTENT;
    if access & !supported & !IB_UVERBS_ACCESS_OPTIONAL_RANGE != 0 {
        return Err(libc::EINVAL);
    }
    if access
        & (IB_UVERBS_ACCESS_ON_DEMAND
            | IB_UVERBS_ACCESS_FLUSH_GLOBAL
            | IB_UVERBS_ACCESS_FLUSH_PERSISTENT)
        != 0
    {
        return Err(libc::EOPNOTSUPP);
    }
    Ok(())
}

/// A UAR page a context allocated (`MLX5_IB_OBJECT_UAR`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DynUar {
    /// The uverbs handle.
    pub handle: u32,
    /// `MLX5_IB_UAPI_UAR_ALLOC_TYPE_*`.
    pub alloc_type: u32,
    /// The device's index of the page.
    pub page_id: u32,
    /// Where it is mapped (bytes), as answered.
    pub mmap_offset: u64,
}

/// A UAR page mapped from the uverbs file.
#[derive(Debug)]
pub struct Uar {
    /// The mmap offset (`command << 8 | index`, in pages).
    pub offset: u64,
    /// The page's memory (a ConnectX's doorbell registers; here a memfd,
    /// so that uverbs' `map_queue` can map the same page a second time,
    /// as the kernel's mmap does).
    pub memfd: std::fs::File,
    /// The emulation's own mapping of it, which libmlx5's wrapped `mmap`
    /// answers and the tests read back.
    pub page: memmap2::MmapMut,
}

/// The emulated driver's state.
#[derive(Debug, Default)]
pub struct Mlx5Kernel {
    next_handle: u32,
    /// Every command, in order.
    pub log: Vec<Command>,
    /// The context's request, once GET_CONTEXT succeeded.
    pub context: Option<mlx5_ib_alloc_ucontext_req_v2>,
    /// The blue-flame registers GET_CONTEXT gave (0 with dynamic UARs).
    pub tot_bfregs: u32,
    /// UAR pages allocated on demand, by handle.
    pub dyn_uars: BTreeMap<u32, DynUar>,
    next_entry: u64,
    /// What the close of the uverbs file found still alive (PDs, CQs, UAR
    /// objects), once closed.
    pub closed: Option<(usize, usize, usize)>,
    /// Live PDs: handle to PD number.
    pub pds: BTreeMap<u32, u32>,
    /// Live CQs by handle.
    pub cqs: BTreeMap<u32, Cq>,
    /// Live MRs by handle.
    pub mrs: BTreeMap<u32, Mr>,
    next_key: u32,
    /// The errno the next REREG_MR that reaches the driver fails with
    /// (after the core's checks), to see both libraries handle a refusal.
    pub fail_next_rereg: Option<Errno>,
    /// Mapped UAR pages.
    pub uars: Vec<Uar>,
    /// Async event files handed out (eventfds), still open.
    pub async_fds: BTreeSet<i32>,
    /// Live QPs by handle.
    pub qps: BTreeMap<u32, Qp>,
    /// QPs created so far (the next QP number's offset).
    pub(crate) qps_created: u32,
    /// Live SRQs by handle.
    pub srqs: BTreeMap<u32, Srq>,
    /// SRQs created so far (the next SRQ number's offset).
    pub(crate) srqs_created: u32,
    /// Answer the SRQ object's ioctl methods `EPROTONOSUPPORT`, as a
    /// kernel without them (before 5.x): libibverbs then sends CREATE_SRQ
    /// and DESTROY_SRQ as write commands, as uverbs does, and the two
    /// can be compared frame for frame.
    pub srq_methods_absent: bool,
    /// Port 1's link layer is InfiniBand (LID 1) rather than Ethernet
    /// (RoCE, the default): set before the context is opened. UD over
    /// InfiniBand needs no kernel command for an address handle and no GID.
    pub infiniband_port: bool,
    /// Completion channels: the write end of each one's pipe, by the
    /// number of its read end (which the caller adopts).
    pub channels: BTreeMap<i32, std::os::fd::OwnedFd>,
    /// The core has Linux 6.17's `UVERBS_METHOD_REG_MR` (set before use);
    /// without it the method is unknown, `EPROTONOSUPPORT`, as on 6.12.
    pub reg_mr_method: bool,
}

impl Mlx5Kernel {
    /// Answers one `RDMA_VERBS_IOCTL`, logging it.
    pub fn ioctl(&mut self, call: &mut Call) -> Result<(), Errno> {
        let write_cmd = (call.object() == UVERBS_OBJECT_DEVICE
            && call.method() == UVERBS_METHOD_INVOKE_WRITE)
            .then(|| call.input_u64(UVERBS_ATTR_WRITE_CMD).unwrap_or(u64::MAX) as u32);
        let core_in = match write_cmd {
            Some(_) => call.input(UVERBS_ATTR_CORE_IN).unwrap_or_default(),
            None => Vec::new(),
        };
        let uhw_in = call.input(UVERBS_ATTR_UHW_IN).unwrap_or_default();
        let uhw_out_len = call.output_len(UVERBS_ATTR_UHW_OUT).unwrap_or(0);
        let frame = call.frame_bytes();
        let result = if call.driver_id() != RDMA_DRIVER_MLX5 {
            Err(libc::EINVAL)
        } else {
            self.dispatch(call, write_cmd)
        };
        self.log.push(Command {
            object: call.object(),
            method: call.method(),
            write_cmd,
            core_in,
            uhw_in,
            uhw_out_len,
            errno: result.err().unwrap_or(0),
            frame,
        });
        result
    }

    fn dispatch(&mut self, call: &mut Call, write_cmd: Option<u32>) -> Result<(), Errno> {
        match (call.object(), call.method()) {
            (UVERBS_OBJECT_DEVICE, UVERBS_METHOD_INVOKE_WRITE) => {
                self.invoke_write(call, write_cmd.unwrap_or(u32::MAX))
            }
            (UVERBS_OBJECT_DEVICE, UVERBS_METHOD_GET_CONTEXT) => self.get_context(call, false),
            (UVERBS_OBJECT_DEVICE, UVERBS_METHOD_QUERY_PORT) => {
                query_port(call, self.infiniband_port)
            }
            (UVERBS_OBJECT_QP, UVERBS_METHOD_QP_CREATE) => self.create_qp(call),
            (UVERBS_OBJECT_QP, UVERBS_METHOD_QP_DESTROY) => self.destroy_qp(call),
            (UVERBS_OBJECT_SRQ, _) if self.srq_methods_absent => Err(libc::EPROTONOSUPPORT),
            (UVERBS_OBJECT_SRQ, UVERBS_METHOD_SRQ_CREATE) => self.create_srq_method(call),
            (UVERBS_OBJECT_SRQ, UVERBS_METHOD_SRQ_DESTROY) => self.destroy_srq_method(call),
            (UVERBS_OBJECT_ASYNC_EVENT, UVERBS_METHOD_ASYNC_EVENT_ALLOC) => {
                // SAFETY: eventfd(2) takes no pointers.
                let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
                if fd < 0 {
                    return Err(libc::EMFILE);
                }
                self.async_fds.insert(fd);
                call.set_data(UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE, fd as u64)
            }
            (UVERBS_OBJECT_PD, UVERBS_METHOD_PD_DESTROY) => {
                destroy(&mut self.pds, call, UVERBS_ATTR_DESTROY_PD_HANDLE).map(drop)
            }
            (UVERBS_OBJECT_MR, UVERBS_METHOD_MR_DESTROY) => {
                destroy(&mut self.mrs, call, UVERBS_ATTR_DESTROY_MR_HANDLE).map(drop)
            }
            (UVERBS_OBJECT_MR, UVERBS_METHOD_REG_DMABUF_MR) => self.reg_dmabuf_mr(call),
            (UVERBS_OBJECT_MR, UVERBS_METHOD_REG_MR) if self.reg_mr_method => {
                self.reg_mr_native(call)
            }
            // uverbs_ioctl.c: a method the object does not have.
            (UVERBS_OBJECT_MR, UVERBS_METHOD_REG_MR) => Err(libc::EPROTONOSUPPORT),
            (MLX5_IB_OBJECT_UAR, MLX5_IB_METHOD_UAR_OBJ_ALLOC) => self.alloc_uar(call),
            (MLX5_IB_OBJECT_UAR, MLX5_IB_METHOD_UAR_OBJ_DESTROY) => destroy(
                &mut self.dyn_uars,
                call,
                MLX5_IB_ATTR_UAR_OBJ_DESTROY_HANDLE,
            )
            .map(drop),
            (UVERBS_OBJECT_CQ, UVERBS_METHOD_CQ_CREATE) => self.create_cq(call),
            (UVERBS_OBJECT_CQ, UVERBS_METHOD_CQ_DESTROY) => {
                destroy(&mut self.cqs, call, UVERBS_ATTR_DESTROY_CQ_HANDLE)?;
                let resp = ib_uverbs_destroy_cq_resp::default();
                call.write_output(UVERBS_ATTR_DESTROY_CQ_RESP, resp.as_bytes())
            }
            _ => Err(libc::EOPNOTSUPP),
        }
    }

    pub(crate) fn handle(&mut self) -> u32 {
        self.next_handle += 1;
        self.next_handle
    }

    /// The write commands libibverbs sends through `INVOKE_WRITE`.
    fn invoke_write(&mut self, call: &mut Call, cmd: u32) -> Result<(), Errno> {
        match cmd {
            // The probe libibverbs sends at open: no buffers. Any answer
            // but ENOTTY/EPROTONOSUPPORT keeps it on the ioctl path; the
            // kernel's is ENOSPC (no room for the response).
            IB_USER_VERBS_CMD_QUERY_DEVICE if call.output_len(UVERBS_ATTR_CORE_OUT).is_none() => {
                Err(libc::ENOSPC)
            }
            // The write command's GET_CONTEXT (uverbs' KernelFile sends
            // it so): the same driver data as the native method.
            IB_USER_VERBS_CMD_GET_CONTEXT => self.get_context(call, true),
            IB_USER_VERBS_CMD_ALLOC_PD => {
                let (handle, pdn) = (self.handle(), FIRST_PDN + self.pds.len() as u32);
                let resp = ib_uverbs_alloc_pd_resp { pd_handle: handle };
                call.write_output(UVERBS_ATTR_CORE_OUT, resp.as_bytes())?;
                // mlx5_ib_alloc_pd copies the PD number out whatever room
                // there is: none is EFAULT (and the PD is freed again).
                let uhw = mlx5_ib_alloc_pd_resp { pdn };
                if call.output_len(UVERBS_ATTR_UHW_OUT).unwrap_or(0) < size_of_val(&uhw) {
                    return Err(libc::EFAULT);
                }
                call.write_output(UVERBS_ATTR_UHW_OUT, uhw.as_bytes())?;
                self.pds.insert(handle, pdn);
                Ok(())
            }
            IB_USER_VERBS_CMD_QUERY_DEVICE => {
                let resp = query_device();
                call.write_output(UVERBS_ATTR_CORE_OUT, resp.as_bytes())
            }
            IB_USER_VERBS_CMD_MODIFY_QP => {
                let cmd: ib_uverbs_modify_qp = Self::core_in(call)?;
                self.modify_qp(&cmd)
            }
            IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL => {
                let (read, write) =
                    channel_pipe().map_err(|e| e.raw_os_error().unwrap_or(libc::EMFILE))?;
                let resp = ib_uverbs_create_comp_channel_resp { fd: read as u32 };
                call.write_output(UVERBS_ATTR_CORE_OUT, resp.as_bytes())?;
                self.channels.insert(read, write);
                Ok(())
            }
            IB_USER_VERBS_CMD_REG_MR => self.reg_mr(call),
            IB_USER_VERBS_CMD_CREATE_SRQ => self.create_srq_write(call),
            IB_USER_VERBS_CMD_MODIFY_SRQ => self.modify_srq(call),
            IB_USER_VERBS_CMD_QUERY_SRQ => self.query_srq(call),
            IB_USER_VERBS_CMD_DESTROY_SRQ => self.destroy_srq_write(call),
            IB_USER_VERBS_CMD_REREG_MR => self.rereg_mr(call),
            IB_USER_VERBS_CMD_DEREG_MR => {
                let cmd: ib_uverbs_dereg_mr = Self::core_in(call)?;
                remove(&mut self.mrs, cmd.mr_handle).map(drop)
            }
            IB_USER_VERBS_CMD_DEALLOC_PD => {
                let cmd: ib_uverbs_dealloc_pd = Self::core_in(call)?;
                remove(&mut self.pds, cmd.pd_handle).map(drop)
            }
            _ => Err(libc::EOPNOTSUPP),
        }
    }

    /// The core request of a write command, as `T`.
    fn core_in<T: FromBytes>(call: &Call) -> Result<T, Errno> {
        let input = call.input(UVERBS_ATTR_CORE_IN).ok_or(libc::EINVAL)?;
        T::read_from_prefix(&input)
            .map(|(t, _)| t)
            .map_err(|_| libc::EINVAL)
    }

    /// `ib_uverbs_reg_mr` and `mlx5_ib_reg_user_mr`: the keys back.
    fn reg_mr(&mut self, call: &mut Call) -> Result<(), Errno> {
        let cmd: ib_uverbs_reg_mr = Self::core_in(call)?;
        if (cmd.start & 0xfff) != (cmd.hca_va & 0xfff) {
            return Err(libc::EINVAL);
        }
        check_mr_access(cmd.access_flags)?;
        if !self.pds.contains_key(&cmd.pd_handle) {
            return Err(libc::EINVAL);
        }
        if cmd.length == 0 || cmd.start == 0 {
            return Err(libc::EINVAL);
        }
        let (handle, key) = (self.handle(), self.key());
        let resp = ib_uverbs_reg_mr_resp {
            mr_handle: handle,
            lkey: key,
            rkey: key,
        };
        call.write_output(UVERBS_ATTR_CORE_OUT, resp.as_bytes())?;
        self.mrs.insert(
            handle,
            Mr {
                pd: cmd.pd_handle,
                start: cmd.start,
                length: cmd.length,
                access: cmd.access_flags,
                key,
                writable: access_writable(cmd.access_flags),
            },
        );
        Ok(())
    }

    /// Linux 6.17's `UVERBS_METHOD_REG_MR`, checked in its handler's order:
    /// a mandatory attribute the method does not declare (driver data
    /// included: it has no `UVERBS_ATTR_UHW`) is `EPROTONOSUPPORT`; the PD;
    /// IOVA and LENGTH present; ADDR xor FD (FD needs FD_OFFSET); the page
    /// offset of ADDR (or FD_OFFSET) against IOVA; a DMA handle (none
    /// exists here); the access bits (`uverbs_get_flags32` with
    /// `IB_ACCESS_SUPPORTED`, fewer for a dma-buf; `ib_check_mr_access`);
    /// then `mlx5_ib_reg_user_mr`, which gets no udata (the keys back, as
    /// the write command's). The dma-buf lane takes the import as done, as
    /// `reg_dmabuf_mr` does.
    fn reg_mr_native(&mut self, call: &mut Call) -> Result<(), Errno> {
        let declared = UVERBS_ATTR_REG_MR_HANDLE..=UVERBS_ATTR_REG_MR_RESP_RKEY;
        let undeclared_mandatory = call
            .attrs()
            .iter()
            .any(|a| !declared.contains(&a.attr_id) && a.flags & UVERBS_ATTR_F_MANDATORY != 0);
        if undeclared_mandatory {
            return Err(libc::EPROTONOSUPPORT);
        }
        let pd = call
            .handle(UVERBS_ATTR_REG_MR_PD_HANDLE)
            .ok_or(libc::EINVAL)? as u32;
        if !self.pds.contains_key(&pd) {
            return Err(libc::EINVAL);
        }
        // UVERBS_ATTR_TYPE(u64): exactly 8 bytes where given.
        let u64_in = |id| match call.input(id) {
            None => Ok(None),
            Some(b) => <[u8; 8]>::try_from(b)
                .map(|b| Some(u64::from_le_bytes(b)))
                .map_err(|_| libc::EINVAL),
        };
        let (iova, length) = (
            u64_in(UVERBS_ATTR_REG_MR_IOVA)?.ok_or(libc::EINVAL)?,
            u64_in(UVERBS_ATTR_REG_MR_LENGTH)?.ok_or(libc::EINVAL)?,
        );
        let addr = u64_in(UVERBS_ATTR_REG_MR_ADDR)?;
        let fd_offset = u64_in(UVERBS_ATTR_REG_MR_FD_OFFSET)?;
        let has_fd = call.input_u64(UVERBS_ATTR_REG_MR_FD).is_some();
        let mut valid = ((IB_UVERBS_ACCESS_HUGETLB << 1) - 1)
            | IB_UVERBS_ACCESS_FLUSH_GLOBAL
            | IB_UVERBS_ACCESS_FLUSH_PERSISTENT
            | IB_UVERBS_ACCESS_OPTIONAL_RANGE;
        let start = match (has_fd, addr, fd_offset) {
            (true, None, Some(offset)) => {
                valid = IB_UVERBS_ACCESS_LOCAL_WRITE
                    | IB_UVERBS_ACCESS_REMOTE_READ
                    | IB_UVERBS_ACCESS_REMOTE_WRITE
                    | IB_UVERBS_ACCESS_REMOTE_ATOMIC
                    | IB_UVERBS_ACCESS_RELAXED_ORDERING;
                offset
            }
            (false, Some(addr), None) => addr,
            _ => return Err(libc::EINVAL),
        };
        if (start & 0xfff) != (iova & 0xfff) {
            return Err(libc::EINVAL);
        }
        if call.handle(UVERBS_ATTR_REG_MR_DMA_HANDLE).is_some() {
            return Err(libc::EINVAL);
        }
        let access = call
            .input_u64(UVERBS_ATTR_REG_MR_ACCESS_FLAGS)
            .ok_or(libc::EINVAL)?;
        let access = u32::try_from(access).map_err(|_| libc::EINVAL)?;
        if access & !valid != 0 {
            return Err(libc::EINVAL);
        }
        check_mr_access(access)?;
        if length == 0 || (!has_fd && start == 0) {
            return Err(libc::EINVAL);
        }
        let (handle, key) = (self.handle(), self.key());
        call.set_data(UVERBS_ATTR_REG_MR_HANDLE, handle.into())?;
        call.write_output(UVERBS_ATTR_REG_MR_RESP_LKEY, key.as_bytes())?;
        call.write_output(UVERBS_ATTR_REG_MR_RESP_RKEY, key.as_bytes())?;
        self.mrs.insert(
            handle,
            Mr {
                pd,
                start: if has_fd { iova } else { start },
                length,
                access,
                key,
                writable: access_writable(access),
            },
        );
        Ok(())
    }

    /// `ib_uverbs_rereg_mr`'s checks, in its order, then
    /// `mlx5_ib_rereg_user_mr`'s (`ib_umem_check_rereg` included). A new
    /// translation is taken as mlx5's re-creation path: new pages, new keys;
    /// PD and access alone change in place (its UMR path): the same keys.
    fn rereg_mr(&mut self, call: &mut Call) -> Result<(), Errno> {
        let cmd: ib_uverbs_rereg_mr = Self::core_in(call)?;
        let (trans, pd_flag, access_flag) = (1, 2, 4);
        if cmd.flags == 0 {
            return Err(libc::EINVAL);
        }
        if cmd.flags & !(trans | pd_flag | access_flag) != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        if cmd.flags & trans != 0 && (cmd.start & 0xfff) != (cmd.hca_va & 0xfff) {
            return Err(libc::EINVAL);
        }
        let mr = *self.mrs.get(&cmd.mr_handle).ok_or(libc::EINVAL)?;
        if cmd.flags & access_flag != 0 {
            check_mr_access(cmd.access_flags)?;
        }
        if cmd.flags & pd_flag != 0 && !self.pds.contains_key(&cmd.pd_handle) {
            return Err(libc::EINVAL);
        }
        // mlx5_ib_rereg_user_mr: ib_umem_check_rereg.
        if cmd.flags & access_flag != 0
            && cmd.flags & trans == 0
            && access_writable(cmd.access_flags)
            && !mr.writable
        {
            return Err(libc::EACCES);
        }
        if let Some(errno) = self.fail_next_rereg.take() {
            return Err(errno);
        }
        let mut new = mr;
        if cmd.flags & access_flag != 0 {
            new.access = cmd.access_flags;
        }
        if cmd.flags & pd_flag != 0 {
            new.pd = cmd.pd_handle;
        }
        if cmd.flags & trans != 0 {
            if cmd.length == 0 || cmd.start == 0 {
                return Err(libc::EINVAL);
            }
            new.start = cmd.start;
            new.length = cmd.length;
            new.key = self.key();
            new.writable = access_writable(new.access);
        }
        let resp = ib_uverbs_rereg_mr_resp {
            lkey: new.key,
            rkey: new.key,
        };
        call.write_output(UVERBS_ATTR_CORE_OUT, resp.as_bytes())?;
        self.mrs.insert(cmd.mr_handle, new);
        Ok(())
    }

    /// `UVERBS_METHOD_REG_DMABUF_MR`'s checks in the core's order (the
    /// page offsets of `offset` and `iova`, the access bits it allows, then
    /// `ib_check_mr_access`), then mlx5's import taken as done: the keys
    /// back. The descriptor is not looked at.
    fn reg_dmabuf_mr(&mut self, call: &mut Call) -> Result<(), Errno> {
        // enum uverbs_attrs_reg_dmabuf_mr_cmd_attr_ids
        let (handle_attr, pd_attr, offset_attr, length_attr, iova_attr) = (0, 1, 2, 3, 4);
        let (fd_attr, access_attr, lkey_attr, rkey_attr) = (5, 6, 7, 8);
        let pd = call.handle(pd_attr).ok_or(libc::EINVAL)? as u32;
        if !self.pds.contains_key(&pd) {
            return Err(libc::EINVAL);
        }
        let input = |id| call.input_u64(id).ok_or(libc::EINVAL);
        let (offset, length, iova) = (input(offset_attr)?, input(length_attr)?, input(iova_attr)?);
        if (offset & 0xfff) != (iova & 0xfff) {
            return Err(libc::EINVAL);
        }
        input(fd_attr)?;
        let access = call.input_u64(access_attr).unwrap_or(0) as u32;
        let allowed = IB_UVERBS_ACCESS_LOCAL_WRITE
            | IB_UVERBS_ACCESS_REMOTE_READ
            | IB_UVERBS_ACCESS_REMOTE_WRITE
            | IB_UVERBS_ACCESS_REMOTE_ATOMIC
            | IB_UVERBS_ACCESS_RELAXED_ORDERING;
        if access & !allowed != 0 {
            return Err(libc::EINVAL);
        }
        check_mr_access(access)?;
        let (handle, key) = (self.handle(), self.key());
        call.set_data(handle_attr, handle.into())?;
        call.write_output(lkey_attr, key.as_bytes())?;
        call.write_output(rkey_attr, key.as_bytes())?;
        self.mrs.insert(
            handle,
            Mr {
                pd,
                start: iova,
                length,
                access,
                key,
                writable: access_writable(access),
            },
        );
        Ok(())
    }

    fn key(&mut self) -> u32 {
        self.next_key += 1;
        (self.next_key << 8) | 0x42
    }

    /// `mlx5_ib_alloc_ucontext`: the request of 8 (version 0) or at least
    /// 16 bytes, its checks in the kernel's order, the context's limits
    /// and its blue-flame registers back (none with `MLX5_LIB_CAP_DYN_UAR`:
    /// that library allocates UAR pages itself).
    /// `write` is the write command's form: its core answer names an
    /// async event file (none here: `u32::MAX`, no descriptor).
    fn get_context(&mut self, call: &mut Call, write: bool) -> Result<(), Errno> {
        let uhw = call.input(UVERBS_ATTR_UHW_IN).unwrap_or_default();
        let min_v2 = std::mem::offset_of!(mlx5_ib_alloc_ucontext_req_v2, max_cqe_version);
        if uhw.len() != size_of::<mlx5_ib_alloc_ucontext_req>() && uhw.len() < min_v2 {
            return Err(libc::EINVAL);
        }
        let mut req = mlx5_ib_alloc_ucontext_req_v2::default();
        let n = uhw.len().min(size_of::<mlx5_ib_alloc_ucontext_req_v2>());
        req.as_mut_bytes()[..n].copy_from_slice(&uhw[..n]);
        if req.flags & !MLX5_IB_ALLOC_UCTX_DEVX != 0
            || req.comp_mask != 0
            || req.reserved0 != 0
            || req.reserved1 != 0
            || req.reserved2 != 0
        {
            return Err(libc::EOPNOTSUPP);
        }
        req.total_num_bfregs = req.total_num_bfregs.next_multiple_of(BFREGS_PER_UAR);
        if req.num_low_latency_bfregs > req.total_num_bfregs.wrapping_sub(1) {
            return Err(libc::EINVAL);
        }
        if req.flags & MLX5_IB_ALLOC_UCTX_DEVX != 0 {
            // mlx5_ib_devx_create for a user without CAP_NET_RAW.
            return Err(libc::EPERM);
        }
        let dynamic = req.lib_caps & MLX5_LIB_CAP_DYN_UAR != 0;
        if !dynamic && (req.total_num_bfregs == 0 || req.total_num_bfregs > MAX_BFREGS) {
            return Err(libc::ENOMEM);
        }
        let tot_bfregs = if dynamic { 0 } else { req.total_num_bfregs };
        let resp = mlx5_ib_alloc_ucontext_resp {
            qp_tab_size: 1 << 18,
            bf_reg_size: 512,
            tot_bfregs,
            cache_line_size: 64,
            max_sq_desc_sz: 512,
            max_rq_desc_sz: 512,
            max_send_wqebb: 1 << 15,
            max_recv_wr: 1 << 15,
            max_srq_recv_wr: 1 << 15,
            num_ports: 1,
            comp_mask: MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_CORE_CLOCK_OFFSET
                | MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_MKEY_UPDATE_TAG,
            cqe_version: req.max_cqe_version.min(1),
            cmds_supp_uhw: (MLX5_USER_CMDS_SUPP_UHW_QUERY_DEVICE
                | MLX5_USER_CMDS_SUPP_UHW_CREATE_AH) as u8,
            // The firmware's "no inline headers", plus one.
            eth_min_inline: MLX5_USER_INLINE_MODE_NONE as u8,
            log_uar_size: 12,
            num_uars_per_page: 1,
            ..Default::default()
        };
        let room = call.output_len(UVERBS_ATTR_UHW_OUT).unwrap_or(0);
        let mut resp = resp;
        resp.response_length = room.min(size_of::<mlx5_ib_alloc_ucontext_resp>()) as u32;
        if write {
            let core = ib_uverbs_get_context_resp {
                async_fd: u32::MAX,
                num_comp_vectors: 1,
            };
            call.write_output(UVERBS_ATTR_CORE_OUT, core.as_bytes())?;
        } else {
            call.write_output(
                UVERBS_ATTR_GET_CONTEXT_NUM_COMP_VECTORS,
                &1u32.to_le_bytes(),
            )?;
            call.write_output(
                UVERBS_ATTR_GET_CONTEXT_CORE_SUPPORT,
                &IB_UVERBS_CORE_SUPPORT_OPTIONAL_MR_ACCESS.to_le_bytes(),
            )?;
        }
        let bytes = resp.as_bytes();
        call.write_output(UVERBS_ATTR_UHW_OUT, &bytes[..room.min(bytes.len())])?;
        self.context = Some(req);
        self.tot_bfregs = tot_bfregs;
        Ok(())
    }

    /// `MLX5_IB_METHOD_UAR_OBJ_ALLOC`: a UAR page and the mmap offset of
    /// its entry (`mlx5_entry_to_mmap_offset`).
    fn alloc_uar(&mut self, call: &mut Call) -> Result<(), Errno> {
        if self.context.is_none() {
            return Err(libc::EINVAL);
        }
        let alloc_type = call
            .input_u64(MLX5_IB_ATTR_UAR_OBJ_ALLOC_TYPE)
            .ok_or(libc::EINVAL)? as u32;
        if !matches!(
            alloc_type,
            MLX5_IB_UAPI_UAR_ALLOC_TYPE_BF | MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC
        ) {
            return Err(libc::EOPNOTSUPP);
        }
        let pgoff = FIRST_ENTRY_PGOFF + self.next_entry;
        self.next_entry += 1;
        let (cmd, index) = ((pgoff >> 16) & 0xffff, pgoff & 0xffff);
        let mmap_offset = (((index >> 8) << 16) | (cmd << 8) | (index & 0xff)) * UAR_PAGE as u64;
        let handle = self.handle();
        let page_id = FIRST_DYN_UAR + self.dyn_uars.len() as u32;
        call.set_data(MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE, u64::from(handle))?;
        call.write_output(
            MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_OFFSET,
            &mmap_offset.to_le_bytes(),
        )?;
        call.write_output(MLX5_IB_ATTR_UAR_OBJ_ALLOC_PAGE_ID, &page_id.to_le_bytes())?;
        call.write_output(
            MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_LENGTH,
            &(UAR_PAGE as u32).to_le_bytes(),
        )?;
        self.dyn_uars.insert(
            handle,
            DynUar {
                handle,
                alloc_type,
                page_id,
                mmap_offset,
            },
        );
        Ok(())
    }

    /// `mlx5_ib_create_cq` of a user CQ: entries rounded up to a power of
    /// two, the buffer and doorbell record where the driver data says.
    fn create_cq(&mut self, call: &mut Call) -> Result<(), Errno> {
        let cqe = call
            .input_u64(UVERBS_ATTR_CREATE_CQ_CQE)
            .ok_or(libc::EINVAL)? as u32;
        let uhw = call.input(UVERBS_ATTR_UHW_IN).ok_or(libc::EINVAL)?;
        let (req, _) = mlx5_ib_create_cq::read_from_prefix(&uhw).map_err(|_| libc::EINVAL)?;
        if !matches!(req.cqe_size, 64 | 128)
            || req.buf_addr % UAR_PAGE as u64 != 0
            || req.db_addr % 8 != 0
            || cqe == 0
            || cqe > 1 << 22
        {
            return Err(libc::EINVAL);
        }
        let entries = (cqe + 1).next_power_of_two();
        let channel = call
            .handle(UVERBS_ATTR_CREATE_CQ_COMP_CHANNEL)
            .map(|fd| fd as i32);
        if channel.is_some_and(|fd| !self.channels.contains_key(&fd)) {
            return Err(libc::EBADF);
        }
        let user_handle = call
            .input_u64(UVERBS_ATTR_CREATE_CQ_USER_HANDLE)
            .unwrap_or(0);
        let (handle, cqn) = (self.handle(), FIRST_CQN + self.cqs.len() as u32);
        call.set_data(UVERBS_ATTR_CREATE_CQ_HANDLE, u64::from(handle))?;
        call.write_output(UVERBS_ATTR_CREATE_CQ_RESP_CQE, &(entries - 1).to_le_bytes())?;
        let resp = mlx5_ib_create_cq_resp { cqn, reserved: 0 };
        call.write_output(UVERBS_ATTR_UHW_OUT, resp.as_bytes())?;
        self.cqs.insert(
            handle,
            Cq {
                handle,
                cqn,
                entries,
                req,
                produced: 0,
                channel,
                user_handle,
                fired_arm: 0,
            },
        );
        Ok(())
    }

    /// `mlx5_ib_mmap` of `len` bytes at `offset`: a UAR page GET_CONTEXT
    /// gave (commands REGULAR, WC, NC; the index below the context's
    /// pages) or one allocated as an object (its entry's offset);
    /// `EINVAL` for anything else.
    pub fn mmap(&mut self, offset: u64, len: usize) -> Result<*mut u8, Errno> {
        let page = offset / UAR_PAGE as u64;
        let (command, index) = ((page >> 8) as u32 & 0xff, page & 0xff);
        let static_uar = matches!(
            command,
            MLX5_IB_MMAP_REGULAR_PAGE | MLX5_IB_MMAP_WC_PAGE | MLX5_IB_MMAP_NC_PAGE
        ) && index < u64::from(self.tot_bfregs / BFREGS_PER_UAR);
        let entry = self.dyn_uars.values().any(|u| u.mmap_offset == offset);
        if offset % UAR_PAGE as u64 != 0
            || len != UAR_PAGE
            || self.context.is_none()
            || !(static_uar || entry)
        {
            return Err(libc::EINVAL);
        }
        let (memfd, mut page) =
            uar_memory().map_err(|e| e.raw_os_error().unwrap_or(libc::ENOMEM))?;
        let addr = page.as_mut_ptr();
        self.uars.push(Uar {
            offset,
            memfd,
            page,
        });
        Ok(addr)
    }

    /// The uverbs file is closed: the kernel destroys every object the
    /// context still has (`uverbs_destroy_ufile_hw`). Returns how many
    /// objects of each kind were left for it (PDs, CQs, UAR objects).
    pub fn close(&mut self) -> (usize, usize, usize) {
        let left = (self.pds.len(), self.cqs.len(), self.dyn_uars.len());
        self.qps.clear();
        self.srqs.clear();
        self.mrs.clear();
        self.pds.clear();
        self.cqs.clear();
        self.dyn_uars.clear();
        self.closed = Some(left);
        left
    }

    /// The mapped UAR page of the UAR object with device index `page_id`
    /// (what libmlx5 wrote to it: doorbells at 0x20 for CQs, 0x800 and
    /// 0x900 for its two blue-flame registers).
    pub fn uar_page(&self, page_id: u32) -> Option<&[u8; UAR_PAGE]> {
        let uar = self.dyn_uars.values().find(|u| u.page_id == page_id)?;
        self.uars
            .iter()
            .find(|u| u.offset == uar.mmap_offset)
            .and_then(|u| u.page.as_ref().try_into().ok())
    }

    /// Unmaps a UAR page handed out by [`mmap`](Self::mmap); false if
    /// `addr` is none of them.
    pub fn munmap(&mut self, addr: *const u8) -> bool {
        let before = self.uars.len();
        self.uars.retain(|u| u.page.as_ptr() != addr);
        self.uars.len() != before
    }
}

/// Takes the object `handle` names out of `table`: `EINVAL` where it names
/// none, as the core answers a stale handle.
/// One zeroed UAR page: a memfd and the emulation's mapping of it.
fn uar_memory() -> std::io::Result<(std::fs::File, memmap2::MmapMut)> {
    use std::os::fd::FromRawFd;
    // SAFETY: a NUL-terminated name; the new descriptor is owned below.
    let fd = unsafe { libc::memfd_create(c"uverbs-oracle-uar".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor just made, owned by nothing else.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    file.set_len(UAR_PAGE as u64)?;
    // SAFETY: a memfd of this emulation's own, which only the UAR's users
    // map (as a device's registers, through raw pointers).
    let page = unsafe { memmap2::MmapMut::map_mut(&file) }?;
    Ok((file, page))
}

impl Mlx5Kernel {
    /// The page at mmap offset `offset`, mapping it first as
    /// [`mmap`](Self::mmap) does if it is not yet.
    pub fn uar_memfd(&mut self, offset: u64, len: usize) -> Result<&std::fs::File, Errno> {
        if !self.uars.iter().any(|u| u.offset == offset) {
            self.mmap(offset, len)?;
        }
        Ok(&self
            .uars
            .iter()
            .find(|u| u.offset == offset)
            .expect("mapped")
            .memfd)
    }
}

/// A completion channel: a pipe, its read end non-blocking as the
/// kernel's file is not (the caller sets what it wants).
fn channel_pipe() -> std::io::Result<(i32, std::os::fd::OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two new descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the write end is new and owned by nothing else.
    Ok((fds[0], unsafe { std::os::fd::OwnedFd::from_raw_fd(fds[1]) }))
}

fn remove<T>(table: &mut BTreeMap<u32, T>, handle: u32) -> Result<T, Errno> {
    table.remove(&handle).ok_or(libc::EINVAL)
}

/// A destroy method: the object its handle attribute `attr` names, taken
/// out of `table`.
fn destroy<T>(table: &mut BTreeMap<u32, T>, call: &Call, attr: u16) -> Result<T, Errno> {
    let handle = call.handle(attr).ok_or(libc::EINVAL)?;
    remove(table, handle as u32)
}

/// The plain write command QUERY_DEVICE (`ib_uverbs_query_device`, the
/// core's copy of the device attributes): a ConnectX-5's limits, and
/// atomics within the HCA (`IB_ATOMIC_HCA`), which libmlx5 reads at open
/// to allow atomic WRs. (The extended command stays refused: libibverbs
/// then asks this one.)
fn query_device() -> ib_uverbs_query_device_resp {
    ib_uverbs_query_device_resp {
        fw_ver: (16 << 32) | (35 << 16) | 1000,
        node_guid: 0x0200_00ff_fe00_0001u64.to_be(),
        sys_image_guid: 0x0200_00ff_fe00_0001u64.to_be(),
        max_mr_size: u64::MAX,
        page_size_cap: !0xfff,
        vendor_id: 0x02c9,
        vendor_part_id: 4119, // ConnectX-5
        max_qp: 1 << 18,
        max_qp_wr: crate::qp::MAX_QP_WQES,
        max_sge: 30,
        max_sge_rd: 30,
        max_cq: 1 << 24,
        max_cqe: (1 << 22) - 1,
        max_mr: 1 << 24,
        max_pd: 1 << 24,
        max_qp_rd_atom: 16,
        max_res_rd_atom: 16 << 18,
        max_qp_init_rd_atom: 16,
        atomic_cap: 1, // IB_ATOMIC_HCA
        max_ah: i32::MAX as u32,
        phys_port_cnt: 1,
        ..Default::default()
    }
}

/// `mlx5_ib_query_port` of port 1: an active port, RoCE (Ethernet link
/// layer) or InfiniBand (LID 1, its SM at LID 1), 1024-byte MTU of 4096
/// possible.
fn query_port(call: &mut Call, infiniband: bool) -> Result<(), Errno> {
    if call.input_u64(UVERBS_ATTR_QUERY_PORT_PORT_NUM) != Some(1) {
        return Err(libc::EINVAL);
    }
    let mut resp = ib_uverbs_query_port_resp_ex::default();
    let p = &mut resp.legacy_resp;
    p.state = 4; // IB_PORT_ACTIVE
    p.max_mtu = 5; // IB_MTU_4096
    p.active_mtu = 3; // IB_MTU_1024
    p.gid_tbl_len = 256;
    p.pkey_tbl_len = 1;
    p.max_msg_sz = 1 << 30;
    p.max_vl_num = 1;
    p.active_width = 2; // 4x
    p.active_speed = 32; // EDR
    p.phys_state = 5; // LinkUp
    if infiniband {
        p.link_layer = 1; // IB_LINK_LAYER_INFINIBAND
        p.lid = 1;
        p.sm_lid = 1;
    } else {
        p.link_layer = 2; // IB_LINK_LAYER_ETHERNET
    }
    let room = call.output_len(UVERBS_ATTR_QUERY_PORT_RESP).unwrap_or(0);
    let bytes = resp.as_bytes();
    call.write_output(UVERBS_ATTR_QUERY_PORT_RESP, &bytes[..room.min(bytes.len())])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ioctl::testing::{frame, inline, pointing};

    /// GET_CONTEXT with `uhw_in` as its driver data; the errno, and the
    /// answer's `tot_bfregs` when it succeeded.
    fn get_context(k: &mut Mlx5Kernel, uhw_in: &mut [u8]) -> Result<u32, Errno> {
        let (mut vectors, mut support) = ([0u8; 4], [0u8; 8]);
        let mut resp = [0u8; size_of::<mlx5_ib_alloc_ucontext_resp>()];
        let mut attrs = vec![
            pointing(UVERBS_ATTR_GET_CONTEXT_NUM_COMP_VECTORS, &mut vectors),
            pointing(UVERBS_ATTR_GET_CONTEXT_CORE_SUPPORT, &mut support),
            pointing(UVERBS_ATTR_UHW_OUT, &mut resp),
        ];
        // As libibverbs lays inputs out: up to 8 bytes inline.
        if uhw_in.len() > 8 {
            attrs.push(pointing(UVERBS_ATTR_UHW_IN, uhw_in));
        } else if !uhw_in.is_empty() {
            let mut word = [0u8; 8];
            word[..uhw_in.len()].copy_from_slice(uhw_in);
            let data = u64::from_le_bytes(word);
            attrs.push(inline(UVERBS_ATTR_UHW_IN, uhw_in.len() as u16, data));
        }
        let mut words = frame(UVERBS_OBJECT_DEVICE, UVERBS_METHOD_GET_CONTEXT, &attrs);
        // SAFETY: the frame and its buffers live through the call.
        let mut call = unsafe { Call::from_raw(words.as_mut_ptr().cast()) };
        k.ioctl(&mut call)?;
        let (resp, _) = mlx5_ib_alloc_ucontext_resp::read_from_prefix(&resp).unwrap();
        assert_eq!(
            resp.response_length as usize,
            size_of::<mlx5_ib_alloc_ucontext_resp>()
        );
        Ok(resp.tot_bfregs)
    }

    fn req(total: u32, low: u32, flags: u32, lib_caps: u64) -> mlx5_ib_alloc_ucontext_req_v2 {
        mlx5_ib_alloc_ucontext_req_v2 {
            total_num_bfregs: total,
            num_low_latency_bfregs: low,
            flags,
            max_cqe_version: 1,
            lib_caps,
            ..Default::default()
        }
    }

    /// Linux 6.12's checks, in its order: without driver data (what a
    /// generic provider sends) mlx5 refuses the context with EINVAL.
    #[test]
    fn get_context_refuses_as_mlx5_ib_alloc_ucontext_does() {
        let mut k = Mlx5Kernel::default();
        assert_eq!(get_context(&mut k, &mut []), Err(libc::EINVAL));
        assert_eq!(get_context(&mut k, &mut [0; 12]), Err(libc::EINVAL));
        let mut bad_flags = req(4, 1, 2, 0);
        assert_eq!(
            get_context(&mut k, bad_flags.as_mut_bytes()),
            Err(libc::EOPNOTSUPP)
        );
        let mut comp = req(4, 1, 0, 0);
        comp.comp_mask = 1;
        assert_eq!(
            get_context(&mut k, comp.as_mut_bytes()),
            Err(libc::EOPNOTSUPP)
        );
        let mut low = req(4, 4, 0, 0);
        assert_eq!(get_context(&mut k, low.as_mut_bytes()), Err(libc::EINVAL));
        let mut devx = req(4, 1, MLX5_IB_ALLOC_UCTX_DEVX, 0);
        assert_eq!(get_context(&mut k, devx.as_mut_bytes()), Err(libc::EPERM));
        assert!(k.context.is_none());
        assert_eq!(k.log.len(), 6);
        assert!(k.log.iter().all(|c| c.errno != 0));
    }

    #[test]
    fn get_context_gives_static_bfregs_or_none_with_dynamic_uars() {
        let mut k = Mlx5Kernel::default();
        // Rounded up to whole UAR pages; version 0 (8 bytes) too.
        let mut v2 = req(3, 1, 0, MLX5_LIB_CAP_4K_UAR);
        assert_eq!(get_context(&mut k, v2.as_mut_bytes()), Ok(4));
        let mut v0 = mlx5_ib_alloc_ucontext_req {
            total_num_bfregs: 8,
            num_low_latency_bfregs: 2,
        };
        assert_eq!(get_context(&mut k, v0.as_mut_bytes()), Ok(8));
        assert_eq!(k.mmap(0, UAR_PAGE).map(drop), Ok(()));
        assert_eq!(
            k.mmap(4 * UAR_PAGE as u64, UAR_PAGE).map(drop),
            Err(libc::EINVAL)
        );
        let mut dynamic = req(16, 4, 0, MLX5_LIB_CAP_4K_UAR | MLX5_LIB_CAP_DYN_UAR);
        assert_eq!(get_context(&mut k, dynamic.as_mut_bytes()), Ok(0));
        assert_eq!(k.mmap(0, UAR_PAGE).map(drop), Err(libc::EINVAL));
    }

    #[test]
    fn a_uar_object_is_mapped_at_the_offset_its_allocation_answers() {
        let mut k = Mlx5Kernel::default();
        let mut dynamic = req(16, 4, 0, MLX5_LIB_CAP_DYN_UAR);
        get_context(&mut k, dynamic.as_mut_bytes()).unwrap();
        let (mut offset, mut length, mut page) = ([0u8; 8], [0u8; 4], [0u8; 4]);
        let attrs = [
            inline(MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE, 0, 0),
            inline(
                MLX5_IB_ATTR_UAR_OBJ_ALLOC_TYPE,
                8,
                u64::from(MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC),
            ),
            pointing(MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_OFFSET, &mut offset),
            pointing(MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_LENGTH, &mut length),
            pointing(MLX5_IB_ATTR_UAR_OBJ_ALLOC_PAGE_ID, &mut page),
        ];
        let mut words = frame(MLX5_IB_OBJECT_UAR, MLX5_IB_METHOD_UAR_OBJ_ALLOC, &attrs);
        // SAFETY: the frame and its buffers live through the call.
        let mut call = unsafe { Call::from_raw(words.as_mut_ptr().cast()) };
        k.ioctl(&mut call).unwrap();
        let handle = call.handle(MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE).unwrap();
        // mlx5_entry_to_mmap_offset of the first entry (page offset 9 << 16).
        assert_eq!(u64::from_le_bytes(offset), 9 << 8 << 12);
        assert_eq!(u32::from_le_bytes(length), 4096);
        let page_id = u32::from_le_bytes(page);
        assert_eq!(k.dyn_uars[&(handle as u32)].page_id, page_id);
        let addr = k.mmap(u64::from_le_bytes(offset), UAR_PAGE).unwrap();
        assert!(k.munmap(addr));
        assert!(!k.munmap(addr), "unmapped once");
        assert_eq!(k.close(), (0, 0, 1), "the close destroys the UAR object");
    }
}
