//! Host-side builds: the ordinary host test suite, and static
//! (`+crt-static`) builds of the binaries that run inside the VM.
//!
//! An explicit `--target` keeps proc-macros and build scripts building for
//! the host while the target's rustflags make the test executables
//! static-pie, so they run in the VM with nothing else copied in.

use crate::peer;
use crate::util::{cargo, describe, err, run_streaming, say, Context, Error, Result};
use cargo_metadata::{Artifact, Message, TargetKind};
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The target triple the VM runs.
pub const TARGET: &str = "x86_64-unknown-linux-gnu";
/// The env var carrying rustflags for [`TARGET`] only.
const RUSTFLAGS_VAR: &str = "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS";
/// The flag making executables static.
const STATIC: &str = "-C target-feature=+crt-static";

/// A statically linked executable to copy into the VM.
#[derive(Debug, Clone, PartialEq)]
pub struct Binary {
    /// Short name used in markers and the summary (the cargo target name).
    pub name: String,
    /// The executable on the host.
    pub path: PathBuf,
}

/// Runs `cargo test --workspace` on the host; fails if any test fails.
/// The mlx5 oracle's archives are unpacked under `cache` first
/// ([`peer::ORACLE`]), and its tests must find them there
/// (`UVERBS_REQUIRE_ORACLE`).
pub fn host_tests(workspace: &Path, cache: &Path) -> Result<()> {
    peer::Peer::ensure(cache, &peer::ORACLE)?;
    say("test: host test suite (cargo test --workspace --features uverbs/tokio,uverbs-oracle/tokio)");
    run_streaming(
        "test: host test suite",
        cargo()
            .current_dir(workspace)
            .env("UVERBS_VM_CACHE", cache)
            .env("UVERBS_REQUIRE_ORACLE", "1")
            .args([
                "test",
                "--workspace",
                "--features",
                "uverbs/tokio,uverbs-oracle/tokio",
            ]),
    )
}

/// Builds every test binary of the `uverbs` package statically and returns
/// them (lib unit tests and each integration test).
pub fn static_tests(workspace: &Path) -> Result<Vec<Binary>> {
    say(format!(
        "test: building the uverbs test binaries statically for {TARGET}"
    ));
    let mut cmd = cargo();
    cmd.current_dir(workspace)
        // With the async layer: its device tests are built only with it.
        .args([
            "test",
            "-p",
            "uverbs",
            "--features",
            "tokio",
            "--no-run",
            "--target",
            TARGET,
        ])
        .arg("--message-format=json-render-diagnostics")
        // Built like release code (optimised, no debug assertions): the
        // host suite covers debug builds, the VM the code users ship. The
        // write() transport once lost the kernel's answers in optimised
        // builds only (memory the compiler did not expect a system call to
        // write); with debug assertions on it did not show even at -O2.
        .env("CARGO_PROFILE_TEST_OPT_LEVEL", "3")
        .env("CARGO_PROFILE_TEST_DEBUG_ASSERTIONS", "false")
        .env("CARGO_PROFILE_TEST_OVERFLOW_CHECKS", "false");
    let bins = build_collect("test: static test build", &mut cmd, |a| a.profile.test)?;
    if bins.is_empty() {
        return Err(Error(
            "test: the static test build produced no test executables".into(),
        ));
    }
    Ok(bins)
}

/// The binaries of the `uverbs-tools` package (`tools/`): the project's
/// test and benchmark programs, which left `examples/` (short programs for
/// users to copy) but run in the VM like the examples.
pub const TOOLS: &[&str] = &[
    "c_peers",
    "mover",
    "perf",
    "pingpong",
    "rereg_tour",
    "syscalls",
];

/// A program the VM runs: an example of the `uverbs` package
/// (`examples/<name>.rs`) or a binary of `uverbs-tools` ([`TOOLS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program<'a> {
    Example(&'a str),
    Tool(&'a str),
}

impl<'a> Program<'a> {
    /// The program called `name` in the runs: a tool if [`TOOLS`] has it,
    /// else an example.
    pub fn named(name: &'a str) -> Program<'a> {
        if TOOLS.contains(&name) {
            Program::Tool(name)
        } else {
            Program::Example(name)
        }
    }

    fn name(self) -> &'a str {
        match self {
            Program::Example(name) | Program::Tool(name) => name,
        }
    }

    /// What it is, in messages.
    fn what(self) -> &'static str {
        match self {
            Program::Example(_) => "example",
            Program::Tool(_) => "tool",
        }
    }

    /// Its source file (checked first: a clearer error than cargo's).
    fn source(self, workspace: &Path) -> PathBuf {
        match self {
            Program::Example(name) => workspace.join("examples").join(format!("{name}.rs")),
            Program::Tool(name) => workspace.join("tools").join(format!("{name}.rs")),
        }
    }

    /// `cargo build`'s arguments selecting it (the examples with the async
    /// layer: tokio_pingpong needs it).
    fn cargo_args(self) -> Vec<&'a str> {
        match self {
            Program::Example(name) => {
                vec!["-p", "uverbs", "--features", "tokio", "--example", name]
            }
            Program::Tool(name) => vec!["-p", "uverbs-tools", "--bin", name],
        }
    }

    /// The kind of cargo target it is.
    fn kind(self) -> TargetKind {
        match self {
            Program::Example(_) => TargetKind::Example,
            Program::Tool(_) => TargetKind::Bin,
        }
    }
}

/// Builds the example or tool `name` ([`Program::named`]) statically, in
/// the release profile: pingpong and perf print latencies and bandwidths,
/// which a debug build would misstate.
pub fn static_program(workspace: &Path, name: &str) -> Result<Binary> {
    let program = Program::named(name);
    let what = program.what();
    let src = program.source(workspace);
    if !src.is_file() {
        return Err(Error(format!(
            "demo: {} does not exist yet; a run needs that {what}, so write it first",
            src.display()
        )));
    }
    say(format!(
        "demo: building {what} {name} statically for {TARGET}"
    ));
    let mut cmd = cargo();
    cmd.current_dir(workspace)
        .args(["build", "--release"])
        .args(program.cargo_args())
        .args(["--target", TARGET])
        .arg("--message-format=json-render-diagnostics");
    let step = format!("demo: static {what} build");
    let bins = build_collect(&step, &mut cmd, |a| a.target.kind.contains(&program.kind()))?;
    bins.into_iter()
        .find(|b| b.name == program.name())
        .ok_or_else(|| {
            err(
                &step,
                format!("cargo reported no executable for {what} {name}"),
            )
        })
}

/// Runs a cargo build with JSON messages on stdout (diagnostics still go to
/// the terminal) and collects the executables of the compiler-artifact
/// messages that `keep` accepts.
pub fn build_collect(
    step: &str,
    cmd: &mut Command,
    keep: impl Fn(&Artifact) -> bool,
) -> Result<Vec<Binary>> {
    set_static_flags(cmd);
    cmd.stdin(Stdio::null()).stdout(Stdio::piped());
    let line = describe(cmd);
    let mut child = cmd
        .spawn()
        .map_err(|e| err(step, format!("cannot run `{line}`: {e}")))?;
    let stdout = child.stdout.take().expect("piped stdout");
    let mut bins = Vec::new();
    for message in Message::parse_stream(BufReader::new(stdout)) {
        if let Some(b) = artifact(message.context(step)?, &keep) {
            bins.push(b);
        }
    }
    let status = child.wait().context(step)?;
    if !status.success() {
        return Err(err(
            step,
            format!("`{RUSTFLAGS_VAR}='{STATIC}' {line}` failed ({status}); its output is above"),
        ));
    }
    dedupe_names(&mut bins);
    bins.sort_by(|a, b| a.name.cmp(&b.name));
    for b in &bins {
        check_static(step, b)?;
    }
    Ok(bins)
}

/// Asks for static executables. Cargo ignores the per-target rustflags when
/// RUSTFLAGS or CARGO_ENCODED_RUSTFLAGS is set (CI often sets one), so in
/// that case the flag is appended there instead; with an explicit
/// `--target` those still do not reach build scripts and proc-macros.
fn set_static_flags(cmd: &mut Command) {
    if let Ok(enc) = std::env::var("CARGO_ENCODED_RUSTFLAGS") {
        let sep = if enc.is_empty() { "" } else { "\x1f" };
        cmd.env(
            "CARGO_ENCODED_RUSTFLAGS",
            format!("{enc}{sep}-C\x1ftarget-feature=+crt-static"),
        );
    } else if let Ok(flags) = std::env::var("RUSTFLAGS") {
        cmd.env("RUSTFLAGS", format!("{flags} {STATIC}"));
    } else {
        cmd.env(RUSTFLAGS_VAR, STATIC);
    }
}

/// Fails if a binary is dynamically linked: the guest has no libc for it.
fn check_static(step: &str, b: &Binary) -> Result<()> {
    let out = Command::new("ldd").arg(&b.path).output().context(step)?;
    let text = String::from_utf8_lossy(&out.stdout);
    if text.contains("=>") {
        return Err(err(
            step,
            format!(
                "{} is dynamically linked although {STATIC} was asked for; \
                 do other rustflags override it?\n{text}",
                b.path.display()
            ),
        ));
    }
    Ok(())
}

/// The binary named by one cargo JSON message, if it is a kept artifact
/// with an executable.
fn artifact(message: Message, keep: &impl Fn(&Artifact) -> bool) -> Option<Binary> {
    let Message::CompilerArtifact(a) = message else {
        return None;
    };
    if !keep(&a) {
        return None;
    }
    Some(Binary {
        name: a.target.name.replace('-', "_"),
        path: a.executable?.into(),
    })
}

/// Makes names unique (a lib and a test target could share one).
fn dedupe_names(bins: &mut [Binary]) {
    for i in 1..bins.len() {
        let mut n = 2;
        while bins[..i].iter().any(|b| b.name == bins[i].name) {
            let base = bins[i]
                .name
                .trim_end_matches(|c: char| c.is_ascii_digit() || c == '_')
                .to_string();
            bins[i].name = format!("{base}_{n}");
            n += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One message as cargo prints it.
    fn message(json: &str) -> Message {
        Message::parse_stream(json.as_bytes())
            .next()
            .unwrap()
            .unwrap()
    }

    #[test]
    fn picks_test_executables() {
        let keep = |a: &Artifact| a.profile.test;
        let artifact_json = |name: &str, kind: &str, test: bool, exe: &str| {
            format!(
                r#"{{"reason":"compiler-artifact","package_id":"path+file:///x#uverbs@0.1.0","manifest_path":"/x/Cargo.toml","target":{{"name":"{name}","kind":["{kind}"],"crate_types":["bin"],"src_path":"/x/t.rs","edition":"2021","doctest":false,"test":true}},"profile":{{"opt_level":"3","debuginfo":0,"debug_assertions":false,"overflow_checks":false,"test":{test}}},"features":[],"filenames":["/x/f"],"executable":{exe},"fresh":false}}"#
            )
        };
        let test = message(&artifact_json(
            "vm-smoke",
            "test",
            true,
            r#""/x/vm_smoke-12""#,
        ));
        let lib = message(&artifact_json("uverbs", "lib", false, "null"));
        let finished = message(r#"{"reason":"build-finished","success":true}"#);
        let text = message("warning: not JSON");
        assert_eq!(
            artifact(test, &keep),
            Some(Binary {
                name: "vm_smoke".into(),
                path: "/x/vm_smoke-12".into()
            })
        );
        assert_eq!(artifact(lib, &keep), None);
        assert_eq!(artifact(finished, &keep), None);
        assert_eq!(artifact(text, &keep), None);
    }

    #[test]
    fn tools_build_from_their_package_and_examples_from_uverbs() {
        let ws = Path::new("/w");
        let perf = Program::named("perf");
        assert_eq!(perf, Program::Tool("perf"));
        assert_eq!(perf.cargo_args(), ["-p", "uverbs-tools", "--bin", "perf"]);
        assert_eq!(perf.kind(), TargetKind::Bin);
        assert_eq!(perf.source(ws), Path::new("/w/tools/perf.rs"));
        let read = Program::named("read");
        assert_eq!(read, Program::Example("read"));
        assert_eq!(
            read.cargo_args(),
            ["-p", "uverbs", "--features", "tokio", "--example", "read"]
        );
        assert_eq!(read.kind(), TargetKind::Example);
        assert_eq!(read.source(ws), Path::new("/w/examples/read.rs"));
    }

    /// Every tool is a `[[bin]]` of tools/Cargo.toml with its source where
    /// [`Program::source`] looks, and no example has a tool's name.
    #[test]
    fn tools_are_the_packages_binaries() {
        let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let manifest = std::fs::read_to_string(ws.join("tools/Cargo.toml")).unwrap();
        for name in TOOLS {
            let program = Program::named(name);
            assert!(
                manifest.contains(&format!("name = \"{name}\"\npath = \"{name}.rs\"")),
                "{name} is no [[bin]] of tools/Cargo.toml"
            );
            assert!(program.source(&ws).is_file(), "{name}");
            assert!(!ws.join("examples").join(format!("{name}.rs")).exists());
        }
    }

    #[test]
    fn unique_names() {
        let b = |n: &str| Binary {
            name: n.into(),
            path: PathBuf::new(),
        };
        let mut v = vec![b("uverbs"), b("uverbs"), b("uverbs"), b("x")];
        dedupe_names(&mut v);
        let names: Vec<_> = v.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["uverbs", "uverbs_2", "uverbs_3", "x"]);
    }
}
