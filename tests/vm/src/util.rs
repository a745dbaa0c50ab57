//! Small shared helpers: the error type, running external commands with
//! clear errors, progress messages and the harness's directories.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// An error that already says which step failed and why, ready to print.
#[derive(Debug)]
pub struct Error(pub String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The harness's result type.
pub type Result<T> = std::result::Result<T, Error>;

/// Builds an [`Error`] from a step description and a cause.
pub fn err(step: &str, cause: impl fmt::Display) -> Error {
    Error(format!("{step}: {cause}"))
}

/// Adds the step description to any error that can be displayed
/// (`io::Error` in particular).
pub trait Context<T> {
    /// Wraps the error with "step: cause".
    fn context(self, step: &str) -> Result<T>;
}

impl<T, E: fmt::Display> Context<T> for std::result::Result<T, E> {
    fn context(self, step: &str) -> Result<T> {
        self.map_err(|e| err(step, e))
    }
}

/// Prints a progress line: every step the harness takes is announced.
pub fn say(msg: impl fmt::Display) {
    println!("vm: {msg}");
}

/// Renders a command line for messages (program and arguments).
pub fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs a command with its output going straight to the terminal (long
/// downloads and builds show their own progress). Fails if it cannot start
/// or exits non-zero.
pub fn run_streaming(step: &str, cmd: &mut Command) -> Result<()> {
    let line = describe(cmd);
    let status = cmd
        .stdin(Stdio::null())
        .status()
        .map_err(|e| err(step, format!("cannot run `{line}`: {e}")))?;
    if status.success() {
        Ok(())
    } else {
        Err(err(
            step,
            format!("`{line}` failed ({status}); its output is above"),
        ))
    }
}

/// Runs a command capturing its output; on failure the error carries the
/// tail of its stderr (and stdout). Returns stdout as text on success.
pub fn run_captured(step: &str, cmd: &mut Command) -> Result<String> {
    let line = describe(cmd);
    let out: Output = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| err(step, format!("cannot run `{line}`: {e}")))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    Err(err(
        step,
        format!("`{line}` failed ({}):\n{}", out.status, tail(&text, 40)),
    ))
}

/// The last `n` lines of a text.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(n);
    lines[start..].join("\n")
}

/// Finds a program on PATH or in the sbin/bin directories (a non-root
/// PATH often lacks /usr/sbin, where `rdma` and `modinfo` live).
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Whether a program can be found (see [`which`]).
pub fn have_program(name: &str) -> bool {
    which(name).is_some()
}

/// The `cargo` to use for nested builds: the one that started us if known.
pub fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// The workspace root: asks cargo, falls back to this package's location
/// (`tests/vm` two levels below the root).
pub fn workspace_root() -> Result<PathBuf> {
    let asked = cargo()
        .args(["locate-project", "--workspace", "--message-format", "plain"])
        .stderr(Stdio::null())
        .output();
    if let Ok(out) = asked {
        if out.status.success() {
            let manifest = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            if let Some(dir) = manifest.parent() {
                return Ok(dir.to_path_buf());
            }
        }
    }
    let fallback = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    if fallback.join("Cargo.toml").is_file() {
        return fallback
            .canonicalize()
            .context("finding the workspace root");
    }
    Err(Error(
        "finding the workspace root: `cargo locate-project --workspace` failed and \
         CARGO_MANIFEST_DIR/../.. has no Cargo.toml"
            .into(),
    ))
}

/// The cache directory: `$UVERBS_VM_CACHE` or `<workspace>/target/vm`,
/// made absolute (tools run from other directories, e.g. `make -C`, get
/// paths inside it).
pub fn cache_dir(workspace: &Path) -> PathBuf {
    let dir = match std::env::var_os("UVERBS_VM_CACHE") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => workspace.join("target").join("vm"),
    };
    std::path::absolute(&dir).unwrap_or(dir)
}

/// Quotes a string for a POSIX shell script (single quotes).
pub fn sh_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@".contains(&b))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(sh_quote("rxe,siw"), "rxe,siw");
        assert_eq!(sh_quote("a b"), "'a b'");
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
        assert_eq!(sh_quote(""), "''");
    }

    #[test]
    fn tail_keeps_last_lines() {
        assert_eq!(tail("a\nb\nc", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
    }
}
