//! Shapes shared by families of commands, as macros (rustix's
//! `ioctl::patterns` idea): a command without arguments, and one that names
//! a single object by its handle. Each expansion is still one small public
//! type with `new`, a `CODE` and the kernel's request/response structs.
//! Builders that fill the kernel's request in place share their
//! `WriteCommand` impl the same way (and their one-field setters are
//! `setters!`, `req.field`).

/// A command whose request is only the (transport-filled) `response` field:
/// `GET_CONTEXT`, `QUERY_DEVICE`, `ALLOC_PD`.
macro_rules! command_without_arguments {
    (
        $(#[$doc:meta])*
        $name:ident, $code:ident, $request:ident, $response:ident
    ) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $name;

        impl $name {
            /// The command, with no options.
            pub fn new() -> Self {
                $name
            }
        }

        // The uapi structs mirror the kernel's exactly (checked against the
        // C headers); the request is just `response`.
        impl $crate::command::WriteCommand for $name {
            const CODE: u32 = uverbs_uapi::$code;
            type Request = uverbs_uapi::$request;
            type Response = uverbs_uapi::$response;

            fn request(&self) -> Self::Request {
                uverbs_uapi::$request::default()
            }
        }
    };
}

/// A command that destroys one object named by its handle: `DEALLOC_PD`,
/// `DEREG_MR`, `DESTROY_AH` (request `{handle}`, no response), and, with a
/// response type, `DESTROY_CQ`, `DESTROY_QP` (request `{response, handle,
/// reserved}`, the answer counts the events the kernel reported for it).
macro_rules! destroy_by_handle {
    (
        $(#[$doc:meta])*
        $name:ident, $code:ident, $request:ident, $response:ident, $handle:ident, $what:literal
    ) => {
        destroy_by_handle!(@ $(#[$doc])* $name, $code, $request, uverbs_uapi::$response, $handle, $what);
    };
    (
        $(#[$doc:meta])*
        $name:ident, $code:ident, $request:ident, $handle:ident, $what:literal
    ) => {
        destroy_by_handle!(@ $(#[$doc])* $name, $code, $request, (), $handle, $what);
    };
    (
        @ $(#[$doc:meta])*
        $name:ident, $code:ident, $request:ident, $response:ty, $handle:ident, $what:literal
    ) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug)]
        pub struct $name {
            $handle: u32,
        }

        impl $name {
            #[doc = concat!("Destroy the ", $what, " with this kernel handle.")]
            pub fn new($handle: u32) -> Self {
                $name { $handle }
            }
        }

        // Mirrors the kernel's request: the handle, after `response` when
        // there is one; every other byte zero.
        impl $crate::command::WriteCommand for $name {
            const CODE: u32 = uverbs_uapi::$code;
            type Request = uverbs_uapi::$request;
            type Response = $response;

            fn request(&self) -> Self::Request {
                let mut request = uverbs_uapi::$request::default();
                request.$handle = self.$handle;
                request
            }

            fn handle(&self) -> Option<u32> {
                Some(self.$handle)
            }
        }
    };
}

/// The [`WriteCommand`](crate::command::WriteCommand) of a builder that
/// fills the kernel's request in place, in a field `req` (the transport
/// fills `response`); optionally a field holding its UHW input, and the
/// request's field naming the object the command acts on (`handle`).
macro_rules! write_command_of_request {
    (
        $name:ty, $code:ident, $request:ident, $response:ty
        $(, uhw_in = $uhw:ident)? $(, handle = $handle:ident)?
    ) => {
        impl $crate::command::WriteCommand for $name {
            const CODE: u32 = uverbs_uapi::$code;
            type Request = uverbs_uapi::$request;
            type Response = $response;

            fn request(&self) -> Self::Request {
                self.req
            }

            $(
                fn uhw_in(&self) -> &[u8] {
                    self.$uhw
                }
            )?

            $(
                fn handle(&self) -> Option<u32> {
                    Some(self.req.$handle)
                }
            )?
        }
    };
}
