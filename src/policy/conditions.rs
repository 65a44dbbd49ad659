//! Preconditions and deny conditions, compiled: `{any, all}` lists of
//! conditions whose key and value are [`Template`]s parsed once, with the
//! operator parsed and the facts evaluation can skip checking (a literal
//! plain list, a condition that reads only `request`) worked out here.

use super::template::Template;
use crate::jmespath::Expression;
use crate::wildcard;
use serde_json::Value;

/// Whether `v` is a list whose entries are compared plainly by the set
/// operators: strings without a wildcard, numbers and bools.
pub fn is_plain_list(v: &Value) -> bool {
    v.as_array().is_some_and(|items| {
        items.iter().all(|v| match v {
            Value::String(s) => !wildcard::has_wildcard(s),
            Value::Number(_) | Value::Bool(_) => true,
            _ => false,
        })
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    Equals,
    NotEquals,
    In,
    NotIn,
    AnyIn,
    AllIn,
    AnyNotIn,
    AllNotIn,
    GreaterThan,
    GreaterThanOrEquals,
    LessThan,
    LessThanOrEquals,
    DurationGreaterThan,
    DurationGreaterThanOrEquals,
    DurationLessThan,
    DurationLessThanOrEquals,
}

impl Operator {
    /// AnyIn, AllIn, AnyNotIn and AllNotIn: a list of keys against a list
    /// of values.
    pub fn is_set(self) -> bool {
        matches!(
            self,
            Operator::AnyIn | Operator::AllIn | Operator::AnyNotIn | Operator::AllNotIn
        )
    }

    fn parse(s: &str) -> Option<Operator> {
        use Operator::*;
        Some(match s.to_ascii_lowercase().as_str() {
            "equals" | "equal" => Equals,
            "notequals" | "notequal" => NotEquals,
            "in" => In,
            "notin" => NotIn,
            "anyin" => AnyIn,
            "allin" => AllIn,
            "anynotin" => AnyNotIn,
            "allnotin" => AllNotIn,
            "greaterthan" => GreaterThan,
            "greaterthanorequals" => GreaterThanOrEquals,
            "lessthan" => LessThan,
            "lessthanorequals" => LessThanOrEquals,
            "durationgreaterthan" => DurationGreaterThan,
            "durationgreaterthanorequals" => DurationGreaterThanOrEquals,
            "durationlessthan" => DurationLessThan,
            "durationlessthanorequals" => DurationLessThanOrEquals,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone)]
pub struct Condition {
    pub key: Template,
    /// `None` for an unknown operator: evaluating it is a rule error, as in Kyverno.
    pub operator: Result<Operator, String>,
    pub value: Template,
    /// `value` is a literal list with no wildcard in any entry, so the set
    /// operators compare its entries plainly without scanning them.
    pub value_is_plain_list: bool,
    pub message: Option<String>,
    /// Set when the condition is a set operator between a compiled walk
    /// (`{{ request.object.spec.volumes[].keys(@)[] || '' }}`) and a
    /// literal: which side is the walk. Evaluation then decides it as the
    /// walk gives its strings, building no list
    /// (`engine::conditions::set_op_streamed`).
    pub streamed: Option<WalkSide>,
    /// Set when the condition reads only `request`: its result is then
    /// memoised per request under this id, which every condition of the
    /// same text shares (most policies repeat the same precondition).
    pub memo: Option<u32>,
    /// The condition's result per admission operation (by
    /// [`crate::matching::operation_index`]), for a condition decided by
    /// `request.operation` alone
    /// ([`Template::decided_by_operation`]; `{{ request.operation ||
    /// 'BACKGROUND' }}` NotEquals DELETE): filled when a set is planned
    /// (`engine::plan_set`, which can evaluate it), read for any request
    /// whose context still holds its own `request`. An operation's entry is
    /// `None` where evaluating it was an error: the error is the request's
    /// to report.
    pub by_operation: Option<[Option<bool>; 4]>,
}

/// The side of a condition that is a compiled walk ([`Condition::streamed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalkSide {
    Key,
    Value,
}

/// The memo id of a condition's text. Ids live as long as the process:
/// there are as many as distinct request-only conditions ever compiled.
fn condition_memo_id(key: &Value, operator: Operator, value: &Value) -> u32 {
    use std::collections::HashMap;
    use std::sync::{LazyLock, Mutex, PoisonError};
    static IDS: LazyLock<Mutex<HashMap<String, u32>>> = LazyLock::new(Default::default);
    let text = format!("{key}\u{0}{operator:?}\u{0}{value}");
    let mut ids = IDS.lock().unwrap_or_else(PoisonError::into_inner);
    let next = u32::try_from(ids.len()).unwrap_or(u32::MAX);
    *ids.entry(text).or_insert(next)
}

/// `{any, all}` conditions; the legacy bare list is `all`.
#[derive(Debug, Clone, Default)]
pub struct Conditions {
    pub any: Option<Vec<Condition>>,
    pub all: Option<Vec<Condition>>,
}

impl Conditions {
    /// Whether every condition compares literals and compiled walks from a
    /// foreach's `element` (`{{ element.a.b[] || `[]` }}`) with a known
    /// operator: a foreach then decides them on each element directly,
    /// with no scope built for it.
    pub fn read_only_element(&self) -> bool {
        let operand = |t: &Template| match t {
            Template::Literal(_) => true,
            Template::Whole(exprs, _) => exprs.0.walks_under(&["element"]),
            Template::Mixed(_) => false,
        };
        [&self.any, &self.all]
            .into_iter()
            .flatten()
            .flatten()
            .all(|c| c.operator.is_ok() && operand(&c.key) && operand(&c.value))
    }

    pub fn parse(v: &Value) -> Result<Conditions, String> {
        let list = |v: &Value| -> Result<Vec<Condition>, String> {
            let Value::Array(items) = v else {
                return Err("conditions must be a list".into());
            };
            items.iter().map(Condition::parse).collect()
        };
        match v {
            Value::Null => Ok(Conditions::default()),
            Value::Array(_) => Ok(Conditions {
                any: None,
                all: Some(list(v)?),
            }),
            Value::Object(m) => {
                for k in m.keys() {
                    if k != "any" && k != "all" {
                        return Err(format!("unknown field {k:?}, expected any or all"));
                    }
                }
                Ok(Conditions {
                    any: m
                        .get("any")
                        .filter(|v| !v.is_null())
                        .map(list)
                        .transpose()?,
                    all: m
                        .get("all")
                        .filter(|v| !v.is_null())
                        .map(list)
                        .transpose()?,
                })
            }
            _ => Err("conditions must be a list or an object with any/all".into()),
        }
    }
}

impl Condition {
    fn parse(v: &Value) -> Result<Condition, String> {
        let Value::Object(m) = v else {
            return Err("a condition must be an object".into());
        };
        for k in m.keys() {
            if !matches!(k.as_str(), "key" | "operator" | "value" | "message") {
                return Err(format!("unknown field {k:?} in condition"));
            }
        }
        let op = m
            .get("operator")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let value = Template::new(m.get("value").cloned().unwrap_or(Value::Null));
        let value_is_plain_list = matches!(&value, Template::Literal(v) if is_plain_list(v));
        let key = Template::new(m.get("key").cloned().unwrap_or(Value::Null));
        let operator = Operator::parse(op).ok_or_else(|| format!("unknown operator {op:?}"));
        let is_walk = |t: &Template| t.expression(false).is_some_and(Expression::is_walk);
        let is_literal = |t: &Template| matches!(t, Template::Literal(_));
        let streamed = match operator {
            Ok(op) if op.is_set() && is_walk(&key) && is_literal(&value) => Some(WalkSide::Key),
            Ok(op) if op.is_set() && is_literal(&key) && is_walk(&value) => Some(WalkSide::Value),
            _ => None,
        };
        let memo = match operator {
            Ok(op) if key.reads_only_request() && value.reads_only_request() => {
                Some(condition_memo_id(key.raw(), op, value.raw()))
            }
            _ => None,
        };
        Ok(Condition {
            key,
            operator,
            value,
            value_is_plain_list,
            message: m.get("message").and_then(Value::as_str).map(str::to_string),
            streamed,
            memo,
            by_operation: None,
        })
    }
}
