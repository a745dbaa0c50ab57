//! Build script: only with the `libibverbs-peer` feature, link Debian's
//! static libibverbs, its rxe and siw providers and libnl (from
//! `UVERBS_PEER_LIBDIRS`, where `cargo vm bench` unpacked them, or the
//! system's) into the benchmarks (`cargo:rustc-link-arg-benches`), so that
//! benches/verbs and benches/ops can measure libibverbs in the same binary.
//! It belongs to the unpublished `uverbs-bench` package: the library itself
//! has no build script and links nothing.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_LIBIBVERBS_PEER").is_none() {
        return;
    }
    // Where `cargo vm bench` unpacked the packages (nothing is installed),
    // searched first; then Debian's multiarch directories, for a host that
    // has them installed (libnl-3.a lives under /lib).
    println!("cargo:rerun-if-env-changed=UVERBS_PEER_LIBDIRS");
    let unpacked = std::env::var_os("UVERBS_PEER_LIBDIRS").unwrap_or_default();
    for dir in std::env::split_paths(&unpacked)
        .chain(["/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu"].map(Into::into))
    {
        println!("cargo:rustc-link-arg-benches=-L{}", dir.display());
    }
    // Providers first: they reference libibverbs, which references libnl.
    // `-l:NAME.a` takes the static archive even in a dynamic host build.
    for lib in [
        "librxe-rdmav34.a",
        "libsiw-rdmav34.a",
        "libibverbs.a",
        "libnl-route-3.a",
        "libnl-3.a",
    ] {
        println!("cargo:rustc-link-arg-benches=-l:{lib}");
    }
    println!("cargo:rustc-link-arg-benches=-lpthread");
}
