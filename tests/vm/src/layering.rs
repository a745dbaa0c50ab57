//! The layering check of the `uverbs` crate (issue 19): the files of `src/`
//! reference each other (`crate::…`, `super::…`, and the crate root's
//! re-exports) in a graph whose largest strongly connected component (an
//! import cycle) has at most `MAX_CYCLE` (5) files. Comments and each file's
//! `#[cfg(test)] mod` are left out: tests and doc links may look anywhere.
//!
//! A host-side test of this crate (the harness's), so it runs with
//! `cargo test --workspace` where the sources are; the VM sees only binaries.

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::{Path, PathBuf};

    /// The largest import cycle `src/` may have, in files.
    const MAX_CYCLE: usize = 5;

    /// Every `.rs` file under `dir`.
    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read src/") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// The module path of a file relative to `src/` (`qp.rs` → `[qp]`,
    /// `wr/mod.rs` → `[wr]`, `lib.rs` → `[]`).
    fn module_of(rel: &Path) -> Vec<String> {
        let mut parts: Vec<String> = rel
            .with_extension("")
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
            parts.pop();
        }
        parts
    }

    /// The code of a file: comment lines dropped, and everything from its
    /// first `#[cfg(test)]` module on.
    fn code_of(text: &str) -> String {
        let mut out = String::new();
        let mut lines = text.lines().peekable();
        while let Some(line) = lines.next() {
            let t = line.trim_start();
            if t.starts_with("//") {
                continue;
            }
            if t.starts_with("#[cfg(test)]")
                && lines
                    .peek()
                    .is_some_and(|next| next.trim_start().starts_with("mod "))
            {
                break;
            }
            out.push_str(line);
            out.push('\n');
        }
        out
    }

    fn is_ident(c: char) -> bool {
        c.is_ascii_alphanumeric() || c == '_'
    }

    /// The `a::b::c` path starting at `s`, and what follows it.
    fn path_at(s: &str) -> (Vec<String>, &str) {
        let mut parts = Vec::new();
        let mut rest = s;
        loop {
            let end = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
            if end == 0 {
                break;
            }
            parts.push(rest[..end].to_string());
            rest = &rest[end..];
            match rest.strip_prefix("::") {
                Some(r) if r.starts_with(is_ident) => rest = r,
                _ => break,
            }
        }
        (parts, rest)
    }

    /// Every path a file's code names after `crate::` or `super::`, as
    /// `(anchor, path)`; a `{a, b::c}` group gives one path per item.
    fn references(code: &str) -> Vec<(&'static str, Vec<String>)> {
        let mut out = Vec::new();
        for anchor in ["crate", "super"] {
            let needle = format!("{anchor}::");
            let mut at = 0;
            while let Some(i) = code[at..].find(&needle) {
                let start = at + i;
                at = start + needle.len();
                if start > 0 && code[..start].ends_with(is_ident) {
                    continue; // e.g. `uverbs_crate::`
                }
                let rest = &code[at..];
                if let Some(group) = rest.strip_prefix('{') {
                    let end = group.find('}').unwrap_or(group.len());
                    for item in group[..end].split(',') {
                        let (path, _) = path_at(item.trim());
                        if !path.is_empty() {
                            out.push((if anchor == "crate" { "crate" } else { "super" }, path));
                        }
                    }
                } else {
                    let (path, _) = path_at(rest);
                    if !path.is_empty() {
                        out.push((if anchor == "crate" { "crate" } else { "super" }, path));
                    }
                }
            }
        }
        out
    }

    /// lib.rs's `pub use m::{A, B};` and `pub use m::A;`: root name → module path.
    fn root_reexports(lib: &str) -> BTreeMap<String, Vec<String>> {
        let mut map = BTreeMap::new();
        for stmt in lib.split(';') {
            let Some(rest) = stmt.trim().strip_prefix("pub use ") else {
                continue;
            };
            if let Some((module, group)) = rest.split_once("::{") {
                let module: Vec<String> = module.split("::").map(str::to_string).collect();
                for item in group.trim_end_matches('}').split(',') {
                    let name = item.trim();
                    if !name.is_empty() && name.chars().all(is_ident) {
                        map.insert(name.to_string(), module.clone());
                    }
                }
            } else if let Some((module, name)) = rest.rsplit_once("::") {
                map.insert(
                    name.trim().to_string(),
                    module.split("::").map(str::to_string).collect(),
                );
            }
        }
        map
    }

    /// Tarjan's strongly connected components of `edges` (node indices).
    fn components(edges: &[BTreeSet<usize>]) -> Vec<Vec<usize>> {
        struct State<'a> {
            edges: &'a [BTreeSet<usize>],
            index: Vec<Option<usize>>,
            low: Vec<usize>,
            on_stack: Vec<bool>,
            stack: Vec<usize>,
            next: usize,
            out: Vec<Vec<usize>>,
        }
        fn visit(s: &mut State<'_>, v: usize) {
            s.index[v] = Some(s.next);
            s.low[v] = s.next;
            s.next += 1;
            s.stack.push(v);
            s.on_stack[v] = true;
            for &w in s.edges[v].iter() {
                match s.index[w] {
                    None => {
                        visit(s, w);
                        s.low[v] = s.low[v].min(s.low[w]);
                    }
                    Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                    Some(_) => {}
                }
            }
            if Some(s.low[v]) == s.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = s.stack.pop() {
                    s.on_stack[w] = false;
                    comp.push(w);
                    if w == v {
                        break;
                    }
                }
                s.out.push(comp);
            }
        }
        let n = edges.len();
        let mut s = State {
            edges,
            index: vec![None; n],
            low: vec![0; n],
            on_stack: vec![false; n],
            stack: Vec::new(),
            next: 0,
            out: Vec::new(),
        };
        for v in 0..n {
            if s.index[v].is_none() {
                visit(&mut s, v);
            }
        }
        s.out
    }

    /// The file-level reference graph of `src`: file names and edges.
    fn graph(src: &Path) -> (Vec<String>, Vec<BTreeSet<usize>>) {
        let mut files = Vec::new();
        rust_files(src, &mut files);
        files.sort();
        let modules: Vec<Vec<String>> = files
            .iter()
            .map(|f| module_of(f.strip_prefix(src).expect("under src")))
            .collect();
        let by_module: BTreeMap<&[String], usize> = modules
            .iter()
            .enumerate()
            .map(|(i, m)| (m.as_slice(), i))
            .collect();
        let lib = std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs");
        let reexports = root_reexports(&code_of(&lib));
        // The longest prefix of `path` that is a file's module.
        let resolve = |path: &[String]| -> Option<usize> {
            (1..=path.len())
                .rev()
                .find_map(|n| by_module.get(&path[..n]).copied())
        };
        let mut edges = vec![BTreeSet::new(); files.len()];
        for (i, file) in files.iter().enumerate() {
            let code = code_of(&std::fs::read_to_string(file).expect("read a source"));
            let me = &modules[i];
            // `super` of a file module is its parent module; of a mod.rs,
            // the parent of the directory's module.
            let parent: &[String] = &me[..me.len().saturating_sub(1)];
            for (anchor, path) in references(&code) {
                let full: Vec<String> = if anchor == "super" {
                    parent.iter().cloned().chain(path).collect()
                } else if !by_module.contains_key(&path[..1]) {
                    match reexports.get(&path[0]) {
                        Some(module) => module.iter().cloned().chain(path).collect(),
                        None => continue,
                    }
                } else {
                    path
                };
                if let Some(j) = resolve(&full) {
                    if j != i {
                        edges[i].insert(j);
                    }
                }
            }
        }
        let names = files
            .iter()
            .map(|f| f.strip_prefix(src).unwrap().display().to_string())
            .collect();
        (names, edges)
    }

    #[test]
    fn the_largest_import_cycle_of_src_is_small() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../src");
        let (names, edges) = graph(&src);
        assert!(
            names.len() > 50,
            "found only {} files in {src:?}",
            names.len()
        );
        let mut comps = components(&edges);
        comps.sort_by_key(|c| std::cmp::Reverse(c.len()));
        let largest: BTreeSet<&str> = comps[0].iter().map(|&i| names[i].as_str()).collect();
        assert!(
            largest.len() <= MAX_CYCLE,
            "the largest import cycle of src/ has {} files (at most {MAX_CYCLE}): {largest:?}",
            largest.len()
        );
    }

    /// The graph sees the references it must: a cycle built on purpose is
    /// found, through `crate::`, `super::`, groups and root re-exports.
    #[test]
    fn the_graph_sees_cycles() {
        let dir = std::env::temp_dir().join(format!("uverbs-layering-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("b")).unwrap();
        for (file, text) in [
            ("lib.rs", "mod a;\nmod b;\npub use a::{Alpha, Other};\n"),
            ("a.rs", "use crate::b::inner::Beta;\n"),
            ("b/mod.rs", "pub mod inner;\n"),
            // inner reaches a through the root re-export, in a group, and
            // a commented reference and a test module add nothing.
            (
                "b/inner.rs",
                "use crate::{Alpha, b};\n// crate::c::X\n#[cfg(test)]\nmod tests { use crate::d::Y; }\n",
            ),
        ] {
            std::fs::write(dir.join(file), text).unwrap();
        }
        let (names, edges) = graph(&dir);
        let mut comps = components(&edges);
        comps.sort_by_key(|c| std::cmp::Reverse(c.len()));
        let largest: BTreeSet<&str> = comps[0].iter().map(|&i| names[i].as_str()).collect();
        assert_eq!(largest, BTreeSet::from(["a.rs", "b/inner.rs"]));
        let a = names.iter().position(|n| n == "a.rs").unwrap();
        let inner = names.iter().position(|n| n == "b/inner.rs").unwrap();
        assert_eq!(
            edges[inner],
            BTreeSet::from([a, names.iter().position(|n| n == "b/mod.rs").unwrap()])
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
