//! Memory regions over a DMA-BUF (`ProtectionDomain::reg_dmabuf_mr`) on
//! real devices: the buffer is a udmabuf (`/dev/udmabuf` over a sealed
//! memfd) where the kernel has one. rxe and siw cannot import a DMA-BUF
//! (no `reg_user_mr_dmabuf`): the kernel answers `EOPNOTSUPP` over ioctl,
//! and the write() transport refuses before sending; either way nothing
//! is left in the kernel and the buffer's descriptor is closed once the
//! error is dropped.
//!
//! Where `/dev/udmabuf` is missing the test says so loudly; it fails under
//! `UVERBS_REQUIRE_DEVICES` only when the kernel says udmabuf should be
//! there (`/sys/module/udmabuf`, or `CONFIG_UDMABUF` in
//! `/boot/config-<release>`). Debian's 6.12 builds it in; its 6.1 lacks
//! it, and there a plain memfd stands in: rxe and siw refuse before they
//! look at the descriptor.

#[macro_use]
mod common;

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use common::{alloc_pd, driver, loud, page_size, Driver};
use uverbs::error::{Errno, Op};
use uverbs::mr::DmaBuf;
use uverbs::transport::TransportKind;
use uverbs::{AccessFlags, Error};

/// Why this kernel should have `/dev/udmabuf`, if it says so.
fn udmabuf_expected() -> Option<String> {
    if std::path::Path::new("/sys/module/udmabuf").exists() {
        return Some("/sys/module/udmabuf exists".into());
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let release = release.trim();
    let config = format!("/boot/config-{release}");
    let text = std::fs::read_to_string(&config).ok()?;
    text.lines()
        .find(|l| *l == "CONFIG_UDMABUF=y" || *l == "CONFIG_UDMABUF=m")
        .map(|l| format!("{config} has {l}"))
}

/// A udmabuf of `len` bytes and its memfd, or `None` (said loudly) where
/// this kernel has no `/dev/udmabuf` and is not expected to.
fn udmabuf(test: &str, len: u64) -> Option<(DmaBuf, OwnedFd)> {
    match DmaBuf::new_udmabuf(len) {
        Ok(pair) => Some(pair),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let required = std::env::var_os("UVERBS_REQUIRE_DEVICES").is_some();
            match udmabuf_expected() {
                Some(why) if required => {
                    panic!("{test}: /dev/udmabuf is missing, but {why}")
                }
                why => loud(&format!(
                    "NOTE: {test}: no /dev/udmabuf on this kernel ({}): no udmabuf to test with",
                    why.unwrap_or_else(|| "no CONFIG_UDMABUF".into())
                )),
            }
            None
        }
        Err(e) => panic!("{test}: making a udmabuf of {len} bytes: {e}"),
    }
}

/// The buffer's identity, to find it among the open descriptors.
fn identity(fd: impl AsFd) -> (u64, u64) {
    let st = rustix::fs::fstat(fd).expect("fstat");
    (st.st_dev, st.st_ino)
}

/// How many descriptors of this process are the file `id`.
fn open_copies(id: (u64, u64)) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&n| {
            let path = format!("/proc/self/fd/{n}");
            std::fs::metadata(path).is_ok_and(|m| {
                use std::os::unix::fs::MetadataExt;
                (m.dev(), m.ino()) == id
            })
        })
        .count()
}

device_test!(
    reg_dmabuf_mr_is_refused_typed_and_leaks_nothing,
    |name, ctx, counts| {
        const TEST: &str = "reg_dmabuf_mr_is_refused_typed_and_leaks_nothing";
        let len = 4 * page_size();
        let (buf, memfd) = match udmabuf(TEST, len as u64) {
            Some(pair) => pair,
            None => {
                loud(&format!("NOTE: {name}: a memfd stands in for the DMA-BUF"));
                // Two memfds: the buffer's descriptor must be its file's
                // only one, for the count below.
                let memfd = || {
                    let fd = rustix::fs::memfd_create("stand-in", rustix::fs::MemfdFlags::CLOEXEC)
                        .expect("memfd_create");
                    rustix::fs::ftruncate(&fd, len as u64).expect("ftruncate");
                    fd
                };
                (DmaBuf::from_fd(memfd()), memfd())
            }
        };
        let id = identity(&buf);
        assert_eq!(open_copies(id), 1, "{name}: the buffer is open once");
        let pd = alloc_pd(&ctx);
        let raw = buf.as_raw_fd();
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
        match pd.reg_dmabuf_mr(buf, 0, len, 0x10_0000, access) {
            Err(e) => {
                assert_eq!(e.dmabuf.as_raw_fd(), raw, "{name}: the buffer handed back");
                match (ctx.transport_kind(), driver(&ctx)) {
                    (TransportKind::Write, _) => assert!(
                        matches!(
                            e.error,
                            Error::Unsupported {
                                op: Op::RegDmabufMr,
                                ..
                            }
                        ),
                        "{name}: over write() the method is refused before sending: {:?}",
                        e.error
                    ),
                    (_, Driver::Rxe | Driver::Siw) => assert!(
                        matches!(
                            e.error,
                            Error::Os {
                                op: Op::RegDmabufMr,
                                errno: Errno::OPNOTSUPP,
                                ..
                            }
                        ),
                        "{name}: the kernel's EOPNOTSUPP (no reg_user_mr_dmabuf): {:?}",
                        e.error
                    ),
                    (_, Driver::Other) => {
                        loud(&format!("NOTE: {name}: reg_dmabuf_mr refused: {}", e.error))
                    }
                }
                loud(&format!(
                    "{name} ({}): reg_dmabuf_mr refused: {}",
                    ctx.transport_kind(),
                    e.error
                ));
                counts.assert_extra(0, 1, "after the refused registration");
                assert_eq!(open_copies(id), 1, "{name}: still open in the error");
                drop(e);
            }
            Ok(mr) => {
                // A driver that imports DMA-BUFs (not rxe, not siw).
                assert!(
                    matches!(driver(&ctx), Driver::Other),
                    "{name}: rxe and siw cannot register a DMA-BUF, yet {mr:?}"
                );
                assert_eq!(mr.addr(), 0x10_0000, "{name}: addr is the iova");
                counts.assert_extra(1, 1, "with the DMA-BUF region");
                assert_eq!(open_copies(id), 1, "{name}: the region holds the buffer");
                mr.dereg().unwrap_or_else(|e| panic!("{name}: dereg: {e}"));
            }
        }
        assert_eq!(open_copies(id), 0, "{name}: the buffer's descriptor closed");
        drop(memfd);
        counts.assert_extra(0, 1, "at the end");
    }
);

/// The udmabuf helper itself: a sealed memfd gives a DMA-BUF (its
/// `/proc/self/fd` link names it), an unsealed one the kernel's `EINVAL`.
#[test]
fn udmabuf_helper_makes_a_dmabuf_of_a_sealed_memfd_only() {
    const TEST: &str = "udmabuf_helper_makes_a_dmabuf_of_a_sealed_memfd_only";
    let len = 2 * page_size() as u64;
    let Some((buf, memfd)) = udmabuf(TEST, len) else {
        return;
    };
    let link = std::fs::read_link(format!("/proc/self/fd/{}", buf.as_raw_fd())).unwrap();
    assert!(
        link.to_string_lossy().contains("dmabuf"),
        "a DMA-BUF's descriptor: {link:?}"
    );
    let copy = buf.try_clone().unwrap();
    assert_eq!(identity(&copy), identity(&buf), "dup names the same buffer");

    let unsealed = rustix::fs::memfd_create("unsealed", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&unsealed, len).unwrap();
    let err = DmaBuf::from_memfd(&unsealed, 0, len).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{err}");
    // Past the memfd's end, and not a page multiple: EINVAL too.
    for (offset, size) in [(0, 2 * len), (0, len - 1)] {
        let err = DmaBuf::from_memfd(&memfd, offset, size).unwrap_err();
        assert_eq!(
            err.raw_os_error(),
            Some(libc::EINVAL),
            "{offset} {size}: {err}"
        );
    }
}
