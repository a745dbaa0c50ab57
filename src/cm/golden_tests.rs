//! Golden bytes: every ucma command's `write()` frame, with the expected
//! bytes written out field by field from `rdma_user_cm.h`'s layouts (the
//! offsets in the comments are the C ones, checked by `uapi/tests/c_layout.rs`).
//! An encoder change that breaks the ABI fails here, on any machine.

use super::command::*;
use crate::command::QpState;
use crate::golden_bytes::Bytes;

/// The ucma framing's pieces, on the shared golden-bytes builder.
impl Bytes {
    /// rdma_ucm_cmd_hdr: cmd, in (bytes), out (bytes).
    fn hdr(cmd: u32, in_: u16, out: u16) -> Self {
        Bytes::default().u32(cmd).u16(in_).u16(out)
    }
    /// sockaddr_in: family 2, port (be), address, 8 zero bytes.
    fn sin(self, ip: [u8; 4], port: u16) -> Self {
        self.u16(2).be16(port).raw(&ip).zeros(8)
    }
    /// sockaddr_in6: family 10, port (be), flowinfo (be), address, scope id.
    fn sin6(self, ip: [u8; 16], port: u16, scope: u32) -> Self {
        self.u16(10).be16(port).u32(0).raw(&ip).u32(scope)
    }
}

const RESP: u64 = 0x7f00_1122_3344_5500;
const ID: u32 = 0x0102_0304;
const V4: [u8; 4] = [192, 0, 2, 1];

fn frame<C: CmCommand>(cmd: &C) -> Vec<u8> {
    encode(cmd, RESP).unwrap()
}

#[test]
fn create_id_tcp_and_udp() {
    // {uid @0, response @8, ps @16, qp_type @18, reserved[5] @19}: 24 bytes.
    let tcp = Bytes::hdr(0, 24, 4)
        .u64(0xdead_beef)
        .u64(RESP)
        .u16(0x0106) // RDMA_PS_TCP
        .u8(2) // IB_UVERBS_QPT_RC
        .zeros(5);
    assert_eq!(frame(&CreateId::new(0xdead_beef, PortSpace::Tcp)), tcp.0);
    let udp = Bytes::hdr(0, 24, 4)
        .u64(7)
        .u64(RESP)
        .u16(0x0111) // RDMA_PS_UDP
        .u8(4) // IB_UVERBS_QPT_UD
        .zeros(5);
    assert_eq!(frame(&CreateId::new(7, PortSpace::Udp)), udp.0);
}

#[test]
fn destroy_id() {
    // {response @0, id @8, reserved @12}; out = destroy_id_resp (4).
    let b = Bytes::hdr(1, 16, 4).u64(RESP).u32(ID).u32(0);
    assert_eq!(frame(&DestroyId::new(ID)), b.0);
}

#[test]
fn bind_ip_v4_and_v6() {
    // {response @0 (unused), addr: sockaddr_in6 @8, id @36}: 40 bytes, no out.
    let b = Bytes::hdr(2, 40, 0)
        .u64(0)
        .sin(V4, 7471)
        .zeros(28 - 16)
        .u32(ID);
    assert_eq!(
        frame(&BindIp::new(ID, "192.0.2.1:7471".parse().unwrap())),
        b.0
    );
    let mut v6 = [0u8; 16];
    v6[0] = 0xfe;
    v6[1] = 0x80;
    v6[15] = 1;
    let b = Bytes::hdr(2, 40, 0).u64(0).sin6(v6, 9, 3).u32(ID);
    let addr = "[fe80::1%3]:9".parse().unwrap();
    assert_eq!(frame(&BindIp::new(ID, addr)), b.0);
}

#[test]
fn bind() {
    // {id @0, addr_size @4, reserved @6, addr: sockaddr_storage @8}: 136.
    let b = Bytes::hdr(20, 136, 0)
        .u32(ID)
        .u16(16)
        .u16(0)
        .sin(V4, 7471)
        .zeros(128 - 16);
    assert_eq!(
        frame(&Bind::new(ID, "192.0.2.1:7471".parse().unwrap())),
        b.0
    );
}

#[test]
fn join_and_leave_mcast() {
    // {response @0, uid @8, id @16, addr_size @20, join_flags @22,
    // addr: sockaddr_storage @24}: 152; out = create_id_resp (4).
    // The fixed part: header, response, uid, id, addr_size, join_flags.
    let head = |uid: u64, addr_size: u16, join_flags: u16| {
        Bytes::hdr(22, 152, 4)
            .u64(RESP)
            .u64(uid)
            .u32(ID)
            .u16(addr_size)
            .u16(join_flags)
    };
    // RDMA_MC_JOIN_FLAG_FULLMEMBER (0), an IPv4 group.
    let full = head(0x55, 16, 0).sin([239, 1, 2, 3], 0).zeros(128 - 16);
    let addr = "239.1.2.3:0".parse().unwrap();
    assert_eq!(frame(&JoinMcast::new(ID, 0x55, addr)), full.0);
    // RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER (1), an IPv6 group.
    let ip6 = [
        0xff, 0x12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x75, 0x76, 0x62,
    ];
    let send_only = head(0x56, 28, 1).sin6(ip6, 0, 0).zeros(128 - 28);
    let addr6 = std::net::SocketAddr::from((ip6, 0));
    assert_eq!(
        frame(&JoinMcast::new(ID, 0x56, addr6).send_only()),
        send_only.0
    );
    // LEAVE_MCAST reuses rdma_ucm_destroy_id: {response @0, id @8,
    // reserved @12}; out = destroy_id_resp (4).
    let leave = Bytes::hdr(17, 16, 4).u64(RESP).u32(ID).u32(0);
    assert_eq!(frame(&LeaveMcast::new(ID)), leave.0);
}

#[test]
fn resolve_ip() {
    // {src_addr @0, dst_addr @28 (sockaddr_in6 each), id @56, timeout_ms @60}.
    let dst = "192.0.2.1:7471".parse().unwrap();
    let b = Bytes::hdr(3, 64, 0)
        .zeros(28) // no source: family 0
        .sin(V4, 7471)
        .zeros(12)
        .u32(ID)
        .u32(2000);
    assert_eq!(frame(&ResolveIp::new(ID, dst, 2000)), b.0);
    let b = Bytes::hdr(3, 64, 0)
        .sin([192, 0, 2, 2], 0)
        .zeros(12)
        .sin(V4, 7471)
        .zeros(12)
        .u32(ID)
        .u32(2000);
    let cmd = ResolveIp::new(ID, dst, 2000).src("192.0.2.2:0".parse().unwrap());
    assert_eq!(frame(&cmd), b.0);
}

#[test]
fn resolve_addr() {
    // {id @0, timeout_ms @4, src_size @8, dst_size @10, reserved @12,
    //  src_addr @16, dst_addr @144}: 272.
    let dst = "192.0.2.1:7471".parse().unwrap();
    let b = Bytes::hdr(21, 272, 0)
        .u32(ID)
        .u32(500)
        .u16(0)
        .u16(16)
        .u32(0)
        .zeros(128)
        .sin(V4, 7471)
        .zeros(112);
    assert_eq!(frame(&ResolveAddr::new(ID, dst, 500)), b.0);
    let b = Bytes::hdr(21, 272, 0)
        .u32(ID)
        .u32(500)
        .u16(16)
        .u16(16)
        .u32(0)
        .sin([192, 0, 2, 2], 0)
        .zeros(112)
        .sin(V4, 7471)
        .zeros(112);
    let cmd = ResolveAddr::new(ID, dst, 500).src("192.0.2.2:0".parse().unwrap());
    assert_eq!(frame(&cmd), b.0);
}

#[test]
fn resolve_route_listen_disconnect_notify() {
    assert_eq!(
        frame(&ResolveRoute::new(ID, 2000)),
        Bytes::hdr(4, 8, 0).u32(ID).u32(2000).0
    );
    assert_eq!(
        frame(&Listen::new(ID, 16)),
        Bytes::hdr(7, 8, 0).u32(ID).u32(16).0
    );
    assert_eq!(frame(&Disconnect::new(ID)), Bytes::hdr(10, 4, 0).u32(ID).0);
    assert_eq!(
        frame(&Notify::new(ID, 9)),
        Bytes::hdr(15, 8, 0).u32(ID).u32(9).0
    );
}

#[test]
fn query_route_and_queries() {
    // {response @0, id @8, option @12}; out is the answer's size.
    assert_eq!(
        frame(&QueryRoute::new(ID)),
        Bytes::hdr(5, 16, 208).u64(RESP).u32(ID).u32(0).0
    );
    assert_eq!(
        frame(&Query::new(ID, QueryOption::Addr)),
        Bytes::hdr(19, 16, 280).u64(RESP).u32(ID).u32(0).0
    );
    assert_eq!(
        frame(&Query::new(ID, QueryOption::Gid)),
        Bytes::hdr(19, 16, 280).u64(RESP).u32(ID).u32(2).0
    );
    // Path: the 8-byte head and two 72-byte ib_path_rec_data.
    assert_eq!(
        frame(&QueryPath::new(ID)),
        Bytes::hdr(19, 16, 8 + 2 * 72).u64(RESP).u32(ID).u32(1).0
    );
}

/// rdma_ucm_conn_param: {qp_num @0, qkey @4, private_data[256] @8,
/// private_data_len @264, srq, responder_resources, initiator_depth,
/// flow_control, retry_count, rnr_retry_count, valid @271}: 272 bytes.
fn conn_param(b: Bytes, qpn: u32, data: &[u8], tail: [u8; 8]) -> Bytes {
    b.u32(qpn)
        .u32(0)
        .raw(data)
        .zeros(256 - data.len())
        .raw(&tail)
}

#[test]
fn connect() {
    let param = ConnParam::new(0x11)
        .responder_resources(4)
        .initiator_depth(2)
        .retry_count(5)
        .rnr_retry_count(6)
        .flow_control(true)
        .private_data(b"hello")
        .unwrap();
    // {conn_param @0, id @272, reserved @276, ece @280}: 288.
    let b = conn_param(
        Bytes::hdr(6, 288, 0),
        0x11,
        b"hello",
        [5, 0, 4, 2, 1, 5, 6, 1],
    )
    .u32(ID)
    .u32(0)
    .u64(0);
    assert_eq!(frame(&Connect::new(ID, param)), b.0);
}

#[test]
fn accept_and_establish() {
    let param = ConnParam::new(0x22).srq(true);
    // {uid @0, conn_param @8, id @280, reserved @284, ece @288}: 296.
    let b = conn_param(
        Bytes::hdr(8, 296, 0).u64(99),
        0x22,
        &[],
        [0, 1, 1, 1, 0, 7, 7, 1],
    )
    .u32(ID)
    .u32(0)
    .u64(0);
    assert_eq!(frame(&Accept::new(ID, 99, param)), b.0);
    // The RTU: uid 0, conn_param all zero (valid 0).
    let b = Bytes::hdr(8, 296, 0)
        .u64(0)
        .zeros(272)
        .u32(ID)
        .u32(0)
        .u64(0);
    assert_eq!(frame(&Accept::establish(ID)), b.0);
}

#[test]
fn reject() {
    // {id @0, private_data_len @4, reason @5, reserved[2] @6, private_data @8}: 264.
    let b = Bytes::hdr(9, 264, 0)
        .u32(ID)
        .u8(3)
        .u8(28)
        .u16(0)
        .raw(b"no!")
        .zeros(253);
    let cmd = Reject::new(ID, RejectReason::ConsumerDefined, b"no!").unwrap();
    assert_eq!(frame(&cmd), b.0);
    let cmd = Reject::new(ID, RejectReason::VendorOptionNotSupported, &[]).unwrap();
    assert_eq!(frame(&cmd)[13], 35);
    // Longer than a REJ carries: refused before any bytes exist.
    let err = Reject::new(ID, RejectReason::ConsumerDefined, &[0; 149]).unwrap_err();
    assert_eq!((err.len, err.max), (149, 148));
}

#[test]
fn init_qp_attr() {
    // {response @0, id @8, qp_state @12}; out = ib_uverbs_qp_attr (144).
    for (state, raw) in [(QpState::Init, 1), (QpState::Rtr, 2), (QpState::Rts, 3)] {
        let b = Bytes::hdr(11, 16, 144).u64(RESP).u32(ID).u32(raw);
        assert_eq!(frame(&InitQpAttr::new(ID, state)), b.0);
    }
}

#[test]
fn get_event() {
    // {response}; out = rdma_ucm_event_resp (336).
    assert_eq!(frame(&GetEvent), Bytes::hdr(12, 8, 336).u64(RESP).0);
}

#[test]
fn set_option_points_at_its_value() {
    let cmd = SetOption::new(ID, CmOption::ReuseAddr(true));
    let ptr = cmd.value().as_ptr() as u64;
    // {optval @0, id @8, level @12, optname @16, optlen @20}: 24.
    let b = Bytes::hdr(14, 24, 0).u64(ptr).u32(ID).u32(0).u32(1).u32(4);
    assert_eq!(frame(&cmd), b.0);
    assert_eq!(cmd.value(), 1i32.to_ne_bytes());
    let cmd = SetOption::new(ID, CmOption::Tos(0x20));
    let ptr = cmd.value().as_ptr() as u64;
    let b = Bytes::hdr(14, 24, 0).u64(ptr).u32(ID).u32(0).u32(0).u32(1);
    assert_eq!(frame(&cmd), b.0);
    assert_eq!(cmd.value(), [0x20]);
}

#[test]
fn conn_param_private_data_limits() {
    let long = [7u8; 256];
    let err = ConnParam::new(1).private_data(&long).unwrap_err();
    assert_eq!((err.len, err.max), (256, 255));
    let p = ConnParam::new(1).private_data(&long[..56]).unwrap();
    assert!(p.check(MAX_CONNECT_PRIVATE_DATA).is_ok());
    let p = ConnParam::new(1).private_data(&long[..57]).unwrap();
    assert!(p.check(MAX_CONNECT_PRIVATE_DATA).is_err());
    assert!(p.check(MAX_ACCEPT_PRIVATE_DATA).is_ok());
    assert!(ConnParam::new(1).retry_count(8).check(56).is_err());
    // Shrinking the private data clears the old bytes.
    let p = ConnParam::new(1)
        .private_data(&long[..10])
        .unwrap()
        .private_data(b"ab")
        .unwrap();
    assert_eq!(p.raw().private_data[..4], [b'a', b'b', 0, 0]);
}

#[test]
fn socket_addresses_round_trip() {
    for text in ["192.0.2.1:7471", "[fe80::1%3]:9", "[2001:db8::5]:0"] {
        let addr: std::net::SocketAddr = text.parse().unwrap();
        let in6 = sockaddr_in6_of(&addr);
        assert_eq!(
            socket_addr_from(zerocopy::IntoBytes::as_bytes(&in6)),
            Some(addr)
        );
        let (storage, size) = sockaddr_storage_of(&addr);
        let bytes = zerocopy::IntoBytes::as_bytes(&storage);
        assert_eq!(socket_addr_from(&bytes[..usize::from(size)]), Some(addr));
    }
    assert_eq!(socket_addr_from(&[0; 28]), None, "family 0: not set");
    assert_eq!(
        socket_addr_from(&[27, 0, 0, 0]),
        None,
        "AF_IB is no IP address"
    );
}
