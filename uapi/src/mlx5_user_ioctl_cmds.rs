//! Mirror of part of `<rdma/mlx5_user_ioctl_cmds.h>` and
//! `<rdma/mlx5_user_ioctl_verbs.h>`: mlx5's own ioctl objects that a verbs
//! data path meets. A context opened with `MLX5_LIB_CAP_DYN_UAR` gets no
//! blue-flame registers from `GET_CONTEXT`; it allocates each UAR page as
//! an `MLX5_IB_OBJECT_UAR` and maps it at the offset the answer names.

use crate::rdma_user_ioctl_cmds::UVERBS_ID_NS_SHIFT;

/// The first of mlx5's objects (DEVX); the namespace of driver objects.
pub const MLX5_IB_OBJECT_DEVX: u16 = 1 << UVERBS_ID_NS_SHIFT;
/// A UAR page allocated on demand.
pub const MLX5_IB_OBJECT_UAR: u16 = MLX5_IB_OBJECT_DEVX + 8;

/// Allocates a UAR page.
pub const MLX5_IB_METHOD_UAR_OBJ_ALLOC: u16 = 1 << UVERBS_ID_NS_SHIFT;
/// Frees a UAR page.
pub const MLX5_IB_METHOD_UAR_OBJ_DESTROY: u16 = MLX5_IB_METHOD_UAR_OBJ_ALLOC + 1;

/// `UAR_OBJ_ALLOC`: the new object (IDR, new).
pub const MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE: u16 = 1 << UVERBS_ID_NS_SHIFT;
/// `UAR_OBJ_ALLOC`: `MLX5_IB_UAPI_UAR_ALLOC_TYPE_*` (const in).
pub const MLX5_IB_ATTR_UAR_OBJ_ALLOC_TYPE: u16 = MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE + 1;
/// `UAR_OBJ_ALLOC`: where to mmap the page (u64 out).
pub const MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_OFFSET: u16 = MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE + 2;
/// `UAR_OBJ_ALLOC`: how many bytes to mmap (u32 out).
pub const MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_LENGTH: u16 = MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE + 3;
/// `UAR_OBJ_ALLOC`: the device's index of the page (u32 out), which CQs
/// name in `mlx5_ib_create_cq::uar_page_index`.
pub const MLX5_IB_ATTR_UAR_OBJ_ALLOC_PAGE_ID: u16 = MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE + 4;
/// `UAR_OBJ_DESTROY`: the object (IDR, destroy).
pub const MLX5_IB_ATTR_UAR_OBJ_DESTROY_HANDLE: u16 = 1 << UVERBS_ID_NS_SHIFT;

/// A UAR page mapped write-combining (blue flame).
pub const MLX5_IB_UAPI_UAR_ALLOC_TYPE_BF: u32 = 0x0;
/// A UAR page mapped non-cached (doorbells only).
pub const MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC: u32 = 0x1;
