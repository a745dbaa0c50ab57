//! The one shape of a chained builder setter, as a macro (what
//! tokio-rs/io-uring's `opcode!` does for its builder fields): each setter
//! stores its argument in one field, or one field of a field, and answers
//! the builder. Setters that do more (convert, set a flag too) are written
//! by hand beside it.

/// Chained setters that each store their argument where `=>` says:
/// `name(arg: T) => field;` or `=> req.field;` for a field of a field.
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
}
