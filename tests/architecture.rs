//! The module graph of `src/`, read from the source: no two files import each other
//! (directly or round a longer loop), and no import goes against the layering written in
//! docs/ARCHITECTURE.md ("Layers").
//!
//! The graph is of files and of what their non-test code names: `use` items and paths
//! that start at `crate`, `super`, `self` or a child module. A name is followed through
//! the re-exports (`pub use`) of the modules on its way, so an import counts against the
//! file that defines what it names, not against a facade that passes it on. A module's
//! root file (`mod.rs`, or `x.rs` beside `x/`) and the files of its submodules are one
//! unit: the root declares and wires its children and holds what they share. Test code
//! (`#[cfg(test)]` items and the files they declare) is not part of the graph.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use syn::spanned::Spanned;
use syn::visit::Visit;

/// A module's absolute path: `["crate", "trace", "store"]`.
type ModPath = Vec<String>;

/// One module of the crate: the file it is in and the names it defines or passes on.
#[derive(Debug, Default)]
struct Module {
    /// The file, relative to the crate's root (`src/trace/store.rs`).
    file: PathBuf,
    /// Names its items define (functions, types, traits, constants, child modules).
    items: BTreeSet<String>,
    /// `pub use` with a name: that name → the absolute path it stands for.
    reexports: BTreeMap<String, ModPath>,
    /// `pub use …::*`: the modules whose names it passes on.
    globs: Vec<ModPath>,
}

/// One import: the file that makes it, the absolute path it names and where it is.
#[derive(Debug, Clone)]
struct Import {
    file: PathBuf,
    target: ModPath,
    line: usize,
}

/// A crate's module graph.
#[derive(Debug, Default)]
struct Crate {
    root: PathBuf,
    modules: BTreeMap<ModPath, Module>,
    /// Each file's module (the outermost, for a file with inline modules).
    file_modules: BTreeMap<PathBuf, ModPath>,
    imports: Vec<Import>,
}

/// One file-level edge, with an import that makes it.
#[derive(Debug, Clone)]
struct Edge {
    from: PathBuf,
    to: PathBuf,
    line: usize,
}

impl Crate {
    /// Reads the crate whose root file is `root/lib.rs`.
    fn read(root: &Path) -> Crate {
        let mut krate = Crate {
            root: root.to_owned(),
            ..Crate::default()
        };
        krate.read_file(
            Path::new("lib.rs"),
            vec!["crate".to_owned()],
            PathBuf::new(),
        );
        krate
    }

    /// Reads one file as the module `path`; its `mod x;` children are in `dir`.
    fn read_file(&mut self, file: &Path, path: ModPath, dir: PathBuf) {
        let text = std::fs::read_to_string(self.root.join(file))
            .unwrap_or_else(|error| panic!("{}: {error}", file.display()));
        let parsed =
            syn::parse_file(&text).unwrap_or_else(|error| panic!("{}: {error}", file.display()));
        self.file_modules.insert(file.to_owned(), path.clone());
        self.read_items(file, &parsed.items, path, &dir);
    }

    fn read_items(&mut self, file: &Path, items: &[syn::Item], path: ModPath, dir: &Path) {
        self.modules.entry(path.clone()).or_default().file = file.to_owned();
        let children: BTreeSet<String> = items
            .iter()
            .filter_map(|item| match item {
                syn::Item::Mod(module) if !is_test(&module.attrs) => Some(module.ident.to_string()),
                _ => None,
            })
            .collect();
        for item in items {
            if is_test(item_attrs(item)) {
                continue;
            }
            if let Some(name) = item_name(item) {
                self.module(&path).items.insert(name);
            }
            match item {
                syn::Item::Mod(module) => {
                    let name = module.ident.to_string();
                    let mut child = path.clone();
                    child.push(name.clone());
                    match &module.content {
                        Some((_, inner)) => {
                            self.read_items(file, inner, child, &dir.join(&name));
                        }
                        None => {
                            let flat = dir.join(format!("{name}.rs"));
                            let nested = dir.join(&name).join("mod.rs");
                            let (found, children_dir) = if self.root.join(&flat).exists() {
                                (flat, dir.join(&name))
                            } else {
                                (nested, dir.join(&name))
                            };
                            self.read_file(&found, child, children_dir);
                        }
                    }
                }
                syn::Item::Use(item_use) => {
                    let public = !matches!(item_use.vis, syn::Visibility::Inherited);
                    let mut leaves = Vec::new();
                    flatten_use(&item_use.tree, Vec::new(), &mut leaves);
                    for leaf in leaves {
                        let Some(target) = absolute(&leaf.path, &path, &children) else {
                            continue;
                        };
                        self.imports.push(Import {
                            file: file.to_owned(),
                            target: target.clone(),
                            line: item_use.span().start().line,
                        });
                        if public {
                            let module = self.module(&path);
                            match leaf.name {
                                Some(name) => {
                                    module.reexports.insert(name, target);
                                }
                                None => module.globs.push(target),
                            }
                        }
                    }
                }
                other => {
                    let mut paths = PathsIn::default();
                    paths.visit_item(other);
                    for (segments, line) in paths.found {
                        if let Some(target) = absolute(&segments, &path, &children) {
                            self.imports.push(Import {
                                file: file.to_owned(),
                                target,
                                line,
                            });
                        }
                    }
                }
            }
        }
    }

    fn module(&mut self, path: &ModPath) -> &mut Module {
        self.modules.entry(path.clone()).or_default()
    }

    /// The file that defines what `path` names, following re-exports.
    fn resolve(&self, path: &[String], depth: usize) -> Option<&Path> {
        let known = (1..=path.len())
            .rev()
            .find(|length| self.modules.contains_key(&path[..*length]))?;
        let module = &self.modules[&path[..known]];
        let rest = &path[known..];
        let Some(name) = rest.first() else {
            return Some(&module.file);
        };
        if module.items.contains(name) || depth == 0 {
            return Some(&module.file);
        }
        if let Some(target) = module.reexports.get(name) {
            let onward: ModPath = target.iter().chain(&rest[1..]).cloned().collect();
            return self.resolve(&onward, depth - 1).or(Some(&module.file));
        }
        for glob in &module.globs {
            let onward: ModPath = glob.iter().chain(rest).cloned().collect();
            if let Some(inner) = self.modules.get(glob.as_slice())
                && (inner.items.contains(name)
                    || inner.reexports.contains_key(name)
                    || !inner.globs.is_empty())
                && let Some(file) = self.resolve(&onward, depth - 1)
            {
                return Some(file);
            }
        }
        Some(&module.file)
    }

    /// Whether one of two files is the root file of a module the other is in: a
    /// module's root declares and wires its children and holds what they share, so the
    /// two are one unit, not a cycle.
    fn nested(&self, a: &Path, b: &Path) -> bool {
        match (self.file_modules.get(a), self.file_modules.get(b)) {
            (Some(a), Some(b)) => a.starts_with(b) || b.starts_with(a),
            _ => false,
        }
    }

    /// Every file-level edge, one per (importing file, imported file), with the first
    /// line that makes it; none between a module's root file and its children's.
    fn edges(&self) -> Vec<Edge> {
        let mut edges: BTreeMap<(PathBuf, PathBuf), usize> = BTreeMap::new();
        for import in &self.imports {
            let Some(to) = self.resolve(&import.target, 16) else {
                continue;
            };
            if to != import.file && !self.nested(&import.file, to) {
                let line = edges
                    .entry((import.file.clone(), to.to_owned()))
                    .or_insert(import.line);
                *line = (*line).min(import.line);
            }
        }
        edges
            .into_iter()
            .map(|((from, to), line)| Edge { from, to, line })
            .collect()
    }

    /// The source line `line` of `file`, trimmed.
    fn line(&self, file: &Path, line: usize) -> String {
        std::fs::read_to_string(self.root.join(file))
            .ok()
            .and_then(|text| text.lines().nth(line.saturating_sub(1)).map(str::to_owned))
            .unwrap_or_default()
            .trim()
            .to_owned()
    }
}

/// The top-level module a file belongs to (`trace` for `trace/store.rs`, `lib` for the
/// root).
fn top_level(file: &Path) -> String {
    let first = file
        .components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .unwrap_or_default();
    first.strip_suffix(".rs").unwrap_or(&first).to_owned()
}

/// Groups of files that import each other (strongly connected, more than one file),
/// each sorted, by Tarjan's algorithm.
fn cycles<N: Ord + Clone>(edges: &[(N, N)]) -> Vec<Vec<N>> {
    let nodes: BTreeSet<N> = edges
        .iter()
        .flat_map(|(a, b)| [a.clone(), b.clone()])
        .collect();
    let index_of: BTreeMap<N, usize> = nodes.iter().cloned().zip(0..).collect();
    let names: Vec<N> = nodes.into_iter().collect();
    let mut next = vec![Vec::new(); names.len()];
    for (a, b) in edges {
        next[index_of[a]].push(index_of[b]);
    }
    struct State {
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        counter: usize,
        groups: Vec<Vec<usize>>,
    }
    fn connect(node: usize, next: &[Vec<usize>], state: &mut State) {
        state.index[node] = Some(state.counter);
        state.low[node] = state.counter;
        state.counter += 1;
        state.stack.push(node);
        state.on_stack[node] = true;
        for &other in &next[node] {
            match state.index[other] {
                None => {
                    connect(other, next, state);
                    state.low[node] = state.low[node].min(state.low[other]);
                }
                Some(index) if state.on_stack[other] => {
                    state.low[node] = state.low[node].min(index);
                }
                Some(_) => {}
            }
        }
        if Some(state.low[node]) == state.index[node] {
            let mut group = Vec::new();
            while let Some(member) = state.stack.pop() {
                state.on_stack[member] = false;
                group.push(member);
                if member == node {
                    break;
                }
            }
            if group.len() > 1 {
                state.groups.push(group);
            }
        }
    }
    let mut state = State {
        index: vec![None; names.len()],
        low: vec![0; names.len()],
        on_stack: vec![false; names.len()],
        stack: Vec::new(),
        counter: 0,
        groups: Vec::new(),
    };
    for node in 0..names.len() {
        if state.index[node].is_none() {
            connect(node, &next, &mut state);
        }
    }
    let mut groups: Vec<Vec<N>> = state
        .groups
        .into_iter()
        .map(|group| {
            let mut members: Vec<N> = group.into_iter().map(|i| names[i].clone()).collect();
            members.sort();
            members
        })
        .collect();
    groups.sort();
    groups
}

/// The layers of docs/ARCHITECTURE.md's `layers` block, bottom first: each line is one
/// layer, its top-level modules separated by spaces (`#` starts a comment).
fn layers(architecture: &str) -> Vec<Vec<String>> {
    let block = architecture
        .split("```layers\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("docs/ARCHITECTURE.md has a ```layers block");
    let mut layers: Vec<Vec<String>> = block
        .lines()
        .map(|line| line.split('#').next().unwrap_or_default())
        .map(|line| {
            line.split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .filter(|layer| !layer.is_empty())
        .collect();
    layers.reverse(); // written top first
    layers
}

/// What is wrong with a crate's structure.
#[derive(Debug, Default, PartialEq, Eq)]
struct Findings {
    /// Files that import each other, with the imports that close each loop.
    file_cycles: Vec<String>,
    /// Top-level modules that import each other.
    module_cycles: Vec<String>,
    /// Imports from a lower layer into a higher one.
    wrong_way: Vec<String>,
    /// Top-level modules the layering does not name.
    unplaced: Vec<String>,
}

impl fmt::Display for Findings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (title, list) in [
            ("files that import each other", &self.file_cycles),
            (
                "top-level modules that import each other",
                &self.module_cycles,
            ),
            ("imports against the layering", &self.wrong_way),
            ("top-level modules no layer names", &self.unplaced),
        ] {
            if !list.is_empty() {
                writeln!(f, "{title}:")?;
                for entry in list {
                    writeln!(f, "  {entry}")?;
                }
            }
        }
        Ok(())
    }
}

/// Checks the crate at `root` against `layers` (bottom first).
fn check(krate: &Crate, layers: &[Vec<String>]) -> Findings {
    let edges = krate.edges();
    let describe = |edge: &Edge| {
        format!(
            "{} → {} ({}:{}: {})",
            edge.from.display(),
            edge.to.display(),
            edge.from.display(),
            edge.line,
            krate.line(&edge.from, edge.line)
        )
    };
    let mut findings = Findings::default();

    let pairs: Vec<(PathBuf, PathBuf)> = edges
        .iter()
        .map(|e| (e.from.clone(), e.to.clone()))
        .collect();
    for group in cycles(&pairs) {
        let members: BTreeSet<&PathBuf> = group.iter().collect();
        let closing: Vec<String> = edges
            .iter()
            .filter(|e| members.contains(&e.from) && members.contains(&e.to))
            .map(describe)
            .collect();
        findings.file_cycles.push(format!(
            "{}: {}",
            group
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            closing.join("; ")
        ));
    }

    let top: Vec<(String, String, &Edge)> = edges
        .iter()
        .map(|e| (top_level(&e.from), top_level(&e.to), e))
        .filter(|(a, b, _)| a != b)
        .collect();
    let module_pairs: Vec<(String, String)> =
        top.iter().map(|(a, b, _)| (a.clone(), b.clone())).collect();
    for group in cycles(&module_pairs) {
        findings.module_cycles.push(group.join(", "));
    }

    let rank: BTreeMap<&str, usize> = layers
        .iter()
        .enumerate()
        .flat_map(|(rank, layer)| layer.iter().map(move |m| (m.as_str(), rank)))
        .collect();
    let mut unplaced = BTreeSet::new();
    for (from, to, edge) in &top {
        match (rank.get(from.as_str()), rank.get(to.as_str())) {
            (Some(a), Some(b)) if a < b => findings.wrong_way.push(describe(edge)),
            (Some(_), Some(_)) => {}
            (a, b) => {
                if a.is_none() {
                    unplaced.insert(from.clone());
                }
                if b.is_none() {
                    unplaced.insert(to.clone());
                }
            }
        }
    }
    findings.unplaced = unplaced.into_iter().collect();
    findings
}

/// Whether attributes put an item under `#[cfg(test)]`.
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg")
            && attr
                .parse_args::<syn::Ident>()
                .is_ok_and(|ident| ident == "test")
    })
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Union(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

fn item_name(item: &syn::Item) -> Option<String> {
    let ident = match item {
        syn::Item::Const(i) => &i.ident,
        syn::Item::Enum(i) => &i.ident,
        syn::Item::Fn(i) => &i.sig.ident,
        syn::Item::Mod(i) => &i.ident,
        syn::Item::Static(i) => &i.ident,
        syn::Item::Struct(i) => &i.ident,
        syn::Item::Trait(i) => &i.ident,
        syn::Item::Type(i) => &i.ident,
        syn::Item::Union(i) => &i.ident,
        syn::Item::Macro(i) => i.ident.as_ref()?,
        _ => return None,
    };
    Some(ident.to_string())
}

/// One name a `use` tree brings in: its path, and the name it is known by (`None` for a
/// glob).
struct UseLeaf {
    path: Vec<String>,
    name: Option<String>,
}

fn flatten_use(tree: &syn::UseTree, prefix: Vec<String>, out: &mut Vec<UseLeaf>) {
    match tree {
        syn::UseTree::Path(p) => {
            let mut next = prefix;
            next.push(p.ident.to_string());
            flatten_use(&p.tree, next, out);
        }
        syn::UseTree::Name(n) => {
            let name = n.ident.to_string();
            let mut path = prefix;
            if name != "self" {
                path.push(name.clone());
            }
            let known_as = path.last().cloned();
            out.push(UseLeaf {
                path,
                name: known_as,
            });
        }
        syn::UseTree::Rename(r) => {
            let mut path = prefix;
            if r.ident != "self" {
                path.push(r.ident.to_string());
            }
            out.push(UseLeaf {
                path,
                name: Some(r.rename.to_string()),
            });
        }
        syn::UseTree::Glob(_) => out.push(UseLeaf {
            path: prefix,
            name: None,
        }),
        syn::UseTree::Group(g) => {
            for item in &g.items {
                flatten_use(item, prefix.clone(), out);
            }
        }
    }
}

/// The absolute path of `segments` as written in module `here`, whose child modules are
/// `children`; `None` for a path into another crate or a local name.
fn absolute(segments: &[String], here: &ModPath, children: &BTreeSet<String>) -> Option<ModPath> {
    let first = segments.first()?;
    let mut base: ModPath = match first.as_str() {
        "crate" => vec!["crate".to_owned()],
        "self" => here.clone(),
        "super" => here[..here.len().checked_sub(1)?].to_vec(),
        name if children.contains(name) => {
            let mut path = here.clone();
            path.push(name.to_owned());
            path
        }
        _ => return None,
    };
    for segment in &segments[1..] {
        if segment == "super" {
            base.pop();
        } else {
            base.push(segment.clone());
        }
    }
    Some(base)
}

/// The paths an item's code names, with their lines; test items inside it are skipped.
#[derive(Default)]
struct PathsIn {
    found: Vec<(Vec<String>, usize)>,
}

impl<'ast> Visit<'ast> for PathsIn {
    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.segments.len() > 1 {
            let segments = path.segments.iter().map(|s| s.ident.to_string()).collect();
            self.found.push((segments, path.span().start().line));
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_item(&mut self, item: &'ast syn::Item) {
        if !is_test(item_attrs(item)) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        if !is_test(&item.attrs) {
            syn::visit::visit_impl_item_fn(self, item);
        }
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        // A macro's input is tokens, not syntax: its paths are read from the tokens.
        paths_in_tokens(mac.tokens.clone(), &mut self.found);
        syn::visit::visit_macro(self, mac);
    }

    fn visit_attribute(&mut self, attr: &'ast syn::Attribute) {
        // Attribute macros (`#[utoipa::path(…, body = crate::x::Y)]`) name code too; a
        // doc comment's links do not.
        if !attr.path().is_ident("doc")
            && let syn::Meta::List(list) = &attr.meta
        {
            paths_in_tokens(list.tokens.clone(), &mut self.found);
        }
    }
}

/// The paths of two or more segments in `tokens` (`a::b::C`), with their lines.
fn paths_in_tokens(tokens: proc_macro2::TokenStream, found: &mut Vec<(Vec<String>, usize)>) {
    use proc_macro2::TokenTree;
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    let mut at = 0;
    while at < trees.len() {
        match &trees[at] {
            TokenTree::Group(group) => {
                paths_in_tokens(group.stream(), found);
                at += 1;
            }
            TokenTree::Ident(first) => {
                let mut segments = vec![first.to_string()];
                let mut next = at + 1;
                while let (
                    Some(TokenTree::Punct(a)),
                    Some(TokenTree::Punct(b)),
                    Some(TokenTree::Ident(ident)),
                ) = (trees.get(next), trees.get(next + 1), trees.get(next + 2))
                {
                    if a.as_char() != ':' || b.as_char() != ':' {
                        break;
                    }
                    segments.push(ident.to_string());
                    next += 3;
                }
                if segments.len() > 1 {
                    found.push((segments, first.span().start().line));
                }
                at = next;
            }
            TokenTree::Punct(_) | TokenTree::Literal(_) => at += 1,
        }
    }
}

/// Imports that go up the layering and are being removed (docs/ARCHITECTURE.md,
/// "Layers"): the `rest` and `mcp` providers still read their binding specs from
/// `config`. Each must still be there, so the list only shrinks.
const KNOWN_WRONG_WAY: &[&str] = &[
    "providers/mcp/mod.rs → config/binding/mcp.rs",
    "providers/rest.rs → config/binding/rest.rs",
    "providers/rest/mapping.rs → config/binding/rest.rs",
    "providers/rest/request.rs → config/binding/rest.rs",
];
/// The loop between top-level modules those imports close.
const KNOWN_MODULE_CYCLES: &[&str] = &["config, handles, providers, trace"];

#[test]
fn the_crate_has_no_import_cycles_and_follows_its_layering() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let architecture = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    let krate = Crate::read(&root.join("src"));
    assert!(krate.modules.len() > 100, "the crate's modules were read");
    let mut findings = check(&krate, &layers(&architecture));

    // The known imports against the layering: exactly these, no more and no fewer.
    let (known, new): (Vec<String>, Vec<String>) =
        findings.wrong_way.drain(..).partition(|finding| {
            KNOWN_WRONG_WAY
                .iter()
                .any(|k| finding.starts_with(&format!("{k} (")))
        });
    findings.wrong_way = new;
    let gone: Vec<&&str> = KNOWN_WRONG_WAY
        .iter()
        .filter(|k| {
            !known
                .iter()
                .any(|finding| finding.starts_with(&format!("{k} (")))
        })
        .collect();
    assert!(
        gone.is_empty(),
        "imports listed in KNOWN_WRONG_WAY are gone: take them off the list: {gone:?}"
    );
    let cycles = std::mem::take(&mut findings.module_cycles);
    assert!(
        findings == Findings::default(),
        "the module graph breaks docs/ARCHITECTURE.md (\"Layers\"):\n{findings}"
    );
    assert_eq!(
        cycles, KNOWN_MODULE_CYCLES,
        "the loops between top-level modules are not the known one (KNOWN_MODULE_CYCLES)"
    );
}

/// Writes `files` (path, text) under a fresh directory and reads them as a crate.
fn crate_of(files: &[(&str, &str)]) -> (tempfile::TempDir, Crate) {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let krate = Crate::read(dir.path());
    (dir, krate)
}

const TWO_LAYERS: &str = "```layers\nhigh\nlow\n```\n";

#[test]
fn two_files_that_import_each_other_are_a_cycle_named_with_their_use_lines() {
    let (_dir, krate) = crate_of(&[
        ("lib.rs", "mod low;\n"),
        ("low/mod.rs", "mod a;\nmod b;\n"),
        ("low/a.rs", "use super::b::B;\npub struct A;\n"),
        (
            "low/b.rs",
            "pub struct B;\nfn f() -> crate::low::a::A { todo!() }\n",
        ),
    ]);
    let findings = check(&krate, &layers("```layers\nlow\n```"));
    assert_eq!(findings.file_cycles.len(), 1, "{findings}");
    let cycle = &findings.file_cycles[0];
    assert!(cycle.starts_with("low/a.rs, low/b.rs:"), "{cycle}");
    assert!(cycle.contains("low/a.rs:1: use super::b::B;"), "{cycle}");
    assert!(
        cycle.contains("low/b.rs:2: fn f() -> crate::low::a::A"),
        "{cycle}"
    );
}

#[test]
fn a_loop_through_three_files_is_a_cycle() {
    let (_dir, krate) = crate_of(&[
        ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
        ("a.rs", "use crate::b::B;\npub struct A;\n"),
        ("b.rs", "use crate::c::C;\npub struct B;\n"),
        ("c.rs", "use crate::a::A;\npub struct C;\n"),
    ]);
    let findings = check(&krate, &layers("```layers\na b c\n```"));
    assert_eq!(findings.file_cycles.len(), 1, "{findings}");
    assert_eq!(findings.module_cycles, vec!["a, b, c".to_owned()]);
}

#[test]
fn an_import_from_a_lower_layer_into_a_higher_one_is_wrong_way() {
    let (_dir, krate) = crate_of(&[
        ("lib.rs", "mod high;\nmod low;\n"),
        ("high.rs", "use crate::low::Low;\npub struct High;\n"),
        (
            "low.rs",
            "pub struct Low;\npub fn f() { let _ = crate::high::High; }\n",
        ),
    ]);
    let findings = check(&krate, &layers(TWO_LAYERS));
    assert_eq!(findings.wrong_way.len(), 1, "{findings}");
    assert_eq!(
        findings.wrong_way[0],
        "low.rs → high.rs (low.rs:2: pub fn f() { let _ = crate::high::High; })"
    );
}

#[test]
fn a_layered_crate_without_cycles_passes() {
    let (_dir, krate) = crate_of(&[
        ("lib.rs", "mod high;\nmod low;\n"),
        (
            "high.rs",
            "use crate::low::{self, Low};\npub struct High(Low);\n",
        ),
        (
            "low.rs",
            "pub struct Low;\n#[cfg(test)]\nmod tests { use crate::high::High; }\n",
        ),
    ]);
    assert_eq!(check(&krate, &layers(TWO_LAYERS)), Findings::default());
}

#[test]
fn an_import_through_a_facade_counts_against_the_file_that_defines_the_name() {
    // `b` names `a`'s type through the parent's re-export, and the parent uses `b`: the
    // loop is a ↔ b, not a → parent.
    let (_dir, krate) = crate_of(&[
        ("lib.rs", "mod m;\n"),
        ("m/mod.rs", "mod a;\nmod b;\npub use a::A;\npub use b::*;\n"),
        ("m/a.rs", "pub struct A;\nfn f() { crate::m::g(); }\n"),
        ("m/b.rs", "use crate::m::A;\npub fn g() {}\n"),
    ]);
    let findings = check(&krate, &layers("```layers\nm\n```"));
    assert_eq!(findings.file_cycles.len(), 1, "{findings}");
    assert!(
        findings.file_cycles[0].starts_with("m/a.rs, m/b.rs:"),
        "{findings}"
    );
}

#[test]
fn a_top_level_module_no_layer_names_is_reported() {
    let (_dir, krate) = crate_of(&[
        ("lib.rs", "mod high;\nmod stray;\n"),
        ("high.rs", "use crate::stray::S;\n"),
        ("stray.rs", "pub struct S;\n"),
    ]);
    let findings = check(&krate, &layers(TWO_LAYERS));
    assert_eq!(findings.unplaced, vec!["stray".to_owned()]);
}
