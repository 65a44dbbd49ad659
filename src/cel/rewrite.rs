//! The compile-time rewrite of the parsed tree (see the parent module):
//! optional selection, struct literals, cost charges, and cel-go's macros the
//! cel crate lacks (two-variable comprehensions, `cel.bind`, `optMap`).

use super::*;
use kube_cel::cel::common::ast::{
    CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedEntryExpr, IdedExpr, ListExpr, LiteralValue,
    MapEntryExpr, MapExpr, operators,
};
use std::collections::HashSet;

pub(super) fn call(name: &str, args: Vec<IdedExpr>) -> Expr {
    Expr::Call(CallExpr {
        func_name: name.to_string(),
        target: None,
        args,
    })
}

pub(super) fn ided(expr: Expr) -> IdedExpr {
    IdedExpr { id: 0, expr }
}

/// Whether `e` yields an optional by optional chaining.
/// `cel.bind(<identifier>, init, body)`.
pub(super) fn is_bind(c: &CallExpr) -> bool {
    c.func_name == "bind"
        && c.args.len() == 3
        && matches!(&c.args[0].expr, Expr::Ident(_))
        && matches!(c.target.as_deref(), Some(IdedExpr { expr: Expr::Ident(t), .. }) if t == "cel")
}

/// The two-variable comprehensions of cel-go (Kubernetes' CEL has them
/// since 1.33), by name and argument count (with and without a filter).
pub(super) const TWO_VARIABLE: &[(&str, usize)] = &[
    ("all", 3),
    ("exists", 3),
    ("existsOne", 3),
    ("exists_one", 3),
    ("transformList", 3),
    ("transformList", 4),
    ("transformMap", 3),
    ("transformMap", 4),
];

/// `range.all(i, v, p)` and the others of [`TWO_VARIABLE`]: the parser
/// leaves them as calls.
pub(super) fn is_two_variable(c: &CallExpr) -> bool {
    c.target.is_some()
        && TWO_VARIABLE.contains(&(c.func_name.as_str(), c.args.len()))
        && c.args[..2]
            .iter()
            .all(|a| matches!(&a.expr, Expr::Ident(_)))
}

/// `cel.bind(name, init, body)`'s expansion: a comprehension over no
/// elements whose accumulator `name` holds `init` while `body` is
/// evaluated.
pub(super) fn bind(name: String, init: IdedExpr, body: IdedExpr) -> IdedExpr {
    ided(Expr::Comprehension(Box::new(ComprehensionExpr {
        iter_range: ided(Expr::List(ListExpr {
            elements: Vec::new(),
            optional_indices: Vec::new(),
        })),
        iter_var: "#unused".into(),
        iter_var2: None,
        accu_var: name.clone(),
        accu_init: init,
        loop_cond: ided(Expr::Literal(LiteralValue::Boolean(false.into()))),
        loop_step: ided(Expr::Ident(name)),
        result: body,
    })))
}

/// A two-variable comprehension ([`is_two_variable`]) as cel-go expands
/// it: a comprehension whose `iter_var` is the index or key and
/// `iter_var2` the item or value. `transformMap` collects `[key, value]`
/// pairs into a map ([`library::MAP_OF_PAIRS`]). The direct evaluator runs
/// this form; the interpreter, which has no second variable, runs
/// [`pairs_form`] of it.
pub(super) fn expand_two_variable(c: CallExpr) -> IdedExpr {
    const RESULT: &str = "@result";
    let mut args = c.args.into_iter();
    let mut name = || match args.next().map(|a| a.expr) {
        Some(Expr::Ident(n)) => n,
        _ => unreachable!("is_two_variable checked the names"),
    };
    let (first, second) = (name(), name());
    // The predicate, or the filter and the value.
    let mut rest = args;
    let accu = || ided(Expr::Ident(RESULT.into()));
    let literal = |v: LiteralValue| ided(Expr::Literal(v));
    let list = |elements: Vec<IdedExpr>| {
        ided(Expr::List(ListExpr {
            elements,
            optional_indices: Vec::new(),
        }))
    };
    let (init, condition, step, result) = match c.func_name.as_str() {
        "all" => (
            literal(LiteralValue::Boolean(true.into())),
            ided(call(operators::NOT_STRICTLY_FALSE, vec![accu()])),
            ided(call(
                operators::LOGICAL_AND,
                vec![accu(), rest.next().expect("3 args")],
            )),
            accu(),
        ),
        "exists" => (
            literal(LiteralValue::Boolean(false.into())),
            ided(call(
                operators::NOT_STRICTLY_FALSE,
                vec![ided(call(operators::LOGICAL_NOT, vec![accu()]))],
            )),
            ided(call(
                operators::LOGICAL_OR,
                vec![accu(), rest.next().expect("3 args")],
            )),
            accu(),
        ),
        "existsOne" | "exists_one" => (
            literal(LiteralValue::Int(0.into())),
            literal(LiteralValue::Boolean(true.into())),
            ided(call(
                operators::CONDITIONAL,
                vec![
                    rest.next().expect("3 args"),
                    ided(call(
                        operators::ADD,
                        vec![accu(), literal(LiteralValue::Int(1.into()))],
                    )),
                    accu(),
                ],
            )),
            ided(call(
                operators::EQUALS,
                vec![accu(), literal(LiteralValue::Int(1.into()))],
            )),
        ),
        transform => {
            let (filter, value) = match (rest.next(), rest.next()) {
                (Some(filter), Some(value)) => (Some(filter), value),
                (Some(value), None) => (None, value),
                _ => unreachable!("is_two_variable checked the count"),
            };
            let item = match transform {
                "transformMap" => list(vec![ided(Expr::Ident(first.clone())), value]),
                _ => value,
            };
            let appended = ided(call(operators::ADD, vec![accu(), list(vec![item])]));
            let step = match filter {
                Some(f) => ided(call(operators::CONDITIONAL, vec![f, appended, accu()])),
                None => appended,
            };
            let result = match transform {
                "transformMap" => ided(call(library::MAP_OF_PAIRS, vec![accu()])),
                _ => accu(),
            };
            (
                list(Vec::new()),
                literal(LiteralValue::Boolean(true.into())),
                step,
                result,
            )
        }
    };
    ided(Expr::Comprehension(Box::new(ComprehensionExpr {
        iter_range: *c.target.expect("a target"),
        iter_var: first,
        iter_var2: Some(second),
        accu_var: RESULT.into(),
        accu_init: init,
        loop_cond: condition,
        loop_step: step,
        result,
    })))
}

/// A two-variable comprehension as the interpreter can run it: over the
/// range's `[index or key, item or value]` pairs ([`library::PAIRS`]),
/// its condition and step under two binds that name the pair's halves.
/// The semantics are the one-variable macros', as the interpreter runs
/// them: its comprehension stops at an item's error, where cel-go's `all`
/// lets a later false decide; the direct evaluator answers those.
pub(super) fn pairs_form(c: &mut ComprehensionExpr) {
    const PAIR: &str = "@pair";
    let Some(second) = c.iter_var2.take() else {
        return;
    };
    let first = std::mem::replace(&mut c.iter_var, PAIR.into());
    let half = |i: i64| {
        ided(call(
            "_[_]",
            vec![
                ided(Expr::Ident(PAIR.into())),
                ided(Expr::Literal(LiteralValue::Int(i.into()))),
            ],
        ))
    };
    let bound = |body: IdedExpr| bind(first.clone(), half(0), bind(second.clone(), half(1), body));
    let range = std::mem::replace(&mut c.iter_range, ided(Expr::Unspecified));
    c.iter_range = ided(call(library::PAIRS, vec![range]));
    let step = std::mem::replace(&mut c.loop_step, ided(Expr::Unspecified));
    c.loop_step = bound(step);
}

/// `opt.optMap(v, expr)` and `opt.optFlatMap(v, expr)`: CEL's optional
/// macros, which the parser leaves as calls.
pub(super) fn is_optional_map(c: &CallExpr) -> bool {
    matches!(c.func_name.as_str(), "optMap" | "optFlatMap")
        && c.target.is_some()
        && c.args.len() == 2
        && matches!(&c.args[0].expr, Expr::Ident(_))
}

/// cel-go's expansion of an optional macro ([`is_optional_map`]):
/// `opt.hasValue() ? optional.of(cel.bind(v, opt.value(), expr)) :
/// optional.none()`, without `optional.of` for `optFlatMap`, whose
/// `expr` gives the optional.
pub(super) fn expand_optional_map(c: CallExpr) -> IdedExpr {
    let target = *c.target.expect("is_optional_map checked the target");
    let mut args = c.args.into_iter();
    let (
        Some(IdedExpr {
            expr: Expr::Ident(name),
            ..
        }),
        Some(body),
    ) = (args.next(), args.next())
    else {
        unreachable!("is_optional_map checked the arguments")
    };
    let method = |target: IdedExpr, name: &str, args: Vec<IdedExpr>| {
        ided(Expr::Call(CallExpr {
            func_name: name.into(),
            target: Some(Box::new(target)),
            args,
        }))
    };
    let optional = || ided(Expr::Ident("optional".into()));
    let mapped = bind(name, method(target.clone(), "value", Vec::new()), body);
    let present = match c.func_name.as_str() {
        "optMap" => method(optional(), "of", vec![mapped]),
        _ => mapped,
    };
    ided(call(
        operators::CONDITIONAL,
        vec![
            method(target, "hasValue", Vec::new()),
            present,
            method(optional(), "none", Vec::new()),
        ],
    ))
}

pub(super) fn is_optional(e: &IdedExpr) -> bool {
    matches!(&e.expr, Expr::Call(c) if c.func_name == library::OPT_SELECT || c.func_name == library::OPT_INDEX)
}

/// The compile-time rewrite described in the module docs.
pub(super) fn rewrite(e: IdedExpr, shadowed: &HashSet<String>) -> IdedExpr {
    let id = e.id;
    let expr = match e.expr {
        Expr::Call(c) if is_bind(&c) => {
            // `cel.bind(name, init, body)` (CEL's bind extension) is its
            // expansion: a comprehension over no elements whose
            // accumulator `name` holds `init` while `body` is evaluated.
            let mut args = c.args.into_iter();
            let (
                Some(IdedExpr {
                    expr: Expr::Ident(name),
                    ..
                }),
                Some(init),
                Some(body),
            ) = (args.next(), args.next(), args.next())
            else {
                unreachable!("is_bind checked the arguments")
            };
            bind(name, rewrite(init, shadowed), rewrite(body, shadowed)).expr
        }
        Expr::Call(c) if is_two_variable(&c) => rewrite(expand_two_variable(c), shadowed).expr,
        Expr::Call(c) if is_optional_map(&c) => rewrite(expand_optional_map(c), shadowed).expr,
        // A type name (`int`, `map`, `null_type`, ...) is the value
        // `type()` gives for values of that type.
        Expr::Ident(name)
            if library::TYPE_NAMES.contains(&name.as_str()) && !shadowed.contains(&name) =>
        {
            Expr::Literal(LiteralValue::String(library::type_value(&name).into()))
        }
        Expr::Call(mut c) => {
            c.target = c.target.map(|t| Box::new(rewrite(*t, shadowed)));
            c.args = c.args.into_iter().map(|e| rewrite(e, shadowed)).collect();
            match c.func_name.as_str() {
                // The value's equality (numbers across types), not the
                // interpreter's operator's.
                "_==_" => c.func_name = library::EQUALS.into(),
                // cel-go's error order: see library::AND.
                "_&&_" => c.func_name = library::AND.into(),
                "_||_" => c.func_name = library::OR.into(),
                "_!=_" => c.func_name = library::NOT_EQUALS.into(),
                "@in" => c.func_name = library::IN.into(),
                "_?._" => {
                    c.func_name = library::OPT_SELECT.into();
                    if let Some(Expr::Literal(LiteralValue::String(field))) =
                        c.args.get_mut(1).map(|f| &mut f.expr)
                        && let Some(name) = literals::backquoted_name(field)
                    {
                        *field = name.into();
                    }
                }
                "_[?_]" => c.func_name = library::OPT_INDEX.into(),
                "_[_]" if c.args.first().is_some_and(is_optional) => {
                    c.func_name = library::OPT_INDEX.into()
                }
                _ => {}
            }
            Expr::Call(c)
        }
        Expr::Comprehension(mut c) => {
            c.iter_range = rewrite(c.iter_range, shadowed);
            c.accu_init = rewrite(c.accu_init, shadowed);
            c.loop_cond = rewrite(c.loop_cond, shadowed);
            c.result = rewrite(c.result, shadowed);
            let step = rewrite(c.loop_step, shadowed);
            let w = weight(&step) + weight(&c.loop_cond);
            c.loop_step = ided(call(
                library::TICK,
                vec![step, ided(Expr::Literal(LiteralValue::Int(w.into())))],
            ));
            Expr::Comprehension(c)
        }
        Expr::List(mut l) => {
            l.elements = l
                .elements
                .into_iter()
                .map(|e| rewrite(e, shadowed))
                .collect();
            Expr::List(l)
        }
        Expr::Map(m) => Expr::Map(MapExpr {
            entries: m
                .entries
                .into_iter()
                .map(|e| rewrite_entry(e, shadowed))
                .collect(),
        }),
        // Typed object construction (`Object{...}`, `JSONPatch{...}`) is a
        // map of its fields: what the policy kinds read back is JSON.
        Expr::Struct(s) => Expr::Map(MapExpr {
            entries: s
                .entries
                .into_iter()
                .map(|e| rewrite_entry(e, shadowed))
                .collect(),
        }),
        Expr::Select(mut s) => {
            s.operand = Box::new(rewrite(*s.operand, shadowed));
            if let Some(name) = literals::backquoted_name(&s.field) {
                s.field = name;
            }
            // Selecting on an optional gives an optional: `a.?b.c` is `a.?b.?c`.
            if !s.test && is_optional(&s.operand) {
                call(
                    library::OPT_SELECT,
                    vec![
                        *s.operand,
                        ided(Expr::Literal(LiteralValue::String(s.field.into()))),
                    ],
                )
            } else {
                Expr::Select(s)
            }
        }
        other => other,
    };
    IdedExpr { id, expr }
}

pub(super) fn rewrite_entry(e: IdedEntryExpr, shadowed: &HashSet<String>) -> IdedEntryExpr {
    let expr = match e.expr {
        EntryExpr::MapEntry(m) => EntryExpr::MapEntry(MapEntryExpr {
            key: rewrite(m.key, shadowed),
            value: rewrite(m.value, shadowed),
            optional: m.optional,
        }),
        EntryExpr::StructField(f) => EntryExpr::MapEntry(MapEntryExpr {
            key: ided(Expr::Literal(LiteralValue::String(f.field.into()))),
            value: rewrite(f.value, shadowed),
            optional: f.optional,
        }),
    };
    IdedEntryExpr { id: e.id, expr }
}
