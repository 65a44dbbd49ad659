//! A policy set's expressions evaluated together: a path several of them
//! walk is walked once, and quantifiers over the same range are answered by
//! one pass over it ([`super::super::set`]).

use super::*;
use crate::cel::direct::compile::Node;
use crate::cel::direct::value::{Fail, Val};

/// A fused quantifier's answer, and the cost its pass charged it: what
/// evaluating it where it is written would have given and charged.
#[derive(Debug, Clone)]
pub(in super::super) struct FusedAnswer {
    pub(super) answer: Result<bool, Fail>,
    pub(super) cost: i64,
}

/// A quantifier of a policy set fused into a pass over its range
/// ([`super::super::set`]): its predicate reads the item in slot 1.
#[derive(Debug)]
pub(in super::super) struct FusedQuantifier {
    pub pred: Node,
    /// The [`Sweep`] it is in.
    pub sweep: usize,
    pub exists: bool,
    pub weight: i64,
}

/// The quantifiers over one range ([`FusedQuantifier`], by number).
#[derive(Debug)]
pub(in super::super) struct Sweep {
    pub range: Node,
    pub quantifiers: Vec<usize>,
}

/// A policy set's expressions (a bool each) over `env`: one evaluator for
/// all, so that a path several of them walk is walked once, and the fused
/// quantifiers answered by passes over their ranges, each run when one of
/// its quantifiers is first read.
pub(in super::super) fn evaluate_members<'a>(
    env: &dyn Bindings<'a>,
    sweeps: &[Sweep],
    quantifiers: &[FusedQuantifier],
    members: &[Node],
    budget: i64,
) -> Vec<Result<bool, Fail>> {
    let mut ev = Evaluator::new(env, budget);
    ev.fusion = Some(Box::new(Fusion {
        sweeps,
        quantifiers,
        answers: vec![None; quantifiers.len()],
        swept: vec![false; sweeps.len()],
        peeked: None,
        budget,
        pass: Vec::new(),
        standings: Vec::new(),
    }));
    members
        .iter()
        .map(|member| {
            ev.budget = budget;
            ev.declined = false;
            ev.locals.clear();
            let answer = ev.eval_bool(member);
            ev.answer(answer)
        })
        .collect()
}

/// A set's fused quantifiers in one request: their answers so far.
pub(in super::super) struct Fusion<'e, 'a> {
    pub(super) sweeps: &'e [Sweep],
    pub(super) quantifiers: &'e [FusedQuantifier],
    pub(super) answers: Vec<Option<FusedAnswer>>,
    /// Which sweeps' passes were run (or their range failed).
    pub(super) swept: Vec<bool>,
    /// Each sweep's range where [`Evaluator::peek_range`] finds it, looked
    /// for once, by the first pass.
    pub(super) peeked: Option<Vec<Option<Val<'a>>>>,
    /// The budget each quantifier starts with.
    pub(super) budget: i64,
    /// The sweeps of the pass being run, and where each of their
    /// quantifiers stands: kept from pass to pass, so that a request
    /// allocates them once. Built afresh as inline vectors, every pass
    /// copied a kilobyte of them in and out.
    pub(super) pass: Vec<usize>,
    pub(super) standings: Vec<Standing>,
}

/// Where a fused quantifier stands in its pass.
pub(super) struct Standing {
    /// The quantifier, by number.
    pub(super) quantifier: usize,
    pub(super) budget: i64,
    /// Its answer, once an item decided it or its budget ran out.
    pub(super) done: Option<Result<bool, Fail>>,
    /// The first error an item gave (one only the interpreter can answer
    /// outranks it), as [`Evaluator::quantifier`] keeps it.
    pub(super) pending: Option<Fail>,
}
impl<'e, 'a> Evaluator<'e, 'a> {
    /// The answer of fused quantifier `index`, its pass run if it was not
    /// yet, and its cost charged here, where it is written: the budget
    /// runs out here exactly when the quantifier evaluated here would have
    /// run it out.
    pub(super) fn fused_answer(&mut self, index: usize) -> Result<bool, Fail> {
        let mut fusion = self.fusion.take().ok_or(Fail::Interpreter)?;
        if fusion.answers.get(index).is_some_and(Option::is_none) {
            let budget = self.budget;
            self.run_pass(&mut fusion, index);
            self.budget = budget;
        }
        let found = fusion.answers.get(index).cloned().flatten();
        self.fusion = Some(fusion);
        let found = found.ok_or(Fail::Interpreter)?;
        self.budget -= found.cost;
        if self.budget < 0 {
            return Err(Fail::CostLimit);
        }
        found.answer
    }

    /// The pass over the range of quantifier `index`'s sweep, which also
    /// answers the sweeps not yet run whose ranges hold the very same
    /// items (found without evaluating anything that could fail: a range
    /// that fails is only met where it is read).
    pub(super) fn run_pass(&mut self, fusion: &mut Fusion<'e, 'a>, index: usize) {
        let sweep = fusion.quantifiers[index].sweep;
        fusion.swept[sweep] = true;
        let range = match self.eval(&fusion.sweeps[sweep].range) {
            Ok(range) => range,
            // As the quantifier alone: the range's error, nothing charged.
            Err(e) => {
                for &q in &fusion.sweeps[sweep].quantifiers {
                    fusion.answers[q] = Some(FusedAnswer {
                        answer: Err(e.clone()),
                        cost: 0,
                    });
                }
                return;
            }
        };
        // No items (`object.spec.?initContainers.orValue([])` on most
        // Pods): each quantifier is answered as it is alone over none, `all`
        // true and `exists` false, nothing charged; no other range is
        // looked for and no pass set up.
        if let Val::List(items) = &range
            && items.is_empty()
        {
            for &q in &fusion.sweeps[sweep].quantifiers {
                fusion.answers[q] = Some(FusedAnswer {
                    answer: Ok(!fusion.quantifiers[q].exists),
                    cost: 0,
                });
            }
            return;
        }
        if fusion.peeked.is_none() {
            let sweeps = fusion.sweeps;
            fusion.peeked = Some(sweeps.iter().map(|s| self.peek_range(&s.range)).collect());
        }
        let mut pass = std::mem::take(&mut fusion.pass);
        pass.clear();
        pass.push(sweep);
        for (other, peeked) in fusion.peeked.iter().flatten().enumerate() {
            if !fusion.swept[other]
                && let Some(found) = peeked
                && super::super::value::same_items(&range, found)
            {
                fusion.swept[other] = true;
                pass.push(other);
            }
        }
        self.sweep(&range, &pass, fusion);
        fusion.pass = pass;
    }

    /// A range's value when finding it cannot fail or cost anything: a
    /// request-wide value, or a chain of fields found in the document.
    pub(super) fn peek_range(&mut self, range: &Node) -> Option<Val<'a>> {
        match range {
            Node::Shared(index) => self.env.shared(*index).cloned(),
            // A range the set's paths share (`object.spec.containers`,
            // read by several quantifiers' guards).
            Node::Memo { id, base, field } => match self.memos.get(*id) {
                Some(held) => Some(held.clone()),
                None => self.find_memo(*id, base, field).map(Val::from_doc),
            },
            Node::Path {
                base,
                fields,
                test: false,
            } => {
                let (last, walk) = fields.split_last()?;
                let found = self.peek_doc_walked(base, walk)?.get_key(last)?;
                Some(Val::from_doc(found))
            }
            _ => None,
        }
    }

    /// One pass over `range` for the fused quantifiers of the sweeps
    /// `pass`, writing each one's answer and cost into the fusion's
    /// answers.
    pub(super) fn sweep(&mut self, range: &Val<'a>, pass: &[usize], fusion: &mut Fusion<'e, 'a>) {
        let quantifiers = fusion.quantifiers;
        let budget = fusion.budget;
        let standings = &mut fusion.standings;
        standings.clear();
        for &sweep in pass {
            standings.extend(
                fusion.sweeps[sweep]
                    .quantifiers
                    .iter()
                    .map(|&quantifier| Standing {
                        quantifier,
                        budget,
                        done: None,
                        pending: None,
                    }),
            );
        }
        let mut open = standings.len();
        let mark = self.memos.mark();
        self.locals.clear();
        self.locals.push(Val::Null);
        self.locals.push(Val::Null);
        let mut visit = |this: &mut Self, item: Val<'a>| -> bool {
            this.memos.rewind(mark);
            this.locals[1] = item;
            for standing in standings.iter_mut() {
                if standing.done.is_some() {
                    continue;
                }
                let q = &quantifiers[standing.quantifier];
                // As `Evaluator::quantifier` charges and tests each item.
                this.budget = standing.budget - q.weight;
                let tested = match this.budget < 0 {
                    true => Err(Fail::CostLimit),
                    false => this.eval_bool(&q.pred),
                };
                standing.budget = this.budget;
                match tested {
                    Ok(b) if b == q.exists => standing.done = Some(Ok(q.exists)),
                    Ok(_) => {}
                    Err(Fail::CostLimit) => standing.done = Some(Err(Fail::CostLimit)),
                    Err(e) => {
                        if standing.pending.is_none() || e == Fail::Interpreter {
                            standing.pending = Some(e);
                        }
                    }
                }
                if standing.done.is_some() {
                    open -= 1;
                }
            }
            open == 0
        };
        let iterated = self.each_item(range, |this, item| Ok(visit(this, item)));
        self.memos.rewind(mark);
        self.locals.clear();
        for standing in fusion.standings.iter_mut() {
            let q = standing.quantifier;
            let exists = quantifiers[q].exists;
            fusion.answers[q] = Some(FusedAnswer {
                answer: match (&iterated, standing.done.take(), standing.pending.take()) {
                    (Err(e), _, _) => Err(e.clone()),
                    (_, Some(done), _) => done,
                    (_, None, Some(e)) => Err(e),
                    (_, None, None) => Ok(!exists),
                },
                cost: budget - standing.budget,
            });
        }
    }
}
