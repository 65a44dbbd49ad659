//! Routes and the admission handler, independent of the transport so that
//! benches and tests can drive it without TLS.

use super::policies::Snapshot;
use super::review::{self, ReviewError, Verdict};
use crate::context::ClusterView;
use crate::engine::{EvalEnv, PolicyResponse, RuleResponse, RuleStatus, validate};
use crate::policy::compile::FailurePolicy;
use crate::policy::{CompiledPolicy, RuleBody};
use std::time::{Duration, Instant};

/// Largest AdmissionReview body accepted (the API server's own limit is 3 MiB).
pub const MAX_BODY: usize = 3 * 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `/validate`, or `/validate/fail|ignore` for the policies of one failurePolicy.
    Validate(Option<FailurePolicy>),
    Mutate(Option<FailurePolicy>),
    Liveness,
    Readiness,
    Metrics,
    NotFound,
}

pub fn route(path: &str) -> Route {
    let with_policy = |rest: &str| match rest {
        "" => Some(None),
        "/fail" => Some(Some(FailurePolicy::Fail)),
        "/ignore" => Some(Some(FailurePolicy::Ignore)),
        _ => None,
    };
    if let Some(rest) = path.strip_prefix("/validate")
        && let Some(p) = with_policy(rest)
    {
        return Route::Validate(p);
    }
    if let Some(rest) = path.strip_prefix("/mutate")
        && let Some(p) = with_policy(rest)
    {
        return Route::Mutate(p);
    }
    match path {
        "/health/liveness" => Route::Liveness,
        "/health/readiness" => Route::Readiness,
        "/metrics" => Route::Metrics,
        _ => Route::NotFound,
    }
}

/// What the handler learned, for metrics and logs.
pub struct Outcome {
    pub body: Vec<u8>,
    pub kind: String,
    pub namespace: String,
    pub operation: String,
    pub allowed: bool,
}

/// Answers one review on `route` (a Validate or Mutate route) with the
/// policies of `snapshot`, recording each rule result in the snapshot's
/// rule table. A policy reached after `deadline` is not evaluated: it
/// answers an error, which its failurePolicy turns into a denial (Fail) or
/// nothing (Ignore).
pub fn admit(
    route: Route,
    body: &[u8],
    snapshot: &Snapshot,
    deadline: Option<Instant>,
    view: &dyn ClusterView,
) -> Result<Outcome, ReviewError> {
    let mut review = review::decode(body)?;
    if snapshot.needs_namespace_labels {
        review.request.namespace_labels = match review.request.namespace() {
            "" => None,
            ns => view.namespace_labels(ns),
        };
    }
    let req = &review.request;
    let verdict = match route {
        Route::Validate(failure_policy) => {
            let selected = snapshot.validate_indexes(failure_policy);
            let env = EvalEnv {
                resolver: view,
                exceptions: &snapshot.exceptions,
                rule_values: &(),
            };
            let policies: Vec<&CompiledPolicy> =
                selected.iter().map(|&i| &snapshot.policies[i]).collect();
            let ctx = req.json_context(policies.iter().any(|p| p.uses_images));
            let input = req.match_input();
            let cells =
                snapshot
                    .rule_table
                    .resource(&req.gvk.kind, req.namespace(), &req.operation);
            let mut observed: Vec<(usize, Duration)> = Vec::new();
            let mut responses = Vec::with_capacity(policies.len());
            // Advanced by the rule times the engine reports, rather than
            // read again before every policy: the deadline is seconds away
            // and the clock is read once per rule already.
            let mut clock = Instant::now();
            for (&index, policy) in selected.iter().zip(&policies) {
                if deadline.is_some_and(|d| clock >= d) {
                    responses.push(not_evaluated(policy));
                    continue;
                }
                observed.clear();
                let mut observe = |rule: usize, elapsed: Duration| observed.push((rule, elapsed));
                let response = validate::evaluate_policy_observed(
                    policy,
                    req,
                    &input,
                    &ctx,
                    &env,
                    Some(&mut observe),
                );
                for (r, &(rule, elapsed)) in response.rules.iter().zip(&observed) {
                    cells.record(index, rule, r.status, elapsed);
                    clock += elapsed;
                }
                responses.push(response);
            }
            review::decide(&policies, &responses, req)
        }
        // The mutate engine does not exist yet: allowed, no patch (logged at start).
        _ => Verdict {
            allowed: true,
            ..Verdict::default()
        },
    };
    Ok(Outcome {
        body: review::encode(&review.uid, &verdict),
        kind: req.gvk.kind.clone(),
        namespace: req.namespace().to_string(),
        operation: req.operation.clone(),
        allowed: verdict.allowed,
    })
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

    #[test]
    fn routes() {
        assert_eq!(route("/validate"), Route::Validate(None));
        assert_eq!(
            route("/validate/fail"),
            Route::Validate(Some(FailurePolicy::Fail))
        );
        assert_eq!(
            route("/mutate/ignore"),
            Route::Mutate(Some(FailurePolicy::Ignore))
        );
        assert_eq!(route("/validate/other"), Route::NotFound);
        assert_eq!(route("/validatex"), Route::NotFound);
        assert_eq!(route("/health/readiness"), Route::Readiness);
    }
}
