//! The harness's leak check: when a device test binary exits, the kernel's
//! own view (the RDMA netlink resource tables `rdma res show` prints) must
//! hold no object of a user process: no context, PD, MR, CQ, QP or cm id.
//!
//! Every device test reaches [`devices_under_test`](super::devices_under_test),
//! which arms the check once per process with a device present: an
//! `atexit` handler, which runs after the last test, while the process and
//! its descriptors are still alive (the kernel frees what a closing file
//! still holds, so after the exit nothing could be seen). A QP a drop
//! abandoned, a context kept alive by a forgotten object, a cm id never
//! destroyed: each is still there then, and the binary fails, naming what
//! was left. The check counts every user-owned entry of the kernel's tables
//! (kernel objects, such as rxe's GSI QP, carry a kernel name instead of a
//! pid): the VM runs one test binary at a time, and nothing else there
//! uses RDMA, so every such entry is this binary's. (A per-pid filter would
//! miss objects made by test threads: the kernel records the creating
//! thread's id.)

use std::sync::Once;

const NETLINK_RDMA: i32 = 20;
const RDMA_NL_NLDEV: u16 = 5;
const RDMA_NLDEV_CMD_GET: u16 = 1;
const RDMA_NLDEV_ATTR_DEV_INDEX: u16 = 1;
const RDMA_NLDEV_ATTR_DEV_NAME: u16 = 2;
const RDMA_NLDEV_ATTR_RES_PID: u16 = 28;
const NLA_TYPE_MASK: u16 = 0x3fff;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLMSG_HDRLEN: usize = 16;

/// (what `rdma res show` calls it, its dump command, its table attribute).
const TABLES: [(&str, u16, u16); 6] = [
    ("ctx", 22, 86),
    ("pd", 14, 46),
    ("mr", 13, 40),
    ("cq", 12, 35),
    ("qp", 10, 19),
    ("cm_id", 11, 30),
];

static ARMED: Once = Once::new();

/// The process that armed the check: a forked child that exits through
/// `exit(3)` runs the handler too, and must not judge its parent's objects.
static ARMED_BY: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Arms the exit check (once per process; further calls do nothing).
pub fn check_at_exit() {
    ARMED.call_once(|| {
        ARMED_BY.store(
            std::process::id() as i32,
            std::sync::atomic::Ordering::SeqCst,
        );
        // Refused only when the table is full (32 handlers at least): then
        // there is no check, and the binary says so.
        // SAFETY: `at_exit` is an `extern "C" fn()` that never unwinds.
        if unsafe { libc::atexit(at_exit) } != 0 {
            eprintln!("NOTE: the kernel-object leak check could not be armed (atexit)");
        }
    });
}

extern "C" fn at_exit() {
    if ARMED_BY.load(std::sync::atomic::Ordering::SeqCst) != std::process::id() as i32 {
        return;
    }
    // Nothing may unwind out of an atexit handler.
    let verdict = std::panic::catch_unwind(user_objects);
    match verdict {
        Ok(Ok(left)) if left.is_empty() => {
            eprintln!("leak check: no kernel object of a user process left at exit");
        }
        Ok(Ok(left)) => {
            eprintln!(
                "FAILED: leak check: kernel objects left at exit (an object leaked or was abandoned): {}",
                left.join(", ")
            );
            // SAFETY: ends the process at once, as a failed test binary.
            unsafe { libc::_exit(1) }
        }
        Ok(Err(e)) => {
            eprintln!("FAILED: leak check: the kernel's resource tables could not be read: {e}");
            // SAFETY: as above.
            unsafe { libc::_exit(1) }
        }
        Err(_) => {
            eprintln!("FAILED: leak check: panicked");
            // SAFETY: as above.
            unsafe { libc::_exit(1) }
        }
    }
}

/// The user-owned entries of every device's resource tables, as
/// `"<device> <table> <n>"`; empty when there are none.
pub fn user_objects() -> Result<Vec<String>, String> {
    let socket = Netlink::open()?;
    let mut left = Vec::new();
    for (index, name) in socket.devices()? {
        for (table, cmd, attr) in TABLES {
            let n = socket.count_user_entries(cmd, attr, index)?;
            if n > 0 {
                left.push(format!("{name} {table} {n}"));
            }
        }
    }
    Ok(left)
}

/// A `NETLINK_RDMA` socket.
struct Netlink {
    fd: std::os::fd::OwnedFd,
}

impl Netlink {
    fn open() -> Result<Self, String> {
        use std::os::fd::FromRawFd;
        // SAFETY: plain socket(2); the descriptor is owned below.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                NETLINK_RDMA,
            )
        };
        if fd < 0 {
            return Err(format!("socket: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: a descriptor just opened, owned by nobody else.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        let timeout = libc::timeval {
            tv_sec: 5,
            tv_usec: 0,
        };
        // SAFETY: a valid timeval, its size given.
        unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&fd),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&timeout as *const libc::timeval).cast(),
                size_of::<libc::timeval>() as u32,
            )
        };
        Ok(Netlink { fd })
    }

    /// Sends a dump request `cmd` (with a device index, if any) and returns
    /// the attribute area of every reply message.
    fn dump(&self, cmd: u16, dev_index: Option<u32>) -> Result<Vec<Vec<u8>>, String> {
        use std::os::fd::AsRawFd;
        let mut msg = vec![0u8; NLMSG_HDRLEN];
        if let Some(index) = dev_index {
            msg.extend_from_slice(&8u16.to_ne_bytes());
            msg.extend_from_slice(&RDMA_NLDEV_ATTR_DEV_INDEX.to_ne_bytes());
            msg.extend_from_slice(&index.to_ne_bytes());
        }
        let len = msg.len() as u32;
        let kind = (RDMA_NL_NLDEV << 10) | cmd;
        let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
        msg[0..4].copy_from_slice(&len.to_ne_bytes());
        msg[4..6].copy_from_slice(&kind.to_ne_bytes());
        msg[6..8].copy_from_slice(&flags.to_ne_bytes());
        msg[8..12].copy_from_slice(&1u32.to_ne_bytes());
        // SAFETY: `msg` is valid for its length; the kernel is the peer
        // (a zeroed sockaddr_nl addresses it).
        let sent = unsafe {
            let mut to: libc::sockaddr_nl = std::mem::zeroed();
            to.nl_family = libc::AF_NETLINK as u16;
            libc::sendto(
                self.fd.as_raw_fd(),
                msg.as_ptr().cast(),
                msg.len(),
                0,
                (&to as *const libc::sockaddr_nl).cast(),
                size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if sent < 0 {
            return Err(format!("sendto: {}", std::io::Error::last_os_error()));
        }
        let mut replies = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // SAFETY: `buf` is valid for writes of its length.
            let n =
                unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                return Err(format!("recv: {}", std::io::Error::last_os_error()));
            }
            let mut data = &buf[..n as usize];
            while data.len() >= NLMSG_HDRLEN {
                let len = u32::from_ne_bytes(data[0..4].try_into().unwrap()) as usize;
                let kind = u16::from_ne_bytes(data[4..6].try_into().unwrap());
                if len < NLMSG_HDRLEN || len > data.len() {
                    return Err("a truncated netlink message".into());
                }
                match kind {
                    NLMSG_DONE => return Ok(replies),
                    NLMSG_ERROR => {
                        let code = i32::from_ne_bytes(data[16..20].try_into().unwrap());
                        return Err(format!(
                            "netlink command {cmd}: {}",
                            std::io::Error::from_raw_os_error(-code)
                        ));
                    }
                    _ => replies.push(data[NLMSG_HDRLEN..len].to_vec()),
                }
                data = &data[(len + 3) & !3..];
            }
        }
    }

    /// Every RDMA device's netlink index and name.
    fn devices(&self) -> Result<Vec<(u32, String)>, String> {
        let mut devices = Vec::new();
        for reply in self.dump(RDMA_NLDEV_CMD_GET, None)? {
            let attrs = attrs(&reply);
            let index = attrs.iter().find(|(t, _)| *t == RDMA_NLDEV_ATTR_DEV_INDEX);
            let name = attrs.iter().find(|(t, _)| *t == RDMA_NLDEV_ATTR_DEV_NAME);
            if let (Some((_, index)), Some((_, name))) = (index, name) {
                let index =
                    u32::from_ne_bytes(index.get(..4).ok_or("a short index")?.try_into().unwrap());
                let name = String::from_utf8_lossy(name)
                    .trim_end_matches('\0')
                    .to_owned();
                devices.push((index, name));
            }
        }
        Ok(devices)
    }

    /// The entries of the table `attr` (dumped by `cmd`) of device `index`
    /// that name a user process (a pid).
    fn count_user_entries(&self, cmd: u16, attr: u16, index: u32) -> Result<usize, String> {
        let mut n = 0;
        for reply in self.dump(cmd, Some(index))? {
            for (_, table) in attrs(&reply).into_iter().filter(|(t, _)| *t == attr) {
                for (_, entry) in attrs(table) {
                    n += usize::from(
                        attrs(entry)
                            .iter()
                            .any(|(t, _)| *t == RDMA_NLDEV_ATTR_RES_PID),
                    );
                }
            }
        }
        Ok(n)
    }
}

/// The attributes of a netlink attribute area: (type, payload); a malformed
/// tail ends the list.
fn attrs(mut data: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    while data.len() >= 4 {
        let len = u16::from_ne_bytes([data[0], data[1]]) as usize;
        let kind = u16::from_ne_bytes([data[2], data[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > data.len() {
            break;
        }
        out.push((kind, &data[4..len]));
        data = &data[((len + 3) & !3).min(data.len())..];
    }
    out
}
