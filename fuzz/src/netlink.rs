//! RDMA netlink replies: the datagram reader and the attribute parsers of
//! `src/netlink.rs` on arbitrary bytes.
//!
//! Input: the first byte picks the mode. Even: the rest is one datagram as
//! the kernel would send it (raw bytes). Odd: the rest is decoded with
//! `arbitrary` into a list of well-framed messages with attributes, some
//! of them damaged, and encoded (so the fuzzer reaches the deep paths).
//!
//! Properties:
//! * nothing panics;
//! * every error is typed (`InvalidData`, `Interrupted` or an errno);
//! * every payload and attribute value handed out lies inside the input;
//! * attribute types come out with the `NLA_F_*` flag bits masked;
//! * re-parse stability: the attributes found, encoded again canonically,
//!   parse to the same list, and give the same `GET_CHARDEV` / `GET` /
//!   `SYS_GET` results; a successful result, encoded again, parses to
//!   itself; the data payloads a reader delivered, framed again as a
//!   canonical multipart reply, are delivered again, in order, and the
//!   reply completes;
//! * a payload whose attributes do not parse fails every payload parser.

use std::io;

use arbitrary::{Arbitrary, Unstructured};
use uverbs::__fuzz::netlink as nl;
use uverbs::uverbs_uapi as sys;

const NLMSG_NOOP: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLMSG_OVERRUN: u16 = 4;
const NLM_F_MULTI: u16 = 0x02;
const NLA_F_MASK: u16 = (1 << 15) | (1 << 14);
/// The sequence number the structured replies answer.
const SEQ: u32 = 0x5eed;

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let datagram = if mode % 2 == 0 {
        rest.to_vec()
    } else {
        Reply::decode(&mut Unstructured::new(rest)).encode()
    };
    check_datagram(&datagram);
}

/// A reply as a list of messages, each possibly damaged.
#[derive(Debug)]
struct Reply {
    msgs: Vec<Msg>,
}

impl Reply {
    /// Up to 8 messages of up to 7 attributes each.
    fn decode(u: &mut Unstructured<'_>) -> Reply {
        let mut msgs = Vec::new();
        while msgs.len() < 8 && !u.is_empty() {
            let Ok(head) = MsgHead::arbitrary(u) else {
                break;
            };
            let n = usize::from(head.attrs % 8);
            msgs.push(Msg {
                head,
                attrs: (0..n).map_while(|_| Attr::arbitrary(u).ok()).collect(),
            });
        }
        Reply { msgs }
    }
}

#[derive(Debug)]
struct Msg {
    head: MsgHead,
    attrs: Vec<Attr>,
}

#[derive(Arbitrary, Debug)]
struct MsgHead {
    /// How many attributes follow (modulo 8).
    attrs: u8,
    kind: Kind,
    flags: u16,
    /// Whether the message answers [`SEQ`] (else a stale sequence number).
    ours: bool,
    /// Damage, rarely (see [`damage`]): a wrong `nlmsg_len`, a cut-off tail.
    len_damage: u8,
    cut: u8,
}

#[derive(Arbitrary, Debug)]
enum Kind {
    SysGet,
    Get,
    GetChardev,
    Noop,
    Error(i32),
    Done(Option<i32>),
    Overrun,
    Other(u16),
}

#[derive(Arbitrary, Debug)]
struct Attr {
    ty: AttrType,
    /// `NLA_F_NESTED` / `NLA_F_NET_BYTEORDER`, which the parser masks off.
    flag_bits: u8,
    value: Value,
    /// Damage, rarely: a wrong `nla_len`.
    len_damage: u8,
}

#[derive(Arbitrary, Debug)]
enum AttrType {
    Chardev,
    ChardevAbi,
    ChardevName,
    DriverId,
    DevIndex,
    DevName,
    CopyOnFork,
    Other(u16),
}

#[derive(Arbitrary, Debug)]
enum Value {
    U8(u8),
    U32(u32),
    U64(u64),
    Str(String),
    Bytes(Vec<u8>),
}

/// Most bytes mean "intact" (0); the top sixteenth means a delta in -8..8,
/// so that random inputs mostly build well-framed replies.
fn damage(byte: u8) -> i8 {
    if byte >= 0xf0 {
        (byte & 0x0f) as i8 - 8
    } else {
        0
    }
}

impl AttrType {
    fn raw(&self) -> u16 {
        match *self {
            AttrType::Chardev => sys::RDMA_NLDEV_ATTR_CHARDEV,
            AttrType::ChardevAbi => sys::RDMA_NLDEV_ATTR_CHARDEV_ABI,
            AttrType::ChardevName => sys::RDMA_NLDEV_ATTR_CHARDEV_NAME,
            AttrType::DriverId => sys::RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID,
            AttrType::DevIndex => sys::RDMA_NLDEV_ATTR_DEV_INDEX,
            AttrType::DevName => sys::RDMA_NLDEV_ATTR_DEV_NAME,
            AttrType::CopyOnFork => sys::RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK,
            AttrType::Other(t) => t,
        }
    }
}

impl Reply {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for m in &self.msgs {
            let h = &m.head;
            let msg_type = match h.kind {
                Kind::SysGet => 0x1406,
                Kind::Get => 0x1401,
                Kind::GetChardev => 0x140f,
                Kind::Noop => NLMSG_NOOP,
                Kind::Error(_) => NLMSG_ERROR,
                Kind::Done(_) => NLMSG_DONE,
                Kind::Overrun => NLMSG_OVERRUN,
                Kind::Other(t) => t,
            };
            let mut payload = Vec::new();
            match h.kind {
                Kind::Error(code) => payload.extend_from_slice(&code.to_ne_bytes()),
                Kind::Done(Some(code)) => payload.extend_from_slice(&code.to_ne_bytes()),
                _ => {}
            }
            for a in &m.attrs {
                let value = match &a.value {
                    Value::U8(v) => vec![*v],
                    Value::U32(v) => v.to_ne_bytes().to_vec(),
                    Value::U64(v) => v.to_ne_bytes().to_vec(),
                    Value::Str(s) => {
                        let mut b = s.as_bytes().to_vec();
                        b.push(0);
                        b
                    }
                    Value::Bytes(b) => b.clone(),
                };
                let ty = a.ty.raw() | (u16::from(a.flag_bits & 3) << 14);
                let len = (4 + value.len() as u16).wrapping_add(damage(a.len_damage) as u16);
                payload.extend_from_slice(&len.to_ne_bytes());
                payload.extend_from_slice(&ty.to_ne_bytes());
                payload.extend_from_slice(&value);
                payload.resize(align(payload.len()), 0);
            }
            let seq = if h.ours { SEQ } else { SEQ ^ 0x8000_0001 };
            let len = (16 + payload.len() as u32).wrapping_add(damage(h.len_damage) as u32);
            let mut msg = header(len, msg_type, h.flags, seq);
            msg.extend_from_slice(&payload);
            msg.truncate(
                msg.len()
                    .saturating_sub(damage(h.cut).unsigned_abs().into()),
            );
            msg.resize(align(msg.len()), 0);
            out.extend_from_slice(&msg);
        }
        out
    }
}

fn align(len: usize) -> usize {
    (len + 3) & !3
}

fn header(len: u32, msg_type: u16, flags: u16, seq: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(16);
    v.extend_from_slice(&len.to_ne_bytes());
    v.extend_from_slice(&msg_type.to_ne_bytes());
    v.extend_from_slice(&flags.to_ne_bytes());
    v.extend_from_slice(&seq.to_ne_bytes());
    v.extend_from_slice(&0u32.to_ne_bytes());
    v
}

/// Canonical attribute encoding: exact `nla_len`, padding to 4 bytes.
fn encode_attrs(attrs: &[(u16, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (ty, value) in attrs {
        let len = u16::try_from(4 + value.len()).expect("parsed attributes fit a u16 length");
        out.extend_from_slice(&len.to_ne_bytes());
        out.extend_from_slice(&ty.to_ne_bytes());
        out.extend_from_slice(value);
        out.resize(align(out.len()), 0);
    }
    out
}

/// `huge_encode_dev`, the inverse of the parser's `huge_decode_dev`.
fn huge_encode_dev((major, minor): (u32, u32)) -> u64 {
    u64::from(minor & 0xff) | (u64::from(major) << 8) | (u64::from(minor & !0xff) << 12)
}

fn inside(outer: &[u8], inner: &[u8]) -> bool {
    let (o, i) = (outer.as_ptr() as usize, inner.as_ptr() as usize);
    inner.is_empty() || (o <= i && i + inner.len() <= o + outer.len())
}

fn assert_invalid_data<T: std::fmt::Debug>(what: &str, r: &io::Result<T>) {
    if let Err(e) = r {
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{what}: {e}");
    }
}

/// Same outcome: equal values, or both errors.
fn same<T: PartialEq + std::fmt::Debug>(what: &str, a: &io::Result<T>, b: &io::Result<T>) {
    match (a, b) {
        (Ok(x), Ok(y)) => assert_eq!(x, y, "{what}: re-parse differs"),
        (Err(_), Err(_)) => {}
        _ => panic!("{what}: re-parse changed the outcome: {a:?} vs {b:?}"),
    }
}

fn check_datagram(datagram: &[u8]) {
    // The attribute walker on the whole datagram, as if it were a payload.
    check_payload(datagram);

    // The reply reader, expecting the sequence number of the first message.
    let seq = datagram
        .get(8..12)
        .map_or(SEQ, |b| u32::from_ne_bytes(b.try_into().unwrap()));
    let mut delivered: Vec<Vec<u8>> = Vec::new();
    let mut reader = nl::ReplyReader::new(seq);
    let result = reader.feed(datagram, &mut |payload| {
        assert!(inside(datagram, payload), "payload outside the datagram");
        check_payload(payload);
        delivered.push(payload.to_vec());
        Ok(())
    });
    if let Err(e) = &result {
        assert!(
            matches!(
                e.kind(),
                io::ErrorKind::InvalidData | io::ErrorKind::Interrupted
            ) || e.raw_os_error().is_some_and(|errno| errno > 0),
            "untyped reader error: {e:?}"
        );
    }

    // Whatever was delivered, framed canonically, is delivered again.
    let mut canonical = Vec::new();
    for payload in &delivered {
        let mut m = header((16 + payload.len()) as u32, 0x1401, NLM_F_MULTI, seq);
        m.extend_from_slice(payload);
        m.resize(align(m.len()), 0);
        canonical.extend_from_slice(&m);
    }
    canonical.extend_from_slice(&header(20, NLMSG_DONE, NLM_F_MULTI, seq));
    canonical.extend_from_slice(&0i32.to_ne_bytes());
    let mut again = Vec::new();
    let done = nl::ReplyReader::new(seq).feed(&canonical, &mut |p| {
        again.push(p.to_vec());
        Ok(())
    });
    assert_eq!(done.ok(), Some(true), "canonical reply not complete");
    assert_eq!(again, delivered, "canonical reply delivered other payloads");

    // An error from the callback stops the reader and comes back as is.
    if !delivered.is_empty() {
        let stop = nl::ReplyReader::new(seq).feed(datagram, &mut |_| Err(io::Error::other("stop")));
        let e = stop.expect_err("a failing callback must fail the feed");
        assert_eq!(
            e.kind(),
            io::ErrorKind::Other,
            "not the callback's error: {e:?}"
        );
    }
}

fn check_payload(payload: &[u8]) {
    let attrs = nl::parse_attrs(payload);
    let chardev = nl::parse_chardev(payload);
    let device = nl::parse_device(payload);
    let cof = nl::parse_copy_on_fork(payload);
    assert_invalid_data("parse_attrs", &attrs);
    assert_invalid_data("parse_chardev", &chardev);
    assert_invalid_data("parse_device", &device);
    assert_invalid_data("parse_copy_on_fork", &cof);

    let Ok(attrs) = attrs else {
        assert!(
            chardev.is_err(),
            "GET_CHARDEV parsed unparseable attributes"
        );
        assert!(device.is_err(), "GET parsed unparseable attributes");
        assert!(cof.is_err(), "SYS_GET parsed unparseable attributes");
        return;
    };
    for (ty, value) in &attrs {
        assert_eq!(ty & NLA_F_MASK, 0, "flag bits left in the type");
        assert!(
            inside(payload, value),
            "attribute value outside the payload"
        );
    }

    // Re-parse stability over the canonical encoding.
    let canonical = encode_attrs(&attrs);
    let reparsed = nl::parse_attrs(&canonical).expect("canonical attributes parse");
    assert_eq!(reparsed, attrs, "canonical attributes parse differently");
    same("GET_CHARDEV", &chardev, &nl::parse_chardev(&canonical));
    same("GET", &device, &nl::parse_device(&canonical));
    same("SYS_GET", &cof, &nl::parse_copy_on_fork(&canonical));

    // A successful result, encoded again, parses to itself.
    if let Ok(info) = &chardev {
        let mut own: Vec<(u16, Vec<u8>)> = Vec::new();
        if let Some(dev) = info.dev {
            own.push((
                sys::RDMA_NLDEV_ATTR_CHARDEV,
                huge_encode_dev(dev).to_ne_bytes().to_vec(),
            ));
        }
        if let Some(abi) = info.abi {
            own.push((sys::RDMA_NLDEV_ATTR_CHARDEV_ABI, abi.to_ne_bytes().to_vec()));
        }
        if let Some(name) = &info.name {
            assert!(!name.contains('\0'), "a string attribute kept its NUL");
            let mut b = name.as_bytes().to_vec();
            b.push(0);
            own.push((sys::RDMA_NLDEV_ATTR_CHARDEV_NAME, b));
        }
        if let Some(id) = info.driver_id {
            own.push((
                sys::RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID,
                id.to_ne_bytes().to_vec(),
            ));
        }
        let refs: Vec<(u16, &[u8])> = own.iter().map(|(t, v)| (*t, &v[..])).collect();
        let back = nl::parse_chardev(&encode_attrs(&refs)).expect("own encoding parses");
        assert_eq!(&back, info, "GET_CHARDEV result does not round-trip");
        if let Some(dev) = info.dev {
            assert_eq!(nl::huge_decode_dev(huge_encode_dev(dev)), dev);
        }
    }
    if let Ok((index, name)) = &device {
        let mut own: Vec<(u16, Vec<u8>)> = Vec::new();
        if let Some(i) = index {
            own.push((sys::RDMA_NLDEV_ATTR_DEV_INDEX, i.to_ne_bytes().to_vec()));
        }
        if let Some(n) = name {
            let mut b = n.as_bytes().to_vec();
            b.push(0);
            own.push((sys::RDMA_NLDEV_ATTR_DEV_NAME, b));
        }
        let refs: Vec<(u16, &[u8])> = own.iter().map(|(t, v)| (*t, &v[..])).collect();
        let back = nl::parse_device(&encode_attrs(&refs)).expect("own encoding parses");
        assert_eq!(
            &back,
            &(*index, name.clone()),
            "GET result does not round-trip"
        );
    }
    if let Ok(Some(flag)) = cof {
        let v = [u8::from(flag)];
        let back = nl::parse_copy_on_fork(&encode_attrs(&[(
            sys::RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK,
            &v[..],
        )]));
        assert_eq!(
            back.ok(),
            Some(Some(flag)),
            "SYS_GET result does not round-trip"
        );
    }
}
