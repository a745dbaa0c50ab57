//! Re-registration (`ibv_rereg_mr`): a registered mapping changes its
//! access flags and protection domain, then its translation (a new
//! mapping of another length), keeping its `BufferMr`; each step prints
//! how it was done and the keys before and after. Then a change the device
//! refuses shows how a failure says which registration is valid.
//!
//! `ReregFallback::Replace` does in place what the device can (rxe on
//! Linux 6.12: access and PD, same keys) and otherwise registers anew and
//! deregisters the old (new keys: publish them); `Strict` is libibverbs'
//! contract, a refusal when the device cannot. docs/rereg.md has the
//! details; `rereg_tour.rs` runs every kind of change and proves each with
//! a peer's RDMA WRITE.
//!
//! ```text
//! cargo run --example rereg -- [--device rxe0]
//! cargo vm demo    # runs it on rxe0 and siw0 in a VM
//! ```

use std::error::Error;

use memmap2::MmapMut;
use uverbs::mr::{MrState, Rereg, ReregFallback, ReregPath, RetargetBuffers};
use uverbs::{AccessFlags, BufferMr};

/// A mapping, not a `Vec`: under forced fork safety a registered heap page
/// is missing in a forked child, which may reuse it for anything.
type Mem = BufferMr<MmapMut>;

fn show(step: &str, path: ReregPath, (lkey, rkey): (u32, u32), mr: &Mem) {
    let (len, pd, access) = (mr.length(), mr.pd_handle(), mr.access());
    let (new_lkey, new_rkey) = (mr.lkey(), mr.rkey());
    print!("{step}: {path:?}, {len} bytes in PD {pd}, access {access:?}: ");
    println!("lkey {lkey:#x} -> {new_lkey:#x}, rkey {rkey:#x} -> {new_rkey:#x}");
}

fn main() -> Result<(), Box<dyn Error>> {
    use lexopt::prelude::*;
    let (mut device, mut args) = (None::<String>, lexopt::Parser::from_env());
    while let Some(arg) = args.next()? {
        match arg {
            Long("device") => device = Some(args.value()?.string()?),
            _ => return Err(arg.unexpected().into()),
        }
    }
    let mut devices = uverbs::devices()?; // the named one, or the first
    devices.retain(|d| device.as_ref().map_or(true, |name| name == d.name()));
    let ctx = devices.first().ok_or("no such RDMA device")?.open()?;
    let (pd1, pd2) = (ctx.alloc_pd()?, ctx.alloc_pd()?);
    let mut mr = pd1.reg_buffer(MmapMut::map_anon(64 << 10)?, AccessFlags::LOCAL_WRITE)?;
    let keys = |mr: &Mem| (mr.lkey(), mr.rkey());

    // Access and PD in one REREG_MR. No `unsafe`: no new memory is handed
    // to the device. (A BufferMr refuses REMOTE_WRITE: memory a peer may
    // write is a RemoteBufferMr.)
    let before = keys(&mr);
    let change = Rereg::new().access(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ);
    let path = mr.apply(&change.pd(&pd2), ReregFallback::Replace)?;
    show("access + PD", path, before, &mr);

    // The translation: the region moves to a new mapping, and the old one
    // comes back only once the kernel no longer references it. A region
    // peers could READ comes back on siw only once we say their READs are
    // done: siw keeps sending a READ's response after deregistration.
    // SAFETY: no peer was ever told the rkey, so no READ of the region exists.
    unsafe { mr.assume_peer_reads_done() };
    let before = keys(&mr);
    let moved = mr.retarget(MmapMut::map_anon(128 << 10)?, ReregFallback::Replace)?;
    show("translation", moved.path, before, &moved.mr);
    let (mut mr, old_len) = (moved.mr, moved.old.len());
    println!("translation: the old mapping ({old_len} bytes) is ours again");

    // A strict change the device refuses (rxe and siw cannot change the
    // translation in place). The error says which registration is valid.
    let before = keys(&mr);
    // SAFETY: as above: no peer knows the new rkey either.
    unsafe { mr.assume_peer_reads_done() };
    mr = match mr.retarget(MmapMut::map_anon(4096)?, ReregFallback::Strict) {
        Ok(moved) => {
            show("strict translation", moved.path, before, &moved.mr);
            moved.mr
        }
        Err(e) => {
            let (outcome, errno, state) = (e.error.outcome(), e.error.errno(), e.error.mr_state());
            println!("strict translation: {outcome} ({errno}): the MR is {state:?}");
            match (state, e.buffers) {
                // Old: nothing changed; the region and its keys stay valid.
                (MrState::Old, RetargetBuffers::Kept { mr, .. }) => mr,
                // Undefined: it was deregistered and both mappings are back.
                (_, buffers) => return Err(format!("the MR is gone: {buffers:?}").into()),
            }
        }
    };
    // The same question for a change of a plain MemoryRegion's attributes.
    match mr.set_access(AccessFlags::LOCAL_WRITE) {
        Ok(()) => println!("strict access: in place, rkey {:#x}", mr.rkey()),
        Err(e) if e.mr_state() == MrState::Old => println!("strict access: {e}: MR unchanged"),
        Err(e) => return Err(e.into()), // Undefined: drop it (that deregisters it)
    }
    println!("rereg: {}: done, lkey {:#x}", ctx.device_name(), mr.lkey());
    Ok(())
}
