//! mlx5_ib's side of the commands a verbs data path sends, as Linux 6.12
//! answers them (`drivers/infiniband/hw/mlx5/main.c`, `cq.c`), for one
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

/// The blue-flame registers a context gets (two per UAR page: so 8 pages).
pub const TOT_BFREGS: u32 = 16;
/// Bytes of a UAR page (`MLX5_ADAPTER_PAGE_SIZE`) and of a system page here.
pub const UAR_PAGE: usize = 4096;
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
    /// The driver's input (`UVERBS_ATTR_UHW_IN`), empty if none.
    pub uhw_in: Vec<u8>,
    /// 0, or the errno it was refused with.
    pub errno: Errno,
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
}

/// A UAR page mapped from the uverbs file.
#[derive(Debug)]
pub struct Uar {
    /// The mmap offset (`command << 8 | index`, in pages).
    pub offset: u64,
    /// The page's memory (a ConnectX's doorbell registers; here plain
    /// memory, read back by the tests).
    pub page: Box<UarPage>,
}

/// One UAR page's bytes, page aligned as mmap's answers are.
#[repr(C, align(4096))]
#[derive(Debug)]
pub struct UarPage(pub [u8; UAR_PAGE]);

/// The emulated driver's state.
#[derive(Debug, Default)]
pub struct Mlx5Kernel {
    next_handle: u32,
    /// Every command, in order.
    pub log: Vec<Command>,
    /// The context's request, once GET_CONTEXT succeeded.
    pub context: Option<mlx5_ib_alloc_ucontext_req_v2>,
    /// Live PDs: handle to PD number.
    pub pds: BTreeMap<u32, u32>,
    /// Live CQs by handle.
    pub cqs: BTreeMap<u32, Cq>,
    /// Mapped UAR pages.
    pub uars: Vec<Uar>,
    /// Async event files handed out (eventfds), still open.
    pub async_fds: BTreeSet<i32>,
}

impl Mlx5Kernel {
    /// Answers one `RDMA_VERBS_IOCTL`, logging it.
    pub fn ioctl(&mut self, call: &mut Call) -> Result<(), Errno> {
        let write_cmd = (call.object() == UVERBS_OBJECT_DEVICE
            && call.method() == UVERBS_METHOD_INVOKE_WRITE)
            .then(|| call.input_u64(UVERBS_ATTR_WRITE_CMD).unwrap_or(u64::MAX) as u32);
        let uhw_in = call.input(UVERBS_ATTR_UHW_IN).unwrap_or_default();
        let result = if call.driver_id() != RDMA_DRIVER_MLX5 {
            Err(libc::EINVAL)
        } else {
            self.dispatch(call, write_cmd)
        };
        self.log.push(Command {
            object: call.object(),
            method: call.method(),
            write_cmd,
            uhw_in,
            errno: result.err().unwrap_or(0),
        });
        result
    }

    fn dispatch(&mut self, call: &mut Call, write_cmd: Option<u32>) -> Result<(), Errno> {
        match (call.object(), call.method()) {
            (UVERBS_OBJECT_DEVICE, UVERBS_METHOD_INVOKE_WRITE) => {
                self.invoke_write(call, write_cmd.unwrap_or(u32::MAX))
            }
            (UVERBS_OBJECT_DEVICE, UVERBS_METHOD_GET_CONTEXT) => self.get_context(call),
            (UVERBS_OBJECT_DEVICE, UVERBS_METHOD_QUERY_PORT) => query_port(call),
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
                let handle = call
                    .handle(UVERBS_ATTR_DESTROY_PD_HANDLE)
                    .ok_or(libc::EINVAL)?;
                self.dealloc_pd(handle as u32)
            }
            (UVERBS_OBJECT_CQ, UVERBS_METHOD_CQ_CREATE) => self.create_cq(call),
            (UVERBS_OBJECT_CQ, UVERBS_METHOD_CQ_DESTROY) => {
                let handle = call
                    .handle(UVERBS_ATTR_DESTROY_CQ_HANDLE)
                    .ok_or(libc::EINVAL)?;
                self.cqs.remove(&(handle as u32)).ok_or(libc::EINVAL)?;
                let resp = ib_uverbs_destroy_cq_resp::default();
                call.write_output(UVERBS_ATTR_DESTROY_CQ_RESP, resp.as_bytes())
            }
            _ => Err(libc::EOPNOTSUPP),
        }
    }

    fn handle(&mut self) -> u32 {
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
            IB_USER_VERBS_CMD_ALLOC_PD => {
                let (handle, pdn) = (self.handle(), FIRST_PDN + self.pds.len() as u32);
                let resp = ib_uverbs_alloc_pd_resp { pd_handle: handle };
                call.write_output(UVERBS_ATTR_CORE_OUT, resp.as_bytes())?;
                let uhw = mlx5_ib_alloc_pd_resp { pdn };
                call.write_output(UVERBS_ATTR_UHW_OUT, uhw.as_bytes())?;
                self.pds.insert(handle, pdn);
                Ok(())
            }
            IB_USER_VERBS_CMD_DEALLOC_PD => {
                let input = call.input(UVERBS_ATTR_CORE_IN).ok_or(libc::EINVAL)?;
                let (cmd, _) =
                    ib_uverbs_dealloc_pd::read_from_prefix(&input).map_err(|_| libc::EINVAL)?;
                self.dealloc_pd(cmd.pd_handle)
            }
            _ => Err(libc::EOPNOTSUPP),
        }
    }

    /// `mlx5_ib_dealloc_pd`; `EINVAL` for a handle that is no PD.
    fn dealloc_pd(&mut self, handle: u32) -> Result<(), Errno> {
        self.pds.remove(&handle).map(drop).ok_or(libc::EINVAL)
    }

    /// `mlx5_ib_alloc_ucontext`: the request of 16, 24 or 32 bytes, the
    /// context's limits and its blue-flame registers back.
    fn get_context(&mut self, call: &mut Call) -> Result<(), Errno> {
        let uhw = call.input(UVERBS_ATTR_UHW_IN).unwrap_or_default();
        if uhw.len() < size_of::<mlx5_ib_alloc_ucontext_req>() {
            return Err(libc::EINVAL);
        }
        let mut req = mlx5_ib_alloc_ucontext_req_v2::default();
        let n = uhw.len().min(size_of::<mlx5_ib_alloc_ucontext_req_v2>());
        req.as_mut_bytes()[..n].copy_from_slice(&uhw[..n]);
        if req.flags & MLX5_IB_ALLOC_UCTX_DEVX != 0 {
            // mlx5_ib_devx_create for a user without CAP_NET_RAW.
            return Err(libc::EPERM);
        }
        if req.total_num_bfregs > TOT_BFREGS || req.num_low_latency_bfregs >= req.total_num_bfregs {
            return Err(libc::EINVAL);
        }
        let resp = mlx5_ib_alloc_ucontext_resp {
            qp_tab_size: 1 << 18,
            bf_reg_size: 512,
            tot_bfregs: TOT_BFREGS,
            cache_line_size: 64,
            max_sq_desc_sz: 512,
            max_rq_desc_sz: 512,
            max_send_wqebb: 1 << 15,
            max_recv_wr: 1 << 15,
            max_srq_recv_wr: 1 << 15,
            num_ports: 1,
            response_length: size_of::<mlx5_ib_alloc_ucontext_resp>() as u32,
            cqe_version: req.max_cqe_version.min(1),
            cmds_supp_uhw: (MLX5_USER_CMDS_SUPP_UHW_QUERY_DEVICE
                | MLX5_USER_CMDS_SUPP_UHW_CREATE_AH) as u8,
            eth_min_inline: MLX5_USER_INLINE_MODE_NONE as u8,
            log_uar_size: 12,
            num_uars_per_page: 1,
            ..Default::default()
        };
        call.write_output(
            UVERBS_ATTR_GET_CONTEXT_NUM_COMP_VECTORS,
            &1u32.to_le_bytes(),
        )?;
        call.write_output(
            UVERBS_ATTR_GET_CONTEXT_CORE_SUPPORT,
            &IB_UVERBS_CORE_SUPPORT_OPTIONAL_MR_ACCESS.to_le_bytes(),
        )?;
        let room = call.output_len(UVERBS_ATTR_UHW_OUT).unwrap_or(0);
        let bytes = resp.as_bytes();
        call.write_output(UVERBS_ATTR_UHW_OUT, &bytes[..room.min(bytes.len())])?;
        self.context = Some(req);
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
            },
        );
        Ok(())
    }

    /// `mlx5_ib_mmap` of `len` bytes at `offset`: a UAR page (REGULAR,
    /// WC or NC) of the context's; `EINVAL` for anything else.
    pub fn mmap(&mut self, offset: u64, len: usize) -> Result<*mut u8, Errno> {
        let page = offset / UAR_PAGE as u64;
        let (command, index) = ((page >> 8) as u32 & 0xff, page & 0xff);
        let uar_pages = u64::from(TOT_BFREGS / 2);
        if offset % UAR_PAGE as u64 != 0
            || len != UAR_PAGE
            || !matches!(
                command,
                MLX5_IB_MMAP_REGULAR_PAGE | MLX5_IB_MMAP_WC_PAGE | MLX5_IB_MMAP_NC_PAGE
            )
            || index >= uar_pages
            || self.context.is_none()
        {
            return Err(libc::EINVAL);
        }
        let mut page = Box::new(UarPage([0; UAR_PAGE]));
        let addr = page.0.as_mut_ptr();
        self.uars.push(Uar { offset, page });
        Ok(addr)
    }

    /// Unmaps a UAR page handed out by [`mmap`](Self::mmap); false if
    /// `addr` is none of them.
    pub fn munmap(&mut self, addr: *const u8) -> bool {
        let before = self.uars.len();
        self.uars.retain(|u| u.page.0.as_ptr() != addr);
        self.uars.len() != before
    }
}

/// `mlx5_ib_query_port` of port 1: an active RoCE port (Ethernet link
/// layer, 1024-byte MTU of 4096 possible).
fn query_port(call: &mut Call) -> Result<(), Errno> {
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
    p.link_layer = 2; // IB_LINK_LAYER_ETHERNET
    let room = call.output_len(UVERBS_ATTR_QUERY_PORT_RESP).unwrap_or(0);
    let bytes = resp.as_bytes();
    call.write_output(UVERBS_ATTR_QUERY_PORT_RESP, &bytes[..room.min(bytes.len())])
}
