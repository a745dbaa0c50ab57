//! The `POST_SEND` doorbell: a prepared write() whose bytes never change.
//!
//! rxe's user-space provider writes send WQEs into the shared send ring and
//! then tells the kernel with one legacy `POST_SEND` write carrying no work
//! request (`wr_count` 0, `sge_count` 0); the kernel's `rxe_post_send` then
//! runs the requester, which reads the ring. Since nothing in that command
//! depends on the WQEs, the frame is encoded once, when the QP is created,
//! and re-sent as is: ringing is one `write()` and no encoding.

use std::os::fd::BorrowedFd;
use std::sync::atomic::AtomicU32;

use crate::error::Errno;
use crate::transport::frame::{user_addr, WriteFrame};
use uverbs_uapi as sys;
use zerocopy::IntoBytes;

/// The `wqe_size` the doorbell sends: `sizeof(struct ib_uverbs_send_wr)`,
/// the least the kernel accepts (a 2026 fix refuses less with `EINVAL`).
pub const DOORBELL_WQE_SIZE: u32 = 56;

/// The bytes of a doorbell frame: header (8) + `ib_uverbs_post_send` (24).
pub const DOORBELL_LEN: usize =
    size_of::<sys::ib_uverbs_cmd_hdr>() + size_of::<sys::ib_uverbs_post_send>();

// Frame and response live together on the heap: the frame holds the
// response's address, so neither may move while the doorbell exists.
#[derive(Debug)]
#[repr(C, align(8))]
struct Frame {
    bytes: [u8; DOORBELL_LEN],
    // What the kernel writes back (`ib_uverbs_post_send_resp::bad_wr`, 0
    // for an empty list). Atomic because the kernel writes it during a ring
    // made through `&self`, maybe from several threads at once.
    bad_wr: AtomicU32,
}

/// The `POST_SEND` doorbell of one QP: `write()` of `IB_USER_VERBS_CMD_POST_SEND`
/// with `wr_count` 0, `sge_count` 0 and `wqe_size` [`DOORBELL_WQE_SIZE`],
/// encoded once at creation from the QP handle.
///
/// ```
/// use uverbs::command::PostSendDoorbell;
///
/// let bell = PostSendDoorbell::new(5);
/// let bytes = bell.as_bytes();
/// assert_eq!(bytes.len(), 32);
/// assert_eq!(&bytes[..8], &[28, 0, 0, 0, 8, 0, 1, 0]); // POST_SEND, 8 words in, 1 out
/// assert_eq!(&bytes[16..20], &5u32.to_ne_bytes()); // qp_handle
/// ```
#[doc(alias = "ibv_post_send")]
#[doc(alias = "ibv_cmd_post_send")]
#[derive(Debug)]
pub struct PostSendDoorbell {
    qp_handle: u32,
    frame: Box<Frame>,
}

impl PostSendDoorbell {
    /// The doorbell of QP `qp_handle`.
    pub fn new(qp_handle: u32) -> Self {
        let mut frame = Box::new(Frame {
            bytes: [0; DOORBELL_LEN],
            bad_wr: AtomicU32::new(0),
        });
        let req = sys::ib_uverbs_post_send {
            qp_handle,
            wr_count: 0,
            sge_count: 0,
            wqe_size: DOORBELL_WQE_SIZE,
            ..Default::default()
        };
        // `as_ptr` of the atomic: a pointer the kernel may write through
        // while `&self` is shared (interior mutability); `user_addr`
        // exposes it.
        let resp = user_addr(frame.bad_wr.as_ptr());
        let resp_len = size_of::<sys::ib_uverbs_post_send_resp>();
        match WriteFrame::new(
            sys::IB_USER_VERBS_CMD_POST_SEND,
            req.as_bytes(),
            &[],
            resp,
            resp_len,
        ) {
            Ok(encoded) => frame.bytes.copy_from_slice(encoded.as_bytes()),
            // 32 bytes of whole words with an 8-byte `response` field:
            // `encode` refuses none of it.
            Err(_) => unreachable!("the doorbell frame is always well formed"),
        }
        PostSendDoorbell { qp_handle, frame }
    }

    /// The QP the doorbell rings for.
    pub fn qp_handle(&self) -> u32 {
        self.qp_handle
    }

    /// The exact bytes each ring writes (the response pointer included).
    pub fn as_bytes(&self) -> &[u8] {
        &self.frame.bytes
    }

    /// Rings: one `write()` of the prepared bytes on `fd`, the uverbs
    /// command file of the QP's context. `EINVAL` from the kernel means
    /// the QP is not (yet) in RTS; a short write is `EIO`.
    ///
    /// # Safety
    ///
    /// The kernel will let the device process every WQE published on the
    /// QP's send ring: each must only name memory that stays valid (and is
    /// not otherwise used) until its completion, and `fd` must be the file
    /// the QP belongs to.
    pub unsafe fn ring(&self, fd: BorrowedFd<'_>) -> Result<(), Errno> {
        let bytes = self.as_bytes();
        // SAFETY: the only pointer in the frame is `bad_wr`'s, exposed at
        // creation, 4 bytes (`out_words` 1), alive as long as `self` and
        // only accessed atomically; what the device does with the ring is
        // the caller's promise.
        let written = unsafe { crate::transport::write_command(fd, bytes) }?;
        if written != bytes.len() {
            return Err(Errno::IO);
        }
        Ok(())
    }
}
