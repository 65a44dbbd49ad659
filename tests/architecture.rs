//! The house rules of ARCHITECTURE.md, checked from the code's own `use`
//! lines: every top-level module sits on one floor of the layer table, a
//! module imports only from floors below its own, and no modules import
//! each other in a circle (at any depth: file modules included).
//!
//! The layer table is read from ARCHITECTURE.md itself, so the document and
//! the check cannot disagree.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The floors of ARCHITECTURE.md's layer table, bottom first: the lines
/// `N. \`a\`, \`b\` ...` under the heading `## Layers`.
fn floors() -> BTreeMap<String, usize> {
    let text = std::fs::read_to_string(repo().join("ARCHITECTURE.md")).unwrap();
    let section = text
        .split("\n## Layers")
        .nth(1)
        .expect("ARCHITECTURE.md has a `## Layers` section");
    let section = section.split("\n## ").next().unwrap();
    let mut floors = BTreeMap::new();
    for line in section.lines() {
        let Some((number, rest)) = line.split_once(". ") else {
            continue;
        };
        let Ok(floor) = number.trim().parse::<usize>() else {
            continue;
        };
        // The modules are the backquoted words before the dash.
        let names = rest.split(" - ").next().unwrap();
        for name in names.split('`').skip(1).step_by(2) {
            floors.insert(name.to_string(), floor);
        }
    }
    assert!(!floors.is_empty(), "no floors in ARCHITECTURE.md");
    floors
}

/// Every module of `src/` by path (`engine::cel`), with its file.
fn modules() -> BTreeMap<String, PathBuf> {
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
    let src = repo().join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    files
        .into_iter()
        .filter_map(|f| {
            let rel = f.strip_prefix(&src).unwrap().with_extension("");
            let parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            match parts.as_slice() {
                [one] if one == "lib" || one == "main" => None,
                // Test modules may reach anywhere their module can.
                [.., last] if last == "tests" => None,
                _ => Some((parts.join("::"), f)),
            }
        })
        .collect()
}

/// The code of a file without comments, string contents and its
/// `#[cfg(test)]` module (which this project keeps last in a file).
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let text = text.split("#[cfg(test)]").next().unwrap();
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            // A char literal ('"', '\'') is not the start of a string.
            '\'' if {
                let mut ahead = chars.clone();
                match ahead.next() {
                    Some('\\') => ahead.nth(1) == Some('\''),
                    Some(_) => ahead.next() == Some('\''),
                    None => false,
                }
            } =>
            {
                let escaped = chars.next() == Some('\\');
                chars.nth(usize::from(escaped));
                out.push_str("' '");
            }
            '"' => {
                let mut escaped = false;
                for c in chars.by_ref() {
                    if escaped {
                        escaped = false;
                    } else if c == '\\' {
                        escaped = true;
                    } else if c == '"' {
                        break;
                    }
                }
                out.push_str("\"\"");
            }
            _ => out.push(c),
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Expands `a::b::{c, d::{e}}` starting at `text` into full paths.
fn expand(prefix: &[String], text: &str, out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix.to_vec();
    let mut i = 0;
    let b = text.as_bytes();
    loop {
        let start = i;
        while i < b.len() && is_ident(b[i] as char) {
            i += 1;
        }
        if i > start {
            path.push(text[start..i].to_string());
        }
        if text[i..].starts_with("::{") {
            i += 3;
            loop {
                while i < b.len() && (b[i] as char).is_whitespace() {
                    i += 1;
                }
                if i >= b.len() || b[i] == b'}' {
                    return i + 1;
                }
                i += expand(&path, &text[i..], out);
                while i < b.len() && b[i] != b',' && b[i] != b'}' {
                    i += 1;
                }
                if i < b.len() && b[i] == b',' {
                    i += 1;
                }
            }
        } else if text[i..].starts_with("::") {
            i += 2;
        } else {
            out.push(path);
            return i;
        }
    }
}

/// The modules `module` (in `file`) refers to through `crate::` and
/// `super::` paths.
fn references(module: &str, file: &Path, all: &BTreeMap<String, PathBuf>) -> BTreeSet<String> {
    let text = code(file);
    let own: Vec<String> = module.split("::").map(str::to_string).collect();
    let mut paths = Vec::new();
    let mut i = 0;
    while let Some(found) = text[i..].find(['c', 's']) {
        let at = i + found;
        i = at + 1;
        if at > 0 && is_ident(text[..at].chars().next_back().unwrap()) {
            continue;
        }
        let rest = &text[at..];
        if let Some(r) = rest.strip_prefix("crate::") {
            i = at + 7 + expand(&[], r, &mut paths);
        } else if let Some(mut r) = rest.strip_prefix("super::") {
            let mut base = own[..own.len() - 1].to_vec();
            while let Some(more) = r.strip_prefix("super::") {
                base.pop();
                r = more;
            }
            i = at + (rest.len() - r.len()) + expand(&base, r, &mut paths);
        }
    }
    paths
        .into_iter()
        .filter_map(|p| {
            // The longest prefix that is a module.
            (1..=p.len())
                .rev()
                .map(|n| p[..n].join("::"))
                .find(|m| all.contains_key(m))
        })
        // A module may use its ancestors: they contain it.
        .filter(|m| m != module && !module.starts_with(&format!("{m}::")))
        .collect()
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let all = modules();
    all.iter()
        .map(|(m, f)| (m.clone(), references(m, f, &all)))
        .collect()
}

fn top(m: &str) -> &str {
    m.split("::").next().unwrap()
}

/// Strongly connected components of more than one module (Tarjan).
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        found: Vec<Vec<String>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, v: &'g str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            for w in self.graph.get(v).into_iter().flatten() {
                if !self.index.contains_key(w.as_str()) {
                    self.visit(w);
                    let l = self.low[v].min(self.low[w.as_str()]);
                    self.low.insert(v, l);
                } else if self.stack.contains(&w.as_str()) {
                    let l = self.low[v].min(self.index[w.as_str()]);
                    self.low.insert(v, l);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    component.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

#[test]
fn every_import_goes_down_a_floor() {
    let floors = floors();
    let graph = graph();
    let mut unplaced = BTreeSet::new();
    let mut upward = Vec::new();
    for (from, targets) in &graph {
        let Some(&f) = floors.get(top(from)) else {
            unplaced.insert(top(from).to_string());
            continue;
        };
        for to in targets {
            if top(to) == top(from) {
                continue;
            }
            match floors.get(top(to)) {
                Some(&t) if t < f => {}
                Some(&t) => upward.push(format!("{from} (floor {f}) -> {to} (floor {t})")),
                None => {
                    unplaced.insert(top(to).to_string());
                }
            }
        }
    }
    assert!(
        unplaced.is_empty(),
        "modules missing from ARCHITECTURE.md's layer table: {unplaced:?}"
    );
    assert!(
        upward.is_empty(),
        "imports that do not go down a floor:\n{}",
        upward.join("\n")
    );
}

#[test]
fn no_import_circles() {
    let graph = graph();
    let found = circles(&graph);
    assert!(found.is_empty(), "import circles: {found:?}");
}

/// The checker itself: it sees the imports this file is known to make, in
/// each form the code writes them, and it would see a circle.
#[test]
fn the_checker_sees_imports_and_circles() {
    let graph = graph();
    let of = |m: &str| graph.get(m).unwrap_or_else(|| panic!("module {m}"));
    // `use crate::a::{b, c::d}` groups, `super::` paths and inline paths.
    assert!(of("admission::pipeline").contains("admission::policies"));
    assert!(of("admission::pipeline").contains("engine::cel"));
    assert!(of("engine::validate").contains("policy::compile"));
    assert!(
        of("kinds::schema::merge_keys").is_empty(),
        "its parent is not an edge"
    );
    assert!(of("cli::serve").contains("controllers::leader"));
    let mut circular = BTreeMap::new();
    circular.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    circular.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    circular.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    circular.insert("d".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(circles(&circular), vec![vec!["a", "b", "c"]]);
}

/// `text` with the contents of comments, strings (raw strings included)
/// and char literals blanked, newlines kept: what is left is code, line
/// for line.
fn blanked(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let keep_newlines = |out: &mut Vec<u8>, part: &[u8]| {
        out.extend(part.iter().map(|&c| if c == b'\n' { b'\n' } else { b' ' }));
    };
    while i < b.len() {
        let rest = &b[i..];
        let end = if rest.starts_with(b"//") {
            rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len())
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (0, 0);
            while j < rest.len() {
                if rest[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            j
        } else if (rest.starts_with(b"r\"") || rest.starts_with(b"r#"))
            && (i == 0 || !is_ident(b[i - 1] as char))
        {
            let hashes = rest[1..].iter().take_while(|&&c| c == b'#').count();
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let body = 2 + hashes;
            rest[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(rest.len(), |p| body + p + close.len())
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            j + 1
        } else if rest[0] == b'\'' {
            // A char literal ('x', '\n', '\u{..}'), not a lifetime.
            match rest.get(1) {
                Some(b'\\') => rest[2..]
                    .iter()
                    .position(|&c| c == b'\'')
                    .map_or(1, |p| p + 3),
                Some(_) if rest.get(2) == Some(&b'\'') => 3,
                _ => 1,
            }
        } else {
            out.push(rest[0]);
            i += 1;
            continue;
        };
        let end = end.min(rest.len());
        keep_newlines(&mut out, &rest[..end]);
        i += end;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every function of `text` with a body: its name, first line and length
/// in lines (signature to closing brace).
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let code = blanked(text);
    let b = code.as_bytes();
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(found) = code[at..].find("fn ") {
        let start = at + found;
        at = start + 3;
        if start > 0 && is_ident(b[start - 1] as char) {
            continue;
        }
        let name: String = code[at..].chars().take_while(|&c| is_ident(c)).collect();
        if name.is_empty() {
            continue;
        }
        // The body opens at the first `{` outside the signature's brackets;
        // a `;` first is a declaration.
        let (mut depth, mut j) = (0i32, at);
        let open = loop {
            match b.get(j) {
                None => break None,
                Some(b'(' | b'[' | b'<') => depth += 1,
                Some(b')' | b']') => depth -= 1,
                Some(b'>') if b[j - 1] != b'-' && b[j - 1] != b'=' => depth -= 1,
                Some(b';') if depth <= 0 => break None,
                Some(b'{') if depth <= 0 => break Some(j),
                _ => {}
            }
            j += 1;
        };
        let Some(open) = open else { continue };
        let mut depth = 0;
        let close = (open..b.len())
            .find(|&k| {
                match b[k] {
                    b'{' => depth += 1,
                    b'}' => depth -= 1,
                    _ => {}
                }
                depth == 0
            })
            .unwrap_or(b.len() - 1);
        out.push((name, line_of(start), line_of(close) - line_of(start) + 1));
    }
    out
}

/// Every `.rs` file under `src/`.
fn source_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = modules().into_values().collect();
    let src = repo().join("src");
    files.extend(["lib.rs", "main.rs"].map(|f| src.join(f)));
    fn tests(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                tests(&path, out);
            } else if path.file_name().is_some_and(|n| n == "tests.rs") {
                out.push(path);
            }
        }
    }
    tests(&src, &mut files);
    files.sort();
    files
}

/// The longest a function may be, and the functions exempt: each an
/// interpreter's main `match`, one arm per form it reads, which splitting
/// would only scatter.
const MAX_FUNCTION_LINES: usize = 150;
const INTERPRETERS: &[(&str, &str)] = &[
    ("src/cel/direct/eval.rs", "eval"),
    ("src/cel/direct/functions.rs", "call"),
    ("src/jmespath/parser.rs", "lex"),
    ("src/units/time.rs", "parse_layout"),
];

/// The longest a hand-written file may be, and the generated files.
const MAX_FILE_LINES: usize = 800;
const GENERATED: &[&str] = &["src/kinds/schema/merge_keys.rs"];

#[test]
fn functions_and_files_stay_readable() {
    let mut long = Vec::new();
    for file in source_files() {
        let rel = file
            .strip_prefix(repo())
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(&file).unwrap();
        let lines = text.lines().count();
        if lines > MAX_FILE_LINES && !GENERATED.contains(&rel.as_str()) {
            long.push(format!("{rel}: {lines} lines (at most {MAX_FILE_LINES})"));
        }
        for (name, line, length) in functions(&text) {
            if length > MAX_FUNCTION_LINES && !INTERPRETERS.contains(&(rel.as_str(), name.as_str()))
            {
                long.push(format!(
                    "{rel}:{line}: fn {name} is {length} lines (at most {MAX_FUNCTION_LINES})"
                ));
            }
        }
    }
    assert!(long.is_empty(), "split these:\n{}", long.join("\n"));
}

/// The measure itself: strings, raw strings and comments with braces in
/// them do not move it, nested functions are measured on their own, and
/// the exempt interpreters are long (else the exemption is stale).
#[test]
fn the_length_check_measures_functions() {
    let text = "fn a() {\n    let s = \"}{\";\n    let r = r#\"{\"#;\n    // }\n    let c = '{';\n}\nfn b<'x>(v: &'x str) -> Vec<u8> where u8: Copy {\n    fn inner() {}\n    vec![]\n}\nfn declared();\n";
    let found = functions(text);
    assert_eq!(
        found,
        vec![
            ("a".to_string(), 1, 6),
            ("b".to_string(), 7, 4),
            ("inner".to_string(), 8, 1)
        ]
    );
    for (file, name) in INTERPRETERS {
        let text = std::fs::read_to_string(repo().join(file)).unwrap();
        let length = functions(&text)
            .into_iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, _, l)| l);
        assert!(
            length.is_some_and(|l| l > MAX_FUNCTION_LINES),
            "{file} {name}: exempt but {length:?} lines"
        );
    }
}
