use super::*;

fn pod() -> Environment {
    Environment::admission(Schema::for_kind("v1", "Pod"))
}

/// The issues of `source` against a Pod, with variables `names` (a
/// string) and `count` (an int) declared.
fn issues(source: &str) -> Vec<String> {
    let mut env = pod();
    env.declare_variable("names", Type::String);
    env.declare_variable("count", Type::Int);
    check_source(source, &env).expect("parses").1
}

#[test]
fn expressions_that_check() {
    for source in [
        "object.spec.containers.all(c, has(c.securityContext) && c.securityContext.privileged == false)",
        "object.spec.containers.map(c, c.image).all(i, i.startsWith('registry.example.com/'))",
        "object.spec.containers.filter(c, c.name == 'app').size() <= 1",
        "size(object.metadata.labels) > 0 && object.metadata.labels.app == 'web'",
        "object.metadata.labels['app'] in ['web', 'api']",
        "object.spec.?hostNetwork.orValue(false) == false",
        "object.spec.securityContext.runAsUser >= 1000 && object.spec.securityContext.runAsUser < 2.5",
        "object.spec.volumes.exists(v, has(v.hostPath))",
        "object.metadata.__namespace__ == 'default'",
        "namespaceObject.metadata.name != 'kube-system'",
        "variables.names.startsWith('x') && variables.count + 1 > 2",
        "cel.bind(cs, object.spec.containers, cs.all(c, c.name != ''))",
        "request.userInfo.username == 'admin' && params.max > object.spec.containers.size()",
        "object.spec.containers[0].ports.all(p, p.containerPort != 22)",
        "object.spec.containers.exists_one(c, c.name == 'x') || dyn(1) == 1.0",
        "[1, 2].map(x, x * 2).all(y, y > 0) && {'a': 1}.all(k, k == 'a')",
        "object.spec.nodeSelector.all(k, object.spec.nodeSelector[k] != '')",
        "object.metadata.annotations.?foo.orValue('') == '' && null == object.spec.hostPID",
        "timestamp('2020-01-01T00:00:00Z') + duration('1h') > timestamp('2020-01-01T00:00:00Z')",
    ] {
        assert_eq!(issues(source), Vec::<String>::new(), "{source}");
    }
}

#[test]
fn mistakes_are_found() {
    for (source, want) in [
        (
            "object.spec.containerz.all(c, true)",
            "undefined field 'containerz' (object.spec.containerz)",
        ),
        (
            "object.spec.containers.all(c, c.securityContext.privilegd == false)",
            "undefined field 'privilegd'",
        ),
        ("has(object.metadata.lables)", "undefined field 'lables'"),
        (
            "object.spec.containers.map(c, c.image).all(i, i.nam == '')",
            "type 'string' does not support field selection (i.nam)",
        ),
        (
            "variables.nonExisting == 1",
            "undefined field 'nonExisting' (variables.nonExisting: no variable",
        ),
        (
            "variables.names == object.spec.hostPID",
            "found no matching overload for '_==_' applied to '(string, bool)'",
        ),
        (
            "object.metadata.name == 1",
            "found no matching overload for '_==_' applied to '(string, int)'",
        ),
        (
            "object.spec.priority + 'x' == ''",
            "found no matching overload for '_+_' applied to '(number, string)'",
        ),
        (
            "object.spec.containers.size() > 'a'",
            "found no matching overload for '_>_' applied to '(int, string)'",
        ),
        (
            "object.metadata.name && true",
            "found no matching overload for '_&&_' applied to '(string, bool)'",
        ),
        (
            "1 == 1.0",
            "found no matching overload for '_==_' applied to '(int, double)'",
        ),
        (
            "size(object.spec.hostPID) == 0",
            "found no matching overload for 'size' applied to '(bool)'",
        ),
        (
            "object.spec.priority.startsWith('a')",
            "found no matching overload for 'startsWith' applied to 'number.(string)'",
        ),
        (
            "object.spec.containers['a'] == null",
            "found no matching overload for '_[_]' applied to '(list(io.k8s.api.core.v1.Container), string)'",
        ),
        (
            "object.spec.hostPID.all(x, true)",
            "expression of type 'bool' cannot be the range of a comprehension",
        ),
        (
            "'a' in object.spec.containers.map(c, c.ports.size())",
            "found no matching overload for '@in' applied to '(string, list(int))'",
        ),
        (
            "object.spec.?hostNetwrk.orValue(false)",
            "undefined field 'hostNetwrk'",
        ),
    ] {
        let got = issues(source);
        assert!(
            got.len() == 1 && got[0].starts_with(want),
            "{source}: want one issue starting {want:?}, got {got:?}"
        );
    }
}

#[test]
fn unknown_types_pass_and_variables_hide_in_order() {
    // Nothing is known about `object`: no field is wrong.
    let env = Environment::admission(None);
    assert!(
        check_source("object.spec.whatever.all(x, x.y == 1)", &env)
            .unwrap()
            .1
            .is_empty()
    );
    // A later declaration hides an earlier one.
    let mut env = pod();
    env.declare_variable("v", Type::String);
    env.declare_variable("v", Type::Int);
    assert!(
        check_source("variables.v + 1 == 2", &env)
            .unwrap()
            .1
            .is_empty()
    );
    // A comprehension variable named `variables` is not the declarations.
    assert!(
        check_source("[{'x': 1}].all(variables, variables.x == 1)", &env)
            .unwrap()
            .1
            .is_empty()
    );
    // The types of what the checker infers.
    let ty = |s: &str| check_source(s, &env).unwrap().0;
    assert_eq!(
        ty("object.spec.containers.map(c, c.name)"),
        Type::List(Box::new(Type::String))
    );
    assert_eq!(
        ty("object.metadata.labels"),
        Type::Map(Box::new(Type::String), Box::new(Type::String))
    );
    assert_eq!(
        ty("object.spec.containers.filter(c, true)[0]"),
        Type::of_schema(
            Schema::for_kind("v1", "Pod")
                .unwrap()
                .field("spec")
                .unwrap()
                .field("containers")
                .unwrap()
                .elements()
                .unwrap()
        )
    );
    assert_eq!(ty("object.spec.containers.exists_one(c, true)"), Type::Bool);
}
