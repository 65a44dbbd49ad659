//! A rule's validations compiled with its variables resolved.
//!
//! Read by name at run time, every `variables.<name>` searched the rule's
//! declarations, and every variable was evaluated by an evaluator of its
//! own on its first read, kept in a cell and cloned into the expression
//! that read it. Here the names are resolved when the policy is compiled,
//! to the last declaration visible to the expression (a variable sees only
//! the ones declared before it), and some variables are compiled into the
//! expression that reads them:
//! - a constant (`['CHOWN', ...]`) everywhere it is read, where
//!   `x in variables.allowed` becomes a test against the constant;
//! - any other variable read at exactly one place, outside the loop of a
//!   comprehension, so it is still evaluated at most once and only when
//!   read. Under [`Node::Inlined`], whose failure declines the whole
//!   evaluation as a failed read of the variable does.
//!
//! Read by declaration index ([`direct::VariableRef::Declared`]): a
//! request-wide variable (the request computes it once for every policy),
//! one read at several places or in a loop, one tested with `has()`, one
//! only the interpreter can evaluate. On the Pod Security set most
//! variables are request-wide or constants; `require-run-as-nonroot`, which
//! chains three per-rule variables, is 21% faster alone
//! (`perf-results/2026-11-30-evaluation-core-v2-step22.md`).

use super::direct::{self, Node, RuleVariable, RuleVariables};
use super::{Program, for_each_child, parse};
use kube_cel::cel::common::ast::{Expr, IdedExpr};
use std::sync::Arc;

/// The plans of one rule's variables and validations.
#[derive(Debug, Default)]
pub struct RulePlan {
    /// By declaration: the plan a read evaluates; `None` when
    /// only the interpreter can evaluate it.
    pub variables: Vec<Option<Arc<Node>>>,
    /// By validation: its plan, `None` when only the interpreter can
    /// evaluate it.
    pub validations: Vec<Option<Arc<Node>>>,
}

/// How a rule's expressions read one variable.
#[derive(Default, Clone, Copy)]
struct Reads {
    places: u32,
    in_loop: bool,
    tested: bool,
}

impl RulePlan {
    /// The plans of `validations` and of `variables` (name, program, by
    /// declaration), as [`RulePlan`] describes.
    pub fn build(variables: &[(&str, &Program)], validations: &[&Program]) -> RulePlan {
        let parsed = |p: &Program| parse(p.source()).ok();
        let variable_trees: Vec<Option<IdedExpr>> =
            variables.iter().map(|(_, p)| parsed(p)).collect();
        let validation_trees: Vec<Option<IdedExpr>> =
            validations.iter().map(|p| parsed(p)).collect();
        let names: Vec<&str> = variables.iter().map(|(name, _)| *name).collect();

        let mut reads = vec![Reads::default(); variables.len()];
        for (index, tree) in variable_trees.iter().enumerate() {
            if let Some(tree) = tree {
                count_reads(tree, &names, index, &mut reads);
            }
        }
        for tree in validation_trees.iter().flatten() {
            count_reads(tree, &names, names.len(), &mut reads);
        }

        let declared = variables
            .iter()
            .zip(&variable_trees)
            .zip(&reads)
            .map(|(((name, program), tree), reads)| {
                let in_place = tree.as_ref().filter(|_| in_place(program, reads));
                RuleVariable {
                    name,
                    in_place,
                    free: in_place.map(free_names).unwrap_or_default(),
                }
            })
            .collect();
        let rule = RuleVariables { declared };

        let plan = |tree: &Option<IdedExpr>, visible: usize| {
            let tree = tree.as_ref()?;
            direct::compile_in_rule(tree, &rule, visible).map(|c| Arc::new(c.node))
        };
        RulePlan {
            variables: variables
                .iter()
                .zip(&variable_trees)
                .enumerate()
                .map(|(index, ((_, program), tree))| {
                    // The interned plan is the request's key for its
                    // shared value.
                    if program.request_wide_plan().is_some() {
                        return program.direct_plan().cloned();
                    }
                    program.direct_plan()?;
                    plan(tree, index)
                })
                .collect(),
            validations: validations
                .iter()
                .zip(&validation_trees)
                .map(|(program, tree)| {
                    program.direct_plan()?;
                    plan(tree, names.len())
                })
                .collect(),
        }
    }
}

/// Whether a variable read `reads` is compiled where it is read.
fn in_place(program: &Program, reads: &Reads) -> bool {
    match program.direct_plan().map(|p| &**p) {
        None => false,
        Some(Node::Const(_)) => true,
        Some(_) => {
            program.request_wide_plan().is_none()
                && reads.places == 1
                && !reads.in_loop
                && !reads.tested
        }
    }
}

/// Calls `visit` on `e` and what is under it, with the comprehension
/// variables in scope there and whether it is in a comprehension's loop
/// (evaluated once per item); `visit` returning false skips what is under
/// that node. The scope is the direct compile's: the accumulator and the
/// item in the loop, the accumulator alone in the result (`cel.bind`'s
/// body, evaluated once).
fn walk_scoped(
    e: &IdedExpr,
    locals: &mut Vec<String>,
    in_loop: bool,
    visit: &mut dyn FnMut(&IdedExpr, &[String], bool) -> bool,
) {
    if !visit(e, locals, in_loop) {
        return;
    }
    match &e.expr {
        Expr::Comprehension(c) => {
            walk_scoped(&c.iter_range, locals, in_loop, visit);
            walk_scoped(&c.accu_init, locals, in_loop, visit);
            let depth = locals.len();
            locals.push(c.accu_var.clone());
            locals.push(c.iter_var.clone());
            locals.extend(c.iter_var2.clone());
            walk_scoped(&c.loop_cond, locals, true, visit);
            walk_scoped(&c.loop_step, locals, true, visit);
            locals.truncate(depth + 1);
            walk_scoped(&c.result, locals, in_loop, visit);
            locals.truncate(depth);
        }
        _ => for_each_child(e, &mut |child| walk_scoped(child, locals, in_loop, visit)),
    }
}

/// Counts in `reads` where `e`, which sees the first `visible` of `names`,
/// reads each variable, as the direct compile resolves a read: the last
/// declaration of the name among those visible, unless a comprehension
/// binds `variables`.
fn count_reads(e: &IdedExpr, names: &[&str], visible: usize, reads: &mut [Reads]) {
    walk_scoped(e, &mut Vec::new(), false, &mut |e, locals, in_loop| {
        let Expr::Select(s) = &e.expr else {
            return true;
        };
        if !matches!(&s.operand.expr, Expr::Ident(root) if root == "variables")
            || locals.iter().any(|l| l == "variables")
        {
            return true;
        }
        if let Some(index) = names[..visible].iter().rposition(|n| *n == s.field) {
            let read = &mut reads[index];
            read.places += 1;
            read.in_loop |= in_loop;
            read.tested |= s.test;
        }
        false
    });
}

/// The identifiers `e` reads that it does not bind itself.
fn free_names(e: &IdedExpr) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    walk_scoped(e, &mut Vec::new(), false, &mut |e, locals, _| {
        if let Expr::Ident(name) = &e.expr
            && !locals.contains(name)
            && !out.contains(name)
        {
            out.push(name.clone());
        }
        true
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plans' debug text, variables then validations.
    fn plans(variables: &[(&str, &str)], validations: &[&str]) -> (Vec<String>, Vec<String>) {
        let variables: Vec<(&str, Program)> = variables
            .iter()
            .map(|(name, source)| (*name, Program::compile(source).unwrap()))
            .collect();
        let validations: Vec<Program> = validations
            .iter()
            .map(|source| Program::compile(source).unwrap())
            .collect();
        let named: Vec<(&str, &Program)> = variables.iter().map(|(n, p)| (*n, p)).collect();
        let plan = RulePlan::build(&named, &validations.iter().collect::<Vec<_>>());
        let text = |plans: &[Option<Arc<Node>>]| {
            plans
                .iter()
                .map(|p| format!("{:?}", p.as_deref()))
                .collect::<Vec<_>>()
        };
        (text(&plan.variables), text(&plan.validations))
    }

    #[test]
    fn a_constant_and_a_variable_read_once_are_compiled_where_they_are_read() {
        let (_, validations) = plans(
            &[
                ("allowed", "['a', 'b']"),
                ("ns", "request.namespace"),
                ("named", "variables.ns + '/x'"),
            ],
            &[
                "object.spec.containers.all(c, c.name in variables.allowed) && variables.named == 'default/x'",
            ],
        );
        let plan = &validations[0];
        // The constant list is tested in place, the chain of two
        // variables evaluated in place, each under its marker.
        assert!(plan.contains("InConst"), "{plan}");
        assert_eq!(plan.matches("Inlined").count(), 2, "{plan}");
        assert!(!plan.contains("Variable"), "{plan}");
    }

    #[test]
    fn variables_read_twice_in_a_loop_tested_or_request_wide_stay_by_declaration() {
        let (variables, validations) = plans(
            &[
                ("twice", "request.namespace"),
                ("looped", "request.name"),
                ("tested", "request.uid"),
                ("wide", "object.spec.containers"),
                // Reads `request`: not compiled where `cel.bind` binds
                // that name (read once, outside any loop).
                ("ns", "request.namespace"),
            ],
            &[
                "variables.twice == 'a' || variables.twice == 'b'",
                "variables.wide.all(c, c.name != variables.looped)",
                "has(variables.tested)",
                "cel.bind(request, 1, variables.ns == 'default')",
            ],
        );
        let by_declaration = [
            (0, "Variable(Declared(0))"),
            (1, "Variable(Declared(1))"),
            (1, "Variable(Declared(3))"),
            (2, "HasVariable(Declared(2))"),
            (3, "Variable(Declared(4))"),
        ];
        for (at, read) in by_declaration {
            assert!(
                validations[at].contains(read),
                "{read}: {}",
                validations[at]
            );
        }
        assert!(validations.iter().all(|v| !v.contains("Inlined")));
        // A variable read by declaration keeps its own plan.
        assert!(
            variables.iter().all(|v| v.starts_with("Some(")),
            "{variables:?}"
        );
    }

    #[test]
    fn a_name_resolves_to_the_last_declaration_before_the_expression() {
        let (variables, validations) = plans(
            &[
                ("x", "request.name"),
                ("y", "variables.x + variables.z"),
                ("x", "request.namespace"),
                ("z", "request.uid"),
            ],
            &["variables.x == 'a' && variables.x == 'b'"],
        );
        // `y` reads a `z` not yet declared: no plan (the scope answers).
        assert_eq!(variables[1], "None");
        // The validation reads the second `x` (twice: by declaration).
        assert!(
            validations[0].contains("Variable(Declared(2))"),
            "{}",
            validations[0]
        );
        assert!(
            !validations[0].contains("Declared(0)"),
            "{}",
            validations[0]
        );
    }
}
