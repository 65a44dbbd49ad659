use super::*;
use serde_json::json;

fn pod(spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec})
}

/// (document spec, patch spec, expected spec), Pod schema.
#[test]
fn pod_spec_cases() {
    let cases = [
        // containers merge by name; new ones come first (prepend).
        (
            json!({"containers": [{"name": "a", "image": "x"}]}),
            json!({"containers": [{"name": "b", "image": "y"}]}),
            json!({"containers": [{"name": "b", "image": "y"}, {"name": "a", "image": "x"}]}),
        ),
        (
            json!({"containers": [{"name": "a", "image": "x"}]}),
            json!({"containers": [{"name": "a", "imagePullPolicy": "Always"}]}),
            json!({"containers": [{"name": "a", "image": "x", "imagePullPolicy": "Always"}]}),
        ),
        // args has no strategy: replaced.
        (
            json!({"containers": [{"name": "a", "args": ["1", "2"]}]}),
            json!({"containers": [{"name": "a", "args": ["3"]}]}),
            json!({"containers": [{"name": "a", "args": ["3"]}]}),
        ),
        // tolerations are atomic: replaced.
        (
            json!({"tolerations": [{"key": "a"}]}),
            json!({"tolerations": [{"key": "b"}]}),
            json!({"tolerations": [{"key": "b"}]}),
        ),
        // null deletes.
        (
            json!({"hostNetwork": true, "dnsPolicy": "x"}),
            json!({"hostNetwork": null}),
            json!({"dnsPolicy": "x"}),
        ),
        // $patch: delete on a list element.
        (
            json!({"volumes": [{"name": "a", "emptyDir": {}}, {"name": "b", "emptyDir": {}}]}),
            json!({"volumes": [{"name": "a", "$patch": "delete"}]}),
            json!({"volumes": [{"name": "b", "emptyDir": {}}]}),
        ),
        // $patch: replace on a map.
        (
            json!({"securityContext": {"runAsUser": 1, "runAsGroup": 2}}),
            json!({"securityContext": {"$patch": "replace", "runAsNonRoot": true}}),
            json!({"securityContext": {"runAsNonRoot": true}}),
        ),
        // $patch: replace as a list element.
        (
            json!({"containers": [{"name": "a"}, {"name": "b"}]}),
            json!({"containers": [{"$patch": "replace"}, {"name": "c"}]}),
            json!({"containers": [{"name": "c"}]}),
        ),
        // $retainKeys.
        (
            json!({"volumes": [{"name": "a", "emptyDir": {}}]}),
            json!({"volumes": [{"name": "a", "$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/x"}}]}),
            json!({"volumes": [{"name": "a", "hostPath": {"path": "/x"}}]}),
        ),
        // $setElementOrder.
        (
            json!({"containers": [{"name": "a"}, {"name": "b"}]}),
            json!({"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}], "containers": [{"name": "a", "image": "i"}]}),
            json!({"containers": [{"name": "b"}, {"name": "a", "image": "i"}]}),
        ),
    ];
    for (i, (doc, patch, want)) in cases.into_iter().enumerate() {
        let got = merge(&pod(doc), &pod(patch)).unwrap();
        assert_eq!(got["spec"], want, "case {i}");
    }
}

#[test]
fn primitive_merge_lists_are_sets_with_patch_values_first() {
    let doc = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"finalizers": ["a", "b"]}});
    let patch = json!({"metadata": {"finalizers": ["c", "a"], "$deleteFromPrimitiveList/finalizers": ["b"]}});
    let got = merge(&doc, &patch).unwrap();
    assert_eq!(got["metadata"]["finalizers"], json!(["c", "a"]));
}

#[test]
fn unknown_kinds_infer_the_key() {
    let doc = json!({"apiVersion": "example.com/v1", "kind": "W", "items": [{"name": "a", "v": 1}], "ports": [1, 2]});
    let patch = json!({"items": [{"name": "a", "v": 2}, {"name": "b"}], "ports": [3]});
    let got = merge(&doc, &patch).unwrap();
    assert_eq!(got["items"], json!([{"name": "b"}, {"name": "a", "v": 2}]));
    assert_eq!(got["ports"], json!([3]));
}

#[test]
fn mismatched_kinds_are_errors() {
    let doc = pod(json!({"containers": [{"name": "a"}]}));
    let err = merge(&doc, &pod(json!({"containers": {"name": "a"}}))).unwrap_err();
    assert!(err.to_string().contains("wrong node kind"), "{err}");
}
