//! A policy set's CEL checks evaluated together, once per request: what
//! the set's plan (`crate::engine::plan`) holds for its `validate.cel`
//! rules, as it holds merged patterns for its pattern rules.
//!
//! Evaluated one rule at a time, the Pod Security controls in CEL form
//! walk a Pod's containers once per control, each looking up
//! `securityContext` in every container again, and each expression sets
//! up its own evaluator and resolves its rule's variables. Here:
//!
//! - each check that reads nothing but `object`, `oldObject`, constants
//!   and request-wide variables is a member of the set, its variables
//!   resolved when the set is built (a constant in place, a request-wide
//!   variable as the set's value [`Node::Shared`], computed once per
//!   request);
//! - a top-level `range.all(x, p)` or `range.exists(x, p)` of a member,
//!   whose range reads only the request's objects and whose predicate
//!   reads only its item, is fused ([`Node::Fused`]): all the set's
//!   quantifiers over the same range are tested item by item in one pass,
//!   run when the first of them is read, and so are those over ranges
//!   that turn out to hold the same items (`containers + initContainers...`
//!   spelled three ways in the Pod Security set, two of which compile to
//!   one range, and `containers` alone on a Pod with no others);
//! - the paths the members and the fused predicates walk are shared
//!   across the whole set ([`super::compile::share_paths`]): an item's
//!   `securityContext` is looked up once per item for every predicate.
//!
//! A member's answer is its expression's answer evaluated alone: a fused
//! quantifier charges its cost where it is written, and fails as it would
//! there. Anything but a bool (an error, a value only the interpreter
//! holds) is for the caller to evaluate the rule as before, which words
//! errors exactly.

use super::compile::{Node, PARAMS, VariableRef, for_each_child, share_paths, unshare_paths};
use super::eval::{Bindings, FusedQuantifier, Sweep, evaluate_members};
use super::value::{Fail, Val};
use std::cell::OnceCell;
use std::sync::Arc;

/// The compiled checks of a policy set ([`CheckSetBuilder`]).
#[derive(Debug, Default)]
pub struct CheckSet {
    /// The request-wide plans the members read ([`Node::Shared`]).
    shared: Vec<Arc<Node>>,
    sweeps: Vec<Sweep>,
    quantifiers: Vec<FusedQuantifier>,
    members: Vec<Node>,
}

/// How a rule declares a variable its checks read by declaration.
pub enum Declared<'p> {
    /// A literal, read in place.
    Constant(&'p Val<'static>),
    /// Request-wide: its plan, which the request's objects alone decide.
    Shared(&'p Arc<Node>),
    /// Anything else: a check that reads it is not a member.
    Other,
}

/// A [`CheckSet`] being built.
#[derive(Default)]
pub struct CheckSetBuilder {
    set: CheckSet,
    /// The canonical text of each sweep's range.
    ranges: Vec<String>,
}

impl CheckSetBuilder {
    /// Adds the checks of one rule, all or none: the member number of the
    /// first (the others follow it), or `None` when one of them cannot be
    /// a member. `declared` says how the rule declares each variable its
    /// checks read by declaration.
    pub fn add_all<'p>(
        &mut self,
        checks: &[&Node],
        declared: &dyn Fn(usize) -> Declared<'p>,
    ) -> Option<u32> {
        let mut resolved = Vec::with_capacity(checks.len());
        for check in checks {
            let mut node = (*check).clone();
            if !self.resolve(&mut node, declared) {
                return None;
            }
            unshare_paths(&mut node);
            resolved.push(node);
        }
        let first = u32::try_from(self.set.members.len()).ok()?;
        for mut node in resolved {
            self.fuse(&mut node);
            self.set.members.push(node);
        }
        Some(first)
    }

    /// Resolves the variables `node` reads by declaration; `false` when it
    /// reads anything a member may not.
    fn resolve<'p>(&mut self, node: &mut Node, declared: &dyn Fn(usize) -> Declared<'p>) -> bool {
        match node {
            Node::Variable(VariableRef::Declared(index)) => match declared(*index) {
                Declared::Constant(value) => *node = Node::Const(value.clone()),
                Declared::Shared(plan) => *node = Node::Shared(self.shared_index(plan)),
                Declared::Other => return false,
            },
            Node::Variable(VariableRef::Name(_))
            | Node::HasVariable(_)
            | Node::Ident(_)
            | Node::Shared(_)
            | Node::Fused(_) => return false,
            Node::Known(index) if *index == PARAMS => return false,
            other => {
                let mut ok = true;
                for_each_child(other, &mut |child| ok = ok && self.resolve(child, declared));
                return ok;
            }
        }
        true
    }

    fn shared_index(&mut self, plan: &Arc<Node>) -> usize {
        match self.set.shared.iter().position(|p| Arc::ptr_eq(p, plan)) {
            Some(index) => index,
            None => {
                self.set.shared.push(plan.clone());
                self.set.shared.len() - 1
            }
        }
    }

    /// Replaces each quantifier of `node` that can be fused with its
    /// [`Node::Fused`] number.
    fn fuse(&mut self, node: &mut Node) {
        if let Node::Quantifier {
            range,
            item_slot: 1,
            pred,
            pairs: false,
            ..
        } = node
            && reads_objects_alone(range)
            && reads_its_item_alone(pred)
        {
            let Node::Quantifier {
                range,
                pred,
                exists,
                weight,
                ..
            } = std::mem::replace(node, Node::Fused(self.set.quantifiers.len()))
            else {
                unreachable!("matched above")
            };
            let quantifier = self.set.quantifiers.len();
            let text = format!("{range:?}");
            let sweep = match self.ranges.iter().position(|r| *r == text) {
                Some(sweep) => sweep,
                None => {
                    self.ranges.push(text);
                    self.set.sweeps.push(Sweep {
                        range: *range,
                        quantifiers: Vec::new(),
                    });
                    self.set.sweeps.len() - 1
                }
            };
            self.set.sweeps[sweep].quantifiers.push(quantifier);
            self.set.quantifiers.push(FusedQuantifier {
                pred: *pred,
                sweep,
                exists,
                weight,
            });
            return;
        }
        match node {
            // Their bodies bind items of their own: nothing in them is at
            // the top level.
            Node::Quantifier { range, .. } => self.fuse(range),
            Node::Comprehension(c) => self.fuse(&mut c.range),
            other => for_each_child(other, &mut |child| self.fuse(child)),
        }
    }

    /// The set, its paths shared across all its members and predicates.
    pub fn finish(self) -> CheckSet {
        let mut set = self.set;
        // One tree for the sharing: the members at the top, the fused
        // predicates under one quantifier, so that they share the item's
        // paths whichever range they were fused over (the passes over
        // different ranges each start their items afresh).
        let predicates: Vec<Node> = set
            .quantifiers
            .iter_mut()
            .map(|q| std::mem::replace(&mut q.pred, Node::Const(Val::Null)))
            .collect();
        // The ranges too, at the top as the members are (a pass's range
        // is evaluated where its first quantifier is read, never within
        // an item): `object.spec` is found once for all of them.
        let ranges: Vec<Node> = set
            .sweeps
            .iter_mut()
            .map(|s| std::mem::replace(&mut s.range, Node::Const(Val::Null)))
            .collect();
        let mut members = std::mem::take(&mut set.members);
        let member_count = members.len();
        members.extend(ranges);
        members.push(Node::Quantifier {
            range: Box::new(Node::Const(Val::Null)),
            item_slot: 1,
            pred: Box::new(Node::List(predicates, Vec::new())),
            exists: false,
            weight: 0,
            pairs: false,
        });
        let mut tree = Node::List(members, Vec::new());
        share_paths(&mut tree);
        let Node::List(mut members, _) = tree else {
            unreachable!("built above")
        };
        let Some(Node::Quantifier { pred, .. }) = members.pop() else {
            unreachable!("built above")
        };
        let Node::List(predicates, _) = *pred else {
            unreachable!("built above")
        };
        for (q, pred) in set.quantifiers.iter_mut().zip(predicates) {
            q.pred = pred;
        }
        for (sweep, range) in set.sweeps.iter_mut().zip(members.drain(member_count..)) {
            sweep.range = range;
        }
        set.members = members;
        set
    }
}

/// Whether `node` reads the request's objects and nothing else, evaluated
/// at no cost (a range fused into a pass charges nothing, as it charges
/// nothing where it is written). A constant range is not fused: it holds
/// no request's items to share.
fn reads_objects_alone(node: &Node) -> bool {
    !every_node(node, &|n| !matches!(n, Node::Known(_) | Node::Shared(_)))
        && every_node(node, &|n| {
            !matches!(
                n,
                Node::Local(_)
                    | Node::Tick(..)
                    | Node::Comprehension(_)
                    | Node::Quantifier { .. }
                    | Node::Inlined(_)
                    | Node::Fused(_)
            )
        })
}

/// Whether a predicate reads nothing but its item (slot 1, and the slots
/// of comprehensions inside it), the request's objects and constants: a
/// request-wide value read in it could fail, which would decline the
/// member, not answer the quantifier.
fn reads_its_item_alone(node: &Node) -> bool {
    every_node(node, &|n| {
        !matches!(
            n,
            Node::Local(0) | Node::Inlined(_) | Node::Shared(_) | Node::Fused(_)
        )
    })
}

/// Whether `test` holds for `node` and every node under it.
fn every_node(node: &Node, test: &dyn Fn(&Node) -> bool) -> bool {
    fn walk(node: &mut Node, test: &dyn Fn(&Node) -> bool) -> bool {
        let mut all = test(node);
        for_each_child(node, &mut |child| all = all && walk(child, test));
        all
    }
    // `for_each_child` walks mutably; a copy is walked (once per check,
    // when the set is built).
    walk(&mut node.clone(), test)
}

impl CheckSet {
    /// The number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// How many quantifiers were fused, and over how many ranges.
    pub fn fused(&self) -> (usize, usize) {
        (self.quantifiers.len(), self.sweeps.len())
    }

    /// Every member's answer on a request whose objects are `object` and
    /// `old_object`, each within `budget`.
    pub fn evaluate<'a>(
        &self,
        object: Val<'a>,
        old_object: Val<'a>,
        budget: i64,
    ) -> Vec<Result<bool, Fail>> {
        let env = SetBindings {
            roots: [object, old_object],
            plans: &self.shared,
            values: self.shared.iter().map(|_| OnceCell::new()).collect(),
            budget,
        };
        evaluate_members(&env, &self.sweeps, &self.quantifiers, &self.members, budget)
    }
}

/// A set's bindings: the request's objects, and the request-wide values
/// the members read, each computed on first read.
struct SetBindings<'s, 'a> {
    roots: [Val<'a>; 2],
    plans: &'s [Arc<Node>],
    values: Vec<OnceCell<Option<Val<'a>>>>,
    budget: i64,
}

impl<'a> Bindings<'a> for SetBindings<'_, 'a> {
    fn ident(&self, _: &str) -> Option<Val<'a>> {
        None
    }

    fn known(&self, index: usize) -> Option<&Val<'a>> {
        self.roots.get(index)
    }

    fn variable(&self, _: &str) -> Option<&Val<'a>> {
        None
    }

    fn shared(&self, index: usize) -> Option<&Val<'a>> {
        let plan = self.plans.get(index)?;
        self.values[index]
            .get_or_init(|| match super::evaluate(plan, self, self.budget) {
                // A value only the interpreter holds: the rule's own
                // evaluation decides what to do with it.
                Ok(Val::Foreign(_)) | Err(_) => None,
                Ok(value) => Some(value),
            })
            .as_ref()
    }
}

#[cfg(test)]
mod tests;
