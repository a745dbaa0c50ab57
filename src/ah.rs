//! Address handles: where a send on a UD queue pair goes.
//!
//! An AH is created in a PD (`CREATE_AH`) from an address vector: on RoCE a
//! GRH to the peer's GID from one of the port's GIDs. rxe answers the
//! number its send WQEs name the AH by (`rxe_create_ah_resp.ah_num`), which
//! a [`UdDest`](crate::UdDest) borrowed from the [`AddressHandle`] carries.

use std::fmt;
use std::sync::Arc;

use zerocopy::FromBytes;

use crate::command::{CreateAh, DestroyAh};
use crate::error::{Errno, Error, Op};
use crate::pd::{debug_object, PdInner, ProtectionDomain};
use crate::provider::Provider;
use crate::query::Gid;
use crate::wr::UdDest;
use uverbs_uapi as sys;

/// The address vector of an address handle (`struct ibv_ah_attr` with its
/// `ibv_global_route`).
///
/// RoCE needs the GRH (`is_global`); [`AhAttr::roce`] fills it.
#[doc(alias = "ibv_ah_attr")]
#[doc(alias = "ibv_global_route")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AhAttr {
    /// The destination GID (the peer port's GID).
    pub dgid: Gid,
    /// The index of the local GID the packets come from.
    pub sgid_index: u8,
    /// The IP hop limit / TTL.
    pub hop_limit: u8,
    /// The traffic class (IPv6) or DSCP and ECN (IPv4).
    pub traffic_class: u8,
    /// The IPv6 flow label, 20 bits.
    pub flow_label: u32,
    /// The local port, 1-based.
    pub port: u8,
    /// The service level, 4 bits.
    pub sl: u8,
    /// A GRH is present (always on RoCE).
    pub is_global: bool,
    /// The destination LID (InfiniBand only; 0 on RoCE).
    pub dlid: u16,
    /// The static rate (`IBV_RATE_*`; 0 = the port's).
    pub static_rate: u8,
    /// The source path bits (InfiniBand only).
    pub src_path_bits: u8,
}

impl AhAttr {
    /// A RoCE address vector: a GRH to `dgid` from local GID `sgid_index`
    /// on `port`, hop limit 64, traffic class, flow label and SL 0.
    pub fn roce(dgid: Gid, sgid_index: u8, port: u8) -> Self {
        AhAttr {
            dgid,
            sgid_index,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            port,
            sl: 0,
            is_global: true,
            dlid: 0,
            static_rate: 0,
            src_path_bits: 0,
        }
    }

    /// The kernel's `ib_uverbs_ah_attr`, or why the fields do not fit it.
    fn to_raw(self) -> Result<sys::ib_uverbs_ah_attr, &'static str> {
        if self.flow_label > 0xf_ffff {
            return Err("the flow label has 20 bits");
        }
        if self.sl > 15 {
            return Err("the service level has 4 bits");
        }
        if self.port == 0 {
            return Err("ports are numbered from 1");
        }
        Ok(sys::ib_uverbs_ah_attr {
            grh: sys::ib_uverbs_global_route {
                dgid: self.dgid.raw(),
                flow_label: self.flow_label,
                sgid_index: self.sgid_index,
                hop_limit: self.hop_limit,
                traffic_class: self.traffic_class,
                ..Default::default()
            },
            dlid: self.dlid,
            sl: self.sl,
            src_path_bits: self.src_path_bits,
            static_rate: self.static_rate,
            is_global: self.is_global.into(),
            port_num: self.port,
            ..Default::default()
        })
    }
}

/// An address handle (`struct ibv_ah`): the destination of UD sends,
/// named in a work request by a [`UdDest`](crate::UdDest) made from it.
///
/// It keeps its PD alive; dropping it destroys it (`DESTROY_AH`), except in
/// a forked child, where it is the parent's and nothing is sent. Keep it
/// until the completions of the sends that name it have been polled: see
/// [`UdDest`](crate::UdDest).
#[doc(alias = "ibv_ah")]
#[doc(alias = "ibv_create_ah")]
pub struct AddressHandle {
    pd: Arc<PdInner>,
    handle: u32,
    ah_num: u32,
    attr: AhAttr,
}

impl fmt::Debug for AddressHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_object(f, "AddressHandle", &self.pd.ctx, self.handle)
            .field("ah_num", &self.ah_num)
            .field("dgid", &self.attr.dgid)
            .field("sgid_index", &self.attr.sgid_index)
            .field("port", &self.attr.port)
            .finish()
    }
}

impl ProtectionDomain {
    /// Creates an address handle to `attr` in this PD (`CREATE_AH`).
    ///
    /// A field out of its range (flow label above 20 bits, SL above 4
    /// bits, port 0) is an [`Error::InvalidInput`] and nothing is sent; the
    /// kernel refuses a GID index the port does not have, or a missing GRH
    /// on RoCE, with `EINVAL`. rxe must answer the AH's number (every
    /// kernel since 5.10 does), else `EPROTO` and the AH is destroyed again.
    /// Other drivers: `EOPNOTSUPP` for now (siw has no UD).
    #[doc(alias = "ibv_create_ah")]
    pub fn create_ah(&self, attr: &AhAttr) -> Result<AddressHandle, Error> {
        let ctx = &self.inner.ctx;
        let device = &ctx.inner.device;
        let fail = |e| Error::os(Op::CreateAh, device, e);
        ctx.check_process(Op::CreateAh)?;
        if ctx.inner.provider != Provider::Rxe {
            return Err(fail(Errno::OPNOTSUPP));
        }
        let raw = attr
            .to_raw()
            .map_err(|reason| Error::input(Op::CreateAh, device, reason))?;
        let cmd = CreateAh::new(self.inner.handle, raw);
        let mut uhw = [0u8; size_of::<sys::rxe_create_ah_resp>()];
        // SAFETY: CREATE_AH hands no memory to the device.
        let (resp, written) = unsafe { ctx.run(Op::CreateAh, &cmd, &mut uhw) }?;
        let ah_num = match sys::rxe_create_ah_resp::read_from_bytes(&uhw[..]) {
            // The kernel writes only `ah_num` (4 of the 8 bytes).
            Ok(r) if written >= size_of_val(&r.ah_num) && r.ah_num != 0 => r.ah_num,
            _ => {
                // SAFETY: the AH just created, owned by nothing else yet.
                let _ = unsafe { ctx.run(Op::DestroyAh, &DestroyAh::new(resp.ah_handle), &mut []) };
                return Err(fail(Errno::PROTO));
            }
        };
        Ok(AddressHandle {
            pd: self.inner.clone(),
            handle: resp.ah_handle,
            ah_num,
            attr: *attr,
        })
    }
}

impl AddressHandle {
    /// The kernel's handle.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// The number rxe's send WQEs name this AH by (`ah_num`).
    pub fn ah_num(&self) -> u32 {
        self.ah_num
    }

    /// The address vector it was created with.
    pub fn attr(&self) -> &AhAttr {
        &self.attr
    }

    /// The handle of the PD it belongs to.
    pub fn pd_handle(&self) -> u32 {
        self.pd.handle
    }

    /// The context it belongs to.
    pub fn context(&self) -> &crate::Context {
        &self.pd.ctx
    }
}

// The constructor lives with the AH, not in `wr`: the work-request model
// does not depend on the objects.
impl<'a> UdDest<'a> {
    /// Sends to QP `remote_qpn` (24 bits) with Q_Key `remote_qkey`, through
    /// `ah`, which the destination borrows (see [`UdDest`]).
    pub fn new(ah: &'a AddressHandle, remote_qpn: u32, remote_qkey: u32) -> Self {
        UdDest::from_raw(ah.ah_num(), remote_qpn, remote_qkey)
    }
}

impl Drop for AddressHandle {
    fn drop(&mut self) {
        // In a forked child the AH is the parent's: send nothing.
        if !self.pd.ctx.is_owned_by_this_process() {
            return;
        }
        // SAFETY: DESTROY_AH of the handle this value owns; no UdDest
        // borrows it any more (the borrow checker saw to that).
        let _ = unsafe {
            self.pd
                .ctx
                .run(Op::DestroyAh, &DestroyAh::new(self.handle), &mut [])
        };
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use zerocopy::IntoBytes;

    use super::*;
    use crate::transport::{RawCommand, RecordingTransport, Transport, TransportKind};
    use crate::{Context, DriverId, OpenOptions};

    /// The recording fake, plus CREATE_AH answered with handle 42 and
    /// `ah_num` (written as rxe does: 4 bytes) and DESTROY_AH; every
    /// command code is logged in order.
    #[derive(Debug)]
    struct FakeAh {
        fake: RecordingTransport,
        ah_num: u32,
        log: Mutex<Vec<(u32, Vec<u8>)>>,
    }

    // SAFETY: CREATE_AH writes only the first 4 bytes of core_out and of
    // uhw_out (after checking their lengths) and returns 4; DESTROY_AH
    // writes nothing; the rest goes to the recording fake.
    unsafe impl Transport for FakeAh {
        fn kind(&self) -> TransportKind {
            self.fake.kind()
        }

        unsafe fn execute(&self, cmd: &mut RawCommand<'_>) -> Result<usize, Errno> {
            self.log
                .lock()
                .unwrap()
                .push((cmd.code, cmd.core_in.to_vec()));
            match cmd.code {
                sys::IB_USER_VERBS_CMD_CREATE_AH => {
                    cmd.core_out.fill(0);
                    cmd.uhw_out.fill(0);
                    if cmd.core_out.len() < 4 || cmd.uhw_out.len() < 4 {
                        return Err(Errno::INVAL);
                    }
                    cmd.core_out[..4].copy_from_slice(&42u32.to_ne_bytes());
                    cmd.uhw_out[..4].copy_from_slice(&self.ah_num.to_ne_bytes());
                    Ok(4)
                }
                sys::IB_USER_VERBS_CMD_DESTROY_AH => Ok(0),
                // SAFETY: forwarded to the caller.
                _ => unsafe { self.fake.execute(cmd) },
            }
        }
    }

    fn rxe_over(ah_num: u32) -> (Context, Arc<FakeAh>) {
        let t = Arc::new(FakeAh {
            fake: RecordingTransport::new(),
            ah_num,
            log: Mutex::new(Vec::new()),
        });
        let ctx = Context::with_transport(
            "fake0",
            Some(DriverId::RXE),
            Box::new(t.clone()),
            &OpenOptions::new(),
        )
        .unwrap();
        (ctx, t)
    }

    fn codes(t: &FakeAh) -> Vec<u32> {
        t.log.lock().unwrap().iter().map(|(c, _)| *c).collect()
    }

    fn gid() -> Gid {
        Gid::from_raw([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8])
    }

    /// Fields out of range are refused, typed, before anything is sent.
    #[test]
    fn out_of_range_fields_are_refused_before_sending() {
        let (ctx, t) = rxe_over(5);
        let pd = ctx.alloc_pd().unwrap();
        let sent = codes(&t).len();
        let good = AhAttr::roce(gid(), 0, 1);
        for bad in [
            AhAttr {
                flow_label: 0x10_0000,
                ..good
            },
            AhAttr { sl: 16, ..good },
            AhAttr { port: 0, ..good },
        ] {
            let err = pd.create_ah(&bad).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::InvalidInput {
                        op: Op::CreateAh,
                        ..
                    }
                ),
                "{err}"
            );
        }
        assert_eq!(codes(&t).len(), sent, "nothing sent");
    }

    /// The request carries every field where the kernel reads it; the AH
    /// answers its number, a UdDest made from it carries that number, and
    /// dropping it destroys it before its PD is deallocated.
    #[test]
    fn create_ah_sends_the_vector_and_drop_destroys_before_the_pd() {
        let (ctx, t) = rxe_over(5);
        let pd = ctx.alloc_pd().unwrap();
        let attr = AhAttr {
            hop_limit: 3,
            traffic_class: 0x28,
            flow_label: 0xa_bcde,
            sl: 7,
            ..AhAttr::roce(gid(), 2, 1)
        };
        let ah = pd.create_ah(&attr).unwrap();
        assert_eq!(
            (ah.handle(), ah.ah_num(), ah.pd_handle()),
            (42, 5, pd.handle())
        );
        assert_eq!(ah.attr(), &attr);
        let (_, core_in) = t.log.lock().unwrap().last().cloned().unwrap();
        let req = sys::ib_uverbs_create_ah::read_from_prefix(&core_in)
            .unwrap()
            .0;
        let expected = sys::ib_uverbs_ah_attr {
            grh: sys::ib_uverbs_global_route {
                dgid: gid().raw(),
                flow_label: 0xa_bcde,
                sgid_index: 2,
                hop_limit: 3,
                traffic_class: 0x28,
                reserved: 0,
            },
            sl: 7,
            is_global: 1,
            port_num: 1,
            ..Default::default()
        };
        assert_eq!(req.pd_handle, pd.handle());
        assert_eq!(req.attr.as_bytes(), expected.as_bytes());

        let dest = UdDest::new(&ah, 0x12_3456, 0x1111_2222);
        assert_eq!(
            (dest.ah_num(), dest.remote_qpn(), dest.remote_qkey()),
            (5, 0x12_3456, 0x1111_2222)
        );
        drop(pd); // the AH keeps it alive
        assert!(!codes(&t).contains(&sys::IB_USER_VERBS_CMD_DEALLOC_PD));
        drop(ah);
        let tail = codes(&t);
        assert_eq!(
            &tail[tail.len() - 2..],
            &[
                sys::IB_USER_VERBS_CMD_DESTROY_AH,
                sys::IB_USER_VERBS_CMD_DEALLOC_PD
            ]
        );
        let (_, destroy) = t.log.lock().unwrap()[tail.len() - 2].clone();
        let req = sys::ib_uverbs_destroy_ah::read_from_prefix(&destroy)
            .unwrap()
            .0;
        assert_eq!(req.ah_handle, 42);
    }

    /// An answer without an AH number (a kernel before 5.10) would make
    /// WQEs name AH 0, which rxe reads as "the vector is in the WQE": the
    /// AH is destroyed again and the error is EPROTO.
    #[test]
    fn an_answer_without_ah_num_is_eproto_and_destroys_the_ah() {
        let (ctx, t) = rxe_over(0);
        let pd = ctx.alloc_pd().unwrap();
        let err = pd.create_ah(&AhAttr::roce(gid(), 0, 1)).unwrap_err();
        assert_eq!(
            (err.op(), err.errno()),
            (Op::CreateAh, Some(Errno::PROTO)),
            "{err}"
        );
        let tail = codes(&t);
        assert_eq!(
            &tail[tail.len() - 2..],
            &[
                sys::IB_USER_VERBS_CMD_CREATE_AH,
                sys::IB_USER_VERBS_CMD_DESTROY_AH
            ]
        );
    }

    /// A driver without UD support here (siw, unknown) is refused before sending.
    #[test]
    fn other_drivers_are_refused_before_sending() {
        for driver in [Some(DriverId::SIW), None] {
            let t = Arc::new(RecordingTransport::new());
            let ctx =
                Context::with_transport("fake0", driver, Box::new(t.clone()), &OpenOptions::new())
                    .unwrap();
            let pd = ctx.alloc_pd().unwrap();
            let before = t.count();
            let err = pd.create_ah(&AhAttr::roce(gid(), 0, 1)).unwrap_err();
            assert_eq!(err.errno(), Some(Errno::OPNOTSUPP), "{err}");
            assert_eq!(t.count(), before);
        }
    }
}
