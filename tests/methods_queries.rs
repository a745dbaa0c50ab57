//! The query API against the recording fake kernel: which method (or write
//! command, or sysfs file) each query uses, what the frame carried, and
//! that answers are decoded from the outputs the kernel marked written.

use std::sync::Arc;

use uverbs::device::{DriverId, GidType, LinkLayer, OpenOptions, PortState};
use uverbs::error::{Errno, Op};
use uverbs::mr::ReregFlags;
use uverbs::transport::frame::IoctlFrame;
use uverbs::transport::{Method, RawCommand, RecordingTransport, Transport, TransportKind};
use uverbs::{uverbs_uapi as sys, AccessFlags, Context, Error};

fn fake_ctx(driver: Option<DriverId>) -> (Arc<RecordingTransport>, Context) {
    let fake = Arc::new(RecordingTransport::new());
    let ctx = Context::with_transport("fake0", driver, Box::new(fake.clone()), &OpenOptions::new())
        .unwrap();
    (fake, ctx)
}

fn os_errno(e: &Error) -> (Op, Option<Errno>) {
    (e.op(), e.errno())
}

#[test]
fn query_port_uses_the_method_and_decodes_the_extended_answer() {
    let (fake, ctx) = fake_ctx(Some(DriverId::RXE));
    let port = ctx.query_port(1).unwrap();
    assert_eq!(port.state, PortState::Active);
    assert_eq!(port.link_layer, LinkLayer::Ethernet);
    assert_eq!(
        (port.max_mtu_bytes(), port.active_mtu_bytes()),
        (Some(4096), Some(1024))
    );
    assert_eq!(port.gid_tbl_len, 2);
    assert_eq!(port.phys_state, 5);
    assert_eq!(port.flags, sys::IB_UVERBS_QPF_GRH_REQUIRED as u8);
    assert_eq!(port.port_cap_flags2, Some(0x20));
    assert_eq!(port.active_speed_ex, Some(0x10));

    let methods = fake.methods();
    assert_eq!(methods.len(), 1);
    let m = &methods[0];
    assert_eq!(
        (m.object_id, m.method_id, m.driver_id),
        (sys::UVERBS_OBJECT_DEVICE, sys::UVERBS_METHOD_QUERY_PORT, 14)
    );
    let port_num = m.attr(sys::UVERBS_ATTR_QUERY_PORT_PORT_NUM).unwrap();
    assert_eq!(
        (port_num.len, port_num.input.as_slice()),
        (8, &1u64.to_ne_bytes()[..])
    );
    let resp = m.attr(sys::UVERBS_ATTR_QUERY_PORT_RESP).unwrap();
    assert_eq!(resp.len, 48);
    assert_eq!(
        fake.count_of(sys::IB_USER_VERBS_CMD_QUERY_PORT),
        0,
        "no write command"
    );

    let e = ctx.query_port(2).unwrap_err();
    assert_eq!(os_errno(&e), (Op::QueryPort, Some(Errno::INVAL)));
    assert!(
        e.to_string().starts_with("query_port on fake0: EINVAL"),
        "{e}"
    );
}

#[test]
fn query_port_without_a_driver_id_or_the_method_uses_the_write_command() {
    let (fake, ctx) = fake_ctx(None);
    let port = ctx.query_port(1).unwrap();
    assert_eq!(port.state, PortState::Active);
    assert_eq!(
        port.port_cap_flags2, None,
        "the write answer has no such field"
    );
    assert_eq!(port.active_speed_ex, None);
    let cmds = fake.commands();
    let cmd = cmds.last().unwrap();
    assert_eq!(cmd.code, sys::IB_USER_VERBS_CMD_QUERY_PORT);
    let req: sys::ib_uverbs_query_port = cmd.request().unwrap();
    assert_eq!(req.port_num, 1);
    assert_eq!(cmd.core_out_len, 40);
    assert!(fake.methods().is_empty());

    // A kernel without the method (EPROTONOSUPPORT): the command, once.
    let (fake, ctx) = fake_ctx(Some(DriverId::RXE));
    fake.fail_next_method(
        sys::UVERBS_OBJECT_DEVICE,
        sys::UVERBS_METHOD_QUERY_PORT,
        Errno::PROTONOSUPPORT,
    );
    let port = ctx.query_port(1).unwrap();
    assert_eq!(port.port_cap_flags2, None);
    assert_eq!(fake.count_of_method(0, sys::UVERBS_METHOD_QUERY_PORT), 1);
    assert_eq!(fake.count_of(sys::IB_USER_VERBS_CMD_QUERY_PORT), 1);
    // Any other refusal is the answer: no second try.
    fake.fail_next_method(0, sys::UVERBS_METHOD_QUERY_PORT, Errno::NODEV);
    let e = ctx.query_port(1).unwrap_err();
    assert_eq!(os_errno(&e), (Op::QueryPort, Some(Errno::NODEV)));
    assert_eq!(fake.count_of(sys::IB_USER_VERBS_CMD_QUERY_PORT), 1);
}

#[test]
fn query_gid_entry_and_table_decode_the_kernel_entries() {
    let (fake, ctx) = fake_ctx(Some(DriverId::RXE));
    let e0 = ctx.query_gid_entry(1, 0).unwrap();
    assert_eq!(
        e0.gid.to_string(),
        "fe80:0000:0000:0000:0211:22ff:fe33:4455"
    );
    assert_eq!((e0.gid_index, e0.port_num), (0, 1));
    assert_eq!(e0.gid_type, GidType::RoceV2);
    assert_eq!(e0.netdev_ifindex, 7);
    assert_eq!(
        ctx.query_gid(1, 1).unwrap().to_string(),
        "0000:0000:0000:0000:0000:ffff:c000:0201"
    );
    let m = fake.methods().last().cloned().unwrap();
    assert_eq!(m.method_id, sys::UVERBS_METHOD_QUERY_GID_ENTRY);
    assert_eq!(m.attr(1).unwrap().input, 1u64.to_ne_bytes(), "GID_INDEX");
    assert_eq!(
        m.attr(2).unwrap().input,
        0u32.to_ne_bytes(),
        "FLAGS: 4 bytes, 0"
    );
    // An index past the table: the kernel's EINVAL, not a sysfs read.
    let e = ctx.query_gid(1, 9).unwrap_err();
    assert_eq!(os_errno(&e), (Op::QueryGid, Some(Errno::INVAL)));

    let table = ctx.query_gid_table().unwrap();
    assert_eq!(table.len(), 2);
    assert_eq!(table[0], e0);
    assert_eq!(table[1].gid_index, 1);
    let m = fake.methods().last().cloned().unwrap();
    assert_eq!(m.method_id, sys::UVERBS_METHOD_QUERY_GID_TABLE);
    let entries = m
        .attr(sys::UVERBS_ATTR_QUERY_GID_TABLE_RESP_ENTRIES)
        .unwrap();
    assert_eq!(
        entries.len,
        2 * 32,
        "room for the port's gid_tbl_len entries"
    );
}

#[test]
fn gid_queries_fall_back_to_sysfs_without_the_method() {
    let sysfs_path = |e: Error| match e {
        Error::Sysfs { op, path, .. } => (op, path.display().to_string()),
        other => panic!("expected a sysfs error, got {other:?}"),
    };
    // The method refused with EOPNOTSUPP: sysfs is read (and there is no
    // fake0 in sysfs, so the error names the file it tried).
    let (fake, ctx) = fake_ctx(Some(DriverId::RXE));
    fake.fail_next_method(0, sys::UVERBS_METHOD_QUERY_GID_ENTRY, Errno::OPNOTSUPP);
    assert_eq!(
        sysfs_path(ctx.query_gid(1, 3).unwrap_err()),
        (
            Op::QueryGid,
            "/sys/class/infiniband/fake0/ports/1/gids/3".into()
        )
    );
    fake.fail_next_method(0, sys::UVERBS_METHOD_QUERY_GID_TABLE, Errno::PROTONOSUPPORT);
    assert_eq!(
        sysfs_path(ctx.query_gid_table().unwrap_err()),
        (
            Op::QueryGidTable,
            "/sys/class/infiniband/fake0/ports/1/gids".into()
        )
    );
    // Other errors are the answer.
    fake.fail_next_method(0, sys::UVERBS_METHOD_QUERY_GID_ENTRY, Errno::NOENT);
    let e = ctx.query_gid(1, 0).unwrap_err();
    assert_eq!(os_errno(&e), (Op::QueryGid, Some(Errno::NOENT)));
    // No driver id: straight to sysfs, no method sent.
    let (fake, ctx) = fake_ctx(None);
    sysfs_path(ctx.query_gid(1, 0).unwrap_err());
    assert!(fake.methods().is_empty());
}

#[test]
fn query_context_needs_the_method() {
    let (fake, ctx) = fake_ctx(Some(DriverId::SIW));
    let attr = ctx.query_context().unwrap();
    assert_eq!(attr.num_comp_vectors, ctx.num_comp_vectors());
    assert_eq!(
        attr.core_support,
        sys::IB_UVERBS_CORE_SUPPORT_OPTIONAL_MR_ACCESS
    );
    let m = fake.methods().pop().unwrap();
    assert_eq!(
        (m.method_id, m.driver_id, m.attrs.len()),
        (sys::UVERBS_METHOD_QUERY_CONTEXT, 18, 2)
    );
    // rxe and siw answer EOPNOTSUPP (no query_ucontext): passed on.
    fake.fail_next_method(0, sys::UVERBS_METHOD_QUERY_CONTEXT, Errno::OPNOTSUPP);
    let e = ctx.query_context().unwrap_err();
    assert_eq!(os_errno(&e), (Op::QueryContext, Some(Errno::OPNOTSUPP)));
    let (_, ctx) = fake_ctx(None);
    let e = ctx.query_context().unwrap_err();
    assert_eq!(os_errno(&e), (Op::QueryContext, Some(Errno::OPNOTSUPP)));
}

#[test]
fn mr_query_follows_reg_and_every_rereg() {
    let (fake, ctx) = fake_ctx(Some(DriverId::RXE));
    let (pd1, pd2) = (ctx.alloc_pd().unwrap(), ctx.alloc_pd().unwrap());
    let mut buf = vec![0u8; 3 << 20];
    let mut other = vec![0u8; 2 << 20];
    // SAFETY: the fake kernel touches no memory; both buffers outlive the MR.
    let mut mr =
        unsafe { pd1.reg_mr(buf.as_mut_ptr(), 1 << 20, AccessFlags::LOCAL_WRITE) }.unwrap();
    let check = |mr: &uverbs::MemoryRegion, when: &str| {
        let q = mr.query().unwrap_or_else(|e| panic!("{when}: {e}"));
        assert_eq!(
            (q.lkey, q.rkey, q.length, q.iova),
            (mr.lkey(), mr.rkey(), mr.length() as u64, mr.addr()),
            "{when}"
        );
        assert_eq!(
            fake.mr_attrs(mr.handle()),
            Some((q.lkey, q.rkey, q.length, q.iova)),
            "{when}"
        );
        assert_ne!(
            q.lkey, q.rkey,
            "{when}: the fake's keys differ, so a swap shows"
        );
        q
    };
    let first = check(&mr, "after reg");
    mr.set_access(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)
        .unwrap();
    check(&mr, "after rereg ACCESS");
    mr.set_pd(&pd2).unwrap();
    check(&mr, "after rereg PD");
    // SAFETY: `other` outlives the MR.
    unsafe {
        mr.rereg(
            ReregFlags::TRANSLATION,
            None,
            other.as_mut_ptr(),
            other.len(),
            AccessFlags::empty(),
        )
    }
    .unwrap();
    let moved = check(&mr, "after rereg TRANSLATION");
    assert_ne!(moved.iova, first.iova);
    assert_eq!(moved.length, 2 << 20);

    let m = fake.methods().pop().unwrap();
    assert_eq!(
        (m.object_id, m.method_id),
        (sys::UVERBS_OBJECT_MR, sys::UVERBS_METHOD_QUERY_MR)
    );
    let handle = m.attr(sys::UVERBS_ATTR_QUERY_MR_HANDLE).unwrap();
    assert_eq!((handle.len, handle.data), (0, u64::from(mr.handle())));
    drop(mr);

    // Without a driver id there is no way to ask (no write() command exists).
    let (_, ctx) = fake_ctx(None);
    let pd = ctx.alloc_pd().unwrap();
    // SAFETY: as above.
    let mr = unsafe { pd.reg_mr(other.as_mut_ptr(), 4096, AccessFlags::LOCAL_WRITE) }.unwrap();
    let e = mr.query().unwrap_err();
    assert_eq!(os_errno(&e), (Op::QueryMr, Some(Errno::OPNOTSUPP)));
}

#[test]
fn kernel_handle_count_goes_through_info_handles() {
    let (fake, ctx) = fake_ctx(Some(DriverId::RXE));
    let _pds = (ctx.alloc_pd().unwrap(), ctx.alloc_pd().unwrap());
    assert_eq!(ctx.kernel_handle_count(sys::UVERBS_OBJECT_PD).unwrap(), 2);
    assert_eq!(ctx.kernel_handle_count(sys::UVERBS_OBJECT_MR).unwrap(), 0);
    let m = fake.methods().pop().unwrap();
    assert_eq!(m.method_id, sys::UVERBS_METHOD_INFO_HANDLES);
    assert_eq!(
        m.attr(0).unwrap().input,
        u64::from(sys::UVERBS_OBJECT_MR).to_ne_bytes()
    );
    assert_eq!(m.attr(2).unwrap().len, 256, "64 handles of room");
    let (_, ctx) = fake_ctx(None);
    let e = ctx.kernel_handle_count(sys::UVERBS_OBJECT_PD).unwrap_err();
    assert_eq!(os_errno(&e), (Op::InfoHandles, Some(Errno::OPNOTSUPP)));
}

/// A transport that runs methods on the fake but then forgets every
/// `VALID_OUTPUT` flag, as a kernel that did not write its outputs would.
#[derive(Debug)]
struct UnmarkedOutputs(RecordingTransport);

// SAFETY: forwards to the fake (which keeps the contract) and only clears
// flags in the frame afterwards.
unsafe impl Transport for UnmarkedOutputs {
    fn kind(&self) -> TransportKind {
        TransportKind::Fake
    }
    unsafe fn execute(&self, cmd: &mut RawCommand<'_>) -> Result<usize, Errno> {
        // SAFETY: forwarded to the caller.
        unsafe { self.0.execute(cmd) }
    }
    unsafe fn invoke(&self, frame: &mut IoctlFrame) -> Result<(), Errno> {
        // SAFETY: forwarded to the caller.
        unsafe { self.0.invoke(frame) }?;
        let ids: Vec<u16> = frame.attrs().iter().map(|a| a.attr_id).collect();
        for id in ids {
            frame.attr_mut(id).unwrap().flags &= !sys::UVERBS_ATTR_F_VALID_OUTPUT;
        }
        Ok(())
    }
}

#[test]
fn outputs_the_kernel_did_not_mark_are_never_read() {
    let ctx = Context::with_transport(
        "fake0",
        Some(DriverId::RXE),
        Box::new(UnmarkedOutputs(RecordingTransport::new())),
        &OpenOptions::new(),
    )
    .unwrap();
    // The fake wrote every answer, but nothing says so: EPROTO, not the bytes.
    for e in [
        ctx.query_port(1).map(drop).unwrap_err(),
        ctx.query_context().map(drop).unwrap_err(),
        ctx.query_gid(1, 0).map(drop).unwrap_err(),
        ctx.kernel_handle_count(sys::UVERBS_OBJECT_PD)
            .map(drop)
            .unwrap_err(),
    ] {
        assert_eq!(e.errno(), Some(Errno::PROTO), "{e}");
    }
    // The same through the builder: the value is there, `read` refuses it.
    let fake = UnmarkedOutputs(RecordingTransport::new());
    let mut n = 0u32;
    let mut m = Method::new(0, sys::UVERBS_METHOD_QUERY_CONTEXT, 14);
    let out = m.ptr_out(sys::UVERBS_ATTR_QUERY_CONTEXT_NUM_COMP_VECTORS, &mut n);
    // SAFETY: QUERY_CONTEXT hands nothing to the device.
    let done = unsafe { m.invoke(&fake) }.unwrap();
    assert_eq!(done.read(out), None);

    assert_eq!(n, 1, "the fake did write it");
}

#[test]
fn the_fake_kernel_checks_attributes_like_uverbs_ioctl() {
    let fake = RecordingTransport::new();
    let send = |m: Method<'_>| {
        // SAFETY: query methods only; nothing is handed to a device.
        unsafe { m.invoke(&fake) }.map(drop)
    };
    let mut total = 0u32;
    let mut list = [0u32; 4];
    // Missing the mandatory OBJECT_ID: EINVAL.
    let mut m = Method::new(0, sys::UVERBS_METHOD_INFO_HANDLES, 14);
    let _ = m.ptr_out(sys::UVERBS_ATTR_INFO_TOTAL_HANDLES, &mut total);
    assert_eq!(send(m), Err(Errno::INVAL));
    // An unknown mandatory attribute: EPROTONOSUPPORT; optional: ignored.
    let mut m = Method::new(0, sys::UVERBS_METHOD_QUERY_CONTEXT, 14);
    m.const_in(9, 0);
    assert_eq!(send(m), Err(Errno::PROTONOSUPPORT));
    let mut m = Method::new(0, sys::UVERBS_METHOD_QUERY_CONTEXT, 14);
    m.const_in(9, 0).optional();
    assert_eq!(send(m), Ok(()));
    // A duplicate: EINVAL.
    let mut m = Method::new(0, sys::UVERBS_METHOD_INFO_HANDLES, 14);
    m.const_in(0, 1).const_in(0, 1);
    let _ = m.bytes_out(2, zerocopy::IntoBytes::as_mut_bytes(&mut list[..]));
    assert_eq!(send(m), Err(Errno::INVAL));
    // A const of 4 bytes (CONST_IN is exactly 8): EINVAL.
    let mut m = Method::new(0, sys::UVERBS_METHOD_QUERY_PORT, 14);
    m.inline_in(0, 1u32);
    let mut resp = sys::ib_uverbs_query_port_resp_ex::default();
    let _ = m.ptr_out(1, &mut resp);
    assert_eq!(send(m), Err(Errno::INVAL));
    // An unknown method: EPROTONOSUPPORT; every one is recorded.
    assert_eq!(send(Method::new(0, 0x7f, 14)), Err(Errno::PROTONOSUPPORT));
    assert_eq!(fake.methods().len(), 6);
    // A pointer input longer than 8 bytes is read through its pointer.
    let flags = [0u8; 12];
    let mut entry = sys::ib_uverbs_gid_entry::default();
    let mut m = Method::new(0, sys::UVERBS_METHOD_QUERY_GID_ENTRY, 14);
    m.const_in(0, 1).const_in(1, 0).ptr_in(2, &flags[..]);
    let _ = m.ptr_out(3, &mut entry);
    assert_eq!(send(m), Err(Errno::INVAL), "FLAGS longer than 8 bytes");
    let rec = fake.methods().pop().unwrap();
    assert_eq!(rec.attr(2).unwrap().input, vec![0u8; 12]);
    assert_eq!(rec.attr(2).unwrap().data, flags.as_ptr() as u64);
}
