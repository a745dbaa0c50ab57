//! mlx5's UAR pages: the device registers a process writes to ring its
//! doorbells, allocated as mlx5's UAR object (`MLX5_IB_METHOD_UAR_OBJ_ALLOC`)
//! and mapped from the command file at the offset the allocation answers.
//!
//! Two kinds, as libmlx5 uses them: one non-cached page per context, whose
//! CQ doorbell (offset 0x20) arms every CQ; and BlueFlame pages for QPs,
//! each with two BlueFlame registers at 0x800 and 0xa00 (`bf_reg_size`
//! 512), each register two 256-byte halves used in turn. A QP's doorbell is
//! the first 8 bytes of its last WQE written to its register; a
//! single-request post of up to 256 bytes writes the whole WQE there
//! instead (BlueFlame), so the device need not fetch it.
//!
//! **Ordering.** Only x86-64 is served (the provider refuses its data path
//! elsewhere): there, stores to ordinary memory are seen in program order,
//! and the UAR mapping is write-combining on real hardware, whose stores
//! may be merged and reordered until an `sfence`. So: WQE and doorbell
//! record stores, then `sfence` (rdma-core's `mmio_wc_start`), then the UAR
//! stores, then `sfence` (`mmio_flush_writes`) so they leave the CPU before
//! the next doorbell, which may use the other half of the register.

use std::sync::Arc;

use crate::error::Errno;
use crate::transport::{Method, SharedMapping, Transport};
use uverbs_uapi as sys;

/// Offset of the CQ doorbell in a UAR page (`MLX5_CQ_DOORBELL`).
pub(crate) const CQ_DOORBELL: usize = 0x20;
/// Offset of the first BlueFlame register in a UAR page (`MLX5_BF_OFFSET`).
pub(crate) const BF_OFFSET: usize = 0x800;
/// BlueFlame registers per 4 KiB UAR (`MLX5_NUM_NON_FP_BFREGS_PER_UAR`).
pub(crate) const BFREGS_PER_UAR: usize = 2;

/// One allocated and mapped UAR page.
pub(crate) struct UarPage {
    mapping: SharedMapping,
    /// The page's index, which CREATE_CQ and CREATE_QP name.
    pub(crate) page_id: u32,
    /// The UAR object's handle (destroyed with the context).
    #[allow(dead_code)]
    handle: u32,
}

impl UarPage {
    /// Allocates a UAR page of `kind` (`MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC` or
    /// `_BF`) and maps it.
    pub(crate) fn alloc(transport: &dyn Transport, kind: u32) -> Result<Arc<UarPage>, Errno> {
        let mut offset = 0u64;
        let mut length = 0u32;
        let mut page_id = 0u32;
        let mut m = Method::new(
            sys::MLX5_IB_OBJECT_UAR,
            sys::MLX5_IB_METHOD_UAR_OBJ_ALLOC,
            sys::RDMA_DRIVER_MLX5,
        );
        let handle = m.idr_new(sys::MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE);
        m.const_in(sys::MLX5_IB_ATTR_UAR_OBJ_ALLOC_TYPE, u64::from(kind));
        let off = m.ptr_out(sys::MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_OFFSET, &mut offset);
        let len = m.ptr_out(sys::MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_LENGTH, &mut length);
        let id = m.ptr_out(sys::MLX5_IB_ATTR_UAR_OBJ_ALLOC_PAGE_ID, &mut page_id);
        // SAFETY: UAR_OBJ_ALLOC hands no memory to the device; the new
        // object is this context's and lives until the context closes.
        let done = unsafe { m.invoke(transport) }?;
        let handle = done.handle(handle).ok_or(Errno::PROTO)?;
        let offset = done.read(off).ok_or(Errno::PROTO)?;
        let length = done.read(len).ok_or(Errno::PROTO)?;
        let page_id = done.read(id).ok_or(Errno::PROTO)?;
        if (length as usize) < BF_OFFSET + BFREGS_PER_UAR * 512 {
            return Err(Errno::PROTO);
        }
        // SAFETY: the offset and length the allocation just answered on
        // this transport; nothing in Rust treats the page as its own.
        let mapping = unsafe { transport.map_queue(offset, length as usize) }?;
        Ok(Arc::new(UarPage {
            mapping,
            page_id,
            handle,
        }))
    }

    /// The address of byte `offset` of the page.
    fn at(&self, offset: usize) -> *mut u64 {
        debug_assert!(offset + 8 <= self.mapping.len() && offset % 8 == 0);
        // SAFETY: within the mapping (the callers' offsets are constants
        // inside a 4 KiB page, checked at allocation).
        unsafe { self.mapping.as_ptr().as_ptr().add(offset).cast() }
    }

    /// Rings the CQ doorbell: `value`, stored big-endian, at 0x20.
    pub(crate) fn ring_cq(&self, value: u64) {
        wc_start();
        // SAFETY: an aligned 8-byte register of this mapped page; a device
        // register takes a single store, hence volatile.
        unsafe { self.at(CQ_DOORBELL).write_volatile(value.to_be()) };
        wc_flush();
    }
}

/// A QP's BlueFlame register: a UAR page, which register of it, and which
/// half is next.
pub(crate) struct BfReg {
    page: Arc<UarPage>,
    /// Offset of the register in the page.
    offset: usize,
    /// 0 or 256: the half the next doorbell uses (`bf->offset`).
    half: usize,
}

/// Bytes of one half of a BlueFlame register (`bf_reg_size / 2`).
pub(crate) const BF_HALF: usize = 256;

impl BfReg {
    /// Register `index` (0 or 1) of `page`.
    pub(crate) fn new(page: Arc<UarPage>, index: usize) -> BfReg {
        BfReg {
            page,
            offset: BF_OFFSET + index * 2 * BF_HALF,
            half: 0,
        }
    }

    /// The page this register is in.
    pub(crate) fn page(&self) -> &Arc<UarPage> {
        &self.page
    }

    /// Rings the doorbell with the first 8 bytes of the last WQE, `ctrl`
    /// (as they lie in memory). Then the next doorbell uses the other
    /// half. The caller stored the WQE and the doorbell record before.
    pub(crate) fn ring(&mut self, ctrl: [u8; 8]) {
        wc_start();
        let reg = self.page.at(self.offset + self.half);
        // SAFETY: an aligned 8-byte register of the mapped page.
        unsafe { reg.write_volatile(u64::from_ne_bytes(ctrl)) };
        wc_flush();
        self.half ^= BF_HALF;
    }

    /// Writes a whole WQE through BlueFlame: `blocks` 64-byte blocks of
    /// the SQ of `bbs` blocks at `sq`, from block `first`, following the
    /// SQ's wrap, in 8-byte stores (`mlx5_bf_copy`). Then the next
    /// doorbell uses the other half.
    ///
    /// # Safety
    ///
    /// `sq` is the SQ's start, `bbs` a power of two, `first < bbs`, and
    /// `blocks * 64` at most [`BF_HALF`]; the caller stored the WQE and the
    /// doorbell record before.
    pub(crate) unsafe fn blue_flame(&mut self, sq: *const u8, bbs: u32, first: u32, blocks: u32) {
        wc_start();
        let reg = self.page.at(self.offset + self.half);
        for i in 0..blocks {
            let block = ((first + i) & (bbs - 1)) as usize * 64;
            // SAFETY: a block of the SQ (the caller's promise), 8-aligned.
            let src = unsafe { sq.add(block).cast::<u64>() };
            for w in 0..8 {
                // SAFETY: within the block and within this register's half
                // (at most BF_HALF bytes in all).
                unsafe {
                    let v = src.add(w).read_volatile();
                    reg.add(i as usize * 8 + w).write_volatile(v);
                }
            }
        }
        wc_flush();
        self.half ^= BF_HALF;
    }
}

/// Orders the stores before it (WQEs, doorbell records) before the UAR
/// stores after it (`mmio_wc_start`: an `sfence` on x86-64).
#[inline]
fn wc_start() {
    sfence();
}

/// Pushes the UAR stores out of the write-combining buffer
/// (`mmio_flush_writes`).
#[inline]
fn wc_flush() {
    sfence();
}

#[inline]
fn sfence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` has no operands and no effect but ordering stores.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}
