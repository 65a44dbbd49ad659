use super::*;
use serde_json::Value;
use serde_json::json;

/// Parses `text` both ways and checks that the document says what
/// serde_json's `Value` says, walked through every accessor.
fn agrees(text: &str) -> Doc {
    let doc = Doc::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    let value: Value = serde_json::from_str(text).unwrap();
    assert_eq!(doc.root().to_value(), value, "{text}");
    same_walk(doc.root(), &value);
    assert_eq!(Doc::from_value(&value).root().to_value(), value);
    doc
}

fn same_walk(json: Json, value: &Value) {
    match value {
        Value::Object(map) => {
            assert_eq!(json.kind(), Kind::Object(map.len() as u32));
            for (k, v) in map {
                same_walk(json.get(k).unwrap_or_else(|| panic!("key {k}")), v);
            }
            assert_eq!(json.entries().count(), map.len());
            assert!(json.get("no such key in any sample").is_none());
        }
        Value::Array(items) => {
            assert_eq!(json.kind(), Kind::Array(items.len() as u32));
            assert_eq!(json.elements().count(), items.len());
            for (j, v) in json.elements().zip(items) {
                same_walk(j, v);
            }
            assert!(json.get("0").is_none());
        }
        Value::String(s) => assert_eq!(json.as_str(), Some(s.as_str())),
        other => {
            assert_eq!(json.as_str(), None);
            assert_eq!(&json.to_value(), other);
        }
    }
}

#[test]
fn agrees_with_serde_json_on_scalars_and_containers() {
    for text in [
        "null",
        "true",
        "0",
        "-0",
        "-1",
        "9223372036854775807",
        "9223372036854775808",
        "18446744073709551615",
        "-9223372036854775808",
        "1.5",
        "-0.0",
        "1e300",
        "123456789012345678901234567890",
        r#""""#,
        r#""a\"b\\c\u00e9\ud83d\ude00\n""#,
        "[]",
        "{}",
        "[[], {}, [[]], {\"a\": {}}]",
        r#"{"": 1, "a": [1, "x", null, {"b": [true]}], "c": {"d": {"e": "f"}}}"#,
        "  { \"k\" : [ 1 , 2 ] }  ",
    ] {
        agrees(text);
    }
}

#[test]
fn agrees_with_serde_json_on_the_project_reviews() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut seen = 0;
    for dir in ["examples/reviews", "benches/data"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "json") {
                let text = std::fs::read_to_string(&path).unwrap();
                agrees(&text);
                seen += 1;
            }
        }
    }
    assert!(seen >= 4, "only {seen} JSON files found");
}

#[test]
fn a_repeated_key_keeps_its_last_value_as_serde_json_does() {
    // Small maps rescan; large ones sort an index of their keys.
    let small = agrees(r#"{"a": 1, "b": {"x": 1}, "a": [2], "c": 3, "a": "last"}"#);
    assert_eq!(small.root().get("a").unwrap().as_str(), Some("last"));
    assert_eq!(small.root().kind(), Kind::Object(3));
    let mut large = String::from("{");
    for i in 0..40 {
        large.push_str(&format!("\"k{}\": {i}, ", i % 25));
    }
    large.push_str("\"k3\": \"end\"}");
    let doc = agrees(&large);
    assert_eq!(doc.root().kind(), Kind::Object(25));
    assert_eq!(doc.root().get("k3").unwrap().as_str(), Some("end"));
    assert_eq!(doc.root().get("k20").unwrap().to_value(), json!(20));
    assert_eq!(doc.root().get("k24").unwrap().to_value(), json!(24));
}

#[test]
fn lookups_skip_whole_subtrees_and_stop_at_the_object_end() {
    let doc = agrees(
        r#"{"spec": {"containers": [{"name": "a", "spec": 1}], "volumes": []}, "name": "outer"}"#,
    );
    let spec = doc.root().get("spec").unwrap();
    // `name` exists inside a nested container and after `spec`, not in it.
    assert!(spec.get("name").is_none());
    assert_eq!(doc.root().get("name").unwrap().as_str(), Some("outer"));
    let containers = spec.get("containers").unwrap();
    assert!(containers.is_array());
    let first = containers.elements().next().unwrap();
    assert_eq!(first.get("spec").unwrap().to_value(), json!(1));
    assert!(first.get("volumes").is_none());
    // Lookups on non-objects find nothing; iterators of non-containers
    // are empty.
    assert!(first.get("name").unwrap().get("x").is_none());
    assert_eq!(first.elements().count(), 0);
    assert_eq!(containers.entries().count(), 0);
}

#[test]
fn bad_text_is_serde_jsons_error() {
    for text in [
        "",
        "{",
        "[1,]",
        "{\"a\" 1}",
        "nul",
        "[1] x",
        "{1: 2}",
        "\"\\x\"",
    ] {
        let ours = Doc::parse(text).unwrap_err().to_string();
        let theirs = serde_json::from_str::<Value>(text).unwrap_err().to_string();
        assert_eq!(ours, theirs, "{text:?}");
    }
    // Nesting past serde_json's recursion limit is an error, not a crash.
    let deep = "[".repeat(100_000);
    assert!(Doc::parse(&deep).is_err());
    let ok = format!("{}{}", "[".repeat(100), "]".repeat(100));
    agrees(&ok);
}
