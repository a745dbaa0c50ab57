//! The connection manager under tokio: an [`AsyncEventChannel`] that hands
//! each event to the id it is about, and the waits of a connection as
//! futures: [`resolve`](AsyncEventChannel::resolve), [`connect`](AsyncCmId::connect),
//! [`Listener::accept`], [`ConnectRequest::accept`],
//! [`disconnect`](AsyncCmId::disconnect), and any id's
//! [`next_event`](AsyncCmId::next_event) (or [`events`](AsyncCmId::events), a
//! `Stream`).
//!
//! **Routing.** Every id of one channel reports its events on the channel's
//! one descriptor. Whichever future is being polled reads it (when tokio's
//! reactor says it is readable) and routes each event by its uid: its own
//! is returned, another id's is kept for that id and its waiters woken.
//! Several ids' futures can wait on one channel at once, from any tasks.
//! An event for an id this channel does not know (an id of the blocking
//! [`EventChannel`] never [adopted](AsyncEventChannel::adopt), or one
//! dropped meanwhile) is dropped and counted
//! ([`discarded_events`](AsyncEventChannel::discarded_events)).
//!
//! **Cancellation.** Every future may be dropped at any await point; no cm
//! id leaks. The futures that create an id or consume one
//! ([`resolve`](AsyncEventChannel::resolve), [`connect`](AsyncCmId::connect),
//! [`ConnectRequest::accept`]) destroy it when dropped (the kernel then
//! rejects or disconnects the peer); dropping an id discards its unread
//! events (a connect request among them destroys the request's id, which
//! rejects that peer); dropping a [`Listener`] destroys its pending
//! requests. A dropped [`Listener::accept`] or [`next_event`](AsyncCmId::next_event)
//! loses nothing: an event is taken from the kernel only inside a poll that
//! returns it or keeps it for its id.
//!
//! **Nothing blocks a thread**: every kernel call made here is a
//! non-blocking command `write()` (the channel's descriptor is
//! non-blocking; `QP` state changes are single commands), and waiting is
//! tokio's. The exception is siw's `CONNECT`, which makes its TCP
//! connection inside the call (quick to a listening peer, see
//! `docs/connection-manager.md`).
//!
//! **RC only** for [`connect`](AsyncCmId::connect) and
//! [`ConnectRequest::accept`]: they move the QP through the states the cm
//! answers, as `tests/common/cm.rs` does by hand: RoCE's client QP to INIT
//! before the request, INIT, RTR and RTS on `CONNECT_RESPONSE`, then the
//! RTU; iWARP's QP to INIT and the kernel's CM does the rest (learnt on
//! `ESTABLISHED`); the server's INIT, RTR and RTS before `ACCEPT`.
//!
//! **In a forked child** every call answers [`Error::ForeignProcess`]
//! before touching anything (no command, no read, no lock, no reactor
//! call); dropping a channel there leaves the parent's reactor registration
//! alone.
//!
//! ```no_run
//! use std::time::Duration;
//! use uverbs::cm::ConnParam;
//! use uverbs::command::{QpType};
//! use uverbs::tokio::cm::{AsyncEventChannel, CmError};
//! use uverbs::QpInit;
//!
//! # async fn server() -> Result<(), Box<dyn std::error::Error>> {
//! let ch = AsyncEventChannel::open()?;
//! let listener = ch.listen("0.0.0.0:7471".parse()?, 8)?;
//! let request = listener.accept().await?;
//! // The request's id knows its device: open it, make the QP there.
//! let ctx = request.id().open_device()?;
//! let (pd, cq) = (ctx.alloc_pd()?, ctx.create_cq(16, None)?);
//! let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq))?;
//! let (conn, _peer) = request.accept(&qp, ConnParam::new(qp.qp_num())).await?;
//! // ... post_send / post_recv on qp ...
//! conn.disconnect().await?;
//! # Ok(()) }
//!
//! # async fn client() -> Result<(), Box<dyn std::error::Error>> {
//! let ch = AsyncEventChannel::open()?;
//! let id = ch.resolve("192.0.2.1:7471".parse()?, Duration::from_secs(2)).await?;
//! let ctx = id.open_device()?; // the device the route goes through
//! let (pd, cq) = (ctx.alloc_pd()?, ctx.create_cq(16, None)?);
//! let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq))?;
//! // Bounded like any future: a timeout drops it, which destroys the id.
//! let connecting = id.connect(&qp, ConnParam::new(qp.qp_num()));
//! match tokio::time::timeout(Duration::from_secs(5), connecting).await {
//!     Ok(Ok((conn, peer))) => { /* connected; peer.private_data */ drop(conn) }
//!     Ok(Err(CmError::Rejected { status, .. })) => println!("rejected ({status})"),
//!     Ok(Err(e)) => return Err(e.into()),
//!     Err(_elapsed) => println!("no answer within 5 s; the id is gone"),
//! }
//! # Ok(()) }
//! ```

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::AsyncSource;
use crate::cm::channel::next_uid;
use crate::cm::handshake::{
    before_accept, before_connect, expect_event, millis, on_accept_answer, on_connect_answer,
};
pub use crate::cm::CmError;
use crate::cm::{
    CmId, ConnParam, Event, EventChannel, EventKind, Membership, Param, PeerParam, PortSpace,
    RejectReason,
};
use crate::connectable::Connectable;
use crate::error::{Errno, Error, Op};

/// An id's place on the channel: its unread events and who waits for them.
struct Route {
    /// Events read for this id, oldest first, not yet handed out.
    stash: VecDeque<Event>,
    /// Woken when an event is stashed here.
    notify: Arc<Notify>,
    /// A `DISCONNECTED` was read for this id (its next `DISCONNECT` is the
    /// DREP, after which no `DISCONNECTED` follows).
    disconnected: bool,
}

struct Shared {
    /// The channel (also inside `source`), for commands and the process check.
    channel: EventChannel,
    /// The descriptor registered with tokio (left registered, not removed
    /// from the parent's epoll, when dropped in a forked child: see
    /// [`AsyncSource`]'s drop).
    source: AsyncSource<EventChannel>,
    /// Routes by uid.
    routes: Mutex<HashMap<u64, Route>>,
    /// Events dropped for want of a route.
    discarded: AtomicU64,
}

/// An rdma_cm event channel under tokio: its descriptor registered with
/// the runtime's reactor, its events routed to the [`AsyncCmId`]s created
/// on (or [adopted](Self::adopt) by) it. Cloning gives another handle.
#[doc(alias = "rdma_event_channel")]
#[derive(Clone)]
pub struct AsyncEventChannel {
    shared: Arc<Shared>,
}

impl fmt::Debug for AsyncEventChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncEventChannel")
            .field("channel", &self.shared.channel)
            .finish_non_exhaustive()
    }
}

impl AsyncEventChannel {
    /// Opens `/dev/infiniband/rdma_cm` ([`EventChannel::open`]) and
    /// registers it with the current runtime.
    #[doc(alias = "rdma_create_event_channel")]
    pub fn open() -> Result<Self, Error> {
        Self::new(EventChannel::open()?)
    }

    /// Registers `channel` with the current tokio runtime (`ENOSYS` outside
    /// one). Its ids made here, or adopted, get their events; events of
    /// other ids of the channel are discarded from now on. One
    /// `AsyncEventChannel` per channel (the reactor refuses a descriptor
    /// twice, `EEXIST`): clone it to share it.
    pub fn new(channel: EventChannel) -> Result<Self, Error> {
        channel.check_process(Op::CmGetEvent)?;
        let source = AsyncSource::new(channel.clone())?;
        Ok(AsyncEventChannel {
            shared: Arc::new(Shared {
                channel,
                source,
                routes: Mutex::new(HashMap::new()),
                discarded: AtomicU64::new(0),
            }),
        })
    }

    /// The blocking channel underneath.
    pub fn channel(&self) -> &EventChannel {
        &self.shared.channel
    }

    /// Creates an id in port space `ps` whose events come here.
    #[doc(alias = "rdma_create_id")]
    pub fn create_id(&self, ps: PortSpace) -> Result<AsyncCmId, Error> {
        let id = self.shared.channel.create_id(ps)?;
        Ok(self.route(id))
    }

    /// Takes over `id`, an id of this channel (created on it with the
    /// blocking API, or a connect request's read with [`AsyncCmId::next_event`]):
    /// its events come to the returned [`AsyncCmId`] from now on.
    pub fn adopt(&self, id: CmId) -> Result<AsyncCmId, Error> {
        self.shared.channel.check_process(Op::CmCreateId)?;
        if !id.channel().same_as(&self.shared.channel) {
            return Err(self
                .shared
                .channel
                .input(Op::CmCreateId, "the id belongs to another event channel"));
        }
        Ok(self.route(id))
    }

    /// A new TCP-port-space (RC) id with its address and route to `dst`
    /// resolved: `RESOLVE_ADDR` → `ADDR_RESOLVED`, `RESOLVE_ROUTE` →
    /// `ROUTE_RESOLVED`, each given `timeout` in the kernel. Next: make a
    /// QP on the id's device, then [`connect`](AsyncCmId::connect).
    /// Dropping the future destroys the id.
    #[doc(alias = "rdma_resolve_addr")]
    #[doc(alias = "rdma_resolve_route")]
    pub async fn resolve(&self, dst: SocketAddr, timeout: Duration) -> Result<AsyncCmId, CmError> {
        self.create_id(PortSpace::Tcp)?
            .resolve(None, dst, timeout)
            .await
    }

    /// A listener: a TCP-port-space id bound to `addr` (port 0: the kernel
    /// picks one, see [`Listener::local_addr`]) and listening with
    /// `backlog`.
    #[doc(alias = "rdma_listen")]
    pub fn listen(&self, addr: SocketAddr, backlog: u32) -> Result<Listener, Error> {
        let id = self.create_id(PortSpace::Tcp)?;
        id.bind(addr)?;
        id.listen(backlog)?;
        Ok(Listener { id })
    }

    /// Events read that no id of this channel was there for (dropped;
    /// a connect request's id among them destroyed).
    pub fn discarded_events(&self) -> u64 {
        self.shared.discarded.load(Ordering::Relaxed)
    }

    /// The ids whose events this channel routes (the live [`AsyncCmId`]s,
    /// listeners and pending requests included).
    pub fn routed_ids(&self) -> usize {
        self.shared.routes.lock().len()
    }

    fn route(&self, id: CmId) -> AsyncCmId {
        let notify = self.add_route(id.uid());
        AsyncCmId {
            id: Some(id),
            ch: self.clone(),
            notify,
        }
    }

    /// Routes `uid`'s events (an id's or a multicast membership's) to a
    /// stash of their own.
    fn add_route(&self, uid: u64) -> Arc<Notify> {
        let notify = Arc::new(Notify::new());
        self.shared.routes.lock().insert(
            uid,
            Route {
                stash: VecDeque::new(),
                notify: notify.clone(),
                disconnected: false,
            },
        );
        notify
    }

    /// Ends the routes of `id` and of its multicast memberships; their
    /// unread events are dropped here, after the lock is released (a
    /// connect request's id among them is destroyed).
    fn unroute_id(&self, id: &CmId) {
        drop(self.unroute(id.uid()));
        for m in id.memberships() {
            drop(self.unroute(m.uid()));
        }
    }

    /// Removes `uid`'s route; its unread events are dropped by the caller,
    /// outside the lock.
    fn unroute(&self, uid: u64) -> Option<Route> {
        self.shared.routes.lock().remove(&uid)
    }

    fn source(&self) -> &AsyncSource<EventChannel> {
        &self.shared.source
    }

    /// `uid`'s oldest unread event.
    fn take(&self, uid: u64) -> Option<Event> {
        self.shared
            .routes
            .lock()
            .get_mut(&uid)
            .and_then(|r| r.stash.pop_front())
    }

    /// Routes `ev`, read by a waiter for `want`: the waiter's own oldest
    /// event comes back (this one, or one stashed before it); another id's
    /// is stashed and its waiters woken; an unknown id's dropped.
    fn deliver(&self, want: u64, ev: Event) -> Option<Event> {
        let mut unrouted = None;
        let mine = {
            let mut routes = self.shared.routes.lock();
            match routes.get_mut(&ev.uid) {
                Some(route) => {
                    let target = ev.uid;
                    if matches!(ev.kind, EventKind::Disconnected) {
                        route.disconnected = true;
                    }
                    route.stash.push_back(ev);
                    if target == want {
                        route.stash.pop_front()
                    } else {
                        route.notify.notify_waiters();
                        None
                    }
                }
                None => {
                    unrouted = Some(ev);
                    None
                }
            }
        };
        if let Some(ev) = unrouted {
            self.shared.discarded.fetch_add(1, Ordering::Relaxed);
            // Outside the lock: a connect request's id is destroyed here.
            drop(ev);
        }
        mine
    }

    /// The next event for `uid`, reading the channel while none is
    /// stashed. Cancel-safe: an event read is returned or stashed in the
    /// same poll.
    async fn next_for(&self, uid: u64, notify: &Notify) -> Result<Event, Error> {
        self.shared.channel.check_process(Op::CmGetEvent)?;
        loop {
            // Registered before the stash is looked at: an event stashed
            // after the look wakes this wait.
            let notified = notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(ev) = self.take(uid) {
                return Ok(ev);
            }
            tokio::select! {
                biased;
                () = &mut notified => {}
                read = self.source().next_event() => {
                    if let Some(ev) = self.deliver(uid, read?) {
                        return Ok(ev);
                    }
                }
            }
        }
    }

    /// [`next_for`](Self::next_for) without waiting.
    fn try_next_for(&self, uid: u64) -> Result<Option<Event>, Error> {
        self.shared.channel.check_process(Op::CmGetEvent)?;
        loop {
            if let Some(ev) = self.take(uid) {
                return Ok(Some(ev));
            }
            match self.shared.channel.try_get_event()? {
                None => return Ok(None),
                Some(ev) => {
                    if let Some(ev) = self.deliver(uid, ev) {
                        return Ok(Some(ev));
                    }
                }
            }
        }
    }
}

/// A cm id whose events arrive through an [`AsyncEventChannel`]. Dropping
/// it discards its unread events and destroys it.
///
/// The blocking [`CmId`]'s queries and commands that start no wait
/// (`init_qp_attr`, `query_route`, `matching_devices`, `bind`,
/// `set_option`, ...) are reached through `Deref`; the ones that wait for
/// an event have async forms here.
#[doc(alias = "rdma_cm_id")]
pub struct AsyncCmId {
    /// `None` only once taken by `destroy` or `into_inner`.
    id: Option<CmId>,
    ch: AsyncEventChannel,
    notify: Arc<Notify>,
}

impl fmt::Debug for AsyncCmId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncCmId").field("id", &self.id).finish()
    }
}

impl Deref for AsyncCmId {
    type Target = CmId;

    fn deref(&self) -> &CmId {
        self.id
            .as_ref()
            .expect("the id is there until destroy or into_inner")
    }
}

impl Drop for AsyncCmId {
    fn drop(&mut self) {
        let Some(id) = &self.id else { return };
        // In a forked child: no lock (a parent thread may have held it at
        // fork) and no command (the id's own drop sends nothing there).
        if id.channel().is_owned_by_this_process() {
            self.ch.unroute_id(id);
        }
    }
}

impl AsyncCmId {
    /// The channel its events come through.
    pub fn async_channel(&self) -> &AsyncEventChannel {
        &self.ch
    }

    /// The id's next event, waiting without blocking the thread.
    /// Cancel-safe: dropping the future loses no event.
    #[doc(alias = "rdma_get_cm_event")]
    pub async fn next_event(&self) -> Result<Event, Error> {
        self.ch.next_for(self.uid(), &self.notify).await
    }

    /// [`CmId::join_multicast`], with the membership's events routed to a
    /// stash of their own: read them with
    /// [`next_multicast_event`](Self::next_multicast_event) (the id's
    /// [`next_event`](Self::next_event) does not see them).
    #[doc(alias = "rdma_join_multicast")]
    pub fn join_multicast(&self, group: SocketAddr, send_only: bool) -> Result<Membership, Error> {
        let uid = next_uid();
        // Routed before the join: another waiter may read its event first.
        drop(self.ch.add_route(uid));
        self.join_multicast_as(uid, group, send_only)
            .inspect_err(|_| drop(self.ch.unroute(uid)))
    }

    /// The next event of `member` (`MULTICAST_JOIN`, `MULTICAST_ERROR`),
    /// joined through this id's [`join_multicast`](Self::join_multicast).
    /// Cancel-safe. A membership not routed here: [`Error::InvalidInput`].
    pub async fn next_multicast_event(&self, member: &Membership) -> Result<Event, Error> {
        let notify = self
            .ch
            .shared
            .routes
            .lock()
            .get(&member.uid())
            .map(|r| r.notify.clone());
        let Some(notify) = notify else {
            let why = "the membership was not joined through this AsyncCmId, or was left";
            return Err(self.channel().input(Op::CmGetEvent, why));
        };
        self.ch.next_for(member.uid(), &notify).await
    }

    /// [`CmId::leave_multicast`], ending the membership's route (its
    /// unread events are dropped).
    #[doc(alias = "rdma_leave_multicast")]
    pub fn leave_multicast(&self, group: SocketAddr) -> Result<u32, Error> {
        let (member, reported) = self.leave_membership(group)?;
        drop(self.ch.unroute(member.uid()));
        Ok(reported)
    }

    /// The id's next event if one is there, else `Ok(None)` at once.
    pub fn try_next_event(&self) -> Result<Option<Event>, Error> {
        self.ch.try_next_for(self.uid())
    }

    /// The id's events as a [`Stream`](futures_core::Stream) (never ends;
    /// an error is an item).
    pub fn events(&self) -> EventStream<'_> {
        EventStream {
            id: self,
            pending: None,
        }
    }

    /// Resolves the address (`RESOLVE_ADDR`, from `src` when given) and
    /// route (`RESOLVE_ROUTE`) to `dst`, each with `timeout` in the
    /// kernel, and returns the id once `ROUTE_RESOLVED` came. Dropping the
    /// future destroys the id.
    #[doc(alias = "rdma_resolve_addr")]
    #[doc(alias = "rdma_resolve_route")]
    pub async fn resolve(
        self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<Self, CmError> {
        self.resolve_addr(src, dst, millis(timeout))?;
        let ev = self.next_event().await?;
        expect_event(Op::CmResolveAddr, ev, |k| {
            matches!(k, EventKind::AddrResolved)
        })?;
        self.resolve_route(millis(timeout))?;
        let ev = self.next_event().await?;
        expect_event(Op::CmResolveRoute, ev, |k| {
            matches!(k, EventKind::RouteResolved)
        })?;
        Ok(self)
    }

    /// Connects `qp` (RC, on the id's device; in RESET or INIT) with
    /// `param` (its [`ConnParam::new`] number is `qp`'s), and returns the
    /// connected id and what the peer accepted with.
    ///
    /// RoCE/IB: the QP to INIT, `CONNECT`, `CONNECT_RESPONSE`, the QP to
    /// INIT (again: now with the peer's resources), RTR and RTS, then
    /// `rdma_establish` (the RTU). iWARP: the QP to INIT, `CONNECT`,
    /// `ESTABLISHED` (the kernel's CM has moved the QP to RTS: learnt with
    /// [`Connectable::established`]).
    ///
    /// `REJECTED` is [`CmError::Rejected`], `UNREACHABLE` and
    /// `CONNECT_ERROR` [`CmError::Failed`]. The answer may take long
    /// (RoCE's IB CM retries an unanswered request for over a minute):
    /// bound it with `tokio::time::timeout`. Dropping the future destroys
    /// the id.
    #[doc(alias = "rdma_connect")]
    #[doc(alias = "rdma_establish")]
    pub async fn connect<Q: Connectable + ?Sized>(
        self,
        qp: &Q,
        param: ConnParam,
    ) -> Result<(Self, PeerParam), CmError> {
        self.channel().check_process(Op::CmConnect)?;
        before_connect(&self, qp)?;
        CmId::connect(&self, &param)?;
        let ev = self.next_event().await?;
        let peer = on_connect_answer(&self, qp, ev)?;
        Ok((self, peer))
    }

    /// Disconnects (`DISCONNECT`) and waits for this id's `DISCONNECTED`.
    ///
    /// Initiating, this is the DREQ and the wait ends when the peer
    /// answers. After the peer's DREQ (a `DISCONNECTED` read for this id,
    /// whether [`next_event`](Self::next_event) handed it out or not: an
    /// unread one is taken here) it is the DREP and returns at once. Other
    /// events of the id arriving meanwhile are dropped, except
    /// `DEVICE_REMOVAL`, an error. Dropping the future leaves the
    /// `DISCONNECTED` to come for [`next_event`](Self::next_event).
    #[doc(alias = "rdma_disconnect")]
    pub async fn disconnect(&self) -> Result<(), CmError> {
        self.channel().check_process(Op::CmDisconnect)?;
        let seen = {
            let mut routes = self.ch.shared.routes.lock();
            match routes.get_mut(&self.uid()) {
                Some(route) => {
                    if let Some(at) = route
                        .stash
                        .iter()
                        .position(|e| matches!(e.kind, EventKind::Disconnected))
                    {
                        route.stash.remove(at);
                    }
                    route.disconnected
                }
                None => false,
            }
        };
        CmId::disconnect(self)?;
        if seen {
            return Ok(());
        }
        loop {
            let ev = self.next_event().await?;
            match ev.kind {
                EventKind::Disconnected => return Ok(()),
                EventKind::DeviceRemoval => return Err(CmError::from_event(Op::CmDisconnect, ev)),
                _ => {}
            }
        }
    }

    /// Destroys the id (`DESTROY_ID`), dropping its unread events, and
    /// returns the events the kernel reported for it.
    #[doc(alias = "rdma_destroy_id")]
    pub fn destroy(mut self) -> Result<u32, Error> {
        let id = self.take_id()?;
        id.destroy()
    }

    /// The blocking id back; its events are no longer routed here (later
    /// ones are discarded: read them from the blocking channel only if no
    /// [`AsyncEventChannel`] is left on it).
    pub fn into_inner(mut self) -> Result<CmId, Error> {
        self.take_id()
    }

    fn take_id(&mut self) -> Result<CmId, Error> {
        self.channel().check_process(Op::CmDestroyId)?;
        self.ch.unroute_id(self);
        Ok(self.id.take().expect("the id is there until taken"))
    }
}

/// A pending [`AsyncCmId::next_event`], boxed.
type NextEvent<'a> = Pin<Box<dyn Future<Output = Result<Event, Error>> + Send + 'a>>;

/// The [`Stream`](futures_core::Stream) of an id's events
/// ([`AsyncCmId::events`]).
pub struct EventStream<'a> {
    id: &'a AsyncCmId,
    pending: Option<NextEvent<'a>>,
}

impl fmt::Debug for EventStream<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventStream")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl futures_core::Stream for EventStream<'_> {
    type Item = Result<Event, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        let id = self.id;
        let fut = self
            .pending
            .get_or_insert_with(|| Box::pin(id.next_event()));
        match fut.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(item) => {
                self.pending = None;
                Poll::Ready(Some(item))
            }
        }
    }
}

/// A listening id ([`AsyncEventChannel::listen`]). Dropping it destroys it
/// and the requests it has read but not handed out (their peers are
/// rejected); the kernel does the same with those it has not reported.
#[derive(Debug)]
pub struct Listener {
    id: AsyncCmId,
}

impl Listener {
    /// The next connection request. Cancel-safe: a request read while the
    /// future is dropped waits for the next call.
    ///
    /// An event other than a request (`DEVICE_REMOVAL`, `ADDR_CHANGE`) is
    /// [`CmError::Unexpected`]; the listener stays.
    pub async fn accept(&self) -> Result<ConnectRequest, CmError> {
        let ev = self.id.next_event().await?;
        match ev.kind {
            EventKind::ConnectRequest { id, param } => Ok(ConnectRequest {
                id: self.id.ch.route(id),
                param,
            }),
            _ => Err(CmError::from_event(Op::CmListen, ev)),
        }
    }

    /// The address it listens on (with the port the kernel picked for
    /// port 0).
    pub fn local_addr(&self) -> Result<SocketAddr, Error> {
        self.id
            .query_addr()?
            .src
            .ok_or_else(|| self.id.channel().err(Op::CmQuery, Errno::NOTCONN))
    }

    /// The listening id.
    pub fn id(&self) -> &AsyncCmId {
        &self.id
    }

    /// Destroys the listener ([`AsyncCmId::destroy`]).
    pub fn destroy(self) -> Result<u32, Error> {
        self.id.destroy()
    }
}

/// A connection request read by [`Listener::accept`]: the new id and the
/// requester's parameters. Accept it, reject it, or drop it (which
/// destroys the id: the requester is rejected).
#[derive(Debug)]
pub struct ConnectRequest {
    id: AsyncCmId,
    param: Param,
}

impl ConnectRequest {
    /// The request's id: its device (`open_device`, `query_route`) is
    /// where the QP to accept with must be made.
    pub fn id(&self) -> &AsyncCmId {
        &self.id
    }

    /// The requester's parameters.
    pub fn param(&self) -> &Param {
        &self.param
    }

    /// The requester's RC parameters (`None` for a UD request).
    pub fn peer(&self) -> Option<&PeerParam> {
        match &self.param {
            Param::Conn(p) => Some(p),
            Param::Ud(_) => None,
        }
    }

    /// The requester's private data (RoCE: the REQ's whole area, 56 bytes).
    pub fn private_data(&self) -> &[u8] {
        self.param.private_data()
    }

    /// Accepts with `qp` (RC, on the request's device, in RESET or a later
    /// state of the way): the QP to INIT, RTR and RTS with the cm's
    /// attributes (iWARP's RTS answer has no state: the kernel's CM moves
    /// it), `ACCEPT` with `param`, then `ESTABLISHED` (iWARP: the QP's RTS
    /// learnt). Returns the connected id and what `ESTABLISHED` carried.
    ///
    /// The requester giving up meanwhile is [`CmError::Rejected`] or
    /// [`CmError::Failed`]. Dropping the future destroys the id (the
    /// requester is rejected, or disconnected).
    #[doc(alias = "rdma_accept")]
    pub async fn accept<Q: Connectable + ?Sized>(
        self,
        qp: &Q,
        param: ConnParam,
    ) -> Result<(AsyncCmId, PeerParam), CmError> {
        let id = self.id;
        id.channel().check_process(Op::CmAccept)?;
        before_accept(&id, qp)?;
        CmId::accept(&id, &param)?;
        let ev = id.next_event().await?;
        let peer = on_accept_answer(qp, ev)?;
        Ok((id, peer))
    }

    /// Rejects the request (`REJECT`) with up to 148 bytes for the peer,
    /// and destroys its id.
    #[doc(alias = "rdma_reject")]
    pub fn reject(self, reason: RejectReason, private_data: &[u8]) -> Result<(), Error> {
        self.id.reject(reason, private_data)
    }

    /// The request's id, to drive by hand.
    pub fn into_id(self) -> AsyncCmId {
        self.id
    }
}

#[cfg(test)]
mod tests {
    //! Over [`FakeCm`](crate::cm::FakeCm): routing between concurrent
    //! waiters, a connect/accept/disconnect round with mock QPs,
    //! cancellation without leaks, typed errors, a forked child. Every
    //! wait is bounded.

    use std::task::{Wake, Waker};

    use tokio::time::timeout;
    use uverbs_uapi as sys;

    use super::*;
    use crate::cm::{event_number as raw, FakeCm};
    use crate::command::QpState;
    use crate::connectable::mock::MockQp;

    const WAIT: Duration = Duration::from_secs(2);
    /// How long a wait that must not end is given.
    const QUIET: Duration = Duration::from_millis(50);

    fn channel() -> (Arc<FakeCm>, AsyncEventChannel) {
        let fake = Arc::new(FakeCm::new().unwrap());
        let ch = AsyncEventChannel::new(EventChannel::with_fake(fake.clone())).unwrap();
        (fake, ch)
    }

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([192, 0, 2, 1], port))
    }

    /// A listener on `port` and a client id resolved to it, on `ch`.
    async fn listener_and_client(ch: &AsyncEventChannel, port: u16) -> (Listener, AsyncCmId) {
        let listener = ch.listen(addr(port), 4).unwrap();
        let client = ch.resolve(addr(port), WAIT).await.unwrap();
        (listener, client)
    }

    /// `fut` within [`WAIT`], or the test fails naming `what`.
    async fn bounded<T>(what: &str, fut: impl Future<Output = T>) -> T {
        timeout(WAIT, fut)
            .await
            .unwrap_or_else(|_| panic!("{what}: not within {WAIT:?}"))
    }

    #[tokio::test]
    async fn events_read_by_one_waiter_reach_the_other() {
        let (_fake, ch) = channel();
        let a = ch.create_id(PortSpace::Tcp).unwrap();
        let b = ch.create_id(PortSpace::Tcp).unwrap();
        // Queued in the kernel (the fake): a's event, then b's.
        a.resolve_addr(None, addr(1), 1000).unwrap();
        b.resolve_addr(None, addr(1), 1000).unwrap();
        // b's wait reads a's event first: kept for a.
        let ev = bounded("b", b.next_event()).await.unwrap();
        assert_eq!((ev.uid, ev.id), (b.uid(), b.handle()));
        assert!(matches!(ev.kind, EventKind::AddrResolved));
        let ev = a.try_next_event().unwrap().expect("a's event, stashed");
        assert_eq!((ev.uid, ev.id), (a.uid(), a.handle()));
        assert!(a.try_next_event().unwrap().is_none());
        assert!(b.try_next_event().unwrap().is_none());
        assert_eq!(ch.discarded_events(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_waiters_on_one_channel_each_get_their_own() {
        let (_fake, ch) = channel();
        let ids: Vec<Arc<AsyncCmId>> = (0..6)
            .map(|_| Arc::new(ch.create_id(PortSpace::Tcp).unwrap()))
            .collect();
        // Every id waits (in its own task) before any event exists.
        let waiters: Vec<_> = ids
            .iter()
            .map(|id| {
                let id = id.clone();
                tokio::spawn(async move {
                    let first = id.next_event().await.unwrap();
                    let second = id.next_event().await.unwrap();
                    (id.uid(), first, second)
                })
            })
            .collect();
        tokio::time::sleep(QUIET).await;
        // The events, in the reverse order of the ids, twice over.
        for id in ids.iter().rev() {
            id.resolve_addr(None, addr(2), 1000).unwrap();
        }
        for id in ids.iter().rev() {
            id.resolve_route(1000).unwrap();
        }
        for w in waiters {
            let (uid, first, second) = bounded("a waiter", w).await.unwrap();
            assert_eq!((first.uid, second.uid), (uid, uid));
            assert!(matches!(first.kind, EventKind::AddrResolved), "{first:?}");
            assert!(
                matches!(second.kind, EventKind::RouteResolved),
                "{second:?}"
            );
        }
        assert_eq!(ch.discarded_events(), 0);
    }

    #[tokio::test]
    async fn connect_accept_disconnect() {
        let (fake, ch) = channel();
        let listener = ch.listen(addr(7471), 4).unwrap();
        assert_eq!(listener.local_addr().unwrap(), addr(7471));
        let client = bounded("resolve", ch.resolve(addr(7471), WAIT))
            .await
            .unwrap();
        let (qp_a, qp_b) = (MockQp::new(0x11), MockQp::new(0x22));
        let hello = ConnParam::new(0x11).private_data(b"hello").unwrap();
        let welcome = ConnParam::new(0x22).private_data(b"welcome").unwrap();
        let server_side = async {
            let request = listener.accept().await.unwrap();
            let peer = request.peer().unwrap();
            assert_eq!(peer.qp_num, 0x11);
            assert_eq!(&request.private_data()[..5], b"hello");
            request.accept(&qp_b, welcome).await.unwrap()
        };
        let ((client, response), (server, _)) = bounded("connect and accept", async {
            tokio::join!(
                async { client.connect(&qp_a, hello).await.unwrap() },
                server_side
            )
        })
        .await;
        assert_eq!(response.qp_num, 0x22);
        assert_eq!(&response.private_data[..7], b"welcome");
        use QpState::*;
        assert_eq!(
            qp_a.moves(),
            [Some(Init), Some(Init), Some(Rtr), Some(Rts)],
            "the client's QP: INIT before the request, INIT, RTR, RTS after the response"
        );
        assert_eq!(qp_b.moves(), [Some(Init), Some(Rtr), Some(Rts)]);
        // The RTU went out: ACCEPT without parameters.
        let accepts: Vec<sys::rdma_ucm_accept> = fake.requests(sys::RDMA_USER_CM_CMD_ACCEPT);
        assert_eq!(accepts.len(), 2);
        assert_eq!(
            (accepts[0].uid, accepts[0].conn_param.valid),
            (server.uid(), 1)
        );
        assert_eq!(accepts[1].conn_param.valid, 0);

        // The client's DREQ; the server hears it, its disconnect is the
        // DREP (returning at once), and then the client's wait ends.
        bounded("disconnect", async {
            tokio::join!(async { client.disconnect().await.unwrap() }, async {
                let ev = server.next_event().await.unwrap();
                assert!(matches!(ev.kind, EventKind::Disconnected), "{ev:?}");
                server.disconnect().await.unwrap();
            })
        })
        .await;
        // Once down: a no-op, and no wait.
        bounded("again", server.disconnect()).await.unwrap();
        assert_eq!(ch.discarded_events(), 0);
        assert_eq!((fake.live_ids(), ch.routed_ids()), (3, 3));
        // The kernel's count is the channel's: address, route, response,
        // disconnected.
        assert_eq!(client.events_received(), 4);
        assert_eq!(client.destroy().unwrap(), 4);
        drop((server, listener));
        assert_eq!((fake.live_ids(), ch.routed_ids()), (0, 0));
    }

    #[tokio::test]
    async fn disconnect_unread_peer_dreq_is_answered_without_waiting() {
        let (fake, ch) = channel();
        let (listener, client) = listener_and_client(&ch, 7472).await;
        let (qp_a, qp_b) = (MockQp::new(0x11), MockQp::new(0x22));
        let (pa, pb) = (ConnParam::new(1), ConnParam::new(2));
        let (client, server) = bounded("connect", async {
            let (c, s) = tokio::join!(client.connect(&qp_a, pa), async {
                let r = listener.accept().await.unwrap();
                r.accept(&qp_b, pb).await
            });
            (c.unwrap().0, s.unwrap().0)
        })
        .await;
        // Both disconnect at once, neither having read anything: each
        // wait ends with its own DISCONNECTED.
        bounded("both disconnect", async {
            let (a, b) = tokio::join!(client.disconnect(), server.disconnect());
            a.unwrap();
            b.unwrap();
        })
        .await;
        drop((client, server, listener));
        assert_eq!(fake.live_ids(), 0);
    }

    #[tokio::test]
    async fn a_dropped_accept_loses_nothing_and_leaks_nothing() {
        let (fake, ch) = channel();
        let listener = ch.listen(addr(7473), 4).unwrap();
        let before = (fake.live_ids(), ch.routed_ids());
        // Nobody connects: the accept is pending when the timeout drops it.
        assert!(timeout(QUIET, listener.accept()).await.is_err());
        assert_eq!((fake.live_ids(), ch.routed_ids()), before);
        // A request that arrives afterwards is there for the next accept.
        let client = ch.resolve(addr(7473), WAIT).await.unwrap();
        let (qp_a, param) = (MockQp::new(1), ConnParam::new(1));
        let connecting = client.connect(&qp_a, param);
        let (connected, request) = bounded("accept after a dropped one", async {
            tokio::join!(connecting, async {
                let request = listener.accept().await.unwrap();
                // Dropping the request destroys its id: the client is
                // rejected (reason 28, consumer defined).
                drop(request);
            })
        })
        .await;
        let _: () = request;
        match connected {
            Err(CmError::Rejected { op, status, .. }) => {
                assert_eq!((op, status), (Op::CmConnect, 28))
            }
            other => panic!("{other:?}"),
        }
        drop(listener);
        assert_eq!((fake.live_ids(), ch.routed_ids()), (0, 0));
    }

    #[tokio::test]
    async fn a_dropped_connect_destroys_its_id_and_a_dropped_listener_its_requests() {
        let (fake, ch) = channel();
        let (listener, client) = listener_and_client(&ch, 7474).await;
        assert_eq!((fake.live_ids(), ch.routed_ids()), (2, 2));
        let qp = MockQp::new(1);
        // Nobody accepts: the connect is pending when the timeout drops it;
        // its wait read the listener's request and kept it for the listener.
        assert!(timeout(QUIET, client.connect(&qp, ConnParam::new(1)))
            .await
            .is_err());
        assert_eq!(ch.routed_ids(), 1, "the client's route is gone");
        // The client's id is destroyed; the request's id lives, stashed.
        assert_eq!(fake.live_ids(), 2);
        assert_eq!(fake.queued_events(), 0);
        // The listener dropped with the request unread: the request's id
        // goes too.
        drop(listener);
        assert_eq!((fake.live_ids(), ch.routed_ids()), (0, 0));
        assert_eq!(ch.discarded_events(), 0);
    }

    #[tokio::test]
    async fn a_dropped_id_discards_its_stashed_events() {
        let (fake, ch) = channel();
        let a = ch.create_id(PortSpace::Tcp).unwrap();
        let b = ch.create_id(PortSpace::Tcp).unwrap();
        a.resolve_addr(None, addr(3), 1000).unwrap();
        a.resolve_route(1000).unwrap();
        b.resolve_addr(None, addr(3), 1000).unwrap();
        // b reads a's two events on the way to its own.
        bounded("b", b.next_event()).await.unwrap();
        assert_eq!(fake.queued_events(), 0);
        assert_eq!(a.events_received(), 2);
        drop(a);
        assert_eq!((fake.live_ids(), ch.routed_ids()), (1, 1));
        // An event of an id the async channel does not route is dropped
        // when read (counted).
        let blocking = ch.channel().create_id(PortSpace::Tcp).unwrap();
        blocking.resolve_addr(None, addr(3), 1000).unwrap();
        b.resolve_route(1000).unwrap();
        let ev = bounded("b's route", b.next_event()).await.unwrap();
        assert!(matches!(ev.kind, EventKind::RouteResolved));
        assert_eq!(ch.discarded_events(), 1);
        // Adopted, an id's later events are its own.
        let adopted = ch.adopt(blocking).unwrap();
        adopted.resolve_route(1000).unwrap();
        let ev = bounded("adopted", adopted.next_event()).await.unwrap();
        assert!(matches!(ev.kind, EventKind::RouteResolved));
        // Another channel's id is refused.
        let (_other_fake, other) = channel();
        let foreign = other.channel().create_id(PortSpace::Tcp).unwrap();
        let err = ch.adopt(foreign).unwrap_err();
        assert_eq!(err.errno(), Some(Errno::INVAL));
    }

    #[tokio::test]
    async fn failures_are_typed() {
        let (fake, ch) = channel();
        // Nobody has the address: ADDR_ERROR, -ENETUNREACH.
        match ch.resolve("203.0.113.9:1".parse().unwrap(), WAIT).await {
            Err(e @ CmError::Failed { .. }) => {
                assert_eq!(e.op(), Op::CmResolveAddr);
                assert_eq!(e.errno(), Some(Errno::NETUNREACH));
                assert!(e.to_string().contains("RDMA_CM_EVENT_ADDR_ERROR"), "{e}");
                let io: std::io::Error = e.into();
                assert_eq!(io.raw_os_error(), None);
                assert_eq!(io.kind(), std::io::ErrorKind::NetworkUnreachable);
            }
            other => panic!("{other:?}"),
        }
        // A command refused: the crate's error, naming the command.
        fake.fail_next(sys::RDMA_USER_CM_CMD_RESOLVE_ROUTE, Errno::NOMEM);
        match ch.resolve(addr(4), WAIT).await {
            Err(CmError::Verbs(e)) => {
                assert_eq!(
                    (e.op(), e.errno()),
                    (Op::CmResolveRoute, Some(Errno::NOMEM))
                )
            }
            other => panic!("{other:?}"),
        }
        // Nobody listens: REJECTED, the IB CM's reason 8.
        let id = ch.resolve(addr(5), WAIT).await.unwrap();
        match bounded("connect", id.connect(&MockQp::new(1), ConnParam::new(1))).await {
            Err(e @ CmError::Rejected { status: 8, .. }) => {
                assert_eq!(
                    (e.op(), e.errno()),
                    (Op::CmConnect, Some(Errno::CONNREFUSED))
                )
            }
            other => panic!("{other:?}"),
        }
        // A reject with private data.
        let (listener, id) = listener_and_client(&ch, 6).await;
        let (qp, param) = (MockQp::new(1), ConnParam::new(1));
        let (connected, ()) = bounded("reject", async {
            tokio::join!(id.connect(&qp, param), async {
                let r = listener.accept().await.unwrap();
                r.reject(RejectReason::ConsumerDefined, b"busy").unwrap();
            })
        })
        .await;
        match connected {
            Err(CmError::Rejected {
                status: 28,
                private_data,
                ..
            }) => assert_eq!(&private_data[..4], b"busy"),
            other => panic!("{other:?}"),
        }
        // An event the listener cannot go on after.
        fake.inject_event(listener.id().handle(), raw::DEVICE_REMOVAL, 0);
        match bounded("accept", listener.accept()).await {
            Err(e @ CmError::Unexpected { .. }) => {
                assert_eq!(e.op(), Op::CmListen);
                assert!(e.to_string().contains("DEVICE_REMOVAL"), "{e}");
            }
            other => panic!("{other:?}"),
        }
        // ROUTE_ERROR and UNREACHABLE name their operation and errno.
        let id = ch.create_id(PortSpace::Tcp).unwrap();
        let timed_out = -Errno::TIMEDOUT.raw_os_error();
        fake.inject_event(id.handle(), raw::ROUTE_ERROR, timed_out);
        fake.inject_event(id.handle(), raw::UNREACHABLE, timed_out);
        for op in [Op::CmResolveRoute, Op::CmConnect] {
            let ev = bounded("injected", id.next_event()).await.unwrap();
            let e = CmError::from_event(op, ev);
            assert!(matches!(e, CmError::Failed { .. }), "{e:?}");
            assert_eq!((e.op(), e.errno()), (op, Some(Errno::TIMEDOUT)));
        }
    }

    #[tokio::test]
    async fn the_stream_yields_the_ids_events_in_order() {
        let (_fake, ch) = channel();
        let id = ch.create_id(PortSpace::Tcp).unwrap();
        id.resolve_addr(None, addr(8), 1000).unwrap();
        id.resolve_route(1000).unwrap();
        let mut events = id.events();
        async fn next(s: &mut EventStream<'_>) -> Option<Result<Event, Error>> {
            std::future::poll_fn(|cx| futures_core::Stream::poll_next(Pin::new(&mut *s), cx)).await
        }
        let first = bounded("first", next(&mut events)).await.unwrap().unwrap();
        let second = bounded("second", next(&mut events)).await.unwrap().unwrap();
        assert!(matches!(first.kind, EventKind::AddrResolved));
        assert!(matches!(second.kind, EventKind::RouteResolved));
        assert!(timeout(QUIET, next(&mut events)).await.is_err());
    }

    struct NoWake;
    impl Wake for NoWake {
        fn wake(self: Arc<Self>) {}
    }

    /// Polls `fut` once: a call refused before any wait is ready at once.
    fn poll_once<F: Future>(fut: F) -> Poll<F::Output> {
        let waker = Waker::from(Arc::new(NoWake));
        let mut cx = TaskContext::from_waker(&waker);
        let mut fut = std::pin::pin!(fut);
        fut.as_mut().poll(&mut cx)
    }

    fn foreign<T: fmt::Debug>(got: Poll<Result<T, CmError>>, op: Op) -> bool {
        match got {
            Poll::Ready(Err(CmError::Verbs(e @ Error::ForeignProcess { .. }))) => e.op() == op,
            _ => false,
        }
    }

    #[test]
    fn a_forked_child_touches_nothing_of_the_parents() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _guard = rt.enter();
        let (fake, ch) = channel();
        let listener = ch.listen(addr(9), 4).unwrap();
        let id = ch.create_id(PortSpace::Tcp).unwrap();
        id.resolve_addr(None, addr(9), 1000).unwrap();
        let (sent, queued) = (fake.commands().len(), fake.queued_events());
        // The child drops its copies; the parent keeps its own.
        let mut parents = Some((id, listener, ch));
        let child = || {
            let (id, listener, ch) = parents.take().expect("the parent's ids");
            let checks = [
                matches!(
                    ch.create_id(PortSpace::Tcp),
                    Err(Error::ForeignProcess { .. })
                ),
                matches!(id.try_next_event(), Err(Error::ForeignProcess { .. })),
                matches!(
                    poll_once(id.next_event()),
                    Poll::Ready(Err(Error::ForeignProcess { .. }))
                ),
                foreign(poll_once(listener.accept()), Op::CmGetEvent),
                foreign(poll_once(id.disconnect()), Op::CmDisconnect),
                foreign(poll_once(ch.resolve(addr(9), WAIT)), Op::CmCreateId),
            ];
            // Dropped here: no command, no deregistration.
            drop((id, listener, ch));
            let untouched = fake.commands().len() == sent && fake.queued_events() == queued;
            if checks.iter().all(|&c| c) && untouched {
                0
            } else {
                1
            }
        };
        // SAFETY: the child only calls this crate's entry points (which
        // refuse at once) on its copies.
        let code = unsafe { crate::test_serial::in_child(child) };
        assert_eq!(code, 0, "1: a check failed in the child, 99: it panicked");
        let (id, listener, _ch) = parents.expect("the parent's ids");
        // The parent's event is still there, and its registration
        // with the reactor still wakes it.
        let ev = rt
            .block_on(timeout(WAIT, id.next_event()))
            .expect("the parent's wait ends")
            .unwrap();
        assert!(matches!(ev.kind, EventKind::AddrResolved));
        drop((id, listener));
        assert_eq!(fake.live_ids(), 0);
    }

    #[tokio::test]
    async fn a_membership_has_a_route_of_its_own_until_it_is_left() {
        let (fake, ch) = channel();
        let id = ch.create_id(PortSpace::Udp).unwrap();
        id.bind(addr(0)).unwrap();
        let group = SocketAddr::from(([239, 1, 2, 3], 0));
        let member = id.join_multicast(group, false).unwrap();
        assert_eq!(ch.routed_ids(), 2, "the id and the membership");
        let ev = bounded("the join", id.next_multicast_event(&member))
            .await
            .unwrap();
        assert_eq!((ev.uid, ev.id), (member.uid(), member.handle()));
        assert!(matches!(ev.kind, EventKind::MulticastJoin(_)), "{ev:?}");
        assert!(id.try_next_event().unwrap().is_none(), "not the id's");
        assert_eq!(ch.discarded_events(), 0);

        assert_eq!(id.leave_multicast(group).unwrap(), 1);
        assert_eq!((ch.routed_ids(), fake.live_memberships()), (1, 0));
        let err = id.next_multicast_event(&member).await.unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err}");

        // A membership not left is unrouted with its id, and the kernel
        // leaves it with the id: dropped, or destroyed.
        id.join_multicast(group, false).unwrap();
        drop(id);
        assert_eq!((ch.routed_ids(), fake.live_memberships()), (0, 0));
        let id = ch.create_id(PortSpace::Udp).unwrap();
        id.bind(addr(0)).unwrap();
        id.join_multicast(group, true).unwrap();
        id.destroy().unwrap();
        assert_eq!((ch.routed_ids(), fake.live_memberships()), (0, 0));
    }
}
