//! The compile step: a strictly decoded policy document in, an immutable
//! [`CompiledPolicy`] out. Autogen rules are added here, conditions get typed
//! operators, and every `{{ }}` expression is parsed once into an
//! [`ExprCache`] so that evaluation never re-parses policy text.

use super::autogen;
use super::cel_policy::{
    CelChecks, CelCompileError, CompiledNamed, NamedExpression, compile_named,
};
use super::conditions::Conditions;
use super::mutation::{GenerateRule, MutateRule};
use super::template;
use super::types::{
    ContextEntry, Deny, ForEachValidation, PodSecurity, PolicyDoc, PolicyExceptionDoc, Rule,
    Validation,
};
use crate::jmespath::{Expression, JmesError, Val};
use crate::kinds::kind_hash;
use crate::matching::CompiledMatch;
use crate::pattern::CompiledPattern;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

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

/// Pre-parsed JMESPath expressions keyed by their source text.
#[derive(Debug, Default)]
pub struct ExprCache {
    exprs: HashMap<String, Expression>,
}

impl ExprCache {
    pub fn get(&self, source: &str) -> Option<&Expression> {
        self.exprs.get(source)
    }

    /// Resolves `source` against `data` with Kyverno's variable semantics,
    /// using the pre-parsed expression; text built at evaluation time (nested
    /// variables) is parsed on the spot.
    pub fn resolve<'a>(&'a self, source: &str, root: Val<'a>) -> Result<Val<'a>, JmesError> {
        match self.exprs.get(source) {
            Some(e) => e.resolve_val(root),
            // The result may borrow the expression's literals: owned here.
            None => Expression::parse(source)?
                .resolve_val(root)
                .map(|v| Val::own(v.into_owned())),
        }
    }

    fn add(&mut self, source: &str) {
        if !self.exprs.contains_key(source) {
            // Unparseable text stays out; evaluation reports the syntax error.
            if let Ok(e) = Expression::parse(source) {
                self.exprs.insert(source.to_string(), e);
            }
        }
    }

    fn add_all_variables(&mut self, v: &Value) {
        match v {
            Value::String(s) => {
                for expr in template::expressions_in(s) {
                    self.add(&expr);
                }
            }
            Value::Array(a) => a.iter().for_each(|x| self.add_all_variables(x)),
            Value::Object(m) => m.iter().for_each(|(k, x)| {
                for expr in template::expressions_in(k) {
                    self.add(&expr);
                }
                self.add_all_variables(x)
            }),
            _ => {}
        }
    }
}

/// A validate pattern: compiled once when it has no variables; otherwise
/// substituted and compiled per evaluation.
#[derive(Debug, Clone)]
pub struct Pattern {
    pub value: Value,
    pub compiled: Option<CompiledPattern>,
}

impl Pattern {
    fn new(value: Value) -> Pattern {
        let compiled = (!template::has_variables(&value)).then(|| CompiledPattern::compile(&value));
        Pattern { value, compiled }
    }
}

#[derive(Debug, Clone)]
pub struct ForEach {
    pub list: String,
    /// `list` parsed, when it holds no `{{ }}` to substitute first.
    pub list_expr: Option<Expression>,
    pub element_scope: Option<bool>,
    pub context: Vec<ContextEntry>,
    pub preconditions: Option<Conditions>,
    pub check: ValidateCheck,
}

#[derive(Debug, Clone)]
pub enum ValidateCheck {
    Pattern(Pattern),
    AnyPattern(Vec<Pattern>),
    Deny(Conditions),
    Foreach(Vec<ForEach>),
    PodSecurity(PodSecurity),
    /// `validate.cel`.
    Cel(Box<CelChecks>),
    /// A validate body gavel cannot evaluate yet; the field path says which.
    Unsupported(String),
}

#[derive(Debug, Clone)]
pub struct ValidateRule {
    pub failure_action: FailureAction,
    pub message: Option<String>,
    /// Whether `message` holds `{{ }}` and must be substituted per request.
    pub message_has_variables: bool,
    pub allow_existing_violations: bool,
    pub check: ValidateCheck,
}

#[derive(Debug, Clone)]
pub enum RuleBody {
    Validate(ValidateRule),
    Mutate(MutateRule),
    Generate(Box<GenerateRule>),
    VerifyImages(Vec<Value>),
}

#[derive(Debug, Clone)]
pub struct CompiledRule {
    pub name: String,
    /// "validation rule '<name>' passed.", built once here rather than for
    /// every passing request.
    pub pass_message: String,
    /// Kinds the rule can match at all (from `match`); a cheap first filter.
    pub kinds: Option<Vec<String>>,
    pub match_resources: CompiledMatch,
    pub exclude: Option<CompiledMatch>,
    pub context: Vec<ContextEntry>,
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

    /// A validate rule whose failures are reported, not enforced.
    pub fn is_audit(&self) -> bool {
        matches!(&self.body, RuleBody::Validate(v) if v.failure_action == FailureAction::Audit)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyScope {
    Cluster,
    Namespaced,
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
    /// `policies.kyverno.io/scored: "false"` turns fail results into warn.
    pub scored: bool,
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
    pub exprs: Arc<ExprCache>,
    /// Whether any rule reads the `images` builtin variable, which costs a
    /// parse of every container image to provide.
    pub uses_images: bool,
    /// Whether any rule reads `element<N>` or `elementIndex<N>` (nested foreach).
    pub uses_numbered_elements: bool,
}

/// The rules that can match a kind, as bit masks over the first 64 rules
/// kept apart from the (large) rules: a request skips the rules of other
/// kinds, typically the autogen rules of a Pod policy, without reading
/// them. A hash match is only a candidate; the rule's kinds still decide.
#[derive(Debug, Clone, Default)]
pub struct RuleKinds {
    /// Rules without a kinds list (any kind).
    any: u64,
    by_kind: Box<[(u64, u64)]>,
    /// More than 64 rules: no index, every rule is a candidate.
    unindexed: bool,
}

impl RuleKinds {
    fn of(rules: &[CompiledRule]) -> RuleKinds {
        if rules.len() > 64 {
            return RuleKinds {
                unindexed: true,
                ..RuleKinds::default()
            };
        }
        let mut any = 0;
        let mut by_kind: Vec<(u64, u64)> = Vec::new();
        for (i, rule) in rules.iter().enumerate() {
            let bit = 1u64 << i;
            match &rule.kinds {
                None => any |= bit,
                Some(kinds) => {
                    for k in kinds {
                        let h = kind_hash(k);
                        match by_kind.iter_mut().find(|(x, _)| *x == h) {
                            Some((_, mask)) => *mask |= bit,
                            None => by_kind.push((h, bit)),
                        }
                    }
                }
            }
        }
        RuleKinds {
            any,
            by_kind: by_kind.into_boxed_slice(),
            unindexed: false,
        }
    }

    /// The candidate rules for a kind with hash `hash`, in order.
    pub fn candidates(&self, hash: u64, rule_count: usize) -> Candidates {
        if self.unindexed {
            return Candidates {
                mask: 0,
                unindexed: 0..rule_count,
            };
        }
        let mask = self
            .by_kind
            .iter()
            .filter(|(h, _)| *h == hash)
            .fold(self.any, |m, (_, mask)| m | mask);
        Candidates {
            mask,
            unindexed: 0..0,
        }
    }
}

/// Indexes of candidate rules, in order; its exact length lets a policy's
/// response be allocated once.
#[derive(Debug, Clone)]
pub struct Candidates {
    mask: u64,
    /// Every rule, when the policy has too many to index.
    unindexed: std::ops::Range<usize>,
}

impl Iterator for Candidates {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if self.mask == 0 {
            return self.unindexed.next();
        }
        let i = self.mask.trailing_zeros() as usize;
        self.mask &= self.mask - 1;
        Some(i)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.mask.count_ones() as usize + self.unindexed.len();
        (n, Some(n))
    }
}

impl ExactSizeIterator for Candidates {}

impl CompiledPolicy {
    /// `ns/name` for a namespaced Policy, `name` otherwise, as Kyverno reports it.
    pub fn qualified_name(&self) -> &str {
        &self.qualified
    }

    pub fn has_validate(&self) -> bool {
        self.rules.iter().any(CompiledRule::is_validate)
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

    pub fn has_mutate(&self) -> bool {
        self.rules.iter().any(CompiledRule::is_mutate)
    }

    pub fn has_generate(&self) -> bool {
        self.rules.iter().any(CompiledRule::is_generate)
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
            exprs.add_all_variables(&raw);
            rules.push(
                compile_rule(rule, &field, policy_action, &mut exprs)
                    .map_err(|m| invalid(field.clone(), m))?,
            );
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
            scored: doc
                .metadata
                .annotations
                .get("policies.kyverno.io/scored")
                .map(String::as_str)
                != Some("false"),
            annotations: doc.metadata.annotations.clone(),
            failure_policy,
            background: spec.background.unwrap_or(true),
            admission: spec.admission.unwrap_or(true),
            emit_warning: spec.emit_warning.unwrap_or(false),
            webhook_timeout_seconds: spec.webhook_timeout_seconds,
            apply_one: spec.apply_rules.as_deref() == Some("One"),
            rule_kinds: RuleKinds::of(&rules),
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
        RuleBody::VerifyImages(rule.verify_images.clone())
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
        pass_message: format!("validation rule '{}' passed.", rule.name),
        match_resources,
        exclude,
        context: rule.context.clone(),
        preconditions,
        cel_preconditions,
        body,
    })
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

fn compile_validation(
    v: &Validation,
    field: &str,
    policy_action: FailureAction,
    exprs: &mut ExprCache,
) -> Result<RuleBody, String> {
    let check = compile_check(
        v.pattern.as_ref(),
        v.any_pattern.as_ref(),
        v.deny.as_ref(),
        v.foreach.as_deref(),
        field,
        exprs,
    );
    let check = match check {
        Some(c) => c,
        None if v.pod_security.is_some() => {
            ValidateCheck::PodSecurity(v.pod_security.clone().unwrap_or_default())
        }
        None if v.cel.is_some() => {
            let raw = v.cel.as_ref().unwrap_or(&Value::Null);
            match CelChecks::compile_rule(raw, &format!("{field}.cel")) {
                Ok(c) => ValidateCheck::Cel(Box::new(c)),
                Err(CelCompileError::Unsupported(field)) => ValidateCheck::Unsupported(field),
                Err(CelCompileError::Invalid(e)) => return Err(e),
            }
        }
        None if v.manifests.is_some() => ValidateCheck::Unsupported(format!("{field}.manifests")),
        None if v.assert.is_some() => ValidateCheck::Unsupported(format!("{field}.assert")),
        None => ValidateCheck::Unsupported(format!(
            "{field} (no pattern, anyPattern, deny, foreach or podSecurity)"
        )),
    };
    Ok(RuleBody::Validate(ValidateRule {
        failure_action: v
            .failure_action
            .as_deref()
            .map(FailureAction::parse)
            .unwrap_or(policy_action),
        message: v.message.clone(),
        message_has_variables: v.message.as_deref().is_some_and(|m| m.contains("{{")),
        allow_existing_violations: v.allow_existing_violations.unwrap_or(true),
        check,
    }))
}

fn compile_check(
    pattern: Option<&Value>,
    any_pattern: Option<&Value>,
    deny: Option<&Deny>,
    foreach: Option<&[ForEachValidation]>,
    field: &str,
    exprs: &mut ExprCache,
) -> Option<ValidateCheck> {
    // Kyverno's order: deny, then pattern/anyPattern, then foreach.
    if let Some(d) = deny {
        return Some(
            match Conditions::parse(d.conditions.as_ref().unwrap_or(&Value::Null)) {
                Ok(c) => ValidateCheck::Deny(c),
                Err(e) => ValidateCheck::Unsupported(format!("{field}.deny.conditions: {e}")),
            },
        );
    }
    if let Some(p) = pattern {
        return Some(ValidateCheck::Pattern(Pattern::new(p.clone())));
    }
    if let Some(p) = any_pattern {
        return Some(match p {
            Value::Array(items) => {
                ValidateCheck::AnyPattern(items.iter().cloned().map(Pattern::new).collect())
            }
            _ => ValidateCheck::Unsupported(format!("{field}.anyPattern (must be a list)")),
        });
    }
    if let Some(list) = foreach {
        let mut out = Vec::new();
        for (i, f) in list.iter().enumerate() {
            let ffield = format!("{field}.foreach[{i}]");
            exprs.add(&f.list);
            let nested: Option<Vec<ForEachValidation>> = match &f.foreach {
                Some(v) => match serde_json::from_value(v.clone()) {
                    Ok(n) => Some(n),
                    Err(e) => {
                        return Some(ValidateCheck::Unsupported(format!("{ffield}.foreach: {e}")));
                    }
                },
                None => None,
            };
            let check = compile_check(
                f.pattern.as_ref(),
                f.any_pattern.as_ref(),
                f.deny.as_ref(),
                nested.as_deref(),
                &ffield,
                exprs,
            )
            .unwrap_or_else(|| {
                ValidateCheck::Unsupported(format!(
                    "{ffield} (no pattern, anyPattern, deny or foreach)"
                ))
            });
            let preconditions = match f.preconditions.as_ref().map(Conditions::parse).transpose() {
                Ok(p) => p,
                Err(e) => {
                    return Some(ValidateCheck::Unsupported(format!(
                        "{ffield}.preconditions: {e}"
                    )));
                }
            };
            out.push(ForEach {
                list: f.list.clone(),
                list_expr: (!f.list.contains("{{"))
                    .then(|| Expression::parse(&f.list).ok())
                    .flatten(),
                element_scope: f.element_scope,
                context: f.context.clone(),
                preconditions,
                check,
            });
        }
        return Some(ValidateCheck::Foreach(out));
    }
    None
}

/// A compiled PolicyException.
#[derive(Debug, Clone)]
pub struct CompiledException {
    pub name: String,
    pub namespace: String,
    pub match_resources: CompiledMatch,
    pub conditions: Option<Conditions>,
    /// (policy name pattern, rule name patterns)
    pub exceptions: Vec<(String, Vec<String>)>,
    pub pod_security: Vec<super::types::PodSecurityExclude>,
    pub exprs: Arc<ExprCache>,
}

impl CompiledException {
    pub fn compile(doc: &PolicyExceptionDoc) -> Result<CompiledException, CompileError> {
        let invalid = |field: &str, message: String| CompileError::Invalid {
            policy: doc.metadata.name.clone(),
            field: field.into(),
            message,
        };
        let mut exprs = ExprCache::default();
        if let Some(c) = &doc.spec.conditions {
            exprs.add_all_variables(c);
        }
        Ok(CompiledException {
            name: doc.metadata.name.clone(),
            namespace: doc.metadata.namespace.clone().unwrap_or_default(),
            match_resources: CompiledMatch::compile(&doc.spec.match_resources)
                .map_err(|e| invalid("spec.match", e))?,
            conditions: doc
                .spec
                .conditions
                .as_ref()
                .map(Conditions::parse)
                .transpose()
                .map_err(|e| invalid("spec.conditions", e))?,
            exceptions: doc
                .spec
                .exceptions
                .iter()
                .map(|e| (e.policy_name.clone(), e.rule_names.clone()))
                .collect(),
            pod_security: doc.spec.pod_security.clone(),
            exprs: Arc::new(exprs),
        })
    }

    /// Whether this exception names `policy` (qualified name) and `rule`.
    pub fn covers(&self, policy: &str, rule: &str) -> bool {
        use crate::wildcard::matches;
        self.exceptions
            .iter()
            .any(|(p, rules)| matches(p, policy) && rules.iter().any(|r| matches(r, rule)))
    }
}

#[cfg(test)]
mod rule_kinds_tests {
    use super::*;
    use crate::policy::load::{LoadedDocument, load_policy_text};

    /// A Pod rule's autogen rules are not candidates for a Pod; a rule
    /// without kinds is a candidate for every kind; order is kept.
    #[test]
    fn candidates_by_kind() {
        let yaml = "apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: p}
spec:
  rules:
  - name: pods
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate: {pattern: {metadata: {name: '?*'}}}
  - name: anything
    match: {any: [{resources: {names: [web]}}]}
    validate: {pattern: {metadata: {name: '?*'}}}
  - name: services
    match: {any: [{resources: {kinds: [Service, Pod]}}]}
    validate: {pattern: {metadata: {name: '?*'}}}
";
        let LoadedDocument::Policy(doc) = load_policy_text("p.yaml", yaml)
            .unwrap()
            .into_iter()
            .next()
            .unwrap()
        else {
            panic!("not a policy");
        };
        let p = CompiledPolicy::compile(&doc).unwrap();
        let names = |kind: &str| -> Vec<&str> {
            p.rule_kinds
                .candidates(kind_hash(kind), p.rules.len())
                .map(|i| p.rules[i].name.as_str())
                .collect()
        };
        assert_eq!(names("Pod"), ["pods", "anything", "services"]);
        assert_eq!(names("Service"), ["anything", "services"]);
        assert_eq!(names("ConfigMap"), ["anything"]);
        // Every rule is a candidate for some kind.
        let all: std::collections::BTreeSet<&str> = ["Pod", "Service", "ConfigMap"]
            .iter()
            .flat_map(|k| names(k))
            .collect();
        assert_eq!(all.len(), p.rules.len());
    }
}
