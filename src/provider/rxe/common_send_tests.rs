//! The common send path ([`encode_common_send`]: SGEs, or one
//! inline segment) against the general writer: the same bytes in the slot
//! for every request it takes, the same refusal of a full queue, and `None`
//! for everything else.

use proptest::prelude::*;

use super::kernel_model::TestRing;
use super::queue::{Producer, QueueFull};
use super::ring_props::producer;
use super::wqe::{
    check_send_for_qp_type, encode_common_send, encode_direct, send_queue_full, write_send_wqe,
    SendLimits, SEND_WQE_LEN,
};
use crate::command::QpType;
use crate::wr::{Payload, PostError, Remote, SendFlags, SendOp, SendWr, Sge, UdDest};

const LIMITS: SendLimits = SendLimits {
    max_sge: 4,
    max_inline: 64,
};

/// The slot a writer fills for `wr`, starting from the same stale bytes
/// (`stale`, as the kernel leaves a used slot), as the kernel reads it.
fn slot_after(
    stale: u8,
    wr: &SendWr<'_>,
    write: impl FnOnce(&mut Producer, &SendWr<'_>) -> Result<(), PostError>,
) -> Vec<u8> {
    let ring = TestRing::new(9, 4);
    let mut sq = producer(&ring, SEND_WQE_LEN);
    sq.reserve().unwrap().fill(stale);
    sq.cancel();
    write(&mut sq, wr).expect("the request is written");
    sq.publish();
    let mut out = vec![0u8; ring.elem_size()];
    assert!(ring.kernel_consumer().pop(&mut out));
    out
}

/// A direct writer that takes requests without the general checks
/// (`encode_common_send`, `encode_direct`).
type DirectWriter =
    fn(&mut Producer, QpType, SendLimits, &SendWr<'_>) -> Option<Result<(), QueueFull>>;

/// The slots `direct` (which must take `wr`) and the general writer leave
/// for `wr` on a `qp_type` QP, from the same stale bytes.
fn direct_and_general(
    stale: u8,
    qp_type: QpType,
    wr: &SendWr<'_>,
    direct: DirectWriter,
) -> (Vec<u8>, Vec<u8>) {
    let fast = slot_after(stale, wr, |sq, wr| {
        direct(sq, qp_type, LIMITS, wr)
            .expect("the direct writer takes it")
            .map_err(send_queue_full)
    });
    let general = slot_after(stale, wr, |sq, wr| {
        check_send_for_qp_type(qp_type, wr)?;
        write_send_wqe(sq, LIMITS, wr)
    });
    (fast, general)
}

fn op_strategy() -> impl Strategy<Value = SendOp> {
    let remote = (any::<u64>(), any::<u32>()).prop_map(|(addr, rkey)| Remote { addr, rkey });
    prop_oneof![
        2 => any::<Option<u32>>().prop_map(|imm| SendOp::Send { imm }),
        2 => (remote.clone(), any::<Option<u32>>())
            .prop_map(|(remote, imm)| SendOp::RdmaWrite { remote, imm }),
        1 => remote.prop_map(|remote| SendOp::RdmaRead { remote }),
    ]
}

proptest! {
    #![proptest_config(super::super::ring_prop_config(256))]

    /// Every request the path must take (a SEND or WRITE from one to
    /// `max_sge` SGEs whose total fits a `u32`, or of one inline segment; a
    /// READ on RC into such SGEs) is written as the general writer writes
    /// it; the rest (too many SGEs, a total past `u32`, a READ on UC or
    /// inline) are declined with nothing reserved.
    #[test]
    fn writes_the_general_writers_bytes(
        op in op_strategy(),
        flags in 0u32..8,
        wr_id in any::<u64>(),
        sges in prop::collection::vec(
            (any::<u64>(), prop_oneof![any::<u32>(), 0u32..4096], any::<u32>())
                .prop_map(|(addr, length, lkey)| Sge { addr, length, lkey }),
            1..=LIMITS.max_sge as usize + 1,
        ),
        inline_bytes in prop::option::of(prop::collection::vec(any::<u8>(), 0..=64)),
        uc in any::<bool>(),
        stale in any::<u8>(),
    ) {
        let qp_type = if uc { QpType::Uc } else { QpType::Rc };
        let segs: [&[u8]; 1] = [inline_bytes.as_deref().unwrap_or_default()];
        let wr = SendWr {
            wr_id,
            op,
            flags: SendFlags::from_bits_retain(flags),
            payload: if inline_bytes.is_some() { Payload::Inline(&segs) } else { Payload::Sges(&sges) },
            ud: None,
        };
        // A READ only on RC and never inline; SGEs within max_sge and their
        // total within a u32.
        let read = matches!(op, SendOp::RdmaRead { .. });
        let total: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
        let sges_fit = sges.len() <= LIMITS.max_sge as usize && total <= u64::from(u32::MAX);
        let declined = if inline_bytes.is_some() { read } else { !sges_fit } || (read && uc);
        if declined {
            let ring = TestRing::new(9, 4);
            let mut sq = producer(&ring, SEND_WQE_LEN);
            prop_assert!(encode_common_send(&mut sq, qp_type, LIMITS, &wr).is_none());
            prop_assert_eq!(sq.pending(), 0);
            return Ok(());
        }
        let (fast, general) = direct_and_general(stale, qp_type, &wr, encode_common_send);
        prop_assert_eq!(fast, general);
    }
}

proptest! {
    #![proptest_config(super::super::ring_prop_config(256))]

    /// The requests the general path writes without its checks
    /// ([`encode_direct`]): the general writer's bytes for every request
    /// taken, which must include each SEND (on UD with its destination)
    /// and WRITE (RC, UC) of one or two SGEs or one inline segment, each
    /// READ on RC into one or two SGEs, and each aligned atomic of one SGE
    /// of at least 8 bytes on RC; nothing reserved for the rest (no SGE,
    /// an inline READ or atomic, an op the QP type lacks).
    #[test]
    fn direct_requests_write_the_general_writers_bytes(
        op in prop_oneof![
            any::<Option<u32>>().prop_map(|imm| SendOp::Send { imm }),
            (any::<u64>(), any::<Option<u32>>()).prop_map(|(addr, imm)| SendOp::RdmaWrite {
                remote: Remote { addr, rkey: 4 },
                imm,
            }),
            any::<u64>().prop_map(|addr| SendOp::RdmaRead { remote: Remote { addr, rkey: 3 } }),
            (any::<u64>(), any::<u64>()).prop_map(|(addr, add)| SendOp::FetchAdd {
                remote: Remote { addr: addr & !7, rkey: 5 },
                add,
            }),
            (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(addr, compare, swap)| {
                SendOp::CompareSwap { remote: Remote { addr, rkey: 6 }, compare, swap }
            }),
        ],
        qp_type in prop_oneof![Just(QpType::Rc), Just(QpType::Uc), Just(QpType::Ud)],
        (addr, length, lkey) in (any::<u64>(), 0u32..24, any::<u32>()),
        // 0: no SGE, 1 or 2 SGEs, 3: one inline segment.
        shape in 0usize..4,
        (qpn, qkey, ah) in (any::<u32>(), any::<u32>(), any::<u32>()),
        stale in any::<u8>(),
    ) {
        let sges = [Sge { addr, length, lkey }, Sge { addr: !addr, length: 7, lkey: !lkey }];
        let data = [3u8; 20];
        let segs: [&[u8]; 1] = [&data[..length.min(20) as usize]];
        let inline = shape == 3;
        let wr = SendWr {
            wr_id: 7,
            op,
            flags: SendFlags::SIGNALED,
            payload: if inline { Payload::Inline(&segs) } else { Payload::Sges(&sges[..shape]) },
            ud: (qp_type == QpType::Ud).then(|| UdDest::from_raw(ah, qpn, qkey)),
        };
        let (rc, ud) = (qp_type == QpType::Rc, qp_type == QpType::Ud);
        let must = shape != 0 && match op {
            SendOp::Send { .. } => true,
            SendOp::RdmaWrite { .. } => !ud,
            SendOp::RdmaRead { .. } => rc && !inline,
            SendOp::FetchAdd { remote, .. } | SendOp::CompareSwap { remote, .. } => {
                rc && shape == 1 && length >= 8 && remote.addr % 8 == 0
            }
            _ => false,
        };
        let ring = TestRing::new(9, 4);
        let mut sq = producer(&ring, SEND_WQE_LEN);
        let taken = encode_direct(&mut sq, qp_type, LIMITS, &wr).is_some();
        prop_assert_eq!(taken, must, "{:?} on {:?}", wr, qp_type);
        if !taken {
            prop_assert_eq!(sq.pending(), 0);
            return Ok(());
        }
        let (fast, general) = direct_and_general(stale, qp_type, &wr, encode_direct);
        prop_assert_eq!(fast, general);
    }
}

/// A full queue is refused as the general writer refuses it.
#[test]
fn a_full_queue_is_refused_alike() {
    let sges = [Sge {
        addr: 1,
        length: 8,
        lkey: 2,
    }];
    let wr = SendWr::new(1, SendOp::Send { imm: None }, Payload::Sges(&sges));
    let ring = TestRing::new(9, 4);
    let mut sq = producer(&ring, SEND_WQE_LEN);
    for _ in 0..3 {
        encode_common_send(&mut sq, QpType::Rc, LIMITS, &wr)
            .unwrap()
            .unwrap();
    }
    let fast = encode_common_send(&mut sq, QpType::Rc, LIMITS, &wr)
        .unwrap()
        .map_err(send_queue_full);
    let general = write_send_wqe(&mut sq, LIMITS, &wr);
    assert_eq!(fast, general);
    assert!(
        matches!(fast, Err(PostError::QueueFull { capacity: 3, .. })),
        "{fast:?}"
    );
}

/// Everything but a WRITE or SEND from one to `max_sge` SGEs (their total
/// a `u32`) or one inline segment within `max_inline`, or a READ into such
/// SGEs on RC, without a UD destination, on a QP whose slots take an SGE
/// goes the general way.
#[test]
fn other_requests_take_the_general_path() {
    let one = [Sge {
        addr: 1,
        length: 8,
        lkey: 2,
    }];
    let two = [one[0]; 2];
    let five = [one[0]; 5];
    let huge = Sge {
        length: u32::MAX,
        ..one[0]
    };
    let past_u32 = [huge, one[0]];
    let remote = Remote { addr: 8, rkey: 3 };
    let wr = |op, payload| SendWr::new(1, op, payload);
    let send = SendOp::Send { imm: None };
    let two_segments: &[&[u8]] = &[b"hi", b"there"];
    let too_long: &[&[u8]] = &[&[7u8; 65]];
    let ring = TestRing::new(9, 4);
    let mut sq = producer(&ring, SEND_WQE_LEN);
    let cases = [
        (
            wr(SendOp::RdmaRead { remote }, Payload::Sges(&one)),
            QpType::Uc,
            LIMITS,
        ),
        (
            wr(SendOp::FetchAdd { remote, add: 1 }, Payload::Sges(&one)),
            QpType::Rc,
            LIMITS,
        ),
        (wr(send, Payload::Sges(&five)), QpType::Rc, LIMITS),
        (wr(send, Payload::Sges(&past_u32)), QpType::Rc, LIMITS),
        (wr(send, Payload::Sges(&[])), QpType::Rc, LIMITS),
        (wr(send, Payload::Inline(two_segments)), QpType::Rc, LIMITS),
        (wr(send, Payload::Inline(too_long)), QpType::Rc, LIMITS),
        (
            wr(SendOp::RdmaRead { remote }, Payload::Inline(&[b"hi"])),
            QpType::Rc,
            LIMITS,
        ),
        (wr(send, Payload::Sges(&one)), QpType::Ud, LIMITS),
        (
            SendWr {
                ud: Some(UdDest::from_raw(1, 2, 3)),
                ..wr(send, Payload::Sges(&one))
            },
            QpType::Rc,
            LIMITS,
        ),
        (
            wr(send, Payload::Sges(&one)),
            QpType::Rc,
            SendLimits {
                max_sge: 0,
                ..LIMITS
            },
        ),
        (
            wr(send, Payload::Sges(&two)),
            QpType::Rc,
            SendLimits {
                max_sge: 1,
                ..LIMITS
            },
        ),
    ];
    for (wr, qp_type, limits) in cases {
        assert!(
            encode_common_send(&mut sq, qp_type, limits, &wr).is_none(),
            "{wr:?} on {qp_type:?}"
        );
    }
    assert_eq!(sq.pending(), 0, "nothing was reserved");
}
