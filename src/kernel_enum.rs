//! The one shape of an enum over the kernel's numbers, as a macro: each
//! variant is written once with its value, and the conversions both ways
//! are generated from that list (what the hand-written `match`es of
//! libibverbs' headers would otherwise repeat).

/// An enum of the kernel's values, from one list of variants and values.
///
/// Two shapes, by what the kernel may send:
/// - **open**, for values the kernel reports and may extend
///   (`enum ib_wc_status`, `enum ib_event_type`): `Unknown(u32)` is listed
///   first (declared last) and keeps any value this crate does not know;
///   the values are 0, 1, 2, … in order (a compile-time check fails
///   otherwise); `from_raw` is a bounds-checked table lookup and `to_raw`
///   gives the number back.
/// - **closed**, for values this crate puts on the wire (`enum
///   ib_qp_state`): `#[repr(u8)]`, every value a variant; `from_raw` (whose
///   doc follows the enum, before `fn from_raw;`) answers `None` for any
///   other number, and `as u8` is the number.
macro_rules! kernel_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $ty:ident {
            $(#[$umeta:meta])*
            Unknown(u32),
            $($(#[$vmeta:meta])* $name:ident = $raw:literal,)*
        }
    ) => {
        $(#[$meta])*
        $vis enum $ty {
            $($(#[$vmeta])* $name,)*
            $(#[$umeta])*
            Unknown(u32),
        }

        impl $ty {
            /// Every named value, at the index of its raw value.
            const TABLE: &'static [$ty] = &[$($ty::$name),*];

            /// The value the kernel's number `raw` stands for (`Unknown`
            /// for a number this crate does not know).
            #[inline]
            $vis const fn from_raw(raw: u32) -> Self {
                if (raw as usize) < Self::TABLE.len() {
                    Self::TABLE[raw as usize]
                } else {
                    $ty::Unknown(raw)
                }
            }

            /// The kernel's number (`Unknown` gives back its own).
            $vis const fn to_raw(self) -> u32 {
                match self {
                    $($ty::$name => $raw,)*
                    $ty::Unknown(raw) => raw,
                }
            }
        }

        const _: () = {
            let mut i = 0;
            while i < $ty::TABLE.len() {
                assert!($ty::TABLE[i].to_raw() == i as u32, "values listed out of order");
                i += 1;
            }
        };
    };
    (
        $(#[$meta:meta])*
        $vis:vis enum $ty:ident {
            $($(#[$vmeta:meta])* $name:ident = $raw:literal,)+
        }
        $(#[$from_doc:meta])*
        fn from_raw;
    ) => {
        $(#[$meta])*
        #[repr(u8)]
        $vis enum $ty {
            $($(#[$vmeta])* $name = $raw,)+
        }

        impl $ty {
            $(#[$from_doc])*
            $vis fn from_raw(raw: u8) -> Option<Self> {
                match raw {
                    $($raw => Some($ty::$name),)+
                    _ => None,
                }
            }
        }
    };
}
