//! Routes and the admission handler, independent of the transport so that
//! benches and tests can drive it without TLS.

use super::policies::Snapshot;
use super::review::{self, ReviewError, Verdict};
use crate::context::NoResolver;
use crate::engine::{EvalEnv, validate};
use crate::policy::compile::FailurePolicy;

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
    if let Some(rest) = path.strip_prefix("/validate") {
        if let Some(p) = with_policy(rest) {
            return Route::Validate(p);
        }
    }
    if let Some(rest) = path.strip_prefix("/mutate") {
        if let Some(p) = with_policy(rest) {
            return Route::Mutate(p);
        }
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
/// policies of `snapshot`.
pub fn admit(route: Route, body: &[u8], snapshot: &Snapshot) -> Result<Outcome, ReviewError> {
    let review = review::decode(body)?;
    let req = &review.request;
    let verdict = match route {
        Route::Validate(failure_policy) => {
            let selected = snapshot.validate_policies(failure_policy);
            let env = EvalEnv {
                resolver: &NoResolver,
                exceptions: &snapshot.exceptions,
                rule_values: &(),
            };
            let ctx = req.json_context(selected.iter().any(|p| p.uses_images));
            let input = req.match_input();
            let responses: Vec<_> = selected
                .iter()
                .map(|p| validate::evaluate_policy_with(p, req, &input, &ctx, &env))
                .collect();
            review::decide(&selected, &responses, req)
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
