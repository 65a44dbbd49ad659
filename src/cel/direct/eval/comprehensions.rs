//! Logical chains (`&&`, `||`), `in`, quantifiers and comprehensions over
//! lists and maps, with cel-go's errors for what cannot be iterated.

use super::*;
use crate::cel::direct::compile::{Comprehension, Node, VariableRef};
use crate::cel::direct::functions::contained;
use crate::cel::direct::value::{Fail, List, Val};
impl<'e, 'a> Evaluator<'e, 'a> {
    /// `l && r` (`decides` false) or `l || r` (`decides` true).
    pub(super) fn logical(&mut self, l: &Node, r: &Node, decides: bool) -> Result<bool, Fail> {
        let left = self.eval_bool(l);
        match left {
            Ok(b) if b == decides => return Ok(decides),
            Err(Fail::CostLimit) => return Err(Fail::CostLimit),
            _ => {}
        }
        let right = self.eval_bool(r);
        match (left, right) {
            (_, Ok(b)) if b == decides => Ok(decides),
            (_, Err(Fail::CostLimit)) => Err(Fail::CostLimit),
            (Ok(_), Ok(b)) => Ok(b),
            // Neither side decides: an error stands (the left one first),
            // unless a side is one only the interpreter can answer.
            (Err(Fail::Interpreter), _) | (_, Err(Fail::Interpreter)) => Err(Fail::Interpreter),
            (Err(e), _) | (_, Err(e)) => Err(e),
        }
    }

    /// [`Evaluator::logical`] of three or more operands: the first that
    /// decides, decides; else an error stands (one the interpreter must
    /// answer first, then the leftmost), as the pairs would answer.
    pub(super) fn logical_n(&mut self, operands: &[Node], decides: bool) -> Result<bool, Fail> {
        let mut pending: Option<Fail> = None;
        for operand in operands {
            match self.eval_bool(operand) {
                Ok(b) if b == decides => return Ok(decides),
                Ok(_) => {}
                Err(Fail::CostLimit) => return Err(Fail::CostLimit),
                Err(e) => {
                    if pending.is_none() || e == Fail::Interpreter {
                        pending = Some(e);
                    }
                }
            }
        }
        match pending {
            Some(e) => Err(e),
            None => Ok(!decides),
        }
    }

    /// `all` (stops at the first false) or `exists` (at the first true);
    /// the accumulator slot holds nothing, the item sits above it (with
    /// `pairs`, the index or key, and the item or value above that).
    pub(super) fn quantifier(
        &mut self,
        range: &Node,
        item_slot: usize,
        pred: &Node,
        exists: bool,
        weight: i64,
        pairs: bool,
    ) -> Result<bool, Fail> {
        let range = self.range(range)?;
        let range = range.get();
        let mark = self.memos.mark();
        self.locals.truncate(item_slot - 1);
        self.locals.push(Val::Null);
        self.locals.push(Val::Null);
        if pairs {
            self.locals.push(Val::Null);
        }
        let test = |this: &mut Self, item: Val<'a>| -> Result<bool, Fail> {
            this.budget -= weight;
            if this.budget < 0 {
                return Err(Fail::CostLimit);
            }
            this.locals[item_slot] = item;
            this.memos.rewind(mark);
            this.eval_bool(pred)
        };
        // As `&&`/`||` (the macros' accumulators are built on them): an item
        // that errors does not decide; a later item may (`all` is false
        // when any item is false, whatever the others give).
        let mut decided = false;
        // The first item's error; an item only the interpreter can answer
        // outranks it (it may be the one that decides).
        let mut pending: Option<Fail> = None;
        let mut visit = |this: &mut Self, item: Val<'a>| -> Result<bool, Fail> {
            match test(this, item) {
                Ok(b) if b == exists => {
                    decided = true;
                    Ok(true)
                }
                Ok(_) => Ok(false),
                Err(Fail::CostLimit) => Err(Fail::CostLimit),
                Err(e) => {
                    if pending.is_none() || e == Fail::Interpreter {
                        pending = Some(e);
                    }
                    Ok(false)
                }
            }
        };
        match pairs {
            false => self.each_item(range, visit)?,
            true => self.each_pair(range, |this, key, value| {
                this.locals[item_slot + 1] = value;
                visit(this, key)
            })?,
        }
        self.locals.truncate(item_slot - 1);
        if !decided && let Some(e) = pending {
            return Err(e);
        }
        Ok(if decided { exists } else { !exists })
    }

    /// `x in variables.<name>`: the list read where the bindings hold it,
    /// not copied for every item tested.
    pub(super) fn in_variable(&mut self, x: &Node, v: &VariableRef) -> Result<bool, Fail> {
        let env = self.env;
        let x = self.eval(x)?;
        contained(&x, variable(env, v).ok_or(Fail::Interpreter)?)
    }

    /// A comprehension's range: a variable's value read where the
    /// bindings hold it (most ranges are `variables.<list>`), any other
    /// evaluated.
    pub(super) fn range(&mut self, n: &Node) -> Result<Range<'e, 'a>, Fail> {
        let env = self.env;
        match n {
            Node::Variable(v) => variable(env, v)
                .map(Range::Borrowed)
                .ok_or(Fail::Interpreter),
            Node::Shared(index) => self.shared(*index).map(Range::Borrowed),
            other => self.eval(other).map(Range::Owned),
        }
    }

    pub(super) fn comprehension(&mut self, c: &Comprehension) -> Out<'a> {
        let range = self.range(&c.range)?;
        let range = range.get();
        let init = self.eval(&c.init)?;
        let mark = self.memos.mark();
        let slot = c.accu_slot;
        self.locals.truncate(slot);
        self.locals.push(init);
        self.locals.push(Val::Null);
        if c.pairs {
            self.locals.push(Val::Null);
        }
        let step = |this: &mut Self, item: Val<'a>| -> Result<bool, Fail> {
            if !this.eval_bool(&c.cond)? {
                return Ok(false);
            }
            this.locals[slot + 1] = item;
            this.memos.rewind(mark);
            let accu = this.eval(&c.step)?;
            this.locals[slot] = accu;
            Ok(true)
        };
        match c.pairs {
            false => self.each_item(range, |this, item| step(this, item).map(|more| !more))?,
            true => self.each_pair(range, |this, key, value| {
                this.locals[slot + 2] = value;
                step(this, key).map(|more| !more)
            })?,
        }
        self.locals.truncate(slot + 1);
        let result = self.eval(&c.result);
        self.locals.truncate(slot);
        result
    }
}

impl<'a> Evaluator<'_, 'a> {
    /// Calls `visit` on each item of `range` (a list's items, a map's
    /// keys) until it answers true; cel-go's error for anything else. One
    /// loop per form, so that no item pays a dispatch on it.
    #[inline(always)]
    pub(super) fn each_item(
        &mut self,
        range: &Val<'a>,
        mut visit: impl FnMut(&mut Self, Val<'a>) -> Result<bool, Fail>,
    ) -> Result<(), Fail> {
        match range {
            Val::List(List::Value(items)) => {
                for item in items.iter() {
                    if visit(self, Val::from_json(item))? {
                        break;
                    }
                }
            }
            Val::List(List::Doc(items)) => {
                for item in items.json().elements() {
                    if visit(self, Val::from_doc(item))? {
                        break;
                    }
                }
            }
            Val::List(List::Owned(items)) => {
                for item in items.iter() {
                    if visit(self, item.clone())? {
                        break;
                    }
                }
            }
            Val::Map(m) => {
                for key in m.keys() {
                    if visit(self, key)? {
                        break;
                    }
                }
            }
            other => return Err(not_iterable(other)),
        }
        Ok(())
    }

    /// [`Evaluator::each_item`] for the two-variable macros: a list's
    /// indexes with its items, a map's keys with their values.
    pub(super) fn each_pair(
        &mut self,
        range: &Val<'a>,
        mut visit: impl FnMut(&mut Self, Val<'a>, Val<'a>) -> Result<bool, Fail>,
    ) -> Result<(), Fail> {
        match range {
            Val::List(items) => {
                for (index, item) in items.iter().enumerate() {
                    if visit(self, Val::Int(index as i64), item)? {
                        break;
                    }
                }
            }
            Val::Map(m) => {
                for (key, value) in m.entries() {
                    if visit(self, key, value)? {
                        break;
                    }
                }
            }
            other => return Err(not_iterable(other)),
        }
        Ok(())
    }
}

/// A comprehension's range: borrowed from the bindings, or evaluated.
pub(super) enum Range<'e, 'a> {
    Borrowed(&'e Val<'a>),
    Owned(Val<'a>),
}

impl<'a> Range<'_, 'a> {
    pub(super) fn get(&self) -> &Val<'a> {
        match self {
            Range::Borrowed(v) => v,
            Range::Owned(v) => v,
        }
    }
}

/// cel-go's error for a comprehension over a value that is neither a list
/// nor a map (`got 'types.String', expected iterable type`).
pub(super) fn not_iterable(range: &Val) -> Fail {
    match range.go_type_name() {
        Some(t) => Fail::error(format!("got '{t}', expected iterable type")),
        None => Fail::Interpreter,
    }
}
