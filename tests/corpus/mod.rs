//! The policy corpora the differential tests read: `../shared/conformance`
//! and `examples/`, as parsed YAML documents grouped by folder, and what
//! those tests share about them. Each test module uses only part of it.
#![allow(dead_code)]

use gavel::engine::Request;
use gavel::json_doc::{Doc, Document};
use gavel::policy::load::parse_yaml_documents;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The YAML files under `dir`, sorted, into `out`.
pub fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            yaml_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(p);
        }
    }
}

/// Every YAML document of the corpora, by the folder of its file (files
/// that do not parse are left out).
pub fn documents_by_folder() -> BTreeMap<PathBuf, Vec<Value>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    yaml_files(
        &root.join("../shared/conformance/kyverno-policies"),
        &mut files,
    );
    yaml_files(&root.join("examples"), &mut files);
    assert!(!files.is_empty(), "no corpus at ../shared/conformance");
    let mut out: BTreeMap<PathBuf, Vec<Value>> = BTreeMap::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        let docs = parse_yaml_documents(&f.display().to_string(), &text).unwrap_or_default();
        out.entry(f.parent().unwrap().to_path_buf())
            .or_default()
            .extend(docs);
    }
    out
}

/// A document's `kind`, or "".
pub fn kind(doc: &Value) -> &str {
    doc.get("kind").and_then(Value::as_str).unwrap_or("")
}

/// Every validate pattern under a policy's rules (`pattern`, each of
/// `anyPattern`, foreach patterns), appended to `out`.
pub fn collect_patterns(v: &Value, out: &mut Vec<Value>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                match (k.as_str(), child) {
                    ("pattern", p) => out.push(p.clone()),
                    ("anyPattern", Value::Array(items)) => out.extend(items.iter().cloned()),
                    _ => collect_patterns(child, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| collect_patterns(i, out)),
        _ => {}
    }
}

/// The same request with its objects as decoded documents (as the
/// webhook holds them).
pub fn as_documents(req: &Request) -> Request {
    let decode = |d: &Document| {
        let text = serde_json::to_string(d.value()).unwrap();
        Document::from_doc(Doc::parse(&text).unwrap())
    };
    Request {
        object: decode(&req.object),
        old_object: decode(&req.old_object),
        ..req.clone()
    }
}
