//! The one shape of a chained builder setter, as a macro (what
//! tokio-rs/io-uring's `opcode!` does for its builder fields): each setter
//! stores one value in one field, or one field of a field, and answers the
//! builder. Setters that do more (check, set two fields) are written by
//! hand beside it.

/// Chained setters, each storing where `=>` says, in one of three forms
/// (one form per invocation):
/// - `fn name(arg: T) => field;` (or `=> req.field;`, a field of a field)
///   stores the argument;
/// - `fn name(arg: T) => field = expr;` stores a value made of it
///   (`Some(arg)`, `arg.bits()`);
/// - `fn name(arg: T) => set(MASK): field = expr;` stores it through the
///   builder's `set(mask, store)`, which also records that the field was
///   set (`QpAttr`'s attribute mask).
macro_rules! setters {
    ($( $(#[$doc:meta])* $vis:vis fn $setter:ident($arg:ident: $t:ty) => $($field:ident).+; )*) => {
        $(
            $(#[$doc])*
            $vis fn $setter(mut self, $arg: $t) -> Self {
                self.$($field).+ = $arg;
                self
            }
        )*
    };
    ($( $(#[$doc:meta])* $vis:vis fn $setter:ident($arg:ident: $t:ty) => $($field:ident).+ = $value:expr; )*) => {
        $(
            $(#[$doc])*
            $vis fn $setter(mut self, $arg: $t) -> Self {
                self.$($field).+ = $value;
                self
            }
        )*
    };
    ($( $(#[$doc:meta])* $vis:vis fn $setter:ident($arg:ident: $t:ty) => $set:ident($mask:path): $field:ident = $value:expr; )*) => {
        $(
            $(#[$doc])*
            $vis fn $setter(self, $arg: $t) -> Self {
                self.$set($mask, |r| r.$field = $value)
            }
        )*
    };
}
