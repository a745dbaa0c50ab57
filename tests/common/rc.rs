//! Data-path fixtures: the attribute sequence that takes an RC queue pair
//! from RESET to RTS (the values of rdma-core's tests and rc_pingpong, one
//! place for the device tests that connect QPs and the fake-kernel test
//! that checks the masks each step sends), two connected RC QPs on one
//! context, bounded waits for completions and the checks of their fields.

use std::time::{Duration, Instant};

use uverbs::cq::CompletionChannel;
use uverbs::qp::{Mtu, QpAttr, QpAttrMask, QpState};
use uverbs::wr::{
    Payload, RecvWr, Remote, SendFlags, SendOp, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion,
};
use uverbs::{
    uverbs_uapi as sys, AccessFlags, CompletionQueue, Context, MemoryRegion, ProtectionDomain,
    QpInit, QpType, QueuePair,
};

use uverbs::cm::{CmId, ConnParam, EventChannel, EventKind};
use uverbs::device::Gid;
use uverbs::qp::{RcConnect, RcPeer};
use uverbs::OwnedQp;

use super::cm::{client_on, cm_listener, cm_present, next_event};
use super::devices::{alloc_pd, driver, loud, on_each_device, Driver, HandleCounts};

/// RESET -> INIT -> RTR -> RTS towards `dest_qpn` over `dest` (a RoCE
/// destination from [`QpAttr::roce_dest`]: its GID and source GID index)
/// on `port`, each step with its name: the library's [`RcConnect`] steps.
pub fn rc_to_rts(
    access: AccessFlags,
    port: u8,
    mtu: Mtu,
    dest_qpn: u32,
    dest: sys::ib_uverbs_qp_dest,
) -> [(&'static str, QpAttr); 3] {
    let [init, (rtr_name, rtr), rts] = RcConnect::new(mtu)
        .access(access)
        .port(port)
        .gid_index(dest.sgid_index)
        .steps(RcPeer::new(dest_qpn, Gid::from_raw(dest.dgid)));
    // `dest` as given, whole (its hop limit, flow label, ...).
    [init, (rtr_name, rtr.av(dest)), rts]
}

/// What [`rc_to_rts`] sets that QUERY_QP reads back as set: the state, the
/// path (peer, MTU, port, address vector), both PSNs and the retry values.
pub const RC_PATH_ATTRS: QpAttrMask = QpAttrMask::STATE
    .union(QpAttrMask::DEST_QPN)
    .union(QpAttrMask::RQ_PSN)
    .union(QpAttrMask::SQ_PSN)
    .union(QpAttrMask::PATH_MTU)
    .union(QpAttrMask::PORT)
    .union(QpAttrMask::AV)
    .union(QpAttrMask::TIMEOUT)
    .union(QpAttrMask::RETRY_CNT)
    .union(QpAttrMask::RNR_RETRY);

/// RESET -> INIT on P_Key index 0 and [`PORT`]: what every QP type's
/// INIT needs; the caller adds the access flags (RC, UC) or Q_Key (UD).
pub fn to_init() -> QpAttr {
    QpAttr::new().state(QpState::Init).pkey_index(0).port(PORT)
}

/// RESET -> INIT (P_Key index 0, [`PORT`], `qkey`) -> RTR -> RTS
/// (`sq_psn`): the attribute sets the kernel's table asks of UD.
pub fn ud_to_rts(qp: &QueuePair, qkey: u32, sq_psn: u32) {
    let steps = [
        ("RESET->INIT", to_init().qkey(qkey)),
        ("INIT->RTR", QpAttr::new().state(QpState::Rtr)),
        ("RTR->RTS", QpAttr::new().state(QpState::Rts).sq_psn(sq_psn)),
    ];
    for (step, attr) in steps {
        modify(qp, &attr, step);
    }
}

/// Where `buf[at..]` is for a peer: its address, with `mr`'s rkey.
pub fn remote_in(buf: &[u8], at: usize, mr: &MemoryRegion) -> Remote {
    Remote {
        addr: buf.as_ptr() as u64 + at as u64,
        rkey: mr.rkey(),
    }
}

/// A new completion channel of `ctx`.
pub fn comp_channel(ctx: &Context, name: &str) -> CompletionChannel {
    ctx.create_comp_channel()
        .unwrap_or_else(|e| panic!("{name}: create_comp_channel: {e}"))
}

/// A `qp_type` QP in `pd` whose send and receive queues complete on `cq`.
pub fn qp_on(
    pd: &ProtectionDomain,
    qp_type: QpType,
    cq: &CompletionQueue,
    name: &str,
) -> QueuePair {
    pd.create_qp(&QpInit::new(qp_type, cq, cq))
        .unwrap_or_else(|e| panic!("{name}: create_qp {qp_type:?}: {e}"))
}

/// A UD QP in `pd` completing on `cq`, moved to RTS by [`ud_to_rts`].
pub fn ud_qp(
    pd: &ProtectionDomain,
    cq: &CompletionQueue,
    qkey: u32,
    sq_psn: u32,
    name: &str,
) -> QueuePair {
    let qp = qp_on(pd, QpType::Ud, cq, name);
    ud_to_rts(&qp, qkey, sq_psn);
    qp
}

/// A signalled UD SEND of `sges` to `dest`.
pub fn ud_send<'a>(
    wr_id: u64,
    imm: Option<u32>,
    sges: &'a [uverbs::wr::Sge],
    dest: uverbs::wr::UdDest<'a>,
) -> SendWr<'a> {
    SendWr::new(wr_id, SendOp::Send { imm }, Payload::Sges(sges)).ud(dest)
}

/// Posts receive `wr_id` on `qp` into all of `buf`, registered in `mr`
/// (`what` names it in a failure).
///
/// # Safety
///
/// `buf` stays mapped and registered, and is read only after this
/// receive's completion or once `qp` is destroyed.
pub unsafe fn post_recv_into(
    qp: &QueuePair,
    wr_id: u64,
    buf: &[u8],
    mr: &MemoryRegion,
    what: &str,
) {
    let sges = sge(buf.as_ptr() as u64, buf.len(), mr);
    // SAFETY: the caller's promise above: the device may write `buf` until
    // the completion, and nothing reads it before.
    unsafe { qp.post_recv(&[RecvWr::new(wr_id, &sges)]) }
        .unwrap_or_else(|e| panic!("{what}: post_recv {wr_id:#x}: {e}"));
}

/// `send(wr_id)`: a signalled UD SEND of `payload` from `qp` to `dest`,
/// posted and its completion awaited on `cq` (`what` names it).
///
/// # Safety
///
/// `payload`'s bytes stay mapped, registered and unwritten while the
/// returned sender is used (each SEND's completion is awaited in the
/// call, and `dest`'s AH outlives the sender).
pub unsafe fn ud_sender<'a>(
    qp: &'a QueuePair,
    cq: &'a CompletionQueue,
    payload: &'a [uverbs::wr::Sge],
    dest: uverbs::wr::UdDest<'a>,
    what: String,
) -> impl Fn(u64) + 'a {
    move |wr_id| {
        let what = what.as_str();
        // SAFETY: the caller keeps `payload` readable and unchanged; the
        // completion is awaited before the call returns.
        unsafe { qp.post_send(&[ud_send(wr_id, None, payload, dest)]) }
            .unwrap_or_else(|e| panic!("{what}: post_send {wr_id:#x}: {e}"));
        wait_checked(cq, what, WcOpcode::Send, qp, wr_id);
    }
}

/// The GID index used: on the VM's rxe0 (on dummy0, no IPv4) index 0 is
/// the RoCE v2 link-local GID.
pub const GID_INDEX: u32 = 0;
pub const PORT: u8 = 1;
pub const WAIT: Duration = Duration::from_secs(5);

/// Polls `cq` until `N` completions have arrived or [`WAIT`] passes;
/// fails with what was seen (too few, or more than `N`).
pub fn wait_n<const N: usize>(cq: &CompletionQueue, what: &str) -> [WorkCompletion; N] {
    let deadline = Instant::now() + WAIT;
    let mut wc = vec![WorkCompletion::default(); N + 8];
    let mut got = 0;
    loop {
        got += cq
            .poll(&mut wc[got..])
            .unwrap_or_else(|e| panic!("{what}: poll_cq: {e}"));
        if got > N {
            panic!(
                "{what}: {got} completions where {N} were expected: {:?}",
                &wc[..got]
            );
        }
        if got == N {
            // Give a stray extra completion a moment to show.
            std::thread::sleep(Duration::from_millis(20));
            let extra = cq.poll(&mut wc[got..]).unwrap();
            assert_eq!(
                extra,
                0,
                "{what}: more than {N} completions: {:?}",
                &wc[..got + extra]
            );
            return std::array::from_fn(|i| wc[i]);
        }
        if Instant::now() >= deadline {
            panic!(
                "{what}: {got} of {N} completions within {WAIT:?} on CQ {}: {:?}",
                cq.handle(),
                &wc[..got]
            );
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// [`wait_n`] of one.
pub fn wait_one(cq: &CompletionQueue, what: &str) -> WorkCompletion {
    let [wc] = wait_n::<1>(cq, what);
    wc
}

/// Fails loudly with the attributes that were sent.
pub fn modify(qp: &QueuePair, attr: &QpAttr, step: &str) {
    qp.modify(attr).unwrap_or_else(|e| {
        loud(&format!(
            "FAILED: modify_qp {step} of QP {} (qpn {}): {e}; sent mask {:?}: {attr:?}",
            qp.handle(),
            qp.qp_num(),
            attr.mask()
        ));
        panic!("modify_qp {step}: {e}")
    });
    assert_eq!(Some(qp.state()), attr.target_state(), "{step}");
}

/// The remote operations [`connect`] lets a peer make on the QP: WRITE
/// and READ.
pub const QP_ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ);
/// [`QP_ACCESS`] and atomics: the responder refuses an atomic on a QP
/// without `REMOTE_ATOMIC` (remote invalid request), whatever the MR allows.
pub const QP_ACCESS_ATOMIC: AccessFlags = QP_ACCESS.union(AccessFlags::REMOTE_ATOMIC);

/// RESET -> INIT -> RTR -> RTS towards `peer_qpn` at `gid`, with the
/// values of rdma-core's tests and rc_pingpong, granting [`QP_ACCESS`].
pub fn connect(qp: &QueuePair, peer_qpn: u32, gid: Gid, mtu: Mtu) {
    connect_with(qp, peer_qpn, gid, mtu, QP_ACCESS);
}

/// [`connect`] granting the peer `access` on this QP.
pub fn connect_with(qp: &QueuePair, peer_qpn: u32, gid: Gid, mtu: Mtu, access: AccessFlags) {
    let dest = QpAttr::roce_dest(gid, GID_INDEX as u8, 1, PORT);
    for (step, attr) in rc_to_rts(access, PORT, mtu, peer_qpn, dest) {
        modify(qp, &attr, step);
    }
}

/// Connects `a` and `b` to each other.
pub fn connect_pair(a: &QueuePair, b: &QueuePair, gid: Gid, mtu: Mtu) {
    connect_pair_with(a, b, gid, mtu, QP_ACCESS);
}

/// [`connect_pair`] granting `access` on both QPs.
pub fn connect_pair_with(a: &QueuePair, b: &QueuePair, gid: Gid, mtu: Mtu, access: AccessFlags) {
    connect_with(a, b.qp_num(), gid, mtu, access);
    connect_with(b, a.qp_num(), gid, mtu, access);
}

/// The port's GID at [`GID_INDEX`] and the path MTU to use.
pub fn roce_path(ctx: &Context, name: &str) -> (Gid, Mtu) {
    let gid = ctx
        .query_gid(PORT, GID_INDEX)
        .unwrap_or_else(|e| panic!("{name}: query_gid({PORT}, {GID_INDEX}): {e}"));
    (gid, mtu_for(ctx))
}

/// Two RC QPs in one new PD, each with a CQ of `cqe` entries of its own
/// for both queues; A's CQ reports to `channel_a` if given. Not connected
/// (from [`two_rc_qps`]), or connected (from [`connected_rc_pair`]): on
/// siw through the cm, whose ids live in `cm` as long as the fixture.
/// Fields drop in order: QPs, CQs, PD, then the cm ids and channels.
pub struct TwoQps {
    pub qp_a: QueuePair,
    pub qp_b: QueuePair,
    pub cq_a: CompletionQueue,
    pub cq_b: CompletionQueue,
    pub pd: ProtectionDomain,
    /// The cm connection of a siw pair (`None` on rxe: connected by hand).
    pub cm: Option<CmLink>,
}

impl TwoQps {
    /// True when the pair is a siw (iWARP) one, connected through the cm.
    pub fn iwarp(&self) -> bool {
        self.cm.is_some()
    }
}

/// The cm ids and channels of an iWARP connection made by [`cm_connect`]:
/// A is the client, B the server. Dropping it destroys the ids (which
/// tears the connection down) after the fields before it in a fixture.
pub struct CmLink {
    /// A's id.
    pub client: CmId,
    /// B's id (made by the connect request).
    pub server: CmId,
    pub listener: CmId,
    /// The client's channel.
    pub ch_a: EventChannel,
    /// The listener's and the server's channel.
    pub ch_b: EventChannel,
}

impl CmLink {
    /// B disconnects and A hears DISCONNECTED; then half a second for
    /// siw's own flush, which moves A's QP to ERR and flushes its send ring
    /// once, in siw's cm work, not ordered against the event. A send A
    /// posts after that stays in siw's ring, never completed.
    pub fn b_disconnects(&self, name: &str) {
        self.server
            .disconnect()
            .unwrap_or_else(|e| panic!("{name}: B disconnects: {e}"));
        let ev = super::cm::next_event(&self.ch_a, "A after B's disconnect");
        assert!(
            matches!(ev.kind, uverbs::cm::EventKind::Disconnected),
            "{name}: {ev:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

/// What [`cm_connect`] needs of a queue pair: a plain [`QueuePair`] or an
/// [`OwnedQp`].
pub trait CmQp {
    fn cm_modify(&self, attr: &QpAttr) -> Result<(), uverbs::Error>;
    fn cm_established(&self) -> Result<QpState, uverbs::Error>;
    fn cm_qpn(&self) -> u32;
}

/// Implements [`CmQp`] for a QP type (with its generics in brackets) by
/// its inherent `modify`, `established` and `qp_num`, which both QP types
/// have under the same names.
macro_rules! cm_qp_by_inherent_methods {
    ([$($generics:tt)*] $qp:ty) => {
        impl<$($generics)*> CmQp for $qp {
            fn cm_modify(&self, attr: &QpAttr) -> Result<(), uverbs::Error> {
                self.modify(attr)
            }
            fn cm_established(&self) -> Result<QpState, uverbs::Error> {
                self.established()
            }
            fn cm_qpn(&self) -> u32 {
                self.qp_num()
            }
        }
    };
}
cm_qp_by_inherent_methods!([] QueuePair);
cm_qp_by_inherent_methods!([M: uverbs::post::DeviceReadable] OwnedQp<M>);

/// Moves `qp` with exactly what the cm answers for `id` and `state` (on
/// iWARP the RTS answer has no state: PORT alone).
fn cm_step<Q: CmQp>(id: &CmId, qp: &Q, state: QpState, what: &str) {
    let attr = id
        .init_qp_attr(state)
        .unwrap_or_else(|e| panic!("{what}: init_qp_attr({state:?}): {e}"));
    qp.cm_modify(&attr)
        .unwrap_or_else(|e| panic!("{what}: modify {:?}: {e}", attr.mask()));
}

/// Connects two RESET RC QPs of `ctx` (siw: iWARP) to each other through
/// the rdma_cm over [`cm_addr`]: A is the client ([`cm_dial`]), B the
/// server ([`cm_accept`]), each moved only with what `INIT_QP_ATTR`
/// answers, then both sides hear ESTABLISHED and the kernel has moved both
/// QPs to RTS (learnt with `established`, so posting is allowed).
/// `None` (after [`cm_unavailable`]: a failure under
/// `UVERBS_REQUIRE_DEVICES`) when the environment has no rdma_cm or no
/// address. The cm's defaults grant the peer REMOTE_WRITE and REMOTE_READ
/// (responder resources 1).
pub fn cm_connect<A: CmQp, B: CmQp>(ctx: &Context, name: &str, a: &A, b: &B) -> Option<CmLink> {
    if !cm_present(name) {
        return None;
    }
    let (ch_b, listener, port) = cm_listener(4);
    let (ch_a, client) = cm_dial(ctx, name, port, a)?;
    let server = cm_accept(&ch_b, b, name);
    cm_established(&ch_a, &client, a, &format!("{name}: client"));
    cm_established(&ch_b, &server, b, &format!("{name}: server"));
    Some(CmLink {
        client,
        server,
        listener,
        ch_a,
        ch_b,
    })
}

/// The active half's start: a client id on a new channel, resolved to
/// [`cm_addr`]`(ctx):port` (asserted to land on `ctx`), `qp` moved to INIT
/// with the cm's answer, and the connect request sent. `None` (after
/// [`cm_unavailable`]) when the address is not there. Finish with
/// [`cm_established`].
pub fn cm_dial<Q: CmQp>(
    ctx: &Context,
    name: &str,
    port: u16,
    qp: &Q,
) -> Option<(EventChannel, CmId)> {
    let (ch, client) = client_on(ctx, name, port)?;
    cm_step(&client, qp, QpState::Init, "client RESET->INIT");
    let hello = ConnParam::new(qp.cm_qpn()).private_data(b"dp").unwrap();
    client
        .connect(&hello)
        .unwrap_or_else(|e| panic!("{name}: connect: {e}"));
    Some((ch, client))
}

/// The passive half: the next connect request on the listener's `ch`
/// (within the cm's bound), `qp` moved to INIT and RTR with the cm's
/// answers and given the stateless RTS answer, and the request accepted.
/// Returns the server's id; finish with [`cm_established`].
pub fn cm_accept<Q: CmQp>(ch: &EventChannel, qp: &Q, name: &str) -> CmId {
    let ev = next_event(ch, &format!("{name}: listener"));
    let EventKind::ConnectRequest { id: server, .. } = ev.kind else {
        panic!("{name}: a connect request expected: {:?}", ev.kind)
    };
    cm_step(&server, qp, QpState::Init, "server RESET->INIT");
    cm_step(&server, qp, QpState::Rtr, "server INIT->RTR");
    cm_step(&server, qp, QpState::Rts, "server RTR->RTS");
    server
        .accept(&ConnParam::new(qp.cm_qpn()))
        .unwrap_or_else(|e| panic!("{name}: accept: {e}"));
    server
}

/// Waits for `id`'s ESTABLISHED on `ch` and asserts that the kernel has
/// moved `qp` to RTS (iWARP: the kernel's CM does it).
pub fn cm_established<Q: CmQp>(ch: &EventChannel, id: &CmId, qp: &Q, what: &str) {
    let ev = next_event(ch, &format!("{what} established"));
    assert!(
        matches!(ev.kind, EventKind::Established(_)),
        "{what}: {:?}",
        ev.kind
    );
    assert_eq!(ev.id, id.handle(), "{what}: ESTABLISHED names the id");
    let state = qp
        .cm_established()
        .unwrap_or_else(|e| panic!("{what}: established: {e}"));
    assert_eq!(state, QpState::Rts, "{what}: the QP after ESTABLISHED");
}

/// The cm events each side of `link` gets within `within` (names with the
/// id's handle, e.g. `RDMA_CM_EVENT_DISCONNECTED@3`), stopping early once
/// both channels were quiet for 300 ms after at least one event.
pub fn cm_events(link: &CmLink, within: Duration) -> Vec<String> {
    let deadline = Instant::now() + within;
    let mut events = Vec::new();
    while Instant::now() < deadline {
        let mut any = false;
        for ch in [&link.ch_a, &link.ch_b] {
            if let Some(ev) = ch
                .wait_event(Duration::from_millis(150))
                .unwrap_or_else(|e| panic!("cm events: {e}"))
            {
                events.push(format!("{}@{}", ev.name(), ev.id));
                any = true;
            }
        }
        if !any && !events.is_empty() {
            break;
        }
    }
    events
}

/// Asserts that both ids of `link` were told DISCONNECTED among `events`.
pub fn assert_disconnected(link: &CmLink, events: &[String], what: &str) {
    for (id, side) in [
        (link.client.handle(), "client"),
        (link.server.handle(), "server"),
    ] {
        assert!(
            events.contains(&format!("RDMA_CM_EVENT_DISCONNECTED@{id}")),
            "{what}: the {side} was not disconnected: {events:?}"
        );
    }
}

pub fn two_rc_qps(
    ctx: &Context,
    name: &str,
    cqe: u32,
    channel_a: Option<&CompletionChannel>,
) -> TwoQps {
    two_rc_qps_init(ctx, name, cqe, channel_a, &|init| init)
}

/// [`two_rc_qps`] whose QPs are created with what `adjust` makes of the
/// default [`QpInit`] (capacities, inline size).
pub fn two_rc_qps_init(
    ctx: &Context,
    name: &str,
    cqe: u32,
    channel_a: Option<&CompletionChannel>,
    adjust: &dyn for<'c> Fn(QpInit<'c>) -> QpInit<'c>,
) -> TwoQps {
    let pd = alloc_pd(ctx);
    let cq = |channel| {
        ctx.create_cq(cqe, channel)
            .unwrap_or_else(|e| panic!("{name}: create_cq (channel {channel:?}): {e}"))
    };
    let cq_a = cq(channel_a);
    let cq_b = cq(None);
    let qp = |cq: &CompletionQueue, which: &str| {
        pd.create_qp(&adjust(QpInit::new(QpType::Rc, cq, cq)))
            .unwrap_or_else(|e| panic!("{name}: create_qp {which}: {e}"))
    };
    let qp_a = qp(&cq_a, "A");
    let qp_b = qp(&cq_b, "B");
    TwoQps {
        qp_a,
        qp_b,
        cq_a,
        cq_b,
        pd,
        cm: None,
    }
}

/// [`two_rc_qps`] connected to each other: on rxe by hand over
/// [`roce_path`], on siw through the cm ([`cm_connect`]; a siw QP reaches
/// RTS no other way).
pub fn connected_rc_pair(
    ctx: &Context,
    name: &str,
    cqe: u32,
    channel_a: Option<&CompletionChannel>,
) -> TwoQps {
    connected_rc_pair_with(ctx, name, cqe, channel_a, QP_ACCESS)
}

/// [`connected_rc_pair`] granting `access` on both QPs (e.g.
/// [`QP_ACCESS_ATOMIC`]). On siw the cm decides the access (its defaults:
/// REMOTE_WRITE, REMOTE_READ, and REMOTE_ATOMIC, which siw has no use for:
/// an atomic is refused before the ring).
pub fn connected_rc_pair_with(
    ctx: &Context,
    name: &str,
    cqe: u32,
    channel_a: Option<&CompletionChannel>,
    access: AccessFlags,
) -> TwoQps {
    connect_two(two_rc_qps(ctx, name, cqe, channel_a), ctx, name, access)
}

/// [`two_rc_qps_init`] connected as [`connected_rc_pair`] does.
pub fn connected_rc_pair_init(
    ctx: &Context,
    name: &str,
    cqe: u32,
    adjust: &dyn for<'c> Fn(QpInit<'c>) -> QpInit<'c>,
) -> TwoQps {
    let q = two_rc_qps_init(ctx, name, cqe, None, adjust);
    connect_two(q, ctx, name, QP_ACCESS)
}

/// Connects two RESET RC QPs of `ctx` to each other: on rxe by hand over
/// [`roce_path`] granting [`QP_ACCESS`] (`None`), on siw through the cm
/// (the link, to keep as long as the QPs: drop it after them).
pub fn connect_rc_qps(ctx: &Context, name: &str, a: &QueuePair, b: &QueuePair) -> Option<CmLink> {
    if driver(ctx) == Driver::Siw {
        return Some(
            cm_connect(ctx, name, a, b)
                .unwrap_or_else(|| panic!("{name}: no cm connection on siw")),
        );
    }
    let (gid, mtu) = roce_path(ctx, name);
    connect_pair(a, b, gid, mtu);
    None
}

/// Connects RESET QPs `a` and `b` (plain or owned) granting `access`: on
/// siw through the cm (the link comes back: keep it until the QPs are
/// gone), elsewhere by hand over RoCE.
pub fn connect_qps<A: CmQp, B: CmQp>(
    ctx: &Context,
    name: &str,
    a: &A,
    b: &B,
    access: AccessFlags,
) -> Option<CmLink> {
    if driver(ctx) == Driver::Siw {
        return Some(
            cm_connect(ctx, name, a, b)
                .unwrap_or_else(|| panic!("{name}: no cm connection on siw")),
        );
    }
    let (gid, mtu) = roce_path(ctx, name);
    let dest = QpAttr::roce_dest(gid, GID_INDEX as u8, 1, PORT);
    let both: [(&dyn CmQp, u32); 2] = [(a, b.cm_qpn()), (b, a.cm_qpn())];
    for (qp, peer) in both {
        for (step, attr) in rc_to_rts(access, PORT, mtu, peer, dest) {
            qp.cm_modify(&attr)
                .unwrap_or_else(|e| panic!("{name}: {step}: {e}"));
        }
    }
    None
}

/// Connects the RESET QPs of `q` to each other as [`connected_rc_pair`]
/// does (rxe: by hand granting `access`; siw: through the cm).
pub fn connect_two(mut q: TwoQps, ctx: &Context, name: &str, access: AccessFlags) -> TwoQps {
    if driver(ctx) == Driver::Siw {
        q.cm = Some(
            cm_connect(ctx, name, &q.qp_a, &q.qp_b)
                .unwrap_or_else(|| panic!("{name}: no cm connection on siw")),
        );
    } else {
        let (gid, mtu) = roce_path(ctx, name);
        connect_pair_with(&q.qp_a, &q.qp_b, gid, mtu, access);
    }
    q
}

/// The `wr_id` of the receives [`recover_pair`] posts to see each QP's
/// flush.
pub const RECOVERY_MARKER: u64 = 0x7ec0_7e7e_0000_0000;

/// Brings both QPs of `q`, connected with [`connect_pair_with`]`(…,
/// access)` and perhaps moved to ERR by the device (on RC an error
/// completion takes the requester there, and a refused request the
/// responder), back to RTS, connected to each other as before.
///
/// Wait for the completions of everything posted first: what is still in a
/// send queue when the QP is reset is dropped without a completion. Then:
/// a receive without SGEs is posted on each QP and each is moved to ERR
/// explicitly, so the device flushes that receive; seeing both flushes
/// proves that each QP's own move to ERR (which the device makes in its
/// responder task, possibly just after the requester saw the error) is
/// done and cannot land after the reset. Then RESET -> INIT -> RTR -> RTS
/// on both. Returns every other completion that arrived meanwhile, for the
/// caller to check.
pub fn recover_pair(
    q: &TwoQps,
    gid: Gid,
    mtu: Mtu,
    access: AccessFlags,
    what: &str,
) -> Vec<WorkCompletion> {
    let sides = [(&q.qp_a, &q.cq_a, "A"), (&q.qp_b, &q.cq_b, "B")];
    for (qp, _, side) in sides {
        let marker = RecvWr {
            wr_id: RECOVERY_MARKER,
            sges: &[],
        };
        // SAFETY: a receive without SGEs names no memory.
        unsafe { qp.post_recv(&[marker]) }
            .unwrap_or_else(|e| panic!("{what}: recovery: post_recv of the marker on {side}: {e}"));
        modify(qp, &QpAttr::new().state(QpState::Err), "->ERR (recovery)");
    }
    let mut others = Vec::new();
    let mut flushed = [false; 2];
    let mut wc = [WorkCompletion::default(); 16];
    let deadline = Instant::now() + WAIT;
    while flushed != [true; 2] {
        for (i, (qp, cq, side)) in sides.into_iter().enumerate() {
            let n = cq
                .poll(&mut wc)
                .unwrap_or_else(|e| panic!("{what}: recovery: poll_cq of {side}: {e}"));
            for c in &wc[..n] {
                if c.wr_id() == RECOVERY_MARKER && c.qp_num() == qp.qp_num() {
                    assert_eq!(
                        c.status(),
                        WcStatus::WrFlushErr,
                        "{what}: recovery: the marker receive on {side}: {c:?}"
                    );
                    flushed[i] = true;
                } else {
                    others.push(*c);
                }
            }
        }
        if Instant::now() >= deadline {
            panic!(
                "{what}: recovery: the marker receives flushed (A, B) = {flushed:?} within {WAIT:?}; also seen: {others:?}"
            );
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    for (qp, _, side) in sides {
        reset_for_init(qp, access, &format!("{what}: recovery of {side}"));
    }
    connect_pair_with(&q.qp_a, &q.qp_b, gid, mtu, access);
    others
}

/// Takes `qp` to RESET, making sure the kernel keeps it there: on rxe
/// (Linux 6.12) a QP just reset after an error has been seen to be back in
/// ERR a moment later (a task of the old connection finishing late calls
/// `rxe_qp_error`), so that the RESET -> INIT that follows fails with
/// `EINVAL`, about once in tens of thousands of WRITEs under live access
/// toggling. A RESET -> INIT probe that fails is retried from RESET a
/// bounded number of times (each said loudly); the probe's INIT is then
/// taken back to RESET, so the caller connects from RESET as usual.
pub fn reset_for_init(qp: &QueuePair, access: AccessFlags, what: &str) {
    let init = to_init().access_flags(access);
    for attempt in 1..=5 {
        modify(qp, &QpAttr::new().state(QpState::Reset), "->RESET");
        match qp.modify(&init) {
            Ok(()) => {
                modify(qp, &QpAttr::new().state(QpState::Reset), "INIT->RESET");
                return;
            }
            Err(e) if e.errno() == Some(uverbs::error::Errno::INVAL) && attempt < 5 => {
                loud(&format!(
                    "NOTE: {what}: RESET -> INIT refused ({e}): the kernel moved QP {} back \
                     to ERR after the reset; resetting again (attempt {attempt})",
                    qp.qp_num()
                ));
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("{what}: RESET -> INIT of QP {}: {e}", qp.qp_num()),
        }
    }
}

/// Polls `cq` until exactly `n` completions have arrived (appended to
/// `out`) or [`WAIT`] passes; fails if more than `n` come. Unlike
/// [`wait_n`] it does not linger for strays: for streams.
pub fn wait_exactly(cq: &CompletionQueue, n: usize, out: &mut Vec<WorkCompletion>, what: &str) {
    let deadline = Instant::now() + WAIT;
    let start = out.len();
    let mut wc = [WorkCompletion::default(); 32];
    let mut idle = 0u32;
    while out.len() - start < n {
        let got = cq
            .poll(&mut wc)
            .unwrap_or_else(|e| panic!("{what}: poll_cq: {e}"));
        out.extend_from_slice(&wc[..got]);
        if got > 0 {
            idle = 0;
            continue;
        }
        if Instant::now() >= deadline {
            panic!(
                "{what}: {} of {n} completions within {WAIT:?}: {:?}",
                out.len() - start,
                &out[start..]
            );
        }
        // Spin briefly (a completion is usually microseconds away), then
        // leave the CPU to the kernel's rxe tasks.
        idle += 1;
        if idle < 64 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    assert_eq!(
        out.len() - start,
        n,
        "{what}: more than {n} completions: {:?}",
        &out[start..]
    );
}

/// [`on_each_device`] for the devices with a data path (rxe and siw):
/// `body(name, ctx)`; any other is noted loudly and skipped. On siw the
/// rdma_cm must be there ([`cm_present`]: a failure under
/// `UVERBS_REQUIRE_DEVICES`): [`connected_rc_pair`] connects through it.
pub fn on_each_data_path_device(test: &str, mut body: impl FnMut(&str, &Context)) {
    on_each_data_path_device_counted(test, |name, ctx, _counts| body(name, ctx));
}

/// [`on_each_data_path_device`] whose body also gets the kernel's handle
/// counts of the context (checked again once it returns), to assert on
/// them on the way.
pub fn on_each_data_path_device_counted(
    test: &str,
    mut body: impl FnMut(&str, &Context, &HandleCounts),
) {
    on_each_device(test, |name, dut, counts| match driver(&dut) {
        Driver::Rxe => body(name, &dut, counts),
        Driver::Siw => {
            if cm_present(test) {
                body(name, &dut, counts)
            }
        }
        Driver::Other => loud(&format!("NOTE: {test}: {name}: not rxe or siw: skipped")),
    });
}

/// `body(name, ctx)` on siw alone, as [`on_each_data_path_device`] runs it
/// (the rdma_cm must be there); any other device is noted and skipped: for
/// the tests of a behaviour of siw's.
pub fn on_each_siw_device(test: &str, mut body: impl FnMut(&str, &Context)) {
    on_each_data_path_device(test, |name, ctx| {
        if driver(ctx) != Driver::Siw {
            return loud(&format!("NOTE: {test}: {name}: a siw case, skipped"));
        }
        body(name, ctx)
    });
}

/// `body(name, ctx, counts)` on each device with UD: rxe (siw is RC only);
/// the others are skipped with a note.
pub fn on_each_ud_device(test: &str, mut body: impl FnMut(&str, &Context, &HandleCounts)) {
    on_each_device(test, |name, dut, counts| {
        if driver(&dut) != Driver::Rxe {
            return loud(&format!("NOTE: {name}: UD needs rxe (siw is RC only)"));
        }
        body(name, &dut, counts)
    });
}

pub fn mtu_for(ctx: &Context) -> Mtu {
    let port = ctx
        .query_port(PORT)
        .unwrap_or_else(|e| panic!("{}: query_port: {e}", ctx.device_name()));
    // Stay at or below 1024.
    port.active_mtu()
        .map_or(Mtu::Mtu1024, |mtu| mtu.min(Mtu::Mtu1024))
}

/// A SEND of 64 bytes (`fill ^ i`) from `qp_a` into a receive posted on
/// `qp_b` (both in `pd`, connected to each other): both completions
/// checked, the bytes landed. `over` says over what, for the log.
pub fn send_64_lands(
    pd: &ProtectionDomain,
    (qp_a, cq_a): (&QueuePair, &CompletionQueue),
    (qp_b, cq_b): (&QueuePair, &CompletionQueue),
    fill: u8,
    name: &str,
    over: &str,
) {
    let mut a_buf = super::anon(4096);
    let mut b_buf = super::anon(4096);
    let a_mr = super::fresh_mr(pd, &mut a_buf, super::RW_READ);
    let b_mr = super::fresh_mr(pd, &mut b_buf, super::RW_READ);
    for (i, byte) in a_buf[..64].iter_mut().enumerate() {
        *byte = fill ^ i as u8;
    }
    let recv_sge = sge(b_buf.as_ptr() as u64, 64, &b_mr);
    // SAFETY: b_buf[..64] stays mapped and registered and is not touched
    // until the receive's completion is polled below (or the test panics,
    // and the QPs go first).
    unsafe {
        qp_b.post_recv(&[RecvWr {
            wr_id: 0xb0b,
            sges: &recv_sge,
        }])
    }
    .unwrap_or_else(|e| panic!("{name}: post_recv: {e}"));
    let send_sge = sge(a_buf.as_ptr() as u64, 64, &a_mr);
    let send = signalled(0xa5e, SendOp::Send { imm: None }, &send_sge);
    // SAFETY: a_buf[..64] is only read by the device until the completion.
    unsafe { qp_a.post_send(&[send]) }.unwrap_or_else(|e| panic!("{name}: post_send: {e}"));
    wait_checked(cq_a, "SEND, client", WcOpcode::Send, qp_a, 0xa5e);
    let wc = wait_checked(cq_b, "SEND, server", WcOpcode::Recv, qp_b, 0xb0b);
    assert_eq!(wc.byte_len(), 64);
    assert_eq!(&b_buf[..64], &a_buf[..64], "{name}: the SEND's bytes");
    loud(&format!("{name}: SEND of 64 B over {over} landed"));
}

/// Checks a successful completion of `opcode` for `wr_id` on `qp`.
pub fn check(wc: &WorkCompletion, what: &str, opcode: WcOpcode, qp: &QueuePair, wr_id: u64) {
    loud(&format!("{what}: completion {wc:?}"));
    assert_eq!(wc.status(), WcStatus::Success, "{what}: {wc:?}");
    assert_eq!(wc.opcode(), Some(opcode), "{what}: {wc:?}");
    assert_eq!(wc.qp_num(), qp.qp_num(), "{what}: {wc:?}");
    assert_eq!(wc.wr_id(), wr_id, "{what}: {wc:?}");
}

/// [`wait_one`] on `cq`, then [`check`].
pub fn wait_checked(
    cq: &CompletionQueue,
    what: &str,
    opcode: WcOpcode,
    qp: &QueuePair,
    wr_id: u64,
) -> WorkCompletion {
    let wc = wait_one(cq, what);
    check(&wc, what, opcode, qp, wr_id);
    wc
}

/// Fails with `what` and what came if `cq` holds a completion now.
pub fn assert_no_completion(cq: &CompletionQueue, what: &str) {
    let mut more = [WorkCompletion::default(); 4];
    let n = cq.poll(&mut more).unwrap();
    assert_eq!(n, 0, "{what}: {:?}", &more[..n]);
}

/// One SGE of `length` bytes at `addr` in `mr`.
pub fn sge(addr: u64, length: usize, mr: &MemoryRegion) -> [Sge; 1] {
    [Sge {
        addr,
        length: length as u32,
        lkey: mr.lkey(),
    }]
}

/// A signalled RDMA WRITE of `sges` to `remote`.
pub fn signalled_write(wr_id: u64, sges: &[Sge], remote: Remote) -> SendWr<'_> {
    signalled(wr_id, SendOp::RdmaWrite { remote, imm: None }, sges)
}

/// One signalled WRITE per SGE, wr_ids from `first`: WRITE `i` of
/// `sges[i]` to `addr + i * stride` with `rkey` (a window of slots).
pub fn signalled_writes(
    first: u64,
    sges: &[[Sge; 1]],
    addr: u64,
    stride: usize,
    rkey: u32,
) -> Vec<SendWr<'_>> {
    sges.iter()
        .enumerate()
        .map(|(i, sge)| {
            let remote = Remote {
                addr: addr + (i * stride) as u64,
                rkey,
            };
            signalled_write(first + i as u64, sge, remote)
        })
        .collect()
}

/// A signalled `op` of `sges`.
pub fn signalled(wr_id: u64, op: SendOp, sges: &[Sge]) -> SendWr<'_> {
    SendWr::new(wr_id, op, Payload::Sges(sges))
}

/// [`on_each_data_path_device_counted`] for a test of `qp_type` traffic:
/// on siw, which creates RC QPs only, [`assert_siw_refuses_qp_type`]
/// instead of `body` (the handle counts are checked after either).
pub fn on_each_device_for_qp_type(
    test: &str,
    qp_type: QpType,
    mut body: impl FnMut(&str, &Context),
) {
    on_each_data_path_device_counted(test, |name, ctx, counts| {
        if driver(ctx) == Driver::Siw {
            return assert_siw_refuses_qp_type(ctx, name, counts, qp_type);
        }
        body(name, ctx)
    });
}

/// siw creates RC QPs only (`siw_create_qp` answers `EOPNOTSUPP` to any
/// other type; the crate refuses before the system call with the same
/// errno): asserts that creating a `qp_type` QP in a new PD on `ctx` fails
/// so, typed (`Error::Os` naming `CreateQp`), that no QP is left in the
/// kernel, and that an RC QP on the same CQ is created (the refusal is of
/// the type, not of the device).
pub fn assert_siw_refuses_qp_type(
    ctx: &Context,
    name: &str,
    counts: &HandleCounts,
    qp_type: QpType,
) {
    assert_eq!(driver(ctx), Driver::Siw, "{name}: for siw only");
    let pd = alloc_pd(ctx);
    let cq = ctx
        .create_cq(8, None)
        .unwrap_or_else(|e| panic!("{name}: create_cq: {e}"));
    let err = pd
        .create_qp(&QpInit::new(qp_type, &cq, &cq))
        .map(|qp| qp.qp_num())
        .expect_err("siw created a QP that is not RC");
    assert!(
        matches!(
            err,
            uverbs::Error::Os {
                op: uverbs::error::Op::CreateQp,
                ..
            }
        ),
        "{name}: {qp_type:?}: {err}"
    );
    assert_eq!(
        err.errno(),
        Some(uverbs::error::Errno::OPNOTSUPP),
        "{name}: {err}"
    );
    counts.assert_extra_cq_qp(1, 0, &format!("{name}: after the refused {qp_type:?} QP"));
    let rc = pd
        .create_qp(&QpInit::new(QpType::Rc, &cq, &cq))
        .unwrap_or_else(|e| panic!("{name}: an RC QP beside the refused {qp_type:?}: {e}"));
    counts.assert_extra_cq_qp(1, 1, &format!("{name}: with the RC QP"));
    loud(&format!(
        "NOTE: {name}: siw is RC only: a {qp_type:?} QP is refused ({err}); \
         the {qp_type:?} traffic of this test runs on rxe only"
    ));
    drop((rc, cq, pd));
}

/// The iWARP way back after an error (there is no RESET -> RTS by hand on
/// siw, and a siw connection that failed is gone): new CQs of `cqe`
/// entries and new RC QPs in `q`'s PD (so its MRs serve them), connected
/// through a new cm connection; then the old QPs, CQs and cm ids are
/// dropped, in that order.
pub fn cm_reconnect(q: &mut TwoQps, ctx: &Context, name: &str, cqe: u32) {
    let cq = |which: &str| {
        ctx.create_cq(cqe, None)
            .unwrap_or_else(|e| panic!("{name}: reconnect: create_cq {which}: {e}"))
    };
    let (cq_a, cq_b) = (cq("A"), cq("B"));
    let qp = |cq: &CompletionQueue, which: &str| {
        q.pd.create_qp(&QpInit::new(QpType::Rc, cq, cq))
            .unwrap_or_else(|e| panic!("{name}: reconnect: create_qp {which}: {e}"))
    };
    let (qp_a, qp_b) = (qp(&cq_a, "A"), qp(&cq_b, "B"));
    let link = cm_connect(ctx, name, &qp_a, &qp_b)
        .unwrap_or_else(|| panic!("{name}: reconnect: no cm connection"));
    let old_qps = (
        std::mem::replace(&mut q.qp_a, qp_a),
        std::mem::replace(&mut q.qp_b, qp_b),
    );
    let old_cqs = (
        std::mem::replace(&mut q.cq_a, cq_a),
        std::mem::replace(&mut q.cq_b, cq_b),
    );
    let old_link = q.cm.replace(link);
    drop(old_qps);
    drop(old_cqs);
    drop(old_link);
    loud(&format!(
        "{name}: reconnected through the cm: QPs {} <-> {}",
        q.qp_a.qp_num(),
        q.qp_b.qp_num()
    ));
}
