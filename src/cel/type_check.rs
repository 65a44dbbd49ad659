//! CEL expressions checked against the types of what they read, when the
//! policy is written: `object` typed by the OpenAPI schema of the kinds
//! the policy matches (the schema table gavel ships in
//! [`crate::kinds::schema`]), `variables` by the declarations before the
//! expression, every literal, operator and conversion by CEL's rules.
//!
//! What it finds is what the API server's type checking of a
//! ValidatingAdmissionPolicy puts in `status.typeChecking`: a field the
//! type does not declare (`undefined field 'replicass'`), an operator on
//! operands it has no overload for (`'abc' == 1`, `size(1)`,
//! `object.spec.replicas + 'x'`), a selection on a value that has no
//! fields, a range that is not a list or a map. These are warnings: the
//! API server does not let them change what a policy does, and neither
//! does gavel.
//!
//! It never warns about what it cannot tell: a value of unknown type
//! (`dyn`: a free-form field, `request`, `params`, any function it does
//! not type) passes every check, and so does anything compared with
//! `null`. Where Kubernetes keeps integer and number apart, the schema
//! table does not, so a numeric field is `number` and agrees with every
//! numeric type. The check is run by `/policyvalidate`
//! ([`crate::admission::policy_validation`]).

use super::{CelError, for_each_child, library, parse};
use crate::kinds::schema::{Atom, Schema};
use kube_cel::cel::common::ast::LiteralValue;
use kube_cel::cel::common::ast::{CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedExpr};

/// The type of a CEL value, as far as the checker can tell.
#[derive(Debug, Clone, PartialEq)]
pub enum Type {
    /// Any type: nothing is checked against it.
    Dyn,
    /// The element type of an empty list (`[]`, a `map()` or `filter()`
    /// accumulator before its first item): agrees with any.
    Empty,
    Null,
    Bool,
    Int,
    Uint,
    Double,
    /// A numeric field of the schema: `integer` or `number`.
    Number,
    String,
    Bytes,
    Duration,
    Timestamp,
    List(Box<Type>),
    Map(Box<Type>, Box<Type>),
    /// An object of a type the schema declares fields for.
    Object(u16),
}

impl Type {
    /// The type of the value at a position of the schema.
    pub fn of_schema(schema: Schema) -> Type {
        match schema {
            Schema::Type(t) => match schema.atom() {
                Some(Atom::Struct { .. }) if schema.declares_fields() => Type::Object(t),
                Some(Atom::String) => Type::String,
                Some(Atom::Numeric) => Type::Number,
                Some(Atom::Boolean) => Type::Bool,
                // Free-form objects and values; int-or-string,
                // quantities and times.
                _ => Type::Dyn,
            },
            Schema::List(_) => Type::List(Box::new(
                schema.elements().map_or(Type::Dyn, Type::of_schema),
            )),
            Schema::MapOf(_) => Type::Map(
                Box::new(Type::String),
                Box::new(schema.field("").map_or(Type::Dyn, Type::of_schema)),
            ),
            Schema::Opaque => Type::Dyn,
        }
    }

    /// The name cel-go gives the type in its messages (an object by its
    /// OpenAPI name).
    pub fn name(&self) -> String {
        match self {
            Type::Dyn | Type::Empty => "dyn".into(),
            Type::Null => "null_type".into(),
            Type::Bool => "bool".into(),
            Type::Int => "int".into(),
            Type::Uint => "uint".into(),
            Type::Double => "double".into(),
            Type::Number => "number".into(),
            Type::String => "string".into(),
            Type::Bytes => "bytes".into(),
            Type::Duration => "google.protobuf.Duration".into(),
            Type::Timestamp => "google.protobuf.Timestamp".into(),
            Type::List(e) => format!("list({})", e.name()),
            Type::Map(k, v) => format!("map({}, {})", k.name(), v.name()),
            Type::Object(t) => Schema::Type(*t).type_name().unwrap_or("object").into(),
        }
    }

    /// Unknown: agrees with anything.
    fn is_open(&self) -> bool {
        matches!(self, Type::Dyn | Type::Empty | Type::Null)
    }

    fn is_numeric(&self) -> bool {
        matches!(self, Type::Int | Type::Uint | Type::Double | Type::Number)
    }
}

/// Whether values of types `a` and `b` can be compared for equality, or
/// one looked for among the other's items (cel-go's `_==_(A, A)`).
fn agree(a: &Type, b: &Type) -> bool {
    match (a, b) {
        _ if a.is_open() || b.is_open() => true,
        (Type::Number, x) | (x, Type::Number) => x.is_numeric(),
        (Type::List(x), Type::List(y)) => agree(x, y),
        (Type::Map(k1, v1), Type::Map(k2, v2)) => agree(k1, k2) && agree(v1, v2),
        // An object is a map of its fields to CEL.
        (Type::Object(_), Type::Object(_) | Type::Map(..)) | (Type::Map(..), Type::Object(_)) => {
            true
        }
        _ => a == b,
    }
}

/// The type of a value that is either an `a` or a `b` (a conditional's
/// branches, a list literal's items).
fn join(a: Type, b: Type) -> Type {
    match (a, b) {
        (a, b) if a == b => a,
        (Type::Empty | Type::Null, x) | (x, Type::Empty | Type::Null) => x,
        (Type::List(x), Type::List(y)) => Type::List(Box::new(join(*x, *y))),
        (Type::Map(k1, v1), Type::Map(k2, v2)) => {
            Type::Map(Box::new(join(*k1, *k2)), Box::new(join(*v1, *v2)))
        }
        (Type::Number, x) | (x, Type::Number) if x.is_numeric() => x,
        _ => Type::Dyn,
    }
}

/// What the expressions are checked against.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    /// Named values (`object`, `oldObject`, ...); a name not here is `dyn`.
    roots: Vec<(&'static str, Type)>,
    /// The variables visible, in declaration order; `None` when the
    /// expression's variables are not known (any `variables.x` is `dyn`).
    variables: Option<Vec<(String, Type)>>,
}

impl Environment {
    /// An admission expression's: `object` and `oldObject` of the type
    /// at `object` (`None`: not known), `namespaceObject` a Namespace,
    /// and no variables declared yet.
    pub fn admission(object: Option<Schema>) -> Environment {
        let object = object.map_or(Type::Dyn, Type::of_schema);
        let namespace = Schema::for_kind("v1", "Namespace").map_or(Type::Dyn, Type::of_schema);
        Environment {
            roots: vec![
                ("object", object.clone()),
                ("oldObject", object),
                ("namespaceObject", namespace),
            ],
            variables: Some(Vec::new()),
        }
    }

    /// Declares `variables.<name>` of type `ty`, for the expressions
    /// checked after it; a later declaration of a name hides an earlier.
    pub fn declare_variable(&mut self, name: &str, ty: Type) {
        self.variables
            .get_or_insert_with(Vec::new)
            .push((name.to_string(), ty));
    }

    fn variable(&self, name: &str) -> Option<Option<&Type>> {
        let declared = self.variables.as_ref()?;
        Some(
            declared
                .iter()
                .rev()
                .find(|(n, _)| n == name)
                .map(|(_, t)| t),
        )
    }
}

/// The type of an expression and what is wrong with it (empty when it
/// checks); an expression that does not parse is an error.
pub fn check_source(source: &str, env: &Environment) -> Result<(Type, Vec<String>), CelError> {
    Ok(check(&parse(source)?, env))
}

/// [`check_source`] on a parsed expression.
pub fn check(expr: &IdedExpr, env: &Environment) -> (Type, Vec<String>) {
    let mut checker = Checker {
        env,
        scope: Vec::new(),
        issues: Vec::new(),
    };
    let ty = checker.expr(expr);
    let mut issues = checker.issues;
    // The same mistake written twice is reported once.
    let mut seen = std::collections::HashSet::new();
    issues.retain(|i| seen.insert(i.clone()));
    (ty, issues)
}

struct Checker<'e> {
    env: &'e Environment,
    /// Comprehension variables in scope, innermost last.
    scope: Vec<(String, Type)>,
    issues: Vec<String>,
}

impl Checker<'_> {
    fn expr(&mut self, e: &IdedExpr) -> Type {
        match &e.expr {
            Expr::Literal(l) => match l {
                LiteralValue::Boolean(_) => Type::Bool,
                LiteralValue::Bytes(_) => Type::Bytes,
                LiteralValue::Double(_) => Type::Double,
                LiteralValue::Int(_) => Type::Int,
                LiteralValue::Null => Type::Null,
                LiteralValue::String(_) => Type::String,
                LiteralValue::UInt(_) => Type::Uint,
            },
            Expr::Ident(name) => self.ident(name),
            Expr::Select(s) => {
                let ty = self.select(&s.operand, &s.field);
                if s.test { Type::Bool } else { ty }
            }
            Expr::List(l) => {
                let items = l.elements.iter().map(|x| self.expr(x)).collect::<Vec<_>>();
                Type::List(Box::new(items.into_iter().fold(Type::Empty, join)))
            }
            Expr::Map(m) => {
                let (mut key, mut value) = (Type::Empty, Type::Empty);
                for entry in &m.entries {
                    if let EntryExpr::MapEntry(x) = &entry.expr {
                        key = join(key, self.expr(&x.key));
                        value = join(value, self.expr(&x.value));
                    }
                }
                Type::Map(Box::new(key), Box::new(value))
            }
            Expr::Call(c) => self.call(c),
            Expr::Comprehension(c) => self.comprehension(c),
            Expr::Struct(_) | Expr::Unspecified => {
                for_each_child(e, &mut |child| {
                    self.expr(child);
                });
                Type::Dyn
            }
        }
    }

    fn ident(&self, name: &str) -> Type {
        if let Some((_, t)) = self.scope.iter().rev().find(|(n, _)| n == name) {
            return t.clone();
        }
        self.env
            .roots
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(Type::Dyn, |(_, t)| t.clone())
    }

    fn in_scope(&self, name: &str) -> bool {
        self.scope.iter().any(|(n, _)| n == name)
    }

    /// `operand.field` (or `has(operand.field)`): the field's type.
    fn select(&mut self, operand: &IdedExpr, field: &str) -> Type {
        if let Expr::Ident(root) = &operand.expr
            && root == "variables"
            && !self.in_scope(root)
            && let Some(declared) = self.env.variable(field)
        {
            return match declared {
                Some(t) => t.clone(),
                None => {
                    self.issues.push(format!(
                        "undefined field '{field}' (variables.{field}: no variable of that name is declared before this expression)"
                    ));
                    Type::Dyn
                }
            };
        }
        let ty = self.expr(operand);
        self.field_of(&ty, field, operand)
    }

    fn field_of(&mut self, ty: &Type, field: &str, operand: &IdedExpr) -> Type {
        match ty {
            Type::Object(t) => match Schema::Type(*t).declared(field) {
                Some(s) => Type::of_schema(s),
                // An escaped name (`__namespace__`, `a__dash__b`) is
                // Kubernetes' for a property CEL cannot spell.
                None if field.contains("__") => Type::Dyn,
                None => {
                    self.issues.push(format!(
                        "undefined field '{field}' ({}.{field})",
                        path_text(operand)
                    ));
                    Type::Dyn
                }
            },
            Type::Map(_, v) => (**v).clone(),
            t if t.is_open() => Type::Dyn,
            t => {
                self.issues.push(format!(
                    "type '{}' does not support field selection ({}.{field})",
                    t.name(),
                    path_text(operand)
                ));
                Type::Dyn
            }
        }
    }

    fn no_overload(&mut self, function: &str, target: Option<&Type>, args: &[&Type]) {
        let args = args.iter().map(|t| t.name()).collect::<Vec<_>>().join(", ");
        self.issues.push(match target {
            Some(t) => format!(
                "found no matching overload for '{function}' applied to '{}.({args})'",
                t.name()
            ),
            None => format!("found no matching overload for '{function}' applied to '({args})'"),
        });
    }

    fn call(&mut self, c: &CallExpr) -> Type {
        let target = c.target.as_deref().map(|t| self.expr(t));
        let args: Vec<Type> = c.args.iter().map(|a| self.expr(a)).collect();
        let name = c.func_name.as_str();
        match (name, target.as_ref(), args.as_slice()) {
            (library::AND | library::OR, None, [a, b]) => {
                if ![a, b].iter().all(|t| t.is_open() || **t == Type::Bool) {
                    let shown = if name == library::AND { "_&&_" } else { "_||_" };
                    self.no_overload(shown, None, &[a, b]);
                }
                Type::Bool
            }
            ("!_", None, [a]) => {
                if !(a.is_open() || *a == Type::Bool) {
                    self.no_overload("!_", None, &[a]);
                }
                Type::Bool
            }
            (library::EQUALS | library::NOT_EQUALS, None, [a, b]) => {
                if !agree(a, b) {
                    let shown = if name == library::EQUALS {
                        "_==_"
                    } else {
                        "_!=_"
                    };
                    self.no_overload(shown, None, &[a, b]);
                }
                Type::Bool
            }
            ("_<_" | "_<=_" | "_>_" | "_>=_", None, [a, b]) => {
                if !ordered(a, b) {
                    self.no_overload(name, None, &[a, b]);
                }
                Type::Bool
            }
            ("_+_" | "_-_" | "_*_" | "_/_" | "_%_", None, [a, b]) => arithmetic(name, a, b)
                .unwrap_or_else(|| {
                    self.no_overload(name, None, &[a, b]);
                    Type::Dyn
                }),
            ("-_", None, [a]) => {
                if a.is_open() || a.is_numeric() || *a == Type::Duration {
                    a.clone()
                } else {
                    self.no_overload("-_", None, &[a]);
                    Type::Dyn
                }
            }
            ("_?_:_", None, [cond, then, otherwise]) => {
                if !(cond.is_open() || *cond == Type::Bool) {
                    self.no_overload("_?_:_", None, &[cond, then, otherwise]);
                }
                join(then.clone(), otherwise.clone())
            }
            // The cost limit's count of a comprehension's steps.
            (library::TICK, None, [step, _]) => step.clone(),
            ("_[_]", None, [container, index]) => self.index(container, index),
            (library::IN, None, [item, container]) => {
                let fits = match container {
                    Type::List(e) => agree(item, e),
                    Type::Map(k, _) => agree(item, k),
                    Type::Object(_) => agree(item, &Type::String),
                    t => t.is_open(),
                };
                if !fits {
                    self.no_overload("@in", None, &[item, container]);
                }
                Type::Bool
            }
            (library::OPT_SELECT, None, [operand, _]) => {
                if let Some(Expr::Literal(LiteralValue::String(field))) =
                    c.args.get(1).map(|f| &f.expr)
                {
                    self.field_of(operand, field, &c.args[0]);
                }
                Type::Dyn
            }
            ("size", None, [a]) | ("size", Some(a), []) => {
                if !(a.is_open()
                    || matches!(
                        a,
                        Type::String
                            | Type::Bytes
                            | Type::List(_)
                            | Type::Map(..)
                            | Type::Object(_)
                    ))
                {
                    self.no_overload("size", None, &[a]);
                }
                Type::Int
            }
            (_, None, [_]) => conversion(name).unwrap_or(Type::Dyn),
            (_, Some(receiver), _) => match string_method(name) {
                Some(_) if !(receiver.is_open() || *receiver == Type::String) => {
                    let args: Vec<&Type> = args.iter().collect();
                    self.no_overload(name, Some(receiver), &args);
                    Type::Dyn
                }
                Some(result) => result,
                None => Type::Dyn,
            },
            // Functions of the libraries this does not type, and calls
            // of the wrong arity the compile already refused.
            _ => Type::Dyn,
        }
    }

    fn index(&mut self, container: &Type, index: &Type) -> Type {
        match container {
            Type::List(e) if index.is_open() || index.is_numeric() => (**e).clone(),
            Type::Map(k, v) if agree(k, index) => (**v).clone(),
            // `object.metadata['name']` selects a field by a computed
            // name.
            Type::Object(_) if index.is_open() || *index == Type::String => Type::Dyn,
            t if t.is_open() => Type::Dyn,
            _ => {
                self.no_overload("_[_]", None, &[container, index]);
                Type::Dyn
            }
        }
    }

    fn comprehension(&mut self, c: &ComprehensionExpr) -> Type {
        let range = self.expr(&c.iter_range);
        let (first, second) = match &range {
            Type::List(e) => (Type::Int, (**e).clone()),
            Type::Map(k, v) => ((**k).clone(), (**v).clone()),
            Type::Object(_) => (Type::String, Type::Dyn),
            t if t.is_open() => (Type::Dyn, Type::Dyn),
            t => {
                self.issues.push(format!(
                    "expression of type '{}' cannot be the range of a comprehension (must be list, map, or dynamic)",
                    t.name()
                ));
                (Type::Dyn, Type::Dyn)
            }
        };
        // One variable: a list's items or a map's keys; two: the index
        // or key, and the item or value.
        let items = match (&c.iter_var2, &range) {
            (Some(second_var), _) => {
                vec![(c.iter_var.clone(), first), (second_var.clone(), second)]
            }
            (None, Type::List(_)) => vec![(c.iter_var.clone(), second)],
            (None, _) => vec![(c.iter_var.clone(), first)],
        };
        let init = self.expr(&c.accu_init);
        let depth = self.scope.len();
        self.scope.push((c.accu_var.clone(), init.clone()));
        self.scope.extend(items);
        self.expr(&c.loop_cond);
        let step = self.expr(&c.loop_step);
        // The accumulator's type after the items went in: a `map()`'s
        // starts as `[]` (a list of `Empty`) and takes the items' type.
        let accumulated = join(init, step);
        self.scope.truncate(depth);
        self.scope.push((c.accu_var.clone(), accumulated));
        let result = self.expr(&c.result);
        self.scope.truncate(depth);
        result
    }
}

/// Whether `a < b` has an overload (numbers compare across types in
/// Kubernetes' CEL).
fn ordered(a: &Type, b: &Type) -> bool {
    if a.is_open() || b.is_open() {
        return !matches!(a, Type::List(_) | Type::Map(..) | Type::Object(_))
            && !matches!(b, Type::List(_) | Type::Map(..) | Type::Object(_));
    }
    (a.is_numeric() && b.is_numeric())
        || (a == b
            && matches!(
                a,
                Type::String | Type::Bool | Type::Bytes | Type::Duration | Type::Timestamp
            ))
}

/// The type of `a <op> b` for the arithmetic operators, `None` when
/// there is no overload.
fn arithmetic(op: &str, a: &Type, b: &Type) -> Option<Type> {
    let same_number = |a: &Type, b: &Type| match (a, b) {
        (Type::Number, x) | (x, Type::Number) if x.is_numeric() => Some(x.clone()),
        (x, y) if x == y && x.is_numeric() => Some(x.clone()),
        _ => None,
    };
    if a.is_open() || b.is_open() {
        let other = if a.is_open() { b } else { a };
        let fits = match op {
            "_+_" => !matches!(other, Type::Bool | Type::Object(_) | Type::Map(..)),
            "_-_" => {
                other.is_numeric()
                    || other.is_open()
                    || matches!(other, Type::Duration | Type::Timestamp)
            }
            "_%_" => other.is_open() || matches!(other, Type::Int | Type::Uint | Type::Number),
            _ => other.is_numeric() || other.is_open(),
        };
        return fits.then_some(Type::Dyn);
    }
    match op {
        "_+_" => match (a, b) {
            (Type::String, Type::String) => Some(Type::String),
            (Type::Bytes, Type::Bytes) => Some(Type::Bytes),
            (Type::List(x), Type::List(y)) => {
                Some(Type::List(Box::new(join((**x).clone(), (**y).clone()))))
            }
            (Type::Timestamp, Type::Duration) | (Type::Duration, Type::Timestamp) => {
                Some(Type::Timestamp)
            }
            (Type::Duration, Type::Duration) => Some(Type::Duration),
            _ => same_number(a, b),
        },
        "_-_" => match (a, b) {
            (Type::Timestamp, Type::Timestamp) => Some(Type::Duration),
            (Type::Timestamp, Type::Duration) => Some(Type::Timestamp),
            (Type::Duration, Type::Duration) => Some(Type::Duration),
            _ => same_number(a, b),
        },
        "_%_" => same_number(a, b).filter(|t| *t != Type::Double),
        _ => same_number(a, b),
    }
}

/// The result of a type conversion (`int(x)`, `string(x)`, ...).
fn conversion(name: &str) -> Option<Type> {
    Some(match name {
        "int" => Type::Int,
        "uint" => Type::Uint,
        "double" => Type::Double,
        "string" => Type::String,
        "bytes" => Type::Bytes,
        "bool" => Type::Bool,
        "duration" => Type::Duration,
        "timestamp" => Type::Timestamp,
        "dyn" => Type::Dyn,
        _ => return None,
    })
}

/// The result of a method only strings have (CEL's and Kubernetes'
/// string libraries); `indexOf`, `reverse` and `contains` are left out
/// because other libraries give lists the same names.
fn string_method(name: &str) -> Option<Type> {
    Some(match name {
        "startsWith" | "endsWith" | "matches" => Type::Bool,
        "lowerAscii" | "upperAscii" | "trim" | "substring" | "charAt" | "replace" | "find" => {
            Type::String
        }
        "split" | "findAll" => Type::List(Box::new(Type::String)),
        _ => return None,
    })
}

/// A selection's operand as the policy wrote it, for the message
/// (`object.spec`; `...` for what is not a plain path).
fn path_text(e: &IdedExpr) -> String {
    match &e.expr {
        Expr::Ident(name) => name.clone(),
        Expr::Select(s) => format!("{}.{}", path_text(&s.operand), s.field),
        _ => "...".into(),
    }
}

#[cfg(test)]
mod tests;
