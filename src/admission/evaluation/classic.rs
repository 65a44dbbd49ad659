//! The classic phases of an offline evaluation: mutate, each policy on
//! the previous one's output; then verifyImages, validate and generate.

use super::{ClassicResponses, Mode, Offline};
use crate::engine::generate::generate_policy;
use crate::engine::json_context::JsonContext;
use crate::engine::mutate::mutate_policy;
use crate::engine::validate::{evaluate_policy, verify_policy};
use crate::engine::{EvalEnv, Request};
use crate::policy::CompiledPolicy;
use serde_json::Value;

impl<'s> Offline<'s, '_> {
    /// Runs the mutate rules of every policy that has some, in load order,
    /// each on the previous one's output; returns the result.
    pub(super) fn classic_mutate(
        &self,
        out: &mut [ClassicResponses<'s>],
        mut current: Value,
    ) -> Value {
        for (policy, slot) in self.set.policies.iter().zip(out.iter_mut()) {
            if !policy.has_mutate() {
                continue;
            }
            let req = self.policy_request(policy, &current);
            let ctx = self.context(Some(policy), &req, &current, false);
            let rule_values = self.inputs.rule_values(policy);
            let env = self.env(&*rule_values);
            let outcome = mutate_policy(policy, &req, &ctx, &env);
            if let Some(patched) = outcome.patched {
                current = patched;
            }
            slot.mutate = Some(outcome.response);
            slot.patched = Some(current.clone());
        }
        current
    }

    /// The validation phase of every policy `mode` validates with, on
    /// `resource`: verifyImages' checks, validate, and generate.
    pub(super) fn classic_validate(
        &self,
        mode: Mode,
        out: &mut [ClassicResponses<'s>],
        resource: &Value,
    ) {
        // One request and context for the whole set, as the webhook
        // makes them, unless the caller's values differ per policy.
        let shared = (!self.inputs.varies_by_policy()).then(|| self.request(resource));
        let shared_ctx = shared
            .as_ref()
            .map(|req| self.context(None, req, resource, true));
        for (policy, slot) in self.set.policies.iter().zip(out.iter_mut()) {
            if !mode.validates_classic(policy) {
                continue;
            }
            let own;
            let own_ctx;
            let (req, ctx) = match (&shared, &shared_ctx) {
                (Some(req), Some(ctx)) => (req, ctx),
                _ => {
                    own = self.policy_request(policy, resource);
                    own_ctx = self.context(Some(policy), &own, resource, true);
                    (&own, &own_ctx)
                }
            };
            let rule_values = self.inputs.rule_values(policy);
            let env = self.env(&*rule_values);
            if policy.has_verify_images() {
                slot.verify = Some(verify_policy(policy, req, ctx, &env));
            }
            slot.validate = Some(evaluate_policy(policy, req, ctx, &env));
            if mode.generates() && policy.has_generate() {
                slot.generate = Some(generate_policy(policy, req, ctx, &env));
            }
        }
    }

    /// The request `policy` sees for `object`: the run's, or one with the
    /// operation the caller gives this policy.
    fn policy_request(&self, policy: &CompiledPolicy, object: &Value) -> Request {
        match self.inputs.policy_operation(policy, object) {
            Some(op) => self.request_as(object, op),
            None => self.request(object),
        }
    }

    /// The JSON context of `req` for `policy` (None: the one the set
    /// shares) with the caller's values set in it, and the set's plan
    /// attached when `planned` (the validation phase, as the webhook's).
    fn context<'r>(
        &self,
        policy: Option<&CompiledPolicy>,
        req: &'r Request,
        resource: &Value,
        planned: bool,
    ) -> JsonContext<'r>
    where
        's: 'r,
    {
        let mut ctx = req.json_context(self.builtins);
        if planned {
            ctx.attach_plan(&self.set.plan, req);
        }
        self.inputs.fill_context(&mut ctx, policy, resource);
        ctx
    }

    fn env<'e>(&'e self, rule_values: &'e dyn crate::engine::RuleValues) -> EvalEnv<'e> {
        EvalEnv {
            resolver: self.inputs.resolver(),
            exceptions: &self.set.exceptions,
            rule_values,
        }
    }
}
