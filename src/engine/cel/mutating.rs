//! MutatingPolicy: each mutation's expression, in order, on the object the
//! previous one left: an ApplyConfiguration merged the way server-side
//! apply merges, or JSON Patch operations applied in turn.

use super::params::{self, NONE_FOUND};
use super::{
    CelRequest, ResolverLookups, begin, bind_variables, conditions_hold, exempted, gate_of,
    match_conditions_gate, template_view, variable_error,
};
use crate::cel::values::{cel_to_json, json_to_cel};
use crate::cel::{Activation, Lookups};
use crate::context::Resolver;
use crate::engine::{PolicyResponse, Request, RuleResponse, RuleStatus, RuleType};
use crate::kinds::schema::Schema;
use crate::patch::typed::{self, Duplicates};
use crate::patch::{apply, json_patch};
use crate::policy::cel_policy::{
    CompiledMutatingPolicy, CompiledMutation, EvaluationMode, MutateExisting, PodTemplate,
    PolicyScope, TargetSelection,
};
use serde_json::{Map, Value};

/// What a MutatingPolicy made of a request.
#[derive(Debug)]
pub struct MutatingOutcome<'p> {
    /// No rules when the policy does not apply; otherwise one, named after
    /// the policy: pass, skip (matchConditions false) or error.
    pub response: PolicyResponse<'p>,
    /// The mutated object, when the policy passed.
    pub patched: Option<Value>,
}

pub fn evaluate_mutating_policy<'p>(
    policy: &'p CompiledMutatingPolicy,
    req: &Request,
    input: &CelRequest,
    resolver: &dyn Resolver,
) -> MutatingOutcome<'p> {
    let scope = &policy.scope;
    let (response, Some(view)) = begin(scope, EvaluationMode::Kubernetes, req, input) else {
        return MutatingOutcome {
            response: PolicyResponse::empty(&scope.name),
            patched: None,
        };
    };
    let mut outcome = MutatingOutcome {
        response,
        patched: None,
    };
    let root = match view.template {
        Some(template) => input.view(template),
        None => input.activation(),
    };
    let base = &root;
    let lookups = ResolverLookups(resolver);
    let respond = |status: RuleStatus, message: String| {
        RuleResponse::new(&scope.name, status, message).of_type(RuleType::Mutation)
    };
    if policy.admission_policy {
        let (patched, results) = match view.params(scope, req, resolver) {
            Err(e) => (None, vec![(RuleStatus::Error, e)]),
            Ok(None) => admission_mutations(policy, req.object.value().clone(), base, &lookups),
            // One application of the policy per param, each on the object
            // the previous one left.
            Ok(Some(list)) if list.is_empty() => {
                (None, vec![(RuleStatus::Pass, NONE_FOUND.into())])
            }
            Ok(Some(list)) => {
                // `None` until some param's application ran, as without
                // params when matchConditions stop it.
                let mut object: Option<Value> = None;
                let mut results = Vec::new();
                for param in &list {
                    let current = object.clone().unwrap_or_else(|| req.object.value().clone());
                    let (next, mut r) = match params::bind(base, param) {
                        Ok(vars) => admission_mutations(policy, current, &vars, &lookups),
                        Err(e) => (None, vec![(RuleStatus::Error, e)]),
                    };
                    results.append(&mut r);
                    if next.is_some() {
                        object = next;
                    }
                }
                (object, results)
            }
        };
        outcome.patched = patched;
        outcome.response.rules = results
            .into_iter()
            .map(|(status, message)| respond(status, message))
            .collect();
        return outcome;
    }
    // Variables are evaluated once, on the incoming object, as the API
    // server's lazily evaluated (and then cached) variables mostly are.
    let vars = bind_variables(base, &policy.variables, &lookups);
    // Kyverno's MutatingPolicy engine names the outcome of an exception
    // `exception` and that of an error `evaluation`.
    let rule = if let Some((status, message)) = exempted(scope, base, &lookups) {
        RuleResponse::new("exception", status, message).of_type(RuleType::Mutation)
    } else if let Some(rule) = conditions_gate(scope, &vars, &lookups) {
        rule
    } else {
        match mutate(
            policy,
            req.object.value().clone(),
            view.template,
            &vars,
            &lookups,
        ) {
            Ok(patched) => {
                outcome.patched = Some(patched);
                respond(RuleStatus::Pass, "success".into())
            }
            Err(e) if scope.failure_policy_ignore => respond(RuleStatus::Skip, e),
            Err(e) => evaluation_error(&vars, &e),
        }
    };
    outcome.response.rules.push(rule);
    outcome
}

/// A MutatingPolicy's error as Kyverno's engine reports any error of its
/// evaluation: the rule `evaluation`. A failed variable reports its own
/// error, as the API server's lazily evaluated variables do.
fn evaluation_error(vars: &Activation, error: &str) -> RuleResponse<'static> {
    let error = variable_error(vars, error).map_or(error, |(_, own)| own);
    RuleResponse::new(
        "evaluation",
        RuleStatus::Error,
        format!("failed to evaluate policy: {error}"),
    )
    .of_type(RuleType::Mutation)
}

/// The matchConditions of a MutatingPolicy: false skips, as for every CEL
/// policy; an error is an `evaluation` error, as Kyverno's engine gives it.
fn conditions_gate<'p>(
    scope: &'p PolicyScope,
    vars: &Activation,
    lookups: &dyn Lookups,
) -> Option<RuleResponse<'p>> {
    let held = conditions_hold(&scope.match_conditions, vars, lookups);
    if !scope.failure_policy_ignore
        && let Err(e) = &held
    {
        return Some(evaluation_error(vars, &e.to_string()));
    }
    gate_of(scope, held).map(|(status, message)| {
        RuleResponse::new(&scope.name, status, message).of_type(RuleType::Mutation)
    })
}

/// Whether the trigger of mutate existing meets the policy's
/// matchConditions (with its variables), as Kyverno checks before it
/// leaves the work. Its constraints are checked where the request is
/// admitted.
pub fn trigger_conditions_hold(
    policy: &CompiledMutatingPolicy,
    input: &CelRequest,
    resolver: &dyn Resolver,
) -> Result<bool, String> {
    let lookups = ResolverLookups(resolver);
    let root = input.activation();
    let vars = bind_variables(&root, &policy.variables, &lookups);
    conditions_hold(&policy.scope.match_conditions, &vars, &lookups)
        .map(|failed| failed.is_none())
        .map_err(|e| format!("match conditions: {e}"))
}

/// The targets `targetMatchConstraints.expression` names for a trigger:
/// the object it gives, or the `items` of the list it gives; `None` when
/// the targets are listed by constraints instead.
pub fn expression_targets(
    policy: &CompiledMutatingPolicy,
    existing: &MutateExisting,
    input: &CelRequest,
    resolver: &dyn Resolver,
) -> Option<Result<Vec<Value>, String>> {
    let TargetSelection::Expression(program) = &existing.targets else {
        return None;
    };
    let lookups = ResolverLookups(resolver);
    let root = input.activation();
    let vars = bind_variables(&root, &policy.variables, &lookups);
    let named = program
        .eval(&vars, &lookups)
        .map_err(|e| format!("targetMatchConstraints.expression: {e}"))
        .and_then(|v| cel_to_json(&v));
    Some(named.and_then(|value| match value {
        Value::Null => Ok(Vec::new()),
        Value::Object(mut m) => match m.remove("items") {
            Some(Value::Array(items)) if items.iter().all(Value::is_object) => Ok(items),
            Some(other) => Err(format!(
                "targetMatchConstraints.expression: items is not a list of objects: {other}"
            )),
            None => Ok(vec![Value::Object(m)]),
        },
        other => Err(format!(
            "targetMatchConstraints.expression must give an object, got {other}"
        )),
    }))
}

/// What mutate existing made of one target.
#[derive(Debug, Clone, PartialEq)]
pub enum TargetOutcome {
    /// The target as the mutations left it, changed.
    Patched(Value),
    /// The mutations change nothing: the target is as the policy wants it.
    Unchanged,
    /// A targetMatchCondition was false (its name).
    NotSelected(String),
    Failed(String),
}

/// Mutate existing on one target, as Kyverno's background controller
/// evaluates it: `object` is the target, `request` the trigger's
/// admission request (`trigger`), no `oldObject` or `namespaceObject`;
/// the variables, then targetMatchConditions, then the mutations in turn.
pub fn mutate_target(
    policy: &CompiledMutatingPolicy,
    existing: &MutateExisting,
    trigger: &CelRequest,
    target: &Value,
    resolver: &dyn Resolver,
) -> TargetOutcome {
    let lookups = ResolverLookups(resolver);
    let input = trigger.for_target(target);
    let root = input.activation();
    let vars = bind_variables(&root, &policy.variables, &lookups);
    match conditions_hold(&existing.conditions, &vars, &lookups) {
        Ok(None) => {}
        Ok(Some(name)) => return TargetOutcome::NotSelected(name),
        Err(e) => return TargetOutcome::Failed(format!("targetMatchConditions: {e}")),
    }
    match mutate(policy, target.clone(), None, &vars, &lookups) {
        Ok(patched) if patched == *target => TargetOutcome::Unchanged,
        Ok(patched) => TargetOutcome::Patched(patched),
        Err(e) => TargetOutcome::Failed(e),
    }
}

/// One application of a MutatingAdmissionPolicy with `base` (and its
/// params, when it has them): variables, matchConditions, mutations. The
/// object is `None` when matchConditions stopped it.
fn admission_mutations(
    policy: &CompiledMutatingPolicy,
    object: Value,
    base: &Activation,
    lookups: &dyn Lookups,
) -> (Option<Value>, Vec<(RuleStatus, String)>) {
    let vars = bind_variables(base, &policy.variables, lookups);
    match match_conditions_gate(&policy.scope, &vars, lookups) {
        Some((status, message)) => (None, vec![(status, message.into_owned())]),
        None => {
            let (patched, results) = mutate_each(policy, object, &vars, lookups);
            (Some(patched), results)
        }
    }
}

/// A MutatingAdmissionPolicy, the way Kyverno's CLI applies one: each
/// mutation reports pass (it changed the object), skip (no effect) or
/// error (the object stays as it was), and lists merge atomically.
fn mutate_each(
    policy: &CompiledMutatingPolicy,
    mut object: Value,
    vars: &Activation,
    lookups: &dyn Lookups,
) -> (Value, Vec<(RuleStatus, String)>) {
    if policy.mutations.is_empty() {
        return (
            object,
            vec![(RuleStatus::Pass, "mutation returned no patchers".into())],
        );
    }
    let mut results = Vec::with_capacity(policy.mutations.len());
    let mut changed = false;
    for mutation in &policy.mutations {
        let rebound;
        let vars = if changed {
            let mut scope = vars.scope();
            if let Err(e) = scope.set("object", json_to_cel(&object)) {
                results.push((RuleStatus::Error, e.to_string()));
                continue;
            }
            rebound = scope;
            &rebound
        } else {
            vars
        };
        match apply_mutation(mutation, &object, None, None, false, vars, lookups) {
            Ok(next) if next == object => {
                results.push((RuleStatus::Skip, "mutation had no effect".into()))
            }
            Ok(next) => {
                object = next;
                changed = true;
                results.push((RuleStatus::Pass, String::new()));
            }
            Err(e) => results.push((RuleStatus::Error, e)),
        }
    }
    (object, results)
}

/// What the API server's `ApplyStructuredMergeDiff` checks before it
/// merges, in its order: the configuration converts to the kind's type
/// (no duplicate keys), sets no atomic value (unless the policy asks for
/// server-side apply, as Kyverno's `useServerSideApply`), and the live
/// object converts too.
fn typed_apply_checks(
    config: &Value,
    object: &Value,
    schema: Schema,
    server_side_apply: bool,
) -> Result<(), String> {
    typed::check(config, schema, Duplicates::Refused)
        .map_err(|e| format!("failed to convert patch object to typed object: {e}"))?;
    if !server_side_apply {
        let atomics = typed::atomic_paths(config, schema);
        if !atomics.is_empty() {
            return Err(format!(
                "invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: {}",
                atomics.join(", ")
            ));
        }
    }
    typed::check(object, schema, Duplicates::Allowed)
        .map_err(|e| format!("failed to convert original object to typed object: {e}"))
}

/// One mutation on `object`. `view` places an autogen Pod configuration
/// in the template; `schema` decides how apply merges lists and types the
/// configuration (none for a kind the schema does not know).
fn apply_mutation(
    mutation: &CompiledMutation,
    object: &Value,
    view: Option<PodTemplate>,
    schema: Option<Schema>,
    server_side_apply: bool,
    vars: &Activation,
    lookups: &dyn Lookups,
) -> Result<Value, String> {
    match mutation {
        CompiledMutation::ApplyConfiguration(program) => {
            let value = program.eval(vars, lookups).map_err(|e| e.to_string())?;
            let mut config = match cel_to_json(&value)? {
                config @ Value::Object(_) => config,
                other => {
                    return Err(format!(
                        "applyConfiguration must evaluate to an Object, got {other}"
                    ));
                }
            };
            // Autogen: the expression wrote a Pod; place it in the template.
            if let Some(t) = view {
                config = wrap_in_template(config, t);
            }
            if let Some(schema) = schema {
                typed_apply_checks(&config, object, schema, server_side_apply)
                    .map_err(|e| format!("error applying patch: {e}"))?;
            }
            Ok(apply::merge(object, &config, schema))
        }
        CompiledMutation::JsonPatch(program) => {
            let value = program.eval(vars, lookups).map_err(|e| e.to_string())?;
            let ops = match cel_to_json(&value)? {
                Value::Array(ops) => ops,
                other => {
                    return Err(format!(
                        "jsonPatch must evaluate to a list of JSONPatch, got {other}"
                    ));
                }
            };
            let mut next = object.clone();
            json_patch::apply(&mut next, &ops).map_err(|e| e.to_string())?;
            Ok(next)
        }
    }
}

/// Runs the mutations in order on `object`.
fn mutate(
    policy: &CompiledMutatingPolicy,
    mut object: Value,
    view: Option<PodTemplate>,
    vars: &Activation,
    lookups: &dyn Lookups,
) -> Result<Value, String> {
    let mut changed = false;
    for mutation in &policy.mutations {
        // After a change, `object` is the previous mutation's output.
        let rebound;
        let vars = if changed {
            let mut scope = vars.scope();
            let seen = match view {
                Some(t) => template_view(&object, t),
                None => object.clone(),
            };
            scope
                .set("object", json_to_cel(&seen))
                .map_err(|e| e.to_string())?;
            rebound = scope;
            &rebound
        } else {
            vars
        };
        let schema = Schema::for_kind(
            object["apiVersion"].as_str().unwrap_or_default(),
            object["kind"].as_str().unwrap_or_default(),
        );
        let next = apply_mutation(
            mutation,
            &object,
            view,
            schema,
            policy.server_side_apply,
            vars,
            lookups,
        )?;
        changed |= next != object;
        object = next;
    }
    Ok(object)
}

/// `{spec, metadata}` of a Pod, moved to where a controller keeps its
/// Pod template.
fn wrap_in_template(config: Value, template: PodTemplate) -> Value {
    let Value::Object(mut pod) = config else {
        return config;
    };
    let mut inner = Map::new();
    for key in ["metadata", "spec"] {
        if let Some(v) = pod.remove(key) {
            inner.insert(key.into(), v);
        }
    }
    let wrapped = template
        .path()
        .iter()
        .rev()
        .fold(Value::Object(inner), |v, key| {
            let mut m = Map::new();
            m.insert((*key).into(), v);
            Value::Object(m)
        });
    let Value::Object(wrapped) = wrapped else {
        unreachable!("fold over objects gives an object")
    };
    pod.extend(wrapped);
    Value::Object(pod)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::NoResolver;
    use crate::policy::cel_policy::MutatingPolicyDoc;
    use serde_json::json;

    fn policy(yaml: &str) -> CompiledMutatingPolicy {
        let doc: MutatingPolicyDoc = serde_saphyr::from_str(yaml).unwrap();
        CompiledMutatingPolicy::compile(&doc).unwrap()
    }

    fn run(p: &CompiledMutatingPolicy, resource: &Value) -> (Vec<RuleStatus>, Option<Value>) {
        let req = Request::offline(resource, "CREATE", Default::default(), None);
        let out = evaluate_mutating_policy(p, &req, &CelRequest::of(&req), &NoResolver);
        (
            out.response.rules.iter().map(|r| r.status).collect(),
            out.patched,
        )
    }

    const HEAD: &str = "apiVersion: policies.kyverno.io/v1alpha1
kind: MutatingPolicy
metadata: {name: m}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [pods]}
";

    fn pod() -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"},
               "spec": {"containers": [{"name": "c", "image": "nginx"}, {"name": "d", "image": "x"}]}})
    }

    #[test]
    fn apply_configuration_merges_list_items_by_key() {
        let p = policy(&format!(
            "{HEAD}  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >-
        Object{{spec: Object.spec{{containers: object.spec.containers.map(c,
          Object.spec.containers{{name: c.name, imagePullPolicy: 'Always'}})}}}}
"
        ));
        let (status, patched) = run(&p, &pod());
        assert_eq!(status, vec![RuleStatus::Pass]);
        assert_eq!(
            patched.unwrap()["spec"]["containers"],
            json!([{"name": "c", "image": "nginx", "imagePullPolicy": "Always"},
                   {"name": "d", "image": "x", "imagePullPolicy": "Always"}])
        );
    }

    #[test]
    fn json_patches_apply_in_order_and_see_the_previous_result() {
        let p = policy(&format!(
            "{HEAD}  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: \"[JSONPatch{{op: 'add', path: '/metadata/labels', value: {{'a': 'b'}}}}]\"
  - patchType: JSONPatch
    jsonPatch:
      expression: \"[JSONPatch{{op: 'add', path: '/metadata/labels/n', value: string(size(object.metadata.labels))}}]\"
"
        ));
        let (status, patched) = run(&p, &pod());
        assert_eq!(status, vec![RuleStatus::Pass]);
        assert_eq!(
            patched.unwrap()["metadata"]["labels"],
            json!({"a": "b", "n": "1"})
        );
    }

    #[test]
    fn match_conditions_skip_and_bad_patches_error() {
        let p = policy(&format!(
            "{HEAD}  matchConditions:
  - {{name: has-d, expression: \"object.spec.containers.exists(c, c.name == 'zzz')\"}}
  mutations:
  - patchType: JSONPatch
    jsonPatch: {{expression: '[]'}}
"
        ));
        assert_eq!(run(&p, &pod()).0, vec![RuleStatus::Skip]);
        let p = policy(&format!(
            "{HEAD}  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: \"[JSONPatch{{op: 'remove', path: '/spec/missing'}}]\"
"
        ));
        let (status, patched) = run(&p, &pod());
        assert_eq!(status, vec![RuleStatus::Error]);
        assert!(patched.is_none());
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        assert!(run(&p, &cm).0.is_empty());
    }

    #[test]
    fn autogen_places_the_pod_configuration_in_the_template() {
        let p = policy(&format!(
            "{HEAD}  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: \"Object{{metadata: Object.metadata{{labels: {{'x': 'y'}}}}, spec: Object.spec{{dnsPolicy: 'None'}}}}\"
"
        ));
        let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"template": {"metadata": {}, "spec": {"containers": [{"name": "c"}]}}}});
        let (status, patched) = run(&p, &deploy);
        assert_eq!(status, vec![RuleStatus::Pass]);
        assert_eq!(
            patched.unwrap()["spec"]["template"],
            json!({"metadata": {"labels": {"x": "y"}},
                   "spec": {"containers": [{"name": "c"}], "dnsPolicy": "None"}})
        );
    }

    #[test]
    fn admission_policies_merge_lists_whole_and_report_each_mutation() {
        let map = "apiVersion: admissionregistration.k8s.io/v1alpha1
kind: MutatingAdmissionPolicy
metadata: {name: m}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: \"Object{spec: Object.spec{containers: [Object.spec.containers{name: 'c', imagePullPolicy: 'Always'}]}}\"
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: \"Object{spec: Object.spec{containers: [Object.spec.containers{name: 'c', imagePullPolicy: 'Always'}]}}\"
";
        let doc: MutatingPolicyDoc = serde_saphyr::from_str(map).unwrap();
        let p = CompiledMutatingPolicy::compile_admission(&doc, &[]).unwrap();
        let (status, patched) = run(&p, &pod());
        // The second mutation changes nothing: skip.
        assert_eq!(status, vec![RuleStatus::Pass, RuleStatus::Skip]);
        // No schema: the list is replaced, not merged by name.
        assert_eq!(
            patched.unwrap()["spec"]["containers"],
            json!([{"name": "c", "imagePullPolicy": "Always"}])
        );
    }

    const EXISTING: &str = "apiVersion: policies.kyverno.io/v1beta1
kind: MutatingPolicy
metadata: {name: stamp}
spec:
  evaluation:
    mutateExisting: {enabled: true}
  matchConstraints:
    resourceRules:
    - {apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [secrets]}
  variables:
  - {name: wanted, expression: \"'app'\"}
";

    fn secret_request() -> CelRequest<'static> {
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
                            "metadata": {"name": "db", "namespace": "a"}});
        let req = Request::offline(&secret, "CREATE", Default::default(), None);
        CelRequest::owned(&req)
    }

    /// A target sees itself as `object` and the trigger's request as
    /// `request`; targetMatchConditions filter; a target already as the
    /// policy wants it is unchanged.
    #[test]
    fn mutate_existing_mutates_each_target_with_the_trigger_as_request() {
        let p = policy(&format!(
            "{EXISTING}  targetMatchConstraints:
    resourceRules:
    - {{apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}}
  targetMatchConditions:
  - {{name: not-frozen, expression: \"!has(object.metadata.labels) || !('frozen' in object.metadata.labels)\"}}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: \"Object{{metadata: Object.metadata{{annotations: {{'by': request.name + '/' + object.metadata.name}}}}}}\"
"
        ));
        let existing = p.existing.as_ref().unwrap();
        assert!(existing.targets_only && !p.mutates_trigger());
        let cm = |name: &str, labels: Value| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": name, "namespace": "a", "labels": labels}})
        };
        let trigger = secret_request();
        let out = mutate_target(&p, existing, &trigger, &cm("c1", json!({})), &NoResolver);
        let TargetOutcome::Patched(patched) = out else {
            panic!("{out:?}")
        };
        assert_eq!(patched["metadata"]["annotations"], json!({"by": "db/c1"}));
        assert_eq!(
            mutate_target(&p, existing, &trigger, &patched, &NoResolver),
            TargetOutcome::Unchanged
        );
        assert_eq!(
            mutate_target(
                &p,
                existing,
                &trigger,
                &cm("c2", json!({"frozen": "x"})),
                &NoResolver
            ),
            TargetOutcome::NotSelected("not-frozen".into())
        );
    }

    /// The expression gives one object or a list; anything else is an
    /// error; without an expression the targets are listed instead.
    #[test]
    fn expression_targets_name_one_object_or_a_list() {
        let run = |expression: &str| {
            let p = policy(&format!(
                "{EXISTING}  targetMatchConstraints:
    expression: \"{expression}\"
  mutations: []
"
            ));
            let existing = p.existing.clone().unwrap();
            expression_targets(&p, &existing, &secret_request(), &NoResolver)
        };
        let one = run("{'kind': 'ConfigMap', 'metadata': {'name': variables.wanted}}");
        assert_eq!(one.unwrap().unwrap()[0]["metadata"]["name"], "app");
        let list = run("{'items': [{'metadata': {'name': 'x'}}, {'metadata': {'name': 'y'}}]}");
        assert_eq!(list.unwrap().unwrap().len(), 2);
        assert!(run("'app'").unwrap().is_err());
        let listed = policy(&format!("{EXISTING}  mutations: []\n"));
        let existing = listed.existing.as_ref().unwrap();
        assert!(
            !existing.targets_only && listed.mutates_trigger(),
            "no targetMatchConstraints: the trigger is mutated too, and the matchConstraints list the targets"
        );
        assert!(expression_targets(&listed, existing, &secret_request(), &NoResolver).is_none());
    }
}
