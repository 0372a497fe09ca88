//! The architecture table (`docs/architecture.md`), checked against the source: which folder
//! may import which, and no import cycles between the files of a folder. Reads `src/` as text (std only):
//! every `use crate::…` / `use super::…` and every inline `crate::…` path outside comments.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path such as `["vegas", "limiter", "permit"]`.
type ModPath = Vec<String>;

/// The source files under `src/` with their module paths.
fn modules() -> Vec<(PathBuf, ModPath)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![];
    walk(&src, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|f| {
            let rel = f.strip_prefix(&src).unwrap();
            let mut path: ModPath = rel
                .iter()
                .map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string())
                .collect();
            if matches!(path.last().map(String::as_str), Some("mod" | "lib")) {
                path.pop();
            }
            (f, path)
        })
        .collect()
}

/// The module paths a file refers to (as far as they name modules: a trailing item name is kept
/// and does no harm, since rules compare prefixes).
fn references(file: &Path, module: &ModPath) -> BTreeSet<ModPath> {
    let text = std::fs::read_to_string(file).unwrap();
    let is_dir_module = file
        .file_name()
        .is_some_and(|n| n == "mod.rs" || n == "lib.rs");
    // `super` of a file module is its folder; of a folder's mod.rs, the folder's parent.
    // (A folder's mod.rs has the folder's path already, so both drop the last segment.)
    let _ = is_dir_module;
    let parent: ModPath = module[..module.len().saturating_sub(1)].to_vec();
    let mut refs = BTreeSet::new();
    let mut in_test_module = false;
    for line in text.lines() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        if code.starts_with("#[cfg(test)]") {
            // Unit tests may reach anywhere in their own module tree; they are not the design.
            in_test_module = true;
        }
        if in_test_module {
            continue;
        }
        for (anchor, base) in [("crate::", ModPath::new()), ("super::", parent.clone())] {
            let mut rest = code;
            while let Some(at) = rest.find(anchor) {
                let before = &rest[..at];
                rest = &rest[at + anchor.len()..];
                // `super::super::x` is counted from its first `super::`.
                if anchor == "super::" && before.ends_with("super::") {
                    continue;
                }
                let mut base = base.clone();
                let mut tail = rest;
                while let Some(t) = tail.strip_prefix("super::") {
                    base.pop();
                    tail = t;
                }
                for target in expand(tail) {
                    let mut path = base.clone();
                    path.extend(target);
                    refs.insert(path);
                }
            }
        }
    }
    refs
}

/// `a::b::{c, d::e}` → `[a, b, c]`, `[a, b, d, e]` (one level of braces, which is what rustfmt
/// leaves in this crate); stops at the first character that is not part of a path.
fn expand(tail: &str) -> Vec<Vec<String>> {
    let mut prefix = vec![];
    let mut rest = tail;
    loop {
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let ident = &rest[..end];
        if !ident.is_empty() {
            prefix.push(ident.to_string());
        }
        rest = &rest[end..];
        if let Some(r) = rest.strip_prefix("::") {
            if let Some(group) = r.strip_prefix('{') {
                let close = group.find('}').unwrap_or(group.len());
                return group[..close]
                    .split(',')
                    .map(|item| {
                        let mut p = prefix.clone();
                        p.extend(
                            item.trim()
                                .split("::")
                                .map(|s| s.split_whitespace().next().unwrap_or("").to_string())
                                .filter(|s| !s.is_empty() && s != "self"),
                        );
                        p
                    })
                    .collect();
            }
            rest = r;
            continue;
        }
        return vec![prefix];
    }
}

/// Which areas each area may import, besides itself. An area is a folder (or a file at the top
/// of `src/`); a file belongs to the most specific area that contains it, and only a folder's
/// `mod.rs` may reach into the folders below it (to declare and re-export them). The table in
/// `docs/architecture.md` says the same in words.
const LAYERS: &[(&[&str], &[&[&str]])] = &[
    (&["clock"], &[]),
    (&["headers"], &[]),
    (&["backoff"], &[&["headers"], &["clock"]]),
    (&["vegas", "algorithms"], &[&["vegas"]]),
    (
        &["vegas", "limiter"],
        &[&["vegas"], &["vegas", "algorithms"], &["clock"]],
    ),
    // vegas's own files: errors, the outcome classifier and how middleware takes permits; the
    // classifier shares backoff's view of which errors are transient, the queue report writes
    // its number as the rate-limit fields do; and the dependency's side, `worker_queue`
    (
        &["vegas"],
        &[
            &["vegas", "limiter"],
            &["vegas", "algorithms"],
            &["backoff"],
            &["headers"],
            &["clock"],
        ],
    ),
    (
        &["vegas", "layer"],
        &[
            &["vegas"],
            &["vegas", "limiter"],
            &["vegas", "algorithms"],
            &["backoff"],
        ],
    ),
    // gcra's own files: the pure core
    (&["gcra"], &[&["clock"], &["headers"]]),
    (&["gcra", "check"], &[&["gcra"], &["clock"]]),
    (
        &["gcra", "remote"],
        &[&["gcra"], &["gcra", "check"], &["clock"]],
    ),
    (
        &["gcra", "redis"],
        &[
            &["gcra"],
            &["gcra", "check"],
            &["gcra", "remote"],
            &["clock"],
        ],
    ),
    (
        &["gcra", "two_tier"],
        &[&["gcra"], &["gcra", "check"], &["clock"]],
    ),
    (
        &["gcra", "layer"],
        &[
            &["gcra"],
            &["gcra", "check"],
            &["gcra", "remote"],
            &["headers"],
            &["clock"],
        ],
    ),
    // the front door: builds the stores and hands out the layers of every concern
    (
        &["guard"],
        &[
            &["gcra"],
            &["gcra", "check"],
            &["gcra", "layer"],
            &["gcra", "redis"],
            &["gcra", "remote"],
            &["gcra", "two_tier"],
            &["vegas"],
            &["vegas", "layer"],
            &["backoff"],
        ],
    ),
];

fn starts_with(path: &ModPath, prefix: &[&str]) -> bool {
    path.len() >= prefix.len() && path.iter().zip(prefix).all(|(a, b)| a == b)
}

/// The most specific area of [`LAYERS`] that `path` lies in.
fn area_of(path: &ModPath) -> Option<&'static [&'static str]> {
    LAYERS
        .iter()
        .map(|(area, _)| *area)
        .filter(|area| starts_with(path, area))
        .max_by_key(|area| area.len())
}

#[test]
fn every_module_imports_only_what_the_architecture_allows() {
    let mut violations = vec![];
    for (file, module) in modules() {
        if module.is_empty() {
            continue; // lib.rs: the crate's face re-exports every area
        }
        let Some(area) = area_of(&module) else {
            violations.push(format!("{}: no rule for module {module:?}", file.display()));
            continue;
        };
        let allowed = LAYERS.iter().find(|(a, _)| *a == area).unwrap().1;
        let is_area_face = module.len() == area.len(); // the folder's mod.rs, or a top-level file
        for target in references(&file, &module) {
            let Some(target_area) = area_of(&target) else {
                continue; // a crate-root re-export, or not a module of this crate
            };
            if target_area == area
                || (is_area_face && starts_with(&target, area))
                || allowed.contains(&target_area)
            {
                continue;
            }
            violations.push(format!(
                "{}: {} may not import {}",
                file.display(),
                module.join("::"),
                target.join("::")
            ));
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

/// `folder::Item` → `folder::file` for each item a folder's `mod.rs` re-exports from one of its
/// files (`pub use file::{Item, ..};`, also `pub(crate)` and `pub(super)`), so that a file
/// importing `super::Item` imports `file`, and a cycle through a re-export is seen.
fn reexports(mods: &[(PathBuf, ModPath)]) -> BTreeMap<ModPath, ModPath> {
    let mut map = BTreeMap::new();
    for (file, folder) in mods {
        if file.file_name().is_none_or(|n| n != "mod.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        let code: String = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join(" ");
        for statement in code.split(';') {
            let Some(at) = ["pub use ", "pub(crate) use ", "pub(super) use "]
                .iter()
                .find_map(|p| statement.find(p).map(|at| at + p.len()))
            else {
                continue;
            };
            for path in expand(statement[at..].trim()) {
                if let [child, .., item] = path.as_slice() {
                    let mut from = folder.clone();
                    from.push(item.clone());
                    let mut to = folder.clone();
                    to.push(child.clone());
                    map.insert(from, to);
                }
            }
        }
    }
    map
}

#[test]
fn a_cycle_through_a_reexport_is_an_edge_to_the_file() {
    let mods = modules();
    let map = reexports(&mods);
    let guard = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<ModPath>();
    assert_eq!(
        map.get(&guard(&["guard", "GuardBuilder"])),
        Some(&guard(&["guard", "builder"]))
    );
    assert_eq!(
        map.get(&guard(&["gcra", "redis", "RedisStore"])),
        Some(&guard(&["gcra", "redis", "store"]))
    );
}

#[test]
fn no_folder_has_an_import_cycle_between_its_files() {
    // Edges between sibling files of one folder (mod.rs excluded: it declares its children),
    // also through what the folder's mod.rs re-exports.
    let mut graph: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    let mods = modules();
    let reexported = reexports(&mods);
    let file_modules: BTreeSet<ModPath> = mods
        .iter()
        .filter(|(f, _)| {
            f.file_name()
                .is_some_and(|n| n != "mod.rs" && n != "lib.rs")
        })
        .map(|(_, m)| m.clone())
        .collect();
    for (file, module) in &mods {
        if !file_modules.contains(module) {
            continue;
        }
        let folder = &module[..module.len() - 1];
        for target in references(file, module) {
            if target.len() > folder.len() && target[..folder.len()] == *folder {
                let mut sibling: ModPath = target[..folder.len() + 1].to_vec();
                if let Some(file) = reexported.get(&sibling) {
                    sibling = file.clone();
                }
                if sibling != *module && file_modules.contains(&sibling) {
                    graph.entry(module.clone()).or_default().insert(sibling);
                }
            }
        }
    }
    // Depth-first search for a back edge.
    fn visit(
        node: &ModPath,
        graph: &BTreeMap<ModPath, BTreeSet<ModPath>>,
        state: &mut BTreeMap<ModPath, u8>,
        stack: &mut Vec<ModPath>,
    ) -> Option<Vec<ModPath>> {
        match state.get(node) {
            Some(2) => return None,
            Some(1) => {
                let from = stack.iter().position(|n| n == node).unwrap();
                let mut cycle = stack[from..].to_vec();
                cycle.push(node.clone());
                return Some(cycle);
            }
            _ => {}
        }
        state.insert(node.clone(), 1);
        stack.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, state, stack) {
                return Some(cycle);
            }
        }
        stack.pop();
        state.insert(node.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        if let Some(cycle) = visit(node, &graph, &mut state, &mut vec![]) {
            let names: Vec<String> = cycle.iter().map(|m| m.join("::")).collect();
            panic!("import cycle: {}", names.join(" -> "));
        }
    }
}

/// The architecture table the rules are written down in.
const ARCHITECTURE_DOC: &str = "docs/architecture.md";

#[test]
fn the_architecture_table_names_every_area() {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join(ARCHITECTURE_DOC);
    let text = std::fs::read_to_string(&doc).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let missing: Vec<String> = LAYERS
        .iter()
        .map(|(area, _)| {
            let folder = area.join("/");
            if src.join(&folder).is_dir() {
                format!("src/{folder}/")
            } else {
                format!("src/{folder}.rs")
            }
        })
        .filter(|path| !text.contains(&format!("`{path}")))
        .collect();
    assert!(
        missing.is_empty(),
        "{ARCHITECTURE_DOC} has no row for {missing:?}: add one saying what the folder owns and may import"
    );
}
