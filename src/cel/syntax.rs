//! Reading a parsed expression: parsing with cel-go's limits and error
//! report, the names it binds and calls, its cost weight, and the forms only
//! the interpreter runs.

use super::*;
use kube_cel::cel::common::ast::{
    EntryExpr, Expr, IdedEntryExpr, IdedExpr, LiteralValue, operators,
};
use kube_cel::cel::parser::Parser;
use std::collections::HashSet;

/// Number of nodes of a tree: the cost charged for one evaluation of it.
pub(super) fn weight(e: &IdedExpr) -> i64 {
    1 + match &e.expr {
        Expr::Call(c) => {
            c.target.as_deref().map_or(0, weight) + c.args.iter().map(weight).sum::<i64>()
        }
        Expr::Comprehension(c) => weight(&c.iter_range) + weight(&c.result),
        Expr::List(l) => l.elements.iter().map(weight).sum(),
        Expr::Map(m) => m.entries.iter().map(entry_weight).sum(),
        Expr::Struct(s) => s.entries.iter().map(entry_weight).sum(),
        Expr::Select(s) => weight(&s.operand),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => 0,
    }
}

pub(super) fn entry_weight(e: &IdedEntryExpr) -> i64 {
    match &e.expr {
        EntryExpr::MapEntry(m) => weight(&m.key) + weight(&m.value),
        EntryExpr::StructField(f) => weight(&f.value),
    }
}

/// `source` parsed, with the rewrites both evaluators compile from.
pub(super) fn parse(source: &str) -> Result<IdedExpr, CelError> {
    // The parser is a dependency's and input is the user's: a panic in
    // it (its fuzzed error recovery has had some) is a compile error
    // here, not a crash (fuzz/regressions/policy_load).
    let parsed = std::panic::catch_unwind(|| {
        Parser::new()
            .enable_optional_syntax(true)
            .max_recursion_depth(MAX_NESTING)
            .parse(&unary_runs::cancel_unary_runs(
                &literals::canonical_literals(source),
            ))
    })
    .map_err(|_| CelError::Compile("the CEL parser failed on this expression".into()))?
    .map_err(|e| CelError::Compile(reported_errors(&e)))?;
    let mut shadowed = HashSet::new();
    bound_names(&parsed, &mut shadowed);
    Ok(rewrite(parsed, &shadowed))
}

/// cel-go's compile-time check of `"...".format([...])` with a constant
/// template and a list literal (its `stringFormatValidator`, which
/// Kubernetes' environment has): a clause that does not parse, or items
/// too few or too many for the clauses, fail the expression's compilation
/// as they fail a policy's in Kubernetes.
pub(super) fn check_constant_formats(e: &IdedExpr) -> Result<(), String> {
    if let Expr::Call(c) = &e.expr
        && c.func_name == "format"
        && let Some(Expr::Literal(LiteralValue::String(template))) =
            c.target.as_deref().map(|t| &t.expr)
        && let [arg] = c.args.as_slice()
        && let Expr::List(items) = &arg.expr
    {
        string_format::check_constant(template, items.elements.len())?;
    }
    let mut result = Ok(());
    for_each_child(e, &mut |child| {
        if result.is_ok() {
            result = check_constant_formats(child);
        }
    });
    result
}

/// The names an expression binds (comprehension and `cel.bind`
/// variables): a type name used so (`exists(type, ...)`) stays a
/// variable everywhere in it.
pub(super) fn bound_names(e: &IdedExpr, out: &mut HashSet<String>) {
    match &e.expr {
        Expr::Call(c) if is_bind(c) => {
            if let Expr::Ident(name) = &c.args[0].expr {
                out.insert(name.clone());
            }
        }
        Expr::Comprehension(c) => {
            out.insert(c.iter_var.clone());
            out.extend(c.iter_var2.clone());
            out.insert(c.accu_var.clone());
        }
        Expr::Call(c) if is_optional_map(c) => {
            if let Expr::Ident(name) = &c.args[0].expr {
                out.insert(name.clone());
            }
        }
        Expr::Call(c) if is_two_variable(c) => {
            for a in &c.args[..2] {
                if let Expr::Ident(name) = &a.expr {
                    out.insert(name.clone());
                }
            }
        }
        _ => {}
    }
    for_each_child(e, &mut |child| bound_names(child, out));
}

/// The functions an expression calls, a call on a plain name qualified
/// with it (`envoy.Allowed`), as the interpreter resolves such calls.
pub(super) fn called_functions(e: &IdedExpr, out: &mut Vec<String>) {
    if let Expr::Call(c) = &e.expr {
        match c.target.as_deref().map(|t| &t.expr) {
            Some(Expr::Ident(prefix)) => out.push(format!("{prefix}.{}", c.func_name)),
            _ => out.push(c.func_name.clone()),
        }
    }
    for_each_child(e, &mut |child| called_functions(child, out));
}

/// The forms of cel-go's semantics the interpreter has no operator for:
/// every field selection and `has()` as a call of the library's
/// [`library::SELECT`] and [`library::HAS`] (the interpreter's own
/// selection answers false on a value that is not a map, where cel-go
/// fails with `no such key`, or `unsupported index type` on a list), and
/// a comprehension's range checked by [`library::ITERABLE`], `-x` as
/// [`library::NEGATE`] (the interpreter's takes a bool and wraps the
/// smallest int), and a two-variable comprehension over pairs
/// ([`pairs_form`]).
pub(super) fn interpreter_forms(mut e: IdedExpr) -> IdedExpr {
    fn visit(e: &mut IdedExpr) {
        for_each_child_mut(e, &mut visit);
        if let Expr::Comprehension(c) = &mut e.expr {
            pairs_form(c);
            if !matches!(c.iter_range.expr, Expr::List(_)) {
                let range = std::mem::replace(&mut c.iter_range, ided(Expr::Unspecified));
                c.iter_range = ided(call(library::ITERABLE, vec![range]));
            }
        }
        if let Expr::Call(c) = &mut e.expr
            && c.func_name == operators::NEGATE
        {
            c.func_name = library::NEGATE.into();
        }
        if let Expr::Select(s) = &mut e.expr {
            let operand = std::mem::replace(&mut *s.operand, ided(Expr::Unspecified));
            let field = ided(Expr::Literal(LiteralValue::String(
                std::mem::take(&mut s.field).into(),
            )));
            let name = if s.test {
                library::HAS
            } else {
                library::SELECT
            };
            e.expr = call(name, vec![operand, field]);
        }
    }
    visit(&mut e);
    e
}

/// [`for_each_child`], for changing the subexpressions in place.
pub(super) fn for_each_child_mut(e: &mut IdedExpr, f: &mut dyn FnMut(&mut IdedExpr)) {
    fn entries(entries: &mut [IdedEntryExpr], f: &mut dyn FnMut(&mut IdedExpr)) {
        for x in entries {
            match &mut x.expr {
                EntryExpr::MapEntry(m) => {
                    f(&mut m.key);
                    f(&mut m.value);
                }
                EntryExpr::StructField(s) => f(&mut s.value),
            }
        }
    }
    match &mut e.expr {
        Expr::Call(c) => {
            c.target.iter_mut().for_each(|t| f(t));
            c.args.iter_mut().for_each(&mut *f);
        }
        Expr::Comprehension(c) => {
            for x in [
                &mut c.iter_range,
                &mut c.accu_init,
                &mut c.loop_cond,
                &mut c.loop_step,
                &mut c.result,
            ] {
                f(x);
            }
        }
        Expr::List(l) => l.elements.iter_mut().for_each(&mut *f),
        Expr::Map(m) => entries(&mut m.entries, f),
        Expr::Struct(st) => entries(&mut st.entries, f),
        Expr::Select(sel) => f(&mut sel.operand),
        _ => {}
    }
}

/// Calls `f` on each direct subexpression of `e`.
pub(super) fn for_each_child<'e>(e: &'e IdedExpr, f: &mut dyn FnMut(&'e IdedExpr)) {
    fn entries<'e>(entries: &'e [IdedEntryExpr], f: &mut dyn FnMut(&'e IdedExpr)) {
        for x in entries {
            match &x.expr {
                EntryExpr::MapEntry(m) => {
                    f(&m.key);
                    f(&m.value);
                }
                EntryExpr::StructField(s) => f(&s.value),
            }
        }
    }
    match &e.expr {
        Expr::Call(c) => {
            c.target.iter().for_each(|t| f(t));
            c.args.iter().for_each(&mut *f);
        }
        Expr::Comprehension(c) => {
            for x in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                f(x);
            }
        }
        Expr::List(l) => l.elements.iter().for_each(&mut *f),
        Expr::Map(m) => entries(&m.entries, f),
        Expr::Struct(st) => entries(&st.entries, f),
        Expr::Select(sel) => f(&sel.operand),
        _ => {}
    }
}

/// How many parse errors a compile error reports, as cel-go's parser
/// (`ErrorReportingLimit`'s default); each repeats the expression, so an
/// unbounded list of a long broken expression runs to gigabytes (a fuzzed
/// 2 KB expression took 90 s to print).
pub(super) const MAX_REPORTED_ERRORS: usize = 100;

/// The first parse errors, one line, and how many more there were.
pub(super) fn reported_errors(e: &kube_cel::cel::parser::ParseErrors) -> String {
    let mut text = e
        .errors
        .iter()
        .take(MAX_REPORTED_ERRORS)
        .map(|e| e.to_string().replace('\n', " "))
        .collect::<Vec<_>>()
        .join(" ");
    if e.errors.len() > MAX_REPORTED_ERRORS {
        text.push_str(&format!(
            " {} more errors were truncated",
            e.errors.len() - MAX_REPORTED_ERRORS
        ));
    }
    text
}
