//! The admission pipeline: a review's body and a policy snapshot in, the
//! encoded AdmissionReview answer out. Match, classic validate, CEL
//! validating policies, mutate (classic, then MutatingPolicies), the
//! verdict and the denial text run here, independent of the transport, so
//! that the server, benches and fuzz targets drive the same code.

use super::json_text::JsonText;
use super::phases::{self, Chaining, MutatingPhase, Visit};
use super::policies::Snapshot;
use super::policy_validation;
use super::reports::{self, AdmissionResults, PolicyAt};
use super::review::{self, ReviewError};
use super::update_requests::{self, UpdateRequestSpec};
use super::verdict::{self, DenialHeads, Verdict};
use crate::cel::Activation;
use crate::context::ClusterView;
use crate::engine::cel::{
    CelRequest, constraints_select, evaluate_image_validating_policy,
    evaluate_validating_policy_over,
};
use crate::engine::json_context::Builtins;
use crate::engine::mutate::mutate_policy;
use crate::engine::validate::verify_policy_with;
use crate::engine::{EvalEnv, PolicyResponse, Request, RuleResponse, RuleStatus, validate};
use crate::json_doc::View;
use crate::matching::MatchInput;
use crate::patch::json_patch;
use crate::policy::cel_policy::{CompiledImageValidatingPolicy, CompiledValidatingPolicy};
use crate::policy::compile::FailurePolicy;
use crate::policy::{CompiledPolicy, RuleBody};
use std::time::{Duration, Instant};

/// Which webhook the API server called: the validating or the mutating
/// one, for every policy or for those of one failurePolicy (the API server
/// treats a webhook's failure by the webhook's own failurePolicy, so each
/// is registered apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Webhook {
    Validate(Option<FailurePolicy>),
    Mutate(Option<FailurePolicy>),
    /// A policy object written (`/policyvalidate`).
    PolicyValidation,
    /// An object carrying the TTL label written (`/verifyttl`).
    TtlValidation,
}

/// What the handler learned, for metrics and logs.
pub struct Outcome {
    pub body: Vec<u8>,
    pub kind: String,
    pub namespace: String,
    pub operation: String,
    pub allowed: bool,
    /// Generate work the admitted request leaves for the background
    /// controller (validating routes only).
    pub update_requests: Vec<UpdateRequestSpec>,
    /// The validation results of an admitted CREATE or UPDATE for its
    /// resource's PolicyReport, when asked for (see [`admit_reporting`]).
    pub report: Option<AdmissionResults>,
}

/// The report results of the policies evaluated for an admitted object
/// (taking their responses: the verdict is decided); None when it has no
/// uid or no policy has a result for it.
fn results_for_report(
    selected: &[usize],
    responses: Vec<PolicyResponse>,
    (cel_indexes, cel): CelResponses,
    images: ImageResponses,
    stale: Vec<String>,
    object: crate::json_doc::JsonRef,
) -> Option<AdmissionResults> {
    if stale.is_empty()
        && responses
            .iter()
            .chain(cel.iter().map(|(_, r)| r))
            .chain(images.iter().map(|(_, _, r)| r))
            .all(|r| r.rules.is_empty())
    {
        return None;
    }
    let subject = reports::ReportSubject::of(object)?;
    let at_seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let mut out = AdmissionResults {
        subject,
        evaluated: Vec::with_capacity(selected.len() + cel.len()),
        stale,
        results: Vec::new(),
        at_seconds,
    };
    for (&index, response) in selected.iter().zip(responses) {
        out.push_policy(PolicyAt::Kyverno(index), response);
    }
    for (index, (_, response)) in cel_indexes.into_iter().zip(cel) {
        out.push_policy(PolicyAt::Validating(index), response);
    }
    for (index, _, response) in images {
        out.push_policy(PolicyAt::ImageValidating(index), response);
    }
    (!out.results.is_empty() || !out.stale.is_empty()).then_some(out)
}

/// The policies of an UPDATE that have no result for the new object but
/// selected the old one: results they left in the resource's report are
/// stale. Only match is checked on the old object (no evaluation), so an
/// update that changes nothing any policy selects costs no report read.
fn no_longer_selected(
    policies: &[(&CompiledPolicy, &DenialHeads)],
    responses: &[PolicyResponse],
    cel: &[(&CompiledValidatingPolicy, PolicyResponse)],
    req: &Request,
    input: &MatchInput,
) -> Vec<String> {
    let Some(meta) = req
        .old_object
        .json()
        .get("metadata")
        .filter(|m| m.is_object())
    else {
        return Vec::new();
    };
    let old_input = input.with_object_metadata(Some(meta));
    let classic = policies
        .iter()
        .zip(responses)
        .filter(|(_, r)| r.rules.is_empty())
        .filter(|((p, _), _)| {
            p.rules
                .iter()
                .any(|rule| rule.is_validate() && rule.selects(&old_input))
        })
        .map(|((p, _), _)| p.qualified_name().to_string());
    let validating = cel
        .iter()
        .filter(|(_, r)| r.rules.is_empty())
        .filter(|(p, _)| constraints_select(&p.scope, req, req.old_object.json(), None))
        .map(|(p, _)| p.key.clone());
    classic.chain(validating).collect()
}

/// Answers one review on `route` (a Validate or Mutate route) with the
/// policies of `snapshot`, recording each rule result in the snapshot's
/// rule table. A policy reached after `deadline` is not evaluated: it
/// answers an error, which its failurePolicy turns into a denial (Fail) or
/// nothing (Ignore).
pub fn admit(
    webhook: Webhook,
    body: &[u8],
    snapshot: &Snapshot,
    deadline: Option<Instant>,
    view: &dyn ClusterView,
) -> Result<Outcome, ReviewError> {
    admit_reporting(webhook, body, snapshot, deadline, view, false)
}

/// [`admit`], and with `report` the results an admitted review leaves for
/// its resource's PolicyReport (Kyverno's admission reports): validating
/// routes, CREATE and UPDATE that are not dry runs, objects with a uid.
pub fn admit_reporting(
    webhook: Webhook,
    body: &[u8],
    snapshot: &Snapshot,
    deadline: Option<Instant>,
    view: &dyn ClusterView,
    report: bool,
) -> Result<Outcome, ReviewError> {
    // Documents where every evaluator of the route reads them; a
    // `serde_json::Value` where mutation or CEL would convert one anyway.
    let form = match webhook {
        Webhook::Validate(_) if snapshot.validate_reads_documents => review::ObjectForm::Document,
        _ => review::ObjectForm::Value,
    };
    let mut review = review::decode_as(body, form)?;
    // A custom resource's subresource (`widgets/scale`): its kind is the
    // CRD's, which only the cluster knows.
    if review.request.gvk.kind.is_empty() {
        let gvr = &review.request.gvr;
        if let Some(kind) = view.kind_for_resource(&gvr.api_version(), &gvr.resource) {
            review.request.gvk.kind = kind;
        }
    }
    if snapshot.needs_namespace_labels {
        review.request.namespace_labels = match review.request.namespace() {
            "" => None,
            ns => view.namespace_labels(ns),
        };
    }
    let req = &review.request;
    // Looked up once: the rule counters and the request metrics name it.
    let namespace = req.namespace();
    let mut background = &[][..];
    let mut generating = &[][..];
    let mut admission_results = None;
    let verdict = match webhook {
        Webhook::Validate(failure_policy) => {
            let selected = snapshot.validate_indexes(failure_policy);
            let env = EvalEnv {
                resolver: view,
                exceptions: &snapshot.exceptions,
                rule_values: &(),
            };
            let policies: Vec<(&CompiledPolicy, &DenialHeads)> = selected
                .iter()
                .map(|&i| (&snapshot.policies[i], &snapshot.denial_heads[i]))
                .collect();
            let mut ctx = req.json_context(snapshot.validate_builtins(failure_policy));
            ctx.attach_plan(&snapshot.plan, req);
            let cel_root = ctx.cel_request().map(CelRequest::activation);
            let input = req.match_input();
            let cells =
                snapshot
                    .rule_table
                    .resource(&req.object_kind.kind, namespace, &req.operation);
            let mut responses = Vec::with_capacity(policies.len());
            // The deadline is checked against the rule times the engine
            // measures anyway, rather than with clock reads of its own.
            let mut timer = validate::RuleTimer::started();
            let mut clock = Instant::now();
            for (&index, &(policy, _)) in selected.iter().zip(&policies) {
                if deadline.is_some_and(|d| clock >= d) {
                    responses.push(not_evaluated(policy));
                    continue;
                }
                let response = validate::evaluate_policy_observed(
                    policy,
                    req,
                    &input,
                    &ctx,
                    &env,
                    cel_root.as_ref(),
                    Some(&mut timer),
                );
                for (r, &(rule, elapsed)) in response.rules.iter().zip(&timer.times) {
                    cells.record(index, rule, r.status, elapsed);
                    clock += elapsed;
                }
                // The verification phase of verifyImages rules, which
                // Kyverno runs at its mutating webhook: here, so that a
                // check gavel cannot make offline is an error that the
                // failurePolicy decides, not a silent pass.
                let mut response = response;
                if policy.has_verify_images() {
                    let verified = verify_policy_with(policy, req, &input, &ctx, &env);
                    response.rules.extend(verified.rules);
                }
                responses.push(response);
            }
            // The request's CEL variables, made once for the route's CEL
            // policies of both kinds (and shared with validate.cel rules);
            // not made at all for a route that has none.
            let owned;
            let cel_input = match ctx.cel_request() {
                Some(input) => Some(input),
                None if snapshot.cel_validation_on(failure_policy) => {
                    owned = CelRequest::of(req).with_plan(&snapshot.plan);
                    Some(&owned)
                }
                None => None,
            };
            let (cel_indexes, cel) = validate_cel(
                snapshot,
                failure_policy,
                req,
                cel_input,
                cel_root.as_ref(),
                view,
                |i, status, elapsed| cells.record(snapshot.validating_index(i), 0, status, elapsed),
            );
            let images = validate_images(snapshot, failure_policy, req, cel_input, view);
            background = snapshot.background_indexes(failure_policy);
            generating = snapshot.generating_on(failure_policy);
            let verdict = verdict::decide(&policies, &responses, &cel, &images, req);
            if report
                && verdict.allowed
                && matches!(req.operation.as_str(), "CREATE" | "UPDATE")
                && !review.dry_run
            {
                let stale = if req.operation == "UPDATE" {
                    no_longer_selected(&policies, &responses, &cel, req, &input)
                } else {
                    Vec::new()
                };
                admission_results = results_for_report(
                    selected,
                    responses,
                    (cel_indexes, cel),
                    images,
                    stale,
                    req.object.json(),
                );
            }
            verdict
        }
        Webhook::PolicyValidation => policy_validation::policy_verdict(req),
        Webhook::TtlValidation => policy_validation::ttl_verdict(req),
        Webhook::Mutate(failure_policy) => {
            let selected = snapshot.mutate_indexes(failure_policy);
            let cells =
                snapshot
                    .rule_table
                    .resource(&req.object_kind.kind, namespace, &req.operation);
            mutate(
                snapshot,
                selected,
                failure_policy,
                req,
                deadline,
                view,
                |index, rule, status, elapsed| cells.record(index, rule, status, elapsed),
            )
        }
    };
    let update_requests = if verdict.allowed {
        let mut out = update_requests::for_review(&snapshot.policies, background, &review);
        out.extend(update_requests::for_generating(generating, &review));
        if let Webhook::Mutate(failure_policy) = webhook {
            let mutating = snapshot
                .mutating
                .iter()
                .filter(|p| Snapshot::cel_selected(&p.scope, failure_policy));
            out.extend(update_requests::for_mutating(mutating, &review));
        }
        out
    } else {
        Vec::new()
    };
    Ok(Outcome {
        update_requests,
        report: admission_results,
        body: verdict::encode(&review.uid, &verdict),
        kind: req.object_kind.kind.clone(),
        namespace: namespace.to_string(),
        operation: req.operation.clone(),
        allowed: verdict.allowed,
    })
}

/// A route's ValidatingPolicies, by index in `snapshot.validating`, and
/// their responses.
type CelResponses<'s> = (
    Vec<usize>,
    Vec<(&'s CompiledValidatingPolicy, PolicyResponse<'s>)>,
);

/// Evaluates the ValidatingPolicies of the route, recording each result
/// with the policy's index in `snapshot.validating`. `root` is the root of
/// `input`'s variables when the caller made one.
fn validate_cel<'s>(
    snapshot: &'s Snapshot,
    failure_policy: Option<FailurePolicy>,
    req: &Request,
    input: Option<&CelRequest>,
    root: Option<&Activation>,
    view: &dyn ClusterView,
    mut record: impl FnMut(usize, RuleStatus, Duration),
) -> CelResponses<'s> {
    let mut selected = snapshot
        .validating
        .iter()
        .enumerate()
        .filter(|(_, p)| p.admission && Snapshot::cel_selected(&p.scope, failure_policy))
        .peekable();
    // Made whenever the route has CEL policies (`cel_validation_on`).
    let Some(input) = input.filter(|_| selected.peek().is_some()) else {
        return (Vec::new(), Vec::new());
    };
    // One root of the request's CEL variables for all the route's
    // ValidatingPolicies: the one its validate.cel rules used, when
    // `input` is the context's.
    let mut made = None;
    let root = input.root_in(root, &mut made);
    selected
        .map(|(i, p)| {
            let started = Instant::now();
            let response = evaluate_validating_policy_over(p, req, input, Some(root), view);
            let elapsed = started.elapsed();
            for r in &response.rules {
                record(i, r.status, elapsed);
            }
            (i, (p, response))
        })
        .unzip()
}

/// Evaluates the ImageValidatingPolicies of the route.
///
/// kyverno-compat: Kyverno's mutating webhook also pins the images these
/// policies match to their digests (`mutateDigest`), which needs each
/// image's registry; gavel reaches none and does not pin, so a tagged
/// image then fails `verifyDigest` here.
fn validate_images<'s>(
    snapshot: &'s Snapshot,
    failure_policy: Option<FailurePolicy>,
    req: &Request,
    input: Option<&CelRequest>,
    view: &dyn ClusterView,
) -> ImageResponses<'s> {
    let mut selected = snapshot
        .image_validating
        .iter()
        .enumerate()
        .filter(|(_, p)| p.admission && Snapshot::cel_selected(&p.scope, failure_policy))
        .peekable();
    let Some(input) = input.filter(|_| selected.peek().is_some()) else {
        return Vec::new();
    };
    selected
        .map(|(i, p)| (i, p, evaluate_image_validating_policy(p, req, input, view)))
        .filter(|(_, _, r)| !r.rules.is_empty())
        .collect()
}

/// A route's ImageValidatingPolicies that answered, with their index in
/// `snapshot.image_validating`.
type ImageResponses<'s> = Vec<(usize, &'s CompiledImageValidatingPolicy, PolicyResponse<'s>)>;

/// Runs the mutate policies `selected`, in order, each on the previous
/// one's output (docs/kyverno-semantics.md#mutation-order). A policy with a
/// failed rule denies the request under `failurePolicy: Fail`; under Ignore
/// its changes are dropped. The answer carries the JSONPatch from the
/// incoming object to the result.
fn mutate(
    snapshot: &Snapshot,
    selected: &[usize],
    failure_policy: Option<FailurePolicy>,
    req: &Request,
    deadline: Option<Instant>,
    view: &dyn ClusterView,
    mut record: impl FnMut(usize, usize, RuleStatus, Duration),
) -> Verdict {
    let any_cel = snapshot
        .mutating
        .iter()
        .any(|p| Snapshot::cel_selected(&p.scope, failure_policy));
    // Nothing to mutate on DELETE: there is no new object.
    if req.object.is_null() || (selected.is_empty() && !any_cel) {
        return Verdict {
            allowed: true,
            ..Verdict::default()
        };
    }
    let env = EvalEnv {
        resolver: view,
        exceptions: &snapshot.exceptions,
        rule_values: &(),
    };
    let mut current: Option<Request> = None;
    let mut warnings = Vec::new();
    let mut failed: Vec<String> = Vec::new();
    for &index in selected {
        let policy = &snapshot.policies[index];
        let started = Instant::now();
        let req_now = current.as_ref().unwrap_or(req);
        let timed_out = deadline.is_some_and(|d| started >= d);
        let outcome = if timed_out {
            None
        } else {
            let ctx = req_now.json_context(Builtins::of([policy]));
            Some(mutate_policy(policy, req_now, &ctx, &env))
        };
        let elapsed = started.elapsed();
        let Some(outcome) = outcome else {
            if policy.failure_policy == FailurePolicy::Fail {
                failed.push(format!(
                    "policy {}: not evaluated: the request deadline passed",
                    policy.qualified_name()
                ));
            }
            continue;
        };
        let rules = &outcome.response.rules;
        let per_rule = elapsed / u32::try_from(rules.len().max(1)).unwrap_or(u32::MAX);
        let mut errors = Vec::new();
        for r in rules {
            if let Some(rule) = policy.rules.iter().position(|x| x.name == r.name) {
                record(index, rule, r.status, per_rule);
            }
            if matches!(r.status, RuleStatus::Error | RuleStatus::Fail) {
                errors.push(format!("{}: {}", r.name, r.message));
            } else if policy.emit_warning && r.status == RuleStatus::Pass {
                warnings.push(format!(
                    "policy {}.{}: {}",
                    outcome.response.policy, r.name, r.message
                ));
            }
        }
        if !errors.is_empty() {
            // Ignore: the policy's changes are dropped, the rest go on.
            if policy.failure_policy == FailurePolicy::Fail {
                failed.push(format!(
                    "failed to apply policy {} rules [{}]",
                    policy.qualified_name(),
                    errors.join(", ")
                ));
            }
            continue;
        }
        if let Some(patched) = outcome.patched {
            let mut next = req_now.clone();
            next.object = patched.into();
            current = Some(next);
        }
    }
    // Then the MutatingPolicies, each on the previous one's output.
    let failed = std::cell::RefCell::new(failed);
    let start = current.take();
    let phase = MutatingPhase {
        policies: &snapshot.mutating,
        chaining: Chaining::Chained,
        resolver: view,
    };
    let chained = phases::mutating_policies(
        phase,
        start.as_ref().unwrap_or(req),
        |r, object| Request {
            object: object.into(),
            ..r.clone()
        },
        CelRequest::owned,
        |_, policy| {
            // A policy that names other targets leaves its trigger as it
            // is (its work is the UpdateRequest), as does one evaluated
            // in the background only.
            if !policy.mutates_trigger() || !Snapshot::cel_selected(&policy.scope, failure_policy) {
                return Visit::Skip;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                if !policy.scope.failure_policy_ignore {
                    failed.borrow_mut().push(format!(
                        "policy {}: not evaluated: the request deadline passed",
                        policy.name()
                    ));
                }
                return Visit::Skip;
            }
            Visit::Evaluate
        },
        |m| {
            for r in &m.response.rules {
                record(snapshot.mutating_index(m.index), 0, r.status, m.elapsed);
                // Under failurePolicy Ignore an error is already a skip.
                if r.status == RuleStatus::Error {
                    failed.borrow_mut().push(format!(
                        "failed to apply policy {}: {}",
                        m.policy.name(),
                        r.message
                    ));
                }
            }
        },
    );
    let current = chained.or(start);
    let failed = failed.into_inner();
    if !failed.is_empty() {
        return Verdict {
            allowed: false,
            message: Some(JsonText::escape(&format!(
                "mutation failed: {}",
                failed.join("; ")
            ))),
            warnings,
            patch: None,
        };
    }
    let patch = current.map(|c| json_patch::diff(req.object.value(), c.object.value()));
    Verdict {
        allowed: true,
        message: None,
        warnings,
        patch: patch
            .filter(|ops| !ops.is_empty())
            .map(|ops| serde_json::to_vec(&ops).unwrap_or_default()),
    }
}

/// The response of a policy the deadline left unevaluated: an error for
/// each of its validate rules.
fn not_evaluated(policy: &CompiledPolicy) -> PolicyResponse<'_> {
    PolicyResponse {
        policy: policy.qualified_name(),
        rules: policy
            .rules
            .iter()
            .filter(|r| matches!(r.body, RuleBody::Validate(_)))
            .map(|r| {
                RuleResponse::new(
                    &r.name,
                    RuleStatus::Error,
                    "not evaluated: the request deadline passed",
                )
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::policies::{PolicySet, load_file};
    use crate::context::NoResolver;
    use std::path::Path;

    /// The example Pod Security policies, in reverse order of their names
    /// when `reversed` (a denial sorts them back).
    fn example_pod_security(reversed: bool) -> Snapshot {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/policies/pod-security");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        if reversed {
            files.reverse();
        }
        let policies: Vec<CompiledPolicy> = files
            .iter()
            .flat_map(|file| load_file(file).unwrap().policies)
            .collect();
        assert_eq!(policies.len(), 17);
        Snapshot::new(
            PolicySet {
                policies,
                ..PolicySet::default()
            },
            1,
        )
    }

    /// Image checks at admission: a verifyImages rule's digest check and
    /// its signature check (which gavel cannot make offline: an error, so
    /// failurePolicy Fail denies), and an ImageValidatingPolicy.
    #[test]
    fn image_checks_deny_at_admission_and_never_pass_unchecked() {
        let set = crate::admission::policies::load_text(
            "p.yaml",
            r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: signed-images}
spec:
  validationFailureAction: Enforce
  rules:
  - name: digests
    match: {any: [{resources: {kinds: [Pod]}}]}
    verifyImages:
    - imageReferences: ["docker.io/*"]
      mutateDigest: false
      required: false
  - name: signatures
    match: {any: [{resources: {kinds: [Pod]}}]}
    verifyImages:
    - imageReferences: ["ghcr.io/*"]
      required: false
      verifyDigest: false
      mutateDigest: false
      attestors:
      - entries:
        - keys: {publicKeys: "-----BEGIN PUBLIC KEY-----"}
---
apiVersion: policies.kyverno.io/v1
kind: ImageValidatingPolicy
metadata: {name: quay-digests}
spec:
  validationConfigurations: {required: false}
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  matchImageReferences: [{glob: "quay.io/*"}]
  attestors: []
  validations: [{expression: "true"}]
"#,
        )
        .unwrap();
        let snapshot = Snapshot::new(set, 1);
        let review = |image: &str| {
            serde_json::to_vec(&serde_json::json!({
                "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": {"uid": "u", "operation": "CREATE",
                    "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "resource": {"group": "", "version": "v1", "resource": "pods"},
                    "namespace": "default", "userInfo": {"username": "u"},
                    "object": {"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": "p", "namespace": "default"},
                        "spec": {"containers": [{"name": "c", "image": image}]}}}
            }))
            .unwrap()
        };
        let answer = |image: &str| {
            let outcome = admit(
                Webhook::Validate(None),
                &review(image),
                &snapshot,
                None,
                &NoResolver,
            )
            .unwrap();
            let body: serde_json::Value = serde_json::from_slice(&outcome.body).unwrap();
            (
                outcome.allowed,
                body["response"]["status"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        };
        let digest = "sha256:859ab6768a6f26a79bc42b231664111317d095a4f04e4b6fe79ce37b3d199097";
        let denied_for = |image: &str, words: &str| {
            let (allowed, message) = answer(image);
            assert!(!allowed && message.contains(words), "{image}: {message}");
        };
        denied_for("nginx:1.27", "missing digest for docker.io/nginx:1.27");
        assert!(answer(&format!("nginx:1.27@{digest}")).0);
        denied_for(&format!("ghcr.io/acme/app@{digest}"), "unsupported offline");
        denied_for(
            "quay.io/acme/app:1",
            "image quay.io/acme/app:1 does not have a digest",
        );
        assert!(answer(&format!("quay.io/acme/app@{digest}")).0);
    }

    /// An admitted review leaves its results for the resource's report:
    /// one per validation rule, marked "admission review"; nothing without
    /// a uid, for a dry run, for a denial, or when not asked for.
    #[test]
    fn admitted_reviews_leave_report_results() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/reviews");
        let compliant: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("pod-compliant.json")).unwrap())
                .unwrap();
        let violating: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("pod-violating.json")).unwrap())
                .unwrap();
        let with_uid = |mut review: serde_json::Value, dry_run: bool| {
            review["request"]["object"]["metadata"]["uid"] = "0c5d-uid".into();
            review["request"]["dryRun"] = dry_run.into();
            serde_json::to_vec(&review).unwrap()
        };
        let snapshot = example_pod_security(false);
        let route = Webhook::Validate(None);
        let admit_with = |body: &[u8], report: bool| {
            admit_reporting(route, body, &snapshot, None, &NoResolver, report).unwrap()
        };
        let outcome = admit_with(&with_uid(compliant.clone(), false), true);
        assert!(outcome.allowed);
        let results = outcome.report.expect("results for the report");
        assert_eq!(results.evaluated.len(), 17);
        assert_eq!(&*results.subject.uid, "0c5d-uid");
        assert_eq!(&*results.subject.kind, "Pod");
        let written = results.report_results(&snapshot);
        assert!(!written.is_empty());
        assert!(
            written.iter().all(|r| r["result"] == "pass"
                && r["properties"]["process"] == reports::ADMISSION_REVIEW)
        );
        assert!(
            admit_with(&with_uid(compliant.clone(), false), false)
                .report
                .is_none()
        );
        assert!(
            admit_with(&with_uid(compliant.clone(), true), true)
                .report
                .is_none()
        );
        assert!(
            admit_with(&serde_json::to_vec(&compliant).unwrap(), true)
                .report
                .is_none()
        );
        let denied = admit_with(&with_uid(violating, false), true);
        assert!(!denied.allowed && denied.report.is_none());
    }

    /// An UPDATE after which a policy no longer selects the resource
    /// leaves that policy among the evaluated ones with no result, so its
    /// earlier results leave the report; an UPDATE it never selected
    /// leaves nothing to write.
    #[test]
    fn a_policy_no_longer_selecting_an_updated_resource_has_its_results_removed() {
        let set = crate::admission::policies::load_text(
            "p.yaml",
            r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: require-owner}
spec:
  validationFailureAction: Audit
  rules:
  - name: owner-label
    match:
      any:
      - resources:
          kinds: [ConfigMap]
          selector: {matchLabels: {audit: "yes"}}
    validate:
      message: an owner label is required
      pattern: {metadata: {labels: {owner: "?*"}}}
"#,
        )
        .unwrap();
        let snapshot = Snapshot::new(set, 1);
        let update = |old_labels: serde_json::Value, labels: serde_json::Value| {
            let cm = |labels: serde_json::Value| {
                serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "c", "namespace": "n", "uid": "u1", "labels": labels}})
            };
            let review = serde_json::json!({
                "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": {"uid": "r", "operation": "UPDATE",
                    "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                    "resource": {"group": "", "version": "v1", "resource": "configmaps"},
                    "namespace": "n", "userInfo": {"username": "u"},
                    "object": cm(labels), "oldObject": cm(old_labels)},
            });
            let body = serde_json::to_vec(&review).unwrap();
            admit_reporting(
                Webhook::Validate(None),
                &body,
                &snapshot,
                None,
                &NoResolver,
                true,
            )
            .unwrap()
            .report
        };
        let gone = update(
            serde_json::json!({"audit": "yes"}),
            serde_json::json!({"audit": "no"}),
        )
        .expect("the stale result is removed");
        assert!(gone.results.is_empty());
        assert!(gone.evaluated_names(&snapshot).contains("require-owner"));
        let still = update(
            serde_json::json!({"audit": "yes"}),
            serde_json::json!({"audit": "yes", "owner": "me"}),
        )
        .expect("a fresh result");
        assert_eq!(still.report_results(&snapshot)[0]["result"], "pass");
        assert!(
            update(serde_json::json!({}), serde_json::json!({})).is_none(),
            "never selected: nothing to write"
        );
    }

    /// The denial of the example violating Pod names 17 failing rules: each
    /// message is started from its rule's prerendered head, and the text is
    /// the one written without heads, whatever the order of the policies.
    #[test]
    fn denials_start_from_prerendered_heads() {
        let body = std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/reviews/pod-violating.json"),
        )
        .unwrap();
        let route = Webhook::Validate(None);
        let mut snapshot = example_pod_security(false);
        let headed = admit(route, &body, &snapshot, None, &NoResolver).unwrap();
        assert!(!headed.allowed);
        let reversed = admit(route, &body, &example_pod_security(true), None, &NoResolver).unwrap();
        assert_eq!(reversed.body, headed.body);

        let req = review::decode(&body).unwrap().request;
        let ctx = req.json_context(Builtins::default());
        let input = req.match_input();
        let env = EvalEnv {
            resolver: &NoResolver,
            exceptions: &[],
            rule_values: &(),
        };
        let mut failing = 0;
        for (policy, heads) in snapshot.policies.iter().zip(&snapshot.denial_heads) {
            let response =
                validate::evaluate_policy_observed(policy, &req, &input, &ctx, &env, None, None);
            for rule in response
                .rules
                .iter()
                .filter(|r| r.status == RuleStatus::Fail)
            {
                failing += 1;
                let index = policy
                    .rules
                    .iter()
                    .position(|r| r.name == rule.name)
                    .unwrap();
                assert!(
                    heads.started(index, &rule.message),
                    "{}/{}: no head starts {:?}",
                    policy.name,
                    rule.name,
                    rule.message
                );
            }
        }
        assert_eq!(failing, 17);

        for heads in &mut snapshot.denial_heads {
            *heads = DenialHeads::default();
        }
        let written = admit(route, &body, &snapshot, None, &NoResolver).unwrap();
        assert_eq!(
            String::from_utf8(headed.body).unwrap(),
            String::from_utf8(written.body).unwrap()
        );
    }
}
