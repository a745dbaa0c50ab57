//! Port commands: QUERY_PORT.

use super::WriteCommand;
use uverbs_uapi as sys;

/// `QUERY_PORT`: one port's attributes (the write() path of
/// [`Context::query_port`](crate::Context::query_port)).
#[doc(alias = "ibv_cmd_query_port")]
#[derive(Clone, Copy, Debug)]
pub struct QueryPort {
    port_num: u8,
}

impl QueryPort {
    /// Query port `port_num` (1-based).
    pub fn new(port_num: u8) -> Self {
        QueryPort { port_num }
    }
}

// Mirrors ib_uverbs_query_port{,_resp}; the request starts with `response`.
impl WriteCommand for QueryPort {
    const CODE: u32 = sys::IB_USER_VERBS_CMD_QUERY_PORT;
    type Request = sys::ib_uverbs_query_port;
    type Response = sys::ib_uverbs_query_port_resp;

    fn request(&self) -> Self::Request {
        sys::ib_uverbs_query_port {
            port_num: self.port_num,
            ..Default::default()
        }
    }
}
