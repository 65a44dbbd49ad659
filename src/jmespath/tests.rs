use super::*;
use serde_json::json;

fn run(expr: &str, data: &Value) -> Result<Value, JmesError> {
    Expression::parse(expr)?
        .resolve(data)
        .map(|v| v.into_owned())
}

#[test]
fn standard_expressions() {
    let data = json!({
        "a": {"b": {"c": 1}},
        "list": [1, 2, 3, 4],
        "people": [{"name": "a", "age": 30}, {"name": "b", "age": 20}, {"name": "c"}],
        "nested": [[1, 2], [3, [4]]],
        "obj": {"x": {"v": 1}, "y": {"v": 2}},
        "empty": "",
        "spec": {"containers": [{"name": "c1", "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}, {"name": "c2"}]}
    });
    for (expr, want) in [
        ("a.b.c", json!(1)),
        ("list[0]", json!(1)),
        ("list[-1]", json!(4)),
        ("list[1:3]", json!([2, 3])),
        ("list[::-1]", json!([4, 3, 2, 1])),
        ("people[*].name", json!(["a", "b", "c"])),
        ("people[?age > `25`].name", json!(["a"])),
        ("people[?age].name", json!(["a", "b"])),
        ("nested[]", json!([1, 2, 3, [4]])),
        // Flatten over borrowed, computed and scalar elements; nulls dropped.
        (
            "[nested, list, `[5]`, a.b.c, missing][]",
            json!([[1, 2], [3, [4]], 1, 2, 3, 4, 5, 1]),
        ),
        ("[missing, nested][][]", json!([1, 2, 3, [4]])),
        ("people[].age", json!([30, 20])),
        ("obj.*.v", json!([1, 2])),
        ("empty || 'default'", json!("default")),
        ("a.b.c == `1`", json!(true)),
        ("!empty", json!(true)),
        ("{n: a.b.c, l: length(list)}", json!({"n": 1, "l": 4})),
        ("[a.b.c, list[0]]", json!([1, 1])),
        ("length(people)", json!(3)),
        ("sort_by(people[?age], &age)[0].name", json!("b")),
        ("max_by(people[?age], &age).name", json!("a")),
        ("map(&name, people)", json!(["a", "b", "c"])),
        (
            "spec.[initContainers, containers][].securityContext.capabilities.add[]",
            json!(["NET_ADMIN"]),
        ),
        ("list | [0]", json!(1)),
        ("`\"lit\"`", json!("lit")),
        ("'raw'", json!("raw")),
        ("contains(list, `2`)", json!(true)),
        ("join(',', people[*].name)", json!("a,b,c")),
        ("not_null(missing_thing || `null`, `5`)", json!(5)),
        // kyverno-compat: a projection element whose key is missing is
        // dropped, and the function after it is not called (`kyverno jp
        // query` gives ["a"]).
        ("`[{\"r\": {\"a\": 1}}, {}]`[].r.keys(@)[]", json!(["a"])),
        // Field paths that leave the objects part way: null.
        ("a.b.c.d || 'none'", json!("none")),
        ("a.x.c || 'none'", json!("none")),
        ("empty.x || 'none'", json!("none")),
        ("spec.containers.name || 'none'", json!("none")),
        (
            "spec.containers[0].securityContext.capabilities.add",
            json!(["NET_ADMIN"]),
        ),
        // Functions that read only a value's shape (answered on a
        // document without turning the value into JSON).
        ("keys(obj)", json!(["x", "y"])),
        (
            "spec.containers[].keys(@)[]",
            json!(["name", "securityContext", "name"]),
        ),
        ("length(people)", json!(3)),
        ("length(obj)", json!(2)),
        ("length(empty)", json!(0)),
        ("length(people[0].name)", json!(1)),
    ] {
        assert_eq!(run(expr, &data).unwrap(), want, "{expr}");
        // The same on the data as the webhook holds a request's object.
        let doc = crate::json_doc::Doc::parse(&data.to_string()).unwrap();
        let on_doc = Expression::parse(expr)
            .unwrap()
            .resolve_val(Val::Doc(doc.root()))
            .map(Val::into_owned);
        assert_eq!(on_doc.unwrap(), want, "on a document: {expr}");
    }
}

/// Errors in projections as Kyverno's JMESPath (its go-jmespath fork, checked
/// with `kyverno jp query`): a function's type error in a projection is the
/// expression's error; a flatten whose left side fails is null.
#[test]
fn projection_errors_as_kyverno() {
    let data = json!({"people": [{"name": "a", "age": 1}], "names": ["x"]});
    assert!(matches!(
        run("people[].keys(age)", &data),
        Err(JmesError::Runtime(_))
    ));
    assert_eq!(run("names[].keys(@)[]", &data).unwrap(), Value::Null);
}

#[test]
fn missing_keys_are_errors_only_for_plain_paths() {
    let data = json!({"request": {"object": {"metadata": {"labels": {}}}}});
    assert_eq!(
        run("request.object.metadata.labels.app", &data),
        Err(JmesError::NotFound("app".into()))
    );
    assert_eq!(
        run("request.object.metadata.labels.app || ''", &data).unwrap(),
        json!("")
    );
    assert_eq!(
        run("request.object.spec.containers[].name", &data).unwrap(),
        Value::Null
    );
}

#[test]
fn kyverno_functions() {
    let data = json!({"labels": {"app": "x", "tier": "web"}});
    for (expr, want) in [
        ("compare('a', 'b')", json!(-1)),
        ("equal_fold('Go', 'GO')", json!(true)),
        ("replace('aaa', 'a', 'b', `2`)", json!("bba")),
        ("replace_all('aaa', 'a', 'b')", json!("bbb")),
        ("to_upper('abc')", json!("ABC")),
        ("trim('--a--', '-')", json!("a")),
        ("trim_prefix('prefix-a', 'prefix-')", json!("a")),
        ("split('a,b', ',')", json!(["a", "b"])),
        ("regex_match('^a.c$', 'abc')", json!(true)),
        (
            "regex_replace_all('([a-z])-(\\d)', 'a-1 b-2', '$2$1')",
            json!("1a 2b"),
        ),
        (
            "regex_replace_all_literal('a', 'banana', '$1')",
            json!("b$1n$1n$1"),
        ),
        ("pattern_match('a*', 'abc')", json!(true)),
        ("label_match(`{\"app\": \"x\"}`, labels)", json!(true)),
        ("to_boolean('TRUE')", json!(true)),
        ("add(`1`, `2`)", json!(3)),
        ("add('1Gi', '1Gi')", json!("2Gi")),
        ("add('1h', '30s')", json!("1h0m30s")),
        ("subtract('2Gi', '1Gi')", json!("1Gi")),
        ("multiply('500m', `2`)", json!("1")),
        ("divide('2Gi', '1Gi')", json!(2)),
        ("divide(`10`, `4`)", json!(2.5)),
        ("modulo(`10`, `3`)", json!(1)),
        ("sum(['1Gi', '1Gi'])", json!("2Gi")),
        ("round(`1.256`, `2`)", json!(1.26)),
        ("base64_encode('hello')", json!("aGVsbG8=")),
        ("base64_decode('aGVsbG8=')", json!("hello")),
        ("path_canonicalize('/a//b/../c')", json!("/a/c")),
        ("truncate('abcdef', `3`)", json!("abc")),
        ("semver_compare('1.2.3', '>1.0.0')", json!(true)),
        ("parse_json('{\"a\": 1}').a", json!(1)),
        ("parse_yaml('a: [1, 2]').a[1]", json!(2)),
        ("lookup(labels, 'app')", json!("x")),
        ("lookup(`[1, 2]`, `1`)", json!(2)),
        ("items(labels, 'k', 'v')[0]", json!({"k": "app", "v": "x"})),
        (
            "object_from_lists(['a', 'b'], [`1`])",
            json!({"a": 1, "b": null}),
        ),
    ] {
        assert_eq!(
            run(expr, &data).unwrap_or_else(|e| panic!("{expr}: {e}")),
            want,
            "{expr}"
        );
    }
}

#[test]
fn function_errors() {
    let data = json!({});
    for expr in [
        "to_boolean('maybe')",
        "divide(`1`, `0`)",
        "sum(`[]`)",
        "regex_match('(', 'a')",
        "nope()",
        "add('abc', `1`)",
    ] {
        assert!(run(expr, &data).is_err(), "{expr} should fail");
    }
}

#[test]
fn what_reads_only_one_root_field() {
    for (expr, want) in [
        ("request.operation || 'BACKGROUND'", true),
        ("request.object.spec.[initContainers, containers][]", true),
        ("request.object.spec.containers[].image", true),
        (
            "request.object.spec.containers[?name == element.name]",
            true,
        ),
        ("length(request.object.spec.containers) > `1`", true),
        ("map(&name, request.object.spec.containers)", true),
        ("request.object | keys(@)", true),
        ("`\"literal\"`", true),
        ("element.securityContext.capabilities.drop[] || `[]`", false),
        ("request.operation || serviceAccountName", false),
        ("[request.name, images]", false),
        ("{a: request.name, b: element}", false),
        ("@", false),
        ("[0]", false),
        ("keys(@)", false),
        ("requests.operation", false),
    ] {
        let e = Expression::parse(expr).unwrap();
        assert_eq!(e.reads_only_root_field("request"), want, "{expr}");
    }
}

#[test]
fn flatten_then_project_in_one_pass_matches_the_two_steps() {
    use super::Val;
    use super::interpreter::eval;
    use super::parser::parse;
    let data = json!({
        "mixed": [[1, null, [2]], null, 3, {"a": 1}, [], [{"a": 2}, {"b": 3}], "s"],
        "maps": [{"a": [1, 2]}, {"a": 3}, {"a": null}, {"b": 1}],
        "scalar": 5,
        "spec": {"initContainers": [{"name": "i"}], "containers": [{"name": "c", "ports": [{"hostPort": 80}, {}]}]}
    });
    // Left sides: borrowed arrays, computed lists, owned arrays, non-lists.
    let lefts = [
        "mixed",
        "maps",
        "scalar",
        "missing",
        "spec.[ephemeralContainers, initContainers, containers]",
        // Already flat: the array itself, or the one array among nulls.
        "spec.containers",
        "spec.[ephemeralContainers, containers]",
        "`[1, \"a\", {}]`",
        "maps[*].a",
        "`[[1, 2], 3, null, [null]]`",
        "mixed[?@]",
    ];
    let rights = [
        "",
        "a",
        "name",
        "ports[].hostPort",
        "to_string(@)",
        "not_null(@, 'x')",
        "[@]",
        "length(@)",
    ];
    for left in lefts {
        for right in rights {
            let text = match right {
                "" => format!("{left}[]"),
                r if r.starts_with('[') => format!("{left}[]{r}"),
                r => format!("{left}[].{r}"),
            };
            let fused = parse(&text).unwrap();
            let super::parser::Ast::Projection(l, r) = &fused else {
                panic!("{text}: not a projection: {fused:?}")
            };
            assert!(matches!(**l, super::parser::Ast::Flatten(_)), "{fused:?}");
            // The same in two steps: the flattened value, then a projection over it.
            let two_steps = super::parser::Ast::Pipe(
                l.clone(),
                Box::new(super::parser::Ast::Projection(
                    Box::new(super::parser::Ast::Current),
                    r.clone(),
                )),
            );
            let run = |ast| {
                eval(ast, Val::Ref(&data))
                    .map(Val::into_owned)
                    .map_err(|e| e.to_string())
            };
            assert_eq!(run(&fused), run(&two_steps), "{text}");
        }
    }
}

use crate::test_random::Gen;

/// Every compiled shape against the interpreter on random documents, as
/// `Value`s and as decoded documents, with the root a scope (as the policy
/// engine's context is) and plain JSON.
#[test]
fn walks_agree_with_the_interpreter() {
    let walked = [
        "a[]",
        "a[*]",
        "a[].b",
        "a[*].b.c",
        "a.b[]",
        "a.b[].c[]",
        "a[].b[].c",
        "a[][]",
        "a[].b[][]",
        "a.[b, c][]",
        "a.[b, c.a][].a",
        "a.[b, c][].b[]",
        "a.[b][*].c",
        "a.b.[a, b, c][].c.a[] || `[]`",
        "a[].b || 'none'",
        "a[*].c || `{\"x\": 1}`",
        "a.b[*].c",
        "a.c[*] || 'none'",
        "a.b.[a, c][*].b",
        "a[].keys(@)[]",
        "a[*].keys(@)",
        "a.[b, c][].keys(@)",
        "a.b[].keys(@)[] || ''",
        "a[].keys(@)[].b",
        "a[].keys(@)[].keys(@)",
    ];
    let interpreted = [
        "a.b",
        "a[*].b[*]",
        "a[0].b[]",
        "[a, b][]",
        "a[?b].c",
        "a[].b || c",
    ];
    for e in walked {
        assert!(Expression::parse(e).unwrap().is_walk(), "{e} is walked");
    }
    for e in interpreted {
        assert!(
            !Expression::parse(e).unwrap().is_walk(),
            "{e} is interpreted"
        );
    }
    let mut g = Gen(7);
    let mut lists = 0;
    for _ in 0..5_000 {
        let data = g.nested(5);
        let text = data.to_string();
        let doc = crate::json_doc::Doc::parse(&text).unwrap();
        let mut scope = Scope::new(None, 1);
        scope.set("a", Slot::Doc(doc.root().get("a").unwrap_or(doc.root())));
        for source in walked {
            let walk = Expression::parse(source).unwrap();
            let reference = walk.interpreted();
            let want = reference.resolve_val(Val::Ref(&data)).map(Val::into_owned);
            let got = walk.resolve_val(Val::Ref(&data)).map(Val::into_owned);
            assert_eq!(got, want, "{source} on {text}");
            let got = walk.resolve_val(Val::Doc(doc.root())).map(Val::into_owned);
            assert_eq!(got, want, "{source} on the document {text}");
            if doc.root().get("a").is_some() {
                let want = reference
                    .resolve_val(Val::Scope(&scope))
                    .map(Val::into_owned);
                let got = walk.resolve_val(Val::Scope(&scope)).map(Val::into_owned);
                assert_eq!(got, want, "{source} in a scope, {text}");
            }
            lists += want.is_ok_and(|v| v.as_array().is_some_and(|a| !a.is_empty())) as usize;
        }
    }
    assert!(lists > 3_000, "{lists} non-empty lists");
}
