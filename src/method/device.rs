//! Device methods (object `UVERBS_OBJECT_DEVICE`): INFO_HANDLES,
//! QUERY_PORT, QUERY_CONTEXT, QUERY_GID_ENTRY and QUERY_GID_TABLE.

use crate::error::Errno;
use crate::transport::{Method, Out, OutBytes, Transport};
use uverbs_uapi as sys;
use zerocopy::{FromZeros, IntoBytes};

/// The `run` of a query whose `method` frames one output: send it and
/// read that output, which the kernel must have marked written.
macro_rules! query_one_run {
    ($(#[$doc:meta])* $output:ty) => {
        $(#[$doc])*
        pub(crate) fn run(mut self, transport: &dyn Transport, driver_id: u32) -> Result<$output, Errno> {
            let (method, out) = self.method(driver_id);
            super::query_one(method, out, transport)
        }
    };
}

/// A method of `UVERBS_OBJECT_DEVICE`, with no attribute yet.
fn device_method<'a>(method_id: u16, driver_id: u32) -> Method<'a> {
    Method::new(sys::UVERBS_OBJECT_DEVICE, method_id, driver_id)
}

/// `INFO_HANDLES`: the handles of one object type this file holds.
#[derive(Debug)]
pub(crate) struct InfoHandles {
    object_id: u16,
    total: u32,
    handles: Vec<u32>,
}

impl InfoHandles {
    /// List up to `capacity` handles of `object_id` (`UVERBS_OBJECT_*`).
    /// The kernel refuses an empty list (`EINVAL`).
    pub(crate) fn new(object_id: u16, capacity: usize) -> Self {
        InfoHandles {
            object_id,
            total: 0,
            handles: vec![0; capacity],
        }
    }

    /// The frame: OBJECT_ID (const), TOTAL_HANDLES (u32 out), HANDLES_LIST
    /// (`4 * capacity` bytes out).
    pub(crate) fn method(&mut self, driver_id: u32) -> (Method<'_>, Out<'_, u32>) {
        let mut m = device_method(sys::UVERBS_METHOD_INFO_HANDLES, driver_id);
        m.const_in(sys::UVERBS_ATTR_INFO_OBJECT_ID, self.object_id.into());
        let total = m.ptr_out(sys::UVERBS_ATTR_INFO_TOTAL_HANDLES, &mut self.total);
        // The list is not read back: only its room matters to the count.
        let _list = m.bytes_out(
            sys::UVERBS_ATTR_INFO_HANDLES_LIST,
            self.handles.as_mut_bytes(),
        );
        (m, total)
    }

    query_one_run! {
        /// How many handles the kernel listed (at most the capacity).
        u32
    }
}

/// `QUERY_PORT`: `ib_uverbs_query_port_resp_ex` of one port.
#[derive(Debug, Default)]
pub(crate) struct QueryPort {
    port: u8,
    resp: sys::ib_uverbs_query_port_resp_ex,
}

impl QueryPort {
    /// Query port `port` (1-based).
    pub(crate) fn new(port: u8) -> Self {
        QueryPort {
            port,
            resp: FromZeros::new_zeroed(),
        }
    }

    /// The frame: PORT_NUM (const), RESP (48 bytes out, the kernel's minimum).
    pub(crate) fn method(
        &mut self,
        driver_id: u32,
    ) -> (Method<'_>, Out<'_, sys::ib_uverbs_query_port_resp_ex>) {
        let mut m = device_method(sys::UVERBS_METHOD_QUERY_PORT, driver_id);
        m.const_in(sys::UVERBS_ATTR_QUERY_PORT_PORT_NUM, self.port.into());
        let resp = m.ptr_out(sys::UVERBS_ATTR_QUERY_PORT_RESP, &mut self.resp);
        (m, resp)
    }

    query_one_run! {
        /// Sends the method and returns the kernel's answer.
        sys::ib_uverbs_query_port_resp_ex
    }
}

/// `QUERY_CONTEXT`: completion vectors and core support bits.
#[derive(Debug, Default)]
pub(crate) struct QueryContext {
    num_comp_vectors: u32,
    core_support: u64,
}

impl QueryContext {
    /// The method (no inputs).
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The frame: NUM_COMP_VECTORS (u32 out), CORE_SUPPORT (u64 out).
    pub(crate) fn method(&mut self, driver_id: u32) -> (Method<'_>, Out<'_, u32>, Out<'_, u64>) {
        let mut m = device_method(sys::UVERBS_METHOD_QUERY_CONTEXT, driver_id);
        let n = m.ptr_out(
            sys::UVERBS_ATTR_QUERY_CONTEXT_NUM_COMP_VECTORS,
            &mut self.num_comp_vectors,
        );
        let cs = m.ptr_out(
            sys::UVERBS_ATTR_QUERY_CONTEXT_CORE_SUPPORT,
            &mut self.core_support,
        );
        (m, n, cs)
    }

    /// (num_comp_vectors, core_support).
    pub(crate) fn run(
        mut self,
        transport: &dyn Transport,
        driver_id: u32,
    ) -> Result<(u32, u64), Errno> {
        let (method, n, cs) = self.method(driver_id);
        let done = super::send_query(method, transport)?;
        Ok((
            done.read(n).ok_or(Errno::PROTO)?,
            done.read(cs).ok_or(Errno::PROTO)?,
        ))
    }
}

/// `QUERY_GID_ENTRY`: one entry of a port's GID table.
#[derive(Debug, Default)]
pub(crate) struct QueryGidEntry {
    port: u32,
    index: u32,
    flags: u32,
    entry: sys::ib_uverbs_gid_entry,
}

impl QueryGidEntry {
    /// Query entry `index` of port `port`.
    pub(crate) fn new(port: u32, index: u32) -> Self {
        QueryGidEntry {
            port,
            index,
            ..Default::default()
        }
    }

    /// The frame: PORT and GID_INDEX (consts), FLAGS (mandatory, 4 bytes
    /// inline, 0), RESP_ENTRY (32 bytes out).
    pub(crate) fn method(
        &mut self,
        driver_id: u32,
    ) -> (Method<'_>, Out<'_, sys::ib_uverbs_gid_entry>) {
        let mut m = device_method(sys::UVERBS_METHOD_QUERY_GID_ENTRY, driver_id);
        m.const_in(sys::UVERBS_ATTR_QUERY_GID_ENTRY_PORT, self.port.into())
            .const_in(
                sys::UVERBS_ATTR_QUERY_GID_ENTRY_GID_INDEX,
                self.index.into(),
            )
            .ptr_in(sys::UVERBS_ATTR_QUERY_GID_ENTRY_FLAGS, &self.flags);
        let entry = m.ptr_out(sys::UVERBS_ATTR_QUERY_GID_ENTRY_RESP_ENTRY, &mut self.entry);
        (m, entry)
    }

    query_one_run! {
        /// Sends the method and returns the entry.
        sys::ib_uverbs_gid_entry
    }
}

/// `QUERY_GID_TABLE`: every valid entry of every port's GID table.
#[derive(Debug)]
pub(crate) struct QueryGidTable {
    entries: Vec<sys::ib_uverbs_gid_entry>,
    num_entries: u64,
}

impl QueryGidTable {
    /// Room for `capacity` entries (the kernel answers `EINVAL` when the
    /// valid entries do not fit).
    pub(crate) fn new(capacity: usize) -> Self {
        QueryGidTable {
            entries: vec![sys::ib_uverbs_gid_entry::default(); capacity],
            num_entries: 0,
        }
    }

    /// The frame: ENTRY_SIZE (const 32), RESP_ENTRIES (32 bytes per entry
    /// out), RESP_NUM_ENTRIES (u64 out). FLAGS is optional and left out.
    pub(crate) fn method(&mut self, driver_id: u32) -> (Method<'_>, OutBytes<'_>, Out<'_, u64>) {
        let mut m = device_method(sys::UVERBS_METHOD_QUERY_GID_TABLE, driver_id);
        m.const_in(
            sys::UVERBS_ATTR_QUERY_GID_TABLE_ENTRY_SIZE,
            size_of::<sys::ib_uverbs_gid_entry>() as u64,
        );
        let entries = m.bytes_out(
            sys::UVERBS_ATTR_QUERY_GID_TABLE_RESP_ENTRIES,
            self.entries.as_mut_bytes(),
        );
        let n = m.ptr_out(
            sys::UVERBS_ATTR_QUERY_GID_TABLE_RESP_NUM_ENTRIES,
            &mut self.num_entries,
        );
        (m, entries, n)
    }

    /// Sends the method and returns the valid entries.
    pub(crate) fn run(
        mut self,
        transport: &dyn Transport,
        driver_id: u32,
    ) -> Result<Vec<sys::ib_uverbs_gid_entry>, Errno> {
        let (method, entries, n) = self.method(driver_id);
        let done = super::send_query(method, transport)?;
        let n = done.read(n).ok_or(Errno::PROTO)?;
        // With no valid entry the kernel may write an empty array (still
        // marked); it must mark it whenever it counts any.
        let written = done.read_bytes(entries).is_some();
        let n = usize::try_from(n).map_err(|_| Errno::PROTO)?;
        if n > self.entries.len() || (n > 0 && !written) {
            return Err(Errno::PROTO);
        }
        self.entries.truncate(n);
        Ok(self.entries)
    }
}
