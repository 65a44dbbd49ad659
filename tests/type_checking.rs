//! The type checking of written policies ([`gavel::policy::type_checking`])
//! on every policy of the corpora. The Kyverno policy library's CEL
//! policies are meant to be right: a warning on one is either a mistake
//! in the library or a checker that refuses what it should not, so there
//! must be none. And a mistake put into them must be found: each policy
//! whose expressions read `object.metadata` is checked again with that
//! read misspelt.

use crate::corpus::documents_by_folder;
use gavel::policy::type_checking::type_warnings;
use serde_json::Value;

#[test]
fn corpus_policies_type_check() {
    let (mut checked, mut misspelt, mut found) = (0, 0, 0);
    let mut warned = Vec::new();
    let mut missed = Vec::new();
    for (folder, docs) in documents_by_folder() {
        for doc in docs {
            let name = format!(
                "{}: {} {}",
                folder.display(),
                doc["kind"].as_str().unwrap_or_default(),
                doc["metadata"]["name"].as_str().unwrap_or_default()
            );
            checked += 1;
            warned.extend(
                type_warnings(&doc)
                    .into_iter()
                    .map(|w| format!("{name}: {w}")),
            );
            // CEL's `object`, not JMESPath's `request.object`.
            let text = doc.to_string().replace("request.object.", "request.@.");
            if !text.contains("object.metadata.") {
                continue;
            }
            let wrong = text
                .replace("object.metadata.", "object.metadatx.")
                .replace("request.@.", "request.object.");
            let wrong: Value = serde_json::from_str(&wrong).expect("still JSON");
            let warnings = type_warnings(&wrong);
            if warnings.is_empty() {
                missed.push(name);
                continue;
            }
            misspelt += 1;
            if warnings
                .iter()
                .any(|w| w.contains("undefined field 'metadatx'"))
            {
                found += 1;
            }
        }
    }
    eprintln!(
        "type checking: {checked} documents, {} warnings; {} policies misspelt, the misspelling found in {found}, not in {}",
        warned.len(),
        misspelt + missed.len(),
        missed.len()
    );
    assert!(warned.is_empty(), "{}", warned.join("\n"));
    assert_eq!(
        found, misspelt,
        "every warning on a misspelt policy names the misspelling"
    );
    for name in &missed {
        eprintln!("not found: {name}");
    }
}
