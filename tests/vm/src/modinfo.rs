//! What `modinfo -F depends` tells, read straight from a module file: a
//! kernel module is an ELF relocatable object whose `.modinfo` section
//! holds NUL-separated `key=value` strings, `depends=a,b` among them. Read
//! here so the set-up needs no module tools (kmod) on the host.

use crate::util::{err, Result};

/// Reads a little-endian integer of `N` bytes at `at`.
fn le<const N: usize>(data: &[u8], at: usize) -> Option<u64> {
    let bytes: [u8; N] = data.get(at..at.checked_add(N)?)?.try_into().ok()?;
    Some(
        bytes
            .iter()
            .rev()
            .fold(0u64, |v, &b| (v << 8) | u64::from(b)),
    )
}

/// The bytes of the section named `name` of a 64-bit little-endian ELF
/// file, if it has one.
fn section<'a>(elf: &'a [u8], name: &str) -> Option<&'a [u8]> {
    // e_ident: magic, ELFCLASS64 (2), ELFDATA2LSB (1).
    if elf.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let shoff = usize::try_from(le::<8>(elf, 0x28)?).ok()?;
    let shentsize = usize::try_from(le::<2>(elf, 0x3a)?).ok()?;
    let shnum = usize::try_from(le::<2>(elf, 0x3c)?).ok()?;
    let shstrndx = usize::try_from(le::<2>(elf, 0x3e)?).ok()?;
    // One section header: name offset at 0, file offset at 0x18, size at 0x20.
    let header = |i: usize| -> Option<(usize, &'a [u8])> {
        let h = shoff.checked_add(i.checked_mul(shentsize)?)?;
        let name = usize::try_from(le::<4>(elf, h)?).ok()?;
        let offset = usize::try_from(le::<8>(elf, h + 0x18)?).ok()?;
        let size = usize::try_from(le::<8>(elf, h + 0x20)?).ok()?;
        Some((name, elf.get(offset..offset.checked_add(size)?)?))
    };
    let (_, names) = header(shstrndx)?;
    (0..shnum).find_map(|i| {
        let (at, data) = header(i)?;
        let rest = names.get(at..)?;
        let end = rest.iter().position(|&b| b == 0)?;
        (&rest[..end] == name.as_bytes()).then_some(data)
    })
}

/// The modules a module file depends on (its `depends=` entry; empty
/// when it names none).
pub fn depends(ko: &[u8], what: &str) -> Result<Vec<String>> {
    let info = section(ko, ".modinfo").ok_or_else(|| {
        err(
            "setup: reading module dependencies",
            format!("{what} is no 64-bit ELF module with a .modinfo section"),
        )
    })?;
    let mut deps = Vec::new();
    for list in info
        .split(|&b| b == 0)
        .filter_map(|entry| entry.strip_prefix(b"depends="))
    {
        deps.extend(
            String::from_utf8_lossy(list)
                .split(',')
                .filter(|d| !d.is_empty())
                .map(str::to_string),
        );
    }
    Ok(deps)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 file: a null section, `.modinfo` and `.shstrtab`.
    fn elf_with_modinfo(modinfo: &[u8]) -> Vec<u8> {
        let shstrtab = b"\0.modinfo\0.shstrtab\0";
        let mut f = vec![0u8; 0x40];
        f[..6].copy_from_slice(b"\x7fELF\x02\x01");
        let modinfo_at = f.len();
        f.extend_from_slice(modinfo);
        let names_at = f.len();
        f.extend_from_slice(shstrtab);
        while !f.len().is_multiple_of(8) {
            f.push(0);
        }
        let shoff = f.len();
        let mut header = |name: u32, offset: usize, size: usize| {
            let mut h = [0u8; 64];
            h[..4].copy_from_slice(&name.to_le_bytes());
            h[0x18..0x20].copy_from_slice(&(offset as u64).to_le_bytes());
            h[0x20..0x28].copy_from_slice(&(size as u64).to_le_bytes());
            f.extend_from_slice(&h);
        };
        header(0, 0, 0);
        header(1, modinfo_at, modinfo.len());
        header(10, names_at, shstrtab.len());
        f[0x28..0x30].copy_from_slice(&(shoff as u64).to_le_bytes());
        f[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        f[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes());
        f[0x3e..0x40].copy_from_slice(&2u16.to_le_bytes());
        f
    }

    #[test]
    fn reads_depends() {
        let ko =
            elf_with_modinfo(b"license=GPL\0depends=ib_core,ip6_udp_tunnel,udp_tunnel\0intree=Y\0");
        assert_eq!(
            depends(&ko, "rdma_rxe.ko").unwrap(),
            ["ib_core", "ip6_udp_tunnel", "udp_tunnel"]
        );
        let none = elf_with_modinfo(b"license=GPL\0depends=\0");
        assert!(depends(&none, "dummy.ko").unwrap().is_empty());
    }

    #[test]
    fn refuses_what_is_no_module() {
        assert!(depends(b"not an elf", "x").is_err());
        let mut cut = elf_with_modinfo(b"depends=a\0");
        cut.truncate(0x50);
        assert!(depends(&cut, "x").is_err());
    }
}
