//! A connection manager id (`struct rdma_cm_id`): one endpoint that is
//! bound, resolved, listens or connects, and whose events arrive on its
//! [`EventChannel`].

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use uverbs_uapi as sys;

use super::channel::{next_uid, EventChannel};
use super::command::*;
use crate::command::{Mtu, QpAttr, QpState};
use crate::error::{Errno, Error, Op};
use crate::flags::AccessFlags;
use crate::{Context, Device};

/// A cm id. Dropping it destroys it (`DESTROY_ID`; errors ignored — use
/// [`destroy`](Self::destroy) to see them and the events reported).
///
/// An id belongs to the process that opened its channel. In a child forked
/// since, every command (dropping included) sends nothing and answers
/// [`Error::ForeignProcess`], checked before anything else: the parent's
/// id is untouched.
#[doc(alias = "rdma_cm_id")]
#[derive(Debug)]
pub struct CmId {
    channel: EventChannel,
    handle: u32,
    uid: u64,
    ps: PortSpace,
    live: bool,
    /// The groups joined and not left; the kernel leaves them when the id
    /// is destroyed.
    memberships: Mutex<Vec<Membership>>,
}

/// A multicast group a UDP-port-space id joined
/// ([`CmId::join_multicast`]): the kernel's membership, whose events
/// ([`EventKind::MulticastJoin`](super::EventKind::MulticastJoin) and
/// [`MulticastError`](super::EventKind::MulticastError)) carry its
/// [`uid`](Self::uid) and [`handle`](Self::handle), not the id's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Membership {
    group: SocketAddr,
    handle: u32,
    uid: u64,
}

impl Membership {
    /// The group's address, as joined.
    pub fn group(&self) -> SocketAddr {
        self.group
    }

    /// The kernel's handle of the membership (what its events'
    /// [`Event::id`](super::Event::id) names).
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// The uid its events carry.
    pub fn uid(&self) -> u64 {
        self.uid
    }
}

/// Where an id is: its addresses, device and route (`QUERY_ROUTE`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The local address (after bind or address resolution).
    pub src: Option<SocketAddr>,
    /// The peer's address.
    pub dst: Option<SocketAddr>,
    /// The device's node GUID (host order), `None` before the id has a device.
    pub node_guid: Option<u64>,
    /// The device port (0 before the id has a device).
    pub port_num: u8,
    /// The kernel's index of the device.
    pub ibdev_index: u32,
    /// The path records (RoCE/IB: one after route resolution; iWARP: none,
    /// only the GIDs in the first record's `sgid`/`dgid`).
    pub paths: Vec<sys::ib_user_path_rec>,
    /// The first record even when `paths` is empty (it carries the GIDs
    /// on iWARP and before route resolution).
    pub first: sys::ib_user_path_rec,
}

/// Addresses, device and P_Key of an id (`QUERY` with the address option).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddrInfo {
    /// The local address.
    pub src: Option<SocketAddr>,
    /// The peer's address.
    pub dst: Option<SocketAddr>,
    /// The device's node GUID (host order), `None` before the id has a device.
    pub node_guid: Option<u64>,
    /// The device port.
    pub port_num: u8,
    /// The P_Key (host order).
    pub pkey: u16,
    /// The kernel's index of the device.
    pub ibdev_index: u32,
}

impl CmId {
    pub(crate) fn new(channel: EventChannel, handle: u32, uid: u64, ps: PortSpace) -> Self {
        channel.register(uid, ps);
        CmId {
            channel,
            handle,
            uid,
            ps,
            live: true,
            memberships: Mutex::new(Vec::new()),
        }
    }

    /// The kernel's handle of the id (what [`Event::id`](super::Event::id) names).
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// The uid its events carry (for an id from a connect request: once
    /// accepted).
    pub fn uid(&self) -> u64 {
        self.uid
    }

    /// The port space.
    pub fn port_space(&self) -> PortSpace {
        self.ps
    }

    /// The channel its events arrive on.
    pub fn channel(&self) -> &EventChannel {
        &self.channel
    }

    /// Events the channel delivered for this id so far.
    pub fn events_received(&self) -> u32 {
        self.channel.events_received(self.uid)
    }

    /// Binds to a local address (`BIND`); port 0 picks a free port.
    #[doc(alias = "rdma_bind_addr")]
    pub fn bind(&self, addr: SocketAddr) -> Result<(), Error> {
        self.channel.run(&Bind::new(self.handle, addr), Op::CmBind)
    }

    /// Starts resolving `dst` (`RESOLVE_ADDR`), from `src` when given;
    /// answered by `ADDR_RESOLVED` or `ADDR_ERROR` within `timeout_ms`.
    #[doc(alias = "rdma_resolve_addr")]
    pub fn resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout_ms: u32,
    ) -> Result<(), Error> {
        let mut cmd = ResolveAddr::new(self.handle, dst, timeout_ms);
        if let Some(src) = src {
            cmd = cmd.src(src);
        }
        self.channel.run(&cmd, Op::CmResolveAddr)
    }

    /// Starts resolving the route (`RESOLVE_ROUTE`); answered by
    /// `ROUTE_RESOLVED` or `ROUTE_ERROR`.
    #[doc(alias = "rdma_resolve_route")]
    pub fn resolve_route(&self, timeout_ms: u32) -> Result<(), Error> {
        let cmd = ResolveRoute::new(self.handle, timeout_ms);
        self.channel.run(&cmd, Op::CmResolveRoute)
    }

    /// Listens for connection requests on the bound address (`LISTEN`).
    #[doc(alias = "rdma_listen")]
    pub fn listen(&self, backlog: u32) -> Result<(), Error> {
        let cmd = Listen::new(self.handle, backlog);
        self.channel.run(&cmd, Op::CmListen)
    }

    /// Sends the connection request (`CONNECT`) for our QP `param.qp_num()`.
    /// Private data: at most [`MAX_CONNECT_PRIVATE_DATA`] bytes (TCP) or
    /// [`MAX_UD_CONNECT_PRIVATE_DATA`] (UDP); more is refused here.
    #[doc(alias = "rdma_connect")]
    pub fn connect(&self, param: &ConnParam) -> Result<(), Error> {
        let limits = (MAX_CONNECT_PRIVATE_DATA, MAX_UD_CONNECT_PRIVATE_DATA);
        self.check_param(param, limits, Op::CmConnect)?;
        let cmd = Connect::new(self.handle, *param);
        self.channel.run(&cmd, Op::CmConnect)
    }

    /// Accepts the connection request this id came with (`ACCEPT`); the
    /// QP must already be in RTR (RC: INIT, RTR with
    /// [`init_qp_attr`](Self::init_qp_attr), and RTS for librdmacm's
    /// order). At most [`MAX_ACCEPT_PRIVATE_DATA`] bytes of private data
    /// ([`MAX_UD_ACCEPT_PRIVATE_DATA`] for UD). The id's later events carry
    /// its [`uid`](Self::uid).
    #[doc(alias = "rdma_accept")]
    pub fn accept(&self, param: &ConnParam) -> Result<(), Error> {
        let limits = (MAX_ACCEPT_PRIVATE_DATA, MAX_UD_ACCEPT_PRIVATE_DATA);
        self.check_param(param, limits, Op::CmAccept)?;
        let cmd = Accept::new(self.handle, self.uid, *param);
        self.channel.run(&cmd, Op::CmAccept)
    }

    /// Before a `CONNECT` or `ACCEPT` (`op`): refuses it in a forked
    /// child, and refuses `param` here when its private data exceeds the
    /// message's limit, `(tcp, udp)` by the id's port space, or a retry
    /// count exceeds 7.
    fn check_param(
        &self,
        param: &ConnParam,
        (tcp, udp): (usize, usize),
        op: Op,
    ) -> Result<(), Error> {
        let max = match self.ps {
            PortSpace::Tcp => tcp,
            PortSpace::Udp => udp,
        };
        self.channel.check_process(op)?;
        param.check(max).map_err(|r| self.channel.input(op, r))
    }

    /// The active side's last step after `CONNECT_RESPONSE` and moving the
    /// QP to RTS: the RTU (`ACCEPT` without parameters). The passive side
    /// then gets `ESTABLISHED`; this side gets no event (the connection is
    /// up when this returns).
    #[doc(alias = "rdma_establish")]
    pub fn establish(&self) -> Result<(), Error> {
        let cmd = Accept::establish(self.handle);
        self.channel.run(&cmd, Op::CmAccept)
    }

    /// Rejects the connection request this id came with (`REJECT`), with up
    /// to [`MAX_REJECT_PRIVATE_DATA`] bytes for the peer.
    #[doc(alias = "rdma_reject")]
    pub fn reject(&self, reason: RejectReason, private_data: &[u8]) -> Result<(), Error> {
        self.channel.check_process(Op::CmReject)?;
        let cmd = Reject::new(self.handle, reason, private_data).map_err(|_| {
            self.channel.input(
                Op::CmReject,
                "private data longer than a REJ carries (148 bytes)",
            )
        })?;
        self.channel.run(&cmd, Op::CmReject)
    }

    /// Disconnects (`DISCONNECT`): the DREQ, or, after a `DISCONNECTED`
    /// from the peer's DREQ, the DREP that answers it. The peer gets
    /// `DISCONNECTED` at once; this side when the peer answers. Once down,
    /// a no-op.
    #[doc(alias = "rdma_disconnect")]
    pub fn disconnect(&self) -> Result<(), Error> {
        let cmd = Disconnect::new(self.handle);
        self.channel.run(&cmd, Op::CmDisconnect)
    }

    /// The attributes that move this connection's QP to `state`
    /// (`INIT_QP_ATTR`), as a [`QpAttr`] for
    /// [`QueuePair::modify`](crate::QueuePair::modify).
    ///
    /// For an RC id, ask for INIT, RTR and RTS in turn. For a UD id
    /// (`PortSpace::Udp`) use the answer for INIT only (P_Key index, port
    /// and the id's Q_Key): the kernel answers the same set for every
    /// state, and the port is no attribute of UD's INIT → RTR. Take the QP
    /// on by hand: RTR with the state alone, RTS with the state and an
    /// `sq_psn`.
    #[doc(alias = "rdma_init_qp_attr")]
    pub fn init_qp_attr(&self, state: QpState) -> Result<QpAttr, Error> {
        let cmd = InitQpAttr::new(self.handle, state);
        let raw = self.channel.run(&cmd, Op::CmInitQpAttr)?;
        qp_attr_from_kernel(&raw).map_err(|r| self.channel.input(Op::CmInitQpAttr, r))
    }

    /// Addresses, device, port and path records (`QUERY_ROUTE`).
    #[doc(alias = "rdma_query_route")]
    pub fn query_route(&self) -> Result<Route, Error> {
        let r = self
            .channel
            .run(&QueryRoute::new(self.handle), Op::CmQuery)?;
        let n = (r.num_paths as usize).min(r.ib_route.len());
        Ok(Route {
            src: socket_addr_from(zerocopy::IntoBytes::as_bytes(&r.src_addr)),
            dst: socket_addr_from(zerocopy::IntoBytes::as_bytes(&r.dst_addr)),
            node_guid: guid(r.node_guid),
            port_num: r.port_num,
            ibdev_index: r.ibdev_index,
            paths: r.ib_route[..n].to_vec(),
            first: r.ib_route[0],
        })
    }

    /// Addresses, device, port and P_Key (`QUERY`, address option).
    #[doc(alias = "rdma_query_addr")]
    #[doc(alias = "rdma_get_local_addr")]
    #[doc(alias = "rdma_get_peer_addr")]
    #[doc(alias = "rdma_get_src_port")]
    #[doc(alias = "rdma_get_dst_port")]
    pub fn query_addr(&self) -> Result<AddrInfo, Error> {
        let cmd = Query::new(self.handle, QueryOption::Addr);
        let r = self.channel.run(&cmd, Op::CmQuery)?;
        let src_len = usize::from(r.src_size).min(128);
        let dst_len = usize::from(r.dst_size).min(128);
        Ok(AddrInfo {
            src: socket_addr_from(&zerocopy::IntoBytes::as_bytes(&r.src_addr)[..src_len]),
            dst: socket_addr_from(&zerocopy::IntoBytes::as_bytes(&r.dst_addr)[..dst_len]),
            node_guid: guid(r.node_guid),
            port_num: r.port_num,
            pkey: u16::from_be(r.pkey),
            ibdev_index: r.ibdev_index,
        })
    }

    /// The local and remote GIDs (`QUERY`, GID option: `sockaddr_ib`,
    /// whose GID is at byte 8).
    pub fn query_gids(&self) -> Result<([u8; 16], [u8; 16]), Error> {
        let cmd = Query::new(self.handle, QueryOption::Gid);
        let r = self.channel.run(&cmd, Op::CmQuery)?;
        let gid = |s: &sys::__kernel_sockaddr_storage| {
            let mut g = [0u8; 16];
            g.copy_from_slice(&zerocopy::IntoBytes::as_bytes(s)[8..24]);
            g
        };
        Ok((gid(&r.src_addr), gid(&r.dst_addr)))
    }

    /// The route's path records in wire format (`QUERY`, path option).
    pub fn query_paths(&self) -> Result<Vec<sys::ib_path_rec_data>, Error> {
        let r = self
            .channel
            .run(&QueryPath::new(self.handle), Op::CmQuery)?;
        let n = (r.head.num_paths as usize).min(r.paths.len());
        Ok(r.paths[..n].to_vec())
    }

    /// The node GUID (host order) of the device the id landed on, `None`
    /// before it has one (bind to a device address or resolve first).
    pub fn node_guid(&self) -> Result<Option<u64>, Error> {
        Ok(self.query_addr()?.node_guid)
    }

    /// The device the id is bound to (librdmacm's `id->verbs`), `None`
    /// before it has one (bind to a device's address, or resolve first).
    /// [`Device::open`] gives its [`Context`].
    ///
    /// The kernel names the device by its index (`QUERY`'s
    /// [`ibdev_index`](AddrInfo::ibdev_index)), which RDMA netlink maps to
    /// a name: exact where node GUIDs are not (rxe and siw on one netdev
    /// share one, see [`matching_devices`](Self::matching_devices)). An
    /// index netlink does not know, or a device without a uverbs node, is
    /// [`Error::Os`] with `ENODEV`; a failed netlink exchange its errno.
    ///
    /// ```no_run
    /// # fn f(id: &uverbs::cm::CmId) -> Result<(), uverbs::Error> {
    /// if let Some(device) = id.device()? {
    ///     let ctx = device.open()?;
    ///     println!("the id is on {}", ctx.device_name());
    /// }
    /// # Ok(()) }
    /// ```
    #[doc(alias = "id->verbs")]
    #[doc(alias = "verbs")]
    pub fn device(&self) -> Result<Option<Device>, Error> {
        let info = self.query_addr()?;
        if info.node_guid.is_none() {
            return Ok(None);
        }
        self.device_among(&info, crate::devices, crate::netlink::device_name_of_index)
    }

    /// Opens the device the id is on ([`device`](Self::device), then
    /// [`Device::open`]): the context whose PD, CQ and QP a connection
    /// through this id uses. An id on no device yet (neither bound to a
    /// device's address, nor resolved, nor a request's) is
    /// [`Error::Os`] with `ENODEV`.
    ///
    /// ```no_run
    /// # fn f(id: &uverbs::cm::CmId) -> Result<(), uverbs::Error> {
    /// let ctx = id.open_device()?;
    /// let (pd, cq) = (ctx.alloc_pd()?, ctx.create_cq(16, None)?);
    /// # Ok(()) }
    /// ```
    #[doc(alias = "rdma_cm_id::verbs")]
    pub fn open_device(&self) -> Result<Context, Error> {
        match self.device()? {
            Some(device) => device.open(),
            None => Err(self.channel.err(Op::CmQuery, Errno::NODEV)),
        }
    }

    /// [`device`](Self::device) for an id that has one (`info` from
    /// [`query_addr`](Self::query_addr)): the index named by `name_of`,
    /// then found among `devices`.
    pub(crate) fn device_among(
        &self,
        info: &AddrInfo,
        devices: impl FnOnce() -> Result<Vec<Device>, Error>,
        name_of: impl FnOnce(u32) -> std::io::Result<Option<String>>,
    ) -> Result<Option<Device>, Error> {
        let errno = |e: std::io::Error| Errno::from_io_error(&e).unwrap_or(Errno::IO);
        let no_device = || self.channel.err(Op::CmQuery, Errno::NODEV);
        let name = name_of(info.ibdev_index)
            .map_err(|e| self.channel.err(Op::CmQuery, errno(e)))?
            .ok_or_else(no_device)?;
        let found = devices()?.into_iter().find(|d| d.name() == name);
        found.map(Some).ok_or_else(no_device)
    }

    /// True when the id's [`device`](Self::device) is `ctx`'s (same
    /// device name); false before the id has a device.
    ///
    /// The kernel's device index decides, not the node GUID: rxe and siw on
    /// one netdev share a GUID (both derive it from the MAC), and an id
    /// bound to siw0's address is on siw0 only.
    pub fn is_on(&self, ctx: &Context) -> Result<bool, Error> {
        let device = self.device()?;
        Ok(device.is_some_and(|d| d.name() == ctx.device_name()))
    }

    /// The devices of `devices` whose sysfs node GUID
    /// (`/sys/class/infiniband/<name>/node_guid`) is the id's; empty before
    /// the id has a device. More than one when devices share a GUID (see
    /// [`is_on`](Self::is_on)).
    pub fn matching_devices(&self, devices: &[Device]) -> Result<Vec<Device>, Error> {
        self.matching_devices_in(devices, Path::new("/sys/class/infiniband"))
    }

    /// [`matching_devices`](Self::matching_devices) under another sysfs class directory.
    pub fn matching_devices_in(
        &self,
        devices: &[Device],
        class_dir: &Path,
    ) -> Result<Vec<Device>, Error> {
        let Some(guid) = self.node_guid()? else {
            return Ok(Vec::new());
        };
        let mut found = Vec::new();
        for dev in devices {
            let path = class_dir.join(dev.name()).join("node_guid");
            let text = std::fs::read_to_string(&path).map_err(|source| Error::Sysfs {
                op: Op::CmQuery,
                path: path.clone(),
                error: source,
            })?;
            if parse_sysfs_guid(&text) == Some(guid) {
                found.push(dev.clone());
            }
        }
        Ok(found)
    }

    /// Joins the multicast group `group` (`JOIN_MCAST`) as a full member,
    /// or a send-only one with `send_only`; answered on the channel by a
    /// `MULTICAST_JOIN` event (its address vector, Q_Key and QP number 0xFFFFFF
    /// are what the QP attaches to and sends with) or `MULTICAST_ERROR`,
    /// both for the returned [`Membership`]'s uid. The id must be of the UDP
    /// port space, and bound to a local address or resolved (it needs a
    /// device).
    ///
    /// On RoCE with an IPv4 group the kernel also joins the group on the
    /// netdev (IGMP), so its datagrams reach rxe; an IPv6 group it does
    /// not join (see `docs/data-path.md`, "UD multicast"). iWARP has no
    /// multicast: the kernel refuses.
    ///
    /// [`join_group`](Self::join_group) joins and waits for the event in
    /// one call.
    ///
    /// A TCP id, an address that is not multicast, or a group this id has
    /// joined already: [`Error::InvalidInput`], nothing sent. In a forked
    /// child: [`Error::ForeignProcess`], first.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use uverbs::cm::{EventChannel, EventKind, PortSpace};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let ch = EventChannel::open()?;
    /// let id = ch.create_id(PortSpace::Udp)?;
    /// id.bind("192.0.2.1:0".parse()?)?;
    /// let member = id.join_multicast("239.1.2.3:0".parse()?, false)?;
    /// let ev = ch.wait_event(Duration::from_secs(5))?.ok_or("no event")?;
    /// assert_eq!(ev.uid, member.uid());
    /// if let EventKind::MulticastJoin(group) = ev.kind {
    ///     let av = group.to_ah_attr(); // qp.attach_mcast(av's dgid, dlid), create_ah(av)
    ///     # let _ = av;
    /// }
    /// id.leave_multicast(member.group())?;
    /// # Ok(()) }
    /// ```
    #[doc(alias = "rdma_join_multicast")]
    #[doc(alias = "rdma_join_multicast_ex")]
    pub fn join_multicast(&self, group: SocketAddr, send_only: bool) -> Result<Membership, Error> {
        self.join_multicast_as(next_uid(), group, send_only)
    }

    /// [`join_multicast`](Self::join_multicast) with the membership's uid
    /// `uid` (the tokio channel routes it before the join).
    pub(crate) fn join_multicast_as(
        &self,
        uid: u64,
        group: SocketAddr,
        send_only: bool,
    ) -> Result<Membership, Error> {
        let op = Op::CmJoinMulticast;
        self.channel.check_process(op)?;
        if self.ps != PortSpace::Udp {
            return Err(self
                .channel
                .input(op, "multicast needs a UDP-port-space (UD) id"));
        }
        if !group.ip().is_multicast() {
            return Err(self
                .channel
                .input(op, "the group address is not a multicast address"));
        }
        let mut joined = self.joined();
        if joined.iter().any(|m| m.group == group) {
            return Err(self
                .channel
                .input(op, "this id has joined the group already"));
        }
        let mut cmd = JoinMcast::new(self.handle, uid, group);
        if send_only {
            cmd = cmd.send_only();
        }
        // Registered first: another thread may read the event before the
        // command returns.
        self.channel.register(uid, PortSpace::Udp);
        let resp = self.channel.run(&cmd, op).inspect_err(|_| {
            self.channel.unregister(uid);
        })?;
        let member = Membership {
            group,
            handle: resp.id,
            uid,
        };
        joined.push(member);
        Ok(member)
    }

    /// Leaves `group` (`LEAVE_MCAST`), joined through this id, and returns
    /// the number of events the kernel reported for the membership (they
    /// also count in [`destroy`](Self::destroy)'s answer); its unreported
    /// events are discarded. Detach the QP from the group too
    /// ([`QueuePair::detach_mcast`](crate::QueuePair::detach_mcast)): the
    /// kernel does not. A group this id has not joined:
    /// [`Error::InvalidInput`], nothing sent. Destroying the id leaves
    /// every group it joined.
    #[doc(alias = "rdma_leave_multicast")]
    pub fn leave_multicast(&self, group: SocketAddr) -> Result<u32, Error> {
        self.leave_membership(group).map(|(_, reported)| reported)
    }

    /// [`leave_multicast`](Self::leave_multicast), answering the membership
    /// left too (the tokio channel ends its route).
    pub(crate) fn leave_membership(&self, group: SocketAddr) -> Result<(Membership, u32), Error> {
        let op = Op::CmLeaveMulticast;
        self.channel.check_process(op)?;
        let mut joined = self.joined();
        let Some(at) = joined.iter().position(|m| m.group == group) else {
            return Err(self.channel.input(op, "this id has not joined the group"));
        };
        let member = joined[at];
        let resp = self.channel.run(&LeaveMcast::new(member.handle), op)?;
        joined.remove(at);
        self.channel.unregister(member.uid);
        Ok((member, resp.events_reported))
    }

    /// The groups joined through this id and not left.
    pub fn memberships(&self) -> Vec<Membership> {
        self.joined().clone()
    }

    fn joined(&self) -> MutexGuard<'_, Vec<Membership>> {
        // The list stays consistent even if a holder panicked.
        self.memberships.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets every membership: the kernel leaves them with the id.
    fn forget_memberships(&self) {
        for m in self.joined().drain(..) {
            self.channel.unregister(m.uid);
        }
    }

    /// Sets an option (`SET_OPTION`).
    #[doc(alias = "rdma_set_option")]
    pub fn set_option(&self, option: CmOption) -> Result<(), Error> {
        let cmd = SetOption::new(self.handle, option);
        self.channel.run(&cmd, Op::CmSetOption)
    }

    /// Reports a QP async event to the CM (`NOTIFY`).
    #[doc(alias = "rdma_notify")]
    pub fn notify(&self, event: u32) -> Result<(), Error> {
        let cmd = Notify::new(self.handle, event);
        self.channel.run(&cmd, Op::CmNotify)
    }

    /// Destroys the id (`DESTROY_ID`) and returns the number of events the
    /// kernel reported for it (see [`events_received`](Self::events_received);
    /// the kernel's count includes the events of the id's multicast
    /// memberships, which the channel counts under their own uids).
    /// Unreported events of the id are discarded; a listener's unreported
    /// connect requests are rejected and their ids destroyed.
    #[doc(alias = "rdma_destroy_id")]
    pub fn destroy(mut self) -> Result<u32, Error> {
        self.live = false;
        self.channel.unregister(self.uid);
        self.forget_memberships();
        let r = self
            .channel
            .run(&DestroyId::new(self.handle), Op::CmDestroyId)?;
        Ok(r.events_reported)
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        if self.live {
            self.channel.unregister(self.uid);
            self.forget_memberships();
            let _ = self
                .channel
                .run(&DestroyId::new(self.handle), Op::CmDestroyId);
        }
    }
}

/// A node GUID as the kernel answers it (network order), `None` for 0.
fn guid(raw: u64) -> Option<u64> {
    (raw != 0).then(|| u64::from_be(raw))
}

/// sysfs's `0011:2233:4455:6677` (host-order value).
pub(crate) fn parse_sysfs_guid(text: &str) -> Option<u64> {
    let hex: String = text.trim().split(':').collect();
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(&hex, 16).ok()
}

/// The [`QpAttr`] of `INIT_QP_ATTR`'s answer: each attribute its mask
/// names. Mask bits [`QpAttr`] cannot carry (current state, alternate path,
/// migration state, capacities, SQD notification, bits above 20) are
/// refused rather than dropped.
pub(crate) fn qp_attr_from_kernel(raw: &sys::ib_uverbs_qp_attr) -> Result<QpAttr, &'static str> {
    use crate::command::QpAttrMask as M;
    let mask = M::from_bits_retain(raw.qp_attr_mask);
    let supported = M::STATE
        | M::ACCESS_FLAGS
        | M::PKEY_INDEX
        | M::PORT
        | M::QKEY
        | M::AV
        | M::PATH_MTU
        | M::TIMEOUT
        | M::RETRY_CNT
        | M::RNR_RETRY
        | M::RQ_PSN
        | M::MAX_QP_RD_ATOMIC
        | M::MIN_RNR_TIMER
        | M::SQ_PSN
        | M::MAX_DEST_RD_ATOMIC
        | M::DEST_QPN;
    if !supported.contains(mask) {
        return Err("INIT_QP_ATTR answered attributes this crate's QpAttr cannot carry");
    }
    let mut attr = QpAttr::new();
    if mask.contains(M::STATE) {
        let state = u8::try_from(raw.qp_state)
            .ok()
            .and_then(QpState::from_raw)
            .ok_or("INIT_QP_ATTR answered an unknown QP state")?;
        attr = attr.state(state);
    }
    if mask.contains(M::ACCESS_FLAGS) {
        attr = attr.access_flags(AccessFlags::from_bits_retain(raw.qp_access_flags));
    }
    if mask.contains(M::PKEY_INDEX) {
        attr = attr.pkey_index(raw.pkey_index);
    }
    if mask.contains(M::PORT) {
        attr = attr.port(raw.port_num);
    }
    if mask.contains(M::QKEY) {
        attr = attr.qkey(raw.qkey);
    }
    if mask.contains(M::AV) {
        let ah = &raw.ah_attr;
        attr = attr.av(sys::ib_uverbs_qp_dest {
            dgid: ah.grh.dgid,
            flow_label: ah.grh.flow_label,
            dlid: ah.dlid,
            reserved: 0,
            sgid_index: ah.grh.sgid_index,
            hop_limit: ah.grh.hop_limit,
            traffic_class: ah.grh.traffic_class,
            sl: ah.sl,
            src_path_bits: ah.src_path_bits,
            static_rate: ah.static_rate,
            is_global: ah.is_global,
            port_num: ah.port_num,
        });
    }
    if mask.contains(M::PATH_MTU) {
        let mtu = match raw.path_mtu {
            1 => Mtu::Mtu256,
            2 => Mtu::Mtu512,
            3 => Mtu::Mtu1024,
            4 => Mtu::Mtu2048,
            5 => Mtu::Mtu4096,
            _ => return Err("INIT_QP_ATTR answered an unknown path MTU"),
        };
        attr = attr.path_mtu(mtu);
    }
    if mask.contains(M::TIMEOUT) {
        attr = attr.timeout(raw.timeout);
    }
    if mask.contains(M::RETRY_CNT) {
        attr = attr.retry_cnt(raw.retry_cnt);
    }
    if mask.contains(M::RNR_RETRY) {
        attr = attr.rnr_retry(raw.rnr_retry);
    }
    if mask.contains(M::RQ_PSN) {
        attr = attr.rq_psn(raw.rq_psn);
    }
    if mask.contains(M::MAX_QP_RD_ATOMIC) {
        attr = attr.max_rd_atomic(raw.max_rd_atomic);
    }
    if mask.contains(M::MIN_RNR_TIMER) {
        attr = attr.min_rnr_timer(raw.min_rnr_timer);
    }
    if mask.contains(M::SQ_PSN) {
        attr = attr.sq_psn(raw.sq_psn);
    }
    if mask.contains(M::MAX_DEST_RD_ATOMIC) {
        attr = attr.max_dest_rd_atomic(raw.max_dest_rd_atomic);
    }
    if mask.contains(M::DEST_QPN) {
        attr = attr.dest_qpn(raw.dest_qp_num);
    }
    Ok(attr)
}
