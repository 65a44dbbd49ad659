use super::values::{cel_to_json, json_to_cel};
use super::*;
use serde_json::json;

fn eval(expr: &str, object: serde_json::Value) -> Result<serde_json::Value, CelError> {
    let mut vars = Activation::new();
    vars.set("object", json_to_cel(&object)).unwrap();
    let v = Program::compile(expr)?.eval(&vars, &NoLookups)?;
    Ok(cel_to_json(&v).unwrap())
}

#[test]
fn json_integers_compare_as_int() {
    assert_eq!(
        eval(
            "object.a == 3 && object.a > 2 && object.b > 1",
            json!({"a": 3, "b": 1.5})
        ),
        Ok(json!(true))
    );
}

#[test]
fn optional_selection_and_index() {
    let pod =
        json!({"spec": {"containers": [{"name": "a"}]}, "metadata": {"labels": {"app": "x"}}});
    let cases = [
        ("object.spec.?foo.orValue(1)", json!(1)),
        ("object.spec.?foo.?bar.orValue(2)", json!(2)),
        ("object.metadata.?labels[?'app'].orValue('')", json!("x")),
        ("object.metadata.?labels[?'nope'].hasValue()", json!(false)),
        (
            "object.spec.containers.all(c, c.?securityContext.?runAsUser.orValue(1) > 0)",
            json!(true),
        ),
        ("object.spec.?containers[?0].?name.orValue('')", json!("a")),
    ];
    for (expr, want) in cases {
        assert_eq!(eval(expr, pod.clone()), Ok(want), "{expr}");
    }
}

#[test]
fn struct_literals_are_maps() {
    assert_eq!(
        eval("Object{spec: Object.spec{replicas: 2}}", json!({})),
        Ok(json!({"spec": {"replicas": 2}}))
    );
    assert_eq!(
        eval("JSONPatch{op: 'add', path: '/a', value: dyn(1)}", json!({})),
        Ok(json!({"op": "add", "path": "/a", "value": 1}))
    );
}

#[test]
fn kubernetes_libraries_are_available() {
    for expr in [
        "quantity('1Gi').isGreaterThan(quantity('500Mi'))",
        "'a,b'.split(',').size() == 2",
        "jsonpatch.escapeKey('a/b') == 'a~1b'",
        "isCIDR('10.0.0.0/8')",
        "url('https://a/b').getHost() == 'a'",
        "semver('1.2.3').isLessThan(semver('2.0.0'))",
        "parseServiceAccount('system:serviceaccount:ns:sa').Name == 'sa'",
    ] {
        assert_eq!(eval(expr, json!({})), Ok(json!(true)), "{expr}");
    }
}

#[test]
fn missing_field_is_an_error() {
    let err = eval("object.spec.nope == 1", json!({"spec": {}})).unwrap_err();
    assert!(err.to_string().contains("nope"), "{err}");
}

#[test]
fn syntax_errors_fail_compilation() {
    assert!(matches!(
        Program::compile("object.spec.("),
        Err(CelError::Compile(_))
    ));
}

#[test]
fn cost_limit_stops_runaway_comprehensions() {
    let list: Vec<i64> = (0..2000).collect();
    let expr = "object.l.all(a, object.l.all(b, a + b >= 0))";
    assert_eq!(eval(expr, json!({"l": list})), Err(CelError::CostLimit));
    assert_eq!(eval(expr, json!({"l": [1, 2, 3]})), Ok(json!(true)));
}

struct OneConfigMap;

impl Lookups for OneConfigMap {
    fn lookup(&self, lookup: &Lookup) -> Result<serde_json::Value, String> {
        match lookup {
            Lookup::Resource { name, .. } if name == "cm" => Ok(json!({"data": {"k": "v"}})),
            other => Err(format!("not found: {other:?}")),
        }
    }
}

#[test]
fn lookups_are_answered_through_the_caller() {
    let p = Program::compile("resource.Get('v1', 'configmaps', 'default', 'cm').data.k == 'v'")
        .unwrap();
    assert!(p.eval_bool(&Activation::new(), &OneConfigMap).unwrap());
    let p = Program::compile("resource.Get('v1', 'configmaps', 'default', 'other')").unwrap();
    let err = p.eval(&Activation::new(), &OneConfigMap).unwrap_err();
    assert!(err.to_string().contains("not found"), "{err}");
}

#[test]
fn selection_on_an_optional_stays_optional() {
    let c = json!({"securityContext": {"allowPrivilegeEscalation": false}});
    assert_eq!(
        eval(
            "object.?securityContext.allowPrivilegeEscalation.orValue(true)",
            c
        ),
        Ok(json!(false))
    );
    assert_eq!(
        eval(
            "object.?securityContext.allowPrivilegeEscalation.orValue(true)",
            json!({})
        ),
        Ok(json!(true))
    );
    assert_eq!(
        eval("object.?a.b['c'].orValue(1)", json!({"a": {"b": {"c": 2}}})),
        Ok(json!(2))
    );
}

#[test]
fn image_values_expose_their_parts() {
    let eval = |src: &str| {
        Program::compile(src)
            .unwrap()
            .eval(&Activation::new(), &NoLookups)
            .map(|v| cel_to_json(&v).unwrap())
    };
    assert_eq!(
        eval("image('corp.reg.com/busybox:1.28').registry()").unwrap(),
        json!("corp.reg.com")
    );
    assert_eq!(
        eval("[image('nginx').repository(), image('nginx').identifier()]").unwrap(),
        json!(["library/nginx", "latest"])
    );
    assert_eq!(
        eval("image('a/b@sha256:6aefddb645ee6963afd681b1845c661d0ea4c3b20ab9db86d9e753b203d385f2').containsDigest()").unwrap(),
        json!(true)
    );
    assert_eq!(eval("isImage('Bad:@')").unwrap(), json!(false));
    assert!(eval("image('Bad:@')").is_err());
}

#[test]
fn unknown_functions_are_errors_inside_macros() {
    let run = |src: &str| {
        Program::compile(src)
            .unwrap()
            .eval(&Activation::new(), &NoLookups)
    };
    assert!(run("noSuchFunction(1) == 1").is_err());
    assert!(run("[1].exists(x, noSuchFunction(x) == 1)").is_err());
    assert!(run("[1].exists(x, noSuchFunction(x) == 1) ? [1] : []").is_err());
}

/// `string()` of a bool, as the CEL spec converts it (Kyverno's
/// test-context-apicall-vpol maps `string(p.?spot.orValue(false))`).
#[test]
fn string_converts_bools() {
    let o = json!({"priorities": [{"spot": true}, {}]});
    assert_eq!(
        eval(
            "object.priorities.map(p, string(p.?spot.orValue(false)))",
            o
        ),
        Ok(json!(["true", "false"]))
    );
    assert_eq!(eval("string(3) + string('x')", json!({})), Ok(json!("3x")));
}

/// `type()` compared with type names, and `cel.bind` (Kyverno's
/// test-context-*-dpol conditions use both).
#[test]
fn type_values_and_bind() {
    let o = json!({"a": {"b": [1, 2]}, "n": null, "s": "x"});
    for (e, want) in [
        ("type(object.n) == type(null)", true),
        ("type(object.a) != type(null)", true),
        ("type(object.a) == map && type(object.a.b) == list", true),
        (
            "type(object.s) == string && type(1) == int && type(true) == bool",
            true,
        ),
        ("type(object.s) == type(1)", false),
        ("type(type(1)) == type", true),
        (
            "cel.bind(b, object.a.b, b.exists(x, x == 2) && size(b) == 2)",
            true,
        ),
        ("cel.bind(x, 1, cel.bind(y, x + 1, y == 2))", true),
        // A type name bound as a variable stays a variable.
        ("['a', 'b'].exists(type, type == 'b')", true),
    ] {
        assert_eq!(eval(e, o.clone()), Ok(json!(want)), "{e}");
    }
}

#[test]
fn logical_operators_report_the_left_error_as_cel_go() {
    let object = json!({"a": true, "f": false, "s": "x"});
    let error = |expr: &str| eval(expr, object.clone()).unwrap_err().to_string();
    // Both operands fail: the left one's error, in both evaluators.
    for expr in [
        "object.x > 0 && object.y > 0",
        "object.x > 0 || object.y > 0",
        "(object.x > 0 && object.y > 0) || object.z > 0",
    ] {
        let err = error(expr);
        assert!(err.contains("no such key: x"), "{expr}: {err}");
        let program = Program::compile(expr).unwrap().interpreted_only();
        let mut vars = Activation::new();
        vars.set("object", json_to_cel(&object)).unwrap();
        let interpreted = program.eval(&vars, &NoLookups).unwrap_err().to_string();
        assert!(
            interpreted.contains("no such key: x"),
            "{expr}: {interpreted}"
        );
    }
    // The decisive value on either side wins over an error on the other.
    assert_eq!(
        eval("object.x > 0 && object.f", object.clone()),
        Ok(json!(false))
    );
    assert_eq!(
        eval("object.f && object.x > 0", object.clone()),
        Ok(json!(false))
    );
    assert_eq!(
        eval("object.x > 0 || object.a", object.clone()),
        Ok(json!(true))
    );
    // A non-bool operand is no such overload, unless the left one failed.
    assert!(error("object.s && object.a").contains("no such overload"));
    assert!(error("object.a && object.x > 0").contains("no such key: x"));
    assert!(error("object.x > 0 && object.s").contains("no such key: x"));
}

#[test]
fn two_variable_comprehensions_over_objects() {
    let pod = json!({
        "metadata": {"labels": {"app": "web", "tier": "front"}},
        "spec": {"containers": [{"name": "a", "ports": [{"containerPort": 80}]},
                                {"name": "b", "ports": [{"containerPort": 8080}]}]},
    });
    let cases = [
        (
            "object.metadata.labels.all(k, v, k.size() > 2 && v != '')",
            json!(true),
        ),
        (
            "object.metadata.labels.exists(k, v, k == 'tier' && v == 'back')",
            json!(false),
        ),
        (
            "object.spec.containers.existsOne(i, c, i == 1 && c.name == 'b')",
            json!(true),
        ),
        (
            "object.spec.containers.transformList(i, c, c.name + string(i))",
            json!(["a0", "b1"]),
        ),
        (
            "object.spec.containers.transformList(i, c, i > 0, c.name)",
            json!(["b"]),
        ),
        (
            "object.metadata.labels.transformMap(k, v, k != 'tier', v + '!')",
            json!({"app": "web!"}),
        ),
        // Nested: the inner body reads the outer pair; a name that is
        // also a type name is a variable where it is bound.
        (
            "object.spec.containers.all(i, c, c.ports.all(j, int, i + j + int.containerPort > 0))",
            json!(true),
        ),
    ];
    for (expr, want) in cases {
        assert_eq!(eval(expr, pod.clone()), Ok(want), "{expr}");
    }
    // Not a list or a map: cel-go's error.
    let error = eval("object.metadata.all(k, v, true) && 1.all(i, v, true)", pod).unwrap_err();
    assert!(
        error.to_string().contains("expected iterable type"),
        "{error}"
    );
}

#[test]
fn backquoted_field_names() {
    let object = json!({"metadata": {"annotations": {"app.kubernetes.io/name": "web"}}});
    for (expr, want) in [
        (
            "object.metadata.annotations.`app.kubernetes.io/name`",
            json!("web"),
        ),
        (
            "has(object.metadata.annotations.`app.kubernetes.io/name`)",
            json!(true),
        ),
        (
            "has(object.metadata.annotations.`app.kubernetes.io/part-of`)",
            json!(false),
        ),
        (
            "object.metadata.annotations.?`x-y`.orValue('none')",
            json!("none"),
        ),
    ] {
        assert_eq!(eval(expr, object.clone()), Ok(want), "{expr}");
    }
}
