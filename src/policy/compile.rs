//! The compile step: a strictly decoded policy document in, an immutable
//! [`CompiledPolicy`] out. Autogen rules are added here, conditions get typed
//! operators, and every `{{ }}` expression is parsed once into an
//! [`ExprCache`] so that evaluation never re-parses policy text.
//!
//! This file compiles a policy and its rules; `validation` the validate
//! checks, `expr_cache` holds the parsed expressions, `rule_kinds` the
//! index of rules by kind, and `exception` compiles PolicyExceptions.

mod exception;
mod expr_cache;
mod rule_kinds;
mod validation;

pub use exception::CompiledException;
pub use expr_cache::{ExprCache, InvalidVariable};
pub use rule_kinds::{Candidate, Candidates, KindMasks, RuleKinds};
pub use validation::{
    FAILED_AT_PATH, ForEach, Pattern, PlanSlot, ValidateCheck, ValidateRule, push_failure_start,
};

use super::ReportMeta;
use super::autogen;
use super::cel_policy::{CompiledNamed, NamedExpression, compile_named};
use super::conditions::Conditions;
use super::deferred_context::DeferredContext;
use super::mutation::{GenerateRule, MutateRule};
use super::types::{ContextEntry, PolicyDoc, Rule};
use crate::matching::{CompiledMatch, MatchInput};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use validation::compile_validation;

#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("policy {policy}: {field}: {message}")]
    Invalid {
        policy: String,
        field: String,
        message: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureAction {
    Audit,
    Enforce,
}

impl FailureAction {
    fn parse(s: &str) -> FailureAction {
        if s.eq_ignore_ascii_case("enforce") {
            FailureAction::Enforce
        } else {
            FailureAction::Audit
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    Fail,
    Ignore,
}

#[derive(Debug, Clone)]
pub enum RuleBody {
    Validate(ValidateRule),
    Mutate(MutateRule),
    Generate(Box<GenerateRule>),
    VerifyImages(Box<super::verify_images::VerifyImagesRule>),
}

#[derive(Debug, Clone)]
pub struct CompiledRule {
    pub name: String,
    /// "validation rule '<name>' passed." ("Validation rule" for CEL and
    /// podSecurity rules, as Kyverno's handlers word them), built once here
    /// rather than for every passing request.
    pub pass_message: String,
    /// "validation rule '<name>' anyPattern[<i>] passed." for each index
    /// of the widest anyPattern in the rule (at its top level or in a
    /// foreach), built once like `pass_message`; empty when it has none.
    /// The text names only the rule and the index.
    pub any_pattern_pass_messages: Box<[String]>,
    /// The start of the message of a failed pattern
    /// ([`push_failure_start`]) of a validate rule whose message reads no
    /// variables, worded once here like `pass_message`; empty for any
    /// other rule, whose failures word it per request.
    pub failure_start: Box<str>,
    /// Kinds the rule can match at all (from `match`); a cheap first filter.
    pub kinds: Option<Vec<String>>,
    pub match_resources: CompiledMatch,
    pub exclude: Option<CompiledMatch>,
    pub context: Vec<ContextEntry>,
    /// Which of `context` each step of the rule loads: Kyverno defers
    /// every entry to its first use.
    pub deferred: DeferredContext,
    /// Preconditions, or the reason they could not be parsed (a rule error).
    pub preconditions: Result<Option<Conditions>, String>,
    /// `celPreconditions`: all must hold for a `validate.cel` rule to apply.
    pub cel_preconditions: Vec<CompiledNamed>,
    pub body: RuleBody,
}

impl CompiledRule {
    pub fn is_validate(&self) -> bool {
        matches!(self.body, RuleBody::Validate(_))
    }

    pub fn is_mutate(&self) -> bool {
        matches!(self.body, RuleBody::Mutate(_))
    }

    pub fn is_generate(&self) -> bool {
        matches!(self.body, RuleBody::Generate(_))
    }

    /// Whether the rule applies to `input`: its kinds, `match` and not
    /// `exclude`.
    pub fn selects(&self, input: &MatchInput) -> bool {
        self.kinds
            .as_ref()
            .is_none_or(|k| k.iter().any(|k| k == input.kind))
            && self.match_resources.matches(input)
            && !self.exclude.as_ref().is_some_and(|e| e.excludes(input))
    }

    /// A validate rule whose failures are reported, not enforced.
    pub fn is_audit(&self) -> bool {
        match &self.body {
            RuleBody::Validate(v) => v.failure_action == FailureAction::Audit,
            RuleBody::VerifyImages(v) => v.audit,
            _ => false,
        }
    }

    /// Whether the rule runs in the validation phase: a validate rule, or
    /// a verifyImages rule that checks digests or requires verification.
    pub fn validates(&self) -> bool {
        match &self.body {
            RuleBody::Validate(_) => true,
            RuleBody::VerifyImages(v) => v.has_checks(),
            _ => false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyScope {
    Cluster,
    Namespaced,
}

/// A policy's number in a plan: `plan` is the plan's id, so that a
/// policy copied into another set is not read by this plan's number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicySlot {
    pub plan: u64,
    pub index: u32,
}

/// An immutable, ready-to-evaluate policy.
#[derive(Debug, Clone)]
pub struct CompiledPolicy {
    pub name: String,
    /// The namespace of a namespaced `Policy`; `None` for a ClusterPolicy.
    pub namespace: Option<String>,
    /// What [`CompiledPolicy::qualified_name`] returns, built once.
    qualified: String,
    pub scope: PolicyScope,
    pub annotations: BTreeMap<String, String>,
    /// The report metadata of its annotations, read once here (scored,
    /// severity, category).
    pub report: ReportMeta,
    pub failure_policy: FailurePolicy,
    pub background: bool,
    pub admission: bool,
    pub emit_warning: bool,
    /// `webhookTimeoutSeconds`: the registered webhook's timeout.
    pub webhook_timeout_seconds: Option<i32>,
    /// `applyRules: One`: stop after the first rule that applied.
    pub apply_one: bool,
    /// Declared rules followed by their autogen variants.
    pub rules: Vec<CompiledRule>,
    /// Which rules can match a kind, apart from the rules themselves.
    pub rule_kinds: RuleKinds,
    /// Where the policy set's plan (`engine::plan`) numbered this policy,
    /// when it did: the plan then holds its candidate rules per kind.
    pub plan_slot: Option<PolicySlot>,
    pub exprs: Arc<ExprCache>,
    /// Whether any rule reads the `images` builtin variable, which costs a
    /// parse of every container image to provide.
    pub uses_images: bool,
    /// Whether any rule may evaluate CEL (`validate.cel`), which reads the
    /// request's CEL variables: a request context makes them up front only
    /// for a set that has such a rule.
    pub uses_cel: bool,
    /// Whether any rule reads `element<N>` or `elementIndex<N>` (nested foreach).
    pub uses_numbered_elements: bool,
}

impl CompiledPolicy {
    /// `ns/name` for a namespaced Policy, `name` otherwise, as Kyverno reports it.
    pub fn qualified_name(&self) -> &str {
        &self.qualified
    }

    pub fn has_validate(&self) -> bool {
        self.rules.iter().any(CompiledRule::is_validate)
    }

    /// Whether the policy has a validation phase ([`CompiledRule::validates`]).
    pub fn has_validation_phase(&self) -> bool {
        self.rules.iter().any(CompiledRule::validates)
    }

    /// Whether the policy has verifyImages rules (their verification phase).
    pub fn has_verify_images(&self) -> bool {
        self.rules
            .iter()
            .any(|r| matches!(r.body, RuleBody::VerifyImages(_)))
    }

    /// The first rule whose `validate.cel` has a paramKind. Params are
    /// served from files offline; the server has no store of them yet.
    pub fn parameterised_rule(&self) -> Option<&str> {
        self.rules.iter().find_map(|r| match &r.body {
            RuleBody::Validate(ValidateRule {
                check: ValidateCheck::Cel(checks),
                ..
            }) if checks.params.is_some() => Some(r.name.as_str()),
            _ => None,
        })
    }

    /// Whether the server can enforce this policy: a reason when not.
    pub fn check_servable(&self) -> Result<(), String> {
        match self.parameterised_rule() {
            Some(rule) => Err(format!(
                "policy {} rule {rule}: unsupported: validate.cel.paramKind in the server \
                 (params are served from files by gavel test and gavel apply)",
                self.qualified_name()
            )),
            None => Ok(()),
        }
    }

    /// Whether the engine evaluates every rule of this policy on a request
    /// held as a decoded document without converting it (see
    /// [`ValidateCheck::reads_documents`]); the webhook then decodes
    /// reviews into documents.
    pub fn reads_documents(&self) -> bool {
        !self.uses_images
            && self.rules.iter().all(|r| match &r.body {
                RuleBody::Validate(v) => v.check.reads_documents(),
                _ => false,
            })
    }

    pub fn has_mutate(&self) -> bool {
        self.rules.iter().any(CompiledRule::is_mutate)
    }

    pub fn has_generate(&self) -> bool {
        self.rules.iter().any(CompiledRule::is_generate)
    }

    /// Whether a rule mutates existing resources (`mutate.targets`).
    pub fn has_mutate_existing(&self) -> bool {
        self.rules
            .iter()
            .any(|r| matches!(&r.body, RuleBody::Mutate(m) if !m.targets.is_empty()))
    }

    /// Whether admission leaves background work (generate, mutate existing).
    pub fn has_background_work(&self) -> bool {
        self.has_generate() || self.has_mutate_existing()
    }

    pub fn compile(doc: &PolicyDoc) -> Result<CompiledPolicy, CompileError> {
        let name = doc.metadata.name.clone();
        let invalid = |field: String, message: String| CompileError::Invalid {
            policy: name.clone(),
            field,
            message,
        };
        let scope = if doc.kind == "Policy" {
            PolicyScope::Namespaced
        } else {
            PolicyScope::Cluster
        };
        let spec = &doc.spec;
        if spec.rules.is_empty() {
            return Err(invalid(
                "spec.rules".into(),
                "a policy needs at least one rule".into(),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for (i, r) in spec.rules.iter().enumerate() {
            if !seen.insert(r.name.as_str()) {
                return Err(invalid(
                    format!("spec.rules[{i}].name"),
                    format!("Duplicate rule name: {:?}", r.name),
                ));
            }
        }
        let policy_action =
            FailureAction::parse(spec.validation_failure_action.as_deref().unwrap_or("Audit"));
        let failure_policy = spec
            .webhook_configuration
            .as_ref()
            .and_then(|w| w.failure_policy.as_deref())
            .or(spec.failure_policy.as_deref())
            .map(|f| {
                if f == "Ignore" {
                    FailurePolicy::Ignore
                } else {
                    FailurePolicy::Fail
                }
            })
            .unwrap_or(FailurePolicy::Fail);

        let mut exprs = ExprCache::default();
        let mut rules = Vec::new();
        let mut uses_images = false;
        let mut uses_numbered_elements = false;
        let declared = spec
            .rules
            .iter()
            .filter(|r| !r.name.starts_with("autogen-"));
        let generated = autogen::generate(doc);
        for (i, rule) in declared.chain(generated.iter()).enumerate() {
            let field = format!("spec.rules[{i}]");
            let raw = serde_json::to_value(rule).unwrap_or(Value::Null);
            let text = raw.to_string();
            uses_images |= text.contains("images");
            uses_numbered_elements |= text.match_indices("element").any(|(i, _)| {
                text[i + 7..]
                    .trim_start_matches("Index")
                    .starts_with(|c: char| c.is_ascii_digit())
            });
            // kyverno-compat: Kyverno's policy validation substitutes every
            // variable of a rule and refuses the policy on any error but a
            // missing key; here, a variable that does not parse.
            if let Some(bad) = exprs.add_all_variables(&raw).first() {
                return Err(invalid(
                    field,
                    format!(
                        "policy contains invalid variables: variable substitution failed for \
                         rule {}: failed to resolve {} at path {}: invalid JMESPath query {}: {}",
                        rule.name, bad.expression, bad.path, bad.expression, bad.error
                    ),
                ));
            }
            let mut compiled = compile_rule(rule, &field, policy_action, &mut exprs)
                .map_err(|m| invalid(field.clone(), m))?;
            match &mut compiled.body {
                RuleBody::Generate(g) if g.spec.generate_existing.is_none() => {
                    g.generate_existing = spec.generate_existing == Some(true)
                        || spec.generate_existing_on_policy_update == Some(true);
                }
                RuleBody::Mutate(m) if !m.targets.is_empty() => {
                    m.on_policy_update =
                        m.on_policy_update.or(spec.mutate_existing_on_policy_update);
                }
                _ => {}
            }
            rules.push(compiled);
        }
        let namespace = (scope == PolicyScope::Namespaced).then(|| {
            doc.metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into())
        });
        Ok(CompiledPolicy {
            name: doc.metadata.name.clone(),
            qualified: match &namespace {
                Some(ns) => format!("{ns}/{}", doc.metadata.name),
                None => doc.metadata.name.clone(),
            },
            namespace,
            scope,
            report: ReportMeta::of(&doc.metadata),
            annotations: doc.metadata.annotations.clone(),
            failure_policy,
            background: spec.background.unwrap_or(true),
            admission: spec.admission.unwrap_or(true),
            emit_warning: spec.emit_warning.unwrap_or(false),
            webhook_timeout_seconds: spec.webhook_timeout_seconds,
            apply_one: spec.apply_rules.as_deref() == Some("One"),
            rule_kinds: RuleKinds::of(&rules),
            plan_slot: None,
            uses_cel: rules
                .iter()
                .any(|r| matches!(&r.body, RuleBody::Validate(v) if v.check.evaluates_cel())),
            rules,
            exprs: Arc::new(exprs),
            uses_images,
            uses_numbered_elements,
        })
    }
}

fn compile_rule(
    rule: &Rule,
    field: &str,
    policy_action: FailureAction,
    exprs: &mut ExprCache,
) -> Result<CompiledRule, String> {
    let match_resources =
        CompiledMatch::compile(&rule.match_resources).map_err(|e| format!("match: {e}"))?;
    let exclude = rule
        .exclude
        .as_ref()
        .map(CompiledMatch::compile)
        .transpose()
        .map_err(|e| format!("exclude: {e}"))?;
    let preconditions = rule
        .preconditions
        .as_ref()
        .map(Conditions::parse)
        .transpose();
    let body = if let Some(v) = &rule.validate {
        compile_validation(v, &format!("{field}.validate"), policy_action, exprs)?
    } else if let Some(m) = &rule.mutate {
        RuleBody::Mutate(MutateRule::compile(m).map_err(|e| format!("mutate: {e}"))?)
    } else if let Some(g) = &rule.generate {
        RuleBody::Generate(Box::new(
            GenerateRule::compile(g).map_err(|e| format!("generate: {e}"))?,
        ))
    } else if !rule.verify_images.is_empty() {
        let mut v = super::verify_images::VerifyImagesRule::compile(
            &rule.verify_images,
            rule.image_extractors.as_ref(),
        )
        .map_err(|e| format!("{field}.{e}"))?;
        let action = v
            .entries
            .iter()
            .find_map(|e| e.failure_action.as_deref())
            .map_or(policy_action, FailureAction::parse);
        v.audit = action == FailureAction::Audit;
        RuleBody::VerifyImages(Box::new(v))
    } else {
        return Err("a rule needs one of validate, mutate, generate or verifyImages".into());
    };
    for (i, c) in rule.context.iter().enumerate() {
        check_context_entry(c).map_err(|m| format!("context[{i}]: {m}"))?;
    }
    let cel_preconditions = rule
        .cel_preconditions
        .iter()
        .map(|c| serde_json::from_value::<NamedExpression>(c.clone()).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()
        .and_then(|list| compile_named(&list, "celPreconditions"))
        .map_err(|e| format!("celPreconditions: {e}"))?;
    Ok(CompiledRule {
        kinds: match_resources.possible_kinds(),
        name: rule.name.clone(),
        pass_message: pass_message(&rule.name, &body),
        any_pattern_pass_messages: any_pattern_pass_messages(&rule.name, &body),
        failure_start: failure_start(&rule.name, &body),
        match_resources,
        exclude,
        context: rule.context.clone(),
        deferred: DeferredContext::of(rule),
        preconditions,
        cel_preconditions,
        body,
    })
}

/// A passing validate rule's message, as Kyverno's handlers word it: the
/// CEL and podSecurity handlers capitalise it, the pattern, deny and
/// foreach handler does not.
fn pass_message(rule: &str, body: &RuleBody) -> String {
    match body {
        RuleBody::Validate(v)
            if matches!(
                v.check,
                ValidateCheck::Cel(_) | ValidateCheck::PodSecurity(_)
            ) =>
        {
            format!("Validation rule '{rule}' passed.")
        }
        _ => format!("validation rule '{rule}' passed."),
    }
}

/// [`CompiledRule::failure_start`].
fn failure_start(rule: &str, body: &RuleBody) -> Box<str> {
    match body {
        RuleBody::Validate(v) if !v.message_has_variables => {
            let mut out = String::new();
            push_failure_start(&mut out, v.message.as_deref().unwrap_or_default(), rule);
            out.into()
        }
        _ => "".into(),
    }
}

/// [`CompiledRule::any_pattern_pass_messages`].
fn any_pattern_pass_messages(rule: &str, body: &RuleBody) -> Box<[String]> {
    let widest = match body {
        RuleBody::Validate(v) => widest_any_pattern(&v.check),
        _ => 0,
    };
    (0..widest)
        .map(|i| format!("validation rule '{rule}' anyPattern[{i}] passed."))
        .collect()
}

/// The most alternatives of an anyPattern in `check` and its foreach entries.
fn widest_any_pattern(check: &ValidateCheck) -> usize {
    match check {
        ValidateCheck::AnyPattern(alternatives) => alternatives.len(),
        ValidateCheck::Foreach(entries) => entries
            .iter()
            .map(|e| widest_any_pattern(&e.check))
            .max()
            .unwrap_or(0),
        _ => 0,
    }
}

fn check_context_entry(c: &ContextEntry) -> Result<(), String> {
    let sources = [
        c.config_map.is_some(),
        c.api_call.is_some(),
        c.variable.is_some(),
        c.image_registry.is_some(),
        c.global_reference.is_some(),
    ];
    match sources.iter().filter(|s| **s).count() {
        1 => Ok(()),
        0 => Err(format!("context entry {:?} needs a source", c.name)),
        _ => Err(format!(
            "context entry {:?} has more than one source",
            c.name
        )),
    }
}
