//! The layering check of the `uverbs` crate (issues 19, 42): the files of
//! `src/` reference each other (`crate::…`, `super::…`, `self::…`, in `use`
//! declarations and in code) in a graph whose largest strongly connected
//! component (an import cycle) has at most `MAX_CYCLE` (5) files. Comments
//! and each file's inline `#[cfg(test)] mod … { }` are left out: tests and
//! doc links may look anywhere.
//!
//! An import lands in the file that defines the name, not in the file that
//! re-exports it: `crate::OutOfRange` goes through lib.rs's `pub use`, then
//! any `pub use` chain below it (`post`'s `pub use memory::OutOfRange`), to
//! the defining file; a private `use` that a child reaches by `super::X` is
//! followed the same way. A glob import (`use super::*`, `use crate::m::*`)
//! is an import of `m`'s file. A directory's mod.rs naming its own children
//! by relative path (`pub use memory::X`, `mod memory`) adds no edge: the
//! directory's face and its files are read as one unit from outside. A
//! `pub use` whose name the file's own code never uses is a signpost, not
//! an edge: the public modules (`mr`, `qp`, `device`) gather items defined
//! in other files that way, and whoever imports through them is charged to
//! the defining file.
//!
//! The crate root holds at most `MAX_ROOT_ITEMS` (30) public items: its
//! public modules and the names it re-exports.
//!
//! The largest cycle is 5 files: provider/mod.rs, provider/rings.rs and the
//! three drivers' mod.rs (the `drivers!` list names each driver's type; each
//! driver implements the list's `Driver` and builds its rings). The one
//! knot outside the layers, also within the limit: `error.rs`, `fork/mod.rs`
//! and `trace.rs` (3 files). `Error`'s message for a failed madvise is
//! fork's (`fork::MadviseErrnoDisplay`), and fork's fallible calls answer
//! `Errno`, defined in error.rs: each is the other's error vocabulary; an
//! error built reports itself through trace.rs, whose events speak of
//! `Errno`, `Op` and `Error`. trace.rs names nothing above them: the QP
//! and the cm hand it what it reports (`ModifiedQp`, `cm::event_name`).
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
    /// first inline `#[cfg(test)] mod … {` on. A `#[cfg(test)] mod x;` (as
    /// lib.rs declares its test helpers) is a declaration: the code after
    /// it (lib.rs's re-exports) stays.
    fn code_of(text: &str) -> String {
        let mut out = String::new();
        let mut lines = text.lines().peekable();
        while let Some(line) = lines.next() {
            let t = line.trim_start();
            if t.starts_with("//") {
                continue;
            }
            if t.starts_with("#[cfg(test)]")
                && lines.peek().is_some_and(|next| {
                    let next = next.trim();
                    next.starts_with("mod ") && !next.ends_with(';')
                })
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

    /// A token of a `use` tree.
    #[derive(Debug, Clone, PartialEq)]
    enum Tok {
        Ident(String),
        Colons,
        Open,
        Close,
        Comma,
        Star,
    }

    /// The tokens of a `use` tree (`a::{b as c, d::*}`); anything else
    /// (`pub`, `;`) is dropped by the caller.
    fn tokens(s: &str) -> Vec<Tok> {
        let mut out = Vec::new();
        let mut rest = s;
        while let Some(c) = rest.chars().next() {
            if is_ident(c) {
                let end = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
                out.push(Tok::Ident(rest[..end].to_string()));
                rest = &rest[end..];
                continue;
            }
            match c {
                ':' if rest.starts_with("::") => {
                    out.push(Tok::Colons);
                    rest = &rest[2..];
                    continue;
                }
                '{' => out.push(Tok::Open),
                '}' => out.push(Tok::Close),
                ',' => out.push(Tok::Comma),
                '*' => out.push(Tok::Star),
                _ => {}
            }
            rest = &rest[c.len_utf8()..];
        }
        out
    }

    /// One leaf of a `use` tree: the path it names and the name it binds
    /// (`None` for a glob `path::*`).
    #[derive(Debug, Clone, PartialEq)]
    struct UseLeaf {
        path: Vec<String>,
        binds: Option<String>,
        /// Declared `pub use` (any `pub(…)` too): a re-export.
        public: bool,
    }

    /// The leaves of the `use` tree in `toks` from `*at`, under `prefix`.
    fn use_tree(toks: &[Tok], at: &mut usize, prefix: &[String], out: &mut Vec<UseLeaf>) {
        let mut path = prefix.to_vec();
        loop {
            match toks.get(*at) {
                Some(Tok::Ident(s)) => {
                    // `a::{self, b}`: the `self` names `a` itself.
                    if s != "self" || prefix.is_empty() {
                        path.push(s.clone());
                    }
                    *at += 1;
                }
                Some(Tok::Star) => {
                    *at += 1;
                    out.push(UseLeaf {
                        path,
                        binds: None,
                        public: false,
                    });
                    return;
                }
                Some(Tok::Open) => {
                    *at += 1;
                    loop {
                        match toks.get(*at) {
                            Some(Tok::Close) => {
                                *at += 1;
                                return;
                            }
                            Some(Tok::Comma) => *at += 1,
                            None => return,
                            Some(_) => use_tree(toks, at, &path, out),
                        }
                    }
                }
                _ => break,
            }
            if toks.get(*at) == Some(&Tok::Colons) {
                *at += 1;
            } else {
                break;
            }
        }
        let mut binds = path.last().cloned();
        if let (Some(Tok::Ident(kw)), Some(Tok::Ident(alias))) = (toks.get(*at), toks.get(*at + 1))
        {
            if kw == "as" {
                binds = Some(alias.clone());
                *at += 2;
            }
        }
        if path.len() > prefix.len() || binds.is_some() {
            out.push(UseLeaf {
                path,
                binds,
                public: false,
            });
        }
    }

    /// The `use` declarations of a file's code (any visibility), as leaves,
    /// and the code with them blanked out.
    fn uses(code: &str) -> (Vec<UseLeaf>, String) {
        let mut leaves = Vec::new();
        let mut rest_code = String::new();
        let mut at = 0;
        while let Some(i) = code[at..].find("use ") {
            let start = at + i;
            let line_start = code[..start].rfind('\n').map_or(0, |n| n + 1);
            let before = code[line_start..start].trim();
            let is_decl = start == 0 || !code[..start].ends_with(is_ident);
            let is_decl = is_decl
                && (before.is_empty()
                    || before == "pub"
                    || (before.starts_with("pub(") && before.ends_with(')')));
            if !is_decl {
                rest_code.push_str(&code[at..start + 4]);
                at = start + 4;
                continue;
            }
            let end = code[start..].find(';').map_or(code.len(), |n| start + n);
            rest_code.push_str(&code[at..start]);
            let toks = tokens(&code[start + 4..end]);
            let mut i = 0;
            let first = leaves.len();
            use_tree(&toks, &mut i, &[], &mut leaves);
            for leaf in &mut leaves[first..] {
                leaf.public = before.starts_with("pub");
            }
            at = end;
        }
        rest_code.push_str(&code[at..]);
        (leaves, rest_code)
    }

    /// Whether `code` has `name` as a whole identifier.
    fn names_ident(code: &str, name: &str) -> bool {
        code.match_indices(name).any(|(i, _)| {
            !code[..i].ends_with(is_ident) && !code[i + name.len()..].starts_with(is_ident)
        })
    }

    /// Every path a file's code (its `use` declarations blanked out) names
    /// after `crate::`, `super::` (chains too) or `self::`, the anchor first.
    fn references(code: &str) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        for needle in ["crate::", "super::", "self::"] {
            let mut at = 0;
            while let Some(i) = code[at..].find(needle) {
                let start = at + i;
                at = start + needle.len();
                if code[..start].ends_with(|c: char| is_ident(c) || c == ':') {
                    continue; // `uverbs_crate::`, or the second `super` of a chain
                }
                let (path, _) = path_at(&code[start..]);
                if path.len() > 1 {
                    out.push(path);
                }
            }
        }
        out
    }

    /// What a file declares and names: its `use` bindings (name → the
    /// absolute path it stands for, `None` outside the crate), its glob
    /// imports, and every absolute path it references.
    #[derive(Default)]
    struct FileRefs {
        bindings: BTreeMap<String, Option<Vec<String>>>,
        globs: Vec<Vec<String>>,
        refs: Vec<Vec<String>>,
    }

    /// The file-level reference graph of `src`: file names and edges.
    ///
    /// A reference to `crate::m::X` (or `super::X`, `self::X`, a child
    /// module's `child::X`) is an edge to the file that defines `X`: when
    /// `m`'s file binds `X` by a `use` (a `pub use` re-export, or a private
    /// `use` that a child reaches by `super::X`), the path is followed to
    /// where that `use` points, through any chain of them. A glob import
    /// (`use super::*`, `use crate::m::*`) is an edge to `m`'s file. The file
    /// that re-exports is not itself an edge of the importer: lib.rs
    /// re-exports everything, and would otherwise tie every file together.
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
        // A path as written in module `me` made absolute: anchors resolved,
        // a child module or an earlier binding of the file followed; `None`
        // for a path outside the crate.
        let absolute = |path: &[String],
                        me: &[String],
                        bindings: &BTreeMap<String, Option<Vec<String>>>|
         -> Option<Vec<String>> {
            let first = path.first()?;
            let (mut base, mut rest): (Vec<String>, &[String]) = match first.as_str() {
                "crate" => (Vec::new(), &path[1..]),
                "self" => (me.to_vec(), &path[1..]),
                "super" => (me.to_vec(), path),
                _ => {
                    let child: Vec<String> = me.iter().chain([first]).cloned().collect();
                    if by_module.contains_key(child.as_slice()) {
                        return Some(child.into_iter().chain(path[1..].iter().cloned()).collect());
                    }
                    let target = bindings.get(first)?.clone()?;
                    return Some(
                        target
                            .into_iter()
                            .chain(path[1..].iter().cloned())
                            .collect(),
                    );
                }
            };
            while rest.first().is_some_and(|s| s == "super") {
                base.pop()?;
                rest = &rest[1..];
            }
            base.extend(rest.iter().cloned());
            Some(base)
        };
        let mut per_file: Vec<FileRefs> = Vec::new();
        for (i, file) in files.iter().enumerate() {
            let code = code_of(&std::fs::read_to_string(file).expect("read a source"));
            let me = &modules[i];
            let (leaves, rest) = uses(&code);
            let mut f = FileRefs::default();
            // Two passes: `use a as b; use b::c;` in either order.
            for _ in 0..2 {
                for leaf in &leaves {
                    let target = absolute(&leaf.path, me, &f.bindings);
                    match &leaf.binds {
                        Some(name) => {
                            f.bindings.insert(name.clone(), target);
                        }
                        None => {
                            if let Some(t) = target {
                                if !f.globs.contains(&t) {
                                    f.globs.push(t);
                                }
                            }
                        }
                    }
                }
            }
            // Edges: the imports written from an anchor (`crate::`,
            // `super::`, `self::`); a directory's mod.rs naming its own
            // children (`pub use memory::X`) is read as one unit with them.
            // A re-export the file's own code never names is a signpost,
            // not a dependency: whoever imports through it is charged to
            // the defining file (a public module gathering what a reader
            // browses, `mr`'s `pub use crate::buffer::BufferMr`).
            for leaf in &leaves {
                let anchored = matches!(
                    leaf.path.first().map(String::as_str),
                    Some("crate" | "super" | "self")
                );
                let signpost = leaf.public
                    && leaf
                        .binds
                        .as_ref()
                        .is_some_and(|name| !names_ident(&rest, name));
                if signpost {
                    continue;
                }
                if let Some(t) = absolute(&leaf.path, me, &f.bindings).filter(|_| anchored) {
                    f.refs.push(t);
                }
            }
            for path in references(&rest) {
                if let Some(t) = absolute(&path, me, &f.bindings) {
                    f.refs.push(t);
                }
            }
            per_file.push(f);
        }
        // The file an absolute path lands in, following `use` bindings.
        fn resolve(
            path: &[String],
            by_module: &BTreeMap<&[String], usize>,
            per_file: &[FileRefs],
            depth: usize,
        ) -> Option<usize> {
            let n = (0..=path.len())
                .rev()
                .find(|&n| by_module.contains_key(&path[..n]))?;
            let m = by_module[&path[..n]];
            let Some(name) = path.get(n) else {
                return Some(m);
            };
            match per_file[m].bindings.get(name) {
                // Bound to something outside the crate: no file of src/.
                Some(None) => None,
                Some(Some(target)) if depth < 32 => {
                    let next: Vec<String> = target.iter().chain(&path[n + 1..]).cloned().collect();
                    resolve(&next, by_module, per_file, depth + 1)
                }
                _ => Some(m),
            }
        }
        let mut edges = vec![BTreeSet::new(); files.len()];
        for (i, f) in per_file.iter().enumerate() {
            for path in &f.refs {
                if let Some(j) = resolve(path, &by_module, &per_file, 0) {
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

    /// The import cycles of the graph of `src` over `MAX_CYCLE` files,
    /// largest first, each as its sorted file names.
    fn cycles_over_max(src: &Path) -> Vec<BTreeSet<String>> {
        let (names, edges) = graph(src);
        assert!(
            names.len() > 50,
            "found only {} files in {src:?}",
            names.len()
        );
        let mut comps = components(&edges);
        comps.sort_by_key(|c| std::cmp::Reverse(c.len()));
        comps
            .iter()
            .filter(|c| c.len() > MAX_CYCLE)
            .map(|c| c.iter().map(|&i| names[i].clone()).collect())
            .collect()
    }

    #[test]
    fn the_largest_import_cycle_of_src_is_small() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../src");
        let over = cycles_over_max(&src);
        assert!(
            over.is_empty(),
            "import cycles of src/ over {MAX_CYCLE} files: {over:?}"
        );
    }

    /// The most items the crate root may hold (issue 42): modules and the
    /// types nearly every program names; everything else is one module
    /// down, where a reader browses for it.
    const MAX_ROOT_ITEMS: usize = 30;

    /// The public items lib.rs's code declares: its `pub mod`s (a hidden
    /// one, `#[doc(hidden)]`, is not part of the API) and the names of its
    /// `pub use` re-exports.
    fn root_items(lib_rs: &str) -> Vec<String> {
        let code = code_of(lib_rs);
        let (leaves, rest) = uses(&code);
        let mut items: Vec<String> = leaves
            .into_iter()
            .filter(|l| l.public)
            .filter_map(|l| l.binds)
            .collect();
        let mut hidden = false;
        for line in rest.lines().map(str::trim) {
            if let Some(name) = line.strip_prefix("pub mod ") {
                if !hidden {
                    items.push(name.trim_end_matches(';').trim().to_string());
                }
            }
            if !line.starts_with("#[") {
                hidden = false;
            }
            hidden |= line == "#[doc(hidden)]";
        }
        items.sort();
        items
    }

    #[test]
    fn the_crate_root_holds_few_items() {
        let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../src/lib.rs");
        let items = root_items(&std::fs::read_to_string(lib).unwrap());
        // The everyday ones are there.
        for name in ["Device", "Context", "Error", "cm", "mr", "qp"] {
            assert!(
                items.iter().any(|i| i == name),
                "{name} is not at the root: {items:?}"
            );
        }
        assert!(
            items.len() <= MAX_ROOT_ITEMS,
            "the crate root holds {} items, over {MAX_ROOT_ITEMS}: {items:?}",
            items.len()
        );
        println!("the crate root holds {} items: {items:?}", items.len());
    }

    #[test]
    fn root_items_are_counted() {
        let lib = "pub mod a;\n#[cfg(feature = \"x\")]\npub mod b;\n#[cfg(feature = \"f\")]\n#[doc(hidden)]\npub mod hid;\nmod private;\npub use a::{B as C, D};\nuse a::E;\n";
        assert_eq!(root_items(lib), ["C", "D", "a", "b"]);
    }

    /// The graph of a crate made of `files` (path under src/, text),
    /// written to a fresh folder named for `tag` and removed after.
    fn graph_of(tag: &str, files: &[(&str, &str)]) -> (Vec<String>, Vec<BTreeSet<usize>>) {
        let dir =
            std::env::temp_dir().join(format!("uverbs-layering-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (file, text) in files {
            let path = dir.join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let graph = graph(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        graph
    }

    /// The graph sees the references it must: a cycle built on purpose is
    /// found, through `crate::`, `super::`, groups and root re-exports.
    #[test]
    fn the_graph_sees_cycles() {
        let (names, edges) = graph_of(
            "cycles",
            &[
            ("lib.rs", "mod a;\nmod b;\npub use a::{Alpha, Other};\n"),
            ("a.rs", "use crate::b::inner::Beta;\n"),
            ("b/mod.rs", "pub mod inner;\n"),
            // inner reaches a through the root re-export, in a group, and
            // a commented reference and a test module add nothing.
            (
                "b/inner.rs",
                "use crate::{Alpha, b};\n// crate::c::X\n#[cfg(test)]\nmod tests { use crate::d::Y; }\n",
            ),
            ],
        );
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
    }

    /// A cycle seen only through re-exports: `a` imports `crate::Beta`,
    /// which lib.rs re-exports from `b`, which re-exports it from
    /// `b::inner`; `b::inner` imports `super::Alpha`, which `b` binds by a
    /// `use` of `crate::a::Alpha`. The cycle is `a` and `b/inner.rs`; `b`'s
    /// mod.rs, which only passes the names on, is no part of it.
    #[test]
    fn a_cycle_through_re_exports_only_is_found() {
        let (names, edges) = graph_of(
            "re-exports",
            &[
                ("lib.rs", "mod a;\nmod b;\npub use b::Beta;\n"),
                ("a.rs", "pub struct Alpha;\nuse crate::Beta;\n"),
                (
                    "b/mod.rs",
                    "mod inner;\npub use inner::Beta;\npub(crate) use crate::a::Alpha;\n",
                ),
                ("b/inner.rs", "use super::Alpha;\npub struct Beta;\n"),
            ],
        );
        let at = |n: &str| names.iter().position(|m| m == n).unwrap();
        assert_eq!(edges[at("a.rs")], BTreeSet::from([at("b/inner.rs")]));
        assert_eq!(edges[at("b/inner.rs")], BTreeSet::from([at("a.rs")]));
        let comps = components(&edges);
        let cycle: Vec<BTreeSet<&str>> = comps
            .iter()
            .filter(|c| c.len() > 1)
            .map(|c| c.iter().map(|&i| names[i].as_str()).collect())
            .collect();
        assert_eq!(cycle, vec![BTreeSet::from(["a.rs", "b/inner.rs"])]);
    }

    /// A public module that gathers items by `pub use` is no part of a
    /// cycle with the files it names; the same `pub use` is an edge once
    /// the file's own code uses the name.
    #[test]
    fn a_re_export_is_an_edge_only_where_used() {
        let files = |face: &'static str| {
            [
                ("lib.rs", "pub mod mr;\nmod buffer;\n"),
                ("mr.rs", face),
                (
                    "buffer.rs",
                    "use crate::mr::Region;\npub struct Buffer(Region);\n",
                ),
            ]
        };
        let (names, edges) = graph_of(
            "signpost",
            &files("pub struct Region;\npub use crate::buffer::Buffer;\n"),
        );
        let at = |n: &str| names.iter().position(|m| m == n).unwrap();
        assert_eq!(edges[at("buffer.rs")], BTreeSet::from([at("mr.rs")]));
        assert!(edges[at("mr.rs")].is_empty());
        let (names, edges) = graph_of(
            "signpost-used",
            &files("pub struct Region;\npub use crate::buffer::Buffer;\nfn f(_: Buffer) {}\n"),
        );
        let at = |n: &str| names.iter().position(|m| m == n).unwrap();
        assert_eq!(edges[at("mr.rs")], BTreeSet::from([at("buffer.rs")]));
    }

    /// The `use` parser: nested groups, `self` in a group, renames, globs.
    #[test]
    fn use_trees_parse() {
        let (leaves, rest) = uses(
            "pub(crate) use crate::{a::{self, B as C}, d::*};\nuse super::super::e::F;\nlet because = 1;\n",
        );
        let got: Vec<(String, Option<&str>)> = leaves
            .iter()
            .map(|l| (l.path.join("::"), l.binds.as_deref()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("crate::a".to_string(), Some("a")),
                ("crate::a::B".to_string(), Some("C")),
                ("crate::d".to_string(), None),
                ("super::super::e::F".to_string(), Some("F")),
            ]
        );
        // The declarations' trees are blanked out; a word ending in `use`
        // stays.
        assert!(
            !rest.contains("crate::") && !rest.contains("super::"),
            "{rest}"
        );
        assert!(rest.contains("let because = 1;"), "{rest}");
    }

    /// A glob import is an edge to its module, and `super::super::`
    /// climbs two modules.
    #[test]
    fn globs_and_super_chains_are_edges() {
        let (names, edges) = graph_of(
            "globs",
            &[
                ("lib.rs", "mod a;\nmod b;\n"),
                ("a.rs", "use crate::b::*;\n"),
                ("b/mod.rs", "mod c;\n"),
                ("b/c/mod.rs", "mod d;\n"),
                ("b/c/d.rs", "fn f() { super::super::super::a::g() }\n"),
            ],
        );
        let at = |n: &str| names.iter().position(|m| m == n).unwrap();
        assert_eq!(edges[at("a.rs")], BTreeSet::from([at("b/mod.rs")]));
        assert_eq!(edges[at("b/c/d.rs")], BTreeSet::from([at("a.rs")]));
    }

    /// The drivers of the `drivers!` list in provider/mod.rs: each entry's
    /// variant (`Rxe(crate::provider::rxe::Rxe),` → `Rxe`).
    fn listed_drivers(provider_mod: &str) -> Vec<String> {
        let start = provider_mod
            .find("\ndrivers! {")
            .expect("the drivers! list in provider/mod.rs");
        let body = &provider_mod[start..];
        let end = body.find("\n}\n").expect("the end of the drivers! list");
        body[..end]
            .lines()
            .skip(1)
            .map(str::trim)
            .filter(|l| !l.starts_with("//"))
            .filter_map(|l| l.split_once('(').map(|(v, _)| v.to_string()))
            .filter(|v| !v.is_empty() && v.chars().all(is_ident))
            .collect()
    }

    /// Only src/provider/ names a driver: everywhere else a per-driver fact
    /// is a property of the driver description (`Driver`'s constants and
    /// methods, asked through `Provider`), so adding a driver is one entry
    /// in the list and one `impl Driver`.
    #[test]
    fn no_file_outside_provider_names_a_driver() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../src");
        let list = std::fs::read_to_string(src.join("provider/mod.rs")).expect("provider/mod.rs");
        let drivers = listed_drivers(&list);
        assert!(
            ["Rxe", "Siw", "Mlx5"]
                .iter()
                .all(|d| drivers.iter().any(|l| l == d)),
            "the drivers! list as read: {drivers:?}"
        );
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        let mut found = Vec::new();
        for file in files
            .iter()
            .filter(|f| !f.starts_with(src.join("provider")))
        {
            let text = std::fs::read_to_string(file).expect("read a source");
            for (n, line) in text.lines().enumerate() {
                for d in &drivers {
                    let needle = format!("Provider::{d}");
                    let hit = line
                        .match_indices(&needle)
                        .any(|(i, _)| !line[i + needle.len()..].starts_with(is_ident));
                    if hit {
                        found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                    }
                }
            }
        }
        assert!(
            found.is_empty(),
            "driver names outside src/provider/:\n{}",
            found.join("\n")
        );
    }

    /// The list reader finds the variants and skips the doc lines.
    #[test]
    fn the_drivers_list_is_read() {
        let text = "x\ndrivers! {$\n    /// Soft RoCE (`rdma_rxe`).\n    Rxe(crate::provider::rxe::Rxe),\n    /// ConnectX (`mlx5_ib`): RC and UC (docs).\n    Mlx5(crate::provider::mlx5::Mlx5),\n}\n";
        assert_eq!(listed_drivers(text), ["Rxe", "Mlx5"]);
    }
}
