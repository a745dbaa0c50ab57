//! A small client for the kernel's RDMA netlink interface (`NETLINK_RDMA`, the
//! `RDMA_NL_NLDEV` client), built on std and rustix only.
//!
//! Two questions are asked of the kernel:
//!
//! * [`copy_on_fork`]: does the kernel early-copy pinned pages at `fork()`
//!   (`RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK`, Linux 5.13 and later)? If so,
//!   `MADV_DONTFORK` is not needed for the parent's RDMA to stay correct.
//! * [`uverbs_chardev`]: which uverbs character device (and driver id, ABI)
//!   belongs to an IB device name such as `rxe0`.
//!
//! RDMA netlink messages carry no family header: attributes start right
//! after the `nlmsghdr`. Every reply is parsed defensively: a malformed or
//! truncated reply gives [`io::ErrorKind::InvalidData`], never a panic, and
//! every receive has a timeout so a silent kernel cannot hang the caller.
//!
//! On kernels without RDMA support the socket call itself fails
//! (`EPROTONOSUPPORT` or `EAFNOSUPPORT`); callers treat any error as
//! "unknown".

// The constants below mirror `include/uapi/rdma/rdma_netlink.h` and
// `include/uapi/linux/netlink.h` under their C names, so that they can later be
// replaced by imports from the `uverbs-uapi` crate without renaming.
// `uverbs_chardev` is wired into device discovery by another module.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rustix::net::netlink::SocketAddrNetlink;
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketAddrAny, SocketFlags, SocketType};

pub(crate) use uverbs_uapi::{
    RDMA_NLDEV_ATTR_CHARDEV, RDMA_NLDEV_ATTR_CHARDEV_ABI, RDMA_NLDEV_ATTR_CHARDEV_NAME,
    RDMA_NLDEV_ATTR_CHARDEV_TYPE, RDMA_NLDEV_ATTR_DEV_INDEX, RDMA_NLDEV_ATTR_DEV_NAME,
    RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID, RDMA_NLDEV_CMD_GET, RDMA_NLDEV_CMD_GET_CHARDEV,
    RDMA_NLDEV_CMD_SYS_GET, RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK, RDMA_NL_NLDEV,
};

/// Netlink protocol number of the RDMA subsystem.
pub(crate) const NETLINK_RDMA: u32 = uverbs_uapi::NETLINK_RDMA as u32;

const NLMSG_NOOP: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLMSG_OVERRUN: u16 = 4;

const NLM_F_REQUEST: u16 = 0x01;
const NLM_F_MULTI: u16 = 0x02;
const NLM_F_DUMP_INTR: u16 = 0x10;
const NLM_F_DUMP: u16 = 0x300;

const NLA_TYPE_MASK: u16 = !((1 << 15) | (1 << 14));

const NLMSG_HDRLEN: usize = 16;
const NLA_HDRLEN: usize = 4;

/// Receive buffer size. The kernel sizes dump datagrams to at most 32 KiB (or
/// a page, whichever is larger); anything bigger is reported via `MSG_TRUNC`
/// and rejected as invalid.
const RECV_BUF: usize = 64 * 1024;
/// Timeout of a single receive.
const RECV_TIMEOUT: Duration = Duration::from_secs(1);
/// Upper bound on the whole exchange, however chatty the kernel is.
const TOTAL_TIMEOUT: Duration = Duration::from_secs(3);
/// Upper bound on the number of datagrams one exchange may consume.
const MAX_DATAGRAMS: usize = 4096;
/// A dump interrupted by a concurrent change is retried this many times.
const DUMP_RETRIES: usize = 3;

/// `RDMA_NL_GET_TYPE(client, op)`.
pub(crate) const fn rdma_nl_get_type(client: u16, op: u16) -> u16 {
    (client << 10) + op
}

const fn nl_align(len: usize) -> usize {
    (len + 3) & !3
}

fn invalid(msg: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

static NEXT_SEQ: AtomicU32 = AtomicU32::new(1);

fn next_seq() -> u32 {
    NEXT_SEQ.fetch_add(1, Ordering::Relaxed)
}

/// Builder of one netlink request message.
struct Request {
    buf: Vec<u8>,
}

impl Request {
    fn new(msg_type: u16, flags: u16, seq: u32) -> Self {
        let mut buf = Vec::with_capacity(64);
        buf.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_len, patched in finish()
        buf.extend_from_slice(&msg_type.to_ne_bytes());
        buf.extend_from_slice(&flags.to_ne_bytes());
        buf.extend_from_slice(&seq.to_ne_bytes());
        buf.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_pid: the kernel fills it in
        Request { buf }
    }

    fn attr(&mut self, attr_type: u16, payload: &[u8]) -> &mut Self {
        let nla_len =
            u16::try_from(NLA_HDRLEN + payload.len()).expect("netlink attribute too large");
        self.buf.extend_from_slice(&nla_len.to_ne_bytes());
        self.buf.extend_from_slice(&attr_type.to_ne_bytes());
        self.buf.extend_from_slice(payload);
        self.buf.resize(nl_align(self.buf.len()), 0);
        self
    }

    fn attr_u32(&mut self, attr_type: u16, value: u32) -> &mut Self {
        self.attr(attr_type, &value.to_ne_bytes())
    }

    /// A NUL-terminated string attribute (`NLA_NUL_STRING`).
    fn attr_str(&mut self, attr_type: u16, value: &str) -> &mut Self {
        let mut bytes = Vec::with_capacity(value.len() + 1);
        bytes.extend_from_slice(value.as_bytes());
        bytes.push(0);
        self.attr(attr_type, &bytes)
    }

    /// Raw family header bytes (used with other netlink families in tests).
    #[cfg(test)]
    fn raw(&mut self, payload: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(payload);
        self.buf.resize(nl_align(self.buf.len()), 0);
        self
    }

    fn finish(mut self) -> Vec<u8> {
        let len = u32::try_from(self.buf.len()).expect("netlink message too large");
        self.buf[0..4].copy_from_slice(&len.to_ne_bytes());
        self.buf
    }
}

fn read_u16(bytes: &[u8], at: usize) -> Option<u16> {
    let b = bytes.get(at..at.checked_add(2)?)?;
    Some(u16::from_ne_bytes([b[0], b[1]]))
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
}

/// One message from a received datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Message<'a> {
    msg_type: u16,
    flags: u16,
    seq: u32,
    payload: &'a [u8],
}

/// Splits a datagram into netlink messages.
fn parse_messages(mut data: &[u8]) -> io::Result<Vec<Message<'_>>> {
    let mut out = Vec::new();
    while !data.is_empty() {
        let len = read_u32(data, 0).ok_or_else(|| invalid("truncated netlink header"))? as usize;
        if len < NLMSG_HDRLEN || len > data.len() {
            return Err(invalid("bad netlink message length"));
        }
        let msg_type = read_u16(data, 4).ok_or_else(|| invalid("truncated netlink header"))?;
        let flags = read_u16(data, 6).ok_or_else(|| invalid("truncated netlink header"))?;
        let seq = read_u32(data, 8).ok_or_else(|| invalid("truncated netlink header"))?;
        out.push(Message {
            msg_type,
            flags,
            seq,
            payload: &data[NLMSG_HDRLEN..len],
        });
        // The last message of a datagram need not be padded.
        data = data.get(nl_align(len)..).unwrap_or(&[]);
    }
    Ok(out)
}

/// Splits a message payload into `(type, value)` attributes. The `NLA_F_*`
/// flag bits are masked off the type.
pub(crate) fn parse_attrs(mut data: &[u8]) -> io::Result<Vec<(u16, &[u8])>> {
    let mut out = Vec::new();
    while !data.is_empty() {
        let len = read_u16(data, 0).ok_or_else(|| invalid("truncated netlink attribute"))? as usize;
        let attr_type = read_u16(data, 2).ok_or_else(|| invalid("truncated netlink attribute"))?;
        if len < NLA_HDRLEN || len > data.len() {
            return Err(invalid("bad netlink attribute length"));
        }
        out.push((attr_type & NLA_TYPE_MASK, &data[NLA_HDRLEN..len]));
        data = data.get(nl_align(len)..).unwrap_or(&[]);
    }
    Ok(out)
}

fn attr_u8(value: &[u8]) -> io::Result<u8> {
    value
        .first()
        .copied()
        .ok_or_else(|| invalid("empty u8 attribute"))
}

fn attr_u32(value: &[u8]) -> io::Result<u32> {
    match value {
        [a, b, c, d] => Ok(u32::from_ne_bytes([*a, *b, *c, *d])),
        _ => Err(invalid("u32 attribute of wrong size")),
    }
}

fn attr_u64(value: &[u8]) -> io::Result<u64> {
    let bytes: [u8; 8] = value
        .try_into()
        .map_err(|_| invalid("u64 attribute of wrong size"))?;
    Ok(u64::from_ne_bytes(bytes))
}

/// A u32 the kernel may also send as u64 (documented as u64, sent as u32).
fn attr_u32_or_u64(value: &[u8]) -> io::Result<u64> {
    match value.len() {
        4 => attr_u32(value).map(u64::from),
        8 => attr_u64(value),
        _ => Err(invalid("integer attribute of wrong size")),
    }
}

fn attr_string(value: &[u8]) -> io::Result<String> {
    let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
    String::from_utf8(value[..end].to_vec()).map_err(|_| invalid("attribute string is not UTF-8"))
}

/// Progress of a request/reply exchange.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Progress {
    /// More datagrams are expected.
    More,
    /// The exchange is complete.
    Done,
}

/// Reply state machine: feeds datagrams, hands data messages to a callback,
/// and recognises the end of the reply (`NLMSG_DONE`, `NLMSG_ERROR`, or a
/// single non-multipart data message).
pub(crate) struct ReplyReader {
    seq: u32,
    interrupted: bool,
}

impl ReplyReader {
    pub(crate) fn new(seq: u32) -> Self {
        ReplyReader {
            seq,
            interrupted: false,
        }
    }

    pub(crate) fn feed(
        &mut self,
        datagram: &[u8],
        on_msg: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> io::Result<Progress> {
        for msg in parse_messages(datagram)? {
            if msg.seq != self.seq {
                // A stale reply to an earlier request: not ours.
                continue;
            }
            if msg.flags & NLM_F_DUMP_INTR != 0 {
                self.interrupted = true;
            }
            match msg.msg_type {
                NLMSG_NOOP => {}
                NLMSG_ERROR => {
                    let code = read_u32(msg.payload, 0)
                        .ok_or_else(|| invalid("truncated netlink error message"))?
                        as i32;
                    if code == 0 {
                        return Ok(Progress::Done); // an acknowledgement
                    }
                    return Err(errno_error(code));
                }
                NLMSG_DONE => {
                    // A dump's DONE may carry a negative errno.
                    if let Some(code) = read_u32(msg.payload, 0) {
                        let code = code as i32;
                        if code < 0 {
                            return Err(errno_error(code));
                        }
                    }
                    return self.finish();
                }
                NLMSG_OVERRUN => return Err(invalid("netlink overrun")),
                _ => {
                    on_msg(msg.payload)?;
                    if msg.flags & NLM_F_MULTI == 0 {
                        return self.finish();
                    }
                }
            }
        }
        Ok(Progress::More)
    }

    fn finish(&self) -> io::Result<Progress> {
        if self.interrupted {
            Err(io::Error::new(
                io::ErrorKind::Interrupted,
                "netlink dump interrupted by a concurrent change",
            ))
        } else {
            Ok(Progress::Done)
        }
    }
}

fn errno_error(code: i32) -> io::Error {
    match code.checked_neg() {
        Some(errno) if errno > 0 => io::Error::from_raw_os_error(errno),
        _ => invalid("bad netlink error code"),
    }
}

fn open_socket(protocol: Option<rustix::net::Protocol>) -> io::Result<OwnedFd> {
    let fd = rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::RAW,
        SocketFlags::CLOEXEC,
        protocol,
    )?;
    rustix::net::sockopt::set_socket_timeout(
        &fd,
        rustix::net::sockopt::Timeout::Recv,
        Some(RECV_TIMEOUT),
    )?;
    rustix::net::sockopt::set_socket_timeout(
        &fd,
        rustix::net::sockopt::Timeout::Send,
        Some(RECV_TIMEOUT),
    )?;
    Ok(fd)
}

/// Sends one request on a fresh socket and feeds every data message of the
/// reply to `on_msg`.
fn exchange(
    msg_type: u16,
    flags: u16,
    build: impl FnOnce(&mut Request),
    on_msg: &mut dyn FnMut(&[u8]) -> io::Result<()>,
) -> io::Result<()> {
    let protocol = rustix::net::netlink::RDMA;
    debug_assert_eq!(protocol.as_raw().get(), NETLINK_RDMA);
    exchange_on(Some(protocol), msg_type, flags, build, on_msg)
}

/// [`exchange`] over any netlink protocol (`None` is `NETLINK_ROUTE`, on
/// which the transport is exercised in tests since every Linux kernel has it).
fn exchange_on(
    protocol: Option<rustix::net::Protocol>,
    msg_type: u16,
    flags: u16,
    build: impl FnOnce(&mut Request),
    on_msg: &mut dyn FnMut(&[u8]) -> io::Result<()>,
) -> io::Result<()> {
    let fd = open_socket(protocol)?;
    let seq = next_seq();
    let mut req = Request::new(msg_type, flags | NLM_F_REQUEST, seq);
    build(&mut req);
    let req = req.finish();
    let kernel = SocketAddrNetlink::new(0, 0);
    let sent = rustix::net::sendto(&fd, &req, SendFlags::empty(), &kernel)?;
    if sent != req.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "short netlink send",
        ));
    }

    let deadline = Instant::now() + TOTAL_TIMEOUT;
    let mut reader = ReplyReader::new(seq);
    let mut buf = vec![0u8; RECV_BUF];
    for _ in 0..MAX_DATAGRAMS {
        if Instant::now() > deadline {
            break;
        }
        let (got, full_len, from) = match rustix::net::recvfrom(&fd, &mut buf[..], RecvFlags::TRUNC)
        {
            Ok(r) => r,
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::AGAIN) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no reply from the kernel's RDMA netlink",
                ))
            }
            Err(e) => return Err(e.into()),
        };
        if !from_kernel(from) {
            continue;
        }
        if full_len > got {
            return Err(invalid("netlink reply larger than the receive buffer"));
        }
        if reader.feed(&buf[..got], on_msg)? == Progress::Done {
            return Ok(());
        }
    }
    Err(io::Error::new(
        io::ErrorKind::TimedOut,
        "RDMA netlink reply did not end in time",
    ))
}

/// Only the kernel (port id 0) may answer.
fn from_kernel(from: Option<SocketAddrAny>) -> bool {
    match from {
        Some(addr) => SocketAddrNetlink::try_from(addr).is_ok_and(|a| a.pid() == 0),
        None => true,
    }
}

/// Whether the kernel reports copy-on-fork semantics for pinned pages.
///
/// Sends `RDMA_NLDEV_CMD_SYS_GET` and looks for
/// `RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK`; an absent attribute means `false`
/// (kernels before 5.13). Errors (no RDMA in the kernel, timeouts, malformed
/// replies) mean "unknown" to callers.
pub(crate) fn copy_on_fork() -> io::Result<bool> {
    let mut found = false;
    exchange(
        rdma_nl_get_type(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_SYS_GET),
        0,
        |_| {},
        &mut |payload| {
            if let Some(v) = parse_copy_on_fork(payload)? {
                found = v;
            }
            Ok(())
        },
    )?;
    Ok(found)
}

pub(crate) fn parse_copy_on_fork(payload: &[u8]) -> io::Result<Option<bool>> {
    let mut result = None;
    for (attr_type, value) in parse_attrs(payload)? {
        if attr_type == RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK {
            result = Some(attr_u8(value)? != 0);
        }
    }
    Ok(result)
}

/// What the kernel reports about a device's uverbs character device
/// (`RDMA_NLDEV_CMD_GET_CHARDEV` with type `"uverbs"`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ChardevInfo {
    /// `RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID` (`enum rdma_driver_id`).
    pub(crate) driver_id: Option<u32>,
    /// `(major, minor)` decoded from `RDMA_NLDEV_ATTR_CHARDEV`.
    pub(crate) dev: Option<(u32, u32)>,
    /// `RDMA_NLDEV_ATTR_CHARDEV_ABI`: the driver's uverbs ABI version.
    pub(crate) abi: Option<u64>,
    /// `RDMA_NLDEV_ATTR_CHARDEV_NAME`, e.g. `uverbs0`.
    pub(crate) name: Option<String>,
}

/// Decodes the kernel's `huge_encode_dev` value into `(major, minor)`.
pub(crate) fn huge_decode_dev(v: u64) -> (u32, u32) {
    let major = ((v & 0xfff00) >> 8) as u32;
    let minor = ((v & 0xff) | ((v >> 12) & 0xfff00)) as u32;
    (major, minor)
}

/// Finds the uverbs character device of the IB device `ibdev`.
///
/// Returns `Ok(None)` when no device of that name exists.
pub(crate) fn uverbs_chardev(ibdev: &str) -> io::Result<Option<ChardevInfo>> {
    let Some(index) = find_device_index(ibdev)? else {
        return Ok(None);
    };
    let mut info = None;
    exchange(
        rdma_nl_get_type(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_GET_CHARDEV),
        0,
        |req| {
            req.attr_u32(RDMA_NLDEV_ATTR_DEV_INDEX, index)
                .attr_str(RDMA_NLDEV_ATTR_CHARDEV_TYPE, "uverbs");
        },
        &mut |payload| {
            info = Some(parse_chardev(payload)?);
            Ok(())
        },
    )?;
    info.map(Some)
        .ok_or_else(|| invalid("GET_CHARDEV reply without data"))
}

fn find_device_index(ibdev: &str) -> io::Result<Option<u32>> {
    let all = device_indexes()?;
    Ok(all
        .into_iter()
        .find(|(_, name)| name == ibdev)
        .map(|(i, _)| i))
}

/// The name of the RDMA device the kernel numbers `index` (the index a cm
/// id's `QUERY` answers as `ibdev_index`), `None` if there is none.
pub(crate) fn device_name_of_index(index: u32) -> io::Result<Option<String>> {
    let all = device_indexes()?;
    Ok(all.into_iter().find(|(i, _)| *i == index).map(|(_, n)| n))
}

/// Every RDMA device's kernel index and name (`RDMA_NLDEV_CMD_GET` dump).
fn device_indexes() -> io::Result<Vec<(u32, String)>> {
    let mut attempt = 0;
    loop {
        let mut found = Vec::new();
        let result = exchange(
            rdma_nl_get_type(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_GET),
            NLM_F_DUMP,
            |_| {},
            &mut |payload| {
                if let (Some(index), Some(name)) = parse_device(payload)? {
                    found.push((index, name));
                }
                Ok(())
            },
        );
        match result {
            Ok(()) => return Ok(found),
            Err(e) if e.kind() == io::ErrorKind::Interrupted && attempt + 1 < DUMP_RETRIES => {
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

pub(crate) fn parse_device(payload: &[u8]) -> io::Result<(Option<u32>, Option<String>)> {
    let mut index = None;
    let mut name = None;
    for (attr_type, value) in parse_attrs(payload)? {
        match attr_type {
            RDMA_NLDEV_ATTR_DEV_INDEX => index = Some(attr_u32(value)?),
            RDMA_NLDEV_ATTR_DEV_NAME => name = Some(attr_string(value)?),
            _ => {}
        }
    }
    Ok((index, name))
}

pub(crate) fn parse_chardev(payload: &[u8]) -> io::Result<ChardevInfo> {
    let mut info = ChardevInfo::default();
    for (attr_type, value) in parse_attrs(payload)? {
        match attr_type {
            RDMA_NLDEV_ATTR_CHARDEV => info.dev = Some(huge_decode_dev(attr_u64(value)?)),
            RDMA_NLDEV_ATTR_CHARDEV_ABI => info.abi = Some(attr_u64(value)?),
            RDMA_NLDEV_ATTR_CHARDEV_NAME => info.name = Some(attr_string(value)?),
            RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID => {
                let id = attr_u32_or_u64(value)?;
                info.driver_id =
                    Some(u32::try_from(id).map_err(|_| invalid("driver id out of range"))?);
            }
            _ => {}
        }
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-assembles a reply message (as the kernel would send it).
    fn msg(msg_type: u16, flags: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&((NLMSG_HDRLEN + payload.len()) as u32).to_ne_bytes());
        v.extend_from_slice(&msg_type.to_ne_bytes());
        v.extend_from_slice(&flags.to_ne_bytes());
        v.extend_from_slice(&seq.to_ne_bytes());
        v.extend_from_slice(&0u32.to_ne_bytes());
        v.extend_from_slice(payload);
        v.resize(nl_align(v.len()), 0);
        v
    }

    fn attr(attr_type: u16, value: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&((NLA_HDRLEN + value.len()) as u16).to_ne_bytes());
        v.extend_from_slice(&attr_type.to_ne_bytes());
        v.extend_from_slice(value);
        v.resize(nl_align(v.len()), 0);
        v
    }

    fn error_msg(seq: u32, code: i32) -> Vec<u8> {
        let mut payload = code.to_ne_bytes().to_vec();
        payload.extend_from_slice(&[0u8; 16]); // the echoed request header
        msg(NLMSG_ERROR, 0, seq, &payload)
    }

    fn collect(reader: &mut ReplyReader, datagram: &[u8]) -> io::Result<(Progress, Vec<Vec<u8>>)> {
        let mut got = Vec::new();
        let p = reader.feed(datagram, &mut |p| {
            got.push(p.to_vec());
            Ok(())
        })?;
        Ok((p, got))
    }

    #[test]
    fn message_type_encoding() {
        assert_eq!(
            rdma_nl_get_type(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_SYS_GET),
            0x1406
        );
        assert_eq!(rdma_nl_get_type(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_GET), 0x1401);
        assert_eq!(
            rdma_nl_get_type(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_GET_CHARDEV),
            0x140f
        );
    }

    #[test]
    fn request_without_payload() {
        let req = Request::new(0x1406, NLM_F_REQUEST, 7).finish();
        assert_eq!(req.len(), 16);
        assert_eq!(read_u32(&req, 0), Some(16));
        assert_eq!(read_u16(&req, 4), Some(0x1406));
        assert_eq!(read_u16(&req, 6), Some(NLM_F_REQUEST));
        assert_eq!(read_u32(&req, 8), Some(7));
        assert_eq!(read_u32(&req, 12), Some(0));
    }

    #[test]
    fn request_attributes_are_aligned() {
        let mut req = Request::new(0x140f, NLM_F_REQUEST, 1);
        req.attr_u32(RDMA_NLDEV_ATTR_DEV_INDEX, 3)
            .attr_str(RDMA_NLDEV_ATTR_CHARDEV_TYPE, "uverbs");
        let req = req.finish();
        // header 16 + u32 attr 8 + "uverbs\0" attr 4+7 padded to 12 = 36
        assert_eq!(req.len(), 36);
        assert_eq!(read_u32(&req, 0), Some(36));
        assert_eq!(read_u16(&req, 16), Some(8));
        assert_eq!(read_u16(&req, 18), Some(RDMA_NLDEV_ATTR_DEV_INDEX));
        assert_eq!(read_u32(&req, 20), Some(3));
        assert_eq!(read_u16(&req, 24), Some(11));
        assert_eq!(read_u16(&req, 26), Some(RDMA_NLDEV_ATTR_CHARDEV_TYPE));
        assert_eq!(&req[28..35], b"uverbs\0");
        assert_eq!(req[35], 0);
        let attrs = parse_attrs(&req[16..]).unwrap();
        assert_eq!(attrs.len(), 2);
        assert_eq!(attrs[1], (RDMA_NLDEV_ATTR_CHARDEV_TYPE, &b"uverbs\0"[..]));
    }

    #[test]
    fn sys_get_reply_with_copy_on_fork() {
        let mut payload = attr(66, &[1]); // NETNS_MODE
        payload.extend(attr(RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK, &[1]));
        let dgram = msg(0x1406, 0, 5, &payload);
        let mut reader = ReplyReader::new(5);
        let (p, got) = collect(&mut reader, &dgram).unwrap();
        assert_eq!(p, Progress::Done);
        assert_eq!(got.len(), 1);
        assert_eq!(parse_copy_on_fork(&got[0]).unwrap(), Some(true));
    }

    #[test]
    fn sys_get_reply_without_copy_on_fork() {
        let payload = attr(66, &[0]);
        assert_eq!(parse_copy_on_fork(&payload).unwrap(), None);
        assert_eq!(parse_copy_on_fork(&[]).unwrap(), None);
        let zero = attr(RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK, &[0]);
        assert_eq!(parse_copy_on_fork(&zero).unwrap(), Some(false));
    }

    #[test]
    fn flag_bits_are_masked_from_attribute_types() {
        let a = attr(RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK | (1 << 14), &[1]);
        assert_eq!(parse_copy_on_fork(&a).unwrap(), Some(true));
    }

    #[test]
    fn multipart_dump_until_done() {
        let dev = |index: u32, name: &str| {
            let mut p = attr(RDMA_NLDEV_ATTR_DEV_INDEX, &index.to_ne_bytes());
            let mut n = name.as_bytes().to_vec();
            n.push(0);
            p.extend(attr(RDMA_NLDEV_ATTR_DEV_NAME, &n));
            p
        };
        let mut first = msg(0x1401, NLM_F_MULTI, 9, &dev(0, "rxe0"));
        first.extend(msg(0x1401, NLM_F_MULTI, 9, &dev(1, "siw0")));
        let done = msg(NLMSG_DONE, NLM_F_MULTI, 9, &0i32.to_ne_bytes());

        let mut reader = ReplyReader::new(9);
        let (p, got) = collect(&mut reader, &first).unwrap();
        assert_eq!(p, Progress::More);
        assert_eq!(got.len(), 2);
        assert_eq!(
            parse_device(&got[1]).unwrap(),
            (Some(1), Some("siw0".to_string()))
        );
        let (p, got) = collect(&mut reader, &done).unwrap();
        assert_eq!(p, Progress::Done);
        assert!(got.is_empty());
    }

    #[test]
    fn stale_sequence_numbers_are_skipped() {
        let mut dgram = msg(0x1406, 0, 1, &attr(RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK, &[1]));
        dgram.extend(msg(0x1406, 0, 2, &[]));
        let mut reader = ReplyReader::new(2);
        let (p, got) = collect(&mut reader, &dgram).unwrap();
        assert_eq!(p, Progress::Done);
        assert_eq!(got, vec![Vec::<u8>::new()]);
    }

    #[test]
    fn error_message_gives_errno() {
        let mut reader = ReplyReader::new(3);
        let err = collect(&mut reader, &error_msg(3, -19)).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(19)); // ENODEV
        let mut reader = ReplyReader::new(3);
        let (p, _) = collect(&mut reader, &error_msg(3, 0)).unwrap();
        assert_eq!(p, Progress::Done);
    }

    #[test]
    fn done_with_negative_code_is_an_error() {
        let mut reader = ReplyReader::new(4);
        let dgram = msg(NLMSG_DONE, NLM_F_MULTI, 4, &(-95i32).to_ne_bytes());
        let err = collect(&mut reader, &dgram).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(95)); // EOPNOTSUPP
    }

    #[test]
    fn interrupted_dump_is_reported() {
        let mut reader = ReplyReader::new(4);
        let mut dgram = msg(0x1401, NLM_F_MULTI | NLM_F_DUMP_INTR, 4, &[]);
        dgram.extend(msg(NLMSG_DONE, NLM_F_MULTI, 4, &0i32.to_ne_bytes()));
        let err = collect(&mut reader, &dgram).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::Interrupted);
    }

    #[test]
    fn chardev_reply_parsing() {
        let dev: u64 = (231 << 8) | 192; // huge_encode_dev(MKDEV(231, 192))
        let mut p = attr(RDMA_NLDEV_ATTR_CHARDEV_NAME, b"uverbs0\0");
        p.extend(attr(0, &[0; 4])); // RDMA_NLDEV_ATTR_PAD before a u64
        p.extend(attr(RDMA_NLDEV_ATTR_CHARDEV, &dev.to_ne_bytes()));
        p.extend(attr(RDMA_NLDEV_ATTR_CHARDEV_ABI, &2u64.to_ne_bytes()));
        p.extend(attr(RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID, &14u32.to_ne_bytes()));
        let info = parse_chardev(&p).unwrap();
        assert_eq!(
            info,
            ChardevInfo {
                driver_id: Some(14),
                dev: Some((231, 192)),
                abi: Some(2),
                name: Some("uverbs0".into()),
            }
        );
        // The driver id is also accepted as a u64.
        let p = attr(RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID, &18u64.to_ne_bytes());
        assert_eq!(parse_chardev(&p).unwrap().driver_id, Some(18));
    }

    #[test]
    fn huge_dev_decoding() {
        assert_eq!(huge_decode_dev((231 << 8) | 193), (231, 193));
        // minor 0x12345 -> low byte in bits 0..8, the rest from bit 20 up
        let v = 0x45 | (0x123 << 20) | (10 << 8);
        assert_eq!(huge_decode_dev(v), (10, 0x12345));
    }

    #[test]
    fn malformed_replies_are_invalid_data() {
        let bad = |dgram: &[u8]| {
            let mut reader = ReplyReader::new(1);
            let err = collect(&mut reader, dgram).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{dgram:?}");
        };
        let good = msg(0x1406, 0, 1, &attr(RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK, &[1]));
        // Every truncation of a valid message is rejected (or is empty).
        for cut in 1..good.len() - 3 {
            bad(&good[..cut]);
        }
        // nlmsg_len smaller than the header, or larger than the datagram.
        let mut short = good.clone();
        short[0..4].copy_from_slice(&8u32.to_ne_bytes());
        bad(&short);
        let mut long = good.clone();
        long[0..4].copy_from_slice(&1000u32.to_ne_bytes());
        bad(&long);
        // A truncated error message.
        bad(&msg(NLMSG_ERROR, 0, 1, &[0xff, 0xff]));
        // An overrun.
        bad(&msg(NLMSG_OVERRUN, 0, 1, &[]));
        // Attribute length inconsistencies.
        assert!(parse_attrs(&[3, 0, 1, 0]).is_err());
        assert!(parse_attrs(&[40, 0, 1, 0, 0, 0]).is_err());
        assert!(parse_attrs(&[8, 0]).is_err());
        // Wrong attribute sizes.
        assert!(parse_chardev(&attr(RDMA_NLDEV_ATTR_CHARDEV, &[1, 2, 3])).is_err());
        assert!(parse_chardev(&attr(RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID, &[1, 2])).is_err());
        assert!(parse_chardev(&attr(
            RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID,
            &u64::MAX.to_ne_bytes()
        ))
        .is_err());
        assert!(parse_device(&attr(RDMA_NLDEV_ATTR_DEV_INDEX, &[1])).is_err());
        assert!(parse_device(&attr(RDMA_NLDEV_ATTR_DEV_NAME, &[0xff, 0xfe, 0])).is_err());
        assert!(parse_copy_on_fork(&attr(RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK, &[])).is_err());
    }

    #[test]
    fn garbage_never_panics() {
        // A cheap deterministic fuzz over the parsers.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..2000 {
            let len = (rnd() % 96) as usize;
            let mut bytes: Vec<u8> = (0..len).map(|_| rnd() as u8).collect();
            if bytes.len() >= 4 && rnd() % 2 == 0 {
                bytes[0..4].copy_from_slice(&(len as u32).to_ne_bytes());
            }
            let mut reader = ReplyReader::new(0);
            let _ = reader.feed(&bytes, &mut |p| {
                let _ = parse_chardev(p);
                let _ = parse_device(p);
                let _ = parse_copy_on_fork(p);
                Ok(())
            });
            let _ = parse_attrs(&bytes);
        }
    }

    const RTM_GETLINK: u16 = 18;

    #[test]
    fn transport_handles_a_real_multipart_dump() {
        // NETLINK_ROUTE exists on every Linux kernel: dump the interfaces
        // (at least `lo`), which arrives as NLM_F_MULTI messages + NLMSG_DONE.
        let mut count = 0;
        exchange_on(
            None, // NETLINK_ROUTE
            RTM_GETLINK,
            NLM_F_DUMP,
            |req| {
                req.raw(&[0u8; 16]); // struct ifinfomsg
            },
            &mut |payload| {
                assert!(payload.len() >= 16);
                parse_attrs(&payload[16..])?;
                count += 1;
                Ok(())
            },
        )
        .unwrap();
        assert!(count >= 1);
    }

    #[test]
    fn transport_reports_kernel_errors() {
        // Asking for a non-existent interface index gives NLMSG_ERROR -ENODEV.
        let mut ifinfo = [0u8; 16];
        ifinfo[4..8].copy_from_slice(&0x7fff_fff0i32.to_ne_bytes());
        let err = exchange_on(
            None, // NETLINK_ROUTE
            RTM_GETLINK,
            0,
            |req| {
                req.raw(&ifinfo);
            },
            &mut |_| Ok(()),
        )
        .unwrap_err();
        assert_eq!(err.raw_os_error(), Some(19), "{err}");
    }

    #[test]
    fn live_queries_return_quickly_without_panicking() {
        // This host may have no RDMA in its kernel; any result is acceptable.
        let start = Instant::now();
        let _ = copy_on_fork();
        let _ = uverbs_chardev("rxe0");
        let _ = uverbs_chardev("no-such-device");
        assert!(start.elapsed() < Duration::from_secs(10));
    }
}
