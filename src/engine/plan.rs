//! The plan of a policy set: what is compiled once per set (a server's
//! snapshot, a benchmark's policies) so that a request shares work across
//! its rules rather than repeating it per rule.
//!
//! Today it holds the validate patterns of the set merged into
//! [`PatternSet`]s, one per list of kinds their rules match: a request's
//! object is walked once for a group, on the first pattern rule of the
//! group that needs it, and each pattern rule reads its
//! verdict: `pass`, or the path its own walk would fail at, which is
//! written straight into the rule's message ([`FailurePath`]). An
//! anyPattern whose every alternative the set decides reads them all the
//! same way, its failure message included. Patterns the set cannot decide
//! are evaluated on their own, as before.
//!
//! It holds the set's `validate.cel` checks that read nothing but the
//! request's objects, evaluated together per list of kinds their rules
//! match ([`CheckSet`]): once per request, on the first such rule the
//! request evaluates; each rule reads its validations' answers. A rule
//! whose answers are not all bools is evaluated on its own, as before.
//! The set's ValidatingPolicies' validations are planned the same way,
//! grouped by their policies' own constraints
//! ([`crate::policy::cel_policy::PolicyScope::selection_key`]): the
//! policies a request is selected by all together.
//!
//! It also holds, per kind name the set's rules list, each policy's
//! candidate rules for that kind ([`crate::policy::compile::RuleKinds::for_kind`]): a request
//! finds its kind once, not once per policy.
//!
//! [`super::plan_set`] builds a plan and also decides, once per admission
//! operation, the conditions of preconditions and deny checks that the
//! request's operation alone decides (`{{ request.operation ||
//! 'BACKGROUND' }}` NotEquals DELETE, in most library policies;
//! [`crate::policy::Condition::by_operation`]): a request reads their
//! verdicts rather than rendering them. That step evaluates conditions,
//! which this module, read by every request's context, cannot do.

use super::Request;
use crate::cel::COST_LIMIT;
use crate::cel::direct::set::{CheckSet, CheckSetBuilder, Declared};
use crate::cel::direct::{Fail, Node, Val};
use crate::json_doc::{Document, JsonRef};
use crate::pattern::set::{FailurePath, Passing, PatternSet};
use crate::policy::cel_policy::{CelChecks, CompiledValidatingPolicy, EvaluationMode};
use crate::policy::compile::{Candidates, Pattern, PlanSlot, PolicySlot, ValidateRule};
use crate::policy::{CompiledPolicy, RuleBody, ValidateCheck};
use std::cell::OnceCell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Plans get distinct ids, so that a pattern's slot names the plan it was
/// numbered in.
static NEXT_PLAN: AtomicU64 = AtomicU64::new(1);

/// Ids start at 1: 0 is the empty plan's, which no pattern's slot names.
#[derive(Debug, Default)]
pub struct Plan {
    id: u64,
    /// The patterns merged per kinds a rule matches: a request walks the
    /// group of each rule it evaluates, so the patterns of rules for other
    /// kinds (a Pod policy's autogen rules) cost it nothing.
    groups: Vec<PatternSet>,
    /// The CEL checks evaluated together: a `validate.cel` rule's per
    /// kinds the rule matches, as the patterns are; a ValidatingPolicy's
    /// per its own constraints.
    cel_groups: Vec<CheckSet>,
    /// Per kind name some rule lists, each policy's candidate rules and
    /// those the kind alone matches ([`crate::policy::compile::RuleKinds::for_kind`]), by the
    /// policy's [`PolicySlot`] index; `None` for a policy with too many
    /// rules to index.
    kinds: BTreeMap<Box<str>, Box<[KindMasks]>>,
    /// The same for every other kind: the rules that list no kinds.
    other_kinds: Box<[KindMasks]>,
}

/// A policy's candidate rules for a kind, and per admission operation
/// those the kind alone matches, as masks
/// ([`crate::policy::compile::RuleKinds::for_kind`]).
type KindMasks = Option<crate::policy::compile::KindMasks>;

/// What the checks of one CEL group have in common: the kinds their
/// `validate.cel` rules match (sorted), or their ValidatingPolicies'
/// selection, interned ([`crate::policy::cel_policy::PolicyScope::selection_key`]).
#[derive(PartialEq)]
enum CelGroupKey {
    Kinds(Option<Vec<String>>),
    Selection(Arc<str>),
}

impl Plan {
    /// Plans `policies`: numbers their top-level validate patterns (and
    /// anyPattern alternatives) in merged [`PatternSet`]s, one per list of
    /// kinds their rules match, and records each one's slot in the
    /// pattern. Patterns a set cannot decide, or that hold variables, get
    /// no slot. Numbers the CEL checks of their `validate.cel` rules, and
    /// of `validating`, in [`CheckSet`]s the same way.
    pub fn build(
        policies: &mut [CompiledPolicy],
        validating: &mut [CompiledValidatingPolicy],
    ) -> Plan {
        let id = NEXT_PLAN.fetch_add(1, Ordering::Relaxed);
        let mut kinds_of_group: Vec<Option<Vec<String>>> = Vec::new();
        let mut groups: Vec<PatternSet> = Vec::new();
        let mut keys_of_cel_group: Vec<CelGroupKey> = Vec::new();
        let mut cel_groups: Vec<CheckSetBuilder> = Vec::new();
        for policy in policies.iter_mut() {
            for rule in &mut policy.rules {
                let RuleBody::Validate(ValidateRule { check, .. }) = &mut rule.body else {
                    continue;
                };
                let mut kinds = rule.kinds.clone();
                if let Some(k) = &mut kinds {
                    k.sort();
                }
                if let ValidateCheck::Cel(checks) = check {
                    checks.plan_slot = None;
                    // Preconditions decide first, per rule.
                    if !rule.cel_preconditions.is_empty() {
                        continue;
                    }
                    let key = CelGroupKey::Kinds(kinds);
                    checks.plan_slot =
                        cel_slot(id, &mut keys_of_cel_group, &mut cel_groups, key, checks);
                    continue;
                }
                let patterns: &mut [Pattern] = match check {
                    ValidateCheck::Pattern(p) => std::slice::from_mut(p),
                    ValidateCheck::AnyPattern(alternatives) => alternatives,
                    _ => continue,
                };
                let group = group_of(&mut kinds_of_group, &mut groups, kinds);
                for p in patterns {
                    p.plan_slot =
                        p.compiled
                            .as_ref()
                            .and_then(|c| groups[group].add(c))
                            .map(|index| PlanSlot {
                                plan: id,
                                group: group as u32,
                                index,
                            });
                }
            }
        }
        for policy in validating.iter_mut() {
            let checks = &mut policy.checks;
            checks.plan_slot = None;
            // Params bind per param object; other modes read no request.
            if policy.mode != EvaluationMode::Kubernetes || policy.scope.param_kind.is_some() {
                continue;
            }
            let key = CelGroupKey::Selection(policy.scope.selection_key.clone());
            checks.plan_slot = cel_slot(id, &mut keys_of_cel_group, &mut cel_groups, key, checks);
        }
        let mut kinds = BTreeMap::new();
        for policy in policies.iter() {
            for kind in policy.rule_kinds.kinds() {
                if !kinds.contains_key(kind) {
                    let masks = policies.iter().map(|p| p.rule_kinds.for_kind(kind));
                    kinds.insert(kind.into(), masks.collect());
                }
            }
        }
        // No rule names the empty kind: its masks are the kindless rules'.
        let other_kinds = policies.iter().map(|p| p.rule_kinds.for_kind("")).collect();
        for (index, policy) in policies.iter_mut().enumerate() {
            policy.plan_slot = u32::try_from(index)
                .ok()
                .map(|index| PolicySlot { plan: id, index });
        }
        Plan {
            id,
            groups,
            cel_groups: cel_groups
                .into_iter()
                .map(CheckSetBuilder::finish)
                .collect(),
            kinds,
            other_kinds,
        }
    }

    /// The number of patterns the plan decides.
    pub fn planned_patterns(&self) -> u32 {
        self.groups.iter().map(PatternSet::len).sum()
    }
}

/// The number of the group of rules with `key` (the kinds they match,
/// sorted, for patterns), a new one made when no rule before had the same.
fn group_of<K: PartialEq, G: Default>(
    keys_of_group: &mut Vec<K>,
    groups: &mut Vec<G>,
    key: K,
) -> usize {
    match keys_of_group.iter().position(|g| *g == key) {
        Some(g) => g,
        None => {
            keys_of_group.push(key);
            groups.push(G::default());
            groups.len() - 1
        }
    }
}

/// Adds `checks` to the CEL group with `key` of plan `id`: their slot, or
/// `None` when they cannot be members ([`add_cel_checks`]).
fn cel_slot(
    id: u64,
    keys_of_group: &mut Vec<CelGroupKey>,
    groups: &mut Vec<CheckSetBuilder>,
    key: CelGroupKey,
    checks: &CelChecks,
) -> Option<PlanSlot> {
    let group = group_of(keys_of_group, groups, key);
    add_cel_checks(&mut groups[group], checks).map(|index| PlanSlot {
        plan: id,
        group: group as u32,
        index,
    })
}

/// Adds a `validate.cel` rule's or a ValidatingPolicy's validations to
/// `group`, all or none: the first's number there. Not for checks with
/// params or audit annotations, which their own evaluation handles.
fn add_cel_checks(group: &mut CheckSetBuilder, checks: &CelChecks) -> Option<u32> {
    if checks.params.is_some() || !checks.audit_annotations.is_empty() {
        return None;
    }
    let plan = &checks.plan;
    let nodes: Option<Vec<&Node>> = match checks.variables.is_empty() {
        true => checks
            .validations
            .iter()
            .map(|v| v.program.direct_plan().map(|p| &**p))
            .collect(),
        // The plans with the rule's variables resolved; built for every
        // rule with variables (`CelChecks::with_plan`).
        false
            if plan.validations.len() == checks.validations.len()
                && plan.variables.len() == checks.variables.len() =>
        {
            plan.validations.iter().map(|p| p.as_deref()).collect()
        }
        false => None,
    };
    let declared = |index: usize| match plan.variables.get(index).and_then(Option::as_deref) {
        Some(Node::Const(value)) => Declared::Constant(value),
        _ => match checks
            .variables
            .get(index)
            .and_then(|v| v.program.request_wide_plan())
        {
            Some(shared) => Declared::Shared(shared),
            None => Declared::Other,
        },
    };
    group.add_all(&nodes?, &declared)
}

/// Every check's answer of one CEL group, by number.
type CelAnswers = Vec<Result<bool, Fail>>;

/// The answers of a plan's CEL checks on one request's objects: per
/// group, found when a rule or policy first reads one of its checks.
#[derive(Debug)]
pub struct PlannedCel<'p> {
    plan: &'p Plan,
    object: JsonRef<'p>,
    old_object: JsonRef<'p>,
    /// One cell per group, made on the first read: a request that reads
    /// none allocates nothing.
    answers: OnceCell<Box<[OnceCell<CelAnswers>]>>,
}

impl<'p> PlannedCel<'p> {
    /// The answers on the request whose objects are `object` and
    /// `old_object`.
    pub fn new(plan: &'p Plan, object: JsonRef<'p>, old_object: JsonRef<'p>) -> PlannedCel<'p> {
        PlannedCel {
            plan,
            object,
            old_object,
            answers: OnceCell::new(),
        }
    }

    /// The answers of the validations of `checks`, in order; `None` when
    /// the plan does not evaluate them.
    pub fn answers(&self, checks: &CelChecks) -> Option<&[Result<bool, Fail>]> {
        let slot = checks.plan_slot.filter(|s| s.plan == self.plan.id)?;
        let group = slot.group as usize;
        let groups = self.answers.get_or_init(|| {
            self.plan
                .cel_groups
                .iter()
                .map(|_| OnceCell::new())
                .collect()
        });
        let answers = groups[group].get_or_init(|| {
            self.plan.cel_groups[group].evaluate(
                Val::from_ref(self.object),
                Val::from_ref(self.old_object),
                COST_LIMIT as i64,
            )
        });
        let first = slot.index as usize;
        answers.get(first..first + checks.validations.len())
    }
}

/// A plan in use for one request: the object its patterns read and, per
/// group, their verdicts, found on first use.
pub struct PlanForRequest<'p> {
    plan: &'p Plan,
    object: &'p Document,
    /// The request's kind, and each policy's masks for it.
    kind: &'p str,
    kind_masks: &'p [KindMasks],
    /// Whether the request is for a subresource, which no rule is matched
    /// for by its kind alone.
    subresource: bool,
    /// The request's admission operation, by
    /// [`crate::matching::operation_index`].
    operation: Option<usize>,
    /// One cell per group, made when a planned pattern is first read: a
    /// request that evaluates none allocates nothing.
    passing: OnceCell<Box<[OnceCell<Passing>]>>,
    /// The request's old object, which CEL checks read too.
    old_object: &'p Document,
    /// The `validate.cel` checks' answers on the request's objects. The
    /// ValidatingPolicies read theirs through the request's `CelRequest`,
    /// whose groups are never these (`CelGroupKey`): no group is evaluated
    /// twice.
    cel: PlannedCel<'p>,
}

impl<'p> PlanForRequest<'p> {
    pub fn new(plan: &'p Plan, req: &'p Request) -> PlanForRequest<'p> {
        let kind = req.gvk.kind.as_str();
        PlanForRequest {
            plan,
            object: &req.object,
            kind,
            kind_masks: plan.kinds.get(kind).unwrap_or(&plan.other_kinds),
            subresource: !req.subresource.is_empty(),
            operation: crate::matching::operation_index(&req.operation),
            passing: OnceCell::new(),
            old_object: &req.old_object,
            cel: PlannedCel::new(plan, req.object.json(), req.old_object.json()),
        }
    }

    /// The answers of the validations of `checks` on the request's
    /// objects `object` and `old_object`, in order; `None` when the plan
    /// does not evaluate them or the objects are not the request's.
    pub fn cel_answers(
        &self,
        checks: &CelChecks,
        object: &Document,
        old_object: &Document,
    ) -> Option<&[Result<bool, Fail>]> {
        if !std::ptr::eq(object, self.object) || !std::ptr::eq(old_object, self.old_object) {
            return None;
        }
        self.cel.answers(checks)
    }

    /// The candidate rules of `policy` for a request of `kind`, as
    /// [`crate::policy::compile::RuleKinds::candidates`] gives them; `None` when the plan did not
    /// number the policy or `kind` is not the request's.
    pub fn candidates(&self, policy: &CompiledPolicy, kind: &str) -> Option<Candidates> {
        let slot = policy.plan_slot.filter(|s| s.plan == self.plan.id)?;
        if !std::ptr::eq(kind, self.kind) {
            return None;
        }
        let (mask, matched) = self.kind_masks.get(slot.index as usize)?.as_ref()?;
        // Not an admission operation's: no rule is matched by the kind.
        let matched = self.operation.map_or(0, |op| matched[op]);
        Some(Candidates::of_masks(*mask, matched, self.subresource))
    }

    /// What the plan says of pattern `p` applied to `object`: whether it
    /// passes; `None` when `p` is not in this plan or `object` is not the
    /// one the plan walks.
    pub fn passes(&self, p: &Pattern, object: &Document) -> Option<bool> {
        let (_, passing, index) = self.decided(p, object)?;
        Some(passing.passes(index))
    }

    /// Where pattern `p` applied to `object` fails: the path its own walk
    /// reports, `None` when it passes or the plan does not decide it.
    pub fn failure(&self, p: &Pattern, object: &Document) -> Option<FailurePath<'_>> {
        let (set, passing, index) = self.decided(p, object)?;
        set.failure(passing, index)
    }

    /// The merged patterns that decide `p`, their verdicts on the object
    /// (found on first use) and `p`'s number among them.
    fn decided(&self, p: &Pattern, object: &Document) -> Option<(&'p PatternSet, &Passing, u32)> {
        let slot = p.plan_slot.filter(|s| s.plan == self.plan.id)?;
        if !std::ptr::eq(object, self.object) {
            return None;
        }
        let group = slot.group as usize;
        let set = &self.plan.groups[group];
        let groups = self
            .passing
            .get_or_init(|| self.plan.groups.iter().map(|_| OnceCell::new()).collect());
        let passing = groups[group].get_or_init(|| match self.object.json() {
            JsonRef::Value(v) => set.passing(v),
            JsonRef::Doc(d) => set.passing(d),
        });
        Some((set, passing, slot.index))
    }
}
