//! The webhook's two routes over the phases: the validate route runs
//! classic validate (with verifyImages' checks), ValidatingPolicies and
//! ImageValidatingPolicies on the object the API server sends (already
//! mutated); the mutate route runs classic mutate, then MutatingPolicies,
//! chained. Each policy's rule results are recorded for the snapshot's
//! rule table, and a policy reached after the request's deadline answers
//! an error that its failurePolicy decides.

use super::mutating::{self, Chaining, MutatingPhase, Visit};
use crate::admission::json_text::JsonText;
use crate::admission::policies::Snapshot;
use crate::admission::verdict::{DenialHeads, Verdict};
use crate::cel::Activation;
use crate::context::ClusterView;
use crate::engine::cel::{
    CelRequest, evaluate_image_validating_policy, evaluate_validating_policy_over,
};
use crate::engine::json_context::Builtins;
use crate::engine::mutate::mutate_policy;
use crate::engine::validate::verify_policy_with;
use crate::engine::{EvalEnv, PolicyResponse, Request, RuleResponse, RuleStatus, validate};
use crate::matching::MatchInput;
use crate::patch::json_patch;
use crate::policy::cel_policy::{CompiledImageValidatingPolicy, CompiledValidatingPolicy};
use crate::policy::compile::FailurePolicy;
use crate::policy::{CompiledPolicy, RuleBody};
use std::time::{Duration, Instant};

/// What the validate route's policies answered, for the verdict and the
/// resource's report.
pub struct Validated<'s, 'r> {
    /// The classic policies of the route, by index in the snapshot.
    pub selected: &'s [usize],
    /// Those policies with their denial heads.
    pub policies: Vec<(&'s CompiledPolicy, &'s DenialHeads)>,
    /// One response per classic policy, verifyImages' checks included.
    pub responses: Vec<PolicyResponse<'s>>,
    pub cel: CelResponses<'s>,
    pub images: ImageResponses<'s>,
    /// The request's match input.
    pub input: MatchInput<'r>,
}

/// Runs the validate route of `failure_policy` (None: every policy) on
/// `req`. `record(index, rule, status, elapsed)` sees each rule result
/// with its policy's index in the snapshot's rule table.
pub fn validate<'s, 'r>(
    snapshot: &'s Snapshot,
    failure_policy: Option<FailurePolicy>,
    req: &'r Request,
    deadline: Option<Instant>,
    view: &dyn ClusterView,
    mut record: impl FnMut(usize, usize, RuleStatus, Duration),
) -> Validated<'s, 'r> {
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
            record(index, rule, r.status, elapsed);
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
        |i, status, elapsed| record(snapshot.validating_index(i), 0, status, elapsed),
    );
    let images = validate_images(snapshot, failure_policy, req, cel_input, view);
    Validated {
        selected,
        policies,
        responses,
        cel: (cel_indexes, cel),
        images,
        input,
    }
}

/// A route's ValidatingPolicies, by index in `snapshot.validating`, and
/// their responses.
pub type CelResponses<'s> = (
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
pub type ImageResponses<'s> = Vec<(usize, &'s CompiledImageValidatingPolicy, PolicyResponse<'s>)>;

/// Runs the mutate policies `selected`, in order, each on the previous
/// one's output (docs/kyverno-semantics.md#mutation-order). A policy with a
/// failed rule denies the request under `failurePolicy: Fail`; under Ignore
/// its changes are dropped. The answer carries the JSONPatch from the
/// incoming object to the result.
pub fn mutate(
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
    let ClassicMutation {
        current: start,
        warnings,
        failed,
    } = classic_mutate(snapshot, selected, req, deadline, view, &mut record);
    // Then the MutatingPolicies, each on the previous one's output.
    let failed = std::cell::RefCell::new(failed);
    let phase = MutatingPhase {
        policies: &snapshot.mutating,
        chaining: Chaining::Chained,
        resolver: view,
    };
    let chained = mutating::mutating_policies(
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

/// What the classic mutate phase of the mutate route left.
struct ClassicMutation {
    /// The request with the mutated object; None when nothing changed.
    current: Option<Request>,
    warnings: Vec<String>,
    /// Why policies of failurePolicy Fail failed.
    failed: Vec<String>,
}

/// The mutate route's classic policies `selected`, in order, each on the
/// previous one's output (docs/kyverno-semantics.md#mutation-order). A
/// policy with a failed rule has its changes dropped, and under
/// failurePolicy Fail its failure denies the request.
fn classic_mutate(
    snapshot: &Snapshot,
    selected: &[usize],
    req: &Request,
    deadline: Option<Instant>,
    view: &dyn ClusterView,
    record: &mut impl FnMut(usize, usize, RuleStatus, Duration),
) -> ClassicMutation {
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
    ClassicMutation {
        current,
        warnings,
        failed,
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
