//! The loop of a CEL mutating phase (MutatingAdmissionPolicies or
//! MutatingPolicies), shared by the webhook's mutate route and the
//! offline evaluation: each policy on the previous one's output
//! ([`Chaining::Chained`]) or every policy on the phase's input
//! ([`Chaining::SameInput`]).

use crate::context::Resolver;
use crate::engine::cel::{CelRequest, MutatingOutcome, evaluate_mutating_policy};
use crate::engine::{PolicyResponse, Request};
use crate::policy::cel_policy::CompiledMutatingPolicy;
use serde_json::Value;
use std::time::{Duration, Instant};

/// How the policies of a mutating phase see the resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chaining {
    /// Each policy sees the previous one's output.
    Chained,
    /// Every policy sees the phase's incoming resource; the last one that
    /// changed it gives the result.
    // kyverno-compat: `kyverno apply` and `kyverno test` evaluate
    // MutatingPolicies this way.
    SameInput,
}

/// Whether the caller wants a policy evaluated (a deadline may have passed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visit {
    Evaluate,
    Skip,
}

/// The policies of a mutating phase, how they chain, and the resolver
/// their lookups go to.
#[derive(Clone, Copy)]
pub struct MutatingPhase<'p, 'r> {
    pub policies: &'p [CompiledMutatingPolicy],
    pub chaining: Chaining,
    pub resolver: &'r dyn Resolver,
}

/// One evaluated policy of a mutating phase, handed to the caller.
pub struct Mutated<'p, 'a> {
    /// The policy's index in the phase's list.
    pub index: usize,
    pub policy: &'p CompiledMutatingPolicy,
    /// The object the policy saw.
    pub input: &'a Value,
    /// No rules when the policy does not apply; otherwise one, named after
    /// the policy.
    pub response: PolicyResponse<'p>,
    /// The policy's output, when it applied (possibly unchanged).
    pub patched: Option<&'a Value>,
    pub elapsed: Duration,
}

/// Runs MutatingPolicies (or MutatingAdmissionPolicies) over `start`.
/// `next_request` makes the request for a changed object (the webhook
/// keeps the review's; the CLI builds one as for a new resource), `bind`
/// makes a request's CEL variables (the caller decides the
/// Namespace object); they are bound again only after a change. `before`
/// may skip a policy; `after` sees each evaluated one. Returns the request
/// with the phase's result: chained, the object after the last change;
/// same input, the last applied policy's object (None when none applied).
pub fn mutating_policies<'p>(
    phase: MutatingPhase<'p, '_>,
    start: &Request,
    next_request: impl Fn(&Request, Value) -> Request,
    bind: impl Fn(&Request) -> CelRequest<'static>,
    mut before: impl FnMut(usize, &'p CompiledMutatingPolicy) -> Visit,
    mut after: impl FnMut(Mutated<'p, '_>),
) -> Option<Request> {
    let MutatingPhase {
        policies,
        chaining,
        resolver,
    } = phase;
    let mut current: Option<Request> = None;
    let mut last_change: Option<Value> = None;
    let mut input: Option<CelRequest> = None;
    for (index, policy) in policies.iter().enumerate() {
        if before(index, policy) == Visit::Skip {
            continue;
        }
        let req_now = match chaining {
            Chaining::Chained => current.as_ref().unwrap_or(start),
            Chaining::SameInput => start,
        };
        let bound = input.get_or_insert_with(|| bind(req_now));
        let started = Instant::now();
        let MutatingOutcome { response, patched } =
            evaluate_mutating_policy(policy, req_now, bound, resolver);
        let elapsed = started.elapsed();
        after(Mutated {
            index,
            policy,
            input: req_now.object.value(),
            response,
            patched: patched.as_ref(),
            elapsed,
        });
        // Chained: what changed feeds the next policy. Same input: the
        // last policy that applied gives the result, changed or not.
        match (patched, chaining) {
            (Some(p), Chaining::Chained) if &p != req_now.object.value() => {
                current = Some(next_request(req_now, p));
                input = None;
            }
            (Some(p), Chaining::SameInput) => last_change = Some(p),
            _ => {}
        }
    }
    match chaining {
        Chaining::Chained => current,
        Chaining::SameInput => last_change.map(|object| next_request(start, object)),
    }
}
