//! The wrapped system calls (`-Wl,--wrap=NAME`, build.rs): paths under
//! `/sys/class/infiniband*` and `/dev/infiniband` go to the fake tree, the
//! uverbs file's ioctls and mmaps to the emulated kernel, the RDMA netlink
//! socket fails (so libibverbs reads sysfs), and everything else, the test
//! harness's own calls included, goes to the C library unchanged.
//!
//! The wrappers are defined with the arguments their callers pass (the C
//! prototypes of `open`, `openat` and `ioctl` are variadic; on x86-64 the
//! registers a fixed-argument function reads are the ones a variadic call
//! fills).

#![allow(clippy::missing_safety_doc)]

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_ulong, c_void, CStr, CString};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, OnceLock};

use uverbs_oracle::ioctl::Call;
use uverbs_oracle::kernel::Mlx5Kernel;
use uverbs_oracle::sysfs;
use uverbs_uapi::RDMA_VERBS_IOCTL;

extern "C" {
    fn __real_open(path: *const c_char, flags: c_int, ...) -> c_int;
    fn __real_openat(dirfd: c_int, path: *const c_char, flags: c_int, ...) -> c_int;
    fn __real_opendir(path: *const c_char) -> *mut c_void;
    fn __real_stat(path: *const c_char, buf: *mut libc::stat) -> c_int;
    fn __real_fstat(fd: c_int, buf: *mut libc::stat) -> c_int;
    fn __real_fopen(path: *const c_char, mode: *const c_char) -> *mut c_void;
    fn __real_readlink(path: *const c_char, buf: *mut c_char, size: usize) -> isize;
    fn __real_ioctl(fd: c_int, request: c_ulong, ...) -> c_int;
    fn __real_write(fd: c_int, buf: *const c_void, count: usize) -> isize;
    fn __real_mmap(
        addr: *mut c_void,
        len: usize,
        prot: c_int,
        flags: c_int,
        fd: c_int,
        offset: libc::off_t,
    ) -> *mut c_void;
    fn __real_munmap(addr: *mut c_void, len: usize) -> c_int;
    fn __real_close(fd: c_int) -> c_int;
    fn __real_socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int;
}

/// `NETLINK_RDMA` (linux/netlink.h).
const NETLINK_RDMA: c_int = 20;

/// The fake tree's root, once installed.
static ROOT: OnceLock<PathBuf> = OnceLock::new();
/// The open uverbs file, or -1: checked without a lock, since every
/// `write` and `close` of the process asks.
static UVERBS_FD: AtomicI32 = AtomicI32::new(-1);
/// The emulated kernel.
static KERNEL: Mutex<Option<Mlx5Kernel>> = Mutex::new(None);

thread_local! {
    /// Set while this thread holds [`KERNEL`]: a system call made from
    /// inside the emulation (an allocator's `munmap`) goes straight to the
    /// C library instead of waiting for the lock it holds.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// Routes the emulated device's paths to the tree at `root`, and starts a
/// fresh emulated kernel.
pub fn install(root: &std::path::Path) {
    ROOT.set(root.to_path_buf()).expect("installed once");
    *KERNEL.lock().unwrap() = Some(Mlx5Kernel::default());
}

/// Runs `f` on the emulated kernel (what it logged and holds).
#[allow(dead_code)] // Not every test that includes the shim reads it.
pub fn with_kernel<R>(f: impl FnOnce(&Mlx5Kernel) -> R) -> R {
    in_kernel(|k| f(k))
}

/// Runs `f` on the emulated kernel, to change what it will answer (or to
/// run its device).
pub fn with_kernel_mut<R>(f: impl FnOnce(&mut Mlx5Kernel) -> R) -> R {
    in_kernel(f)
}

/// Runs `f` on the emulated kernel, marking this thread as inside it: a
/// failed assertion in `f` prints its backtrace with the lock held, and
/// the `munmap`s of that must not wait for it. A poisoned lock (an earlier
/// assertion) is taken anyway: the kernel's state is what the failure
/// message wants to show.
fn in_kernel<R>(f: impl FnOnce(&mut Mlx5Kernel) -> R) -> R {
    let mut guard = KERNEL.lock().unwrap_or_else(|p| p.into_inner());
    INSIDE.with(|i| i.set(true));
    /// Clears the mark however `f` ends.
    struct Outside;
    impl Drop for Outside {
        fn drop(&mut self) {
            INSIDE.with(|i| i.set(false));
        }
    }
    let _outside = Outside;
    f(guard.as_mut().expect("installed"))
}

/// The shim's kernel for a uverbs transport: uverbs' commands reach the
/// same emulated kernel as libibverbs' wrapped system calls.
#[allow(dead_code)] // Only the tests that share the kernel with uverbs use it.
pub struct ShimKernel;

impl uverbs_oracle::file::SharedKernel for ShimKernel {
    fn with(&self, f: &mut dyn FnMut(&mut Mlx5Kernel)) {
        in_kernel(f)
    }
}

fn inside() -> bool {
    INSIDE.with(Cell::get)
}

fn set_errno(e: c_int) {
    // SAFETY: the calling thread's errno, always valid.
    unsafe { *libc::__errno_location() = e };
}

/// `path` in the fake tree, if it is one of the emulated device's.
///
/// # Safety
///
/// `path` is null or a NUL-terminated string.
unsafe fn redirected(path: *const c_char) -> Option<CString> {
    let root = ROOT.get()?;
    if path.is_null() {
        return None;
    }
    // SAFETY: the caller's promise.
    let path = unsafe { CStr::from_ptr(path) }.to_str().ok()?;
    let to = sysfs::redirect(root, path)?;
    CString::new(to.into_os_string().into_encoded_bytes()).ok()
}

/// True for the uverbs device's path.
///
/// # Safety
///
/// As [`redirected`].
unsafe fn is_uverbs_path(path: *const c_char) -> bool {
    // SAFETY: the caller's promise.
    !path.is_null() && unsafe { CStr::from_ptr(path) }.to_bytes() == b"/dev/infiniband/uverbs0"
}

/// The character device the kernel would report for the uverbs file.
fn uverbs_stat(buf: *mut libc::stat) -> c_int {
    // SAFETY: an all-zero `stat` is valid.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    st.st_mode = libc::S_IFCHR | 0o666;
    st.st_rdev = libc::makedev(sysfs::DEV.0, sysfs::DEV.1);
    // SAFETY: the caller's buffer, a `struct stat`.
    unsafe { buf.write(st) };
    0
}

#[no_mangle]
pub unsafe extern "C" fn __wrap_open(path: *const c_char, flags: c_int, mode: c_uint_) -> c_int {
    // SAFETY: `path` is the caller's NUL-terminated string.
    let uverbs = unsafe { is_uverbs_path(path) };
    // SAFETY: as above.
    let fd = match unsafe { redirected(path) } {
        // SAFETY: a NUL-terminated path, the caller's flags and mode.
        Some(to) => unsafe { __real_open(to.as_ptr(), flags, mode) },
        // SAFETY: the caller's arguments, unchanged.
        None => unsafe { __real_open(path, flags, mode) },
    };
    if uverbs && fd >= 0 {
        UVERBS_FD.store(fd, Ordering::SeqCst);
    }
    fd
}

/// `mode_t`, as `open`'s optional argument arrives.
#[allow(non_camel_case_types)]
type c_uint_ = libc::c_uint;

#[no_mangle]
pub unsafe extern "C" fn __wrap_openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint_,
) -> c_int {
    // SAFETY: `path` is the caller's NUL-terminated string.
    match unsafe { redirected(path) } {
        // SAFETY: an absolute NUL-terminated path (dirfd is then unused).
        Some(to) => unsafe { __real_openat(dirfd, to.as_ptr(), flags, mode) },
        // SAFETY: the caller's arguments, unchanged.
        None => unsafe { __real_openat(dirfd, path, flags, mode) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn __wrap_opendir(path: *const c_char) -> *mut c_void {
    // SAFETY: `path` is the caller's NUL-terminated string.
    match unsafe { redirected(path) } {
        // SAFETY: a NUL-terminated path.
        Some(to) => unsafe { __real_opendir(to.as_ptr()) },
        // SAFETY: the caller's argument.
        None => unsafe { __real_opendir(path) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn __wrap_stat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    // SAFETY: `path` is the caller's NUL-terminated string.
    if unsafe { is_uverbs_path(path) } && ROOT.get().is_some() {
        return uverbs_stat(buf);
    }
    // SAFETY: as above.
    match unsafe { redirected(path) } {
        // SAFETY: a NUL-terminated path and the caller's buffer.
        Some(to) => unsafe { __real_stat(to.as_ptr(), buf) },
        // SAFETY: the caller's arguments.
        None => unsafe { __real_stat(path, buf) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn __wrap_fstat(fd: c_int, buf: *mut libc::stat) -> c_int {
    if fd >= 0 && fd == UVERBS_FD.load(Ordering::SeqCst) {
        return uverbs_stat(buf);
    }
    // SAFETY: the caller's arguments.
    unsafe { __real_fstat(fd, buf) }
}

#[no_mangle]
pub unsafe extern "C" fn __wrap_fopen(path: *const c_char, mode: *const c_char) -> *mut c_void {
    // SAFETY: `path` is the caller's NUL-terminated string.
    match unsafe { redirected(path) } {
        // SAFETY: a NUL-terminated path and the caller's mode.
        Some(to) => unsafe { __real_fopen(to.as_ptr(), mode) },
        // SAFETY: the caller's arguments.
        None => unsafe { __real_fopen(path, mode) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn __wrap_readlink(
    path: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> isize {
    // SAFETY: `path` is the caller's NUL-terminated string.
    match unsafe { redirected(path) } {
        // SAFETY: a NUL-terminated path and the caller's buffer.
        Some(to) => unsafe { __real_readlink(to.as_ptr(), buf, size) },
        // SAFETY: the caller's arguments.
        None => unsafe { __real_readlink(path, buf, size) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn __wrap_ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    if fd < 0 || fd != UVERBS_FD.load(Ordering::SeqCst) {
        // SAFETY: the caller's arguments.
        return unsafe { __real_ioctl(fd, request, arg) };
    }
    if request != c_ulong::from(RDMA_VERBS_IOCTL) {
        set_errno(libc::ENOTTY);
        return -1;
    }
    // SAFETY: libibverbs' RDMA_VERBS_IOCTL argument: a header and its
    // attributes, and the buffers they point at, all live and untouched
    // while it waits in this call.
    let mut call = unsafe { Call::from_raw(arg.cast()) };
    match in_kernel(|k| k.ioctl(&mut call)) {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn __wrap_write(fd: c_int, buf: *const c_void, count: usize) -> isize {
    if fd >= 0 && fd == UVERBS_FD.load(Ordering::SeqCst) {
        // The legacy write() path: the ioctl path answered the probe, so
        // libibverbs has no reason to come here.
        set_errno(libc::EOPNOTSUPP);
        return -1;
    }
    // SAFETY: the caller's arguments.
    unsafe { __real_write(fd, buf, count) }
}

#[no_mangle]
pub unsafe extern "C" fn __wrap_mmap(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: libc::off_t,
) -> *mut c_void {
    if fd >= 0 && fd == UVERBS_FD.load(Ordering::SeqCst) {
        return match in_kernel(|k| k.mmap(offset as u64, len)) {
            Ok(page) => page.cast(),
            Err(e) => {
                set_errno(e);
                libc::MAP_FAILED
            }
        };
    }
    // SAFETY: the caller's arguments.
    unsafe { __real_mmap(addr, len, prot, flags, fd, offset) }
}

#[no_mangle]
pub unsafe extern "C" fn __wrap_munmap(addr: *mut c_void, len: usize) -> c_int {
    if !inside() && ROOT.get().is_some() && in_kernel(|k| k.munmap(addr.cast())) {
        return 0;
    }
    // SAFETY: the caller's arguments.
    unsafe { __real_munmap(addr, len) }
}

#[no_mangle]
pub unsafe extern "C" fn __wrap_close(fd: c_int) -> c_int {
    if fd >= 0 && fd == UVERBS_FD.load(Ordering::SeqCst) {
        UVERBS_FD.store(-1, Ordering::SeqCst);
        in_kernel(Mlx5Kernel::close);
    } else if !inside() && ROOT.get().is_some() {
        in_kernel(|k| k.async_fds.remove(&fd));
    }
    // SAFETY: the caller's argument.
    unsafe { __real_close(fd) }
}

#[no_mangle]
pub unsafe extern "C" fn __wrap_socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    if domain == libc::AF_NETLINK && protocol == NETLINK_RDMA && ROOT.get().is_some() {
        // No RDMA netlink: libibverbs falls back to sysfs, the fake tree.
        set_errno(libc::EPROTONOSUPPORT);
        return -1;
    }
    // SAFETY: the caller's arguments.
    unsafe { __real_socket(domain, ty, protocol) }
}
