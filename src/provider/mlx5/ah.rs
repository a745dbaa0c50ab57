//! mlx5's address vector (`struct mlx5_wqe_av`, 48 bytes): what a UD send
//! WQE carries to name its destination, built from an address handle's
//! attributes as libmlx5 44's `mlx5_create_ah` builds it. On InfiniBand it
//! needs no kernel object; on RoCE the kernel's CREATE_AH answers the
//! destination MAC (`mlx5_ib_create_ah_resp.dmac`).

use uverbs_uapi as sys;

/// Bytes of an address vector (the datagram segment of a UD WQE).
pub(crate) const AV_LEN: usize = 48;

/// The lowest UDP source port of RoCE v2 (`IB_ROCE_UDP_ENCAP_VALID_PORT_MIN`).
const ROCE_SPORT_MIN: u16 = 0xc000;

/// What an Ethernet (RoCE) address vector needs beyond the attributes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Eth {
    /// The destination MAC the kernel resolved.
    pub(crate) dmac: [u8; 6],
    /// The source GID is a RoCE v2 one (UDP encapsulated).
    pub(crate) roce_v2: bool,
}

/// `ib_to_mlx5_rate_table`: an `IBV_RATE_*` as the device's rate code.
fn rate(static_rate: u8) -> u8 {
    const TABLE: [u8; 23] = [
        0, 0, 7, 8, 9, 10, 11, 12, 13, 14, 15, 11, 13, 15, 0, 9, 15, 0, 0, 9, 13, 0, 0,
    ];
    TABLE.get(usize::from(static_rate)).copied().unwrap_or(0)
}

/// The UDP source port of a RoCE v2 AH: from the flow label
/// (`ibv_flow_label_to_udp_sport`), or, without one, any port of the
/// range (libmlx5 draws one at random).
fn udp_sport(flow_label: u32) -> u16 {
    let fl = flow_label & 0xf_ffff;
    if fl != 0 {
        let (low, high) = (fl & 0x3fff, fl & 0xf_c000);
        return ((low ^ (high >> 14)) as u16) | ROCE_SPORT_MIN;
    }
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(fl);
    (h.finish() as u16) | ROCE_SPORT_MIN
}

/// The address vector of `attr` (the kernel's form of the AH's
/// attributes): on InfiniBand the LID, path bits, SL and, with a GRH, the
/// GRH fields marked present; on RoCE (`eth`) the MAC, the SL in bits 1-3,
/// the UDP source port (v2) and the GRH, whose bit stays clear.
pub(crate) fn address_vector(attr: &sys::ib_uverbs_ah_attr, eth: Option<Eth>) -> [u8; AV_LEN] {
    let mut av = [0u8; AV_LEN];
    let rate = rate(attr.static_rate);
    let grh_bit: u32 = match eth {
        Some(e) => {
            if e.roce_v2 {
                av[14..16].copy_from_slice(&udp_sport(attr.grh.flow_label).to_be_bytes());
            }
            av[12] = (rate << 4) | ((attr.sl & 0x7) << 1);
            av[20..26].copy_from_slice(&e.dmac);
            0
        }
        None => {
            av[13] = attr.src_path_bits & 0x7f;
            av[14..16].copy_from_slice(&attr.dlid.to_be_bytes());
            av[12] = (rate << 4) | (attr.sl & 0xf);
            1
        }
    };
    if attr.is_global != 0 {
        av[26] = attr.grh.traffic_class;
        av[27] = attr.grh.hop_limit;
        let word = (grh_bit << 30)
            | (u32::from(attr.grh.sgid_index) << 20)
            | (attr.grh.flow_label & 0xf_ffff);
        av[28..32].copy_from_slice(&word.to_be_bytes());
        av[32..48].copy_from_slice(&attr.grh.dgid);
    }
    av
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn infiniband_and_roce_vectors() {
        let mut attr = sys::ib_uverbs_ah_attr {
            dlid: 0x1234,
            sl: 0x1b,
            src_path_bits: 0x85,
            static_rate: 3,
            port_num: 1,
            ..Default::default()
        };
        let av = address_vector(&attr, None);
        assert_eq!((av[12], av[13]), (8 << 4 | 0xb, 0x05));
        assert_eq!(&av[14..16], &[0x12, 0x34]);
        assert!(av[26..].iter().all(|&b| b == 0), "no GRH");
        attr.is_global = 1;
        attr.grh.sgid_index = 2;
        attr.grh.flow_label = 0x1_2345;
        attr.grh.hop_limit = 64;
        attr.grh.dgid = [7; 16];
        let av = address_vector(&attr, None);
        assert_eq!(
            u32::from_be_bytes(av[28..32].try_into().unwrap()),
            1 << 30 | 2 << 20 | 0x1_2345
        );
        let eth = Eth {
            dmac: [1, 2, 3, 4, 5, 6],
            roce_v2: true,
        };
        let av = address_vector(&attr, Some(eth));
        assert_eq!(av[12], 8 << 4 | (0x3 << 1), "SL in bits 1-3 on RoCE");
        assert_eq!(&av[20..26], &[1, 2, 3, 4, 5, 6]);
        assert_eq!(u32::from_be_bytes(av[28..32].try_into().unwrap()) >> 30, 0);
        // 0x12345: low 0x2345 ^ (0x10000 >> 14 = 4) = 0x2341, | 0xc000.
        assert_eq!(u16::from_be_bytes([av[14], av[15]]), 0xe341);
    }
}
