//! Path prefixes walked by several selections of one expression get a memo
//! each ([`Node::Memo`]), so that each is looked up once per evaluation; and
//! logical chains are flattened into one node.

use super::*;
use crate::cel::direct::value::Val;
use crate::json_doc::Key;
use std::collections::HashMap;

/// Where a selection's walk starts, for [`share_paths`]: a root every
/// request binds, a policy variable, or the item of one comprehension
/// (numbered in the order the walk meets them) in its local slot.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) enum Root {
    Known(usize),
    Variable(VariableRef),
    Item { number: u32, slot: usize },
}

impl Root {
    /// The node that reads the root.
    pub(super) fn node(&self) -> Node {
        match self {
            Root::Known(i) => Node::Known(*i),
            Root::Variable(name) => Node::Variable(name.clone()),
            Root::Item { slot, .. } => Node::Local(*slot),
        }
    }
}

/// A root and the fields walked from it.
pub(super) type Prefix = (Root, Vec<Key>);

#[derive(Clone, Copy, PartialEq)]
pub(super) enum Pass {
    Count,
    Rewrite,
}

/// Gives the path prefixes that several selections of one expression walk
/// a memo each ([`Node::Memo`]), so that each is looked up once per
/// evaluation, or once per item of the comprehension it starts from.
/// Guards are written that way: `has(c.securityContext) &&
/// has(c.securityContext.capabilities) &&
/// c.securityContext.capabilities.drop...` walks `securityContext` three
/// times and `capabilities` twice, where the memos look each up once.
///
/// A memo selects as the path did (the same errors, at the same field);
/// only a value found is kept, so an error is met again wherever the path
/// is walked again. Comprehension accumulators are never roots: they
/// change at every step.
pub(in super::super) fn share_paths(node: &mut Node) {
    let mut sharing = Sharing::default();
    sharing.walk(node, Pass::Count);
    sharing.items.clear();
    sharing.next_item = 0;
    sharing.walk(node, Pass::Rewrite);
}

/// The selections [`share_paths`] gave memos made plain paths again, so
/// that a policy set can share them anew across its expressions (memo ids
/// are an expression's own).
pub(in super::super) fn unshare_paths(node: &mut Node) {
    for_each_child(node, &mut unshare_paths);
    let taken = std::mem::replace(node, Node::Const(Val::Null));
    *node = match taken {
        Node::Memo { base, field, .. } => path(*base, field, false),
        Node::MemoHas { base, field, .. } => path(*base, field, true),
        Node::MemoOptFields {
            base, fields, end, ..
        } => Node::OptFields(base, fields, end),
        // A path from a memo's chain, now a path itself: one path.
        Node::Path { base, fields, test } if !fields.is_empty() => {
            let last = fields.len() - 1;
            let mut at = *base;
            for (n, field) in fields.into_vec().into_iter().enumerate() {
                at = path(at, field, test && n == last);
            }
            at
        }
        other => other,
    };
}

/// Chains of one logical operator made one n-ary node, bottom up. CEL's
/// `&&` and `||` are commutative over errors, so the grouping never
/// changes an answer: any operand that decides, decides; else an error
/// stands (one the interpreter must answer outranks the others, then the
/// leftmost), as pair by pair. Done last: the comprehension macros are
/// recognised by their pairs (`@result && pred`).
pub(super) fn flatten_logic(node: &mut Node) {
    for_each_child(node, &mut flatten_logic);
    let and = match node {
        Node::And(..) => true,
        Node::Or(..) => false,
        _ => return,
    };
    let mut operands = Vec::new();
    gather_operands(
        std::mem::replace(node, Node::Const(Val::Null)),
        and,
        &mut operands,
    );
    *node = match (<[Node; 2]>::try_from(operands), and) {
        (Ok([l, r]), true) => Node::And(Box::new(l), Box::new(r)),
        (Ok([l, r]), false) => Node::Or(Box::new(l), Box::new(r)),
        (Err(operands), true) => Node::All(operands.into()),
        (Err(operands), false) => Node::Any(operands.into()),
    };
}

/// The operands of a chain of `&&` (`and`) or `||`, left to right.
pub(super) fn gather_operands(node: Node, and: bool, out: &mut Vec<Node>) {
    match (node, and) {
        (Node::And(l, r), true) | (Node::Or(l, r), false) => {
            gather_operands(*l, and, out);
            gather_operands(*r, and, out);
        }
        (Node::All(items), true) | (Node::Any(items), false) => out.extend(items),
        (other, _) => out.push(other),
    }
}

/// Calls `f` on each node directly under `node`.
pub(in super::super) fn for_each_child(node: &mut Node, f: &mut dyn FnMut(&mut Node)) {
    match node {
        Node::Const(_)
        | Node::Ident(_)
        | Node::Known(_)
        | Node::Local(_)
        | Node::Variable(_)
        | Node::HasVariable(_)
        | Node::Shared(_)
        | Node::Fused(_) => {}
        Node::Path { base, .. } | Node::Memo { base, .. } | Node::MemoHas { base, .. } => f(base),
        Node::Qualified { or_else, .. } => f(or_else),
        Node::OptSelect(x, _)
        | Node::Not(x)
        | Node::NotStrictlyFalse(x)
        | Node::Neg(x)
        | Node::InConst(x, _)
        | Node::AppendAccu(_, x)
        | Node::Tick(x, _)
        | Node::Matches(x, _)
        | Node::Inlined(x)
        | Node::EqConst { x, .. } => f(x),
        Node::OptIndex(a, b)
        | Node::Index(a, b)
        | Node::And(a, b)
        | Node::Or(a, b)
        | Node::Binary(_, a, b) => {
            f(a);
            f(b);
        }
        Node::Cond(parts) => parts.iter_mut().for_each(f),
        Node::List(items, _) | Node::Call(_, items) => items.iter_mut().for_each(f),
        Node::All(items) | Node::Any(items) => items.iter_mut().for_each(f),
        Node::Map(entries) => {
            for (k, v, _) in entries {
                f(k);
                f(v);
            }
        }
        Node::Comprehension(c) => {
            f(&mut c.range);
            f(&mut c.init);
            f(&mut c.cond);
            f(&mut c.step);
            f(&mut c.result);
        }
        Node::Quantifier { range, pred, .. } => {
            f(range);
            f(pred);
        }
        Node::OptPath(base, steps, end) => {
            f(base);
            for step in steps {
                if let OptStep::Index(i) = step {
                    f(i);
                }
            }
            if let OptEnd::OrValue(default) = end {
                f(default);
            }
        }
        Node::OptFields(base, _, end) | Node::MemoOptFields { base, end, .. } => {
            f(base);
            if let OptEnd::OrValue(default) = end {
                f(default);
            }
        }
    }
}

#[derive(Default)]
pub(super) struct Sharing {
    /// How many selections walk each prefix.
    pub(super) counts: HashMap<Prefix, u32>,
    /// The memo of each shared prefix.
    pub(super) ids: HashMap<Prefix, u32>,
    /// The item number of each local slot in scope (`None` for an
    /// accumulator).
    pub(super) items: Vec<Option<u32>>,
    pub(super) next_item: u32,
}

impl Sharing {
    pub(super) fn root(&self, base: &Node) -> Option<Root> {
        match base {
            Node::Known(i) => Some(Root::Known(*i)),
            Node::Variable(name) => Some(Root::Variable(name.clone())),
            Node::Local(slot) => {
                self.items
                    .get(*slot)
                    .copied()
                    .flatten()
                    .map(|number| Root::Item {
                        number,
                        slot: *slot,
                    })
            }
            _ => None,
        }
    }

    /// Binds the slots of a comprehension's body: `accu` (no root), then
    /// its item (a new item), or with `pairs` an index or key (no root)
    /// and its item or value (a new item). Gives what to restore after it.
    pub(super) fn enter(&mut self, accu: usize, pairs: bool) -> Vec<Option<u32>> {
        let saved = self.items.clone();
        let item = accu + 1 + usize::from(pairs);
        self.items.truncate(accu);
        self.items.resize(item, None);
        self.items.push(Some(self.next_item));
        self.next_item += 1;
        saved
    }

    pub(super) fn id(&mut self, root: &Root, fields: &[Key]) -> u32 {
        let next = self.ids.len() as u32;
        *self
            .ids
            .entry((root.clone(), fields.to_vec()))
            .or_insert(next)
    }

    pub(super) fn shared(&self, root: &Root, fields: &[Key]) -> bool {
        self.counts
            .get(&(root.clone(), fields.to_vec()))
            .is_some_and(|n| *n >= 2)
    }

    /// The selection `base.fields` (`has()` of it with `test`) reading
    /// the memos of its shared prefix; `None` when it shares none.
    pub(super) fn rewritten(&mut self, root: &Root, fields: &[Key], test: bool) -> Option<Node> {
        // Counts only fall as a prefix grows: the shared ones lead.
        let shared = (1..=fields.len())
            .take_while(|k| self.shared(root, &fields[..*k]))
            .last()?;
        let chain = |this: &mut Self, len: usize| {
            let mut at = root.node();
            for j in 1..=len {
                at = Node::Memo {
                    id: this.id(root, &fields[..j]),
                    base: Box::new(at),
                    field: fields[j - 1].clone(),
                };
            }
            at
        };
        Some(match (test, shared == fields.len()) {
            (true, true) => Node::MemoHas {
                base: Box::new(chain(self, shared - 1)),
                id: self.id(root, fields),
                field: fields[shared - 1].clone(),
            },
            (false, true) => chain(self, shared),
            (_, false) => Node::Path {
                base: Box::new(chain(self, shared)),
                fields: fields[shared..].into(),
                test,
            },
        })
    }

    pub(super) fn walk(&mut self, node: &mut Node, pass: Pass) {
        match node {
            Node::Path { base, fields, test } => {
                let Some(root) = self.root(base) else {
                    return self.walk(base, pass);
                };
                match pass {
                    Pass::Count => {
                        for k in 1..=fields.len() {
                            *self
                                .counts
                                .entry((root.clone(), fields[..k].to_vec()))
                                .or_default() += 1;
                        }
                    }
                    Pass::Rewrite => {
                        if let Some(shared) = self.rewritten(&root, fields, *test) {
                            *node = shared;
                        }
                    }
                }
            }
            // An optional chain shares its first step, the one a plain
            // selection of the same path finds alike (a present field);
            // past it, `.?` finds what `.` would fail on, so nothing more.
            Node::OptFields(base, fields, end)
                if let Some(root) = self.root(base)
                    && let Some(first) = fields.first() =>
            {
                let prefix = (root, vec![first.clone()]);
                // The default is walked as any other child.
                if let OptEnd::OrValue(default) = end {
                    self.walk(default, pass);
                }
                match pass {
                    Pass::Count => *self.counts.entry(prefix).or_default() += 1,
                    Pass::Rewrite if self.shared(&prefix.0, &prefix.1) => {
                        let id = self.id(&prefix.0, &prefix.1);
                        let Node::OptFields(base, fields, end) =
                            std::mem::replace(node, Node::Const(Val::Null))
                        else {
                            unreachable!("matched above")
                        };
                        *node = Node::MemoOptFields {
                            id,
                            base,
                            fields,
                            end,
                        };
                    }
                    Pass::Rewrite => {}
                }
            }
            Node::Quantifier {
                range,
                item_slot,
                pred,
                pairs,
                ..
            } => {
                self.walk(range, pass);
                let saved = self.enter(*item_slot - 1, *pairs);
                self.walk(pred, pass);
                self.items = saved;
            }
            Node::Comprehension(c) => {
                self.walk(&mut c.range, pass);
                self.walk(&mut c.init, pass);
                let saved = self.enter(c.accu_slot, c.pairs);
                self.walk(&mut c.cond, pass);
                self.walk(&mut c.step, pass);
                // The result reads the accumulator only.
                self.items.truncate(c.accu_slot + 1);
                self.walk(&mut c.result, pass);
                self.items = saved;
            }
            // Made by this rewrite from a path: nothing under it to share.
            Node::Memo { .. } | Node::MemoHas { .. } | Node::MemoOptFields { .. } => {}
            other => for_each_child(other, &mut |child| self.walk(child, pass)),
        }
    }
}
