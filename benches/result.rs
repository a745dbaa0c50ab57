//! The one result format of the benches (and tools/mover), which
//! `cargo vm bench` reads (tests/vm/src/bench/results.rs): one line
//! `@@RESULT {json}` per result, a JSON object whose `kind` says what it is.
//! The marker lets the harness pick results out of a console with other
//! output on it; JSON lets it read them with serde instead of a parser per
//! bench.

use serde_json::{Map, Value};

/// What a result line starts with.
pub const MARKER: &str = "@@RESULT";

/// The line of one result of `kind`: the fields of `parts` (JSON objects,
/// later ones adding to earlier ones).
pub fn line(kind: &str, parts: impl IntoIterator<Item = Value>) -> String {
    let mut object = Map::new();
    object.insert("kind".into(), kind.into());
    for part in parts {
        if let Value::Object(fields) = part {
            object.extend(fields);
        }
    }
    format!("{MARKER} {}", Value::Object(object))
}

/// Prints [`line`] on stdout.
pub fn print(kind: &str, parts: impl IntoIterator<Item = Value>) {
    println!("{}", line(kind, parts));
}
