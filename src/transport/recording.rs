//! A fake kernel that records every command and method: for tests that must
//! prove what was (or was not) sent, and for fault injection.
//!
//! Write commands arrive through [`Transport::execute`]; native methods
//! through [`Transport::invoke`], whose frames it decodes like the kernel's
//! `uverbs_ioctl.c` (header checks, each attribute's id, flags, length and
//! input bytes, read through the pointers) against a table of the methods it
//! knows, and answers from its own objects, setting
//! `UVERBS_ATTR_F_VALID_OUTPUT` on what it writes.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Mutex;

#[cfg(not(miri))]
use std::os::fd::AsFd;

use super::frame::IoctlFrame;
use super::{RawCommand, SharedMapping, Transport, TransportKind};
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

/// One attribute of a method as the fake kernel received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedAttr {
    /// `attr_id` (driver attributes have bit 12 set).
    pub attr_id: u16,
    /// `len`.
    pub len: u16,
    /// `flags` as sent (`UVERBS_ATTR_F_MANDATORY`).
    pub flags: u16,
    /// `attr_data` (an enum attribute's `elem_id` in its first byte).
    pub attr_data: u16,
    /// `data`: inline value, pointer, handle or descriptor.
    pub data: u64,
    /// For inputs the method reads (const, pointer, enum, IDR arrays): the
    /// bytes the kernel reads, inline or behind the pointer. Empty for
    /// outputs, objects and attributes the method does not know.
    pub input: Vec<u8>,
}

/// One native method as the fake kernel received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedMethod {
    /// `object_id` (`UVERBS_OBJECT_*`).
    pub object_id: u16,
    /// `method_id` (`UVERBS_METHOD_*`).
    pub method_id: u16,
    /// `driver_id` of the header.
    pub driver_id: u32,
    /// The `hdr.length` bytes of header and attributes, as sent.
    pub frame: Vec<u8>,
    /// The attributes, decoded.
    pub attrs: Vec<RecordedAttr>,
}

impl RecordedMethod {
    /// The attribute with this id, if sent.
    pub fn attr(&self, attr_id: u16) -> Option<&RecordedAttr> {
        self.attrs.iter().find(|a| a.attr_id == attr_id)
    }
}

/// How the fake kernel treats an attribute (the kernel's attribute types).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `CONST_IN`: exactly 8 bytes inline.
    Const,
    /// `PTR_IN` of `min..=max` bytes.
    In,
    /// `PTR_OUT` of `min..=max` bytes.
    Out,
    /// `IDR` of an existing object: `len` 0.
    Idr,
}

/// One attribute of a known method: id, kind, mandatory, length bounds.
type Spec = (u16, Kind, bool, u16, u16);

/// The methods the fake kernel knows, with the kernel's attribute specs
/// (`uverbs_std_types_device.c`, `_mr.c`, `_cq.c`, `_qp.c` of Linux 6.12;
/// `REG_MR` of 6.17).
fn method_spec(object_id: u16, method_id: u16) -> Option<&'static [Spec]> {
    use Kind::*;
    const ANY: u16 = u16::MAX;
    Some(match (object_id, method_id) {
        (sys::UVERBS_OBJECT_DEVICE, sys::UVERBS_METHOD_INFO_HANDLES) => &[
            (sys::UVERBS_ATTR_INFO_OBJECT_ID, Const, true, 8, 8),
            (sys::UVERBS_ATTR_INFO_TOTAL_HANDLES, Out, false, 4, 4),
            (sys::UVERBS_ATTR_INFO_HANDLES_LIST, Out, false, 4, ANY),
        ],
        (sys::UVERBS_OBJECT_DEVICE, sys::UVERBS_METHOD_QUERY_PORT) => &[
            (sys::UVERBS_ATTR_QUERY_PORT_PORT_NUM, Const, true, 8, 8),
            (sys::UVERBS_ATTR_QUERY_PORT_RESP, Out, true, 48, ANY),
        ],
        (sys::UVERBS_OBJECT_DEVICE, sys::UVERBS_METHOD_QUERY_CONTEXT) => &[
            (
                sys::UVERBS_ATTR_QUERY_CONTEXT_NUM_COMP_VECTORS,
                Out,
                false,
                4,
                4,
            ),
            (
                sys::UVERBS_ATTR_QUERY_CONTEXT_CORE_SUPPORT,
                Out,
                false,
                8,
                8,
            ),
        ],
        (sys::UVERBS_OBJECT_DEVICE, sys::UVERBS_METHOD_QUERY_GID_TABLE) => &[
            (
                sys::UVERBS_ATTR_QUERY_GID_TABLE_ENTRY_SIZE,
                Const,
                true,
                8,
                8,
            ),
            (sys::UVERBS_ATTR_QUERY_GID_TABLE_FLAGS, In, false, 4, 8),
            (
                sys::UVERBS_ATTR_QUERY_GID_TABLE_RESP_ENTRIES,
                Out,
                true,
                0,
                ANY,
            ),
            (
                sys::UVERBS_ATTR_QUERY_GID_TABLE_RESP_NUM_ENTRIES,
                Out,
                true,
                8,
                8,
            ),
        ],
        (sys::UVERBS_OBJECT_DEVICE, sys::UVERBS_METHOD_QUERY_GID_ENTRY) => &[
            (sys::UVERBS_ATTR_QUERY_GID_ENTRY_PORT, Const, true, 8, 8),
            (
                sys::UVERBS_ATTR_QUERY_GID_ENTRY_GID_INDEX,
                Const,
                true,
                8,
                8,
            ),
            (sys::UVERBS_ATTR_QUERY_GID_ENTRY_FLAGS, In, true, 4, 8),
            (
                sys::UVERBS_ATTR_QUERY_GID_ENTRY_RESP_ENTRY,
                Out,
                true,
                32,
                ANY,
            ),
        ],
        (sys::UVERBS_OBJECT_MR, sys::UVERBS_METHOD_QUERY_MR) => &[
            (sys::UVERBS_ATTR_QUERY_MR_HANDLE, Idr, true, 0, 0),
            (sys::UVERBS_ATTR_QUERY_MR_RESP_LKEY, Out, true, 4, 4),
            (sys::UVERBS_ATTR_QUERY_MR_RESP_RKEY, Out, true, 4, 4),
            (sys::UVERBS_ATTR_QUERY_MR_RESP_LENGTH, Out, true, 8, 8),
            (sys::UVERBS_ATTR_QUERY_MR_RESP_IOVA, Out, true, 8, 8),
        ],
        // Linux 6.17 (`uverbs_std_types_mr.c`); known only after
        // `serve_reg_mr_method`. FD is a RAW_FD: an s32 PTR_IN.
        (sys::UVERBS_OBJECT_MR, sys::UVERBS_METHOD_REG_MR) => &[
            (sys::UVERBS_ATTR_REG_MR_HANDLE, Idr, true, 0, 0),
            (sys::UVERBS_ATTR_REG_MR_PD_HANDLE, Idr, true, 0, 0),
            (sys::UVERBS_ATTR_REG_MR_DMA_HANDLE, Idr, false, 0, 0),
            (sys::UVERBS_ATTR_REG_MR_IOVA, In, true, 8, 8),
            (sys::UVERBS_ATTR_REG_MR_LENGTH, In, true, 8, 8),
            (sys::UVERBS_ATTR_REG_MR_ACCESS_FLAGS, In, true, 4, 8),
            (sys::UVERBS_ATTR_REG_MR_ADDR, In, false, 8, 8),
            (sys::UVERBS_ATTR_REG_MR_FD_OFFSET, In, false, 8, 8),
            (sys::UVERBS_ATTR_REG_MR_FD, In, false, 4, 4),
            (sys::UVERBS_ATTR_REG_MR_RESP_LKEY, Out, true, 4, 4),
            (sys::UVERBS_ATTR_REG_MR_RESP_RKEY, Out, true, 4, 4),
        ],
        (sys::UVERBS_OBJECT_CQ, sys::UVERBS_METHOD_CQ_CREATE) => &[
            (sys::UVERBS_ATTR_CREATE_CQ_HANDLE, Idr, true, 0, 0),
            (sys::UVERBS_ATTR_CREATE_CQ_CQE, In, true, 4, 4),
            (sys::UVERBS_ATTR_CREATE_CQ_USER_HANDLE, In, true, 8, 8),
            (sys::UVERBS_ATTR_CREATE_CQ_COMP_CHANNEL, Idr, false, 0, 0),
            (sys::UVERBS_ATTR_CREATE_CQ_COMP_VECTOR, In, true, 4, 4),
            (sys::UVERBS_ATTR_CREATE_CQ_FLAGS, In, false, 4, 8),
            (sys::UVERBS_ATTR_CREATE_CQ_RESP_CQE, Out, true, 4, 4),
            (sys::UVERBS_ATTR_CREATE_CQ_EVENT_FD, Idr, false, 0, 0),
            (sys::UVERBS_ATTR_UHW_IN, In, false, 0, ANY),
            (sys::UVERBS_ATTR_UHW_OUT, Out, false, 0, ANY),
        ],
        (sys::UVERBS_OBJECT_CQ, sys::UVERBS_METHOD_CQ_DESTROY) => &[
            (sys::UVERBS_ATTR_DESTROY_CQ_HANDLE, Idr, true, 0, 0),
            (sys::UVERBS_ATTR_DESTROY_CQ_RESP, Out, true, 8, 8),
        ],
        (sys::UVERBS_OBJECT_QP, sys::UVERBS_METHOD_QP_CREATE) => &[
            (sys::UVERBS_ATTR_CREATE_QP_HANDLE, Idr, true, 0, 0),
            (sys::UVERBS_ATTR_CREATE_QP_PD_HANDLE, Idr, false, 0, 0),
            (sys::UVERBS_ATTR_CREATE_QP_SRQ_HANDLE, Idr, false, 0, 0),
            (sys::UVERBS_ATTR_CREATE_QP_SEND_CQ_HANDLE, Idr, false, 0, 0),
            (sys::UVERBS_ATTR_CREATE_QP_RECV_CQ_HANDLE, Idr, false, 0, 0),
            (sys::UVERBS_ATTR_CREATE_QP_USER_HANDLE, In, true, 8, 8),
            (sys::UVERBS_ATTR_CREATE_QP_CAP, In, true, 20, 20),
            (sys::UVERBS_ATTR_CREATE_QP_TYPE, Const, true, 8, 8),
            (sys::UVERBS_ATTR_CREATE_QP_FLAGS, In, false, 4, 8),
            (sys::UVERBS_ATTR_CREATE_QP_EVENT_FD, Idr, false, 0, 0),
            (sys::UVERBS_ATTR_CREATE_QP_RESP_CAP, Out, true, 20, 20),
            (sys::UVERBS_ATTR_CREATE_QP_RESP_QP_NUM, Out, true, 4, 4),
            (sys::UVERBS_ATTR_UHW_IN, In, false, 0, ANY),
            (sys::UVERBS_ATTR_UHW_OUT, Out, false, 0, ANY),
        ],
        (sys::UVERBS_OBJECT_QP, sys::UVERBS_METHOD_QP_DESTROY) => &[
            (sys::UVERBS_ATTR_DESTROY_QP_HANDLE, Idr, true, 0, 0),
            (sys::UVERBS_ATTR_DESTROY_QP_RESP, Out, true, 4, 4),
        ],
        _ => return None,
    })
}

/// The fake device's one port.
const FAKE_PORT: u32 = 1;
/// Its GID table: a link-local GID (RoCE v2, like rxe's index 0) and an
/// IPv4-mapped one.
const FAKE_GIDS: [[u8; 16]; 2] = [
    [
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55,
    ],
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1],
];
/// The interface index the fake's GIDs are on.
const FAKE_IFINDEX: u32 = 7;

#[derive(Clone, Copy, Debug)]
struct FakeMr {
    pd: u32,
    lkey: u32,
    rkey: u32,
    length: u64,
    iova: u64,
}

/// The outputs a method answers: (attribute id, bytes), written like the
/// kernel's `uverbs_copy_to` (at most the attribute's length).
type Answer = Vec<(u16, Vec<u8>)>;

/// A method's outputs and, for a create, the new object's (IDR attribute
/// id, handle) to write into the frame.
type CreateAnswer = (Answer, Option<(u16, u32)>);

#[derive(Debug, Default)]
struct FakeKernel {
    log: Vec<RecordedCommand>,
    methods: Vec<RecordedMethod>,
    failures: HashMap<u32, VecDeque<Errno>>,
    method_failures: HashMap<(u16, u16), VecDeque<Errno>>,
    next_handle: u32,
    next_key: u32,
    pds: BTreeSet<u32>,
    mrs: BTreeMap<u32, FakeMr>,
    async_fd: Option<u32>,
    datapath: FakeDataPath,
    /// Whether the native `UVERBS_METHOD_REG_MR` is known (Linux 6.17);
    /// without it the method is answered `EPROTONOSUPPORT`, as by 6.12.
    reg_mr_method: bool,
}

/// The fake's data-path objects: CQs and QPs (handle -> state), answered
/// like rxe (CQ sizes rounded to a power of two minus one, an `mminfo` per
/// ring in UHW out, EBUSY for a CQ a QP uses), through the write commands
/// and the native methods alike.
#[derive(Debug, Default)]
struct FakeDataPath {
    cqs: BTreeMap<u32, u32>,
    /// QP handle -> (send CQ, recv CQ, state).
    qps: BTreeMap<u32, (u32, u32, u8)>,
    /// QP handle -> the attributes its MODIFY_QPs set, as QUERY_QP
    /// answers them (rxe keeps them so, in `qp->attr`).
    qp_attrs: BTreeMap<u32, sys::ib_uverbs_query_qp_resp>,
    next_mmap: u64,
    /// mmap offset -> the ring announced there.
    rings: BTreeMap<u64, FakeRing>,
    /// Whether `map_queue` serves the rings
    /// ([`RecordingTransport::serve_rings`]).
    serve_rings: bool,
    /// CQ handle -> the (comp, async) event counts its destroy answers.
    events_reported: BTreeMap<u32, (u32, u32)>,
    /// CREATE_QP answers the work-request capacities asked for, not the
    /// rings' ([`RecordingTransport::answer_caps_as_asked`]).
    caps_as_asked: bool,
    /// The multicast groups attached: (QP handle, GID, LID).
    multicast: BTreeSet<(u32, [u8; 16], u16)>,
}

/// One ring the fake announced: its length and the header it starts with.
#[derive(Clone, Copy, Debug)]
struct FakeRing {
    size: u32,
    log2_elem_size: u32,
    index_mask: u32,
}

/// The page size the fake's rings are rounded to.
const FAKE_PAGE: usize = 4096;

impl FakeDataPath {
    /// A ring for at least `elems` elements of at least `elem` bytes, laid
    /// out like rxe's `rxe_queue_init` (slot size and slot count rounded up
    /// to powers of two, one slot always free, the header first), at a
    /// fresh page-aligned offset. Returns its `mminfo` and the elements it
    /// holds (`slots - 1`).
    fn ring(&mut self, elem: usize, elems: u32) -> (sys::mminfo, u32) {
        let log2_elem_size = elem.next_power_of_two().trailing_zeros();
        let slots = (elems + 1).next_power_of_two();
        let len = size_of::<sys::rxe_queue_buf>() + ((slots as usize) << log2_elem_size);
        let size = len.div_ceil(FAKE_PAGE) * FAKE_PAGE;
        self.next_mmap += (size + FAKE_PAGE) as u64;
        let ring = FakeRing {
            size: size as u32,
            log2_elem_size,
            index_mask: slots - 1,
        };
        self.rings.insert(self.next_mmap, ring);
        let mi = sys::mminfo {
            offset: self.next_mmap,
            size: ring.size,
            pad: 0,
        };
        (mi, slots - 1)
    }

    /// CREATE_CQ of either framing: (handle, real cqe, rxe's UHW answer).
    fn create_cq(
        &mut self,
        handle: u32,
        cqe: u32,
        uhw_out_len: usize,
    ) -> Result<(u32, u32, sys::rxe_create_cq_resp), Errno> {
        // rxe_create_cq: EINVAL without room for its answer.
        if cqe == 0 || uhw_out_len < size_of::<sys::rxe_create_cq_resp>() {
            return Err(Errno::INVAL);
        }
        let (mi, cqe) = self.ring(size_of::<sys::ib_uverbs_wc>(), cqe);
        self.cqs.insert(handle, cqe);
        Ok((handle, cqe, sys::rxe_create_cq_resp { mi }))
    }

    /// DESTROY_QP of either framing: EBUSY while a multicast group is
    /// attached (the kernel's `uverbs_free_qp`), EINVAL for no such QP.
    fn destroy_qp(&mut self, handle: u32) -> Result<(), Errno> {
        if self.multicast.iter().any(|m| m.0 == handle) {
            return Err(Errno::BUSY);
        }
        self.qps.remove(&handle).map(drop).ok_or(Errno::INVAL)
    }

    /// DESTROY_CQ of either framing: EBUSY while a QP uses the CQ.
    fn destroy_cq(&mut self, handle: u32) -> Result<sys::ib_uverbs_destroy_cq_resp, Errno> {
        if self.qps.values().any(|q| q.0 == handle || q.1 == handle) {
            return Err(Errno::BUSY);
        }
        self.cqs.remove(&handle).ok_or(Errno::INVAL)?;
        let (comp, async_events) = self.events_reported.remove(&handle).unwrap_or((0, 0));
        Ok(sys::ib_uverbs_destroy_cq_resp {
            comp_events_reported: comp,
            async_events_reported: async_events,
        })
    }

    /// CREATE_QP of either framing: (real caps, rxe's UHW answer); the QP
    /// number is `0x10 + handle`.
    fn create_qp(
        &mut self,
        handle: u32,
        (send_cq, recv_cq): (u32, u32),
        cap: sys::ib_uverbs_qp_cap,
        uhw_out_len: usize,
    ) -> Result<(sys::ib_uverbs_qp_cap, sys::rxe_create_qp_resp), Errno> {
        if !self.cqs.contains_key(&send_cq)
            || !self.cqs.contains_key(&recv_cq)
            || uhw_out_len < size_of::<sys::rxe_create_qp_resp>()
        {
            return Err(Errno::INVAL);
        }
        let sge = size_of::<sys::rxe_sge>();
        let send_room = (cap.max_send_sge as usize * sge).max(cap.max_inline_data as usize);
        let recv_room = cap.max_recv_sge as usize * sge;
        // RQ first, as rxe answers them.
        let (rq_mi, max_recv_wr) =
            self.ring(size_of::<sys::rxe_recv_wqe>() + recv_room, cap.max_recv_wr);
        let (sq_mi, max_send_wr) =
            self.ring(size_of::<sys::rxe_send_wqe>() + send_room, cap.max_send_wr);
        self.qps.insert(handle, (send_cq, recv_cq, 0));
        let cap = if self.caps_as_asked {
            cap
        } else {
            sys::ib_uverbs_qp_cap {
                max_send_wr,
                max_recv_wr,
                ..cap
            }
        };
        Ok((cap, sys::rxe_create_qp_resp { rq_mi, sq_mi }))
    }
}

/// Applies a MODIFY_QP to the attributes QUERY_QP answers: each attribute
/// whose mask bit is set (`enum ib_qp_attr_mask`), as rxe's
/// `rxe_qp_from_attr` does. The state is kept beside the QP.
fn apply_modify(attr: &mut sys::ib_uverbs_query_qp_resp, req: &sys::ib_uverbs_modify_qp) {
    let set = |bit: u32| req.attr_mask & (1 << bit) != 0;
    let r = req;
    let fields: [(u32, &mut dyn FnMut()); 15] = [
        (3, &mut || attr.qp_access_flags = r.qp_access_flags),
        (4, &mut || attr.pkey_index = r.pkey_index),
        (5, &mut || attr.port_num = r.port_num),
        (6, &mut || attr.qkey = r.qkey),
        (7, &mut || attr.dest = r.dest),
        (8, &mut || attr.path_mtu = r.path_mtu),
        (9, &mut || attr.timeout = r.timeout),
        (10, &mut || attr.retry_cnt = r.retry_cnt),
        (11, &mut || attr.rnr_retry = r.rnr_retry),
        (12, &mut || attr.rq_psn = r.rq_psn),
        (13, &mut || attr.max_rd_atomic = r.max_rd_atomic),
        (15, &mut || attr.min_rnr_timer = r.min_rnr_timer),
        (16, &mut || attr.sq_psn = r.sq_psn),
        (17, &mut || attr.max_dest_rd_atomic = r.max_dest_rd_atomic),
        (20, &mut || attr.dest_qp_num = r.dest_qp_num),
    ];
    for (bit, apply) in fields {
        if set(bit) {
            apply();
        }
    }
}

impl FakeKernel {
    /// Answers the data-path write commands; `None` for other codes.
    /// Returns the UHW out bytes written.
    fn answer_datapath(
        &mut self,
        rec: &RecordedCommand,
        cmd: &mut RawCommand<'_>,
    ) -> Option<Result<usize, Errno>> {
        Some(match rec.code {
            sys::IB_USER_VERBS_CMD_CREATE_CQ => (|| {
                let req: sys::ib_uverbs_create_cq = request_of(rec)?;
                let handle = self.handle();
                let (cq_handle, cqe, uhw) =
                    self.datapath
                        .create_cq(handle, req.cqe, cmd.uhw_out.len())?;
                write_out(
                    cmd.core_out,
                    sys::ib_uverbs_create_cq_resp { cq_handle, cqe },
                )?;
                write_out(cmd.uhw_out, uhw)?;
                Ok(size_of_val(&uhw))
            })(),
            sys::IB_USER_VERBS_CMD_DESTROY_CQ => (|| {
                let req: sys::ib_uverbs_destroy_cq = request_of(rec)?;
                let resp = self.datapath.destroy_cq(req.cq_handle)?;
                write_out(cmd.core_out, resp)?;
                Ok(0)
            })(),
            sys::IB_USER_VERBS_CMD_CREATE_QP => (|| {
                let req: sys::ib_uverbs_create_qp = request_of(rec)?;
                if !self.pds.contains(&req.pd_handle) || !rec.uhw_in.is_empty() {
                    return Err(Errno::INVAL);
                }
                let cap = sys::ib_uverbs_qp_cap {
                    max_send_wr: req.max_send_wr,
                    max_recv_wr: req.max_recv_wr,
                    max_send_sge: req.max_send_sge,
                    max_recv_sge: req.max_recv_sge,
                    max_inline_data: req.max_inline_data,
                };
                let qp_handle = self.handle();
                let cqs = (req.send_cq_handle, req.recv_cq_handle);
                let (cap, uhw) = self
                    .datapath
                    .create_qp(qp_handle, cqs, cap, cmd.uhw_out.len())?;
                let resp = sys::ib_uverbs_create_qp_resp {
                    qp_handle,
                    qpn: 0x10 + qp_handle,
                    max_send_wr: cap.max_send_wr,
                    max_recv_wr: cap.max_recv_wr,
                    max_send_sge: cap.max_send_sge,
                    max_recv_sge: cap.max_recv_sge,
                    max_inline_data: cap.max_inline_data,
                    reserved: 0,
                };
                write_out(cmd.core_out, resp)?;
                write_out(cmd.uhw_out, uhw)?;
                Ok(size_of_val(&uhw))
            })(),
            sys::IB_USER_VERBS_CMD_MODIFY_QP => (|| {
                let req: sys::ib_uverbs_modify_qp = request_of(rec)?;
                let qp = self
                    .datapath
                    .qps
                    .get_mut(&req.qp_handle)
                    .ok_or(Errno::INVAL)?;
                if req.attr_mask & 1 != 0 {
                    qp.2 = req.qp_state;
                }
                let attrs = self.datapath.qp_attrs.entry(req.qp_handle);
                apply_modify(attrs.or_default(), &req);
                Ok(0)
            })(),
            sys::IB_USER_VERBS_CMD_QUERY_QP => (|| {
                let req: sys::ib_uverbs_query_qp = request_of(rec)?;
                let qp = self.datapath.qps.get(&req.qp_handle).ok_or(Errno::INVAL)?;
                let attrs = self.datapath.qp_attrs.get(&req.qp_handle);
                let resp = sys::ib_uverbs_query_qp_resp {
                    qp_state: qp.2,
                    ..attrs.copied().unwrap_or_default()
                };
                write_out(cmd.core_out, resp)?;
                Ok(0)
            })(),
            sys::IB_USER_VERBS_CMD_DESTROY_QP => (|| {
                let req: sys::ib_uverbs_destroy_qp = request_of(rec)?;
                self.datapath.destroy_qp(req.qp_handle)?;
                write_out(cmd.core_out, sys::ib_uverbs_destroy_qp_resp::default())?;
                Ok(0)
            })(),
            // Attaching twice answers 0, as the kernel does; detaching a
            // group not attached is EINVAL.
            sys::IB_USER_VERBS_CMD_ATTACH_MCAST => (|| {
                let req: sys::ib_uverbs_attach_mcast = request_of(rec)?;
                if !self.datapath.qps.contains_key(&req.qp_handle) {
                    return Err(Errno::INVAL);
                }
                let group = (req.qp_handle, req.gid, req.mlid);
                self.datapath.multicast.insert(group);
                Ok(0)
            })(),
            sys::IB_USER_VERBS_CMD_DETACH_MCAST => (|| {
                let req: sys::ib_uverbs_detach_mcast = request_of(rec)?;
                let group = (req.qp_handle, req.gid, req.mlid);
                match self.datapath.multicast.remove(&group) {
                    true => Ok(0),
                    false => Err(Errno::INVAL),
                }
            })(),
            _ => return None,
        })
    }

    /// Answers the data-path native methods (CQ and QP create and
    /// destroy); `None` for other methods. A create also answers the new
    /// handle: (attribute id, handle) to write into the frame.
    fn answer_datapath_method(
        &mut self,
        rec: &RecordedMethod,
    ) -> Option<Result<CreateAnswer, Errno>> {
        let out = |id: u16, bytes: &[u8]| (id, bytes.to_vec());
        let obj = |id: u16| {
            rec.attr(id)
                .and_then(|a| u32::try_from(a.data).ok())
                .ok_or(Errno::INVAL)
        };
        let uhw_out_len = rec
            .attr(sys::UVERBS_ATTR_UHW_OUT)
            .map_or(0, |a| usize::from(a.len));
        Some(match (rec.object_id, rec.method_id) {
            (sys::UVERBS_OBJECT_CQ, sys::UVERBS_METHOD_CQ_CREATE) => (|| {
                let cqe = const_of(rec, sys::UVERBS_ATTR_CREATE_CQ_CQE).unwrap_or(0);
                let cqe = u32::try_from(cqe).map_err(|_| Errno::INVAL)?;
                let handle = self.handle();
                let (handle, cqe, uhw) = self.datapath.create_cq(handle, cqe, uhw_out_len)?;
                let answer = vec![
                    out(sys::UVERBS_ATTR_CREATE_CQ_RESP_CQE, cqe.as_bytes()),
                    out(sys::UVERBS_ATTR_UHW_OUT, uhw.as_bytes()),
                ];
                Ok((answer, Some((sys::UVERBS_ATTR_CREATE_CQ_HANDLE, handle))))
            })(),
            (sys::UVERBS_OBJECT_CQ, sys::UVERBS_METHOD_CQ_DESTROY) => (|| {
                let resp = self
                    .datapath
                    .destroy_cq(obj(sys::UVERBS_ATTR_DESTROY_CQ_HANDLE)?)?;
                Ok((
                    vec![out(sys::UVERBS_ATTR_DESTROY_CQ_RESP, resp.as_bytes())],
                    None,
                ))
            })(),
            (sys::UVERBS_OBJECT_QP, sys::UVERBS_METHOD_QP_CREATE) => (|| {
                let pd = obj(sys::UVERBS_ATTR_CREATE_QP_PD_HANDLE)?;
                let cap = rec
                    .attr(sys::UVERBS_ATTR_CREATE_QP_CAP)
                    .and_then(|a| sys::ib_uverbs_qp_cap::read_from_bytes(&a.input).ok())
                    .ok_or(Errno::INVAL)?;
                let cqs = (
                    obj(sys::UVERBS_ATTR_CREATE_QP_SEND_CQ_HANDLE)?,
                    obj(sys::UVERBS_ATTR_CREATE_QP_RECV_CQ_HANDLE)?,
                );
                if !self.pds.contains(&pd) {
                    return Err(Errno::INVAL);
                }
                let handle = self.handle();
                let (cap, uhw) = self.datapath.create_qp(handle, cqs, cap, uhw_out_len)?;
                let qpn = 0x10 + handle;
                let answer = vec![
                    out(sys::UVERBS_ATTR_CREATE_QP_RESP_CAP, cap.as_bytes()),
                    out(sys::UVERBS_ATTR_CREATE_QP_RESP_QP_NUM, qpn.as_bytes()),
                    out(sys::UVERBS_ATTR_UHW_OUT, uhw.as_bytes()),
                ];
                Ok((answer, Some((sys::UVERBS_ATTR_CREATE_QP_HANDLE, handle))))
            })(),
            (sys::UVERBS_OBJECT_QP, sys::UVERBS_METHOD_QP_DESTROY) => (|| {
                self.datapath
                    .destroy_qp(obj(sys::UVERBS_ATTR_DESTROY_QP_HANDLE)?)?;
                let resp = sys::ib_uverbs_destroy_qp_resp::default();
                Ok((
                    vec![out(sys::UVERBS_ATTR_DESTROY_QP_RESP, resp.as_bytes())],
                    None,
                ))
            })(),
            _ => return None,
        })
    }
}

/// A test double: a [`Transport`] that simulates a small, well-behaved
/// uverbs device and records every command it receives (the `test-util`
/// feature; not for production).
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
    /// The kind it reports; `None`: [`TransportKind::Fake`].
    kind: Option<TransportKind>,
}

impl RecordingTransport {
    /// A fresh fake device with no objects.
    pub fn new() -> Self {
        Self::default()
    }

    /// A fresh fake device that reports `kind`, e.g.
    /// [`TransportKind::Write`] to stand for a context on the legacy
    /// write() transport (objects are then created with write commands).
    /// It answers commands and methods the same whatever it reports.
    pub fn with_kind(kind: TransportKind) -> Self {
        RecordingTransport {
            kind: Some(kind),
            ..Self::default()
        }
    }

    /// From now on [`Transport::map_queue`] serves the rings the fake
    /// announced in its CREATE_CQ and CREATE_QP answers: anonymous shared
    /// memory of the announced length whose header says the slot size and
    /// index mask, as rxe's would. Nothing consumes the send rings or fills
    /// the completion rings. Without this, mapping fails with `EOPNOTSUPP`
    /// (a fake has no command file), so every CQ and QP creation fails.
    pub fn serve_rings(&self) {
        self.lock().datapath.serve_rings = true;
    }

    /// From now on the native `UVERBS_METHOD_REG_MR` is known, answered as
    /// Linux 6.17 answers it (its core checks, then the same MR the write
    /// command `REG_MR` would make). Without this the fake is a kernel
    /// before 6.17: the method is recorded and refused with
    /// `EPROTONOSUPPORT`.
    pub fn serve_reg_mr_method(&self) {
        self.lock().reg_mr_method = true;
    }

    /// From now on CREATE_QP answers the `max_send_wr` and `max_recv_wr`
    /// asked for, while its rings hold up to the next power of two minus
    /// one, as Linux 6.1's rxe does (6.12's answers the rings' sizes).
    pub fn answer_caps_as_asked(&self) {
        self.lock().datapath.caps_as_asked = true;
    }

    /// Makes the DESTROY_CQ of `cq_handle` answer these event counts
    /// (`comp_events_reported`, `async_events_reported`; 0 and 0 unless set).
    pub fn report_cq_events(&self, cq_handle: u32, comp: u32, async_events: u32) {
        self.lock()
            .datapath
            .events_reported
            .insert(cq_handle, (comp, async_events));
    }

    /// Live CQs and QPs in the fake kernel.
    pub fn live_cqs_qps(&self) -> (usize, usize) {
        let kernel = self.lock();
        (kernel.datapath.cqs.len(), kernel.datapath.qps.len())
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

    /// Makes the next native method `(object_id, method_id)` fail with
    /// `errno` (queued, like [`fail_next`](Self::fail_next)); it is still
    /// recorded.
    pub fn fail_next_method(&self, object_id: u16, method_id: u16, errno: Errno) {
        self.lock()
            .method_failures
            .entry((object_id, method_id))
            .or_default()
            .push_back(errno);
    }

    /// Every native method received so far, in order.
    pub fn methods(&self) -> Vec<RecordedMethod> {
        self.lock().methods.clone()
    }

    /// How many native methods `(object_id, method_id)` were received.
    pub fn count_of_method(&self, object_id: u16, method_id: u16) -> usize {
        self.lock()
            .methods
            .iter()
            .filter(|m| (m.object_id, m.method_id) == (object_id, method_id))
            .count()
    }

    /// The (lkey, rkey, length, iova) the fake answered for a live MR at
    /// its last REG_MR or REREG_MR.
    pub fn mr_attrs(&self, mr_handle: u32) -> Option<(u32, u32, u64, u64)> {
        self.lock()
            .mrs
            .get(&mr_handle)
            .map(|mr| (mr.lkey, mr.rkey, mr.length, mr.iova))
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
                let (mr_handle, mr) = self.new_mr(req.pd_handle, req.length, req.hca_va);
                write_out(
                    cmd.core_out,
                    sys::ib_uverbs_reg_mr_resp {
                        mr_handle,
                        lkey: mr.lkey,
                        rkey: mr.rkey,
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
                    mr.rkey = remote_key(mr.lkey);
                    mr.length = req.length;
                    mr.iova = req.hca_va;
                }
                self.mrs.insert(req.mr_handle, mr);
                write_out(
                    cmd.core_out,
                    sys::ib_uverbs_rereg_mr_resp {
                        lkey: mr.lkey,
                        rkey: mr.rkey,
                    },
                )
            }
            sys::IB_USER_VERBS_CMD_QUERY_PORT => {
                let req: sys::ib_uverbs_query_port = request_of(rec)?;
                write_out(cmd.core_out, fake_port(req.port_num.into())?.legacy_resp)
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

impl FakeKernel {
    /// The MR a new one gets, as REG_MR answers it.
    fn new_mr(&mut self, pd: u32, length: u64, iova: u64) -> (u32, FakeMr) {
        let mr_handle = self.handle();
        let lkey = self.key(mr_handle);
        let mr = FakeMr {
            pd,
            lkey,
            rkey: remote_key(lkey),
            length,
            iova,
        };
        self.mrs.insert(mr_handle, mr);
        (mr_handle, mr)
    }

    /// The native `REG_MR` of a well-formed frame, checked in the order of
    /// Linux 6.17's handler: ADDR xor FD (with FD_OFFSET), the page offsets
    /// of ADDR and IOVA, the access bits, then the driver (a fake rxe: no
    /// dma-buf, `EOPNOTSUPP`). An unknown PD is the IDR lookup's `ENOENT`.
    fn answer_reg_mr(&mut self, rec: &RecordedMethod) -> Result<CreateAnswer, Errno> {
        let pd = rec
            .attr(sys::UVERBS_ATTR_REG_MR_PD_HANDLE)
            .and_then(|a| u32::try_from(a.data).ok())
            .filter(|h| self.pds.contains(h))
            .ok_or(Errno::NOENT)?;
        let iova = const_of(rec, sys::UVERBS_ATTR_REG_MR_IOVA).unwrap_or(0);
        let length = const_of(rec, sys::UVERBS_ATTR_REG_MR_LENGTH).unwrap_or(0);
        let addr = const_of(rec, sys::UVERBS_ATTR_REG_MR_ADDR);
        let has_fd_offset = rec.attr(sys::UVERBS_ATTR_REG_MR_FD_OFFSET).is_some();
        if rec.attr(sys::UVERBS_ATTR_REG_MR_FD).is_some() {
            // rxe has no reg_user_mr_dmabuf.
            return Err(Errno::OPNOTSUPP);
        }
        let Some(addr) = addr.filter(|_| !has_fd_offset) else {
            return Err(Errno::INVAL);
        };
        if addr & 0xfff != iova & 0xfff {
            return Err(Errno::INVAL);
        }
        let access = const_of(rec, sys::UVERBS_ATTR_REG_MR_ACCESS_FLAGS).unwrap_or(0);
        let access = u32::try_from(access).map_err(|_| Errno::INVAL)?;
        if access & !crate::flags::AccessFlags::all().bits() != 0 {
            return Err(Errno::INVAL);
        }
        if rec.attr(sys::UVERBS_ATTR_REG_MR_DMA_HANDLE).is_some() {
            // No DMA handle object exists here.
            return Err(Errno::NOENT);
        }
        Self::check_access(access)?;
        if length == 0 {
            return Err(Errno::INVAL);
        }
        let (handle, mr) = self.new_mr(pd, length, iova);
        Ok((
            vec![
                (
                    sys::UVERBS_ATTR_REG_MR_RESP_LKEY,
                    mr.lkey.as_bytes().to_vec(),
                ),
                (
                    sys::UVERBS_ATTR_REG_MR_RESP_RKEY,
                    mr.rkey.as_bytes().to_vec(),
                ),
            ],
            Some((sys::UVERBS_ATTR_REG_MR_HANDLE, handle)),
        ))
    }
}

/// The fake's rkey for an lkey: different, so that a swap shows.
fn remote_key(lkey: u32) -> u32 {
    lkey.rotate_left(16)
}

/// The fake port's attributes; `EINVAL` for any port but 1 (rxe's answer).
fn fake_port(port: u64) -> Result<sys::ib_uverbs_query_port_resp_ex, Errno> {
    if port != u64::from(FAKE_PORT) {
        return Err(Errno::INVAL);
    }
    let mut reserved = [0u8; 6];
    // active_speed_ex (Linux > 6.1) at offset 44: 0x10 (HDR), not capped.
    reserved[2..6].copy_from_slice(&0x10u32.to_ne_bytes());
    Ok(sys::ib_uverbs_query_port_resp_ex {
        legacy_resp: sys::ib_uverbs_query_port_resp {
            port_cap_flags: 0x0401_0000,
            max_msg_sz: 0x8000_0000,
            gid_tbl_len: FAKE_GIDS.len() as u32,
            pkey_tbl_len: 1,
            state: 4,      // IB_PORT_ACTIVE
            max_mtu: 5,    // 4096
            active_mtu: 3, // 1024
            active_width: 1,
            active_speed: 1,
            phys_state: 5, // LinkUp
            link_layer: 2, // Ethernet
            flags: sys::IB_UVERBS_QPF_GRH_REQUIRED as u8,
            ..Default::default()
        },
        port_cap_flags2: 0x20,
        reserved,
    })
}

fn fake_gid_entry(index: usize) -> sys::ib_uverbs_gid_entry {
    let raw = FAKE_GIDS[index];
    let mut gid = [0u64; 2];
    gid.as_mut_bytes().copy_from_slice(&raw);
    sys::ib_uverbs_gid_entry {
        gid,
        gid_index: index as u32,
        port_num: FAKE_PORT,
        gid_type: sys::IB_UVERBS_GID_TYPE_ROCE_V2,
        netdev_ifindex: FAKE_IFINDEX,
    }
}

/// The bytes of an input attribute, inline or behind its pointer.
///
/// # Safety
///
/// A pointer input (`len > 8`) must point at `len` readable bytes.
unsafe fn input_bytes(attr: &sys::ib_uverbs_attr) -> Vec<u8> {
    let len = usize::from(attr.len);
    if len <= 8 {
        attr.data.to_ne_bytes()[..len].to_vec()
    } else {
        // SAFETY: the caller's promise.
        unsafe { std::slice::from_raw_parts(attr.data as usize as *const u8, len) }.to_vec()
    }
}

/// An input's value as the kernel's `uverbs_get_const` reads it.
fn const_of(rec: &RecordedMethod, attr_id: u16) -> Option<u64> {
    let attr = rec.attr(attr_id)?;
    let mut v = [0u8; 8];
    let n = attr.input.len().min(8);
    v[..n].copy_from_slice(&attr.input[..n]);
    Some(u64::from_ne_bytes(v))
}

impl FakeKernel {
    /// Checks `rec` against the method's spec like `uverbs_ioctl.c`.
    fn check_attrs(rec: &RecordedMethod, spec: &[Spec]) -> Result<(), Errno> {
        let mut seen = BTreeSet::new();
        for attr in &rec.attrs {
            let Some(&(_, kind, _, min, max)) = spec.iter().find(|s| s.0 == attr.attr_id) else {
                if attr.flags & sys::UVERBS_ATTR_F_MANDATORY != 0 {
                    return Err(Errno::PROTONOSUPPORT);
                }
                continue;
            };
            if !seen.insert(attr.attr_id) {
                return Err(Errno::INVAL);
            }
            if attr.len < min || attr.len > max || attr.attr_data != 0 {
                return Err(Errno::INVAL);
            }
            if kind == Kind::Out && attr.data == 0 && attr.len != 0 {
                return Err(Errno::FAULT);
            }
        }
        let missing = spec.iter().any(|s| s.2 && !seen.contains(&s.0));
        if missing {
            return Err(Errno::INVAL);
        }
        Ok(())
    }

    /// The outputs of a known, well-formed method.
    fn answer_method(&mut self, rec: &RecordedMethod) -> Result<Answer, Errno> {
        let out = |id: u16, bytes: &[u8]| (id, bytes.to_vec());
        match (rec.object_id, rec.method_id) {
            (sys::UVERBS_OBJECT_DEVICE, sys::UVERBS_METHOD_INFO_HANDLES) => {
                let object = const_of(rec, sys::UVERBS_ATTR_INFO_OBJECT_ID).unwrap_or(0);
                let list_len = rec
                    .attr(sys::UVERBS_ATTR_INFO_HANDLES_LIST)
                    .map_or(0, |a| usize::from(a.len));
                if list_len == 0 || list_len % 4 != 0 {
                    return Err(Errno::INVAL);
                }
                let handles: Vec<u32> = match u16::try_from(object) {
                    Ok(sys::UVERBS_OBJECT_PD) => self.pds.iter().copied().collect(),
                    Ok(sys::UVERBS_OBJECT_MR) => self.mrs.keys().copied().collect(),
                    Ok(o) if o <= sys::UVERBS_OBJECT_ASYNC_EVENT => Vec::new(),
                    _ => return Err(Errno::INVAL),
                };
                let listed = &handles[..handles.len().min(list_len / 4)];
                Ok(vec![
                    out(sys::UVERBS_ATTR_INFO_HANDLES_LIST, listed.as_bytes()),
                    out(
                        sys::UVERBS_ATTR_INFO_TOTAL_HANDLES,
                        (listed.len() as u32).as_bytes(),
                    ),
                ])
            }
            (sys::UVERBS_OBJECT_DEVICE, sys::UVERBS_METHOD_QUERY_PORT) => {
                let port = const_of(rec, sys::UVERBS_ATTR_QUERY_PORT_PORT_NUM).unwrap_or(0);
                let resp = fake_port(port)?;
                Ok(vec![out(sys::UVERBS_ATTR_QUERY_PORT_RESP, resp.as_bytes())])
            }
            (sys::UVERBS_OBJECT_DEVICE, sys::UVERBS_METHOD_QUERY_CONTEXT) => Ok(vec![
                out(
                    sys::UVERBS_ATTR_QUERY_CONTEXT_NUM_COMP_VECTORS,
                    1u32.as_bytes(),
                ),
                out(
                    sys::UVERBS_ATTR_QUERY_CONTEXT_CORE_SUPPORT,
                    sys::IB_UVERBS_CORE_SUPPORT_OPTIONAL_MR_ACCESS.as_bytes(),
                ),
            ]),
            (sys::UVERBS_OBJECT_DEVICE, sys::UVERBS_METHOD_QUERY_GID_ENTRY) => {
                let port = const_of(rec, sys::UVERBS_ATTR_QUERY_GID_ENTRY_PORT).unwrap_or(0);
                let index = const_of(rec, sys::UVERBS_ATTR_QUERY_GID_ENTRY_GID_INDEX);
                if const_of(rec, sys::UVERBS_ATTR_QUERY_GID_ENTRY_FLAGS) != Some(0)
                    || port != u64::from(FAKE_PORT)
                {
                    return Err(Errno::INVAL);
                }
                let index = index
                    .and_then(|i| usize::try_from(i).ok())
                    .filter(|i| *i < FAKE_GIDS.len())
                    .ok_or(Errno::INVAL)?;
                let entry = fake_gid_entry(index);
                Ok(vec![out(
                    sys::UVERBS_ATTR_QUERY_GID_ENTRY_RESP_ENTRY,
                    entry.as_bytes(),
                )])
            }
            (sys::UVERBS_OBJECT_DEVICE, sys::UVERBS_METHOD_QUERY_GID_TABLE) => {
                let entry_size =
                    const_of(rec, sys::UVERBS_ATTR_QUERY_GID_TABLE_ENTRY_SIZE).unwrap_or(0);
                if entry_size != size_of::<sys::ib_uverbs_gid_entry>() as u64
                    || const_of(rec, sys::UVERBS_ATTR_QUERY_GID_TABLE_FLAGS).unwrap_or(0) != 0
                {
                    // (The kernel also copes with other entry sizes; the
                    // fake does not need to.)
                    return Err(Errno::INVAL);
                }
                let room = rec
                    .attr(sys::UVERBS_ATTR_QUERY_GID_TABLE_RESP_ENTRIES)
                    .map_or(0, |a| usize::from(a.len))
                    / size_of::<sys::ib_uverbs_gid_entry>();
                // rdma_query_gid_table: EINVAL when the entries do not fit.
                if room == 0 || room < FAKE_GIDS.len() {
                    return Err(Errno::INVAL);
                }
                let entries: Vec<sys::ib_uverbs_gid_entry> =
                    (0..FAKE_GIDS.len()).map(fake_gid_entry).collect();
                Ok(vec![
                    out(
                        sys::UVERBS_ATTR_QUERY_GID_TABLE_RESP_ENTRIES,
                        entries.as_bytes(),
                    ),
                    out(
                        sys::UVERBS_ATTR_QUERY_GID_TABLE_RESP_NUM_ENTRIES,
                        (entries.len() as u64).as_bytes(),
                    ),
                ])
            }
            (sys::UVERBS_OBJECT_MR, sys::UVERBS_METHOD_QUERY_MR) => {
                let handle = rec
                    .attr(sys::UVERBS_ATTR_QUERY_MR_HANDLE)
                    .and_then(|a| u32::try_from(a.data).ok());
                // An unknown handle: the IDR lookup's ENOENT.
                let mr = handle.and_then(|h| self.mrs.get(&h)).ok_or(Errno::NOENT)?;
                Ok(vec![
                    out(sys::UVERBS_ATTR_QUERY_MR_RESP_LKEY, mr.lkey.as_bytes()),
                    out(sys::UVERBS_ATTR_QUERY_MR_RESP_RKEY, mr.rkey.as_bytes()),
                    out(sys::UVERBS_ATTR_QUERY_MR_RESP_LENGTH, mr.length.as_bytes()),
                    out(sys::UVERBS_ATTR_QUERY_MR_RESP_IOVA, mr.iova.as_bytes()),
                ])
            }
            _ => Err(Errno::PROTONOSUPPORT),
        }
    }
}

/// Decodes a frame like the kernel's `ib_uverbs_ioctl`: `EINVAL` for a
/// length that does not match `num_attrs`, `EPROTONOSUPPORT` for reserved
/// bits; input bytes are read for the attributes `spec` calls inputs.
///
/// # Safety
///
/// Every input pointer of a known attribute must be readable for its length.
unsafe fn decode(frame: &IoctlFrame, spec: Option<&[Spec]>) -> Result<RecordedMethod, Errno> {
    let hdr = frame.header();
    let expected = size_of::<sys::ib_uverbs_ioctl_hdr>()
        + usize::from(hdr.num_attrs) * size_of::<sys::ib_uverbs_attr>();
    if usize::from(hdr.length) != expected {
        return Err(Errno::INVAL);
    }
    if hdr.reserved1 != 0 || hdr.reserved2 != 0 {
        return Err(Errno::PROTONOSUPPORT);
    }
    let attrs = frame
        .attrs()
        .iter()
        .map(|a| {
            let kind = spec
                .and_then(|s| s.iter().find(|s| s.0 == a.attr_id))
                .map(|s| s.1);
            let input = match kind {
                // SAFETY: the caller's promise for inputs.
                Some(Kind::Const | Kind::In) => unsafe { input_bytes(a) },
                _ => Vec::new(),
            };
            RecordedAttr {
                attr_id: a.attr_id,
                len: a.len,
                flags: a.flags,
                attr_data: a.attr_data,
                data: a.data,
                input,
            }
        })
        .collect();
    Ok(RecordedMethod {
        object_id: hdr.object_id,
        method_id: hdr.method_id,
        driver_id: hdr.driver_id,
        frame: frame.as_bytes().to_vec(),
        attrs,
    })
}

/// Writes `answer` through the frame's output pointers, at most each
/// attribute's length (`uverbs_copy_to`), and sets `VALID_OUTPUT` on each.
///
/// # Safety
///
/// Every output attribute named in `answer` must point at `len` writable
/// bytes that nothing else accesses during the call.
unsafe fn write_answer(frame: &mut IoctlFrame, answer: &Answer) {
    for (attr_id, bytes) in answer {
        let Some(attr) = frame.attr_mut(*attr_id) else {
            continue; // an optional output the caller did not ask for
        };
        let n = usize::from(attr.len).min(bytes.len());
        // SAFETY: the caller's promise; `n <= attr.len`.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), attr.data as usize as *mut u8, n);
        }
        attr.flags |= sys::UVERBS_ATTR_F_VALID_OUTPUT;
    }
}

// SAFETY: commands are answered once, only `core_out` and (for CREATE_CQ
// and CREATE_QP) the first 16 or 32 bytes of `uhw_out` are written, which is
// what is returned, after zeroing both outputs. Methods are answered
// once; only output attributes of known methods are written, within their
// lengths, and only their flags and (for a create) the new handle's IDR
// `data` are changed in the frame. Mapped rings are fresh memfd memory
// (under Miri, fresh heap pages that only the mapping holds).
unsafe impl Transport for RecordingTransport {
    fn kind(&self) -> TransportKind {
        self.kind.unwrap_or(TransportKind::Fake)
    }

    unsafe fn map_queue(&self, offset: u64, len: usize) -> Result<SharedMapping, Errno> {
        let ring = {
            let kernel = self.lock();
            if !kernel.datapath.serve_rings {
                return Err(Errno::OPNOTSUPP);
            }
            *kernel.datapath.rings.get(&offset).ok_or(Errno::INVAL)?
        };
        if len != ring.size as usize {
            return Err(Errno::INVAL);
        }
        // Anonymous shared memory of the ring's length, its header written
        // like the kernel's `rxe_queue_init` (both indices 0).
        #[cfg(not(miri))]
        let mapping = {
            let fd = rustix::fs::memfd_create("uverbs-fake-ring", rustix::fs::MemfdFlags::CLOEXEC)?;
            rustix::fs::ftruncate(&fd, len as u64)?;
            // SAFETY: a memfd of our own, mapped once; no Rust memory aliases it.
            unsafe { SharedMapping::map(fd.as_fd(), 0, len) }?
        };
        // Miri cannot map a file: zeroed heap pages stand for the memfd.
        #[cfg(miri)]
        let mapping = SharedMapping::over_heap(&super::mapping::HeapPages::new(len), len);
        let base = mapping.as_ptr().as_ptr();
        let words = [
            (
                std::mem::offset_of!(sys::rxe_queue_buf, log2_elem_size),
                ring.log2_elem_size,
            ),
            (
                std::mem::offset_of!(sys::rxe_queue_buf, index_mask),
                ring.index_mask,
            ),
        ];
        for (offset, value) in words {
            // SAFETY: inside the fresh mapping (the header is within `len`,
            // `len >= size_of::<rxe_queue_buf>()`), 4-aligned (page-aligned
            // base, 4-aligned field), not yet seen by anyone else.
            unsafe { base.add(offset).cast::<u32>().write(value) };
        }
        Ok(mapping)
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
        if let Some(answer) = kernel.answer_datapath(&rec, cmd) {
            return answer;
        }
        kernel.answer(&rec, cmd)?;
        Ok(0)
    }

    unsafe fn invoke(&self, frame: &mut IoctlFrame) -> Result<(), Errno> {
        let hdr = *frame.header();
        let reg_mr =
            (hdr.object_id, hdr.method_id) == (sys::UVERBS_OBJECT_MR, sys::UVERBS_METHOD_REG_MR);
        let spec = match reg_mr && !self.lock().reg_mr_method {
            true => None, // a kernel before 6.17
            false => method_spec(hdr.object_id, hdr.method_id),
        };
        // SAFETY: the caller vouches for the input pointers (Transport::invoke).
        let rec = unsafe { decode(frame, spec) }?;
        let mut kernel = self.lock();
        kernel.methods.push(rec.clone());
        if let Some(errno) = kernel
            .method_failures
            .get_mut(&(rec.object_id, rec.method_id))
            .and_then(VecDeque::pop_front)
        {
            return Err(errno);
        }
        let spec = spec.ok_or(Errno::PROTONOSUPPORT)?;
        FakeKernel::check_attrs(&rec, spec)?;
        let (answer, new_handle) = match kernel.answer_datapath_method(&rec) {
            Some(answer) => answer?,
            None if reg_mr => kernel.answer_reg_mr(&rec)?,
            None => (kernel.answer_method(&rec)?, None),
        };
        if let Some((attr_id, handle)) = new_handle {
            // The kernel writes a new object's handle into its IDR attribute.
            if let Some(attr) = frame.attr_mut(attr_id) {
                attr.data = handle.into();
            }
        }
        // SAFETY: the caller vouches for the output pointers; the spec
        // checked their lengths.
        unsafe { write_answer(frame, &answer) };
        Ok(())
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
