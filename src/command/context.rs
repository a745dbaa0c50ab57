//! Context-level commands: GET_CONTEXT and QUERY_DEVICE.

command_without_arguments!(
    /// `GET_CONTEXT`: creates the process's verbs context on the opened file.
    ///
    /// The kernel also creates an async-event file descriptor and returns it
    /// in the response; its owner must close it. Some drivers need room for
    /// a driver-private response (siw: 8 bytes).
    #[doc(alias = "ibv_cmd_get_context")]
    GetContext,
    IB_USER_VERBS_CMD_GET_CONTEXT,
    ib_uverbs_get_context,
    ib_uverbs_get_context_resp
);

command_without_arguments!(
    /// `QUERY_DEVICE`: the device's attributes and limits.
    #[doc(alias = "ibv_cmd_query_device")]
    QueryDevice,
    IB_USER_VERBS_CMD_QUERY_DEVICE,
    ib_uverbs_query_device,
    ib_uverbs_query_device_resp
);
