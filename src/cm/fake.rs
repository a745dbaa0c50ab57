//! An in-process model of the kernel's rdma_cm, for host tests: it reads
//! each `write()` frame like `ucma_write` (header checks, the request
//! struct, the response pointer), records it, and answers from a small
//! loopback fabric: ids on any [`EventChannel`](super::EventChannel) built
//! on the same `FakeCm` reach each other's listeners.
//!
//! What it models (and how it differs from the kernel):
//! * address resolution succeeds for the addresses given to
//!   [`FakeCm::with_local_addrs`] (else `ADDR_ERROR`, status `-ENETUNREACH`),
//!   and the id then has a device (node GUID [`FakeCm::NODE_GUID`], port 1);
//! * `CONNECT` to an address nobody listens on is `REJECTED` with reason 8
//!   (the IB CM's "invalid service id"); otherwise the listener gets a
//!   `CONNECT_REQUEST` whose private data is padded to 56 bytes like the IB
//!   CM's REQ; `ACCEPT` answers `CONNECT_RESPONSE` (196 bytes, the REP);
//!   the active side's RTU gives the passive side `ESTABLISHED` (and the
//!   active side nothing, as on rxe); `REJECT` gives
//!   the active side `REJECTED` (reason 28, 148 bytes); `DISCONNECT` sends
//!   the DREQ (the peer gets `DISCONNECTED`) and the peer's `DISCONNECT`
//!   the DREP (then the initiator gets its `DISCONNECTED`);
//! * like the kernel, events of an id whose uid is 0 are dropped, and
//!   `DESTROY_ID` answers the events reported and discards unreported ones;
//!   a connect request's id destroyed before accepting (itself, or with its
//!   listener while unreported) rejects the requester with reason 28;
//! * `JOIN_MCAST` (a UDP id with a device) answers a membership handle and
//!   queues `MULTICAST_JOIN` for its uid at once: Q_Key [`UDP_QKEY`](super::UDP_QKEY),
//!   QP number 0xFFFFFF, the group as the GID (IPv4 mapped), port 1; the
//!   handle comes from the ids' numbers (the kernel numbers memberships
//!   apart); its reported events count for it and for its id; `LEAVE_MCAST`
//!   and `DESTROY_ID` of the id drop it and its unreported events;
//! * a blocking `GET_EVENT` with nothing queued waits at most
//!   [`FakeCm::BLOCKING_WAIT`] and then fails with `ETIMEDOUT` (the kernel
//!   would wait forever), so a host test never hangs.
//!
//! The channel's fd is one end of a socket pair that holds one byte while
//! events are queued, so `poll()` behaves as on the kernel's file.

use std::collections::{BTreeMap, VecDeque};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use uverbs_uapi as sys;
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes};

use super::command::{sockaddr_in6_of, sockaddr_storage_of, socket_addr_from};
use super::event::raw;
use crate::error::Errno;

/// One command as the fake received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedCm {
    /// `RDMA_USER_CM_CMD_*`.
    pub cmd: u32,
    /// The request bytes after the header (`in` of them).
    pub body: Vec<u8>,
    /// The header's `out`.
    pub out: u16,
}

impl RecordedCm {
    /// The request decoded as `T`, `None` when shorter.
    pub fn request<T: FromBytes>(&self) -> Option<T> {
        T::read_from_prefix(&self.body).ok().map(|(v, _)| v)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Conn {
    Idle,
    /// Active side: request sent to passive id.
    Requested(u32),
    /// Passive side: accepted, waiting for the RTU from active id.
    Accepted(u32),
    /// Active side: response received from passive id.
    Responded(u32),
    Connected(u32),
    /// Sent a DREQ to the peer, waiting for its DREP.
    DreqSent(u32),
    /// Received the peer's DREQ: its DISCONNECT answers with the DREP.
    DreqReceived(u32),
    /// Disconnected (the CM still knows the connection: DISCONNECT is a no-op).
    Down,
}

#[derive(Debug)]
struct FakeId {
    uid: u64,
    ps: u16,
    src: Option<SocketAddr>,
    dst: Option<SocketAddr>,
    has_device: bool,
    route: bool,
    listening: bool,
    events_reported: u32,
    conn: Conn,
    /// The peer's QP number, from its connection parameters.
    peer_qpn: u32,
    /// Connect requests not yet reported: (new id).
    listener: Option<u32>,
    /// Made by a connect request (the passive side).
    passive: bool,
}

/// A multicast membership (`JOIN_MCAST`).
#[derive(Debug)]
struct FakeMc {
    /// The id that joined.
    owner: u32,
    events_reported: u32,
}

#[derive(Default)]
struct State {
    ids: BTreeMap<u32, FakeId>,
    /// Memberships, by handle: taken from the ids' numbers (the kernel
    /// numbers them apart), so an event's owner names one or the other.
    mcs: BTreeMap<u32, FakeMc>,
    next_id: u32,
    events: VecDeque<(u32, sys::rdma_ucm_event_resp)>,
    log: Vec<RecordedCm>,
    fail_next: Option<(u32, Errno)>,
    nonblocking: bool,
    /// The socket pair holds its byte.
    readable: bool,
}

/// A test double of the kernel's rdma_cm, for host tests (the `test-util`
/// feature; not for production).
///
/// An in-process model: [`EventChannel::with_fake`](super::EventChannel::with_fake)
/// makes a channel whose `write()` frames it reads like the kernel's
/// `ucma_write`, records ([`RecordedCm`]) and answers from a small loopback
/// fabric, where ids on channels built on the same `FakeCm` reach each
/// other's listeners. Address resolution succeeds for the addresses given to
/// [`FakeCm::with_local_addrs`]; connects, accepts, rejects, disconnects
/// and multicast joins queue events modelled on the kernel's (IB CM, as on
/// rxe).
pub struct FakeCm {
    state: Mutex<State>,
    queued: Condvar,
    local: Vec<IpAddr>,
    /// The fd end given to channels; readable while `signal` holds a byte.
    readable: UnixStream,
    signal: UnixStream,
}

impl std::fmt::Debug for FakeCm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeCm")
            .field("local", &self.local)
            .finish()
    }
}

impl FakeCm {
    /// The node GUID (host order) of the fake's one device.
    pub const NODE_GUID: u64 = 0x0200_5eff_fe00_0001;
    /// The kernel index (`ibdev_index`) of the fake's one device.
    pub const IBDEV_INDEX: u32 = 5;
    /// How long a blocking `GET_EVENT` waits before `ETIMEDOUT`.
    pub const BLOCKING_WAIT: Duration = Duration::from_secs(5);

    /// A fake whose device owns `192.0.2.1`.
    pub fn new() -> std::io::Result<Self> {
        Self::with_local_addrs(vec!["192.0.2.1".parse().expect("literal address")])
    }

    /// A fake whose device owns `local`.
    pub fn with_local_addrs(local: Vec<IpAddr>) -> std::io::Result<Self> {
        let (readable, signal) = UnixStream::pair()?;
        readable.set_nonblocking(true)?;
        Ok(FakeCm {
            state: Mutex::new(State {
                next_id: 1,
                ..State::default()
            }),
            queued: Condvar::new(),
            local,
            readable,
            signal,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every command received so far, in order.
    pub fn commands(&self) -> Vec<RecordedCm> {
        self.lock().log.clone()
    }

    /// The requests of every `cmd` command received so far, in order,
    /// decoded as `T` ([`RecordedCm::request`]).
    ///
    /// # Panics
    ///
    /// If one of them is shorter than `T`: the fake got a truncated
    /// request, which a test wants to see fail.
    pub fn requests<T: FromBytes>(&self, cmd: u32) -> Vec<T> {
        self.lock()
            .log
            .iter()
            .filter(|c| c.cmd == cmd)
            .map(|c| {
                c.request()
                    .unwrap_or_else(|| panic!("command {cmd}: a request shorter than expected"))
            })
            .collect()
    }

    /// The command numbers received so far, in order.
    pub fn command_codes(&self) -> Vec<u32> {
        self.lock().log.iter().map(|c| c.cmd).collect()
    }

    /// Makes the next command `cmd` fail with `errno` (recorded, not applied).
    pub fn fail_next(&self, cmd: u32, errno: Errno) {
        self.lock().fail_next = Some((cmd, errno));
    }

    /// Ids alive in the fake.
    pub fn live_ids(&self) -> usize {
        self.lock().ids.len()
    }

    /// Multicast memberships not yet left.
    pub fn live_memberships(&self) -> usize {
        self.lock().mcs.len()
    }

    /// Events queued and not yet reported.
    pub fn queued_events(&self) -> usize {
        self.lock().events.len()
    }

    /// Queues an event for id `id` as the kernel would (fault injection:
    /// e.g. `DEVICE_REMOVAL`, or an unknown number).
    pub fn inject_event(&self, id: u32, event: u32, status: i32) {
        let mut st = self.lock();
        self.push(&mut st, id, event, status, None);
    }

    pub(crate) fn set_nonblocking(&self, on: bool) {
        self.lock().nonblocking = on;
    }

    /// One `write()`: the frame's bytes, and the buffer its response
    /// pointer must point at.
    pub(crate) fn write(&self, frame: &[u8], response: &mut [u8]) -> Result<(), Errno> {
        let (hdr, rest) =
            sys::rdma_ucm_cmd_hdr::read_from_prefix(frame).map_err(|_| Errno::INVAL)?;
        if usize::from(hdr.in_) > rest.len() {
            return Err(Errno::INVAL);
        }
        let body = &rest[..usize::from(hdr.in_)];
        let mut st = self.lock();
        st.log.push(RecordedCm {
            cmd: hdr.cmd,
            body: body.to_vec(),
            out: hdr.out,
        });
        if let Some((cmd, errno)) = st.fail_next {
            if cmd == hdr.cmd {
                st.fail_next = None;
                return Err(errno);
            }
        }
        let out = usize::from(hdr.out);
        // The response pointer must be the buffer the caller gave for it:
        // a check that each command puts it where the kernel reads it.
        let answer = |resp_field: u64, bytes: &[u8], response: &mut [u8]| {
            if resp_field != response.as_ptr() as u64 {
                return Err(Errno::FAULT);
            }
            let n = out.min(bytes.len()).min(response.len());
            response[..n].copy_from_slice(&bytes[..n]);
            Ok(())
        };
        match hdr.cmd {
            sys::RDMA_USER_CM_CMD_CREATE_ID => {
                let req: sys::rdma_ucm_create_id = read(body)?;
                if out < 4 {
                    return Err(Errno::NOSPC);
                }
                if req.ps != sys::RDMA_PS_TCP && req.ps != sys::RDMA_PS_UDP {
                    return Err(Errno::INVAL);
                }
                let id = st.new_id(req.uid, req.ps);
                answer(
                    req.response,
                    sys::rdma_ucm_create_id_resp { id }.as_bytes(),
                    response,
                )
            }
            sys::RDMA_USER_CM_CMD_DESTROY_ID => {
                let req: sys::rdma_ucm_destroy_id = read(body)?;
                if out < 4 {
                    return Err(Errno::NOSPC);
                }
                let events_reported = self.destroy(&mut st, req.id)?;
                let resp = sys::rdma_ucm_destroy_id_resp { events_reported };
                answer(req.response, resp.as_bytes(), response)
            }
            sys::RDMA_USER_CM_CMD_BIND_IP => {
                let req: sys::rdma_ucm_bind_ip = read(body)?;
                let addr = socket_addr_from(req.addr.as_bytes()).ok_or(Errno::INVAL)?;
                self.bind(&mut st, req.id, addr)
            }
            sys::RDMA_USER_CM_CMD_BIND => {
                let req: sys::rdma_ucm_bind = read(body)?;
                let bytes = req.addr.as_bytes();
                let addr = socket_addr_from(bytes).ok_or(Errno::INVAL)?;
                if req.reserved != 0 || usize::from(req.addr_size) != addr_size(&addr) {
                    return Err(Errno::INVAL);
                }
                self.bind(&mut st, req.id, addr)
            }
            sys::RDMA_USER_CM_CMD_RESOLVE_IP => {
                let req: sys::rdma_ucm_resolve_ip = read(body)?;
                let dst = socket_addr_from(req.dst_addr.as_bytes()).ok_or(Errno::INVAL)?;
                let src = socket_addr_from(req.src_addr.as_bytes());
                self.resolve(&mut st, req.id, src, dst)
            }
            sys::RDMA_USER_CM_CMD_RESOLVE_ADDR => {
                let req: sys::rdma_ucm_resolve_addr = read(body)?;
                let dst = socket_addr_from(req.dst_addr.as_bytes()).ok_or(Errno::INVAL)?;
                if req.reserved != 0 || usize::from(req.dst_size) != addr_size(&dst) {
                    return Err(Errno::INVAL);
                }
                let src = socket_addr_from(req.src_addr.as_bytes());
                self.resolve(&mut st, req.id, src, dst)
            }
            sys::RDMA_USER_CM_CMD_RESOLVE_ROUTE => {
                let req: sys::rdma_ucm_resolve_route = read(body)?;
                let fid = st.ids.get_mut(&req.id).ok_or(Errno::NOENT)?;
                if !fid.has_device || fid.dst.is_none() {
                    return Err(Errno::INVAL);
                }
                fid.route = true;
                self.push(&mut st, req.id, raw::ROUTE_RESOLVED, 0, None);
                Ok(())
            }
            sys::RDMA_USER_CM_CMD_LISTEN => {
                let req: sys::rdma_ucm_listen = read(body)?;
                let fid = st.ids.get_mut(&req.id).ok_or(Errno::NOENT)?;
                if fid.src.is_none() {
                    return Err(Errno::INVAL);
                }
                fid.listening = true;
                Ok(())
            }
            sys::RDMA_USER_CM_CMD_CONNECT => {
                let req: sys::rdma_ucm_connect = read_prefix(body, 280)?;
                if req.conn_param.valid == 0 {
                    return Err(Errno::INVAL);
                }
                self.connect(&mut st, req.id, &req.conn_param)
            }
            sys::RDMA_USER_CM_CMD_ACCEPT => {
                let req: sys::rdma_ucm_accept = read_prefix(body, 288)?;
                self.accept(&mut st, &req)
            }
            sys::RDMA_USER_CM_CMD_REJECT => {
                let req: sys::rdma_ucm_reject = read(body)?;
                if !matches!(req.reason, 0 | 28 | 35) {
                    return Err(Errno::INVAL);
                }
                let fid = st.ids.get(&req.id).ok_or(Errno::NOENT)?;
                let Conn::Requested(active) = fid.conn else {
                    return Err(Errno::INVAL);
                };
                let mut param = sys::rdma_ucm_conn_param::new_zeroed();
                let len = usize::from(req.private_data_len).min(148);
                param.private_data[..len].copy_from_slice(&req.private_data[..len]);
                param.private_data_len = 148;
                if let Some(a) = st.ids.get_mut(&active) {
                    a.conn = Conn::Idle;
                }
                st.ids.get_mut(&req.id).ok_or(Errno::NOENT)?.conn = Conn::Idle;
                self.push(&mut st, active, raw::REJECTED, 28, Some(param));
                Ok(())
            }
            sys::RDMA_USER_CM_CMD_DISCONNECT => {
                let req: sys::rdma_ucm_disconnect = read(body)?;
                let fid = st.ids.get(&req.id).ok_or(Errno::NOENT)?;
                // rdma_disconnect: the DREQ, or the DREP answering one; the
                // side that gets either reports DISCONNECTED. Without a
                // connection it is EINVAL; once down, a no-op.
                let (me, next, peer, peer_next) = match fid.conn {
                    Conn::Connected(peer) => (req.id, Conn::DreqSent(peer), peer, None),
                    Conn::DreqReceived(peer) => (req.id, Conn::Down, peer, Some(Conn::Down)),
                    Conn::DreqSent(_) | Conn::Down => return Ok(()),
                    _ => return Err(Errno::INVAL),
                };
                st.ids.get_mut(&me).ok_or(Errno::NOENT)?.conn = next;
                if let Some(f) = st.ids.get_mut(&peer) {
                    f.conn = peer_next.unwrap_or(Conn::DreqReceived(me));
                    self.push(&mut st, peer, raw::DISCONNECTED, 0, None);
                }
                Ok(())
            }
            sys::RDMA_USER_CM_CMD_INIT_QP_ATTR => {
                let req: sys::rdma_ucm_init_qp_attr = read(body)?;
                if out < size_of::<sys::ib_uverbs_qp_attr>() {
                    return Err(Errno::NOSPC);
                }
                if req.qp_state > 6 {
                    return Err(Errno::INVAL);
                }
                let fid = st.ids.get(&req.id).ok_or(Errno::NOENT)?;
                if !fid.has_device {
                    return Err(Errno::INVAL);
                }
                let attr = qp_attr_for(req.qp_state, fid.peer_qpn)?;
                answer(req.response, attr.as_bytes(), response)
            }
            sys::RDMA_USER_CM_CMD_GET_EVENT => {
                let req: sys::rdma_ucm_get_event = read(body)?;
                if out < size_of::<sys::rdma_ucm_event_resp>() - 12 {
                    return Err(Errno::NOSPC);
                }
                let deadline = Instant::now() + Self::BLOCKING_WAIT;
                while st.events.is_empty() {
                    if st.nonblocking {
                        return Err(Errno::AGAIN);
                    }
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(Errno::TIMEDOUT);
                    }
                    st = self
                        .queued
                        .wait_timeout(st, left)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
                if req.response != response.as_ptr() as u64 {
                    return Err(Errno::FAULT);
                }
                let (owner, ev) = st.events.pop_front().ok_or(Errno::AGAIN)?;
                // A membership's event counts for it and for its id, as on
                // rxe (DESTROY_ID answers both kinds).
                let id = match st.mcs.get_mut(&owner) {
                    Some(m) => {
                        m.events_reported += 1;
                        m.owner
                    }
                    None => owner,
                };
                if let Some(f) = st.ids.get_mut(&id) {
                    f.events_reported += 1;
                }
                if ev.event == raw::CONNECT_REQUEST {
                    if let Some(f) = st.ids.get_mut(&ev.id) {
                        f.listener = None;
                    }
                }
                self.sync_readable(&mut st);
                answer(req.response, ev.as_bytes(), response)
            }
            sys::RDMA_USER_CM_CMD_QUERY_ROUTE => {
                let req: sys::rdma_ucm_query = read(body)?;
                let fid = st.ids.get(&req.id).ok_or(Errno::NOENT)?;
                let mut resp = sys::rdma_ucm_query_route_resp {
                    src_addr: fid.src.as_ref().map(sockaddr_in6_of).unwrap_or_default(),
                    dst_addr: fid.dst.as_ref().map(sockaddr_in6_of).unwrap_or_default(),
                    ..Default::default()
                };
                if fid.has_device {
                    resp.node_guid = Self::NODE_GUID.to_be();
                    resp.port_num = 1;
                    resp.num_paths = u32::from(fid.route);
                }
                answer(req.response, resp.as_bytes(), response)
            }
            sys::RDMA_USER_CM_CMD_QUERY => {
                let req: sys::rdma_ucm_query = read(body)?;
                let fid = st.ids.get(&req.id).ok_or(Errno::NOENT)?;
                match req.option {
                    sys::RDMA_USER_CM_QUERY_ADDR => {
                        let mut resp = sys::rdma_ucm_query_addr_resp::default();
                        if let Some(src) = &fid.src {
                            (resp.src_addr, resp.src_size) = sockaddr_storage_of(src);
                        }
                        if let Some(dst) = &fid.dst {
                            (resp.dst_addr, resp.dst_size) = sockaddr_storage_of(dst);
                        }
                        if fid.has_device {
                            resp.node_guid = Self::NODE_GUID.to_be();
                            resp.port_num = 1;
                            resp.pkey = 0xffffu16.to_be();
                            resp.ibdev_index = Self::IBDEV_INDEX;
                        }
                        answer(req.response, resp.as_bytes(), response)
                    }
                    _ => Err(Errno::NOSYS),
                }
            }
            sys::RDMA_USER_CM_CMD_SET_OPTION => {
                let req: sys::rdma_ucm_set_option = read(body)?;
                st.ids.get(&req.id).ok_or(Errno::NOENT)?;
                // The value is behind `optval`; the kernel's sizes per option.
                let want = match (req.level, req.optname) {
                    (sys::RDMA_OPTION_ID, sys::RDMA_OPTION_ID_TOS)
                    | (sys::RDMA_OPTION_ID, sys::RDMA_OPTION_ID_ACK_TIMEOUT) => 1,
                    (sys::RDMA_OPTION_ID, _) => 4,
                    _ => return Err(Errno::NOSYS),
                };
                if req.optlen != want {
                    return Err(Errno::INVAL);
                }
                Ok(())
            }
            sys::RDMA_USER_CM_CMD_NOTIFY => {
                let req: sys::rdma_ucm_notify = read(body)?;
                let fid = st.ids.get(&req.id).ok_or(Errno::NOENT)?;
                if fid.has_device {
                    Ok(())
                } else {
                    Err(Errno::INVAL)
                }
            }
            sys::RDMA_USER_CM_CMD_JOIN_MCAST => {
                let req: sys::rdma_ucm_join_mcast = read(body)?;
                if out < 4 {
                    return Err(Errno::NOSPC);
                }
                let group = socket_addr_from(req.addr.as_bytes()).ok_or(Errno::INVAL)?;
                if usize::from(req.addr_size) != addr_size(&group)
                    || req.join_flags > sys::RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER
                {
                    return Err(Errno::INVAL);
                }
                let fid = st.ids.get(&req.id).ok_or(Errno::NOENT)?;
                if !fid.has_device || fid.ps != sys::RDMA_PS_UDP {
                    return Err(Errno::INVAL);
                }
                let handle = st.next_id;
                st.next_id += 1;
                st.mcs.insert(
                    handle,
                    FakeMc {
                        owner: req.id,
                        events_reported: 0,
                    },
                );
                let mut ev = sys::rdma_ucm_event_resp::new_zeroed();
                (ev.uid, ev.id, ev.event) = (req.uid, handle, raw::MULTICAST_JOIN);
                let mut ud = sys::rdma_ucm_ud_param::new_zeroed();
                (ud.qp_num, ud.qkey) = (0xff_ffff, super::command::UDP_QKEY);
                ud.ah_attr.grh.dgid = match group.ip() {
                    IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
                    IpAddr::V6(v6) => v6.octets(),
                };
                (ud.ah_attr.is_global, ud.ah_attr.port_num) = (1, 1);
                ev.param.copy_from_slice(ud.as_bytes());
                self.enqueue(&mut st, handle, ev);
                let resp = sys::rdma_ucm_create_id_resp { id: handle };
                answer(req.response, resp.as_bytes(), response)
            }
            sys::RDMA_USER_CM_CMD_LEAVE_MCAST => {
                let req: sys::rdma_ucm_destroy_id = read(body)?;
                if out < 4 {
                    return Err(Errno::NOSPC);
                }
                let mc = st.mcs.remove(&req.id).ok_or(Errno::NOENT)?;
                // Its unreported events go (ucma_cleanup_mc_events).
                st.events.retain(|(owner, _)| *owner != req.id);
                self.sync_readable(&mut st);
                let resp = sys::rdma_ucm_destroy_id_resp {
                    events_reported: mc.events_reported,
                };
                answer(req.response, resp.as_bytes(), response)
            }
            sys::RDMA_USER_CM_CMD_GET_OPTION => Err(Errno::NOSYS),
            c if c > sys::RDMA_USER_CM_CMD_JOIN_MCAST => Err(Errno::INVAL),
            _ => Err(Errno::NOSYS),
        }
    }

    /// Queues an event owned by (counted for) `owner`; the event names
    /// `owner`'s id and uid. Dropped, like the kernel does, when the uid is 0.
    fn push(
        &self,
        st: &mut State,
        owner: u32,
        event: u32,
        status: i32,
        param: Option<sys::rdma_ucm_conn_param>,
    ) {
        let Some(f) = st.ids.get(&owner) else { return };
        if f.uid == 0 {
            return;
        }
        let mut ev = sys::rdma_ucm_event_resp::new_zeroed();
        ev.uid = f.uid;
        ev.id = owner;
        ev.event = event;
        ev.status = status as u32;
        if let Some(p) = param {
            ev.param[..size_of::<sys::rdma_ucm_conn_param>()].copy_from_slice(p.as_bytes());
        }
        self.enqueue(st, owner, ev);
    }

    fn enqueue(&self, st: &mut State, owner: u32, ev: sys::rdma_ucm_event_resp) {
        st.events.push_back((owner, ev));
        self.sync_readable(st);
        self.queued.notify_all();
    }

    /// Keeps one byte in the socket pair exactly while events are queued,
    /// so `poll()` on the channel's fd follows the queue.
    fn sync_readable(&self, st: &mut State) {
        let want = !st.events.is_empty();
        if want && !st.readable {
            let _ = (&self.signal).write_all(&[1]);
        } else if !want && st.readable {
            let mut byte = [0u8; 1];
            let _ = (&self.readable).read(&mut byte);
        }
        st.readable = want;
    }

    fn bind(&self, st: &mut State, id: u32, addr: SocketAddr) -> Result<(), Errno> {
        let local = addr.ip().is_unspecified() || self.local.contains(&addr.ip());
        if !local {
            return Err(Errno::ADDRNOTAVAIL);
        }
        let in_use = st.ids.iter().any(|(&other, f)| {
            other != id && f.src == Some(addr) && f.listening && addr.port() != 0
        });
        if in_use {
            return Err(Errno::ADDRINUSE);
        }
        let fid = st.ids.get_mut(&id).ok_or(Errno::NOENT)?;
        if fid.src.is_some() {
            return Err(Errno::INVAL);
        }
        fid.src = Some(addr);
        fid.has_device = !addr.ip().is_unspecified();
        Ok(())
    }

    fn resolve(
        &self,
        st: &mut State,
        id: u32,
        src: Option<SocketAddr>,
        dst: SocketAddr,
    ) -> Result<(), Errno> {
        let fid = st.ids.get_mut(&id).ok_or(Errno::NOENT)?;
        fid.dst = Some(dst);
        if self.local.contains(&dst.ip()) {
            if fid.src.is_none() {
                let ip = src.map_or(dst.ip(), |s| s.ip());
                fid.src = Some(SocketAddr::new(ip, 0));
            }
            fid.has_device = true;
            self.push(st, id, raw::ADDR_RESOLVED, 0, None);
        } else {
            self.push(
                st,
                id,
                raw::ADDR_ERROR,
                -Errno::NETUNREACH.raw_os_error(),
                None,
            );
        }
        Ok(())
    }

    fn connect(
        &self,
        st: &mut State,
        id: u32,
        param: &sys::rdma_ucm_conn_param,
    ) -> Result<(), Errno> {
        let fid = st.ids.get(&id).ok_or(Errno::NOENT)?;
        if !fid.route {
            return Err(Errno::INVAL);
        }
        let (dst, ps) = (fid.dst.ok_or(Errno::INVAL)?, fid.ps);
        let listener = st
            .ids
            .iter()
            .find(|(_, f)| f.listening && f.ps == ps && f.src.is_some_and(|s| same_port(s, dst)))
            .map(|(&l, _)| l);
        let Some(listener) = listener else {
            self.push(st, id, raw::REJECTED, 8, None);
            return Ok(());
        };
        let new = st.new_id(0, ps);
        {
            let f = st.ids.get_mut(&new).ok_or(Errno::NOENT)?;
            f.has_device = true;
            f.route = true;
            f.src = Some(dst);
            f.conn = Conn::Requested(id);
            f.peer_qpn = param.qp_num & 0xff_ffff;
            f.listener = Some(listener);
            f.passive = true;
        }
        st.ids.get_mut(&id).ok_or(Errno::NOENT)?.conn = Conn::Requested(new);
        // The listener's event, naming the new id (ucma_connect_event_handler).
        let luid = st.ids.get(&listener).map_or(0, |f| f.uid);
        let mut ev = sys::rdma_ucm_event_resp::new_zeroed();
        ev.uid = luid;
        ev.id = new;
        ev.event = raw::CONNECT_REQUEST;
        let mut p = *param;
        p.private_data_len = 56;
        p.private_data[56..].fill(0);
        p.valid = 0;
        ev.param[..size_of::<sys::rdma_ucm_conn_param>()].copy_from_slice(p.as_bytes());
        self.enqueue(st, listener, ev);
        Ok(())
    }

    fn accept(&self, st: &mut State, req: &sys::rdma_ucm_accept) -> Result<(), Errno> {
        let fid = st.ids.get(&req.id).ok_or(Errno::NOENT)?;
        match (fid.conn, req.conn_param.valid) {
            // Passive side: accept the request.
            (Conn::Requested(active), 1) if fid.listener.is_none() => {
                let f = st.ids.get_mut(&req.id).ok_or(Errno::NOENT)?;
                f.uid = req.uid;
                f.conn = Conn::Accepted(active);
                let qpn = req.conn_param.qp_num & 0xff_ffff;
                let a = st.ids.get_mut(&active).ok_or(Errno::NOENT)?;
                a.conn = Conn::Responded(req.id);
                a.peer_qpn = qpn;
                let mut p = req.conn_param;
                p.private_data_len = 196;
                p.private_data[196..].fill(0);
                p.valid = 0;
                self.push(st, active, raw::CONNECT_RESPONSE, 0, Some(p));
                Ok(())
            }
            // Active side: the RTU. Only the passive side hears of it
            // (ESTABLISHED); the active side's id has no QP of the kernel's,
            // so cma_rep_recv just sends the RTU and reports nothing.
            (Conn::Responded(passive), 0) => {
                for (me, peer) in [(req.id, passive), (passive, req.id)] {
                    if let Some(f) = st.ids.get_mut(&me) {
                        f.conn = Conn::Connected(peer);
                    }
                }
                self.push(st, passive, raw::ESTABLISHED, 0, None);
                Ok(())
            }
            _ => Err(Errno::INVAL),
        }
    }

    fn destroy(&self, st: &mut State, id: u32) -> Result<u32, Errno> {
        let f = st.ids.remove(&id).ok_or(Errno::NOENT)?;
        // Its memberships are left (ucma_cleanup_multicast).
        let left: Vec<u32> = st
            .mcs
            .iter()
            .filter(|(_, m)| m.owner == id)
            .map(|(&h, _)| h)
            .collect();
        for h in &left {
            st.mcs.remove(h);
        }
        // Unreported events of the id and its memberships go; so do the ids
        // of its unreported connect requests (ucma_cleanup_ctx_events).
        let mut orphans = Vec::new();
        st.events.retain(|(owner, ev)| {
            if left.contains(owner) {
                return false;
            }
            if *owner != id {
                return true;
            }
            if ev.event == raw::CONNECT_REQUEST {
                orphans.push(ev.id);
            }
            false
        });
        let mut gone = vec![f];
        for o in orphans {
            gone.extend(st.ids.remove(&o));
        }
        // A passive id destroyed before it accepted rejects its requester
        // (measured on rxe: REJECTED, reason 28 consumer defined).
        for g in &gone {
            if let (true, Conn::Requested(active)) = (g.passive, g.conn) {
                if let Some(a) = st.ids.get_mut(&active) {
                    a.conn = Conn::Idle;
                }
                self.push(st, active, raw::REJECTED, 28, None);
            }
        }
        self.sync_readable(st);
        Ok(gone[0].events_reported)
    }
}

impl State {
    fn new_id(&mut self, uid: u64, ps: u16) -> u32 {
        let id = self.next_id;
        self.next_id += 1;
        self.ids.insert(
            id,
            FakeId {
                uid,
                ps,
                src: None,
                dst: None,
                has_device: false,
                route: false,
                listening: false,
                events_reported: 0,
                conn: Conn::Idle,
                peer_qpn: 0,
                listener: None,
                passive: false,
            },
        );
        id
    }
}

impl AsFd for FakeCm {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.readable.as_fd()
    }
}

fn read<T: FromBytes + Immutable>(body: &[u8]) -> Result<T, Errno> {
    T::read_from_prefix(body)
        .map(|(v, _)| v)
        .map_err(|_| Errno::FAULT)
}

/// Like the kernel's CONNECT/ACCEPT: at least `min` bytes (up to
/// `reserved`), the rest (ECE) zero when absent.
fn read_prefix<T: FromBytes + IntoBytes + Immutable>(body: &[u8], min: usize) -> Result<T, Errno> {
    if body.len() < min {
        return Err(Errno::INVAL);
    }
    let mut v = T::new_zeroed();
    let n = body.len().min(size_of::<T>());
    v.as_mut_bytes()[..n].copy_from_slice(&body[..n]);
    Ok(v)
}

fn addr_size(addr: &SocketAddr) -> usize {
    match addr {
        SocketAddr::V4(_) => size_of::<sys::sockaddr_in>(),
        SocketAddr::V6(_) => size_of::<sys::sockaddr_in6>(),
    }
}

/// A listener on `bound` hears a request to `dst`.
fn same_port(bound: SocketAddr, dst: SocketAddr) -> bool {
    bound.port() == dst.port() && (bound.ip().is_unspecified() || bound.ip() == dst.ip())
}

/// Plausible RoCE answers of `rdma_init_qp_attr` for an RC QP.
fn qp_attr_for(state: u32, peer_qpn: u32) -> Result<sys::ib_uverbs_qp_attr, Errno> {
    let mut a = sys::ib_uverbs_qp_attr {
        qp_state: state,
        ..Default::default()
    };
    a.qp_attr_mask = match state {
        // STATE | ACCESS_FLAGS | PKEY_INDEX | PORT
        1 => {
            a.qp_access_flags = sys::IB_UVERBS_ACCESS_LOCAL_WRITE
                | sys::IB_UVERBS_ACCESS_REMOTE_WRITE
                | sys::IB_UVERBS_ACCESS_REMOTE_READ;
            a.port_num = 1;
            0x39
        }
        // STATE | AV | PATH_MTU | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER | DEST_QPN
        2 => {
            a.ah_attr.is_global = 1;
            a.ah_attr.port_num = 1;
            a.ah_attr.grh.hop_limit = 64;
            a.path_mtu = 3;
            a.dest_qp_num = peer_qpn;
            a.rq_psn = 0x1234;
            a.max_dest_rd_atomic = 1;
            a.min_rnr_timer = 12;
            0x1 | 0x80 | 0x100 | 0x1000 | 0x2_0000 | 0x8000 | 0x10_0000
        }
        // STATE | TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN | MAX_QP_RD_ATOMIC
        3 => {
            a.timeout = 14;
            a.retry_cnt = 7;
            a.rnr_retry = 7;
            a.sq_psn = 0x1234;
            a.max_rd_atomic = 1;
            0x1 | 0x200 | 0x400 | 0x800 | 0x1_0000 | 0x2000
        }
        _ => return Err(Errno::INVAL),
    };
    Ok(a)
}
