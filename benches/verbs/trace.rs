//! Reading the strace output of `verbs --framing` (see `framing.rs`): pure
//! text processing, tested on the host by tests/bench_framing_trace.rs.

use uverbs_uapi as sys;

/// The operations traced, in the order the child performs them.
pub const OPS: &[&str] = &[
    "context_open",
    "alloc_pd",
    "reg_mr",
    "rereg_access",
    "dereg_mr",
    "dealloc_pd",
    "context_close",
];

/// What the markers start with.
pub const MARK: &str = "@@FRAMING-MARK ";

/// Per marker of the trace, `(impl, op, calls)`: the uverbs calls until the
/// next marker, joined by `+` (`none` if there were none).
pub fn calls_between_marks(trace: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let mut current: Option<(String, String, Vec<String>)> = None;
    for line in trace.lines() {
        let Some(call) = parse_line(line) else {
            continue;
        };
        match call {
            Call::Mark(imp, op) => {
                if let Some((i, o, calls)) = current.take() {
                    out.push((i, o, joined(&calls)));
                }
                if OPS.contains(&op.as_str()) {
                    current = Some((imp, op, Vec::new()));
                }
            }
            Call::Uverbs(name) => {
                if let Some((_, _, calls)) = current.as_mut() {
                    calls.push(name);
                }
            }
        }
    }
    if let Some((i, o, calls)) = current {
        out.push((i, o, joined(&calls)));
    }
    out
}

fn joined(calls: &[String]) -> String {
    if calls.is_empty() {
        "none".into()
    } else {
        calls.join("+")
    }
}

/// One traced call that matters.
#[derive(Debug, PartialEq, Eq)]
enum Call {
    /// A marker: implementation and operation.
    Mark(String, String),
    /// A call on a uverbs file: `ioctl` or `write:COMMAND`.
    Uverbs(String),
}

/// Reads one strace line (`[pid] name(args) = result`).
fn parse_line(line: &str) -> Option<Call> {
    let at = |name: &str| {
        let i = line.find(name)?;
        // The call's name starts the line or follows the pid.
        line[..i]
            .trim()
            .chars()
            .all(|c| c.is_ascii_digit())
            .then(|| &line[i + name.len()..])
    };
    if let Some(rest) = at("write(") {
        let (fd, rest) = rest.split_once(", \"")?;
        let (quoted, _) = rest.split_once("\", ")?;
        let bytes = unquote(quoted);
        if fd == "-1" {
            let text = String::from_utf8_lossy(&bytes);
            let (imp, op) = text.strip_prefix(MARK)?.split_once(' ')?;
            return Some(Call::Mark(imp.into(), op.into()));
        }
        // Descriptors 0-2 are the console; a uverbs command has at least
        // its 8-byte header.
        let fd: i32 = fd.parse().ok()?;
        if fd < 3 || bytes.len() < 4 {
            return None;
        }
        let command = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        return Some(Call::Uverbs(format!("write:{}", command_name(command))));
    }
    if let Some(rest) = at("ioctl(") {
        // strace names the request, or spells it `_IOC(dir, 0x1b, 0x1, size)`.
        let verbs = rest.contains("RDMA_VERBS_IOCTL") || rest.contains(", 0x1b, 0x1, ");
        return verbs.then(|| Call::Uverbs("ioctl".into()));
    }
    None
}

/// The bytes of a string as `strace -x` quotes it (`\xNN`, C escapes,
/// `\"` and `\\`, the rest literal).
pub fn unquote(s: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' || i + 1 == b.len() {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let (byte, used) = match b[i + 1] {
            b'x' => match s
                .get(i + 2..i + 4)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                Some(v) => (v, 4),
                None => (b'x', 2),
            },
            b'n' => (b'\n', 2),
            b't' => (b'\t', 2),
            b'r' => (b'\r', 2),
            b'v' => (0x0b, 2),
            b'f' => (0x0c, 2),
            b'0'..=b'7' => {
                // Octal, up to three digits.
                let digits = b[i + 1..]
                    .iter()
                    .take(3)
                    .take_while(|c| (b'0'..=b'7').contains(c));
                let n = digits.clone().count();
                let v = digits.fold(0u32, |v, &c| v * 8 + u32::from(c - b'0'));
                (v as u8, 1 + n)
            }
            other => (other, 2),
        };
        out.push(byte);
        i += used;
    }
    out
}

/// The name of a write command (`ib_uverbs_cmd_hdr::command`).
pub fn command_name(command: u32) -> String {
    let ext = command & sys::IB_USER_VERBS_CMD_FLAG_EXTENDED != 0;
    let code = command & !sys::IB_USER_VERBS_CMD_FLAG_EXTENDED;
    let name = match (ext, code) {
        (false, sys::IB_USER_VERBS_CMD_GET_CONTEXT) => "GET_CONTEXT",
        (false, sys::IB_USER_VERBS_CMD_QUERY_DEVICE) => "QUERY_DEVICE",
        (false, sys::IB_USER_VERBS_CMD_QUERY_PORT) => "QUERY_PORT",
        (false, sys::IB_USER_VERBS_CMD_ALLOC_PD) => "ALLOC_PD",
        (false, sys::IB_USER_VERBS_CMD_DEALLOC_PD) => "DEALLOC_PD",
        (false, sys::IB_USER_VERBS_CMD_REG_MR) => "REG_MR",
        (false, sys::IB_USER_VERBS_CMD_REREG_MR) => "REREG_MR",
        (false, sys::IB_USER_VERBS_CMD_DEREG_MR) => "DEREG_MR",
        (true, sys::IB_USER_VERBS_EX_CMD_QUERY_DEVICE) => "EX_QUERY_DEVICE",
        _ => return format!("{}{code}", if ext { "EX_" } else { "" }),
    };
    name.into()
}
