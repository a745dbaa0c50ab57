//! Context-level commands: GET_CONTEXT, QUERY_DEVICE and EX_QUERY_DEVICE.

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

/// `EX_QUERY_DEVICE`: the device's attributes and limits with the extended
/// ones (ODP, timestamps, RSS, …). An extended command: its request has no
/// `response` field, and the answer's `response_length` says how much of it
/// the kernel wrote.
#[doc(alias = "ibv_query_device_ex")]
#[doc(alias = "ibv_cmd_query_device_any")]
#[derive(Clone, Copy, Debug, Default)]
pub struct QueryDeviceEx;

impl QueryDeviceEx {
    /// The command, with no options (the kernel refuses a `comp_mask`).
    pub fn new() -> Self {
        QueryDeviceEx
    }
}

// Mirrors ib_uverbs_ex_query_device{,_resp}; comp_mask and reserved zero.
impl crate::command::WriteCommand for QueryDeviceEx {
    const CODE: u32 = sys::IB_USER_VERBS_CMD_FLAG_EXTENDED | sys::IB_USER_VERBS_EX_CMD_QUERY_DEVICE;
    type Request = sys::ib_uverbs_ex_query_device;
    type Response = sys::ib_uverbs_ex_query_device_resp;

    fn request(&self) -> Self::Request {
        sys::ib_uverbs_ex_query_device::default()
    }
}
