//! Memory-region methods: `UVERBS_METHOD_QUERY_MR`.

use crate::error::Errno;
use crate::query::MrAttr;
use crate::transport::{Method, Out, Transport};
use uverbs_uapi as sys;

/// `QUERY_MR`: the kernel's lkey, rkey, length and iova of an MR.
#[derive(Debug, Default)]
pub(crate) struct QueryMr {
    mr_handle: u32,
    lkey: u32,
    rkey: u32,
    length: u64,
    iova: u64,
}

/// The outputs of a framed [`QueryMr`].
pub(crate) struct QueryMrOuts<'a> {
    lkey: Out<'a, u32>,
    rkey: Out<'a, u32>,
    length: Out<'a, u64>,
    iova: Out<'a, u64>,
}

impl QueryMr {
    /// Query the MR with this handle.
    pub(crate) fn new(mr_handle: u32) -> Self {
        QueryMr {
            mr_handle,
            ..Default::default()
        }
    }

    /// The frame: the MR handle (IDR, read access), then the four outputs
    /// in id order, each exactly its type's size (`UVERBS_ATTR_TYPE`).
    pub(crate) fn method(&mut self, driver_id: u32) -> (Method<'_>, QueryMrOuts<'_>) {
        let mut m = Method::new(
            sys::UVERBS_OBJECT_MR,
            sys::UVERBS_METHOD_QUERY_MR,
            driver_id,
        );
        m.idr_in(sys::UVERBS_ATTR_QUERY_MR_HANDLE, self.mr_handle);
        let outs = QueryMrOuts {
            lkey: m.ptr_out(sys::UVERBS_ATTR_QUERY_MR_RESP_LKEY, &mut self.lkey),
            rkey: m.ptr_out(sys::UVERBS_ATTR_QUERY_MR_RESP_RKEY, &mut self.rkey),
            length: m.ptr_out(sys::UVERBS_ATTR_QUERY_MR_RESP_LENGTH, &mut self.length),
            iova: m.ptr_out(sys::UVERBS_ATTR_QUERY_MR_RESP_IOVA, &mut self.iova),
        };
        (m, outs)
    }

    /// Sends the method and decodes the answer.
    pub(crate) fn run(
        mut self,
        transport: &dyn Transport,
        driver_id: u32,
    ) -> Result<MrAttr, Errno> {
        let (method, outs) = self.method(driver_id);
        let done = super::send_query(method, transport)?;
        Ok(MrAttr {
            lkey: done.read(outs.lkey).ok_or(Errno::PROTO)?,
            rkey: done.read(outs.rkey).ok_or(Errno::PROTO)?,
            length: done.read(outs.length).ok_or(Errno::PROTO)?,
            iova: done.read(outs.iova).ok_or(Errno::PROTO)?,
        })
    }
}
