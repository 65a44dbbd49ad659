use super::*;
use serde_json::json;

fn pod(spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec})
}

/// (document spec, patch spec, expected spec), Pod schema.
#[test]
fn pod_spec_cases() {
    let cases = [
        // containers merge by name; the patch's come first (prepend).
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
fn unknown_kinds_replace_their_lists() {
    // Kyverno's CLI on this custom resource: both lists replaced, though
    // `items` elements carry kyaml's associative key `name`.
    let doc = json!({"apiVersion": "example.com/v1", "kind": "W", "items": [{"name": "a", "v": 1}, {"name": "c"}], "ports": [1, 2]});
    let patch = json!({"items": [{"name": "a", "v": 2}, {"name": "b"}], "ports": [3]});
    let got = merge(&doc, &patch).unwrap();
    assert_eq!(got["items"], json!([{"name": "a", "v": 2}, {"name": "b"}]));
    assert_eq!(got["ports"], json!([3]));
}

#[test]
fn mismatched_kinds_are_errors() {
    let doc = pod(json!({"containers": [{"name": "a"}]}));
    let err = merge(&doc, &pod(json!({"containers": {"name": "a"}}))).unwrap_err();
    assert!(err.to_string().contains("wrong node kind"), "{err}");
}

#[test]
fn merged_lists_take_the_patch_order_then_the_documents_others() {
    // Kyverno v1.19.1's CLI on the same Pod and patch: containers
    // [c1, new1, c0, c2], c1's env [C, D, A, B], finalizers [b, c, a].
    let doc = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"finalizers": ["a", "b"]},
        "spec": {"containers": [
            {"name": "c0", "image": "y"},
            {"name": "c1", "image": "z", "env": [
                {"name": "A", "value": "a"}, {"name": "B", "value": "b"}, {"name": "C", "value": "c"}]},
            {"name": "c2", "image": "w"}]}});
    let patch = json!({
        "metadata": {"finalizers": ["b", "c"]},
        "spec": {"containers": [
            {"name": "c1", "env": [{"name": "C", "value": "c2"}, {"name": "D", "value": "d"}]},
            {"name": "new1", "image": "x"},
            {"name": "c0", "image": "y2"}]}});
    let got = merge(&doc, &patch).unwrap();
    assert_eq!(got["metadata"]["finalizers"], json!(["b", "c", "a"]));
    assert_eq!(
        got["spec"]["containers"],
        json!([
            {"name": "c1", "image": "z", "env": [
                {"name": "C", "value": "c2"}, {"name": "D", "value": "d"},
                {"name": "A", "value": "a"}, {"name": "B", "value": "b"}]},
            {"name": "new1", "image": "x"},
            {"name": "c0", "image": "y2"},
            {"name": "c2", "image": "w"}])
    );
    // A key repeated in the document keeps its first element only.
    let doc = pod(json!({"initContainers": [
        {"name": "k", "image": "a"}, {"name": "b", "image": "b"}, {"name": "k", "image": "c"}]}));
    let got = merge(
        &doc,
        &pod(json!({"initContainers": [{"name": "k", "image": "d"}]})),
    )
    .unwrap();
    assert_eq!(
        got["spec"]["initContainers"],
        json!([{"name": "k", "image": "d"}, {"name": "b", "image": "b"}])
    );
}
