//! Memory-region methods: `UVERBS_METHOD_QUERY_MR`,
//! `UVERBS_METHOD_REG_DMABUF_MR` and `UVERBS_METHOD_REG_MR`.

use crate::error::Errno;
use crate::mr::MrAttr;
use crate::transport::{Method, NewHandle, Out, Transport};
use uverbs_uapi as sys;

/// `QUERY_MR`: the kernel's lkey, rkey, length and iova of an MR.
#[derive(Debug, Default)]
pub(crate) struct QueryMr {
    mr_handle: u32,
    lkey: u32,
    rkey: u32,
    length: u64,
    iova: u64,
}

/// The outputs of a framed [`QueryMr`].
pub(crate) struct QueryMrOuts<'a> {
    lkey: Out<'a, u32>,
    rkey: Out<'a, u32>,
    length: Out<'a, u64>,
    iova: Out<'a, u64>,
}

impl QueryMr {
    /// Query the MR with this handle.
    pub(crate) fn new(mr_handle: u32) -> Self {
        QueryMr {
            mr_handle,
            ..Default::default()
        }
    }

    /// The frame: the MR handle (IDR, read access), then the four outputs
    /// in id order, each exactly its type's size (`UVERBS_ATTR_TYPE`).
    pub(crate) fn method(&mut self, driver_id: u32) -> (Method<'_>, QueryMrOuts<'_>) {
        let mut m = Method::new(
            sys::UVERBS_OBJECT_MR,
            sys::UVERBS_METHOD_QUERY_MR,
            driver_id,
        );
        m.idr_in(sys::UVERBS_ATTR_QUERY_MR_HANDLE, self.mr_handle);
        let outs = QueryMrOuts {
            lkey: m.ptr_out(sys::UVERBS_ATTR_QUERY_MR_RESP_LKEY, &mut self.lkey),
            rkey: m.ptr_out(sys::UVERBS_ATTR_QUERY_MR_RESP_RKEY, &mut self.rkey),
            length: m.ptr_out(sys::UVERBS_ATTR_QUERY_MR_RESP_LENGTH, &mut self.length),
            iova: m.ptr_out(sys::UVERBS_ATTR_QUERY_MR_RESP_IOVA, &mut self.iova),
        };
        (m, outs)
    }

    /// Sends the method and decodes the answer.
    pub(crate) fn run(
        mut self,
        transport: &dyn Transport,
        driver_id: u32,
    ) -> Result<MrAttr, Errno> {
        let (method, outs) = self.method(driver_id);
        let done = super::send_query(method, transport)?;
        Ok(MrAttr {
            lkey: done.read(outs.lkey).ok_or(Errno::PROTO)?,
            rkey: done.read(outs.rkey).ok_or(Errno::PROTO)?,
            length: done.read(outs.length).ok_or(Errno::PROTO)?,
            iova: done.read(outs.iova).ok_or(Errno::PROTO)?,
        })
    }
}

/// `UVERBS_ATTR_REG_DMABUF_MR_*` (`enum uverbs_attrs_reg_dmabuf_mr_cmd_attr_ids`
/// of `<rdma/ib_user_ioctl_cmds.h>`, Linux 5.12+), which the uapi crate
/// does not mirror yet.
mod reg_dmabuf_attr {
    pub(super) const HANDLE: u16 = 0;
    pub(super) const PD_HANDLE: u16 = 1;
    pub(super) const OFFSET: u16 = 2;
    pub(super) const LENGTH: u16 = 3;
    pub(super) const IOVA: u16 = 4;
    pub(super) const FD: u16 = 5;
    pub(super) const ACCESS_FLAGS: u16 = 6;
    pub(super) const RESP_LKEY: u16 = 7;
    pub(super) const RESP_RKEY: u16 = 8;
}

/// `REG_DMABUF_MR`: registers `length` bytes at `offset` of a DMA-BUF,
/// seen by the device at `iova`.
#[derive(Debug, Default)]
pub(crate) struct RegDmabufMr {
    pd_handle: u32,
    offset: u64,
    length: u64,
    iova: u64,
    fd: u32,
    access: u32,
    lkey: u32,
    rkey: u32,
}

/// The outputs of a framed [`RegDmabufMr`].
pub(crate) struct RegDmabufMrOuts<'a> {
    handle: NewHandle,
    lkey: Out<'a, u32>,
    rkey: Out<'a, u32>,
}

/// What a successful `REG_DMABUF_MR` answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DmabufMrKeys {
    pub(crate) handle: u32,
    pub(crate) lkey: u32,
    pub(crate) rkey: u32,
}

impl RegDmabufMr {
    /// Register `[offset, offset + length)` of the DMA-BUF `fd` in PD
    /// `pd_handle` at `iova`, with `access` (`IB_UVERBS_ACCESS_*`).
    pub(crate) fn new(
        pd_handle: u32,
        offset: u64,
        length: u64,
        iova: u64,
        fd: u32,
        access: u32,
    ) -> Self {
        RegDmabufMr {
            pd_handle,
            offset,
            length,
            iova,
            fd,
            access,
            ..Default::default()
        }
    }

    /// The frame, attribute for attribute in libibverbs 44's order
    /// (`ibv_cmd_reg_dmabuf_mr`), so the two frames are the same bytes but
    /// for the output pointers: HANDLE (IDR new), RESP_LKEY and RESP_RKEY
    /// (u32 out), PD_HANDLE (IDR), OFFSET, LENGTH, IOVA (u64, inline), FD
    /// and ACCESS_FLAGS (u32, inline; the descriptor is a plain `PTR_IN`
    /// here, not an FD attribute).
    pub(crate) fn method(&mut self, driver_id: u32) -> (Method<'_>, RegDmabufMrOuts<'_>) {
        use reg_dmabuf_attr as a;
        let mut m = Method::new(
            sys::UVERBS_OBJECT_MR,
            sys::UVERBS_METHOD_REG_DMABUF_MR,
            driver_id,
        );
        let handle = m.idr_new(a::HANDLE);
        let lkey = m.ptr_out(a::RESP_LKEY, &mut self.lkey);
        let rkey = m.ptr_out(a::RESP_RKEY, &mut self.rkey);
        m.idr_in(a::PD_HANDLE, self.pd_handle)
            .inline_in(a::OFFSET, self.offset)
            .inline_in(a::LENGTH, self.length)
            .inline_in(a::IOVA, self.iova)
            .inline_in(a::FD, self.fd)
            .inline_in(a::ACCESS_FLAGS, self.access);
        (m, RegDmabufMrOuts { handle, lkey, rkey })
    }

    /// Sends the method and decodes the answer.
    ///
    /// # Safety
    ///
    /// As [`Method::invoke`]: the registration gives the device the
    /// DMA-BUF's memory, which the caller must accept (it is the
    /// exporter's, held by the kernel's own reference, not memory of this
    /// process named by address).
    pub(crate) unsafe fn run(
        mut self,
        transport: &dyn Transport,
        driver_id: u32,
    ) -> Result<DmabufMrKeys, Errno> {
        let (method, outs) = self.method(driver_id);
        // SAFETY: the caller's promise; the frame points only at `self`'s
        // key fields, borrowed across the call.
        let done = unsafe { method.invoke(transport) }?;
        Ok(DmabufMrKeys {
            handle: done.handle(outs.handle).ok_or(Errno::PROTO)?,
            lkey: done.read(outs.lkey).ok_or(Errno::PROTO)?,
            rkey: done.read(outs.rkey).ok_or(Errno::PROTO)?,
        })
    }
}

/// `REG_MR` (Linux 6.17): registers `length` bytes of this process's memory
/// at `addr`, seen by the device at `iova`: the native form of the write
/// command [`crate::command::RegMr`], which it answers the same handle and
/// keys as.
///
/// It carries no driver data: the kernel hands the driver no udata (a
/// `NULL` `ib_udata` to `reg_user_mr`), so only drivers whose REG_MR needs
/// none may use it (see `Driver::REG_MR_METHOD`). The kernel checks, before
/// any driver call, that `addr` and `iova` share their offset in the page
/// (else `EINVAL`) and that `access` has only `IB_ACCESS_SUPPORTED` bits
/// (`uverbs_get_flags32`, else `EINVAL`). A kernel without the method
/// answers `EPROTONOSUPPORT`.
#[derive(Debug, Default)]
pub(crate) struct RegMr {
    pd_handle: u32,
    addr: u64,
    length: u64,
    iova: u64,
    access: u32,
    lkey: u32,
    rkey: u32,
}

/// The outputs of a framed [`RegMr`].
pub(crate) struct RegMrOuts<'a> {
    handle: NewHandle,
    lkey: Out<'a, u32>,
    rkey: Out<'a, u32>,
}

/// What a successful native `REG_MR` answered: what the write command's
/// `ib_uverbs_reg_mr_resp` carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MrKeys {
    pub(crate) handle: u32,
    pub(crate) lkey: u32,
    pub(crate) rkey: u32,
}

impl RegMr {
    /// Register `[addr, addr + length)` in PD `pd_handle` at `iova`, with
    /// `access` (`IB_UVERBS_ACCESS_*`).
    pub(crate) fn new(pd_handle: u32, addr: u64, length: u64, iova: u64, access: u32) -> Self {
        RegMr {
            pd_handle,
            addr,
            length,
            iova,
            access,
            ..Default::default()
        }
    }

    /// The frame, attributes in id order: HANDLE (IDR new), PD_HANDLE
    /// (IDR), IOVA, ADDR, LENGTH (u64, inline), ACCESS_FLAGS (u32, inline),
    /// RESP_LKEY and RESP_RKEY (u32 out). No DMA_HANDLE, FD or FD_OFFSET
    /// (the kernel takes ADDR xor FD), no driver data.
    pub(crate) fn method(&mut self, driver_id: u32) -> (Method<'_>, RegMrOuts<'_>) {
        let mut m = Method::new(sys::UVERBS_OBJECT_MR, sys::UVERBS_METHOD_REG_MR, driver_id);
        let handle = m.idr_new(sys::UVERBS_ATTR_REG_MR_HANDLE);
        m.idr_in(sys::UVERBS_ATTR_REG_MR_PD_HANDLE, self.pd_handle)
            .inline_in(sys::UVERBS_ATTR_REG_MR_IOVA, self.iova)
            .inline_in(sys::UVERBS_ATTR_REG_MR_ADDR, self.addr)
            .inline_in(sys::UVERBS_ATTR_REG_MR_LENGTH, self.length)
            .inline_in(sys::UVERBS_ATTR_REG_MR_ACCESS_FLAGS, self.access);
        let lkey = m.ptr_out(sys::UVERBS_ATTR_REG_MR_RESP_LKEY, &mut self.lkey);
        let rkey = m.ptr_out(sys::UVERBS_ATTR_REG_MR_RESP_RKEY, &mut self.rkey);
        (m, RegMrOuts { handle, lkey, rkey })
    }

    /// Sends the method and decodes the answer; an answer without the new
    /// handle or either key marked written is `EPROTO`.
    ///
    /// # Safety
    ///
    /// As [`Method::invoke`]: the registration gives the device the memory
    /// `[addr, addr + length)` of this process, which the caller must keep
    /// mapped while it is registered (as for the write command).
    pub(crate) unsafe fn run(
        mut self,
        transport: &dyn Transport,
        driver_id: u32,
    ) -> Result<MrKeys, Errno> {
        let (method, outs) = self.method(driver_id);
        // SAFETY: the caller's promise; the frame points only at `self`'s
        // key fields, borrowed across the call.
        let done = unsafe { method.invoke(transport) }?;
        Ok(MrKeys {
            handle: done.handle(outs.handle).ok_or(Errno::PROTO)?,
            lkey: done.read(outs.lkey).ok_or(Errno::PROTO)?,
            rkey: done.read(outs.rkey).ok_or(Errno::PROTO)?,
        })
    }
}
