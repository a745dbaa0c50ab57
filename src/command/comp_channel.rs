//! Completion-channel command: CREATE_COMP_CHANNEL.

command_without_arguments!(
    /// `CREATE_COMP_CHANNEL`: a new completion-event descriptor; the
    /// response carries its number, which the caller then owns.
    #[doc(alias = "ibv_create_comp_channel")]
    #[doc(alias = "ibv_cmd_create_comp_channel")]
    CreateCompChannel,
    IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL,
    ib_uverbs_create_comp_channel,
    ib_uverbs_create_comp_channel_resp
);
