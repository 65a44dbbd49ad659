//! A set's members answer as each answers alone, on Pods that pass, fail
//! and err in each way, and within every budget.

use super::{CheckSetBuilder, Declared};
use crate::cel::direct::{Val, evaluate_bool};
use crate::cel::{Activation, COST_LIMIT, Program};
use crate::json_doc::{Doc, JsonRef};
use serde_json::{Value, json};

/// Pod Security checks as the CEL policies write them (two spellings of
/// all containers, compiled to one range, and the containers alone, which
/// hold the same items where a Pod has no init containers), with others
/// that err, read the item's neighbours or nest a quantifier.
const CHECKS: &[&str] = &[
    "(object.spec.containers + (has(object.spec.initContainers) ? object.spec.initContainers : [])).all(c, c.?securityContext.?privileged.orValue(false) == false)",
    "(object.spec.containers + object.spec.?initContainers.orValue([])).all(c, !has(c.securityContext) || !has(c.securityContext.capabilities) || !has(c.securityContext.capabilities.add) || (size(c.securityContext.capabilities.add) == 1 && c.securityContext.capabilities.add[0] == 'NET_BIND_SERVICE'))",
    "object.spec.containers.all(c, has(c.securityContext) && has(c.securityContext.capabilities) && has(c.securityContext.capabilities.drop) && c.securityContext.capabilities.drop.exists_one(x, x == 'ALL'))",
    "object.spec.containers.exists(c, c.name == 'sidecar')",
    "object.spec.containers.all(c, c.?ports.orValue([]).all(p, p.?hostPort.orValue(0) == 0))",
    "object.spec.containers.all(c, c.securityContext.runAsUser > 0)",
    "!has(object.spec.securityContext) || object.spec.containers.all(c, c.image.startsWith('ghcr.io/'))",
    "object.spec.?volumes.orValue([]).all(v, !has(v.hostPath))",
    "object.spec.containers.all(c, c.name.size() > 0) && object.spec.containers.exists(c, c.name == 'web')",
    "object.metadata.name == 'web' || object.spec.containers.all(c, c.image == 'x')",
    "object.spec.containers.map(c, c.name).all(n, n != '')",
    "object.spec.containers.all(c, object.spec.containers.exists(d, d.name == c.name))",
];

fn pods() -> Vec<Value> {
    let container = |name: &str, security: Value| json!({"name": name, "image": format!("ghcr.io/x/{name}:1"), "securityContext": security});
    let strict = json!({"runAsUser": 1000, "privileged": false,
        "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}});
    vec![
        json!({"metadata": {"name": "web"}, "spec": {"containers": [
            container("web", strict.clone()), container("sidecar", strict.clone())]}}),
        json!({"metadata": {"name": "web"}, "spec": {
            "containers": [container("web", strict.clone())],
            "initContainers": [container("init", json!({"privileged": true}))],
            "volumes": [{"name": "v", "hostPath": {"path": "/"}}]}}),
        json!({"metadata": {"name": "other"}, "spec": {"securityContext": {},
            "containers": [container("a", Value::Null),
                {"name": "b", "image": "nginx", "ports": [{"hostPort": 80}]}]}}),
        // Containers that are not objects, or not a list; none at all.
        json!({"metadata": {"name": "x"}, "spec": {"containers": ["a", 1]}}),
        json!({"metadata": {"name": "x"}, "spec": {"containers": "a"}}),
        json!({"metadata": {"name": "x"}, "spec": {}}),
        json!({"metadata": {"name": "x"}, "spec": {"containers": []}}),
    ]
}

/// A check's answer, its error shown.
type Answer = Result<bool, String>;

/// Every check's answer in one set and alone, on every Pod, within
/// `budget`: the case, then the two answers.
fn answers(budget: i64) -> Vec<(String, Answer, Answer)> {
    let programs: Vec<Program> = CHECKS
        .iter()
        .map(|c| Program::compile(c).unwrap())
        .collect();
    let mut builder = CheckSetBuilder::default();
    for (i, p) in programs.iter().enumerate() {
        let first = builder.add_all(&[p.direct_plan().unwrap()], &|_| Declared::Other);
        assert_eq!(first, Some(i as u32), "{}", p.source());
    }
    let set = builder.finish();
    let (fused, ranges) = set.fused();
    assert_eq!((fused, ranges), (12, 3), "fused quantifiers, ranges");
    let mut out = Vec::new();
    for pod in pods() {
        let doc = Doc::from_value(&pod);
        let together = set.evaluate(Val::from_doc(doc.root()), Val::Null, budget);
        let mut vars = Activation::new();
        vars.set_json_ref("object", JsonRef::Doc(doc.root()));
        vars.set_json("oldObject", &Value::Null);
        vars.start_variables(0);
        for (p, got) in programs.iter().zip(together) {
            let alone = evaluate_bool(p.direct_plan().unwrap(), &vars, budget);
            let show = |r: Result<bool, crate::cel::direct::Fail>| r.map_err(|e| format!("{e:?}"));
            out.push((format!("{} on {pod}", p.source()), show(got), show(alone)));
        }
    }
    out
}

#[test]
fn a_set_answers_each_check_as_it_answers_alone() {
    let all = answers(COST_LIMIT as i64);
    for (case, together, alone) in &all {
        assert_eq!(together, alone, "{case}");
    }
    // The cases cover answers of every kind.
    let count =
        |want: &dyn Fn(&Answer) -> bool| all.iter().filter(|(_, _, alone)| want(alone)).count();
    // (45, 12 and 27 when written.)
    assert!(count(&|r| *r == Ok(true)) >= 40);
    assert!(count(&|r| *r == Ok(false)) >= 10);
    assert!(count(&|r| r.is_err()) >= 25);
}

#[test]
fn a_set_runs_out_of_budget_where_each_check_would() {
    let mut limited = 0;
    for budget in 0..40 {
        for (case, together, alone) in answers(budget) {
            assert_eq!(together, alone, "{case} within {budget}");
            limited += usize::from(alone == Err("CostLimit".into()));
        }
    }
    assert!(limited >= 100, "{limited} answers ran out of budget");
}

#[test]
fn checks_that_read_more_than_the_objects_are_not_members() {
    let mut builder = CheckSetBuilder::default();
    for source in [
        "request.userInfo.username == 'x'",
        "variables.names.all(n, n != '')",
        "params.spec.x == 1",
    ] {
        let p = Program::compile(source).unwrap();
        let plan = p.direct_plan().unwrap();
        assert_eq!(
            builder.add_all(&[plan], &|_| Declared::Other),
            None,
            "{source}"
        );
    }
    // All or none: a rule with one such check adds none.
    let ok = Program::compile("object.spec.containers.all(c, c.name != '')").unwrap();
    let not = Program::compile("request.operation == 'CREATE'").unwrap();
    let plans: [&crate::cel::direct::Node; 2] =
        [ok.direct_plan().unwrap(), not.direct_plan().unwrap()];
    assert_eq!(builder.add_all(&plans, &|_| Declared::Other), None);
    assert!(builder.finish().is_empty());
}
