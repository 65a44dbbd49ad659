//! A rule's validations answered with its `variables` evaluated on first
//! read, with no scope bound for them.
//!
//! [`super::bind_variables`] binds every variable of a rule into a scope of
//! its own before any validation runs: an [`Activation`] made, a list of
//! values allocated and filled by name, and both dropped. On the Pod
//! Security set in `validate.cel` form that machinery cost more than the
//! variables' own evaluations (`perf-results/2026-11-30-evaluation-core-v2-step20.md`).
//! Here the rule's plans ([`crate::cel::rule_plan`], names resolved to
//! declarations and some variables compiled where they are read when the
//! policy was compiled) run over the request's root. A variable read by
//! declaration is a constant where its plan holds it, a request-wide one
//! from the request's shared values, any other evaluated by the direct
//! evaluator when an expression first reads it and kept for the rest of
//! the rule (the API server evaluates variables lazily too).
//!
//! This is a short cut, not a second semantics: it answers only when every
//! validation gave a bool and every variable read was evaluated directly.
//! Anything else (an error, a variable the interpreter must evaluate, a
//! denial whose message is an expression, audit annotations) gives `None`,
//! and the caller binds the variables and runs the validations as before,
//! which words errors and messages exactly. Evaluation has no side effects,
//! so the attempt changes no answer.

use super::{CelVerdict, EvalErrors, static_denial};
use crate::cel::direct::{self, Bindings, Node, Val};
use crate::cel::{Activation, COST_LIMIT};
use crate::policy::cel_policy::{CelChecks, CompiledNamed};
use smallvec::SmallVec;
use std::cell::{Cell, OnceCell};
use std::sync::Arc;

/// `checks`' validations over `root`, with the variables read lazily; `None`
/// when the caller must bind the variables and run them itself.
pub fn validations(
    checks: &CelChecks,
    root: &Activation,
    errors: EvalErrors,
) -> Option<CelVerdict> {
    if !checks.audit_annotations.is_empty() || checks.params.is_some() {
        return None;
    }
    // Checks built without their plan (`CelChecks::with_plan`) have none
    // to run: reading their validations as none would pass them.
    let plan = &checks.plan;
    if plan.validations.len() != checks.validations.len()
        || plan.variables.len() != checks.variables.len()
    {
        return None;
    }
    // The cells live here, filled where they lie; built inside the
    // struct they were built and then copied (2% of the `validate.cel`
    // set's time).
    let mut values: SmallVec<[OnceCell<Option<Val>>; 6]> = SmallVec::new();
    values.resize_with(checks.variables.len(), OnceCell::new);
    let variables = LazyVariables {
        root,
        declared: &checks.variables,
        plans: &plan.variables,
        values: &values,
        incomplete: Cell::new(false),
    };
    for (v, compiled) in checks.validations.iter().zip(&plan.validations) {
        let compiled = compiled.as_ref()?;
        match direct::evaluate_bool(compiled, &variables, COST_LIMIT as i64) {
            Ok(true) => {}
            Ok(false) if v.message_expression.is_none() && variables.complete() => {
                return Some(CelVerdict::Fail(static_denial(v, errors)));
            }
            Ok(false) | Err(_) => return None,
        }
    }
    variables.complete().then_some(CelVerdict::Pass)
}

/// The variables of one rule's evaluation, each evaluated when first read.
struct LazyVariables<'r, 'a> {
    root: &'r Activation<'a>,
    declared: &'r [CompiledNamed],
    /// By declaration: the plan of each, with the variables it reads in
    /// place compiled in ([`crate::cel::rule_plan`]).
    plans: &'r [Option<Arc<Node>>],
    /// By declaration: the value, or `None` when it could not be evaluated
    /// directly.
    values: &'r [OnceCell<Option<Val<'a>>>],
    /// Whether a read found no value (a variable that failed or needs the
    /// interpreter, or the whole `variables` map): the answer is then not
    /// this short cut's to give.
    incomplete: Cell<bool>,
}

impl<'r, 'a> LazyVariables<'r, 'a> {
    fn complete(&self) -> bool {
        !self.incomplete.get()
    }

    /// Variable `index`'s value, evaluated on first read.
    fn value(&self, index: usize) -> Option<&Val<'a>> {
        // A literal (`['CHOWN', ...]`) is read where its plan holds it.
        let found = match self.plans[index].as_deref() {
            Some(Node::Const(constant)) => Some(constant),
            _ => self.values[index]
                .get_or_init(|| self.evaluate(index))
                .as_ref(),
        };
        if found.is_none() {
            self.incomplete.set(true);
        }
        found
    }

    fn evaluate(&self, index: usize) -> Option<Val<'a>> {
        let program = &self.declared[index].program;
        if let Some(shared) = self.root.shared_value(program) {
            return Some(shared);
        }
        let plan = self.plans[index].as_ref()?;
        match direct::evaluate(plan, self, COST_LIMIT as i64) {
            // A value the interpreter holds (a function is left unbound):
            // the scope decides what to do with it.
            Ok(Val::Foreign(_)) | Err(_) => None,
            Ok(value) => Some(value),
        }
    }
}

/// The bindings of a rule's plans: the root's names, and the rule's
/// variables by declaration (a plan compiled in the rule reads no
/// variable by name, and sees only the declarations before it).
impl<'a> Bindings<'a> for LazyVariables<'_, 'a> {
    fn ident(&self, name: &str) -> Option<Val<'a>> {
        // The whole map (`variables` read as a value) is the scope's.
        if name == "variables" {
            self.incomplete.set(true);
            return None;
        }
        self.root.ident(name)
    }

    fn known(&self, index: usize) -> Option<&Val<'a>> {
        self.root.known(index)
    }

    fn variable(&self, _name: &str) -> Option<&Val<'a>> {
        // Not in a rule's plan: whatever read it is the scope's.
        self.incomplete.set(true);
        None
    }

    fn declared(&self, index: usize) -> Option<&Val<'a>> {
        self.value(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cel::{NoLookups, Program};
    use crate::engine::Request;
    use crate::engine::cel::{CelRequest, bind_variables, run_validations};
    use crate::policy::cel_policy::{NamedExpression, ValidationExpression};
    use crate::policy::cel_policy::{compile_named, compile_validations};

    const POD: &str = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"securityContext": {"runAsNonRoot": true},
                 "containers": [{"name": "a", "securityContext": {"privileged": false}},
                                {"name": "b"}]}}"#;

    struct Case {
        variables: &'static [(&'static str, &'static str)],
        expression: &'static str,
        message: Option<&'static str>,
        message_expression: Option<&'static str>,
        /// Whether the short cut answers (else the scoped path must).
        answers: bool,
    }

    const fn case(
        variables: &'static [(&'static str, &'static str)],
        expression: &'static str,
        answers: bool,
    ) -> Case {
        Case {
            variables,
            expression,
            message: None,
            message_expression: None,
            answers,
        }
    }

    const CONTAINERS: (&str, &str) = (
        "allContainers",
        "object.spec.containers + object.spec.?initContainers.orValue([])",
    );
    const MISSING: (&str, &str) = ("bad", "object.spec.missing.x");

    fn cases() -> Vec<Case> {
        vec![
            // A request-wide variable and a constant, read in a
            // comprehension: passes, and fails with and without a message.
            case(
                &[CONTAINERS, ("allowed", "['a', 'b']")],
                "variables.allContainers.all(c, c.name in variables.allowed)",
                true,
            ),
            case(
                &[CONTAINERS, ("allowed", "['a']")],
                "variables.allContainers.all(c, c.name in variables.allowed)",
                true,
            ),
            Case {
                message: Some("names must be allowed"),
                ..case(
                    &[CONTAINERS, ("allowed", "['a']")],
                    "variables.allContainers.all(c, c.name in variables.allowed)",
                    true,
                )
            },
            // A message that is an expression is the scoped path's.
            Case {
                message_expression: Some("'not allowed: ' + variables.allowed[0]"),
                ..case(
                    &[CONTAINERS, ("allowed", "['a']")],
                    "variables.allContainers.all(c, c.name in variables.allowed)",
                    false,
                )
            },
            // A variable of an earlier one, evaluated for the rule only.
            case(
                &[
                    ("psc", "object.spec.?securityContext.orValue({})"),
                    ("nonRoot", "variables.psc.?runAsNonRoot.orValue(false)"),
                ],
                "variables.nonRoot && variables.psc.runAsNonRoot",
                true,
            ),
            // A failed variable read: the scoped path words the error.
            case(&[MISSING], "variables.bad == 1", false),
            case(&[MISSING], "has(variables.bad)", false),
            // A failed variable never read does not matter.
            case(
                &[("ok", "true"), MISSING],
                "variables.ok || variables.bad",
                true,
            ),
            // Variables compiled where they are read (`rule_plan`): a
            // chain read once passes and fails as when read by declaration...
            case(
                &[
                    ("op", "request.operation"),
                    ("creating", "variables.op == 'CREATE'"),
                ],
                "variables.creating && object.metadata.name == 'p'",
                true,
            ),
            case(
                &[
                    ("op", "request.operation"),
                    ("updating", "variables.op == 'UPDATE'"),
                ],
                "variables.updating",
                true,
            ),
            // ...and one that fails declines, though `||` absorbs it.
            case(
                &[("bad", "request.nothing.x")],
                "variables.bad == 1 || true",
                false,
            ),
            // A variable sees only the ones before it.
            case(
                &[("a", "variables.b"), ("b", "1")],
                "variables.a == 1",
                false,
            ),
            // The last of two declarations of a name is the one read.
            case(&[("x", "1"), ("x", "2")], "variables.x == 2", true),
            // The whole map, and a variable only the interpreter
            // evaluates, are the scoped path's.
            case(&[("x", "1")], "size(variables) == 1", false),
            case(&[("q", "quantity('1Gi')")], "has(variables.q)", false),
            // A duration is the direct evaluator's.
            case(&[("d", "duration('1h')")], "has(variables.d)", true),
            // Undeclared: the rule's plan has none (a name is resolved
            // to its declaration when the policy is compiled).
            case(&[("x", "1")], "!has(variables.y)", false),
        ]
    }

    fn checks(c: &Case) -> CelChecks {
        let variables: Vec<NamedExpression> = c
            .variables
            .iter()
            .map(|(name, expression)| NamedExpression {
                name: name.to_string(),
                expression: expression.to_string(),
            })
            .collect();
        let validation = ValidationExpression {
            expression: c.expression.to_string(),
            message: c.message.map(String::from),
            message_expression: c.message_expression.map(String::from),
            reason: None,
        };
        CelChecks {
            variables: compile_named(&variables, "variables").unwrap(),
            validations: compile_validations(&[validation], "validations").unwrap(),
            audit_annotations: Vec::new(),
            params: None,
            plan: Default::default(),
            plan_slot: None,
        }
        .with_plan()
    }

    #[test]
    fn the_short_cut_answers_as_the_scoped_variables_or_not_at_all() {
        on_the_pod(|root| {
            for c in cases() {
                let checks = checks(&c);
                for errors in [EvalErrors::Deny, EvalErrors::RuleError] {
                    let scope = bind_variables(root, &checks.variables, &NoLookups);
                    let scoped = run_validations(&checks, &scope, &NoLookups, errors);
                    let lazy = validations(&checks, root, errors);
                    match c.answers {
                        true => assert_eq!(lazy.as_ref(), Some(&scoped), "{}", c.expression),
                        false => assert_eq!(lazy, None, "{}: scoped {scoped:?}", c.expression),
                    }
                }
            }
        })
    }

    #[test]
    fn the_cases_cover_each_verdict() {
        // So that the comparison above is not of passes alone.
        on_the_pod(|root| {
            let verdicts: Vec<CelVerdict> = cases()
                .iter()
                .filter(|c| c.answers)
                .filter_map(|c| validations(&checks(c), root, EvalErrors::Deny))
                .collect();
            assert!(verdicts.contains(&CelVerdict::Pass));
            assert!(verdicts.contains(&CelVerdict::Fail("names must be allowed".into())));
            assert!(verdicts.iter().any(|v| {
                matches!(v, CelVerdict::Fail(m) if m.starts_with("failed expression: variables."))
            }));
            let missing = checks(&cases()[5]);
            let scope = bind_variables(root, &missing.variables, &NoLookups);
            let failed = run_validations(&missing, &scope, &NoLookups, EvalErrors::Deny);
            assert!(
                matches!(&failed, CelVerdict::Fail(m) if m.contains("composited variable \"bad\"")),
                "{failed:?}"
            );
        })
    }

    #[test]
    fn audit_annotations_leave_the_answer_to_the_scoped_path() {
        on_the_pod(|root| {
            let mut checks = checks(&cases()[0]);
            let pass = Some(CelVerdict::Pass);
            assert_eq!(validations(&checks, root, EvalErrors::Deny), pass);
            checks.audit_annotations.push(CompiledNamed {
                name: "who".into(),
                program: Program::compile("'x'").unwrap(),
            });
            assert_eq!(validations(&checks, root, EvalErrors::Deny), None);
        })
    }

    /// Runs `f` with the CEL root of a CREATE of [`POD`], as a request
    /// binds it (with its shared values).
    fn on_the_pod(f: impl FnOnce(&Activation)) {
        let object: serde_json::Value = serde_json::from_str(POD).unwrap();
        let req = Request::offline(&object, "CREATE", Default::default(), None);
        let input = CelRequest::of(&req);
        f(&input.activation())
    }
}
