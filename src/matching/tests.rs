use super::*;
use serde_json::json;

#[test]
fn kind_selectors() {
    for (sel, gvk, sub, want) in [
        ("Pod", ("", "v1", "Pod"), "", true),
        // kyverno-compat: a selector without a subresource matches no
        // subresource but a Pod's ephemeral containers (CheckKind).
        ("Pod", ("", "v1", "Pod"), "exec", false),
        ("Pod", ("", "v1", "Pod"), "eviction", false),
        ("Pod", ("", "v1", "Pod"), "ephemeralcontainers", true),
        ("*", ("", "v1", "Pod"), "ephemeralcontainers", true),
        ("Deployment", ("apps", "v1", "Deployment"), "scale", false),
        ("*", ("apps", "v1", "Deployment"), "scale", false),
        ("*/*", ("apps", "v1", "Deployment"), "scale", true),
        ("Pod/*", ("", "v1", "Pod"), "exec", true),
        ("Pod/*", ("", "v1", "Pod"), "", true),
        ("*/scale", ("apps", "v1", "Deployment"), "scale", true),
        ("*/scale", ("apps", "v1", "Deployment"), "", false),
        ("Pod/exec", ("", "v1", "Pod"), "exec", true),
        ("Pod/exec", ("", "v1", "Pod"), "", false),
        ("Pod.status", ("", "v1", "Pod"), "status", true),
        ("v1/Pod", ("", "v1", "Pod"), "", true),
        ("v2/Pod", ("", "v1", "Pod"), "", false),
        ("apps/v1/Deployment", ("apps", "v1", "Deployment"), "", true),
        (
            "apps/v1/Deployment/scale",
            ("apps", "v1", "Deployment"),
            "scale",
            true,
        ),
        ("*/Deployment", ("apps", "v1", "Deployment"), "", true),
        (
            "networking.k8s.io/v1/Ingress",
            ("networking.k8s.io", "v1", "Ingress"),
            "",
            true,
        ),
        ("*", ("apps", "v1", "Deployment"), "", true),
        ("Deploy*", ("apps", "v1", "Deployment"), "", true),
        ("Service", ("", "v1", "Pod"), "", false),
    ] {
        let k = KindSelector::parse(sel).unwrap();
        assert_eq!(
            k.matches(gvk.0, gvk.1, gvk.2, sub),
            want,
            "{sel} vs {gvk:?}/{sub}"
        );
    }
}

fn input<'a>(labels: &'a Value, user: &'a UserInfo) -> MatchInput<'a> {
    MatchInput {
        group: "",
        version: "v1",
        kind: "Pod",
        kind_hash: crate::kinds::kind_hash("Pod"),
        subresource: "",
        operation: "CREATE",
        name: "web-1",
        generate_name: "",
        namespace: "prod",
        labels: Some(labels.into()),
        annotations: None,
        namespace_labels: None,
        user,
    }
}

fn compile(v: serde_json::Value) -> CompiledMatch {
    CompiledMatch::compile(&serde_json::from_value(v).unwrap()).unwrap()
}

#[test]
fn resource_filters() {
    let labels = json!({"app": "web"});
    let user = UserInfo {
        username: "system:serviceaccount:ci:deployer".into(),
        ..Default::default()
    };
    let i = input(&labels, &user);
    for (m, want) in [
        (json!({"any": [{"resources": {"kinds": ["Pod"]}}]}), true),
        (
            json!({"any": [{"resources": {"kinds": ["Service"]}}, {"resources": {"kinds": ["Pod"]}}]}),
            true,
        ),
        (
            json!({"all": [{"resources": {"kinds": ["Service"]}}, {"resources": {"kinds": ["Pod"]}}]}),
            false,
        ),
        (
            json!({"resources": {"kinds": ["Pod"], "names": ["web-*"]}}),
            true,
        ),
        (
            json!({"resources": {"kinds": ["Pod"], "namespaces": ["dev"]}}),
            false,
        ),
        (
            json!({"any": [{"resources": {"kinds": ["Pod"], "operations": ["UPDATE"]}}]}),
            false,
        ),
        (
            json!({"any": [{"resources": {"kinds": ["Pod"], "selector": {"matchLabels": {"app": "web"}}}}]}),
            true,
        ),
        (
            json!({"any": [{"resources": {"kinds": ["Pod"], "selector": {"matchLabels": {"app": "w*"}}}}]}),
            true,
        ),
        (
            json!({"any": [{"resources": {"kinds": ["Pod"], "selector": {"matchLabels": {"*": "*"}}}}]}),
            true,
        ),
        (
            json!({"any": [{"resources": {"kinds": ["Pod"], "selector": {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}}}]}),
            false,
        ),
        (
            json!({"any": [{"subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": "ci"}]}]}),
            true,
        ),
        (
            json!({"any": [{"subjects": [{"kind": "User", "name": "alice"}]}]}),
            false,
        ),
        (json!({"any": [{"resources": {}}]}), false),
        (json!({}), false),
    ] {
        assert_eq!(compile(m.clone()).matches(&i), want, "{m}");
    }
    assert!(!compile(json!({})).excludes(&i));
}

/// The shortcut a filter takes by its shape decides as the general check does.
#[test]
fn filter_shapes_agree_with_the_general_check() {
    let labels = json!({"app": "web"});
    let user = UserInfo {
        username: "alice".into(),
        ..Default::default()
    };
    let requests = [
        ("", "v1", "Pod", "", "CREATE"),
        ("", "v1", "Pod", "", "DELETE"),
        ("", "v1", "Pod", "exec", "CONNECT"),
        ("apps", "v1", "Deployment", "", "UPDATE"),
        ("", "v1", "Service", "", "CREATE"),
    ];
    for (filter, shape) in [
        (
            json!({"resources": {"kinds": ["Pod"]}}),
            FilterShape::KindsOnly,
        ),
        (
            json!({"resources": {"kinds": ["Pod/exec", "apps/v1/Deploy*"]}}),
            FilterShape::KindsOnly,
        ),
        (
            json!({"resources": {"kinds": ["*"]}}),
            FilterShape::KindsOnly,
        ),
        (
            json!({"resources": {"kinds": ["Pod"], "operations": ["CREATE"]}}),
            FilterShape::KindsAndOperations,
        ),
        (
            json!({"resources": {"kinds": ["Pod/exec", "Service"], "operations": ["CONNECT", "CREATE"]}}),
            FilterShape::KindsAndOperations,
        ),
        // Without kinds, the operations alone decide.
        (
            json!({"resources": {"operations": ["DELETE"]}}),
            FilterShape::General,
        ),
        (
            json!({"resources": {"kinds": ["Pod"], "operations": ["CREATE"], "namespaces": ["web"]}}),
            FilterShape::General,
        ),
        (
            json!({"resources": {"kinds": ["Pod"]}, "subjects": [{"kind": "User", "name": "alice"}]}),
            FilterShape::General,
        ),
        (
            json!({"resources": {"names": ["web-*"]}}),
            FilterShape::General,
        ),
        (json!({"resources": {}}), FilterShape::Never),
        (json!({}), FilterShape::Never),
    ] {
        let f = CompiledFilter::compile(&serde_json::from_value(filter.clone()).unwrap()).unwrap();
        assert_eq!(f.shape, shape, "{filter}");
        let general = CompiledFilter {
            shape: FilterShape::General,
            ..f.clone()
        };
        for (group, version, kind, subresource, operation) in requests {
            let i = MatchInput {
                group,
                version,
                kind,
                kind_hash: crate::kinds::kind_hash(kind),
                subresource,
                operation,
                ..input(&labels, &user)
            };
            // kyverno-compat: an empty filter never matches, whatever the request.
            let want = shape != FilterShape::Never && general.matches(&i);
            assert_eq!(
                f.matches(&i),
                want,
                "{filter} on {operation} {kind}/{subresource}"
            );
        }
    }
}
