use super::*;
use crate::json_doc::Doc;
use serde_json::{Map, json};

use crate::test_random::Gen;

impl Gen {
    fn key(&mut self) -> &'static str {
        ["a", "b", "c", "spec", "x"][self.next(5) as usize]
    }

    fn scalar(&mut self) -> Value {
        match self.next(9) {
            0 => json!("*"),
            1 => json!("?*"),
            2 => json!("null"),
            3 => json!(null),
            4 => json!(true),
            5 => json!(3),
            6 => json!(">2"),
            7 => json!("v1 | v2"),
            _ => json!(""),
        }
    }

    fn value(&mut self, depth: u32) -> Value {
        match self.next(if depth == 0 { 6 } else { 9 }) {
            0 => json!(null),
            1 => json!(true),
            2 => json!(3),
            3 => json!("v1"),
            4 => json!(""),
            5 => json!(false),
            6 | 7 => {
                let mut m = Map::new();
                for _ in 0..self.next(4) {
                    m.insert(self.key().to_string(), self.value(depth - 1));
                }
                Value::Object(m)
            }
            _ => Value::Array((0..self.next(3)).map(|_| self.value(depth - 1)).collect()),
        }
    }

    fn pattern(&mut self, depth: u32) -> Value {
        match self.next(if depth == 0 { 1 } else { 6 }) {
            0 | 1 => self.scalar(),
            2..=4 => {
                let mut m = Map::new();
                for _ in 0..1 + self.next(3) {
                    let key = self.key();
                    let key = match self.next(8) {
                        0 | 1 => format!("=({key})"),
                        2 => format!("X({key})"),
                        // Outside the subset: left to the pattern's own walk.
                        3 if self.next(4) == 0 => format!("({key})"),
                        _ => key.to_string(),
                    };
                    m.insert(key, self.pattern(depth - 1));
                }
                Value::Object(m)
            }
            _ => match self.next(4) {
                0 => json!([self.scalar()]),
                _ => json!([self.pattern(depth - 1)]),
            },
        }
    }
}

#[test]
fn agrees_with_each_pattern_alone() {
    let mut g = Gen(7);
    let (mut joined, mut passed, mut failed) = (0, 0, 0);
    for _ in 0..300 {
        let patterns: Vec<CompiledPattern> = (0..6)
            .map(|_| CompiledPattern::compile(&g.pattern(3)))
            .collect();
        let mut set = PatternSet::new();
        let ids: Vec<Option<u32>> = patterns.iter().map(|p| set.add(p)).collect();
        joined += ids.iter().flatten().count();
        for _ in 0..20 {
            let resource = g.value(4);
            let doc = Doc::parse(&resource.to_string()).unwrap();
            let on_value = set.passing(&resource);
            let on_doc = set.passing(doc.root());
            assert_eq!(on_value, on_doc);
            for (p, id) in patterns.iter().zip(&ids) {
                let Some(id) = id else { continue };
                let alone = p.validate(&resource);
                let passes = alone.is_ok();
                assert_eq!(on_value.passes(*id), passes, "pattern {p:?} on {resource}");
                // Where it fails, the set names the path the pattern's
                // own walk stops at.
                assert_eq!(
                    set.failure_path(&on_value, *id).as_deref(),
                    alone.as_ref().err().map(|e| e.path.as_str()),
                    "pattern {p:?} on {resource}"
                );
                if passes {
                    passed += 1;
                } else {
                    failed += 1;
                }
            }
        }
    }
    // The generator reaches both sides of the subset.
    assert!(joined > 600 && joined < 1800, "{joined} of 1800 joined");
    // ... and both outcomes.
    assert!(
        passed > 1000 && failed > 1000,
        "{passed} passed, {failed} failed"
    );
    eprintln!("{joined} joined; {passed} passed, {failed} failed");
}

#[test]
fn leaves_out_what_is_not_a_conjunction() {
    let mut set = PatternSet::new();
    for pattern in [
        json!({"(a)": 1, "b": 2}),
        json!({"<(a)": 1}),
        json!({"^(a)": [{"b": 1}]}),
        json!({"a": []}),
        json!({"a": [[1], [2]]}),
    ] {
        assert_eq!(
            set.add(&CompiledPattern::compile(&pattern)),
            None,
            "{pattern}"
        );
    }
    assert!(set.is_empty());
    let id = set
        .add(&CompiledPattern::compile(
            &json!({"=(a)": {"X(b)": 1}, "c": "*"}),
        ))
        .unwrap();
    assert!(set.passing(&json!({"c": 1})).passes(id));
    assert!(!set.passing(&json!({"c": null})).passes(id));
    assert!(!set.passing(&json!({"a": {"b": null}, "c": 1})).passes(id));
    assert!(set.passing(&json!({"a": {"d": 0}, "c": 1})).passes(id));
}

/// Wildcard keys of `metadata.labels` and `metadata.annotations` join
/// a set, and each resource key one matches is checked in turn, as the
/// pattern's own walk expands it: the same verdicts and failure paths
/// (a matched key in the path, or the wildcard's own text where it
/// matched none), on random patterns and resources.
#[test]
fn wildcard_keys_agree_with_each_pattern_alone() {
    const WILD: [&str; 7] = ["ap*", "a?p*", "*", "b*", "a*", "q*", "app"];
    const KEYS: [&str; 7] = ["app", "apple", "apx", "b", "ba", "a*", "x"];
    let mut g = Gen(13);
    let pick = |g: &mut Gen, from: &[&'static str]| from[g.next(from.len() as u64) as usize];
    let (mut passed, mut failed, mut at_matched_keys) = (0, 0, 0);
    for _ in 0..400 {
        let mut set = PatternSet::new();
        let mut patterns = Vec::new();
        for _ in 0..5 {
            let mut checks = Map::new();
            for _ in 0..1 + g.next(3) {
                let key = pick(&mut g, &WILD);
                let key = match g.next(4) {
                    0 => format!("=({key})"),
                    1 => format!("X({key})"),
                    _ => key.to_string(),
                };
                let value = match g.next(3) {
                    0 => json!("v*"),
                    _ => g.scalar(),
                };
                checks.insert(key, value);
            }
            let map = pick(
                &mut g,
                &["labels", "annotations", "=(labels)", "=(annotations)"],
            );
            let metadata = pick(&mut g, &["metadata", "=(metadata)"]);
            let pattern = CompiledPattern::compile(&json!({metadata: {map: checks}}));
            // A key given twice (`=(a*)` and `X(a*)`) stays out.
            if let Some(id) = set.add(&pattern) {
                patterns.push((pattern, id));
            }
        }
        for _ in 0..10 {
            let mut metadata = Map::new();
            for map in ["labels", "annotations"] {
                if g.next(4) == 0 {
                    continue;
                }
                let mut entries = Map::new();
                for _ in 0..g.next(4) {
                    let value = [json!("v1"), json!("x"), json!(null), json!(3), json!("")]
                        [g.next(5) as usize]
                        .clone();
                    entries.insert(pick(&mut g, &KEYS).to_string(), value);
                }
                metadata.insert(map.to_string(), Value::Object(entries));
            }
            let resource = json!({"metadata": metadata});
            let doc = Doc::parse(&resource.to_string()).unwrap();
            let on_value = set.passing(&resource);
            assert_eq!(on_value, set.passing(doc.root()));
            for (p, id) in &patterns {
                let alone = p.validate(&resource);
                assert_eq!(on_value.passes(*id), alone.is_ok(), "{p:?} on {resource}");
                let want = alone.as_ref().err().map(|e| e.path.as_str());
                assert_eq!(
                    set.failure_path(&on_value, *id).as_deref(),
                    want,
                    "{p:?} on {resource}"
                );
                if let Some(path) = want {
                    failed += 1;
                    at_matched_keys +=
                        usize::from(KEYS.iter().any(|k| path.ends_with(&format!("/{k}/"))));
                } else {
                    passed += 1;
                }
            }
        }
    }
    eprintln!("{passed} passed, {failed} failed, {at_matched_keys} at matched keys");
    assert!(
        passed > 2_000 && failed > 2_000 && at_matched_keys > 500,
        "{passed} passed, {failed} failed, {at_matched_keys} at matched keys"
    );
}

/// Indexes of one digit are written without their text, longer ones
/// with it; either way the length given ahead is the length written.
#[test]
fn failure_paths_name_indexes_of_any_width() {
    let pattern = CompiledPattern::compile(&json!({"spec": {"containers": [{"X(a)": 1}]}}));
    let mut set = PatternSet::new();
    let id = set.add(&pattern).unwrap();
    for failing in [0, 7, 10, 123] {
        let containers: Vec<Value> = (0..=failing)
            .map(|i| {
                if i == failing {
                    json!({"a": 1})
                } else {
                    json!({})
                }
            })
            .collect();
        let resource = json!({"spec": {"containers": containers}});
        let passing = set.passing(&resource);
        let want = format!("/spec/containers/{failing}/a/");
        assert_eq!(
            pattern.validate(&resource).err().map(|e| e.path.clone()),
            Some(want.clone())
        );
        let failure = set.failure(&passing, id).unwrap();
        assert_eq!(failure.len(), want.len(), "{want}");
        assert_eq!(set.failure_path(&passing, id), Some(want));
    }
}
