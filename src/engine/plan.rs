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
//! It also holds, per kind name the set's rules list, each policy's
//! candidate rules for that kind ([`crate::policy::compile::RuleKinds::for_kind`]): a request
//! finds its kind once, not once per policy.
//!
//! Conditions of preconditions and deny checks that the request's
//! operation alone decides (`{{ request.operation || 'BACKGROUND' }}`
//! NotEquals DELETE, in most library policies) are decided when the plan
//! is built, once per admission operation ([`crate::policy::Condition::by_operation`]):
//! a request reads its verdict rather than rendering the condition.

use super::Request;
use super::json_context::JsonContext;
use super::validate::eval_condition;
use crate::json_doc::{Document, JsonRef};
use crate::matching::ADMISSION_OPERATIONS;
use crate::pattern::set::{FailurePath, Passing, PatternSet};
use crate::policy::Conditions;
use crate::policy::compile::{
    Candidates, ForEach, ListSlot, Pattern, PlanSlot, PolicySlot, ValidateRule,
};
use crate::policy::{CompiledPolicy, RuleBody, ValidateCheck};
use serde_json::json;
use std::cell::OnceCell;
use std::collections::BTreeMap;
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
    /// Per kind name some rule lists, each policy's candidate rules and
    /// those the kind alone matches ([`crate::policy::compile::RuleKinds::for_kind`]), by the
    /// policy's [`PolicySlot`] index; `None` for a policy with too many
    /// rules to index.
    kinds: BTreeMap<Box<str>, Box<[KindMasks]>>,
    /// The same for every other kind: the rules that list no kinds.
    other_kinds: Box<[KindMasks]>,
    /// The number of foreach lists that entries of several rules read
    /// ([`crate::policy::compile::ListSlot`]).
    lists: u32,
}

/// A policy's candidate rules for a kind, and per admission operation
/// those the kind alone matches, as masks
/// ([`crate::policy::compile::RuleKinds::for_kind`]).
type KindMasks = Option<crate::policy::compile::KindMasks>;

impl Plan {
    /// Plans `policies`: numbers their top-level validate patterns (and
    /// anyPattern alternatives) in merged [`PatternSet`]s, one per list of
    /// kinds their rules match, and records each one's slot in the
    /// pattern. Patterns a set cannot decide, or that hold variables, get
    /// no slot.
    pub fn build(policies: &mut [CompiledPolicy]) -> Plan {
        let id = NEXT_PLAN.fetch_add(1, Ordering::Relaxed);
        let mut kinds_of_group: Vec<Option<Vec<String>>> = Vec::new();
        let mut groups: Vec<PatternSet> = Vec::new();
        for policy in policies.iter_mut() {
            for rule in &mut policy.rules {
                let RuleBody::Validate(ValidateRule { check, .. }) = &mut rule.body else {
                    continue;
                };
                let patterns: &mut [Pattern] = match check {
                    ValidateCheck::Pattern(p) => std::slice::from_mut(p),
                    ValidateCheck::AnyPattern(alternatives) => alternatives,
                    _ => continue,
                };
                let mut kinds = rule.kinds.clone();
                if let Some(k) = &mut kinds {
                    k.sort();
                }
                let group = match kinds_of_group.iter().position(|g| *g == kinds) {
                    Some(g) => g,
                    None => {
                        kinds_of_group.push(kinds);
                        groups.push(PatternSet::new());
                        groups.len() - 1
                    }
                };
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
        let mut kinds = BTreeMap::new();
        for policy in policies.iter() {
            for kind in policy.rule_kinds.kinds() {
                if !kinds.contains_key(kind) {
                    let masks = policies.iter().map(|p| p.rule_kinds.for_kind(kind));
                    kinds.insert(kind.into(), masks.collect());
                }
            }
        }
        for policy in policies.iter_mut() {
            decide_by_operation(policy);
        }
        let lists = share_lists(policies, id);
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
            kinds,
            other_kinds,
            lists,
        }
    }

    /// The number of foreach lists the plan walks once for several rules.
    pub fn shared_lists(&self) -> u32 {
        self.lists
    }

    /// The number of patterns the plan decides.
    pub fn planned_patterns(&self) -> u32 {
        self.groups.iter().map(PatternSet::len).sum()
    }
}

/// Fills the table by operation ([`crate::policy::Condition::by_operation`]) of each
/// condition of `policy`'s preconditions and deny checks that the
/// request's operation alone decides: evaluated here once per operation,
/// in a context that holds only that operation, rather than in every
/// request.
fn decide_by_operation(policy: &mut CompiledPolicy) {
    let exprs = &policy.exprs;
    for rule in &mut policy.rules {
        let deny = match &mut rule.body {
            RuleBody::Validate(ValidateRule {
                check: ValidateCheck::Deny(c),
                ..
            }) => Some(c),
            _ => None,
        };
        let pre = rule.preconditions.as_mut().ok().and_then(Option::as_mut);
        for conds in pre.into_iter().chain(deny) {
            let Conditions { any, all } = conds;
            for cond in any.iter_mut().chain(all.iter_mut()).flatten() {
                if cond.operator.is_err()
                    || !cond.key.decided_by_operation()
                    || !cond.value.decided_by_operation()
                {
                    continue;
                }
                cond.by_operation = Some(ADMISSION_OPERATIONS.map(|op| {
                    let ctx = JsonContext::from_value(json!({"request": {"operation": op}}));
                    eval_condition(cond, &ctx, exprs).ok()
                }));
            }
        }
    }
}

/// The foreach entries of `policies`' rules (at the top of a rule's
/// validate) that decide their elements directly from a list walked from
/// `request.object`, numbered by their list's text where entries of two
/// rules or more read it: a request walks such a list once for all of
/// them. Returns how many lists are shared.
fn share_lists(policies: &mut [CompiledPolicy], plan: u64) -> u32 {
    fn entries(policy: &mut CompiledPolicy) -> impl Iterator<Item = &mut ForEach> {
        policy
            .rules
            .iter_mut()
            .flat_map(|rule| match &mut rule.body {
                RuleBody::Validate(ValidateRule {
                    check: ValidateCheck::Foreach(list),
                    ..
                }) => list.iter_mut(),
                _ => Default::default(),
            })
    }
    let walked = |fe: &ForEach| {
        fe.deny_on_element
            && fe
                .list_expr
                .as_ref()
                .is_some_and(|e| e.walks_under(&REQUEST_OBJECT))
    };
    let mut readers: BTreeMap<String, u32> = BTreeMap::new();
    for policy in policies.iter_mut() {
        for fe in entries(policy).filter(|fe| walked(fe)) {
            *readers.entry(fe.list.clone()).or_default() += 1;
        }
    }
    readers.retain(|_, n| *n > 1);
    for (index, n) in readers.values_mut().enumerate() {
        *n = index as u32;
    }
    for policy in policies.iter_mut() {
        for fe in entries(policy) {
            fe.list_slot = readers
                .get(&fe.list)
                .filter(|_| walked(fe))
                .map(|&index| ListSlot { plan, index });
        }
    }
    readers.len() as u32
}

/// The first keys of a walk from the request's object.
const REQUEST_OBJECT: [&str; 2] = ["request", "object"];

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
    /// One cell per shared foreach list, made when one is first read:
    /// its elements by their positions in the object's document, or
    /// `None` when they are not a walk's list of JSON values. Positions
    /// borrow nothing, which keeps the context's lifetime variant.
    lists: OnceCell<Box<[OnceCell<Option<Box<[u32]>>>]>>,
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
            lists: OnceCell::new(),
        }
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

    /// The elements of foreach entry `fe`'s list, walked from the request's
    /// object once for every entry that shares it; `None` when the plan
    /// does not hold the list, the object is not a decoded document, or
    /// the list's value is not a list of JSON values (the entry then walks
    /// or evaluates it itself). The caller reads it only where `request`
    /// is still the request's own.
    pub fn list(&self, fe: &ForEach) -> Option<impl Iterator<Item = JsonRef<'p>> + '_> {
        let slot = fe.list_slot.filter(|s| s.plan == self.plan.id)?;
        let doc = self.object.doc()?;
        let lists = self
            .lists
            .get_or_init(|| (0..self.plan.lists).map(|_| OnceCell::new()).collect());
        let positions = lists.get(slot.index as usize)?.get_or_init(|| {
            let mut positions = Vec::new();
            let mut other = false;
            fe.list_expr.as_ref()?.stream_list_under(
                &REQUEST_OBJECT,
                JsonRef::Doc(doc.root()),
                &mut |e| match e {
                    JsonRef::Doc(j) => positions.push(j.position()),
                    JsonRef::Value(_) => other = true,
                },
            )?;
            (!other).then(|| positions.into_boxed_slice())
        });
        let positions = positions.as_deref()?;
        Some(
            positions
                .iter()
                .filter_map(|&p| doc.at(p).map(JsonRef::Doc)),
        )
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
