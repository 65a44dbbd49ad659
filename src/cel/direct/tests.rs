//! The direct evaluator on one line per case: what it compiles, and that
//! its answers (or its hand-overs) equal the interpreter's.

mod cases;
use crate::cel::values::cel_to_json;
use crate::cel::{Activation, NoLookups, Program};
use crate::json_doc::{Doc, JsonRef};
use cases::{CHAIN_CASES, INTERPRETER_CASES};
use serde_json::{Value, json};

fn pod() -> Value {
    json!({
        "metadata": {"name": "web", "labels": {"app": "x", "tier": "a"}},
        "spec": {
            "hostNetwork": false,
            "containers": [
                {"name": "a", "image": "nginx:1.2", "ports": [{"hostPort": 80}],
                 "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}},
                {"name": "b", "image": "ghcr.io/x/b:latest", "securityContext": null}
            ],
            "volumes": [{"name": "v", "hostPath": {"path": "/etc"}}]
        }
    })
}

/// The answer, the answer as the interpreter would give it, and whether
/// the direct evaluator gave it itself. The object is bound as a
/// `serde_json::Value`; bound as a decoded document instead (as the
/// webhook holds it), every answer, and whether it was direct, must be
/// the same.
fn both(expr: &str) -> (String, String, bool) {
    let object = pod();
    let doc = Doc::from_value(&object);
    let program = Program::compile(expr).unwrap();
    let show = |r: Result<kube_cel::cel::Value, crate::cel::CelError>| match r {
        Ok(v) => cel_to_json(&v).map_or_else(|e| e, |j| j.to_string()),
        Err(e) => format!("error: {e}"),
    };
    let run = |vars: &mut Activation| {
        vars.start_variables(0);
        let answered = matches!(program.eval_direct(vars), Ok(Some(_)));
        let direct = show(program.eval(vars, &NoLookups));
        let interpreted = show(program.interpreted_only().eval(vars, &NoLookups));
        (direct, interpreted, answered)
    };
    let mut on_value = Activation::new();
    on_value.set_json("object", &object);
    let answers = run(&mut on_value);
    let mut on_doc = Activation::new();
    on_doc.set_json_ref("object", JsonRef::Doc(doc.root()));
    assert_eq!(run(&mut on_doc), answers, "{expr}: on a decoded document");
    answers
}

/// Where the cel crate's interpreter answers wrongly, the direct evaluator
/// answers as cel-go does (checked with cel-go v0.30, the version Kyverno
/// v1.19.1 builds with).
#[test]
fn answers_as_cel_go_where_the_interpreter_does_not() {
    for (expr, cel_go, interpreter) in [
        // A field of a string: an error, not false (the interpreter's
        // selections are the library's since 2026-11-28).
        (
            "object.metadata.name.foo",
            "error: no such key: foo",
            "error: no such key: foo",
        ),
        // A field of a list: an index error; of null: has() is false.
        (
            "has(object.spec.containers.name)",
            "error: unsupported index type 'string' in list",
            "error: unsupported index type 'string' in list",
        ),
        (
            "object.spec.containers.?name",
            "error: unsupported index type 'string' in list",
            "error: unsupported index type 'string' in list",
        ),
        (
            "object.spec.containers[1].securityContext.runAsUser",
            "error: no such key: runAsUser",
            "error: no such key: runAsUser",
        ),
        (
            "object.metadata.name.map(c, c)",
            "error: got 'types.String', expected iterable type",
            "error: got 'types.String', expected iterable type",
        ),
        (
            "has(object.spec.containers[1].securityContext.runAsUser)",
            "false",
            "false",
        ),
        // An item that errors does not decide `all` when another is false.
        (
            "['abc', object.metadata].all(x, x.name == 'zzz')",
            "false",
            "",
        ),
        // `.?` on a string is none.
        ("object.metadata.name.?foo.orValue('none')", "\"none\"", ""),
        // A double with no fraction indexes a list, and finds the integer
        // key of a map it equals (cel-spec's `zero_based_double` and
        // `map_key_mixed_numbers_double_key`).
        ("[7, 8, 9][dyn(1.0)]", "8", ""),
        (
            "{1u: 'a', 2: 'b'}[2.0] + {1u: 'a', 2: 'b'}[1.0]",
            "\"ba\"",
            "",
        ),
        ("{1u: 'a', 2: 'b'}[?1.0].orValue('none')", "\"a\"", ""),
        // The two-variable `all`: an item that errors does not decide
        // when another is false (the interpreter runs them as one-variable
        // macros over pairs, and stops at the error).
        (
            "[0, 'foo', 3].all(i, v, v % 2 == i)",
            "false",
            "error: Unsupported binary operator 'rem': String(\"foo\"), Int(2)",
        ),
        // `duration + timestamp` (the interpreter has no such overload),
        // and cel-go's ranges: a duration is int64 nanoseconds, a
        // timestamp within the years 1 to 9999.
        (
            "duration('120s') + timestamp('2009-02-13T23:01:00Z') == timestamp('2009-02-13T23:03:00Z')",
            "true",
            "",
        ),
        (
            "timestamp('9999-12-31T23:59:59Z') - timestamp('0001-01-01T00:00:00Z')",
            "error: integer overflow",
            "\"315537897599s\"",
        ),
        (
            "duration('-2562047h') - duration('2562047h')",
            "error: integer overflow",
            "",
        ),
        (
            "timestamp('0001-01-01T00:00:00Z') - duration('1ns')",
            "error: timestamp out of range",
            "",
        ),
    ] {
        let (got, interpreted, _) = both(expr);
        assert_eq!(got, cel_go, "{expr}");
        if !interpreter.is_empty() {
            assert_eq!(interpreted, interpreter, "{expr}: the interpreter's answer");
        }
    }
}

#[test]
fn answers_equal_the_interpreters() {
    let cases = INTERPRETER_CASES;
    for (expr, answer, direct) in cases {
        let (got, interpreted, answered) = both(expr);
        assert_eq!(got, interpreted, "{expr}: direct and interpreter differ");
        if !answer.is_empty() {
            assert_eq!(&got, answer, "{expr}");
        }
        assert_eq!(answered, *direct, "{expr}: answered directly");
    }
}

#[test]
fn unsupported_constructs_stay_with_the_interpreter() {
    for expr in [
        "quantity('1Gi').isGreaterThan(quantity('1Mi'))",
        "timestamp('2024-01-01T00:00:00Z').getDayOfWeek() == 1",
        "resource.Get('v1', 'configmaps', 'a', 'b')",
    ] {
        assert!(!Program::compile(expr).unwrap().is_direct(), "{expr}");
    }
    for expr in [
        "object.spec.containers.all(c, c.image.contains('x'))",
        "object.metadata.?labels[?'app'].orValue('') == 'x'",
        "image('nginx').registry()",
        "object.metadata.labels.transformMap(k, v, v + 'x')",
        "duration('1h') + timestamp('2024-01-01T00:00:00Z')",
    ] {
        assert!(Program::compile(expr).unwrap().is_direct(), "{expr}");
    }
}

#[test]
fn the_cost_limit_holds() {
    let program =
        Program::compile("[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, [1,2,3,4,5,6,7,8,9,10].all(f, f > 0))))))")
            .unwrap();
    assert!(program.is_direct());
    let vars = Activation::new();
    assert_eq!(
        program.eval(&vars, &NoLookups),
        Err(crate::cel::CelError::CostLimit)
    );
    assert_eq!(
        program.interpreted_only().eval(&vars, &NoLookups),
        Err(crate::cel::CelError::CostLimit)
    );
}

/// A value stays three words, also with a decoded document's arrays and
/// objects among its forms (`json_doc::PackedJson` keeps spare tag values):
/// at four words the evaluator ran 13-25% slower in time with 3-5% fewer
/// instructions (`perf-results/2026-11-30-evaluation-core-v2-step15.md`).
#[test]
fn values_stay_three_words() {
    use crate::cel::direct::Val;
    assert_eq!(std::mem::size_of::<Val>(), 24);
    assert_eq!(std::mem::size_of::<Option<Val>>(), 24);
}

/// Selections that share a path prefix look it up once (a memo); they
/// answer as the paths did, errors included, and a comprehension's memos
/// follow its item.
#[test]
fn shared_path_prefixes_answer_as_the_paths() {
    let cases: &[(&str, &str)] = &[
        // The second container's securityContext is null: has() of its
        // field is false, selecting one an error.
        (
            "object.spec.containers.all(c, has(c.securityContext) && \
             has(c.securityContext.capabilities) && \
             has(c.securityContext.capabilities.add) && \
             c.securityContext.capabilities.add.exists_one(x, x == 'NET_ADMIN'))",
            "false",
        ),
        (
            "object.spec.containers.all(c, !has(c.securityContext) || \
             !has(c.securityContext.capabilities) || \
             size(c.securityContext.capabilities.add) == 1)",
            "true",
        ),
        (
            "object.spec.containers.all(c, c.securityContext.capabilities.add.size() > 0 || \
             c.securityContext.capabilities.drop.size() > 0)",
            "error: no such key: capabilities",
        ),
        // A memo left from the first item would answer true here.
        (
            "object.spec.containers.exists(c, has(c.securityContext.capabilities) && \
             c.securityContext.capabilities.add[0] == 'NET_ADMIN' && c.name == 'b')",
            "false",
        ),
        (
            "object.spec.containers.map(c, has(c.securityContext) && c.securityContext != null \
             ? c.securityContext.capabilities.add[0] : 'none')",
            r#"["NET_ADMIN","none"]"#,
        ),
        // An inner comprehension reads the outer item's memos; sibling
        // comprehensions reuse its slot with their own.
        (
            "object.spec.containers.all(c, [1, 2].all(i, !has(c.securityContext.capabilities) || \
             c.securityContext.capabilities.add.size() == i || i == 2))",
            "true",
        ),
        (
            "object.spec.containers.all(c, has(c.image) && c.image != '') && \
             object.spec.containers.exists(c, has(c.image) && c.image.endsWith(':latest'))",
            "true",
        ),
        // Prefixes of a root every request binds.
        (
            "object.spec.containers.size() == 2 && object.spec.containers[0].name == 'a' && \
             has(object.spec.volumes) && object.spec.volumes[0].hostPath.path == '/etc'",
            "true",
        ),
        (
            "has(object.spec.securityContext) && object.spec.securityContext.runAsNonRoot",
            "false",
        ),
        (
            "object.metadata.name.size() > 0 && object.metadata.name.foo == 1",
            "error: no such key: foo",
        ),
        (
            "has(object.spec.containers.name) || object.spec.containers.size() > 5",
            "error: unsupported index type 'string' in list",
        ),
        // A comprehension run again (once per outer item): the memos its
        // items found in the first run are gone in the second.
        (
            "[1, 2].exists(i, object.spec.containers.exists(c, \
             has(c.securityContext.capabilities) && \
             c.securityContext.capabilities.add[0] == 'NET_ADMIN' && c.name == 'b'))",
            "false",
        ),
        // A path from outside the comprehension first found in an item,
        // then read after it.
        (
            "object.spec.containers.all(c, object.metadata.name != c.name) && \
             object.metadata.name.size() > 0",
            "true",
        ),
    ];
    // More shared prefixes than an evaluation holds memos for: the later
    // ones are walked each time, and answer the same.
    let keys: Vec<String> = (0..40).map(|i| format!("'k{i}': {{'v': {i}}}")).collect();
    let tests: Vec<String> = (0..40)
        .map(|i| format!("m.k{i}.v == {i} && m.k{i}.v < {}", i + 1))
        .collect();
    let many = format!("[{{{}}}].all(m, {})", keys.join(", "), tests.join(" && "));
    let cases = cases.iter().copied().chain([(many.as_str(), "true")]);
    for (expr, want) in cases {
        let program = Program::compile(expr).unwrap();
        let plan = format!("{:?}", program.direct);
        assert!(
            plan.contains("Memo"),
            "{expr}: no prefix was shared: {plan}"
        );
        let (got, interpreted, direct) = both(expr);
        assert_eq!(got, want, "{expr}");
        assert_eq!(got, interpreted, "{expr}: the interpreter's answer");
        assert!(direct || got.starts_with("error"), "{expr}: handed over");
    }
}

/// Optional chains of fields read in the document, their comparisons with
/// a constant, and chains of `&&`/`||` of three or more operands (one
/// n-ary node): each answers as the interpreter does, and the plan holds
/// the node that was meant to answer it.
#[test]
fn document_chains_and_logical_chains_answer_as_the_interpreter() {
    let cases = CHAIN_CASES;
    for (expr, want, node, direct) in cases {
        let program = Program::compile(expr).unwrap();
        let plan = format!("{:?}", program.direct);
        assert!(plan.contains(node), "{expr}: no {node} in {plan}");
        let (got, interpreted, answered) = both(expr);
        assert_eq!(&got, want, "{expr}");
        assert_eq!(got, interpreted, "{expr}: the interpreter's answer");
        assert_eq!(answered, *direct, "{expr}: answered directly");
    }
}

/// A dotted name bound as one variable is a qualified identifier: `a.b.c`
/// reads the variable `a.b.c` first, then `c` of `a.b`, then `b.c` of
/// `a`, as cel-go resolves it (cel-spec's `qualified_identifier_resolution`);
/// a comprehension's own `a` comes before all of them.
#[test]
fn qualified_identifiers_resolve_the_longest_name() {
    use kube_cel::cel::Value as CelValue;
    let text = |s: &str| CelValue::String(std::sync::Arc::new(s.into()));
    let map = |k: &str, v: CelValue| {
        let mut m = std::collections::HashMap::new();
        m.insert(kube_cel::cel::objects::Key::String(k.to_string().into()), v);
        CelValue::Map(kube_cel::cel::objects::Map { map: m.into() })
    };
    let answer = |expr: &str, vars: &Activation| {
        let program = Program::compile(expr).unwrap();
        assert!(program.is_direct(), "{expr}");
        program.eval(vars, &NoLookups)
    };
    let mut all = Activation::new();
    all.set("a.b.c", text("yeah")).unwrap();
    all.set("a.b", map("c", text("oops"))).unwrap();
    all.set("a", map("b", map("c", text("deep")))).unwrap();
    assert_eq!(answer("a.b.c", &all), Ok(text("yeah")));
    assert_eq!(answer("has(a.b.c)", &all), Ok(CelValue::Bool(true)));
    assert_eq!(
        answer("[{'b': {'c': 'local'}}].map(a, a.b.c)[0]", &all),
        Ok(text("local"))
    );
    let mut two = Activation::new();
    two.set("a.b", map("c", text("oops"))).unwrap();
    two.set("a", map("b", map("c", text("deep")))).unwrap();
    assert_eq!(answer("a.b.c", &two), Ok(text("oops")));
    let mut one = Activation::new();
    one.set("a", map("b", map("c", text("deep")))).unwrap();
    assert_eq!(answer("a.b.c + a.b['c']", &one), Ok(text("deepdeep")));
    assert!(answer("a.b.d", &one).is_err());
}
