//! Compares every constant value and struct layout of `uverbs-uapi` with the C
//! headers installed under `/usr/include` (compiled with `cc`).
//!
//! One macro table names each item once; it yields both the C expression that the
//! generated program prints and the value computed on the Rust side. The test also
//! reads the crate sources to make sure no public constant or struct was left out of
//! the table (except the few that are newer than the local headers).

use std::collections::{BTreeMap, BTreeSet};
use std::env;
use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use uverbs_uapi::*;

/// Items newer than Debian's 6.1 headers: absent there, so not compared with C.
/// Their values are pinned by the crate's unit tests instead.
const NEWER_THAN_LOCAL_HEADERS: &[&str] = &[
    "UVERBS_ID_DRIVER_NS",
    "UVERBS_ID_DRIVER_NS_WITH_UHW",
    "UVERBS_ATTR_GET_CONTEXT_FD_ARR",
    "IB_UVERBS_ACCESS_FLUSH_GLOBAL",
    "IB_UVERBS_ACCESS_FLUSH_PERSISTENT",
    "IB_UVERBS_CORE_SUPPORT_ROBUST_UDATA",
    "RDMA_DRIVER_MANA",
    "RDMA_DRIVER_IONIC",
    "UVERBS_METHOD_REG_MR",
    "UVERBS_ATTR_REG_MR_HANDLE",
    "UVERBS_ATTR_REG_MR_PD_HANDLE",
    "UVERBS_ATTR_REG_MR_DMA_HANDLE",
    "UVERBS_ATTR_REG_MR_IOVA",
    "UVERBS_ATTR_REG_MR_ADDR",
    "UVERBS_ATTR_REG_MR_LENGTH",
    "UVERBS_ATTR_REG_MR_ACCESS_FLAGS",
    "UVERBS_ATTR_REG_MR_FD",
    "UVERBS_ATTR_REG_MR_FD_OFFSET",
    "UVERBS_ATTR_REG_MR_RESP_LKEY",
    "UVERBS_ATTR_REG_MR_RESP_RKEY",
];

const HEADERS: &[&str] = &[
    "rdma/ib_user_verbs.h",
    "rdma/rdma_user_ioctl_cmds.h",
    "rdma/ib_user_ioctl_cmds.h",
    "rdma/ib_user_ioctl_verbs.h",
    "rdma/siw-abi.h",
    "rdma/mlx5-abi.h",
    "rdma/mlx5_user_ioctl_cmds.h",
    "rdma/mlx5_user_ioctl_verbs.h",
    "rdma/rdma_user_rxe.h",
    "rdma/rdma_netlink.h",
    "rdma/rdma_user_cm.h",
    "linux/in.h",
    "linux/netlink.h",
];

/// One compared item: its name, the C expression printing it, and the Rust value.
struct Item {
    name: String,
    c_expr: String,
    rust: i128,
}

impl Item {
    fn new(name: impl Into<String>, c_expr: impl Into<String>, rust: i128) -> Self {
        Item {
            name: name.into(),
            c_expr: c_expr.into(),
            rust,
        }
    }
}

/// Size of the field that `_get` projects to (lets the macro size a field by name).
fn field_size<S, T>(_get: fn(&S) -> &T) -> usize {
    core::mem::size_of::<T>()
}

/// Builds the item table. `consts` are named the same in C and Rust, `exprs` are
/// expressions valid in both languages, and `structs` list every field in order.
macro_rules! table {
    (
        consts { $($c:ident),* $(,)? }
        exprs { $($e:expr),* $(,)? }
        structs { $($s:ident { $($f:ident),* $(,)? })* }
    ) => {{
        let mut items: Vec<Item> = Vec::new();
        // (struct name, sum of the field sizes, struct size) for the padding check.
        let mut tiling: Vec<(&'static str, usize, usize)> = Vec::new();
        $( items.push(Item::new(stringify!($c), stringify!($c), $c as i128)); )*
        $( items.push(Item::new(stringify!($e), stringify!($e), $e as i128)); )*
        $(
            // Does not compile unless every field of the Rust struct is listed.
            let _exhaustive = |x: $s| {
                let $s { $($f: _),* } = x;
            };
            items.push(Item::new(
                concat!("sizeof(", stringify!($s), ")"),
                concat!("sizeof(struct ", stringify!($s), ")"),
                core::mem::size_of::<$s>() as i128,
            ));
            items.push(Item::new(
                concat!("alignof(", stringify!($s), ")"),
                concat!("_Alignof(struct ", stringify!($s), ")"),
                core::mem::align_of::<$s>() as i128,
            ));
            let mut sum = 0usize;
            $(
                let size = field_size(|x: &$s| &x.$f);
                sum += size;
                items.push(Item::new(
                    concat!(stringify!($s), ".", stringify!($f)),
                    concat!("offsetof(struct ", stringify!($s), ", ", stringify!($f), ")"),
                    core::mem::offset_of!($s, $f) as i128,
                ));
                items.push(Item::new(
                    concat!("sizeof(", stringify!($s), ".", stringify!($f), ")"),
                    concat!("sizeof(((struct ", stringify!($s), " *)0)->", stringify!($f), ")"),
                    size as i128,
                ));
            )*
            tiling.push((stringify!($s), sum, core::mem::size_of::<$s>()));
        )*
        (items, tiling)
    }};
}

fn build_table() -> (Vec<Item>, Vec<(&'static str, usize, usize)>) {
    let (mut items, mut tiling) = core_table();
    let (rxe_items, rxe_tiling) = rxe_table();
    items.extend(rxe_items);
    tiling.extend(rxe_tiling);
    let (cm_items, cm_tiling) = cm_table();
    items.extend(cm_items);
    tiling.extend(cm_tiling);
    let (member_items, member_tiling) = core_member_table();
    items.extend(member_items);
    tiling.extend(member_tiling);
    (items, tiling)
}

fn core_table() -> (Vec<Item>, Vec<(&'static str, usize, usize)>) {
    table! {
        consts {
            // ib_user_verbs.h
            IB_USER_VERBS_ABI_VERSION,
            IB_USER_VERBS_CMD_THRESHOLD,
            IB_USER_VERBS_CMD_GET_CONTEXT,
            IB_USER_VERBS_CMD_QUERY_DEVICE,
            IB_USER_VERBS_CMD_QUERY_PORT,
            IB_USER_VERBS_CMD_ALLOC_PD,
            IB_USER_VERBS_CMD_DEALLOC_PD,
            IB_USER_VERBS_CMD_CREATE_AH,
            IB_USER_VERBS_CMD_MODIFY_AH,
            IB_USER_VERBS_CMD_QUERY_AH,
            IB_USER_VERBS_CMD_DESTROY_AH,
            IB_USER_VERBS_CMD_REG_MR,
            IB_USER_VERBS_CMD_REG_SMR,
            IB_USER_VERBS_CMD_REREG_MR,
            IB_USER_VERBS_CMD_QUERY_MR,
            IB_USER_VERBS_CMD_DEREG_MR,
            IB_USER_VERBS_CMD_ALLOC_MW,
            IB_USER_VERBS_CMD_BIND_MW,
            IB_USER_VERBS_CMD_DEALLOC_MW,
            IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL,
            IB_USER_VERBS_CMD_CREATE_CQ,
            IB_USER_VERBS_CMD_RESIZE_CQ,
            IB_USER_VERBS_CMD_DESTROY_CQ,
            IB_USER_VERBS_CMD_POLL_CQ,
            IB_USER_VERBS_CMD_PEEK_CQ,
            IB_USER_VERBS_CMD_REQ_NOTIFY_CQ,
            IB_USER_VERBS_CMD_CREATE_QP,
            IB_USER_VERBS_CMD_QUERY_QP,
            IB_USER_VERBS_CMD_MODIFY_QP,
            IB_USER_VERBS_CMD_DESTROY_QP,
            IB_USER_VERBS_CMD_POST_SEND,
            IB_USER_VERBS_CMD_POST_RECV,
            IB_USER_VERBS_CMD_ATTACH_MCAST,
            IB_USER_VERBS_CMD_DETACH_MCAST,
            IB_USER_VERBS_CMD_CREATE_SRQ,
            IB_USER_VERBS_CMD_MODIFY_SRQ,
            IB_USER_VERBS_CMD_QUERY_SRQ,
            IB_USER_VERBS_CMD_DESTROY_SRQ,
            IB_USER_VERBS_CMD_POST_SRQ_RECV,
            IB_USER_VERBS_CMD_OPEN_XRCD,
            IB_USER_VERBS_CMD_CLOSE_XRCD,
            IB_USER_VERBS_CMD_CREATE_XSRQ,
            IB_USER_VERBS_CMD_OPEN_QP,
            IB_USER_VERBS_EX_CMD_QUERY_DEVICE,
            IB_USER_VERBS_EX_CMD_CREATE_CQ,
            IB_USER_VERBS_EX_CMD_CREATE_QP,
            IB_USER_VERBS_EX_CMD_MODIFY_QP,
            IB_USER_VERBS_EX_CMD_CREATE_FLOW,
            IB_USER_VERBS_EX_CMD_DESTROY_FLOW,
            IB_USER_VERBS_EX_CMD_CREATE_WQ,
            IB_USER_VERBS_EX_CMD_MODIFY_WQ,
            IB_USER_VERBS_EX_CMD_DESTROY_WQ,
            IB_USER_VERBS_EX_CMD_CREATE_RWQ_IND_TBL,
            IB_USER_VERBS_EX_CMD_DESTROY_RWQ_IND_TBL,
            IB_USER_VERBS_EX_CMD_MODIFY_CQ,
            IB_USER_VERBS_CMD_COMMAND_MASK,
            IB_USER_VERBS_CMD_FLAG_EXTENDED,
            IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION,
            IB_UVERBS_CQ_FLAGS_IGNORE_OVERRUN,
            // rdma_user_ioctl_cmds.h
            RDMA_IOCTL_MAGIC,
            RDMA_VERBS_IOCTL,
            UVERBS_ATTR_F_MANDATORY,
            UVERBS_ATTR_F_VALID_OUTPUT,
            // ib_user_ioctl_cmds.h
            UVERBS_ID_NS_MASK,
            UVERBS_ID_NS_SHIFT,
            UVERBS_ATTR_UHW_IN,
            UVERBS_ATTR_UHW_OUT,
            UVERBS_OBJECT_DEVICE,
            UVERBS_OBJECT_PD,
            UVERBS_OBJECT_COMP_CHANNEL,
            UVERBS_OBJECT_CQ,
            UVERBS_OBJECT_QP,
            UVERBS_OBJECT_SRQ,
            UVERBS_OBJECT_AH,
            UVERBS_OBJECT_MR,
            UVERBS_OBJECT_MW,
            UVERBS_OBJECT_FLOW,
            UVERBS_OBJECT_XRCD,
            UVERBS_OBJECT_RWQ_IND_TBL,
            UVERBS_OBJECT_WQ,
            UVERBS_OBJECT_FLOW_ACTION,
            UVERBS_OBJECT_DM,
            UVERBS_OBJECT_COUNTERS,
            UVERBS_OBJECT_ASYNC_EVENT,
            UVERBS_METHOD_INVOKE_WRITE,
            UVERBS_METHOD_INFO_HANDLES,
            UVERBS_METHOD_QUERY_PORT,
            UVERBS_METHOD_GET_CONTEXT,
            UVERBS_METHOD_QUERY_CONTEXT,
            UVERBS_METHOD_QUERY_GID_TABLE,
            UVERBS_METHOD_QUERY_GID_ENTRY,
            UVERBS_ATTR_QUERY_PORT_PORT_NUM,
            UVERBS_ATTR_QUERY_PORT_RESP,
            UVERBS_ATTR_QUERY_CONTEXT_NUM_COMP_VECTORS,
            UVERBS_ATTR_QUERY_CONTEXT_CORE_SUPPORT,
            UVERBS_ATTR_QUERY_GID_TABLE_ENTRY_SIZE,
            UVERBS_ATTR_QUERY_GID_TABLE_FLAGS,
            UVERBS_ATTR_QUERY_GID_TABLE_RESP_ENTRIES,
            UVERBS_ATTR_QUERY_GID_TABLE_RESP_NUM_ENTRIES,
            UVERBS_ATTR_QUERY_GID_ENTRY_PORT,
            UVERBS_ATTR_QUERY_GID_ENTRY_GID_INDEX,
            UVERBS_ATTR_QUERY_GID_ENTRY_FLAGS,
            UVERBS_ATTR_QUERY_GID_ENTRY_RESP_ENTRY,
            UVERBS_ATTR_CORE_IN,
            UVERBS_ATTR_CORE_OUT,
            UVERBS_ATTR_WRITE_CMD,
            UVERBS_ATTR_GET_CONTEXT_NUM_COMP_VECTORS,
            UVERBS_ATTR_GET_CONTEXT_CORE_SUPPORT,
            UVERBS_ATTR_INFO_OBJECT_ID,
            UVERBS_ATTR_INFO_TOTAL_HANDLES,
            UVERBS_ATTR_INFO_HANDLES_LIST,
            UVERBS_METHOD_PD_DESTROY,
            UVERBS_ATTR_DESTROY_PD_HANDLE,
            UVERBS_METHOD_DM_MR_REG,
            UVERBS_METHOD_MR_DESTROY,
            UVERBS_METHOD_ADVISE_MR,
            UVERBS_METHOD_QUERY_MR,
            UVERBS_METHOD_REG_DMABUF_MR,
            UVERBS_ATTR_DESTROY_MR_HANDLE,
            UVERBS_ATTR_QUERY_MR_HANDLE,
            UVERBS_ATTR_QUERY_MR_RESP_LKEY,
            UVERBS_ATTR_QUERY_MR_RESP_RKEY,
            UVERBS_ATTR_QUERY_MR_RESP_LENGTH,
            UVERBS_ATTR_QUERY_MR_RESP_IOVA,
            UVERBS_METHOD_ASYNC_EVENT_ALLOC,
            UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE,
            UVERBS_METHOD_CQ_CREATE,
            UVERBS_METHOD_CQ_DESTROY,
            UVERBS_ATTR_CREATE_CQ_HANDLE,
            UVERBS_ATTR_CREATE_CQ_CQE,
            UVERBS_ATTR_CREATE_CQ_USER_HANDLE,
            UVERBS_ATTR_CREATE_CQ_COMP_CHANNEL,
            UVERBS_ATTR_CREATE_CQ_COMP_VECTOR,
            UVERBS_ATTR_CREATE_CQ_FLAGS,
            UVERBS_ATTR_CREATE_CQ_RESP_CQE,
            UVERBS_ATTR_CREATE_CQ_EVENT_FD,
            UVERBS_ATTR_DESTROY_CQ_HANDLE,
            UVERBS_ATTR_DESTROY_CQ_RESP,
            UVERBS_METHOD_QP_CREATE,
            UVERBS_METHOD_QP_DESTROY,
            UVERBS_ATTR_CREATE_QP_HANDLE,
            UVERBS_ATTR_CREATE_QP_XRCD_HANDLE,
            UVERBS_ATTR_CREATE_QP_PD_HANDLE,
            UVERBS_ATTR_CREATE_QP_SRQ_HANDLE,
            UVERBS_ATTR_CREATE_SRQ_HANDLE,
            UVERBS_ATTR_CREATE_SRQ_PD_HANDLE,
            UVERBS_ATTR_CREATE_SRQ_XRCD_HANDLE,
            UVERBS_ATTR_CREATE_SRQ_CQ_HANDLE,
            UVERBS_ATTR_CREATE_SRQ_USER_HANDLE,
            UVERBS_ATTR_CREATE_SRQ_MAX_WR,
            UVERBS_ATTR_CREATE_SRQ_MAX_SGE,
            UVERBS_ATTR_CREATE_SRQ_LIMIT,
            UVERBS_ATTR_CREATE_SRQ_MAX_NUM_TAGS,
            UVERBS_ATTR_CREATE_SRQ_TYPE,
            UVERBS_ATTR_CREATE_SRQ_EVENT_FD,
            UVERBS_ATTR_CREATE_SRQ_RESP_MAX_WR,
            UVERBS_ATTR_CREATE_SRQ_RESP_MAX_SGE,
            UVERBS_ATTR_CREATE_SRQ_RESP_SRQ_NUM,
            UVERBS_ATTR_DESTROY_SRQ_HANDLE,
            UVERBS_ATTR_DESTROY_SRQ_RESP,
            UVERBS_METHOD_SRQ_CREATE,
            UVERBS_METHOD_SRQ_DESTROY,
            UVERBS_ATTR_CREATE_QP_SEND_CQ_HANDLE,
            UVERBS_ATTR_CREATE_QP_RECV_CQ_HANDLE,
            UVERBS_ATTR_CREATE_QP_IND_TABLE_HANDLE,
            UVERBS_ATTR_CREATE_QP_USER_HANDLE,
            UVERBS_ATTR_CREATE_QP_CAP,
            UVERBS_ATTR_CREATE_QP_TYPE,
            UVERBS_ATTR_CREATE_QP_FLAGS,
            UVERBS_ATTR_CREATE_QP_SOURCE_QPN,
            UVERBS_ATTR_CREATE_QP_EVENT_FD,
            UVERBS_ATTR_CREATE_QP_RESP_CAP,
            UVERBS_ATTR_CREATE_QP_RESP_QP_NUM,
            UVERBS_ATTR_DESTROY_QP_HANDLE,
            UVERBS_ATTR_DESTROY_QP_RESP,
            // ib_user_ioctl_verbs.h
            IB_UVERBS_ACCESS_OPTIONAL_FIRST,
            IB_UVERBS_ACCESS_OPTIONAL_LAST,
            IB_UVERBS_CORE_SUPPORT_OPTIONAL_MR_ACCESS,
            IB_UVERBS_ACCESS_LOCAL_WRITE,
            IB_UVERBS_ACCESS_REMOTE_WRITE,
            IB_UVERBS_ACCESS_REMOTE_READ,
            IB_UVERBS_ACCESS_REMOTE_ATOMIC,
            IB_UVERBS_ACCESS_MW_BIND,
            IB_UVERBS_ACCESS_ZERO_BASED,
            IB_UVERBS_ACCESS_ON_DEMAND,
            IB_UVERBS_ACCESS_HUGETLB,
            IB_UVERBS_ACCESS_RELAXED_ORDERING,
            IB_UVERBS_ACCESS_OPTIONAL_RANGE,
            IB_UVERBS_QPF_GRH_REQUIRED,
            IB_UVERBS_GID_TYPE_IB,
            IB_UVERBS_GID_TYPE_ROCE_V1,
            IB_UVERBS_GID_TYPE_ROCE_V2,
            IB_UVERBS_QPT_RC,
            IB_UVERBS_QPT_UC,
            IB_UVERBS_QPT_UD,
            IB_UVERBS_QPT_RAW_PACKET,
            IB_UVERBS_QPT_XRC_INI,
            IB_UVERBS_QPT_XRC_TGT,
            IB_UVERBS_QPT_DRIVER,
            IB_UVERBS_QP_CREATE_BLOCK_MULTICAST_LOOPBACK,
            IB_UVERBS_QP_CREATE_SCATTER_FCS,
            IB_UVERBS_QP_CREATE_CVLAN_STRIPPING,
            IB_UVERBS_QP_CREATE_PCI_WRITE_END_PADDING,
            IB_UVERBS_QP_CREATE_SQ_SIG_ALL,
            RDMA_DRIVER_UNKNOWN,
            RDMA_DRIVER_MLX5,
            RDMA_DRIVER_MLX4,
            RDMA_DRIVER_CXGB3,
            RDMA_DRIVER_CXGB4,
            RDMA_DRIVER_MTHCA,
            RDMA_DRIVER_BNXT_RE,
            RDMA_DRIVER_OCRDMA,
            RDMA_DRIVER_NES,
            RDMA_DRIVER_I40IW,
            RDMA_DRIVER_IRDMA,
            RDMA_DRIVER_VMW_PVRDMA,
            RDMA_DRIVER_QEDR,
            RDMA_DRIVER_HNS,
            RDMA_DRIVER_USNIC,
            RDMA_DRIVER_RXE,
            RDMA_DRIVER_HFI1,
            RDMA_DRIVER_QIB,
            RDMA_DRIVER_EFA,
            RDMA_DRIVER_SIW,
            RDMA_DRIVER_ERDMA,
            // mlx5-abi.h
            MLX5_IB_UVERBS_ABI_VERSION,
            MLX5_QP_FLAG_SIGNATURE,
            MLX5_SRQ_FLAG_SIGNATURE,
            MLX5_QP_FLAG_SCATTER_CQE,
            MLX5_QP_FLAG_TUNNEL_OFFLOADS,
            MLX5_QP_FLAG_BFREG_INDEX,
            MLX5_QP_FLAG_TYPE_DCT,
            MLX5_QP_FLAG_TYPE_DCI,
            MLX5_QP_FLAG_TIR_ALLOW_SELF_LB_UC,
            MLX5_QP_FLAG_TIR_ALLOW_SELF_LB_MC,
            MLX5_QP_FLAG_ALLOW_SCATTER_CQE,
            MLX5_QP_FLAG_PACKET_BASED_CREDIT_MODE,
            MLX5_QP_FLAG_UAR_PAGE_INDEX,
            MLX5_QP_FLAG_DCI_STREAM,
            MLX5_LIB_CAP_4K_UAR,
            MLX5_LIB_CAP_DYN_UAR,
            MLX5_IB_ALLOC_UCTX_DEVX,
            MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_CORE_CLOCK_OFFSET,
            MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_DUMP_FILL_MKEY,
            MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_ECE,
            MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_SQD2RTS,
            MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_REAL_TIME_TS,
            MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_MKEY_UPDATE_TAG,
            MLX5_USER_CMDS_SUPP_UHW_QUERY_DEVICE,
            MLX5_USER_CMDS_SUPP_UHW_CREATE_AH,
            MLX5_USER_INLINE_MODE_NA,
            MLX5_USER_INLINE_MODE_NONE,
            MLX5_USER_INLINE_MODE_L2,
            MLX5_USER_INLINE_MODE_IP,
            MLX5_USER_INLINE_MODE_TCP_UDP,
            MLX5_IB_CREATE_CQ_FLAGS_CQE_128B_PAD,
            MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX,
            MLX5_IB_CREATE_CQ_FLAGS_REAL_TIME_TS,
            MLX5_IB_CREATE_QP_RESP_MASK_TIRN,
            MLX5_IB_CREATE_QP_RESP_MASK_TISN,
            MLX5_IB_CREATE_QP_RESP_MASK_RQN,
            MLX5_IB_CREATE_QP_RESP_MASK_SQN,
            MLX5_IB_CREATE_QP_RESP_MASK_TIR_ICM_ADDR,
            MLX5_IB_MMAP_REGULAR_PAGE,
            MLX5_IB_MMAP_GET_CONTIGUOUS_PAGES,
            MLX5_IB_MMAP_WC_PAGE,
            MLX5_IB_MMAP_NC_PAGE,
            MLX5_IB_MMAP_CORE_CLOCK,
            MLX5_IB_MMAP_ALLOC_WC,
            MLX5_IB_MMAP_CLOCK_INFO,
            MLX5_IB_MMAP_DEVICE_MEM,
            // mlx5_user_ioctl_cmds.h, mlx5_user_ioctl_verbs.h
            MLX5_IB_OBJECT_DEVX,
            MLX5_IB_OBJECT_UAR,
            MLX5_IB_METHOD_UAR_OBJ_ALLOC,
            MLX5_IB_METHOD_UAR_OBJ_DESTROY,
            MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE,
            MLX5_IB_ATTR_UAR_OBJ_ALLOC_TYPE,
            MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_OFFSET,
            MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_LENGTH,
            MLX5_IB_ATTR_UAR_OBJ_ALLOC_PAGE_ID,
            MLX5_IB_ATTR_UAR_OBJ_DESTROY_HANDLE,
            MLX5_IB_UAPI_UAR_ALLOC_TYPE_BF,
            MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC,
            // siw-abi.h
            SIW_ABI_VERSION,
            SIW_MAX_SGE,
            SIW_UOBJ_MAX_KEY,
            SIW_INVAL_UOBJ_KEY,
            SIW_MAX_INLINE,
            SIW_OP_WRITE,
            SIW_OP_READ,
            SIW_OP_READ_LOCAL_INV,
            SIW_OP_SEND,
            SIW_OP_SEND_WITH_IMM,
            SIW_OP_SEND_REMOTE_INV,
            SIW_OP_FETCH_AND_ADD,
            SIW_OP_COMP_AND_SWAP,
            SIW_OP_RECEIVE,
            SIW_OP_READ_RESPONSE,
            SIW_OP_INVAL_STAG,
            SIW_OP_REG_MR,
            SIW_NUM_OPCODES,
            SIW_WQE_VALID,
            SIW_WQE_INLINE,
            SIW_WQE_SIGNALLED,
            SIW_WQE_SOLICITED,
            SIW_WQE_READ_FENCE,
            SIW_WQE_REM_INVAL,
            SIW_WQE_COMPLETED,
            SIW_NOTIFY_NOT,
            SIW_NOTIFY_SOLICITED,
            SIW_NOTIFY_NEXT_COMPLETION,
            SIW_NOTIFY_MISSED_EVENTS,
            SIW_NOTIFY_ALL,
            SIW_WC_SUCCESS,
            SIW_WC_LOC_LEN_ERR,
            SIW_WC_LOC_PROT_ERR,
            SIW_WC_LOC_QP_OP_ERR,
            SIW_WC_WR_FLUSH_ERR,
            SIW_WC_BAD_RESP_ERR,
            SIW_WC_LOC_ACCESS_ERR,
            SIW_WC_REM_ACCESS_ERR,
            SIW_WC_REM_INV_REQ_ERR,
            SIW_WC_GENERAL_ERR,
            SIW_NUM_WC_STATUS,
            // rdma_netlink.h, linux/netlink.h
            NETLINK_RDMA,
            RDMA_NL_NLDEV,
            RDMA_NLDEV_CMD_GET,
            RDMA_NLDEV_CMD_SYS_GET,
            RDMA_NLDEV_CMD_SYS_SET,
            RDMA_NLDEV_CMD_GET_CHARDEV,
            RDMA_NLDEV_ATTR_DEV_INDEX,
            RDMA_NLDEV_ATTR_DEV_NAME,
            RDMA_NLDEV_SYS_ATTR_NETNS_MODE,
            RDMA_NLDEV_ATTR_DEV_PROTOCOL,
            RDMA_NLDEV_ATTR_CHARDEV_TYPE,
            RDMA_NLDEV_ATTR_CHARDEV_NAME,
            RDMA_NLDEV_ATTR_CHARDEV_ABI,
            RDMA_NLDEV_ATTR_CHARDEV,
            RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID,
            RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK,
        }
        exprs {
            RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_SYS_GET),
            RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_GET_CHARDEV),
        }
        structs {
            ib_uverbs_async_event_desc { element, event_type, reserved }
            ib_uverbs_cmd_hdr { command, in_words, out_words }
            ib_uverbs_ex_cmd_hdr {
                response, provider_in_words, provider_out_words, cmd_hdr_reserved
            }
            ib_uverbs_get_context { response }
            ib_uverbs_get_context_resp { async_fd, num_comp_vectors }
            ib_uverbs_query_device { response }
            ib_uverbs_query_device_resp {
                fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap,
                vendor_id, vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags,
                max_sge, max_sge_rd, max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom,
                max_ee_rd_atom, max_res_rd_atom, max_qp_init_rd_atom, max_ee_init_rd_atom,
                atomic_cap, max_ee, max_rdd, max_mw, max_raw_ipv6_qp, max_raw_ethy_qp,
                max_mcast_grp, max_mcast_qp_attach, max_total_mcast_qp_attach, max_ah,
                max_fmr, max_map_per_fmr, max_srq, max_srq_wr, max_srq_sge, max_pkeys,
                local_ca_ack_delay, phys_port_cnt, reserved,
            }
            ib_uverbs_ex_query_device { comp_mask, reserved }
            ib_uverbs_odp_caps { general_caps, per_transport_caps, reserved }
            ib_uverbs_rss_caps {
                supported_qpts, max_rwq_indirection_tables, max_rwq_indirection_table_size,
                reserved,
            }
            ib_uverbs_tm_caps {
                max_rndv_hdr_size, max_num_tags, flags, max_ops, max_sge, reserved
            }
            ib_uverbs_cq_moderation_caps {
                max_cq_moderation_count, max_cq_moderation_period, reserved
            }
            ib_uverbs_ex_query_device_resp {
                base, comp_mask, response_length, odp_caps, timestamp_mask, hca_core_clock,
                device_cap_flags_ex, rss_caps, max_wq_type_rq, raw_packet_caps, tm_caps,
                cq_moderation_caps, max_dm_size, xrc_odp_caps, reserved,
            }
            ib_uverbs_query_port { response, port_num, reserved }
            ib_uverbs_query_port_resp {
                port_cap_flags, max_msg_sz, bad_pkey_cntr, qkey_viol_cntr, gid_tbl_len,
                pkey_tbl_len, lid, sm_lid, state, max_mtu, active_mtu, lmc, max_vl_num,
                sm_sl, subnet_timeout, init_type_reply, active_width, active_speed,
                phys_state, link_layer, flags, reserved,
            }
            ib_uverbs_query_port_resp_ex { legacy_resp, port_cap_flags2, reserved }
            ib_uverbs_gid_entry { gid, gid_index, port_num, gid_type, netdev_ifindex }
            ib_uverbs_alloc_pd { response }
            ib_uverbs_alloc_pd_resp { pd_handle }
            ib_uverbs_dealloc_pd { pd_handle }
            ib_uverbs_reg_mr { response, start, length, hca_va, pd_handle, access_flags }
            ib_uverbs_reg_mr_resp { mr_handle, lkey, rkey }
            ib_uverbs_rereg_mr {
                response, mr_handle, flags, start, length, hca_va, pd_handle, access_flags
            }
            ib_uverbs_rereg_mr_resp { lkey, rkey }
            ib_uverbs_dereg_mr { mr_handle }
            ib_uverbs_alloc_mw { response, pd_handle, mw_type, reserved }
            ib_uverbs_alloc_mw_resp { mw_handle, rkey }
            ib_uverbs_dealloc_mw { mw_handle }
            ib_uverbs_create_comp_channel { response }
            ib_uverbs_create_comp_channel_resp { fd }
            ib_uverbs_comp_event_desc { cq_handle }
            ib_uverbs_create_cq { response, user_handle, cqe, comp_vector, comp_channel, reserved }
            ib_uverbs_create_cq_resp { cq_handle, cqe }
            ib_uverbs_ex_create_cq {
                user_handle, cqe, comp_vector, comp_channel, comp_mask, flags, reserved
            }
            ib_uverbs_ex_create_cq_resp { base, comp_mask, response_length }
            ib_uverbs_resize_cq { response, cq_handle, cqe }
            ib_uverbs_resize_cq_resp { cqe, reserved }
            ib_uverbs_destroy_cq { response, cq_handle, reserved }
            ib_uverbs_destroy_cq_resp { comp_events_reported, async_events_reported }
            ib_uverbs_req_notify_cq { cq_handle, solicited_only }
            ib_uverbs_create_srq { response, user_handle, pd_handle, max_wr, max_sge, srq_limit }
            ib_uverbs_create_srq_resp { srq_handle, max_wr, max_sge, srqn }
            ib_uverbs_modify_srq { srq_handle, attr_mask, max_wr, srq_limit }
            ib_uverbs_query_srq { response, srq_handle, reserved }
            ib_uverbs_query_srq_resp { max_wr, max_sge, srq_limit, reserved }
            ib_uverbs_destroy_srq { response, srq_handle, reserved }
            ib_uverbs_destroy_srq_resp { events_reported }
            ib_uverbs_create_qp {
                response, user_handle, pd_handle, send_cq_handle, recv_cq_handle, srq_handle,
                max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data,
                sq_sig_all, qp_type, is_srq, reserved,
            }
            ib_uverbs_create_qp_resp {
                qp_handle, qpn, max_send_wr, max_recv_wr, max_send_sge, max_recv_sge,
                max_inline_data, reserved,
            }
            ib_uverbs_qp_dest {
                dgid, flow_label, dlid, reserved, sgid_index, hop_limit, traffic_class, sl,
                src_path_bits, static_rate, is_global, port_num,
            }
            ib_uverbs_query_qp { response, qp_handle, attr_mask }
            ib_uverbs_query_qp_resp {
                dest, alt_dest, max_send_wr, max_recv_wr, max_send_sge, max_recv_sge,
                max_inline_data, qkey, rq_psn, sq_psn, dest_qp_num, qp_access_flags,
                pkey_index, alt_pkey_index, qp_state, cur_qp_state, path_mtu, path_mig_state,
                sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, port_num,
                timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout, sq_sig_all, reserved,
            }
            ib_uverbs_modify_qp {
                dest, alt_dest, qp_handle, attr_mask, qkey, rq_psn, sq_psn, dest_qp_num,
                qp_access_flags, pkey_index, alt_pkey_index, qp_state, cur_qp_state, path_mtu,
                path_mig_state, en_sqd_async_notify, max_rd_atomic, max_dest_rd_atomic,
                min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry, alt_port_num,
                alt_timeout, reserved,
            }
            ib_uverbs_destroy_qp { response, qp_handle, reserved }
            ib_uverbs_destroy_qp_resp { events_reported }
            ib_uverbs_global_route {
                dgid, flow_label, sgid_index, hop_limit, traffic_class, reserved
            }
            ib_uverbs_ah_attr {
                grh, dlid, sl, src_path_bits, static_rate, is_global, port_num, reserved
            }
            ib_uverbs_create_ah { response, user_handle, pd_handle, reserved, attr }
            ib_uverbs_create_ah_resp { ah_handle }
            ib_uverbs_destroy_ah { ah_handle }
            ib_uverbs_attach_mcast { gid, qp_handle, mlid, reserved }
            ib_uverbs_detach_mcast { gid, qp_handle, mlid, reserved }
            ib_uverbs_post_send { response, qp_handle, wr_count, sge_count, wqe_size }
            ib_uverbs_post_send_resp { bad_wr }
            ib_uverbs_qp_cap {
                max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data
            }
            mminfo { offset, size, pad }
            rxe_create_cq_resp { mi }
            rxe_resize_cq_resp { mi }
            rxe_create_qp_resp { rq_mi, sq_mi }
            rxe_create_srq_resp { mi, srq_num, reserved }
            rxe_modify_srq_cmd { mmap_info_addr }
            rxe_create_ah_resp { ah_num, reserved }
            ib_uverbs_attr { attr_id, len, flags, attr_data, data }
            ib_uverbs_ioctl_hdr {
                length, object_id, method_id, num_attrs, reserved1, driver_id, reserved2
            }
            mlx5_ib_alloc_ucontext_req { total_num_bfregs, num_low_latency_bfregs }
            mlx5_ib_alloc_ucontext_req_v2 {
                total_num_bfregs, num_low_latency_bfregs, flags, comp_mask, max_cqe_version,
                reserved0, reserved1, reserved2, lib_caps
            }
            mlx5_ib_alloc_ucontext_resp {
                qp_tab_size, bf_reg_size, tot_bfregs, cache_line_size, max_sq_desc_sz,
                max_rq_desc_sz, max_send_wqebb, max_recv_wr, max_srq_recv_wr, num_ports,
                flow_action_flags, comp_mask, response_length, cqe_version, cmds_supp_uhw,
                eth_min_inline, clock_info_versions, hca_core_clock_offset, log_uar_size,
                num_uars_per_page, num_dyn_bfregs, dump_fill_mkey
            }
            mlx5_ib_dci_streams_caps { max_log_num_concurent, max_log_num_errored }
            mlx5_ib_alloc_pd_resp { pdn }
            mlx5_ib_create_cq {
                buf_addr, db_addr, cqe_size, cqe_comp_en, cqe_comp_res_format, flags,
                uar_page_index, reserved0, reserved1
            }
            mlx5_ib_create_cq_resp { cqn, reserved }
            mlx5_ib_create_srq { buf_addr, db_addr, flags, reserved0, uidx, reserved1 }
            mlx5_ib_create_srq_resp { srqn, reserved }
            mlx5_ib_resize_cq { buf_addr, cqe_size, reserved0, reserved1 }
            mlx5_ib_create_qp_dci_streams { log_num_concurent, log_num_errored }
            mlx5_ib_create_qp {
                buf_addr, db_addr, sq_wqe_count, rq_wqe_count, rq_wqe_shift, flags, uidx,
                bfreg_index, sq_buf_addr, ece_options, dci_streams, reserved
            }
            mlx5_ib_create_qp_resp {
                bfreg_index, ece_options, comp_mask, tirn, tisn, rqn, sqn, reserved1,
                tir_icm_addr
            }
            mlx5_ib_create_ah_resp { response_length, dmac, reserved }
            mlx5_ib_burst_info { max_burst_sz, typical_pkt_sz, reserved }
            mlx5_ib_modify_qp { comp_mask, burst_info, ece_options }
            mlx5_ib_modify_qp_resp { response_length, dctn, ece_options, reserved }
            siw_uresp_alloc_ctx { dev_id, pad }
            siw_ureq_reg_mr { stag_key, reserved, pad }
            siw_uresp_reg_mr { stag, pad }
            siw_uresp_create_cq { cq_id, num_cqe, cq_key }
            siw_uresp_create_qp { qp_id, num_sqe, num_rqe, pad, sq_key, rq_key }
            siw_uresp_create_srq { num_rqe, pad, srq_key }
            siw_sge { laddr, length, lkey }
            siw_sqe { id, flags, num_sge, opcode, rkey, raddr, sge }
            siw_rqe { id, flags, num_sge, opcode, unused, sge }
            siw_cqe { id, flags, opcode, status, bytes, imm_data, qp_id }
            siw_cq_ctrl { flags, pad }
        }
    }
}

// ---- rdma_user_rxe.h: the rxe shared rings, WQEs and ib_uverbs_wc ----

/// Adds the checks of a Rust struct that mirrors an anonymous member `$path` of
/// the C struct `$outer` (a union member, e.g. `rxe_send_wr.wr.rdma`): its size,
/// alignment and each field's offset relative to the member.
macro_rules! member_struct {
    ($items:ident, $tiling:ident, $s:ident = $outer:literal . $path:literal { $($f:ident),* $(,)? }) => {{
        let _exhaustive = |x: $s| {
            let $s { $($f: _),* } = x;
        };
        let member = concat!("((struct ", $outer, " *)0)->", $path);
        $items.push(Item::new(
            concat!("sizeof(", stringify!($s), ")"),
            format!("sizeof({member})"),
            core::mem::size_of::<$s>() as i128,
        ));
        $items.push(Item::new(
            concat!("alignof(", stringify!($s), ")"),
            format!("_Alignof(__typeof__({member}))"),
            core::mem::align_of::<$s>() as i128,
        ));
        let mut sum = 0usize;
        $(
            let size = field_size(|x: &$s| &x.$f);
            sum += size;
            $items.push(Item::new(
                concat!(stringify!($s), ".", stringify!($f)),
                concat!(
                    "offsetof(struct ", $outer, ", ", $path, ".", stringify!($f), ") - ",
                    "offsetof(struct ", $outer, ", ", $path, ")"
                ),
                core::mem::offset_of!($s, $f) as i128,
            ));
            $items.push(Item::new(
                concat!("sizeof(", stringify!($s), ".", stringify!($f), ")"),
                format!("sizeof({member}.{})", stringify!($f)),
                size as i128,
            ));
        )*
        $tiling.push((stringify!($s), sum, core::mem::size_of::<$s>()));
    }};
}

/// The Rust structs of ib_user_verbs.h that mirror anonymous members.
fn core_member_table() -> (Vec<Item>, Vec<(&'static str, usize, usize)>) {
    let (mut items, mut tiling) = (Vec::new(), Vec::new());
    member_struct!(items, tiling, ib_uverbs_odp_caps_per_transport = "ib_uverbs_odp_caps"."per_transport_caps" {
        rc_odp_caps, uc_odp_caps, ud_odp_caps
    });
    (items, tiling)
}

fn rxe_table() -> (Vec<Item>, Vec<(&'static str, usize, usize)>) {
    let (mut items, mut tiling) = table! {
        consts {
            IB_UVERBS_WC_SEND,
            IB_UVERBS_WC_RDMA_WRITE,
            IB_UVERBS_WC_RDMA_READ,
            IB_UVERBS_WC_COMP_SWAP,
            IB_UVERBS_WC_FETCH_ADD,
            IB_UVERBS_WC_BIND_MW,
            IB_UVERBS_WC_LOCAL_INV,
            IB_UVERBS_WC_TSO,
            IB_UVERBS_WR_RDMA_WRITE,
            IB_UVERBS_WR_RDMA_WRITE_WITH_IMM,
            IB_UVERBS_WR_SEND,
            IB_UVERBS_WR_SEND_WITH_IMM,
            IB_UVERBS_WR_RDMA_READ,
            IB_UVERBS_WR_ATOMIC_CMP_AND_SWP,
            IB_UVERBS_WR_ATOMIC_FETCH_AND_ADD,
            IB_UVERBS_WR_LOCAL_INV,
            IB_UVERBS_WR_BIND_MW,
            IB_UVERBS_WR_SEND_WITH_INV,
            IB_UVERBS_WR_TSO,
            IB_UVERBS_WR_RDMA_READ_WITH_INV,
            IB_UVERBS_WR_MASKED_ATOMIC_CMP_AND_SWP,
            IB_UVERBS_WR_MASKED_ATOMIC_FETCH_AND_ADD,
        }
        exprs {}
        structs {
            rxe_queue_buf {
                log2_elem_size, index_mask, pad_1, producer_index, pad_2, consumer_index, pad_3
            }
            rxe_sge { addr, length, lkey }
            rxe_dma_info { length, resid, cur_sge, num_sge, sge_offset, reserved }
            rxe_send_wr { wr_id, reserved, opcode, send_flags, ex, wr }
            rxe_send_wqe {
                wr, status, state, iova, mask, first_psn, last_psn, ack_length, ssn,
                has_rd_atomic, dma
            }
            rxe_recv_wqe { wr_id, reserved, padding, dma }
            ib_uverbs_wc {
                wr_id, status, opcode, vendor_err, byte_len, ex, qp_num, src_qp, wc_flags,
                pkey_index, slid, sl, dlid_path_bits, port_num, reserved
            }
        }
    };
    member_struct!(items, tiling, rxe_send_wr_rdma = "rxe_send_wr"."wr.rdma" {
        remote_addr, rkey, reserved
    });
    member_struct!(items, tiling, rxe_send_wr_atomic = "rxe_send_wr"."wr.atomic" {
        remote_addr, compare_add, swap, rkey, reserved
    });
    member_struct!(items, tiling, rxe_send_wr_ud = "rxe_send_wr"."wr.ud" {
        remote_qpn, remote_qkey, pkey_index, reserved, ah_num, pad, av
    });
    (items, tiling)
}

// ---- rdma_user_cm.h (and the socket, path-record and QP-attribute structs it uses) ----

fn cm_table() -> (Vec<Item>, Vec<(&'static str, usize, usize)>) {
    let (mut items, mut tiling) = table! {
        consts {
            RDMA_USER_CM_ABI_VERSION,
            RDMA_MAX_PRIVATE_DATA,
            RDMA_USER_CM_CMD_CREATE_ID,
            RDMA_USER_CM_CMD_DESTROY_ID,
            RDMA_USER_CM_CMD_BIND_IP,
            RDMA_USER_CM_CMD_RESOLVE_IP,
            RDMA_USER_CM_CMD_RESOLVE_ROUTE,
            RDMA_USER_CM_CMD_QUERY_ROUTE,
            RDMA_USER_CM_CMD_CONNECT,
            RDMA_USER_CM_CMD_LISTEN,
            RDMA_USER_CM_CMD_ACCEPT,
            RDMA_USER_CM_CMD_REJECT,
            RDMA_USER_CM_CMD_DISCONNECT,
            RDMA_USER_CM_CMD_INIT_QP_ATTR,
            RDMA_USER_CM_CMD_GET_EVENT,
            RDMA_USER_CM_CMD_GET_OPTION,
            RDMA_USER_CM_CMD_SET_OPTION,
            RDMA_USER_CM_CMD_NOTIFY,
            RDMA_USER_CM_CMD_JOIN_IP_MCAST,
            RDMA_USER_CM_CMD_LEAVE_MCAST,
            RDMA_USER_CM_CMD_MIGRATE_ID,
            RDMA_USER_CM_CMD_QUERY,
            RDMA_USER_CM_CMD_BIND,
            RDMA_USER_CM_CMD_RESOLVE_ADDR,
            RDMA_USER_CM_CMD_JOIN_MCAST,
            RDMA_PS_IPOIB,
            RDMA_PS_IB,
            RDMA_PS_TCP,
            RDMA_PS_UDP,
            RDMA_MC_JOIN_FLAG_FULLMEMBER,
            RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
            RDMA_USER_CM_QUERY_ADDR,
            RDMA_USER_CM_QUERY_PATH,
            RDMA_USER_CM_QUERY_GID,
            RDMA_OPTION_ID,
            RDMA_OPTION_IB,
            RDMA_OPTION_ID_TOS,
            RDMA_OPTION_ID_REUSEADDR,
            RDMA_OPTION_ID_AFONLY,
            RDMA_OPTION_ID_ACK_TIMEOUT,
            RDMA_OPTION_IB_PATH,
        }
        exprs {}
        structs {
            sockaddr_in { sin_family, sin_port, sin_addr, __pad }
            sockaddr_in6 { sin6_family, sin6_port, sin6_flowinfo, sin6_addr, sin6_scope_id }
            __kernel_sockaddr_storage { ss_family, __data }
            ib_user_path_rec {
                dgid, sgid, dlid, slid, raw_traffic, flow_label, reversible, mtu, pkey,
                hop_limit, traffic_class, numb_path, sl, mtu_selector, rate_selector, rate,
                packet_life_time_selector, packet_life_time, preference,
            }
            ib_path_rec_data { flags, reserved, path_rec }
            ib_uverbs_qp_attr {
                qp_attr_mask, qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn,
                sq_psn, dest_qp_num, qp_access_flags, ah_attr, alt_ah_attr, max_send_wr,
                max_recv_wr, max_send_sge, max_recv_sge, max_inline_data, pkey_index,
                alt_pkey_index, en_sqd_async_notify, sq_draining, max_rd_atomic,
                max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry,
                alt_port_num, alt_timeout, reserved,
            }
            rdma_ucm_create_id { uid, response, ps, qp_type, reserved }
            rdma_ucm_create_id_resp { id }
            rdma_ucm_destroy_id { response, id, reserved }
            rdma_ucm_destroy_id_resp { events_reported }
            rdma_ucm_bind_ip { response, addr, id }
            rdma_ucm_bind { id, addr_size, reserved, addr }
            rdma_ucm_join_mcast { response, uid, id, addr_size, join_flags, addr }
            rdma_ucm_resolve_ip { src_addr, dst_addr, id, timeout_ms }
            rdma_ucm_resolve_addr {
                id, timeout_ms, src_size, dst_size, reserved, src_addr, dst_addr
            }
            rdma_ucm_resolve_route { id, timeout_ms }
            rdma_ucm_query { response, id, option }
            rdma_ucm_query_route_resp {
                node_guid, ib_route, src_addr, dst_addr, num_paths, port_num, reserved,
                ibdev_index, reserved1,
            }
            rdma_ucm_query_addr_resp {
                node_guid, port_num, reserved, pkey, src_size, dst_size, src_addr, dst_addr,
                ibdev_index, reserved1,
            }
            rdma_ucm_query_path_resp { num_paths, reserved }
            rdma_ucm_conn_param {
                qp_num, qkey, private_data, private_data_len, srq, responder_resources,
                initiator_depth, flow_control, retry_count, rnr_retry_count, valid,
            }
            rdma_ucm_ud_param { qp_num, qkey, ah_attr, private_data, private_data_len, reserved }
            rdma_ucm_ece { vendor_id, attr_mod }
            rdma_ucm_connect { conn_param, id, reserved, ece }
            rdma_ucm_listen { id, backlog }
            rdma_ucm_accept { uid, conn_param, id, reserved, ece }
            rdma_ucm_reject { id, private_data_len, reason, reserved, private_data }
            rdma_ucm_disconnect { id }
            rdma_ucm_init_qp_attr { response, id, qp_state }
            rdma_ucm_notify { id, event }
            rdma_ucm_get_event { response }
            rdma_ucm_event_resp { uid, id, event, status, param, reserved, ece }
            rdma_ucm_set_option { optval, id, level, optname, optlen }
        }
    };
    // rdma_ucm_cmd_hdr's `in` is a Rust keyword (the field is `in_`), so its
    // rows are written out here rather than by `table!`.
    let _exhaustive = |x: rdma_ucm_cmd_hdr| {
        let rdma_ucm_cmd_hdr {
            cmd: _,
            in_: _,
            out: _,
        } = x;
    };
    let hdr = [
        ("cmd", core::mem::offset_of!(rdma_ucm_cmd_hdr, cmd), 4),
        ("in", core::mem::offset_of!(rdma_ucm_cmd_hdr, in_), 2),
        ("out", core::mem::offset_of!(rdma_ucm_cmd_hdr, out), 2),
    ];
    items.push(Item::new(
        "sizeof(rdma_ucm_cmd_hdr)",
        "sizeof(struct rdma_ucm_cmd_hdr)",
        core::mem::size_of::<rdma_ucm_cmd_hdr>() as i128,
    ));
    items.push(Item::new(
        "alignof(rdma_ucm_cmd_hdr)",
        "_Alignof(struct rdma_ucm_cmd_hdr)",
        core::mem::align_of::<rdma_ucm_cmd_hdr>() as i128,
    ));
    for (c_name, offset, size) in hdr {
        items.push(Item::new(
            format!("rdma_ucm_cmd_hdr.{c_name}"),
            format!("offsetof(struct rdma_ucm_cmd_hdr, {c_name})"),
            offset as i128,
        ));
        items.push(Item::new(
            format!("sizeof(rdma_ucm_cmd_hdr.{c_name})"),
            format!("sizeof(((struct rdma_ucm_cmd_hdr *)0)->{c_name})"),
            size as i128,
        ));
    }
    tiling.push((
        "rdma_ucm_cmd_hdr",
        8,
        core::mem::size_of::<rdma_ucm_cmd_hdr>(),
    ));
    (items, tiling)
}

/// Writes the C program that prints `name value` for every item.
fn c_source(items: &[Item]) -> String {
    let mut src = String::from("#include <stddef.h>\n#include <stdio.h>\n");
    for h in HEADERS {
        src += &format!("#include <{h}>\n");
    }
    src += "\nint main(void)\n{\n";
    for it in items {
        src += &format!(
            "\tprintf(\"%s %lld\\n\", \"{}\", (long long)({}));\n",
            it.name, it.c_expr
        );
    }
    src += "\treturn 0;\n}\n";
    src
}

/// Public constant, const fn and struct names declared in the crate's sources.
fn declared_names() -> (BTreeSet<String>, BTreeSet<String>, BTreeSet<String>) {
    let (mut consts, mut fns, mut structs) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for entry in fs::read_dir(&dir).expect("read src/") {
        let text = fs::read_to_string(entry.expect("dir entry").path()).expect("read source");
        for line in text.lines().map(str::trim_start) {
            let ident = |rest: &str| -> String {
                rest.chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect()
            };
            if let Some(rest) = line.strip_prefix("pub const fn ") {
                fns.insert(ident(rest));
            } else if let Some(rest) = line.strip_prefix("pub const ") {
                consts.insert(ident(rest));
            } else if let Some(rest) = line.strip_prefix("pub struct ") {
                structs.insert(ident(rest));
            }
        }
    }
    (consts, fns, structs)
}

/// Writes to the real stderr, which the test harness does not capture (unlike `eprintln!`).
fn loud(msg: &str) {
    let _ = writeln!(std::io::stderr(), "{msg}");
}

/// Fails (with `CI` set) or skips loudly when the C toolchain or headers are absent.
fn unavailable(why: &str) {
    if env::var_os("CI").is_some() {
        panic!("C layout check cannot run in CI: {why}");
    }
    loud(&format!(
        "\n!!!!!!!!!!\nSKIPPED: C layout check did not run: {why}\n!!!!!!!!!!\n"
    ));
}

#[test]
fn table_covers_every_public_item() {
    let (items, _) = build_table();
    let names: BTreeSet<&str> = items.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names.len(), items.len(), "duplicate names in the table");
    let (consts, fns, structs) = declared_names();
    let mut missing = Vec::new();
    for c in &consts {
        let newer = NEWER_THAN_LOCAL_HEADERS.contains(&c.as_str());
        if newer == names.contains(c.as_str()) {
            missing.push(format!("constant {c} (newer-than-header list: {newer})"));
        }
    }
    for f in &fns {
        if !names.iter().any(|n| n.starts_with(&format!("{f}("))) {
            missing.push(format!("const fn {f}"));
        }
    }
    for s in &structs {
        if !names.contains(format!("sizeof({s})").as_str()) {
            missing.push(format!("struct {s}"));
        }
    }
    for n in NEWER_THAN_LOCAL_HEADERS {
        if !consts.contains(*n) {
            missing.push(format!("newer-than-header item {n} is not declared"));
        }
    }
    assert!(
        missing.is_empty(),
        "table out of sync with src/: {missing:#?}"
    );
}

#[test]
fn no_struct_has_padding() {
    let (_, tiling) = build_table();
    for (name, fields, size) in tiling {
        assert_eq!(
            fields, size,
            "{name}: fields cover {fields} of {size} bytes"
        );
    }
}

#[test]
fn c_layout_matches_headers() {
    if !Path::new("/usr/include/rdma/ib_user_verbs.h").exists() {
        return unavailable(
            "/usr/include/rdma/ib_user_verbs.h is missing (install linux-libc-dev)",
        );
    }
    if !Command::new("cc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return unavailable("no working `cc` C compiler in PATH");
    }

    let (items, _) = build_table();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = env::temp_dir().join(format!(
        "uverbs-uapi-c-layout-{}-{nanos}",
        std::process::id()
    ));
    fs::create_dir_all(&dir).expect("create temp dir");
    let src = dir.join("layout.c");
    let exe = dir.join("layout");
    fs::write(&src, c_source(&items)).expect("write C source");

    let compiled = Command::new("cc")
        .args(["-std=gnu11", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("run cc");
    if !compiled.status.success() {
        panic!(
            "cc failed on {} (a name missing from the headers?):\n{}",
            src.display(),
            String::from_utf8_lossy(&compiled.stderr)
        );
    }
    let run = Command::new(&exe).output().expect("run the C program");
    assert!(run.status.success(), "C program failed: {run:?}");
    let _ = fs::remove_dir_all(&dir);

    let mut c_values: BTreeMap<String, i128> = BTreeMap::new();
    for line in String::from_utf8(run.stdout).expect("utf-8").lines() {
        let (name, value) = line.rsplit_once(' ').expect("`name value` line");
        let value = value.parse().expect("integer value");
        assert!(
            c_values.insert(name.to_owned(), value).is_none(),
            "{name} printed twice"
        );
    }

    let mut problems = Vec::new();
    for it in &items {
        match c_values.remove(&it.name) {
            None => problems.push(format!("{}: missing on the C side", it.name)),
            Some(c) if c != it.rust => {
                problems.push(format!("{}: C {} != Rust {}", it.name, c, it.rust))
            }
            Some(_) => {}
        }
    }
    for name in c_values.keys() {
        problems.push(format!("{name}: missing on the Rust side"));
    }
    assert!(
        problems.is_empty(),
        "{} of {} items differ from the C headers:\n{}",
        problems.len(),
        items.len(),
        problems.join("\n")
    );
    loud(&format!(
        "c_layout: compared {} items with the C headers, all equal",
        items.len()
    ));
}
