//! Address-handle commands: CREATE_AH and DESTROY_AH.

use uverbs_uapi as sys;

/// `CREATE_AH`: an address handle for UD sends in PD `pd_handle`.
///
/// rxe answers `rxe_create_ah_resp` (the `ah_num` a UD WQE names) as UHW
/// out: give the transport an 8-byte `uhw_out`.
#[doc(alias = "ibv_create_ah")]
#[doc(alias = "ibv_cmd_create_ah")]
#[derive(Clone, Copy, Debug)]
pub struct CreateAh {
    req: sys::ib_uverbs_create_ah,
}

impl CreateAh {
    /// An AH to `attr` in PD `pd_handle`.
    pub fn new(pd_handle: u32, attr: sys::ib_uverbs_ah_attr) -> Self {
        CreateAh {
            req: sys::ib_uverbs_create_ah {
                pd_handle,
                attr,
                ..Default::default()
            },
        }
    }

    /// A RoCE AH: a GRH to `dgid` from local GID `sgid_index` on `port`.
    pub fn roce(pd_handle: u32, dgid: [u8; 16], sgid_index: u8, hop_limit: u8, port: u8) -> Self {
        Self::new(
            pd_handle,
            sys::ib_uverbs_ah_attr {
                grh: sys::ib_uverbs_global_route {
                    dgid,
                    sgid_index,
                    hop_limit,
                    ..Default::default()
                },
                is_global: 1,
                port_num: port,
                ..Default::default()
            },
        )
    }

    setters! {
        /// The value kept with the AH (default 0).
        pub fn user_handle(user_handle: u64) => req.user_handle;
    }
}

// Mirrors ib_uverbs_create_ah{,_resp}; the request starts with `response`.
write_command_of_request!(
    CreateAh,
    IB_USER_VERBS_CMD_CREATE_AH,
    ib_uverbs_create_ah,
    uverbs_uapi::ib_uverbs_create_ah_resp
);

destroy_by_handle!(
    /// `DESTROY_AH`: destroys an address handle (no response).
    #[doc(alias = "ibv_destroy_ah")]
    #[doc(alias = "ibv_cmd_destroy_ah")]
    DestroyAh,
    IB_USER_VERBS_CMD_DESTROY_AH,
    ib_uverbs_destroy_ah,
    ah_handle,
    "AH"
);
