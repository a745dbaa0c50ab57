//! `query_device_ex` (`EX_QUERY_DEVICE`, an extended command: its own
//! write() header, `INVOKE_WRITE` with the extended flag over ioctl) on
//! real devices: the base part is what `QUERY_DEVICE` answers, the kernel
//! writes the whole extended answer, and each extended field is what the
//! driver reports. rxe (`rxe_query_device`: a copy of `rxe->attr`, which
//! `rxe_init_device_param` fills without ODP, timestamps, RSS, TM, CQ
//! moderation or device memory) and siw (`siw_query_device`: zeroed, then
//! the base limits) report zero for all of those on Linux 6.1 and 6.12.

#[macro_use]
mod common;

use common::{driver, loud, Driver};
use uverbs::device::{CqModerationCaps, OdpCaps, RssCaps, TmCaps};

/// `sizeof(struct ib_uverbs_ex_query_device_resp)`: what both kernels write.
const EX_RESPONSE_LEN: u32 = 304;
/// `IB_DEVICE_MEM_MGT_EXTENSIONS`, siw's only capability bit.
const MEM_MGT_EXTENSIONS: u64 = 1 << 21;
/// `IB_DEVICE_FLUSH_GLOBAL | FLUSH_PERSISTENT | ATOMIC_WRITE` (Linux 6.2+),
/// the bits above 32 that rxe sets on 6.12 (none on 6.1).
const RXE_HIGH_FLAGS: u64 = (1 << 38) | (1 << 39) | (1 << 40);

device_test!(
    query_device_ex_extends_query_device,
    |name, ctx, _counts| {
        let ex = ctx
            .query_device_ex()
            .unwrap_or_else(|e| panic!("{name}: query_device_ex: {e}"));
        let base = ctx
            .query_device()
            .unwrap_or_else(|e| panic!("{name}: query_device: {e}"));
        loud(&format!(
            "{name} over {}: query_device_ex = {ex:?}",
            ctx.transport_kind()
        ));
        assert_eq!(ex.base, base, "{name}: the base part is QUERY_DEVICE's");
        assert_eq!(
            ex.response_length, EX_RESPONSE_LEN,
            "{name}: the kernel writes its whole answer"
        );
        let flags = ex
            .device_cap_flags_ex
            .unwrap_or_else(|| panic!("{name}: device_cap_flags_ex absent"));
        assert_eq!(
            flags as u32, base.device_cap_flags,
            "{name}: the base flags are the lower 32 of the extended ones"
        );
        let known = matches!(driver(&ctx), Driver::Rxe | Driver::Siw);
        if !known {
            loud(&format!(
                "{name}: driver values not known here, not checked"
            ));
            return;
        }
        match driver(&ctx) {
            Driver::Siw => assert_eq!(flags, MEM_MGT_EXTENSIONS, "{name}: siw's flags"),
            _ => assert!(
                matches!(flags >> 32 << 32, 0 | RXE_HIGH_FLAGS),
                "{name}: rxe's bits above 32: {flags:#x}"
            ),
        }
        // Neither driver stamps completions, pages on demand, spreads receives
        // or moderates CQs.
        assert_eq!(ex.completion_timestamp_mask, Some(0), "{name}");
        assert_eq!(ex.hca_core_clock, Some(0), "{name}");
        assert_eq!(ex.odp_caps, Some(OdpCaps::default()), "{name}");
        assert_eq!(ex.xrc_odp_caps, Some(0), "{name}");
        assert_eq!(ex.rss_caps, Some(RssCaps::default()), "{name}");
        assert_eq!(ex.max_wq_type_rq, Some(0), "{name}");
        assert_eq!(ex.raw_packet_caps, Some(0), "{name}");
        assert_eq!(ex.tm_caps, Some(TmCaps::default()), "{name}");
        assert_eq!(
            ex.cq_moderation_caps,
            Some(CqModerationCaps::default()),
            "{name}"
        );
        assert_eq!(ex.max_dm_size, Some(0), "{name}");
    }
);
