//! Mirror of `<rdma/ib_user_ioctl_cmds.h>`: object, method and attribute ids.
//!
//! Items marked "newer than the 6.1 header" come from later kernels and are not
//! checked against the locally installed C header.

/// Mask of the namespace bits of an object/method/attribute id.
pub const UVERBS_ID_NS_MASK: u16 = 0xF000;
/// Shift of the namespace bits of an object/method/attribute id.
pub const UVERBS_ID_NS_SHIFT: u16 = 12;
/// First id of the driver-specific namespace (newer than the 6.1 header).
pub const UVERBS_ID_DRIVER_NS: u16 = 1 << UVERBS_ID_NS_SHIFT;
/// Attribute id of the driver-private (UHW) input data.
pub const UVERBS_ATTR_UHW_IN: u16 = 1 << UVERBS_ID_NS_SHIFT;
/// Attribute id of the driver-private (UHW) output data.
pub const UVERBS_ATTR_UHW_OUT: u16 = UVERBS_ATTR_UHW_IN + 1;
/// First free driver attribute id after the UHW ones (newer than the 6.1 header).
pub const UVERBS_ID_DRIVER_NS_WITH_UHW: u16 = UVERBS_ATTR_UHW_OUT + 1;

/// Object: the device itself (no instances).
pub const UVERBS_OBJECT_DEVICE: u16 = 0;
/// Object: protection domain.
pub const UVERBS_OBJECT_PD: u16 = 1;
/// Object: completion channel.
pub const UVERBS_OBJECT_COMP_CHANNEL: u16 = 2;
/// Object: completion queue.
pub const UVERBS_OBJECT_CQ: u16 = 3;
/// Object: queue pair.
pub const UVERBS_OBJECT_QP: u16 = 4;
/// Object: shared receive queue.
pub const UVERBS_OBJECT_SRQ: u16 = 5;
/// Object: address handle.
pub const UVERBS_OBJECT_AH: u16 = 6;
/// Object: memory region.
pub const UVERBS_OBJECT_MR: u16 = 7;
/// Object: memory window.
pub const UVERBS_OBJECT_MW: u16 = 8;
/// Object: flow steering rule.
pub const UVERBS_OBJECT_FLOW: u16 = 9;
/// Object: XRC domain.
pub const UVERBS_OBJECT_XRCD: u16 = 10;
/// Object: receive work queue indirection table.
pub const UVERBS_OBJECT_RWQ_IND_TBL: u16 = 11;
/// Object: work queue.
pub const UVERBS_OBJECT_WQ: u16 = 12;
/// Object: flow action.
pub const UVERBS_OBJECT_FLOW_ACTION: u16 = 13;
/// Object: device memory.
pub const UVERBS_OBJECT_DM: u16 = 14;
/// Object: counters.
pub const UVERBS_OBJECT_COUNTERS: u16 = 15;
/// Object: asynchronous event file.
pub const UVERBS_OBJECT_ASYNC_EVENT: u16 = 16;

/// Device method: run a legacy write command through the ioctl path.
pub const UVERBS_METHOD_INVOKE_WRITE: u16 = 0;
/// Device method: list the handles of one object type.
pub const UVERBS_METHOD_INFO_HANDLES: u16 = 1;
/// Device method: query port attributes.
pub const UVERBS_METHOD_QUERY_PORT: u16 = 2;
/// Device method: set up the user context.
pub const UVERBS_METHOD_GET_CONTEXT: u16 = 3;
/// Device method: query the user context.
pub const UVERBS_METHOD_QUERY_CONTEXT: u16 = 4;
/// Device method: read the valid entries of every port's GID table.
pub const UVERBS_METHOD_QUERY_GID_TABLE: u16 = 5;
/// Device method: read one GID table entry.
pub const UVERBS_METHOD_QUERY_GID_ENTRY: u16 = 6;

/// `INVOKE_WRITE` attribute: the write command body (after `ib_uverbs_cmd_hdr`).
pub const UVERBS_ATTR_CORE_IN: u16 = 0;
/// `INVOKE_WRITE` attribute: the write command's core response.
pub const UVERBS_ATTR_CORE_OUT: u16 = 1;
/// `INVOKE_WRITE` attribute: the write command number.
pub const UVERBS_ATTR_WRITE_CMD: u16 = 2;

/// `GET_CONTEXT` attribute: number of completion vectors (u32 out).
pub const UVERBS_ATTR_GET_CONTEXT_NUM_COMP_VECTORS: u16 = 0;
/// `GET_CONTEXT` attribute: core support flags (u64 out, `IB_UVERBS_CORE_SUPPORT_*`).
pub const UVERBS_ATTR_GET_CONTEXT_CORE_SUPPORT: u16 = 1;
/// `GET_CONTEXT` attribute: array of fds (optional in; newer than the 6.1 header).
pub const UVERBS_ATTR_GET_CONTEXT_FD_ARR: u16 = 2;

/// `QUERY_PORT` attribute: the port number (const in, u8).
pub const UVERBS_ATTR_QUERY_PORT_PORT_NUM: u16 = 0;
/// `QUERY_PORT` attribute: `ib_uverbs_query_port_resp_ex` (out).
pub const UVERBS_ATTR_QUERY_PORT_RESP: u16 = 1;

/// `QUERY_CONTEXT` attribute: number of completion vectors (u32 out).
pub const UVERBS_ATTR_QUERY_CONTEXT_NUM_COMP_VECTORS: u16 = 0;
/// `QUERY_CONTEXT` attribute: core support flags (u64 out).
pub const UVERBS_ATTR_QUERY_CONTEXT_CORE_SUPPORT: u16 = 1;

/// `QUERY_GID_TABLE` attribute: the size of one entry as userspace lays it out (const in).
pub const UVERBS_ATTR_QUERY_GID_TABLE_ENTRY_SIZE: u16 = 0;
/// `QUERY_GID_TABLE` attribute: flags (optional, must be 0).
pub const UVERBS_ATTR_QUERY_GID_TABLE_FLAGS: u16 = 1;
/// `QUERY_GID_TABLE` attribute: the entries (out array of `ib_uverbs_gid_entry`).
pub const UVERBS_ATTR_QUERY_GID_TABLE_RESP_ENTRIES: u16 = 2;
/// `QUERY_GID_TABLE` attribute: how many entries were written (u64 out).
pub const UVERBS_ATTR_QUERY_GID_TABLE_RESP_NUM_ENTRIES: u16 = 3;

/// `QUERY_GID_ENTRY` attribute: the port (const in, u32).
pub const UVERBS_ATTR_QUERY_GID_ENTRY_PORT: u16 = 0;
/// `QUERY_GID_ENTRY` attribute: the GID index (const in, u32).
pub const UVERBS_ATTR_QUERY_GID_ENTRY_GID_INDEX: u16 = 1;
/// `QUERY_GID_ENTRY` attribute: flags (mandatory, must be 0).
pub const UVERBS_ATTR_QUERY_GID_ENTRY_FLAGS: u16 = 2;
/// `QUERY_GID_ENTRY` attribute: the `ib_uverbs_gid_entry` (out).
pub const UVERBS_ATTR_QUERY_GID_ENTRY_RESP_ENTRY: u16 = 3;

/// `INFO_HANDLES` attribute: the object type to list.
pub const UVERBS_ATTR_INFO_OBJECT_ID: u16 = 0;
/// `INFO_HANDLES` attribute: total number of handles (u32 out).
pub const UVERBS_ATTR_INFO_TOTAL_HANDLES: u16 = 1;
/// `INFO_HANDLES` attribute: the handles (u32 array out).
pub const UVERBS_ATTR_INFO_HANDLES_LIST: u16 = 2;

/// PD method: destroy the protection domain.
pub const UVERBS_METHOD_PD_DESTROY: u16 = 0;
/// `PD_DESTROY` attribute: the PD handle.
pub const UVERBS_ATTR_DESTROY_PD_HANDLE: u16 = 0;

/// MR method: register device memory as an MR.
pub const UVERBS_METHOD_DM_MR_REG: u16 = 0;
/// MR method: destroy (deregister) the memory region.
pub const UVERBS_METHOD_MR_DESTROY: u16 = 1;
/// MR method: give the device advice about an MR range (prefetch).
pub const UVERBS_METHOD_ADVISE_MR: u16 = 2;
/// MR method: query the memory region.
pub const UVERBS_METHOD_QUERY_MR: u16 = 3;
/// MR method: register a dma-buf backed memory region.
pub const UVERBS_METHOD_REG_DMABUF_MR: u16 = 4;
/// MR method: register user memory by address or a dma-buf by descriptor,
/// at any iova, optionally with a DMA handle (Linux 6.17; newer than the 6.1
/// header).
pub const UVERBS_METHOD_REG_MR: u16 = 5;

/// `MR_DESTROY` attribute: the MR handle.
pub const UVERBS_ATTR_DESTROY_MR_HANDLE: u16 = 0;

/// `QUERY_MR` attribute: the MR handle.
pub const UVERBS_ATTR_QUERY_MR_HANDLE: u16 = 0;
/// `QUERY_MR` attribute: local key (u32 out).
pub const UVERBS_ATTR_QUERY_MR_RESP_LKEY: u16 = 1;
/// `QUERY_MR` attribute: remote key (u32 out).
pub const UVERBS_ATTR_QUERY_MR_RESP_RKEY: u16 = 2;
/// `QUERY_MR` attribute: length (u64 out).
pub const UVERBS_ATTR_QUERY_MR_RESP_LENGTH: u16 = 3;
/// `QUERY_MR` attribute: I/O virtual address (u64 out).
pub const UVERBS_ATTR_QUERY_MR_RESP_IOVA: u16 = 4;

// `enum uverbs_attrs_reg_mr_cmd_attr_ids`, Linux 6.17 (commits "IB/core: Add
// UVERBS_METHOD_REG_MR on the MR object" and "IB: Extend
// UVERBS_METHOD_REG_MR to get DMAH", merged together, so the released enum
// has DMA_HANDLE at 2). Newer than the 6.1 header: pinned by unit tests.

/// `REG_MR` attribute: the new MR (IDR, new; newer than the 6.1 header).
pub const UVERBS_ATTR_REG_MR_HANDLE: u16 = 0;
/// `REG_MR` attribute: the PD (IDR, read; newer than the 6.1 header).
pub const UVERBS_ATTR_REG_MR_PD_HANDLE: u16 = 1;
/// `REG_MR` attribute: a DMA handle (IDR, read, optional; newer than the 6.1
/// header).
pub const UVERBS_ATTR_REG_MR_DMA_HANDLE: u16 = 2;
/// `REG_MR` attribute: the device's address of the first byte (u64 in;
/// newer than the 6.1 header).
pub const UVERBS_ATTR_REG_MR_IOVA: u16 = 3;
/// `REG_MR` attribute: the process's address of the first byte (u64 in,
/// optional; excludes `FD`; newer than the 6.1 header).
pub const UVERBS_ATTR_REG_MR_ADDR: u16 = 4;
/// `REG_MR` attribute: length in bytes (u64 in; newer than the 6.1 header).
pub const UVERBS_ATTR_REG_MR_LENGTH: u16 = 5;
/// `REG_MR` attribute: `IB_UVERBS_ACCESS_*` (flags in; newer than the 6.1
/// header).
pub const UVERBS_ATTR_REG_MR_ACCESS_FLAGS: u16 = 6;
/// `REG_MR` attribute: a dma-buf descriptor (raw fd in, optional; newer than
/// the 6.1 header).
pub const UVERBS_ATTR_REG_MR_FD: u16 = 7;
/// `REG_MR` attribute: offset into the dma-buf (u64 in, optional, with `FD`;
/// newer than the 6.1 header).
pub const UVERBS_ATTR_REG_MR_FD_OFFSET: u16 = 8;
/// `REG_MR` attribute: local key (u32 out; newer than the 6.1 header).
pub const UVERBS_ATTR_REG_MR_RESP_LKEY: u16 = 9;
/// `REG_MR` attribute: remote key (u32 out; newer than the 6.1 header).
pub const UVERBS_ATTR_REG_MR_RESP_RKEY: u16 = 10;

/// Async event method: allocate the async event file.
pub const UVERBS_METHOD_ASYNC_EVENT_ALLOC: u16 = 0;
/// `ASYNC_EVENT_ALLOC` attribute: the new fd (fd out).
pub const UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE: u16 = 0;

/// CQ method: create a completion queue.
pub const UVERBS_METHOD_CQ_CREATE: u16 = 0;
/// CQ method: destroy a completion queue.
pub const UVERBS_METHOD_CQ_DESTROY: u16 = 1;

/// `CQ_CREATE` attribute: the new CQ (IDR, new).
pub const UVERBS_ATTR_CREATE_CQ_HANDLE: u16 = 0;
/// `CQ_CREATE` attribute: minimum number of entries (u32 in).
pub const UVERBS_ATTR_CREATE_CQ_CQE: u16 = 1;
/// `CQ_CREATE` attribute: the user handle of events (u64 in).
pub const UVERBS_ATTR_CREATE_CQ_USER_HANDLE: u16 = 2;
/// `CQ_CREATE` attribute: the completion channel (FD, optional).
pub const UVERBS_ATTR_CREATE_CQ_COMP_CHANNEL: u16 = 3;
/// `CQ_CREATE` attribute: completion vector (u32 in).
pub const UVERBS_ATTR_CREATE_CQ_COMP_VECTOR: u16 = 4;
/// `CQ_CREATE` attribute: `IB_UVERBS_CQ_FLAGS_*` (flags in, optional).
pub const UVERBS_ATTR_CREATE_CQ_FLAGS: u16 = 5;
/// `CQ_CREATE` attribute: the real number of entries (u32 out).
pub const UVERBS_ATTR_CREATE_CQ_RESP_CQE: u16 = 6;
/// `CQ_CREATE` attribute: the async event file (FD, optional).
pub const UVERBS_ATTR_CREATE_CQ_EVENT_FD: u16 = 7;

/// `CQ_DESTROY` attribute: the CQ (IDR, destroy).
pub const UVERBS_ATTR_DESTROY_CQ_HANDLE: u16 = 0;
/// `CQ_DESTROY` attribute: `ib_uverbs_destroy_cq_resp` (out).
pub const UVERBS_ATTR_DESTROY_CQ_RESP: u16 = 1;

/// SRQ method: create a shared receive queue.
pub const UVERBS_METHOD_SRQ_CREATE: u16 = 0;
/// SRQ method: destroy a shared receive queue.
pub const UVERBS_METHOD_SRQ_DESTROY: u16 = 1;

/// `SRQ_CREATE` attribute: the new SRQ (IDR, new).
pub const UVERBS_ATTR_CREATE_SRQ_HANDLE: u16 = 0;
/// `SRQ_CREATE` attribute: protection domain (IDR).
pub const UVERBS_ATTR_CREATE_SRQ_PD_HANDLE: u16 = 1;
/// `SRQ_CREATE` attribute: XRC domain (IDR, XRC SRQs).
pub const UVERBS_ATTR_CREATE_SRQ_XRCD_HANDLE: u16 = 2;
/// `SRQ_CREATE` attribute: CQ (IDR, XRC and tag-matching SRQs).
pub const UVERBS_ATTR_CREATE_SRQ_CQ_HANDLE: u16 = 3;
/// `SRQ_CREATE` attribute: the user handle of events (u64 in).
pub const UVERBS_ATTR_CREATE_SRQ_USER_HANDLE: u16 = 4;
/// `SRQ_CREATE` attribute: receive requests asked for (u32 in).
pub const UVERBS_ATTR_CREATE_SRQ_MAX_WR: u16 = 5;
/// `SRQ_CREATE` attribute: SGEs per request asked for (u32 in).
pub const UVERBS_ATTR_CREATE_SRQ_MAX_SGE: u16 = 6;
/// `SRQ_CREATE` attribute: the limit to arm at (u32 in).
pub const UVERBS_ATTR_CREATE_SRQ_LIMIT: u16 = 7;
/// `SRQ_CREATE` attribute: tags of a tag-matching SRQ (u32 in).
pub const UVERBS_ATTR_CREATE_SRQ_MAX_NUM_TAGS: u16 = 8;
/// `SRQ_CREATE` attribute: `IB_UVERBS_SRQT_*` (const in).
pub const UVERBS_ATTR_CREATE_SRQ_TYPE: u16 = 9;
/// `SRQ_CREATE` attribute: the async event file (FD, optional).
pub const UVERBS_ATTR_CREATE_SRQ_EVENT_FD: u16 = 10;
/// `SRQ_CREATE` attribute: receive requests it holds (u32 out).
pub const UVERBS_ATTR_CREATE_SRQ_RESP_MAX_WR: u16 = 11;
/// `SRQ_CREATE` attribute: SGEs per request (u32 out).
pub const UVERBS_ATTR_CREATE_SRQ_RESP_MAX_SGE: u16 = 12;
/// `SRQ_CREATE` attribute: the SRQ number of an XRC SRQ (u32 out).
pub const UVERBS_ATTR_CREATE_SRQ_RESP_SRQ_NUM: u16 = 13;
/// `SRQ_DESTROY` attribute: the SRQ (IDR, destroy).
pub const UVERBS_ATTR_DESTROY_SRQ_HANDLE: u16 = 0;
/// `SRQ_DESTROY` attribute: `ib_uverbs_destroy_srq_resp` (out).
pub const UVERBS_ATTR_DESTROY_SRQ_RESP: u16 = 1;

/// QP method: create a queue pair.
pub const UVERBS_METHOD_QP_CREATE: u16 = 0;
/// QP method: destroy a queue pair.
pub const UVERBS_METHOD_QP_DESTROY: u16 = 1;

/// `QP_CREATE` attribute: the new QP (IDR, new).
pub const UVERBS_ATTR_CREATE_QP_HANDLE: u16 = 0;
/// `QP_CREATE` attribute: XRC domain (IDR, optional).
pub const UVERBS_ATTR_CREATE_QP_XRCD_HANDLE: u16 = 1;
/// `QP_CREATE` attribute: protection domain (IDR, optional).
pub const UVERBS_ATTR_CREATE_QP_PD_HANDLE: u16 = 2;
/// `QP_CREATE` attribute: shared receive queue (IDR, optional).
pub const UVERBS_ATTR_CREATE_QP_SRQ_HANDLE: u16 = 3;
/// `QP_CREATE` attribute: send CQ (IDR, optional).
pub const UVERBS_ATTR_CREATE_QP_SEND_CQ_HANDLE: u16 = 4;
/// `QP_CREATE` attribute: receive CQ (IDR, optional).
pub const UVERBS_ATTR_CREATE_QP_RECV_CQ_HANDLE: u16 = 5;
/// `QP_CREATE` attribute: RWQ indirection table (IDR, optional).
pub const UVERBS_ATTR_CREATE_QP_IND_TABLE_HANDLE: u16 = 6;
/// `QP_CREATE` attribute: the user handle of events (u64 in).
pub const UVERBS_ATTR_CREATE_QP_USER_HANDLE: u16 = 7;
/// `QP_CREATE` attribute: requested `ib_uverbs_qp_cap` (in).
pub const UVERBS_ATTR_CREATE_QP_CAP: u16 = 8;
/// `QP_CREATE` attribute: `IB_UVERBS_QPT_*` (const in).
pub const UVERBS_ATTR_CREATE_QP_TYPE: u16 = 9;
/// `QP_CREATE` attribute: `IB_UVERBS_QP_CREATE_*` (flags in, optional).
pub const UVERBS_ATTR_CREATE_QP_FLAGS: u16 = 10;
/// `QP_CREATE` attribute: source QPN (u32 in, optional).
pub const UVERBS_ATTR_CREATE_QP_SOURCE_QPN: u16 = 11;
/// `QP_CREATE` attribute: the async event file (FD, optional).
pub const UVERBS_ATTR_CREATE_QP_EVENT_FD: u16 = 12;
/// `QP_CREATE` attribute: the real `ib_uverbs_qp_cap` (out).
pub const UVERBS_ATTR_CREATE_QP_RESP_CAP: u16 = 13;
/// `QP_CREATE` attribute: the QP number (u32 out).
pub const UVERBS_ATTR_CREATE_QP_RESP_QP_NUM: u16 = 14;

/// `QP_DESTROY` attribute: the QP (IDR, destroy).
pub const UVERBS_ATTR_DESTROY_QP_HANDLE: u16 = 0;
/// `QP_DESTROY` attribute: `ib_uverbs_destroy_qp_resp` (out).
pub const UVERBS_ATTR_DESTROY_QP_RESP: u16 = 1;
