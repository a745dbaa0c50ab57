//! What the kernel under test answers differently by release, where the
//! tests assert an exact answer. Each fact was measured in the VM on the two
//! kernels it boots (`cargo vm test --kernel 6.12|6.1`, tests/vm/README.md
//! "Kernels"): Debian 12's 6.1 and its 6.12. A release between them is taken
//! as 6.12 would answer; which release changed each rule was not measured.
//!
//! What the library itself must act on (siw's QUERY_QP without a state) is
//! the library's knowledge, not listed here; a REREG_MR the kernel refuses
//! needs none (strict: `Cmd` with the old MR; the fallback replaces).

use uverbs::error::Errno;
use uverbs::qp::QpState;
use uverbs::wr::WcStatus;

/// The running kernel's (major, minor), from `/proc/sys/kernel/osrelease`.
pub fn release() -> (u32, u32) {
    let text = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .expect("reading /proc/sys/kernel/osrelease");
    parse_release(&text).unwrap_or_else(|| panic!("unexpected kernel release {text:?}"))
}

/// `6.1.0-57-amd64` -> (6, 1). (Tested in device_bad_input: a test here
/// would run in every binary, fork_map_count's too, which must hold one.)
pub fn parse_release(text: &str) -> Option<(u32, u32)> {
    let mut parts = text.trim().split(['.', '-', '+']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// Whether the running kernel has the native `UVERBS_METHOD_REG_MR`
/// (Linux 6.17; from the kernel sources, not measured: the VM's 6.12 and
/// 6.1 lack it and answer `EPROTONOSUPPORT`).
pub fn has_reg_mr_method() -> bool {
    release() >= (6, 17)
}

/// Whether the running kernel answers as Linux 6.1 did (older than 6.12).
pub fn answers_as_6_1() -> bool {
    release() < (6, 12)
}

/// The errno of REG_MR with ON_DEMAND on a device without on-demand paging
/// (`ib_check_mr_access`): EINVAL on 6.1, EOPNOTSUPP on 6.12.
pub fn odp_refusal_errno() -> Errno {
    if answers_as_6_1() {
        Errno::INVAL
    } else {
        Errno::OPNOTSUPP
    }
}

/// The completion rxe gives a send whose own processing failed in its
/// requester (an lkey of another PD for a WRITE or SEND, an AH of another
/// PD for a UD send): the requester records LOC_QP_OP_ERR and moves the QP
/// to ERR. On 6.12 the flush then completes that very request first
/// (WR_FLUSH_ERR); on 6.1 it completes with the requester's LOC_QP_OP_ERR.
pub fn rxe_requester_failure_status() -> WcStatus {
    if answers_as_6_1() {
        WcStatus::LocQpOpErr
    } else {
        WcStatus::WrFlushErr
    }
}

/// The QP state a `refresh_state` answered, or `None` where the kernel
/// reports none (`Error::NotReported`: siw on 6.1, whose QUERY_QP fills no
/// state), said loudly; any other error fails the test. Assert on the
/// state only where it is `Some`.
pub fn reported_state(answer: Result<QpState, uverbs::Error>, what: &str) -> Option<QpState> {
    match answer {
        Ok(state) => Some(state),
        Err(e @ uverbs::Error::NotReported { .. }) => {
            eprintln!("NOTE: {what}: the QP's state is not checked: {e}");
            None
        }
        Err(e) => panic!("{what}: query_qp: {e}"),
    }
}

/// Whether rxe changes an MR in place (REREG_MR): 6.12's rxe has
/// `rereg_user_mr` (PD and access; translation refused), 6.1's has none, so
/// the kernel disables the method and answers EOPNOTSUPP to every flag set,
/// as it does for siw on both.
pub fn rxe_rereg_in_place() -> bool {
    !answers_as_6_1()
}

/// For a test of rxe's in-place REREG_MR under traffic: true (after a loud
/// `SKIPPED:` line naming the reason) where this kernel's rxe has no
/// REREG_MR, so there is no in-place change to prove. The replace path on
/// such an rxe is `device_fallback`'s.
pub fn skip_rxe_without_rereg(name: &str, test: &str) -> bool {
    if rxe_rereg_in_place() {
        return false;
    }
    let (major, minor) = release();
    eprintln!(
        "SKIPPED: {test} on {name}: Linux {major}.{minor}'s rxe has no REREG_MR \
         (EOPNOTSUPP for every flag set), so nothing changes in place to prove"
    );
    true
}

/// Whether siw pins a registration by its own rule (`siw_umem_get` on 6.1:
/// every page counts against RLIMIT_MEMLOCK, CAP_IPC_LOCK or not, and a
/// limit of 0 is ENOMEM) rather than by `ib_umem_get`'s (6.12: CAP_IPC_LOCK
/// bypasses the limit, a limit of 0 is EPERM).
pub fn siw_pins_by_its_own_rule() -> bool {
    answers_as_6_1()
}

/// Whether the kernel registers a `PROT_NONE` range that the MR may not
/// write (no LOCAL_WRITE, REMOTE_WRITE, REMOTE_ATOMIC or MW_BIND): 6.1 pins
/// read-only registrations with `FOLL_FORCE` (`ib_umem_get` for rxe,
/// `siw_umem_get` for siw), which reaches pages the process itself cannot
/// read; 6.12 pins without it and answers EFAULT. A writable registration
/// of such a range is EFAULT on both.
pub fn prot_none_registers_read_only() -> bool {
    answers_as_6_1()
}
