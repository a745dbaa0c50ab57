//! The floor: the same command bytes, built once with the crate's own
//! encoders (`uverbs::command` + `uverbs::transport::frame`), sent in a loop
//! with a bare `write()` or `ioctl()` on a uverbs file opened here.
//!
//! Per sample the only work besides the system call is, for ioctl, copying
//! the ~100-byte prepared frame over the one handed to the kernel (the
//! kernel writes attribute flags back into it), and for DEREG_MR and
//! DEALLOC_PD, patching the 4-byte handle the previous command returned.

use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use uverbs::command::{AllocPd, DeallocPd, DeregMr, GetContext, RegMr, ReregMr, WriteCommand};
use uverbs::device::DriverId;
use uverbs::error::Errno;
use uverbs::transport::frame::{IoctlFrame, WriteFrame};
use uverbs::transport::verbs_ioctl;
use uverbs::{uverbs_uapi as sys, Device};

use crate::ours::{ACCESS_A, ACCESS_B};
use crate::stats::{measure, timed_cycle, Budget};
use crate::Cell;
use memmap2::MmapMut;
use zerocopy::IntoBytes;

const WORDS: usize = 32;

/// A u64 array viewed as bytes.
fn words_mut(w: &mut [u64]) -> &mut [u8] {
    w.as_mut_bytes()
}

/// One command, framed once. The request, UHW input and response live in
/// boxes so the pointers inside the frame stay valid.
struct Prepared {
    ioctl: bool,
    /// write(): the whole frame. ioctl(): unused.
    write: Box<[u64; WORDS]>,
    write_len: usize,
    /// ioctl(): the prepared frame and the copy handed to the kernel.
    template: Box<IoctlFrame>,
    work: Box<IoctlFrame>,
    request: Box<[u64; WORDS]>,
    request_len: usize,
    _uhw_in: Box<[u64; 2]>,
    /// Core response, then UHW out.
    response: Box<[u64; WORDS]>,
}

impl Prepared {
    fn new<C: WriteCommand>(
        ioctl: bool,
        driver_id: u32,
        cmd: &C,
        uhw_in: &[u8],
        uhw_out_len: usize,
    ) -> Result<Prepared, Errno> {
        let req = cmd.request().as_bytes().to_vec();
        let mut request = Box::new([0u64; WORDS]);
        let rb = words_mut(&mut request[..]);
        rb[..req.len()].copy_from_slice(&req);
        let mut uhw = Box::new([0u64; 2]);
        let ub = words_mut(&mut uhw[..]);
        ub[..uhw_in.len()].copy_from_slice(uhw_in);
        let mut response = Box::new([0u64; WORDS]);
        let core_len = size_of::<C::Response>();
        let resp_ptr = response.as_mut_ptr() as u64;
        let core_in = &rb[..req.len()];
        let uhw_in = &ub[..uhw_in.len()];
        let mut write = Box::new([0u64; WORDS]);
        let mut write_len = 0;
        let template = if ioctl {
            Box::new(IoctlFrame::invoke_write(
                driver_id,
                C::CODE,
                core_in,
                uhw_in,
                (resp_ptr, core_len),
                (resp_ptr + core_len as u64, uhw_out_len),
            )?)
        } else {
            let f = WriteFrame::new(C::CODE, core_in, uhw_in, resp_ptr, core_len + uhw_out_len)?;
            let b = f.as_bytes();
            write_len = b.len();
            words_mut(&mut write[..])[..b.len()].copy_from_slice(b);
            Box::new(IoctlFrame::new(0, 0, 0))
        };
        Ok(Prepared {
            ioctl,
            write,
            write_len,
            work: template.clone(),
            template,
            request,
            request_len: req.len(),
            _uhw_in: uhw,
            response,
        })
    }

    /// Overwrites the u32 at `offset` of the request (a handle), in place in
    /// the prepared bytes.
    fn set_u32(&mut self, offset: usize, value: u32) {
        let v = value.to_ne_bytes();
        if !self.ioctl {
            // After the 8-byte ib_uverbs_cmd_hdr.
            words_mut(&mut self.write[..])[8 + offset..12 + offset].copy_from_slice(&v);
        } else if self.request_len <= 8 {
            // CORE_IN is inline in the attribute's `data`.
            let core_in = self
                .template
                .attr_mut(sys::UVERBS_ATTR_CORE_IN)
                .expect("an INVOKE_WRITE frame has CORE_IN");
            core_in.data.as_mut_bytes()[offset..offset + 4].copy_from_slice(&v);
        } else {
            // CORE_IN points at the request box.
            words_mut(&mut self.request[..])[offset..offset + 4].copy_from_slice(&v);
        }
    }

    /// The first u32 of the response (a new handle).
    fn response_u32(&self) -> u32 {
        self.response[0] as u32
    }

    /// Sends the prepared bytes: one system call.
    #[inline(always)]
    fn send(&mut self, fd: BorrowedFd<'_>) -> Result<(), Errno> {
        if self.ioctl {
            *self.work = *self.template;
            // SAFETY: every pointer in the frame points into this struct's boxes.
            unsafe { verbs_ioctl(fd, &mut self.work) }
        } else {
            let b = &self.write.as_bytes()[..self.write_len];
            let r = rustix::io::write(fd, b).map(drop);
            // rustix's write() is a `readonly` asm system call, so the
            // compiler may assume the response box (whose address reaches
            // the kernel only as an integer inside the frame) is unchanged:
            // make it assume the box may have been written.
            std::hint::black_box(&mut *self.response);
            r
        }
    }
}

struct Raw {
    fd: OwnedFd,
    _async_fd: OwnedFd,
    ioctl: bool,
    driver_id: u32,
    siw: bool,
}

impl Raw {
    fn open(dev: &Device, ioctl: bool) -> Result<Raw, Errno> {
        let driver = DriverId::from_device_name(dev.name()).ok_or(Errno::NODEV)?;
        let fd = rustix::fs::open(
            dev.path(),
            rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?;
        let siw = driver == DriverId::SIW;
        let uhw_out = if siw {
            size_of::<sys::siw_uresp_alloc_ctx>()
        } else {
            0
        };
        let mut p = Prepared::new(ioctl, driver.0, &GetContext::new(), &[], uhw_out)?;
        p.send(fd.as_fd())?;
        // SAFETY: GET_CONTEXT gave this process a new descriptor; we own it.
        let async_fd = unsafe { OwnedFd::from_raw_fd(p.response_u32() as i32) };
        Ok(Raw {
            fd,
            _async_fd: async_fd,
            ioctl,
            driver_id: driver.0,
            siw,
        })
    }

    fn prepare<C: WriteCommand>(&self, cmd: &C, uhw_in: &[u8], uhw_out: usize) -> Prepared {
        Prepared::new(self.ioctl, self.driver_id, cmd, uhw_in, uhw_out)
            .expect("framing a benchmark command")
    }

    fn alloc_pd(&self) -> Result<u32, Errno> {
        let mut p = self.prepare(&AllocPd::new(), &[], 0);
        p.send(self.fd.as_fd())?;
        Ok(p.response_u32())
    }

    fn reg_mr(&self, pd: u32, addr: *mut u8, size: usize) -> Prepared {
        let (uhw_in, uhw_out): (&[u8], usize) = if self.siw {
            (
                &[0; size_of::<sys::siw_ureq_reg_mr>()],
                size_of::<sys::siw_uresp_reg_mr>(),
            )
        } else {
            (&[], 0)
        };
        let cmd = RegMr::new(pd, addr as u64, size as u64, ACCESS_A.bits()).uhw_in(uhw_in);
        self.prepare(&cmd, uhw_in, uhw_out)
    }
}

fn timed(p: &mut Prepared, fd: BorrowedFd<'_>) -> Result<Duration, Errno> {
    let t = Instant::now();
    p.send(fd)?;
    Ok(t.elapsed())
}

/// [`timed_cycle`] of `make` and `undo`, which takes the handle in
/// `make`'s response.
#[inline(always)]
fn create_destroy(
    make: &mut Prepared,
    undo: &mut Prepared,
    fd: BorrowedFd<'_>,
) -> Result<Duration, Errno> {
    timed_cycle(
        || make.send(fd).map(|()| make.response_u32()),
        |handle| {
            undo.set_u32(0, handle);
            undo.send(fd)
        },
    )
}

/// The floor over one framing, on one device.
pub struct Floor<'d> {
    name: &'d str,
    tname: &'static str,
    /// The file and two PDs, once [`Floor::fixed`] ran.
    raw: Option<(Raw, u32, u32)>,
}

fn report(c: Cell, r: Result<crate::stats::Summary, Errno>) {
    match r {
        Ok(s) => c.report(None, &s),
        Err(e) if e == Errno::OPNOTSUPP => c.unsupported("errno=95"),
        Err(e) => c.failed(&format!("errno={}", e.raw_os_error())),
    }
}

impl<'d> Floor<'d> {
    pub fn new(dev: &'d Device, tname: &'static str) -> Self {
        Floor {
            name: dev.name(),
            tname,
            raw: None,
        }
    }

    fn cell(&self, op: &'static str, size: usize) -> Cell<'d> {
        Cell {
            device: self.name,
            imp: "floor",
            transport: self.tname,
            fork: "off",
            op,
            size,
        }
    }

    /// Opens the file (GET_CONTEXT) and measures ALLOC_PD + DEALLOC_PD.
    pub fn fixed(&mut self, dev: &Device, budget: &Budget) {
        let raw = match Raw::open(dev, self.tname == "ioctl") {
            Ok(r) => r,
            Err(e) => {
                return self
                    .cell("open", 0)
                    .failed(&format!("errno={}", e.raw_os_error()))
            }
        };
        let fd = raw.fd.as_fd();
        let mut alloc = raw.prepare(&AllocPd::new(), &[], 0);
        let mut dealloc = raw.prepare(&DeallocPd::new(0), &[], 0);
        report(
            self.cell("alloc_dealloc_pd", 0),
            measure(budget, || create_destroy(&mut alloc, &mut dealloc, fd)),
        );
        match (raw.alloc_pd(), raw.alloc_pd()) {
            (Ok(a), Ok(b)) => self.raw = Some((raw, a, b)),
            (Err(e), _) | (_, Err(e)) => {
                self.cell("alloc_pd", 0)
                    .failed(&format!("errno={}", e.raw_os_error()));
            }
        }
    }

    /// REG_MR, DEREG_MR, both, and REREG_MR ACCESS and PD on buffer `a`.
    pub fn size(&self, size: usize, a: &mut MmapMut, budget: &Budget) {
        let Some((raw, pd1, pd2)) = &self.raw else {
            return;
        };
        let (raw, pd1, pd2) = (raw, *pd1, *pd2);
        let fd = raw.fd.as_fd();
        let cell = |op, size| self.cell(op, size);
        let mut reg = raw.reg_mr(pd1, a.as_mut_ptr(), size);
        let mut dereg = raw.prepare(&DeregMr::new(0), &[], 0);
        report(
            cell("reg", size),
            measure(budget, || {
                let d = timed(&mut reg, fd)?;
                dereg.set_u32(0, reg.response_u32());
                dereg.send(fd)?;
                Ok(d)
            }),
        );
        report(
            cell("dereg", size),
            measure(budget, || {
                reg.send(fd)?;
                dereg.set_u32(0, reg.response_u32());
                timed(&mut dereg, fd)
            }),
        );
        report(
            cell("reg_dereg", size),
            measure(budget, || create_destroy(&mut reg, &mut dereg, fd)),
        );

        // One live region for REREG_MR, toggled between two prepared commands.
        if let Err(e) = reg.send(fd) {
            cell("rereg_access", size).failed(&format!("errno={}", e.raw_os_error()));
            return;
        }
        let mr = reg.response_u32();
        let access = |acc: uverbs::AccessFlags| {
            ReregMr::new(mr, uverbs::mr::ReregFlags::ACCESS.bits()).access_flags(acc.bits())
        };
        let pd = |h: u32| ReregMr::new(mr, uverbs::mr::ReregFlags::PD.bits()).pd_handle(h);
        for (op, c1, c2) in [
            ("rereg_access", access(ACCESS_B), access(ACCESS_A)),
            ("rereg_pd", pd(pd2), pd(pd1)),
        ] {
            let mut p = [raw.prepare(&c1, &[], 0), raw.prepare(&c2, &[], 0)];
            let mut i = 0;
            report(
                cell(op, size),
                measure(budget, || {
                    i += 1;
                    timed(&mut p[i % 2], fd)
                }),
            );
        }
        dereg.set_u32(0, mr);
        let _ = dereg.send(fd);
    }
}
