//! Protection-domain commands: ALLOC_PD and DEALLOC_PD.

command_without_arguments!(
    /// `ALLOC_PD`: a new protection domain; the response carries its handle.
    #[doc(alias = "ibv_cmd_alloc_pd")]
    AllocPd,
    IB_USER_VERBS_CMD_ALLOC_PD,
    ib_uverbs_alloc_pd,
    ib_uverbs_alloc_pd_resp
);

destroy_by_handle!(
    /// `DEALLOC_PD`: frees a protection domain (the kernel answers `EBUSY`
    /// while memory regions still use it).
    #[doc(alias = "ibv_cmd_dealloc_pd")]
    DeallocPd,
    IB_USER_VERBS_CMD_DEALLOC_PD,
    ib_uverbs_dealloc_pd,
    pd_handle,
    "PD"
);
