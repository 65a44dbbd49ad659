//! ImageValidatingPolicy evaluation, as Kyverno's image verification
//! evaluator runs it: matchConditions, then exceptions, then the images
//! (extracted, and kept when `matchImageReferences` match them), the
//! digest check, the validations with `images`, `attestors` and
//! `attestations` bound, and last the `required` check.
//!
//! kyverno-compat: Kyverno fetches every matched image from its registry
//! before any validation runs. gavel reaches no registry: it does not
//! prefetch, and the functions that need the registry
//! (`verifyImageSignatures`, `verifyAttestationSignatures`,
//! `getImageData`, `extractPayload`) fail as `unsupported offline` on an
//! image the policy matches. Everything else evaluates.

use super::{CelRequest, PolicyResponse, Request, RuleResponse, RuleResponses, RuleStatus};
use super::{
    NULL, NoRequest, ResolverLookups, audit_annotations, begin, bind_request, bind_variables,
    conditions_hold, json_type_name, message_of,
};
use crate::cel::values::{cel_to_json, json_to_cel};
use crate::cel::{Activation, InterpreterCache, Lookup, Lookups, NoLookups, Program};
use crate::context::Resolver;
use crate::engine::RuleType;
use crate::json_doc::JsonRef;
use crate::kinds::Gvr;
use crate::policy::cel_policy::PolicyScope;
use crate::policy::cel_policy::{
    CompiledImageValidatingPolicy, CompiledNamed, EvaluationMode, ImageReferenceMatch,
};
use kube_cel::cel::Value as CelValue;
use serde_json::{Map, Value, json};
use std::borrow::Cow;
use std::sync::LazyLock;

/// Where the Pod spec is in the resources Kyverno gives default
/// extractors: Pods, the Pod controllers, CronJobs.
const POD_SPEC_PATHS: [&str; 3] = [
    "spec",
    "spec.template.spec",
    "spec.jobTemplate.spec.template.spec",
];
const CATEGORIES: [&str; 3] = ["containers", "initContainers", "ephemeralContainers"];

/// Kyverno's default extractors of each of [`POD_SPEC_PATHS`], one per
/// container category; a policy's own extractor of the same name
/// replaces one.
static DEFAULT_EXTRACTORS: LazyLock<[Vec<CompiledNamed>; 3]> = LazyLock::new(|| {
    POD_SPEC_PATHS.map(|path| {
        CATEGORIES
            .iter()
            .filter_map(|category| {
                let source = format!(
                    "(object != null ? object : oldObject).{path}.?{category}.orValue([]).map(e, e.image)"
                );
                // Constant sources: they compile.
                Program::compile(&source).ok().map(|program| CompiledNamed {
                    name: (*category).to_string(),
                    program,
                })
            })
            .collect()
    })
});

/// The default extractors of a request's resource, as Kyverno picks them
/// by the request's exact group, version and resource.
fn default_extractors(resource: &Gvr) -> &'static [CompiledNamed] {
    let index = match (
        resource.group.as_str(),
        resource.version.as_str(),
        resource.resource.as_str(),
    ) {
        ("", "v1", "pods") => 0,
        ("batch", "v1", "jobs")
        | ("apps", "v1", "deployments" | "statefulsets" | "daemonsets" | "replicasets") => 1,
        ("batch", "v1", "cronjobs") => 2,
        _ => return &[],
    };
    &DEFAULT_EXTRACTORS[index]
}

/// Evaluates an ImageValidatingPolicy on a request: one rule response, or
/// none when the policy does not match it (its constraints or its
/// matchConditions), as Kyverno's engine leaves such a policy out.
pub fn evaluate_image_validating_policy<'p>(
    policy: &'p CompiledImageValidatingPolicy,
    req: &Request,
    input: &CelRequest,
    resolver: &dyn Resolver,
) -> PolicyResponse<'p> {
    let scope = &policy.scope;
    let (mut response, Some(view)) = begin(scope, policy.mode, req, input) else {
        return PolicyResponse::empty(&scope.name);
    };
    // A Pod controller seen through its template reads as a Pod.
    let (base, defaults) = match view.template {
        Some(template) => (input.view(template), &DEFAULT_EXTRACTORS[0][..]),
        None => (
            input.activation(),
            default_extractors(&req.request_resource),
        ),
    };
    let lookups = ImageLookups {
        policy,
        inner: ResolverLookups(resolver),
    };
    response
        .rules
        .extend(image_validating_rule(policy, &base, &lookups, defaults));
    response
}

/// Evaluates an ImageValidatingPolicy of `evaluation.mode: JSON` on a
/// payload: `object` is the payload, and only the policy's own extractors
/// find images.
pub fn evaluate_image_validating_policy_on_json<'p>(
    policy: &'p CompiledImageValidatingPolicy,
    payload: &Value,
    resolver: &dyn Resolver,
) -> PolicyResponse<'p> {
    let mut response = PolicyResponse {
        policy: &policy.scope.name,
        rules: RuleResponses::new(),
    };
    if policy.mode != EvaluationMode::Json {
        return response;
    }
    let cache = InterpreterCache::default();
    let vars = bind_request(
        &cache,
        JsonRef::Value(payload),
        JsonRef::Value(&NULL),
        &NoRequest,
    );
    let lookups = ImageLookups {
        policy,
        inner: ResolverLookups(resolver),
    };
    response
        .rules
        .extend(image_validating_rule(policy, &vars, &lookups, &[]));
    response
}

/// Whether the policy's `matchImageReferences` take `image` (all do when
/// there are none).
pub fn image_matches(policy: &CompiledImageValidatingPolicy, image: &str) -> Result<bool, String> {
    if policy.image_references.is_empty() {
        return Ok(true);
    }
    for reference in &policy.image_references {
        let matched = match reference {
            ImageReferenceMatch::Glob(glob) => glob.matches(image),
            ImageReferenceMatch::Expression(program) => {
                let mut vars = Activation::new();
                vars.set("ref", CelValue::String(image.to_string().into()))
                    .map_err(|e| e.to_string())?;
                match program.eval(&vars, &NoLookups).map_err(|e| e.to_string())? {
                    CelValue::Bool(b) => b,
                    other => {
                        return Err(format!(
                            "type conversion error from '{}' to 'bool'",
                            other.type_of()
                        ));
                    }
                }
            }
        };
        if matched {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The policy's answers to its image verification functions, offline;
/// every other lookup goes to the resolver.
struct ImageLookups<'a> {
    policy: &'a CompiledImageValidatingPolicy,
    inner: ResolverLookups<'a>,
}

impl Lookups for ImageLookups<'_> {
    fn lookup(&self, lookup: &Lookup) -> Result<Value, String> {
        let Lookup::ImageVerification {
            function,
            image,
            attestation,
        } = lookup
        else {
            return self.inner.lookup(lookup);
        };
        // As Kyverno's functions: an image the policy does not match is
        // verified by no attestor, without asking its registry.
        if function.starts_with("verify") && !image_matches(self.policy, image)? {
            return Ok(json!(0));
        }
        if let Some(name) = attestation
            && !self.policy.attestations.contains(name)
        {
            return Err(format!("attestation not found in policy: {name}"));
        }
        Err(format!(
            "unsupported offline: {function}({image:?}) needs the image's registry, \
             which gavel does not reach"
        ))
    }
}

/// One evaluation of an applicable ImageValidatingPolicy with `vars` (the
/// request's, a template view's, or a payload's).
fn image_validating_rule<'p>(
    policy: &'p CompiledImageValidatingPolicy,
    vars: &Activation,
    lookups: &dyn Lookups,
    defaults: &[CompiledNamed],
) -> Option<RuleResponse<'p>> {
    let scope = &policy.scope;
    let name = scope.name.as_str();
    let respond = |status: RuleStatus, message: Cow<'p, str>| {
        RuleResponse::new(name, status, message).of_type(RuleType::ImageVerify)
    };
    if let Err(answer) = applies(scope, vars, lookups) {
        return answer;
    }
    let (images, matched) = match extract_images(policy, vars, lookups, defaults) {
        Ok(found) => found,
        Err(e) => return Some(evaluation_failed(e)),
    };
    if policy.verify_digest
        && let Some(answer) = undigested(&matched, respond)
    {
        return Some(answer);
    }
    let mut bound = vars.scope();
    for (key, value) in [
        ("images", json_to_cel(&Value::Object(images))),
        ("attestations", policy.attestations_value.clone()),
    ] {
        if let Err(e) = bound.set(key, value) {
            return Some(evaluation_failed(e.to_string()));
        }
    }
    let variables = bind_variables(&bound, &policy.checks.variables, lookups);
    let mut vars = variables.scope();
    let attestors = match &policy.static_attestors {
        Some(value) => value.clone(),
        None => json_to_cel(&attestors(policy, &variables, lookups)),
    };
    if let Err(e) = vars.set("attestors", attestors) {
        return Some(evaluation_failed(e.to_string()));
    }
    let vars = &vars;
    for (i, v) in policy.checks.validations.iter().enumerate() {
        let outcome = match v.program.eval(vars, lookups) {
            Ok(CelValue::Bool(b)) => b,
            Ok(other) => {
                return Some(respond(
                    RuleStatus::Error,
                    format!(
                        "error: type conversion error from '{}' to 'bool'",
                        other.type_of()
                    )
                    .into(),
                ));
            }
            Err(e) => return Some(evaluation_failed(e.to_string())),
        };
        if outcome {
            continue;
        }
        let message = match &v.message_expression {
            Some(p) => match message_of(p, vars, lookups) {
                Ok(Value::String(s)) => s,
                Ok(other) => format!(
                    "failed to convert message expression to string: \
                     type conversion error from '{}' to 'string'",
                    json_type_name(&other)
                ),
                Err(e) => format!("failed to evaluate message expression: {e}"),
            },
            None => v.message.clone().unwrap_or_default(),
        };
        let message = if message.is_empty() {
            format!("CEL expression validation failed at index {i}")
        } else {
            message
        };
        return Some(
            match audit_annotations(&policy.checks.audit_annotations, vars, lookups) {
                Ok(properties) => {
                    respond(RuleStatus::Fail, message.into()).with_properties(properties)
                }
                Err(e) => evaluation_failed(e),
            },
        );
    }
    let properties = match audit_annotations(&policy.checks.audit_annotations, vars, lookups) {
        Ok(properties) => properties,
        Err(e) => return Some(evaluation_failed(e)),
    };
    // Offline no signature or attestation check verifies an image (each
    // needs the registry), so every matched image is unverified.
    if policy.required
        && let Some(image) = matched.first()
    {
        return Some(
            respond(
                RuleStatus::Fail,
                format!(
                    "image {image} is not verified: no policy performed a signature or \
                     attestation check on it"
                )
                .into(),
            )
            .with_properties(properties),
        );
    }
    Some(respond(RuleStatus::Pass, Cow::Borrowed("success")).with_properties(properties))
}

/// Kyverno's engine names an error that stops the evaluation so.
fn evaluation_failed<'p>(e: String) -> RuleResponse<'p> {
    RuleResponse::new(
        "evaluation",
        RuleStatus::Error,
        format!("failed to evaluate policy: {e}"),
    )
    .of_type(RuleType::ImageVerify)
}

/// Whether the policy applies: its matchConditions hold and no exception
/// takes the request. Otherwise what it answers: nothing (not matched), a
/// skip (an exception), or an error.
fn applies<'p>(
    scope: &PolicyScope,
    vars: &Activation,
    lookups: &dyn Lookups,
) -> Result<(), Option<RuleResponse<'p>>> {
    match conditions_hold(&scope.match_conditions, vars, lookups) {
        Ok(None) => {}
        Ok(Some(_)) => return Err(None),
        Err(_) if scope.failure_policy_ignore => return Err(None),
        Err(e) => return Err(Some(evaluation_failed(e.to_string()))),
    }
    // Exceptions come after the matchConditions here, and always skip.
    let mut exempted: Vec<&str> = Vec::new();
    for e in &scope.exceptions {
        match conditions_hold(&e.match_conditions, vars, lookups) {
            Ok(None) => exempted.push(&e.key),
            Ok(Some(_)) => {}
            Err(_) if !exempted.is_empty() || scope.failure_policy_ignore => {}
            Err(err) => return Err(Some(evaluation_failed(err.to_string()))),
        }
    }
    if !exempted.is_empty() {
        return Err(Some(
            RuleResponse::new(
                "exception",
                RuleStatus::Skip,
                format!(
                    "rule is skipped due to policy exception: {}",
                    exempted.join(", ")
                ),
            )
            .of_type(RuleType::ImageVerify),
        ));
    }
    Ok(())
}

/// `verifyDigest`: the failure for the first matched image that names no
/// digest (or an error for one that does not parse).
fn undigested<'p>(
    matched: &[String],
    respond: impl Fn(RuleStatus, Cow<'p, str>) -> RuleResponse<'p>,
) -> Option<RuleResponse<'p>> {
    for image in matched {
        match crate::cel::image_ref::parse(image) {
            Err(e) => {
                return Some(evaluation_failed(format!(
                    "failed to parse image reference {image}: {e}"
                )));
            }
            Ok(r) if r.digest.is_empty() => {
                return Some(respond(
                    RuleStatus::Fail,
                    format!("image {image} does not have a digest").into(),
                ));
            }
            Ok(_) => {}
        }
    }
    None
}

/// The `images` variable (each extractor's images that the policy
/// matches, by extractor name) and every matched image, in order.
fn extract_images(
    policy: &CompiledImageValidatingPolicy,
    vars: &Activation,
    lookups: &dyn Lookups,
    defaults: &[CompiledNamed],
) -> Result<(Map<String, Value>, Vec<String>), String> {
    let mut extractors: Vec<&CompiledNamed> = defaults.iter().collect();
    for own in &policy.extractors {
        match extractors.iter_mut().find(|e| e.name == own.name) {
            Some(slot) => *slot = own,
            None => extractors.push(own),
        }
    }
    let mut images = Map::new();
    let mut matched = Vec::new();
    for extractor in extractors {
        let value = extractor
            .program
            .eval(vars, lookups)
            .map_err(|e| e.to_string())?;
        let list = match cel_to_json(&value)? {
            Value::Array(items) => items,
            other => {
                return Err(format!(
                    "type conversion error from '{}' to '[]string'",
                    json_type_name(&other)
                ));
            }
        };
        let mut kept = Vec::new();
        for item in list {
            let Value::String(image) = item else {
                return Err(format!(
                    "type conversion error from '{}' to 'string'",
                    json_type_name(&item)
                ));
            };
            if image_matches(policy, &image)? {
                matched.push(image.clone());
                kept.push(Value::String(image));
            }
        }
        images.insert(extractor.name.clone(), Value::Array(kept));
    }
    Ok((images, matched))
}

/// The `attestors` variable: each attestor as written, its expressions'
/// results in place. One whose expression fails is left out, so that only
/// a validation that reads it fails (Kyverno evaluates them on first use).
fn attestors(
    policy: &CompiledImageValidatingPolicy,
    vars: &Activation,
    lookups: &dyn Lookups,
) -> Value {
    let mut out = Map::new();
    'attestors: for attestor in &policy.attestors {
        let mut value = attestor.named_value();
        for (target, program) in &attestor.expressions {
            let result = match program.eval(vars, lookups) {
                Ok(CelValue::String(s)) => s.to_string(),
                _ => continue 'attestors,
            };
            set_pointer(&mut value, target, Value::String(result));
        }
        out.insert(attestor.name.clone(), value);
    }
    Value::Object(out)
}

/// Sets the field at `pointer` (its parents exist: the expression beside
/// it was read from there).
fn set_pointer(value: &mut Value, pointer: &str, new: Value) {
    let Some((parent, field)) = pointer.rsplit_once('/') else {
        return;
    };
    if let Some(Value::Object(m)) = value.pointer_mut(parent) {
        m.insert(field.to_string(), new);
    }
}

#[cfg(test)]
mod tests;
