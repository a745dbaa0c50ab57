//! The 64-byte completion entries a ConnectX writes (`struct mlx5_cqe64`
//! and `struct mlx5_err_cqe` of rdma-core's mlx5dv.h, the kernel's
//! include/linux/mlx5/device.h), built as libmlx5 44's cq.c parses them
//! (`mlx5_parse_cqe`, `handle_good_req`, `handle_responder`,
//! `mlx5_handle_error_cqe`). Every multi-byte field is big-endian.

/// `MLX5_CQE_*`: the opcode in the high nibble of `op_own`.
pub mod opcode {
    /// A requester's completion (a signalled send WQE).
    pub const REQ: u8 = 0x0;
    /// RDMA WRITE with immediate received.
    pub const RESP_WR_IMM: u8 = 0x1;
    /// SEND received.
    pub const RESP_SEND: u8 = 0x2;
    /// SEND with immediate received.
    pub const RESP_SEND_IMM: u8 = 0x3;
    /// A requester's error (or flush).
    pub const REQ_ERR: u8 = 0xd;
    /// A responder's error (or flush of a receive).
    pub const RESP_ERR: u8 = 0xe;
    /// An entry no one has written (libmlx5 initialises every CQE so).
    pub const INVALID: u8 = 0xf;
}

/// `MLX5_CQE_SYNDROME_*` of an error CQE.
pub mod syndrome {
    /// A receive buffer too small, or a message too long.
    pub const LOCAL_LENGTH: u8 = 0x01;
    /// A WQE the QP cannot execute.
    pub const LOCAL_QP_OP: u8 = 0x02;
    /// A local key that is wrong, of another PD, or out of bounds.
    pub const LOCAL_PROT: u8 = 0x04;
    /// Flushed: the QP is in the error state.
    pub const WR_FLUSH: u8 = 0x05;
    /// The responder refused the request (e.g. a message longer than its
    /// receive buffer).
    pub const REMOTE_INVAL_REQ: u8 = 0x12;
    /// The remote key does not allow the access.
    pub const REMOTE_ACCESS: u8 = 0x13;
    /// The responder failed the operation.
    pub const REMOTE_OP: u8 = 0x14;
}

/// `MLX5_OPCODE_*` of a send WQE (in the control segment and in a
/// requester CQE's `sop_drop_qpn`).
pub mod wqe_opcode {
    /// No operation.
    pub const NOP: u8 = 0x00;
    /// RDMA WRITE.
    pub const RDMA_WRITE: u8 = 0x08;
    /// RDMA WRITE with immediate.
    pub const RDMA_WRITE_IMM: u8 = 0x09;
    /// SEND.
    pub const SEND: u8 = 0x0a;
    /// SEND with immediate.
    pub const SEND_IMM: u8 = 0x0b;
    /// RDMA READ.
    pub const RDMA_READ: u8 = 0x10;
    /// Compare and swap.
    pub const ATOMIC_CS: u8 = 0x11;
    /// Fetch and add.
    pub const ATOMIC_FA: u8 = 0x12;
}

/// `vendor_err_synd` of an error CQE: 0xf9 is what ConnectX firmware
/// reports with a flush; the model knows no other firmware value and
/// reports 0 for the rest.
pub fn vendor_syndrome(syndrome: u8) -> u8 {
    if syndrome == syndrome::WR_FLUSH {
        0xf9
    } else {
        0
    }
}

/// One completion, before it is laid out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    /// `MLX5_CQE_*`.
    pub opcode: u8,
    /// The QP's number (the low 24 bits of `sop_drop_qpn`).
    pub qpn: u32,
    /// The send WQE's opcode (the high byte of `sop_drop_qpn`; of
    /// `s_wqe_opcode_qpn` in an error CQE).
    pub wqe_opcode: u8,
    /// The WQE's counter: a send WQE's index, a receive WQE's counter.
    pub wqe_counter: u16,
    /// The user index libmlx5 gave the QP (`srqn_uidx`, CQE version 1).
    pub uidx: u32,
    /// Bytes moved.
    pub byte_cnt: u32,
    /// The immediate as it was in the WQE (network order), or the P_Key
    /// index.
    pub imm_inval_pkey: [u8; 4],
    /// `flags_rqpn`: the sender's QP (UD), the SL and GRH bits.
    pub flags_rqpn: u32,
    /// The sender's LID.
    pub slid: u16,
    /// `MLX5_CQE_SYNDROME_*` of an error CQE.
    pub syndrome: u8,
    /// Scatter-to-CQE of at most 32 bytes: the data in the CQE's first 32
    /// bytes, `MLX5_INLINE_SCATTER_32` in `op_own`.
    pub scatter32: Option<[u8; 32]>,
}

/// `MLX5_INLINE_SCATTER_32` in `op_own`.
pub const INLINE_SCATTER_32: u8 = 0x4;
/// `MLX5_INLINE_SCATTER_64`: the data in the 64 bytes before the CQE (the
/// first half of a 128-byte CQE).
pub const INLINE_SCATTER_64: u8 = 0x8;

impl Completion {
    /// The 64 bytes at producer index `pi` of a CQ of `entries` entries:
    /// the owner bit is the parity of the pass over the ring.
    pub fn bytes(&self, pi: u32, entries: u32) -> [u8; 64] {
        let mut b = [0u8; 64];
        let owner = u8::from(pi & entries != 0);
        b[63] = (self.opcode << 4) | owner;
        b[60..62].copy_from_slice(&self.wqe_counter.to_be_bytes());
        b[32..36].copy_from_slice(&(self.uidx & 0x00ff_ffff).to_be_bytes());
        let op_qpn = (u32::from(self.wqe_opcode) << 24) | (self.qpn & 0x00ff_ffff);
        if matches!(self.opcode, opcode::REQ_ERR | opcode::RESP_ERR) {
            // struct mlx5_err_cqe.
            b[54] = vendor_syndrome(self.syndrome);
            b[55] = self.syndrome;
            b[56..60].copy_from_slice(&op_qpn.to_be_bytes());
            return b;
        }
        if let Some(data) = self.scatter32 {
            b[..32].copy_from_slice(&data);
            b[63] |= INLINE_SCATTER_32;
        }
        b[22..24].copy_from_slice(&self.slid.to_be_bytes());
        b[24..28].copy_from_slice(&self.flags_rqpn.to_be_bytes());
        b[36..40].copy_from_slice(&self.imm_inval_pkey);
        b[44..48].copy_from_slice(&self.byte_cnt.to_be_bytes());
        let sop = if self.opcode == opcode::REQ {
            op_qpn
        } else {
            self.qpn & 0x00ff_ffff
        };
        b[56..60].copy_from_slice(&sop.to_be_bytes());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_bit_is_the_pass_parity_and_errors_use_the_error_layout() {
        let c = Completion {
            opcode: opcode::REQ,
            qpn: 0x123,
            wqe_opcode: wqe_opcode::RDMA_READ,
            wqe_counter: 7,
            uidx: 5,
            byte_cnt: 64,
            ..Default::default()
        };
        assert_eq!(c.bytes(3, 32)[63], 0x00);
        assert_eq!(c.bytes(35, 32)[63], 0x01);
        let b = c.bytes(0, 32);
        assert_eq!(b[56..60], [0x10, 0, 0x01, 0x23]);
        assert_eq!(b[44..48], [0, 0, 0, 64]);
        assert_eq!(b[32..36], [0, 0, 0, 5]);
        assert_eq!(b[60..62], [0, 7]);
        let e = Completion {
            opcode: opcode::REQ_ERR,
            syndrome: syndrome::WR_FLUSH,
            ..c
        };
        let b = e.bytes(32, 32);
        assert_eq!(b[63], 0xd1);
        assert_eq!((b[54], b[55]), (0xf9, 0x05));
        assert_eq!(b[44..48], [0; 4], "no byte count in an error CQE");
    }
}
