//! Shapes shared by families of commands, as macros (rustix's
//! `ioctl::patterns` idea): a command without arguments, and one that names
//! a single object by its handle. Each expansion is still one small public
//! type with `new`, a `CODE` and the kernel's request/response structs.

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

/// A command that destroys one object named by its handle and has no
/// response: `DEALLOC_PD`, `DEREG_MR`.
macro_rules! destroy_by_handle {
    (
        $(#[$doc:meta])*
        $name:ident, $code:ident, $request:ident, $handle:ident, $what:literal
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

        // Mirrors the kernel's request (a single u32 handle); no response.
        impl $crate::command::WriteCommand for $name {
            const CODE: u32 = uverbs_uapi::$code;
            type Request = uverbs_uapi::$request;
            type Response = ();

            fn request(&self) -> Self::Request {
                uverbs_uapi::$request {
                    $handle: self.$handle,
                }
            }
        }
    };
}

/// A command that destroys one object named by its handle and answers how
/// many events the kernel reported for it: `DESTROY_CQ`, `DESTROY_QP`
/// (request `{response, handle, reserved}`).
macro_rules! destroy_with_response {
    (
        $(#[$doc:meta])*
        $name:ident, $code:ident, $request:ident, $response:ident, $handle:ident, $what:literal
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

        // Mirrors the kernel's request; it starts with `response`.
        impl $crate::command::WriteCommand for $name {
            const CODE: u32 = uverbs_uapi::$code;
            type Request = uverbs_uapi::$request;
            type Response = uverbs_uapi::$response;

            fn request(&self) -> Self::Request {
                uverbs_uapi::$request {
                    $handle: self.$handle,
                    ..Default::default()
                }
            }
        }
    };
}
