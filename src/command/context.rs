//! Context-level commands: GET_CONTEXT and QUERY_DEVICE.

use uverbs_uapi as sys;

/// `GET_CONTEXT`: creates the process's verbs context on the opened file.
///
/// The kernel also creates an async-event file descriptor and returns it
/// in the response; its owner must close it. Some drivers need room for a
/// driver-private response (siw: 8 bytes; mlx5: 72), and mlx5 refuses a
/// context without its driver-private request ([`uhw_in`](Self::uhw_in)).
#[doc(alias = "ibv_cmd_get_context")]
#[derive(Clone, Copy, Debug, Default)]
pub struct GetContext<'a> {
    // The request is only `response`, which the transport fills.
    req: sys::ib_uverbs_get_context,
    uhw_in: &'a [u8],
}

impl<'a> GetContext<'a> {
    /// The command, without driver data.
    pub fn new() -> Self {
        Self::default()
    }

    /// Driver-private input (mlx5: `mlx5_ib_alloc_ucontext_req_v2`).
    pub fn uhw_in(mut self, uhw_in: &'a [u8]) -> Self {
        self.uhw_in = uhw_in;
        self
    }
}

write_command_of_request!(
    GetContext<'_>,
    IB_USER_VERBS_CMD_GET_CONTEXT,
    ib_uverbs_get_context,
    uverbs_uapi::ib_uverbs_get_context_resp,
    uhw_in = uhw_in
);

command_without_arguments!(
    /// `QUERY_DEVICE`: the device's attributes and limits.
    #[doc(alias = "ibv_cmd_query_device")]
    QueryDevice,
    IB_USER_VERBS_CMD_QUERY_DEVICE,
    ib_uverbs_query_device,
    ib_uverbs_query_device_resp
);
