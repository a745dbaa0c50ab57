//! The benches' command lines, parsed with lexopt: what every bench does
//! with cargo's and test runners' arguments. Shared through `#[path]`.

/// Reads the command line, handing each long option (its name without
/// `--`) and the parser, for the option's value, to `option`. `cargo
/// bench`'s `--bench` and a bench name filter are skipped. `false` for
/// `--list`, a test runner asking for tests (there are none). A bad
/// argument ends the process with status 2.
pub fn parse(
    bench: &str,
    mut option: impl FnMut(&str, &mut lexopt::Parser) -> Result<(), lexopt::Error>,
) -> bool {
    use lexopt::prelude::*;
    let mut p = lexopt::Parser::from_env();
    let mut all = || -> Result<bool, lexopt::Error> {
        while let Some(arg) = p.next()? {
            match arg {
                Long("list") => return Ok(false),
                Long("bench") | Value(_) => {}
                Long(name) => {
                    let name = name.to_string();
                    option(&name, &mut p)?;
                }
                _ => return Err(arg.unexpected()),
            }
        }
        Ok(true)
    };
    all().unwrap_or_else(|e| {
        eprintln!("{bench}: {e}");
        std::process::exit(2)
    })
}

/// The error for an option the bench does not take.
pub fn unknown(name: &str) -> lexopt::Error {
    lexopt::Error::UnexpectedOption(format!("--{name}"))
}
