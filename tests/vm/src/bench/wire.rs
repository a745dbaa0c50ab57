//! The words of a verbs result (`"impl":"ours","transport":"ioctl",
//! "fork":"off"`, printed by `benches/verbs`) as types. Each set is
//! closed: a value parses from its exact word, prints that word back, and
//! any other word is an [`UnknownWord`].

use std::fmt;
use std::str::FromStr;

/// A word the guest printed that the report does not know (the bench and
/// this module disagree about the line format).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownWord {
    /// The line's key, e.g. `impl`.
    pub key: &'static str,
    /// What followed `key=`.
    pub word: String,
}

impl fmt::Display for UnknownWord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown {}={:?}", self.key, self.word)
    }
}

/// Defines one closed set of wire words: the enum (ordered as listed, which
/// is the report's order), `ALL`, `word()`, `Display` (the word) and
/// `FromStr` and `Deserialize` (the word back, or [`UnknownWord`]).
macro_rules! wire_words {
    (
        $(#[$doc:meta])*
        $name:ident, key $key:literal {
            $( $(#[$vdoc:meta])* $variant:ident = $word:literal, )+
        }
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vdoc])* $variant, )+
        }

        impl $name {
            /// Every value, in the report's order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The exact word on the wire.
            pub fn word(self) -> &'static str {
                match self {
                    $($name::$variant => $word),+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.pad(self.word())
            }
        }

        // A result line's word: the same closed set, an unknown word an
        // error that names it.
        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let word = std::borrow::Cow::<str>::deserialize(d)?;
                word.parse().map_err(serde::de::Error::custom)
            }
        }

        impl FromStr for $name {
            type Err = UnknownWord;

            fn from_str(s: &str) -> Result<Self, UnknownWord> {
                Self::ALL
                    .iter()
                    .copied()
                    .find(|v| v.word() == s)
                    .ok_or_else(|| UnknownWord { key: $key, word: s.to_string() })
            }
        }
    };
}

wire_words! {
    /// Who carried out the operation (`impl=`).
    Implementation, key "impl" {
        /// This crate's API.
        Ours = "ours",
        /// The same command bytes sent with a bare `ioctl`/`write`.
        Floor = "floor",
        /// Debian's libibverbs, linked statically.
        Libibverbs = "libibverbs",
    }
}

impl Implementation {
    /// The report's label with the transport: `ours (ioctl)`, `floor
    /// (write)`, `libibverbs` (which picks its transport itself).
    pub fn label(self, transport: Transport) -> String {
        match self {
            Implementation::Libibverbs => "libibverbs".into(),
            Implementation::Floor => format!("floor ({transport})"),
            Implementation::Ours => format!("ours ({transport})"),
        }
    }
}

wire_words! {
    /// How commands reach the kernel (`transport=`).
    Transport, key "transport" {
        /// The ioctl() framing.
        Ioctl = "ioctl",
        /// The write() framing.
        Write = "write",
        /// Chosen by libibverbs.
        Auto = "auto",
    }
}

wire_words! {
    /// Fork safety of the context (`fork=`): uverbs' `ForkMode::Disabled`
    /// or `ForkMode::Enabled` with `madvise`.
    ForkMode, key "fork" {
        /// Fork safety off.
        Off = "off",
        /// Fork safety forced on.
        On = "on",
    }
}

wire_words! {
    /// What was measured (`op=`); the last three only name failed set-up
    /// steps.
    Operation, key "op" {
        /// `reg_mr` alone.
        Reg = "reg",
        /// `dereg` alone.
        Dereg = "dereg",
        /// `reg_mr` then `dereg`.
        RegDereg = "reg_dereg",
        /// REREG_MR with new access flags.
        ReregAccess = "rereg_access",
        /// REREG_MR into another PD.
        ReregPd = "rereg_pd",
        /// REREG_MR onto another buffer.
        ReregTranslation = "rereg_translation",
        /// `alloc_pd` then `dealloc`.
        AllocDeallocPd = "alloc_dealloc_pd",
        /// Opening and closing a device context.
        ContextOpen = "context_open",
        /// The transport's sanity check failed.
        Sanity = "sanity",
        /// Opening the device failed.
        Open = "open",
        /// Allocating the cells' PD failed.
        AllocPd = "alloc_pd",
    }
}

impl Operation {
    /// The report's label: `reg+dereg`, `rereg ACCESS`, `alloc+dealloc PD`.
    pub fn label(self) -> &'static str {
        match self {
            Operation::RegDereg => "reg+dereg",
            Operation::ReregAccess => "rereg ACCESS",
            Operation::ReregPd => "rereg PD",
            Operation::ReregTranslation => "rereg TRANSLATION",
            Operation::AllocDeallocPd => "alloc+dealloc PD",
            Operation::ContextOpen => "context open+close",
            other => other.word(),
        }
    }

    /// Whether its cells have a region size (not alloc+dealloc PD or a
    /// context open+close).
    pub fn is_sized(self) -> bool {
        !matches!(self, Operation::AllocDeallocPd | Operation::ContextOpen)
    }

    /// One of the three REREG_MR operations.
    pub fn is_rereg(self) -> bool {
        matches!(
            self,
            Operation::ReregAccess | Operation::ReregPd | Operation::ReregTranslation
        )
    }
}

wire_words! {
    /// The cell's outcome (`status=`; a line without one was measured).
    Status, key "status" {
        /// Measured.
        Ok = "ok",
        /// The device or library refused it (`EOPNOTSUPP`): a result.
        Unsupported = "unsupported",
        /// It failed unexpectedly: not a measurement.
        Error = "error",
    }
}

wire_words! {
    /// How ours carried out a rereg cell (`path=`).
    ReregPath, key "path" {
        /// One REREG_MR every time.
        InPlace = "inplace",
        /// The kernel refused, so ours registered anew and deregistered.
        Replaced = "replaced",
        /// Some calls one way, some the other.
        Mixed = "mixed",
    }
}

impl ReregPath {
    /// The report's label: `in place`, `replaced`, `mixed`.
    pub fn label(self) -> &'static str {
        match self {
            ReregPath::InPlace => "in place",
            ReregPath::Replaced => "replaced",
            ReregPath::Mixed => "mixed",
        }
    }

    /// The path of several cells together: theirs when they agree, else
    /// mixed; `None` without cells.
    pub fn combined(paths: impl IntoIterator<Item = ReregPath>) -> Option<ReregPath> {
        paths
            .into_iter()
            .reduce(|a, b| if a == b { a } else { ReregPath::Mixed })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every value parses from its own word, and only from it.
    fn round_trips<T>(all: &[T])
    where
        T: FromStr<Err = UnknownWord> + fmt::Display + fmt::Debug + PartialEq + Copy,
    {
        for v in all {
            assert_eq!(v.to_string().parse::<T>(), Ok(*v));
            let upper = v.to_string().to_uppercase();
            assert!(upper.parse::<T>().is_err(), "{upper} parsed");
        }
    }

    #[test]
    fn words_round_trip() {
        round_trips(Implementation::ALL);
        round_trips(Transport::ALL);
        round_trips(ForkMode::ALL);
        round_trips(Operation::ALL);
        round_trips(Status::ALL);
        round_trips(ReregPath::ALL);
    }

    #[test]
    fn unknown_words_are_named() {
        let e = "forced".parse::<ForkMode>().unwrap_err();
        assert_eq!(
            e,
            UnknownWord {
                key: "fork",
                word: "forced".into()
            }
        );
        assert_eq!(e.to_string(), "unknown fork=\"forced\"");
        assert!("".parse::<Implementation>().is_err());
    }

    #[test]
    fn labels() {
        assert_eq!(Operation::RegDereg.word(), "reg_dereg");
        assert_eq!(Operation::RegDereg.label(), "reg+dereg");
        assert_eq!(Operation::Reg.label(), "reg");
        assert_eq!(Operation::AllocPd.label(), "alloc_pd");
        assert_eq!(
            Implementation::Floor.label(Transport::Write),
            "floor (write)"
        );
        assert_eq!(
            Implementation::Libibverbs.label(Transport::Auto),
            "libibverbs"
        );
        assert_eq!(format!("{:>6}", Transport::Ioctl), " ioctl");
    }

    #[test]
    fn paths_combine() {
        use ReregPath::*;
        assert_eq!(ReregPath::combined([]), None);
        assert_eq!(ReregPath::combined([InPlace, InPlace]), Some(InPlace));
        assert_eq!(ReregPath::combined([Replaced]), Some(Replaced));
        assert_eq!(ReregPath::combined([InPlace, Replaced]), Some(Mixed));
        assert_eq!(ReregPath::combined([Mixed, Mixed]), Some(Mixed));
        assert_eq!(
            ReregPath::combined([Replaced, InPlace, InPlace]),
            Some(Mixed)
        );
    }
}
