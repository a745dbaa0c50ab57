//! Context-level commands: GET_CONTEXT and QUERY_DEVICE.

use super::WriteCommand;
use uverbs_uapi as sys;

/// `GET_CONTEXT`: creates the process's verbs context on the opened file.
///
/// The kernel also creates an async-event file descriptor and returns it in
/// the response; its owner must close it. Some drivers need room for a
/// driver-private response (siw: 8 bytes).
#[doc(alias = "ibv_cmd_get_context")]
#[derive(Clone, Copy, Debug, Default)]
pub struct GetContext;

impl GetContext {
    /// The command, with no options.
    pub fn new() -> Self {
        GetContext
    }
}

// The uapi structs mirror ib_uverbs_get_context{,_resp} exactly (checked
// against the C headers) and start with `response`.
impl WriteCommand for GetContext {
    const CODE: u32 = sys::IB_USER_VERBS_CMD_GET_CONTEXT;
    type Request = sys::ib_uverbs_get_context;
    type Response = sys::ib_uverbs_get_context_resp;

    fn request(&self) -> Self::Request {
        sys::ib_uverbs_get_context::default()
    }
}

/// `QUERY_DEVICE`: the device's attributes and limits.
#[doc(alias = "ibv_cmd_query_device")]
#[derive(Clone, Copy, Debug, Default)]
pub struct QueryDevice;

impl QueryDevice {
    /// The command, with no options.
    pub fn new() -> Self {
        QueryDevice
    }
}

// Mirrors ib_uverbs_query_device{,_resp}; the request is just `response`.
impl WriteCommand for QueryDevice {
    const CODE: u32 = sys::IB_USER_VERBS_CMD_QUERY_DEVICE;
    type Request = sys::ib_uverbs_query_device;
    type Response = sys::ib_uverbs_query_device_resp;

    fn request(&self) -> Self::Request {
        sys::ib_uverbs_query_device::default()
    }
}
