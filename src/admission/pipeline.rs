//! The admission pipeline: a review's body and a policy snapshot in, the
//! encoded AdmissionReview answer out. Match, classic validate, CEL
//! validating policies, mutate (classic, then MutatingPolicies), the
//! verdict and the denial text run here, independent of the transport, so
//! that the server, benches and fuzz targets drive the same code.

use super::evaluation::webhook::{self, CelResponses, ImageResponses};
use super::policies::Snapshot;
use super::policy_validation;
use super::reports::{self, AdmissionResults, PolicyAt};
use super::review::{self, ReviewError};
use super::update_requests::{self, UpdateRequestSpec};
use super::verdict::{self, DenialHeads};
use crate::context::ClusterView;
use crate::engine::cel::constraints_select;
use crate::engine::{PolicyResponse, Request};
use crate::json_doc::View;
use crate::matching::MatchInput;
use crate::policy::CompiledPolicy;
use crate::policy::cel_policy::CompiledValidatingPolicy;
use crate::policy::compile::FailurePolicy;
use std::time::Instant;

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
    /// Kyverno's admission Events of the review (validating routes).
    pub events: Vec<super::events::AdmissionEvent>,
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
    let mut events = Vec::new();
    let verdict = match webhook {
        Webhook::Validate(failure_policy) => {
            let cells =
                snapshot
                    .rule_table
                    .resource(&req.object_kind.kind, namespace, &req.operation);
            let webhook::Validated {
                selected,
                policies,
                responses,
                cel: (cel_indexes, cel),
                images,
                input,
            } = webhook::validate(
                snapshot,
                failure_policy,
                req,
                deadline,
                view,
                |index, rule, status, elapsed| cells.record(index, rule, status, elapsed),
            );
            background = snapshot.background_indexes(failure_policy);
            generating = snapshot.generating_on(failure_policy);
            let verdict = verdict::decide(&policies, &responses, &cel, &images, req);
            // kyverno-compat: dry runs get their events too.
            events = super::events::for_validation(
                req,
                policies.iter().map(|(p, _)| *p),
                &responses,
                &cel,
                !verdict.allowed,
            );
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
            webhook::mutate(
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
        events,
        body: verdict::encode(&review.uid, &verdict),
        kind: req.object_kind.kind.clone(),
        namespace: namespace.to_string(),
        operation: req.operation.clone(),
        allowed: verdict.allowed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::policies::{PolicySet, load_file};
    use crate::context::NoResolver;
    use crate::engine::json_context::Builtins;
    use crate::engine::{EvalEnv, RuleStatus, validate};
    use std::path::Path;

    /// The AdmissionReview of `operation` on a core object (the kind and
    /// namespace its own; its resource the kind's plural).
    fn review_of(
        operation: &str,
        object: serde_json::Value,
        old: Option<serde_json::Value>,
    ) -> Vec<u8> {
        let kind = object["kind"].as_str().unwrap_or_default().to_string();
        let namespace = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string();
        serde_json::to_vec(&serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "operation": operation,
                "kind": {"group": "", "version": "v1", "kind": kind},
                "resource": {"group": "", "version": "v1",
                    "resource": crate::kinds::plural("v1", &kind)},
                "namespace": namespace, "userInfo": {"username": "u"},
                "object": object, "oldObject": old}
        }))
        .unwrap()
    }

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
            review_of(
                "CREATE",
                serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "p", "namespace": "default"},
                    "spec": {"containers": [{"name": "c", "image": image}]}}),
                None,
            )
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
            let body = review_of("UPDATE", cm(labels), Some(cm(old_labels)));
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
    /// What is tested is what serves: a Pod Security exclusion exempts
    /// the Pods it covers at admission as it does in `gavel test` (the
    /// same evaluation of the same snapshot), for every conformance case
    /// of the Pod Security subrule suites.
    #[test]
    fn pod_security_exclusions_exempt_at_admission_as_offline() {
        use crate::admission::evaluation::{self, Inputs, Mode};
        struct Plain;
        impl Inputs for Plain {
            fn resolver(&self) -> &dyn crate::context::Resolver {
                &NoResolver
            }
            fn operation(&self) -> &str {
                "CREATE"
            }
            fn namespace_labels(
                &self,
                _: &str,
            ) -> Option<serde_json::Map<String, serde_json::Value>> {
                None
            }
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/conformance/kyverno-policies/pod-security/subrule/restricted");
        // The corpus sits beside the repository (CI has it).
        let dirs = std::fs::read_dir(&root).expect("../shared/conformance beside the repository");
        let mut compared = 0;
        for dir in dirs.map(|d| d.unwrap().path()) {
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            // Enforced, so that admission's answer shows each verdict.
            let text = std::fs::read_to_string(dir.join(format!("{name}.yaml")))
                .unwrap()
                .replace(
                    "validationFailureAction: Audit",
                    "validationFailureAction: Enforce",
                );
            let snapshot = Snapshot::new(
                crate::admission::policies::load_text("p.yaml", &text).unwrap(),
                1,
            );
            let resources =
                std::fs::read_to_string(dir.join(".kyverno-test/resource.yaml")).unwrap();
            for doc in crate::policy::load::parse_yaml_documents("r.yaml", &resources).unwrap() {
                if doc["kind"] != "Pod" {
                    continue;
                }
                let offline = evaluation::evaluate(&snapshot, &doc, Mode::Apply, &Plain);
                let offline_fail = offline.classic.iter().any(|c| {
                    c.validate
                        .as_ref()
                        .is_some_and(|r| r.rules.iter().any(|r| r.status == RuleStatus::Fail))
                });
                let outcome = admit(
                    Webhook::Validate(None),
                    &review_of("CREATE", doc.clone(), None),
                    &snapshot,
                    None,
                    &NoResolver,
                )
                .unwrap();
                assert_eq!(
                    outcome.allowed, !offline_fail,
                    "{name}/{}: admitted {} offline fail {}",
                    doc["metadata"]["name"], outcome.allowed, offline_fail
                );
                compared += 1;
            }
        }
        assert!(compared >= 4, "{compared}");
    }
}
