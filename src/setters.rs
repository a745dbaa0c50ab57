//! `field_setters!`: the chained by-value setters of the configuration
//! types whose fields are public (`QpInit`, `RcConnect`, ...), written
//! once: `field(value) -> Self` replaces the field and returns the value.

/// For each `/// doc` `field: Type;`, a `pub fn field(mut self, field:
/// Type) -> Self` with that doc. Use inside an `impl` block.
macro_rules! field_setters {
    ($($(#[$doc:meta])* $field:ident: $ty:ty;)*) => {$(
        $(#[$doc])*
        pub fn $field(mut self, $field: $ty) -> Self {
            self.$field = $field;
            self
        }
    )*};
}

pub(crate) use field_setters;
