//! One evaluation of a resource against a policy set, in Kyverno's phase
//! order, for every caller: the webhook's routes, `gavel test`, `gavel
//! apply` and the background scan. The front ends decode their input and
//! present the answer; which phases run, on which input and in which
//! order is decided here, by [`Mode`], and every difference between the
//! callers is a named branch of it with its `kyverno-compat:` note.
//!
//! The phases (docs/kyverno-semantics.md#mutation-order,
//! docs/kyverno-test-semantics.md#evaluation-phases):
//!
//! 1. classic mutate, each policy on the previous one's output;
//! 2. MutatingAdmissionPolicies, each on the previous output;
//! 3. MutatingPolicies, chained or on the same input ([`Chaining`]);
//! 4. classic verifyImages, validate and generate;
//! 5. ValidatingPolicies and GeneratingPolicies;
//! 6. ImageValidatingPolicies;
//! 7. (`gavel test` only) MutatingPolicies' targets and DeletingPolicies.
//!
//! The webhook splits them over its two routes ([`webhook`]): 1 and 3 on
//! the mutate route, 4-6 on the validate route (the API server calls the
//! validating webhooks with the mutated object), and generate's work is
//! left as UpdateRequests.
// kyverno-compat: at admission the API server evaluates
// MutatingAdmissionPolicies itself (they are Kubernetes' own kind), so
// only the offline callers run phase 2, as Kyverno's CLI does. Offline callers run them all in one call of
//! [`evaluate`]. Every caller evaluates through the compiled plan of its
//! snapshot (`engine::plan`), so what the corpora test is what serves.

mod cel;
mod classic;
pub mod mutating;
pub mod webhook;

pub use mutating::{Chaining, Mutated, MutatingPhase, Visit};

use super::policies::Snapshot;
use crate::context::Resolver;
use crate::engine::json_context::{Builtins, JsonContext};
use crate::engine::{PolicyResponse, Request, RuleValues};
use crate::matching::UserInfo;
use crate::policy::CompiledPolicy;
use crate::policy::cel_policy::EvaluationMode;
use serde_json::{Map, Value};

/// Which of Kyverno's callers an offline evaluation stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `kyverno test`. `default_run` is the run without a
    /// `results[].operation`: DeletingPolicies, not admission-driven,
    /// answer in that run only.
    Test { default_run: bool },
    /// `kyverno apply`.
    Apply,
    /// The reports controller's background scan: the validation of
    /// `background: true` policies on an existing resource, as CREATE.
    BackgroundScan,
}

/// Where in the phase order classic validation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClassicValidation {
    /// After classic mutate, before the CEL mutations.
    // kyverno-compat: `kyverno test` validates the classic policies on the
    // resource their own mutate rules left, before the admission policies
    // and MutatingPolicies run.
    AfterClassicMutate,
    /// After every mutation, as the validating webhook sees the object.
    AfterAllMutations,
}

/// The resource an ImageValidatingPolicy sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ImageInput {
    /// The resource as the caller gave it.
    // kyverno-compat: Kyverno's CLI (`kyverno test`) gives
    // ImageValidatingPolicies the resource as the test wrote it.
    AsWritten,
    Mutated,
}

impl Mode {
    /// Whether the mutating phases run (the scan only validates).
    fn mutates(self) -> bool {
        self != Mode::BackgroundScan
    }

    /// How MutatingPolicies chain offline.
    fn chaining(self) -> Chaining {
        match self {
            // kyverno-compat: `kyverno apply` and `kyverno test` evaluate
            // every MutatingPolicy on the same incoming resource; the last
            // one that applied gives the result.
            Mode::Test { .. } | Mode::Apply => Chaining::SameInput,
            Mode::BackgroundScan => Chaining::Chained,
        }
    }

    fn classic_validation(self) -> ClassicValidation {
        match self {
            Mode::Test { .. } => ClassicValidation::AfterClassicMutate,
            Mode::Apply | Mode::BackgroundScan => ClassicValidation::AfterAllMutations,
        }
    }

    fn image_input(self) -> ImageInput {
        match self {
            Mode::Test { .. } => ImageInput::AsWritten,
            Mode::Apply | Mode::BackgroundScan => ImageInput::Mutated,
        }
    }

    /// Whether the classic policy takes part in the validation phase.
    pub fn validates_classic(self, policy: &CompiledPolicy) -> bool {
        match self {
            Mode::BackgroundScan => policy.background && policy.has_validate(),
            Mode::Test { .. } | Mode::Apply => true,
        }
    }

    /// Whether generate rules and GeneratingPolicies are evaluated (offline,
    /// they answer as results; the scan leaves generation to its
    /// controller).
    fn generates(self) -> bool {
        self != Mode::BackgroundScan
    }

    /// Whether a ValidatingPolicy is evaluated on a Kubernetes resource.
    pub fn validates_with(self, background: bool, mode: EvaluationMode) -> bool {
        match self {
            // kyverno-compat: `kyverno test` gives resources to the
            // policies of the Kubernetes mode only; the others take
            // payloads.
            Mode::Test { .. } => mode == EvaluationMode::Kubernetes,
            Mode::Apply => true,
            Mode::BackgroundScan => background && mode == EvaluationMode::Kubernetes,
        }
    }

    /// Whether an ImageValidatingPolicy is evaluated on a resource.
    pub fn verifies_images_with(self, background: bool, mode: EvaluationMode) -> bool {
        match self {
            Mode::Test { .. } | Mode::Apply => true,
            Mode::BackgroundScan => background && mode == EvaluationMode::Kubernetes,
        }
    }

    /// Whether `kyverno test`'s own results (MutatingPolicies' targets,
    /// DeletingPolicies) are made.
    fn test_only_results(self) -> (bool, bool) {
        match self {
            Mode::Test { default_run } => (true, default_run),
            Mode::Apply | Mode::BackgroundScan => (false, false),
        }
    }
}

/// What the caller knows besides the policies and the resource: the
/// run's operation and user, namespaces, values files, the cluster's
/// objects.
pub trait Inputs {
    /// Where context lookups go.
    fn resolver(&self) -> &dyn Resolver;
    /// The operation the run evaluates as.
    fn operation(&self) -> &str;
    /// The requesting user.
    fn user(&self) -> UserInfo {
        UserInfo::default()
    }
    /// The labels of namespace `namespace`, for namespaceSelectors.
    fn namespace_labels(&self, namespace: &str) -> Option<Map<String, Value>>;
    /// The Namespace object CEL's `namespaceObject` reads.
    fn namespace_object(&self, _namespace: &str) -> Option<&Value> {
        None
    }
    /// An operation of `policy`'s own for `resource` (a values file's
    /// per-resource `request.operation`).
    fn policy_operation(&self, _policy: &CompiledPolicy, _resource: &Value) -> Option<&str> {
        None
    }
    /// Whether `policy_operation` or `fill_context` differ per policy
    /// (then each classic policy gets a context of its own).
    fn varies_by_policy(&self) -> bool {
        false
    }
    /// Sets a values file's entries into the context of `policy` (None:
    /// the context every policy shares) for `resource`.
    fn fill_context(
        &self,
        _ctx: &mut JsonContext,
        _policy: Option<&CompiledPolicy>,
        _resource: &Value,
    ) {
    }
    /// A values file's rule values for `policy`.
    fn rule_values(&self, _policy: &CompiledPolicy) -> Box<dyn RuleValues + '_> {
        Box::new(())
    }
    /// The objects MutatingPolicies' targets are chosen from (`gavel
    /// test`'s `targetResources`).
    fn targets(&self) -> &[Value] {
        &[]
    }
}

/// A classic policy's responses, one per phase it took part in.
#[derive(Default)]
pub struct ClassicResponses<'s> {
    /// Its mutate rules' response, for a policy that has some.
    pub mutate: Option<PolicyResponse<'s>>,
    /// The resource after its mutate rules (changed or not), for a policy
    /// that has some.
    pub patched: Option<Value>,
    /// The verification phase of its verifyImages rules.
    pub verify: Option<PolicyResponse<'s>>,
    /// Its validate rules' response (every rule type that answers in the
    /// validation phase); None when the mode leaves the policy out.
    pub validate: Option<PolicyResponse<'s>>,
    /// Its generate rules' response, for a policy that has some.
    pub generate: Option<PolicyResponse<'s>>,
}

/// What the policies of a set made of one resource.
pub struct Evaluation<'s> {
    /// Per classic policy of the set, in load order.
    pub classic: Vec<ClassicResponses<'s>>,
    /// Each evaluated MutatingAdmissionPolicy, by index in the set, and
    /// its response (no rules when it did not apply).
    pub admission_mutating: Vec<(usize, PolicyResponse<'s>)>,
    /// The resource after the MutatingAdmissionPolicies.
    pub after_admission_mutating: Value,
    /// Each evaluated MutatingPolicy, as the admission policies.
    pub mutating: Vec<(usize, PolicyResponse<'s>)>,
    /// The resource after every mutation.
    pub mutated: Value,
    /// MutatingPolicies' targets (`gavel test`): one response per policy
    /// with targets.
    pub targets: Vec<PolicyResponse<'s>>,
    /// Each evaluated ValidatingPolicy, by index, and its response.
    pub validating: Vec<(usize, PolicyResponse<'s>)>,
    /// Each GeneratingPolicy, by index, and its response.
    pub generating: Vec<(usize, PolicyResponse<'s>)>,
    /// Each evaluated ImageValidatingPolicy, by index, and its response.
    pub image_validating: Vec<(usize, PolicyResponse<'s>)>,
    /// DeletingPolicies that select the resource (`gavel test`).
    pub deleting: Vec<PolicyResponse<'s>>,
}

/// Evaluates `resource` against `set` as `mode`'s caller does.
pub fn evaluate<'s>(
    set: &'s Snapshot,
    resource: &Value,
    mode: Mode,
    inputs: &dyn Inputs,
) -> Evaluation<'s> {
    let offline = Offline {
        set,
        inputs,
        builtins: Builtins::of(&set.policies),
    };
    let mut classic: Vec<ClassicResponses> = set
        .policies
        .iter()
        .map(|_| ClassicResponses::default())
        .collect();
    let mut current = resource.clone();
    if mode.mutates() {
        current = offline.classic_mutate(&mut classic, current);
    }
    if mode.classic_validation() == ClassicValidation::AfterClassicMutate {
        offline.classic_validate(mode, &mut classic, &current);
    }
    let (mut admission_mutating, mut mutating) = (Vec::new(), Vec::new());
    if mode.mutates() {
        current = offline.mutate_cel(
            &set.admission_mutating,
            Chaining::Chained,
            &mut admission_mutating,
            current,
        );
    }
    let after_admission_mutating = current.clone();
    if mode.mutates() {
        current = offline.mutate_cel(&set.mutating, mode.chaining(), &mut mutating, current);
    }
    if mode.classic_validation() == ClassicValidation::AfterAllMutations {
        offline.classic_validate(mode, &mut classic, &current);
    }
    let (targets_run, deleting_run) = mode.test_only_results();
    let targets = if targets_run {
        offline.mutate_targets(&current)
    } else {
        Vec::new()
    };
    let (validating, generating) = offline.validate_cel(mode, &current);
    let image_input = match mode.image_input() {
        ImageInput::AsWritten => resource,
        ImageInput::Mutated => &current,
    };
    let image_validating = offline.verify_images_cel(mode, image_input);
    let deleting = if deleting_run {
        offline.deleting(resource)
    } else {
        Vec::new()
    };
    Evaluation {
        classic,
        admission_mutating,
        after_admission_mutating,
        mutating,
        mutated: current,
        targets,
        validating,
        generating,
        image_validating,
        deleting,
    }
}

/// The responses of the ValidatingPolicies (and, for JSON, the
/// ImageValidatingPolicies) of evaluation mode `mode` to a payload that is
/// not a Kubernetes resource (`gavel test`'s `jsonPayloads`,
/// `httpPayloads`, `envoyPayloads`).
pub fn evaluate_payload<'s>(
    set: &'s Snapshot,
    document: &Value,
    mode: EvaluationMode,
    resolver: &dyn Resolver,
) -> Vec<PolicyResponse<'s>> {
    cel::payload(set, document, mode, resolver)
}

/// An offline evaluation's set, inputs and the builtins its contexts make.
struct Offline<'s, 'i> {
    set: &'s Snapshot,
    inputs: &'i dyn Inputs,
    builtins: Builtins,
}

impl Offline<'_, '_> {
    /// The request of the run for `object`, as `operation`.
    fn request_as(&self, object: &Value, operation: &str) -> Request {
        let namespace = object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let labels = match namespace {
            "" => None,
            ns => self.inputs.namespace_labels(ns),
        };
        Request::offline(object, operation, self.inputs.user(), labels)
    }

    fn request(&self, object: &Value) -> Request {
        self.request_as(object, self.inputs.operation())
    }
}
