//! Reading the request's JSON in place: field walks, optional chains
//! (`a.?b.c`), comparisons with constants, and the memo of fields already read.

use super::*;
use crate::cel::direct::compile::{Node, OptEnd, OptStep};
use crate::cel::direct::value::{Fail, MapVal, Val, equals};
use crate::json_doc::{Json, Key, Kind, PackedJson};
use smallvec::SmallVec;

/// The memos of one evaluation: the value each shared path prefix was
/// found to have, by memo id.
///
/// Made and dropped for every expression evaluated, so both are cheap: the
/// ids index a byte table zeroed in a store or two, and only the values
/// found are held (and dropped). A vector of `Option<Val>` per id cost the
/// CEL Pod Security set 4% of its evaluation to fill with `None` and drop.
pub(super) struct Memos<'a> {
    /// By memo id: 0 while unknown, else the value's position in `found`
    /// plus one. An id past the table is never memoised (its path is
    /// walked each time), as is a value past 255 found.
    pub(super) slots: [u8; MEMO_SLOTS],
    /// How many leading slots were ever set: what a rewind scans.
    pub(super) used: usize,
    pub(super) found: SmallVec<[Val<'a>; 6]>,
}

/// Memo ids an evaluation holds. A path whose id is past them is walked
/// each time instead (answering the same), so the bound costs speed, never
/// an answer.
pub(super) const MEMO_SLOTS: usize = 64;

impl Default for Memos<'_> {
    fn default() -> Self {
        Memos {
            slots: [0; MEMO_SLOTS],
            used: 0,
            found: SmallVec::new(),
        }
    }
}

impl<'a> Memos<'a> {
    pub(super) fn get(&self, id: u32) -> Option<&Val<'a>> {
        match self.slots.get(id as usize)? {
            0 => None,
            at => self.found.get(*at as usize - 1),
        }
    }

    pub(super) fn remember(&mut self, id: u32, value: Val<'a>) {
        if let Some(slot) = self.slots.get_mut(id as usize)
            && let Ok(at) = u8::try_from(self.found.len() + 1)
        {
            self.found.push(value);
            *slot = at;
            self.used = self.used.max(id as usize + 1);
        }
    }

    /// Where a comprehension starts: what [`Memos::rewind`] returns to.
    pub(super) fn mark(&self) -> usize {
        self.found.len()
    }

    /// Forgets every memo found since `mark`, at each item of a
    /// comprehension. The memos of the item's paths were all found since
    /// then (the item was not bound before), so none outlives its item;
    /// a path from outside found since then is only walked again. A
    /// comprehension run again (in an outer one's predicate) was started
    /// after the outer one's mark, so the outer one's next item forgets
    /// all it found. Forgetting this way also bounds what a long list
    /// keeps to one item's memos.
    pub(super) fn rewind(&mut self, mark: usize) {
        if self.found.len() > mark {
            self.found.truncate(mark);
            for slot in &mut self.slots[..self.used] {
                if *slot as usize > mark {
                    *slot = 0;
                }
            }
        }
    }
}
impl<'e, 'a> Evaluator<'e, 'a> {
    /// What ends an optional chain, given the value it found.
    #[inline]
    pub(super) fn opt_end(&mut self, found: Option<Val<'a>>, end: &OptEnd) -> Out<'a> {
        match end {
            OptEnd::HasValue => Ok(Val::Bool(found.is_some())),
            OptEnd::OrValue(default) => match found {
                Some(v) => Ok(v),
                None => self.eval(default),
            },
        }
    }

    /// The JSON object `base` holds, when it is a value this evaluator
    /// already has (a comprehension variable, a memo found, a root) and that value
    /// is an object of the decoded document: read where it is held, where
    /// evaluating `base` would copy the value out and drop it again.
    ///
    /// A path of fields from such a value (`object.spec`, a memo not found
    /// yet) is walked key by key in the document, where evaluating it
    /// would make a value of each step: the ranges of a policy set's
    /// passes and its request-wide lists start from `object.spec`.
    #[inline]
    pub(super) fn peek_doc(&mut self, base: &Node) -> Option<Json<'a>> {
        let held = match base {
            Node::Local(slot) => self.locals.get(*slot)?,
            Node::Memo { id, base, field } => match self.memos.get(*id) {
                Some(held) => held,
                None => return self.peek_memo(*id, base, field),
            },
            Node::Known(index) => self.env.known(*index)?,
            Node::Shared(index) => self.env.shared(*index)?,
            Node::Path {
                base,
                fields,
                test: false,
            } => return self.peek_doc_walked(base, fields),
            _ => return None,
        };
        match held {
            Val::Map(MapVal::Doc(j)) => Some(j.json()),
            _ => None,
        }
    }

    /// [`Evaluator::peek_doc`] of `base.fields`: the object found when
    /// every step is an object of the document that has the next field.
    /// Anything else (a missing field, an error) is for evaluating the
    /// path to answer.
    #[inline(never)]
    pub(super) fn peek_doc_walked(&mut self, base: &Node, fields: &[Key]) -> Option<Json<'a>> {
        let mut at = self.peek_doc(base)?;
        for field in fields {
            at = at.get_key(field)?;
            if !at.is_object() {
                return None;
            }
        }
        Some(at)
    }

    /// [`Evaluator::peek_doc`] of memo `id`, not found yet: the field
    /// looked up in its base's object and kept in the memo, as evaluating
    /// the memo keeps it, so that the next read finds it there (a set's
    /// request-wide lists each read `object.spec` three times).
    #[inline(never)]
    pub(super) fn peek_memo(&mut self, id: u32, base: &Node, field: &Key) -> Option<Json<'a>> {
        self.find_memo(id, base, field).filter(|j| j.is_object())
    }

    /// Memo `id`'s value (`base.field`, any kind) found in the document
    /// from its peeked base and kept in the memo; `None` where the base is
    /// no object of the document or lacks the field.
    pub(super) fn find_memo(&mut self, id: u32, base: &Node, field: &Key) -> Option<Json<'a>> {
        let found = self.peek_doc(base)?.get_key(field)?;
        self.memos.remember(id, Val::from_doc(found));
        Some(found)
    }

    /// [`Node::MemoOptFields`] walked in the decoded document: from memo
    /// `id`'s value when it was found, else from `base`, keeping the first
    /// step's value in the memo. `None` where either is not an object of
    /// the document ([`Evaluator::opt_fields`] answers then).
    #[inline]
    pub(super) fn memo_doc_opt_fields(
        &mut self,
        id: u32,
        base: &Node,
        fields: &[Key],
    ) -> Option<DocEnd<'a>> {
        let (first, rest) = fields.split_first()?;
        if let Some(held) = self.memos.get(id) {
            return match held {
                Val::Map(MapVal::Doc(j)) => Some(doc_opt_fields(j.json(), rest, 1)),
                _ => None,
            };
        }
        let j = self.peek_doc(base)?;
        if !j.is_object() {
            return None;
        }
        Some(match j.get_key(first) {
            Some(found) => {
                self.memos.remember(id, Val::from_doc(found));
                doc_opt_fields(found, rest, 1)
            }
            None => DocEnd::Missing,
        })
    }

    /// [`Evaluator::opt_path`] of a chain of fields alone: the same answers,
    /// walked in the decoded document from the first object of it on.
    pub(super) fn opt_fields(
        &mut self,
        base: &Node,
        fields: &[Key],
    ) -> Result<Option<Val<'a>>, Fail> {
        if let Some(j) = self.peek_doc(base) {
            return doc_opt_fields(j, fields, 0).into_result();
        }
        let mut at = self.eval(base)?.through_optional();
        for (n, field) in fields.iter().enumerate() {
            let Some(current) = at.take() else {
                return Ok(None);
            };
            at = match current {
                Val::Map(MapVal::Doc(j)) => {
                    return doc_opt_fields(j.json(), &fields[n..], n).into_result();
                }
                other => opt_field(other, field, n == 0)?,
            };
            if matches!(at, Some(Val::Optional(_))) {
                return Err(Fail::Interpreter);
            }
        }
        Ok(at)
    }

    /// The value at the end of an optional chain, `None` where a step finds
    /// nothing; as the interpreter's `_?._` and `_[?_]` step by step.
    pub(super) fn opt_path(
        &mut self,
        base: &Node,
        steps: &[OptStep],
    ) -> Result<Option<Val<'a>>, Fail> {
        let mut at = self.eval(base)?.through_optional();
        for (n, step) in steps.iter().enumerate() {
            // Keys are evaluated even past a missing step, as the
            // interpreter evaluates every argument.
            let key = match step {
                OptStep::Index(k) => Some(self.eval(k)?),
                OptStep::Field(_) => None,
            };
            let Some(current) = at.take() else {
                continue;
            };
            at = match (step, current, &key) {
                (OptStep::Field(f), current, _) => opt_field(current, f, n == 0)?,
                (OptStep::Index(_), Val::Map(m), Some(k)) => {
                    m.get(k).map_err(|_| Fail::Interpreter)?
                }
                (OptStep::Index(_), Val::List(l), Some(Val::Int(i))) => {
                    usize::try_from(*i).ok().and_then(|i| l.get(i))
                }
                (OptStep::Index(_), Val::Null, _) => None,
                _ => return Err(Fail::Interpreter),
            };
            // An optional held inside a value: the interpreter's nesting.
            if matches!(at, Some(Val::Optional(_))) {
                return Err(Fail::Interpreter);
            }
        }
        Ok(at)
    }

    /// `base.f1.f2...` selected field by field.
    #[inline]
    pub(super) fn walk(&mut self, base: &Node, fields: &[Key]) -> Out<'a> {
        let (mut at, rest) = match self.peek_doc(base) {
            Some(mut j) => {
                // Key by key in the document while the path finds objects;
                // a value that is not one answers (or errs) as a `Val`.
                let mut rest = fields;
                while let [field, tail @ ..] = rest
                    && j.is_object()
                {
                    j = j
                        .get_key(field)
                        .ok_or_else(|| no_such_key(field.as_str()))?;
                    rest = tail;
                }
                (Val::from_doc(j), rest)
            }
            None => (self.eval(base)?, fields),
        };
        for field in rest {
            at = select(at, field)?;
        }
        Ok(at)
    }

    /// `x == constant` (`eq`) or `x != constant`, the operands in their
    /// written order.
    #[inline]
    pub(super) fn eq_const(
        &mut self,
        x: &Node,
        constant: &Val,
        eq: bool,
        constant_left: bool,
    ) -> Result<bool, Fail> {
        // `a.?b.?c.orValue(d) == constant` from a document object: the
        // value found is compared where it lies, never made a `Val` and
        // returned through memory.
        let walked = match x {
            Node::OptFields(base, fields, OptEnd::OrValue(default))
                if let Node::Const(default) = &**default =>
            {
                self.peek_doc(base)
                    .map(|j| (doc_opt_fields(j, fields, 0), default))
            }
            Node::MemoOptFields {
                id,
                base,
                fields,
                end: OptEnd::OrValue(default),
            } if let Node::Const(default) = &**default => self
                .memo_doc_opt_fields(*id, base, fields)
                .map(|end| (end, default)),
            _ => None,
        };
        let same = match walked {
            Some((DocEnd::Found(j), _)) => doc_equals(j.json(), constant),
            Some((DocEnd::Missing, default)) => equals(default, constant),
            Some((DocEnd::Interpreter, _)) => return Err(Fail::Interpreter),
            None => {
                let found = self.eval(x)?;
                match constant_left {
                    false => equals(&found, constant),
                    true => equals(constant, &found),
                }
            }
        };
        Ok(same.ok_or(Fail::Interpreter)? == eq)
    }

    /// `has()` of a memo's path: true when the memo holds a value; else
    /// the test, which fills the memo when it finds the field.
    pub(super) fn memo_has(&mut self, id: u32, base: &Node, field: &Key) -> Result<bool, Fail> {
        if self.memos.get(id).is_some() {
            return Ok(true);
        }
        if let Some(j) = self.peek_doc(base) {
            return Ok(match j.get_key(field) {
                Some(found) => {
                    self.memos.remember(id, Val::from_doc(found));
                    true
                }
                None => false,
            });
        }
        match self.eval(base)? {
            Val::Map(m) => Ok(match m.get_key(field) {
                Some(found) => {
                    self.memos.remember(id, found);
                    true
                }
                None => false,
            }),
            other => has(&other, field),
        }
    }
}

/// [`equals`] of a value of the document and a constant: a bool, a
/// string or null compared where it lies; any other made a `Val` first.
/// Equality is symmetric, so the operands' order does not matter.
#[inline]
pub(super) fn doc_equals(found: Json, constant: &Val) -> Option<bool> {
    match (found.kind(), constant) {
        (Kind::Bool(a), Val::Bool(b)) => Some(a == *b),
        (Kind::Str(a), Val::Str(b)) => Some(crate::text::same(a, b.as_str())),
        (Kind::Null, Val::Null) => Some(true),
        _ => equals(&Val::from_doc(found), constant),
    }
}

/// One `.?field` step of an optional chain from `current` (`first`: the
/// chain's first step). A field of null is none, as is a scalar's at the
/// first step (cel-go: a later step selects from the value an optional
/// holds); a list's is the interpreter's to answer.
pub(super) fn opt_field<'a>(
    current: Val<'a>,
    field: &Key,
    first: bool,
) -> Result<Option<Val<'a>>, Fail> {
    match current {
        Val::Map(m) => Ok(m.get_key(field)),
        Val::Null => Ok(None),
        other if first && is_scalar(&other) => Ok(None),
        _ => Err(Fail::Interpreter),
    }
}

/// The rest of an optional chain of fields from `at`, its step `first`
/// on: each step a key lookup in the document, answered as [`opt_field`]
/// answers it.
pub(super) fn doc_opt_fields<'a>(mut at: Json<'a>, fields: &[Key], first: usize) -> DocEnd<'a> {
    for (n, field) in (first..).zip(fields) {
        if at.is_object() {
            match at.get_key(field) {
                Some(next) => at = next,
                None => return DocEnd::Missing,
            }
        } else if at.is_null() || (n == 0 && !at.is_array()) {
            return DocEnd::Missing;
        } else {
            return DocEnd::Interpreter;
        }
    }
    DocEnd::Found(at.into())
}

/// Where an optional chain of fields walked in the document ends. Two
/// words (the packed value's spare byte holds the tag), so it is returned
/// in registers: a `Result<Option<Val>, _>` goes through memory, and
/// reading it back in wider loads than it was written in stalls.
pub(super) enum DocEnd<'a> {
    Found(PackedJson<'a>),
    Missing,
    /// A step the interpreter answers (a list's field, a scalar's past
    /// the chain's first step).
    Interpreter,
}

impl<'a> DocEnd<'a> {
    pub(super) fn into_result(self) -> Result<Option<Val<'a>>, Fail> {
        match self {
            DocEnd::Found(j) => Ok(Some(Val::from_doc(j.json()))),
            DocEnd::Missing => Ok(None),
            DocEnd::Interpreter => Err(Fail::Interpreter),
        }
    }
}
