//! The signed message of a resource and the manifests in it, read as
//! k8s-manifest-sigstore's `BlobManifestFetcher` reads them: the message
//! annotation is base64 of gzip, around either YAML or a gzipped tar of
//! YAML files; the manifests that may be the resource's are those of its
//! kind, found by group, kind and name, else by the most values in common.

use super::diff::{Leaf, ravel};
use crate::policy::manifests::FieldPattern;
use base64::Engine as _;
use serde_json::Value;
use std::io::Read;

/// The most any decompression step yields: a message is an annotation
/// (the API server caps all of an object's annotations at 256 KiB), so
/// anything larger is a compression bomb, not a manifest.
const MAX_DECOMPRESSED: u64 = 16 << 20;

/// Why no manifest was found: `NotFound` is k8s-manifest-sigstore's
/// `MessageNotFoundError` (a failed verification), `Failed` any other
/// error (the rule's error).
#[derive(Debug, PartialEq)]
pub(super) enum FetchError {
    NotFound(String),
    Failed(String),
}

/// Go's `base64.StdEncoding.DecodeString`, which skips line breaks.
pub(super) fn base64_decode(text: &str) -> Result<Vec<u8>, String> {
    let cleaned: String = text.chars().filter(|c| *c != '\r' && *c != '\n').collect();
    base64::engine::general_purpose::STANDARD
        .decode(cleaned.as_bytes())
        .map_err(|e| match e {
            base64::DecodeError::InvalidByte(at, _)
            | base64::DecodeError::InvalidLastSymbol(at, _) => {
                format!("illegal base64 data at input byte {at}")
            }
            _ => format!("illegal base64 data at input byte {}", cleaned.len()),
        })
}

/// k8s-manifest-sigstore's `GzipDecompress`: the input itself when it is
/// not gzip. Past [`MAX_DECOMPRESSED`], an error.
pub(super) fn gunzip_or_same(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut reader = flate2::read::MultiGzDecoder::new(bytes).take(MAX_DECOMPRESSED + 1);
    match reader.read_to_end(&mut out) {
        Ok(n) if n as u64 > MAX_DECOMPRESSED => Err(format!(
            "the message decompresses to more than {} MiB",
            MAX_DECOMPRESSED >> 20
        )),
        Ok(_) => Ok(out),
        Err(_) => Ok(bytes.to_vec()),
    }
}

/// The manifests in the message annotation `message` (base64), as
/// `BlobManifestFetcher.Fetch` reads them before the search.
pub(super) fn manifests_in_message(message: &str) -> Result<Vec<Value>, FetchError> {
    let gzipped = base64_decode(message).map_err(|e| {
        FetchError::Failed(format!(
            "failed to decode base64 message in the annotation: {e}"
        ))
    })?;
    let artifact = gunzip_or_same(&gzipped).map_err(|e| {
        FetchError::Failed(format!("failed to read YAMLs in the gzipped message: {e}"))
    })?;
    yamls_in_artifact(&artifact).map_err(|e| {
        FetchError::Failed(format!("failed to read YAMLs in the gzipped message: {e}"))
    })
}

/// The documents of a YAML stream, null ones left out; `None` when it is
/// not YAML.
fn yaml_documents(bytes: &[u8]) -> Option<Vec<Value>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).ok()?;
    Some(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// `GetYAMLsInArtifact`: the blob as YAML, else as a gzipped tar whose
/// `.yaml` and `.yml` files that read as Kubernetes objects are taken, in
/// the order of their paths.
fn yamls_in_artifact(blob: &[u8]) -> Result<Vec<Value>, String> {
    if let Some(docs) = yaml_documents(blob).filter(|d| !d.is_empty()) {
        return Ok(docs);
    }
    let mut tar_bytes = Vec::new();
    flate2::read::GzDecoder::new(blob)
        .take(MAX_DECOMPRESSED + 1)
        .read_to_end(&mut tar_bytes)
        .map_err(|e| format!("gzip.NewReader() failed while decompressing tar gz: gzip: {e}"))?;
    if tar_bytes.len() as u64 > MAX_DECOMPRESSED {
        return Err(format!(
            "the tar ball decompresses to more than {} MiB",
            MAX_DECOMPRESSED >> 20
        ));
    }
    let mut archive = tar::Archive::new(tar_bytes.as_slice());
    let entries = archive
        .entries()
        .map_err(|e| format!("tarReader.Next() failed while decompressing tar gz: {e}"))?;
    let mut files: Vec<(String, Vec<Value>)> = Vec::new();
    for entry in entries {
        let mut entry = entry
            .map_err(|e| format!("tarReader.Next() failed while decompressing tar gz: {e}"))?;
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        // As the library: paths starting `..` are skipped (CWE-22).
        if name.starts_with("..") {
            continue;
        }
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            continue;
        }
        if !kind.is_file() {
            return Err(format!(
                "faced uknown type {} in {name} while decompressing tar gz",
                char::from(kind.as_byte())
            ));
        }
        let mut content = Vec::new();
        entry
            .read_to_end(&mut content)
            .map_err(|e| format!("io.Copy() failed while decompressing tar gz: {e}"))?;
        if !(name.ends_with(".yaml") || name.ends_with(".yml")) {
            continue;
        }
        // `isK8sResourceYAML`: its first document is an object with a kind.
        if let Some(docs) = yaml_documents(&content)
            && docs.first().is_some_and(|d| !kind_of(d).is_empty())
        {
            files.push((name.trim_start_matches('/').to_string(), docs));
        }
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(files.into_iter().flat_map(|(_, docs)| docs).collect())
}

fn kind_of(v: &Value) -> &str {
    v.get("kind").and_then(Value::as_str).unwrap_or_default()
}

fn metadata_str<'v>(v: &'v Value, field: &str) -> &'v str {
    v.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The group of an apiVersion, `None` when it does not parse (more than
/// one `/`).
fn group_of(api_version: &str) -> Option<&str> {
    match api_version.split_once('/') {
        None => Some(""),
        Some((_, v)) if v.contains('/') => None,
        Some((g, _)) => Some(g),
    }
}

/// How many candidate manifests a value search keeps at most
/// (`maxResourceManifestNum`'s default).
const MAX_CANDIDATES: usize = 3;

/// `FindManifestYAML`: the manifests of the resource's kind that may be
/// its manifest; `NotFound` when the message has none of its kind.
pub(super) fn candidates<'m>(
    manifests: &'m [Value],
    object: &Value,
    ignored: &[&FieldPattern],
) -> Result<Vec<&'m Value>, FetchError> {
    let kind = kind_of(object);
    let of_kind: Vec<&Value> = manifests
        .iter()
        .filter(|m| !kind_of(m).is_empty() && kind_of(m) == kind)
        .collect();
    if of_kind.is_empty() {
        return Err(FetchError::NotFound(
            "failed to find a YAML manifest in the gzipped message".into(),
        ));
    }
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if let Some(group) = group_of(api_version) {
        let name = metadata_str(object, "name");
        let same = |m: &&&Value| {
            group_of(
                m.get("apiVersion")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
            )
            .unwrap_or_default()
                == group
                && metadata_str(m, "name") == name
        };
        let by_name: Vec<&Value> = of_kind.iter().filter(same).copied().collect();
        if let Some(first) = by_name.first() {
            let namespace = metadata_str(object, "namespace");
            let in_namespace = by_name
                .iter()
                .find(|m| metadata_str(m, "namespace") == namespace);
            return Ok(vec![if by_name.len() > 1 {
                in_namespace.copied().unwrap_or(first)
            } else {
                first
            }]);
        }
    }
    Ok(search_by_value(&of_kind, object, ignored))
}

/// `ManifestSearchByValue`: the manifests sharing the most of the
/// resource's values (ignored fields masked), longest values first, at
/// most [`MAX_CANDIDATES`]. Go's unstable sorts and map order make its
/// ties arbitrary; here they keep the message's order.
fn search_by_value<'m>(
    of_kind: &[&'m Value],
    object: &Value,
    ignored: &[&FieldPattern],
) -> Vec<&'m Value> {
    let mut object_values: Vec<(String, String)> = ravel(object, ignored)
        .into_iter()
        .map(|(k, v)| (k, Leaf::text(&v)))
        .collect();
    object_values.sort_by_key(|(_, value)| std::cmp::Reverse(value.len()));
    let tables: Vec<std::collections::BTreeMap<String, Leaf>> =
        of_kind.iter().map(|m| ravel(m, ignored)).collect();
    let mut counts = vec![0usize; of_kind.len()];
    let mut last_matched: Option<usize> = None;
    let mut same_count_loops = 0usize;
    let tenth = object_values.len() / 10;
    for (i, (key, value)) in object_values.iter().enumerate() {
        let mut matched = 0;
        for (j, table) in tables.iter().enumerate() {
            if table.get(key).is_some_and(|v| v.text() == *value) {
                counts[j] += 1;
                matched += 1;
            }
        }
        // The library's early exit: past the first tenth of the keys, once
        // the number of candidates a key matches (some, fewer than the
        // maximum) has stayed the same for more than a tenth of the keys.
        if i > tenth && matched > 0 && matched < MAX_CANDIDATES {
            if Some(matched) == last_matched {
                same_count_loops += 1;
            } else {
                same_count_loops = 0;
            }
        }
        if same_count_loops > tenth {
            break;
        }
        last_matched = Some(matched);
    }
    let best = counts.iter().copied().max().unwrap_or(0);
    of_kind
        .iter()
        .zip(&counts)
        .filter(|(_, c)| **c == best)
        .map(|(m, _)| *m)
        .take(MAX_CANDIDATES)
        .collect()
}
