//! The function library and the evaluation loop.
//!
//! One base context holds every function (cel's standard ones, kube-cel's
//! Kubernetes libraries, Kyverno's); each evaluation binds its variables in
//! a child scope of it, so nothing is registered per request.
//!
//! Kyverno's lookups (`resource.Get`, `globalContext.Get`, ...) need the
//! caller's [`Lookups`], which the interpreter's function signatures cannot
//! carry. They are answered in rounds instead: a lookup with no answer yet
//! is recorded and fails the round; the caller's answers are stored and the
//! expression runs again. Expressions are pure, so the final round sees
//! every answer it asks for.

use super::value_text;
use super::values::{json_to_cel, opt_none, opt_of};
use super::{COST_LIMIT, CelError};
use kube_cel::KubeCelExt;
use kube_cel::cel::common::ast::IdedExpr;
use kube_cel::cel::extractors::{Arguments, This};
use kube_cel::cel::objects::{Key, OptionalValue};
use kube_cel::cel::{Context, ExecutionError, FunctionContext, ResolveResult, Value};
use std::cell::RefCell;
use std::sync::{Arc, LazyLock};

pub(super) const OPT_SELECT: &str = "@optSelect";
pub(super) const OPT_INDEX: &str = "@optIndex";
pub(super) const TICK: &str = "@tick";
/// `==` and `!=`, as functions: the interpreter's own operators compare
/// int, uint and double as different types (`1 == 1.0` false), where CEL
/// (cel-go, Kubernetes, Kyverno) compares numbers across types.
pub(super) const EQUALS: &str = "@eq";
pub(super) const NOT_EQUALS: &str = "@ne";
/// `in`, as a function, for the same reason: `1.0 in [1]` and
/// `1u in {1: x}` hold in CEL.
pub(super) const IN: &str = "@inAny";
/// `&&` and `||`, as functions: when both operands fail, cel-go reports
/// the left one's error (its logical operators keep the first error of
/// their terms); the interpreter's operators return the right one's.
/// `a.f` and `has(a.f)`, as functions: see `interpreter_forms`.
pub(super) const SELECT: &str = "@select";
pub(super) const HAS: &str = "@has";
/// A comprehension's range, checked as cel-go checks it.
pub(super) const ITERABLE: &str = "@iterable";
/// A two-variable comprehension's range as `[index, item]` or
/// `[key, value]` pairs, and `transformMap`'s pairs back into a map
/// (`cel::expand_two_variable`).
pub(super) const PAIRS: &str = "@pairs";
pub(crate) const MAP_OF_PAIRS: &str = "@mapOfPairs";
pub(super) const AND: &str = "@and";
/// `-x`, as cel-go has it: of an int or a double only, and an error for
/// the int with no negation (`-(-9223372036854775808)`).
pub(super) const NEGATE: &str = "@neg";
pub(super) const OR: &str = "@or";

/// Rounds of lookups one evaluation may take (each round answers every
/// lookup the expression reached).
const MAX_ROUNDS: usize = 16;

/// Something an expression asks of the world outside the request.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    /// `resource.Get(apiVersion, resource, namespace, name)`.
    Resource {
        api_version: String,
        resource: String,
        namespace: String,
        name: String,
    },
    /// `resource.List(apiVersion, resource, namespace)`.
    ResourceList {
        api_version: String,
        resource: String,
        namespace: String,
    },
    /// `globalContext.Get(name, projection)`.
    GlobalContext { name: String, projection: String },
    /// `image.GetMetadata(ref)`.
    ImageMetadata(String),
    /// The image verification functions of an ImageValidatingPolicy
    /// (`verifyImageSignatures`, `verifyAttestationSignatures`,
    /// `getImageData`, `extractPayload`): answered by the policy's
    /// evaluation, which knows its matchImageReferences and attestations.
    ImageVerification {
        function: &'static str,
        image: String,
        /// The attestation's name, for the functions that take one.
        attestation: Option<String>,
    },
    /// `http.Get(url)` / `http.Post(url, body)`.
    Http {
        method: String,
        url: String,
        body: Option<serde_json::Value>,
    },
}

/// Answers lookups. An `Err` is the expression's error.
pub trait Lookups {
    fn lookup(&self, lookup: &Lookup) -> Result<serde_json::Value, String>;
}

/// No sources: every lookup fails.
pub struct NoLookups;

impl Lookups for NoLookups {
    fn lookup(&self, lookup: &Lookup) -> Result<serde_json::Value, String> {
        Err(format!("no source for {lookup:?}"))
    }
}

#[derive(Default)]
struct EvalState {
    budget: i64,
    answers: Vec<(Lookup, Result<Value, String>)>,
    pending: Vec<Lookup>,
    /// What `generator.Apply` produced this round: (namespace, object);
    /// no namespace for the NamespacedGeneratingPolicy form (the policy's).
    generated: Vec<(Option<String>, serde_json::Value)>,
}

thread_local! {
    static STATE: RefCell<EvalState> = RefCell::new(EvalState::default());
}

static BASE: LazyLock<Context<'static>> = LazyLock::new(|| {
    let mut ctx = Context::default();
    ctx.register_all();
    ctx.add_function(OPT_SELECT, opt_select);
    ctx.add_function(OPT_INDEX, opt_index);
    ctx.add_function(TICK, tick);
    ctx.add_function(EQUALS, equal);
    ctx.add_function(NOT_EQUALS, not_equal);
    ctx.add_function(IN, contained_in);
    ctx.add_function(SELECT, select_field);
    ctx.add_function(HAS, has_field);
    ctx.add_function(ITERABLE, iterable);
    ctx.add_function(PAIRS, pairs);
    ctx.add_function(MAP_OF_PAIRS, map_of_pairs);
    ctx.add_function(AND, logical_and);
    ctx.add_function(NEGATE, negate);
    ctx.add_function(OR, logical_or);
    // kyverno-compat: Kyverno's policies call these on plain values too
    // (`container.volumeMounts.orValue([])`) and expect the value itself.
    ctx.add_function("orValue", or_value);
    ctx.add_function("hasValue", has_value);
    ctx.add_function("value", value_of);
    ctx.add_function("dyn", dyn_value);
    ctx.add_function("string", string_of);
    ctx.add_function("int", int_of);
    ctx.add_function("bool", bool_of);
    ctx.add_function("type", type_of);
    ctx.add_function("join", join);
    ctx.add_function("format", super::string_format::format);
    ctx.add_function("indexOf", super::string_functions::index_of);
    ctx.add_function("lastIndexOf", super::string_functions::last_index_of);
    ctx.add_function("replace", super::string_functions::replace);
    ctx.add_function("split", super::string_functions::split);
    ctx.add_function("substring", super::string_functions::substring);
    for (name, field) in super::timestamp_fields::Field::ALL {
        ctx.add_function(name, field.function());
    }
    ctx.add_function("duration", duration_of);
    ctx.add_function("timestamp", timestamp_of);
    ctx.add_function("bytes", bytes_of);
    ctx.add_function("resource.Get", resource_get);
    ctx.add_function("resource.List", resource_list);
    ctx.add_function("globalContext.Get", global_context_get);
    ctx.add_function("image.GetMetadata", image_metadata);
    ctx.add_function("http.Get", http_get);
    ctx.add_function("http.Post", http_post);
    ctx.add_function("parseServiceAccount", parse_service_account);
    ctx.add_function("time.now", time_now);
    ctx.add_function("generator.Apply", generator_apply);
    // Kyverno 1.18 added a lower-case spelling of every library function.
    ctx.add_function("generator.apply", generator_apply);
    ctx.add_function("resource.get", resource_get);
    ctx.add_function("resource.list", resource_list);
    ctx.add_function("globalContext.get", global_context_get);
    ctx.add_function("image.getMetadata", image_metadata);
    ctx.add_function("http.get", http_get);
    ctx.add_function("http.post", http_post);
    ctx.add_function("image", image_of);
    ctx.add_function("isImage", is_image);
    for field in IMAGE_FIELDS {
        ctx.add_function(
            field,
            move |ftx: &FunctionContext, This(this): This<Value>| image_field(ftx, &this, field),
        );
    }
    ctx.add_function(
        "containsDigest",
        |ftx: &FunctionContext, This(this): This<Value>| {
            Ok(Value::Bool(
                !matches!(image_field(ftx, &this, "digest")?, Value::String(d) if d.is_empty()),
            ))
        },
    );
    // Kyverno's `imageverify` library (ImageValidatingPolicy only).
    ctx.add_function("verifyImageSignatures", verify_image_signatures);
    ctx.add_function("verifyAttestationSignatures", verify_attestation_signatures);
    ctx.add_function("getImageData", get_image_data);
    ctx.add_function("extractPayload", extract_payload);
    ctx.add_function("json.unmarshal", json_unmarshal);
    ctx.add_function("yaml.parse", yaml_parse);
    // kyverno-authz's `json` library (HTTP and Envoy modes).
    ctx.add_function("json.Unmarshal", json_unmarshal);
    super::authz::register(&mut ctx);
    super::regex_library::register(&mut ctx);
    // cel-go's math bit functions, over kube-cel's int-only ones.
    ctx.add_function("math.bitAnd", |Arguments(a): Arguments| {
        bitwise(&a, |x, y| x & y)
    });
    ctx.add_function("math.bitOr", |Arguments(a): Arguments| {
        bitwise(&a, |x, y| x | y)
    });
    ctx.add_function("math.bitXor", |Arguments(a): Arguments| {
        bitwise(&a, |x, y| x ^ y)
    });
    ctx.add_function("math.bitNot", bit_not);
    ctx.add_function("math.bitShiftLeft", |Arguments(a): Arguments| {
        shift(&a, true)
    });
    ctx.add_function("math.bitShiftRight", |Arguments(a): Arguments| {
        shift(&a, false)
    });
    ctx
});

/// `math.bitAnd`/`bitOr`/`bitXor` as cel-go has them: of two ints or two
/// uints, the same type back.
fn bitwise(args: &[Value], op: fn(u64, u64) -> u64) -> ResolveResult {
    match args {
        [Value::Int(a), Value::Int(b)] => Ok(Value::Int(op(*a as u64, *b as u64) as i64)),
        [Value::UInt(a), Value::UInt(b)] => Ok(Value::UInt(op(*a, *b))),
        _ => Err(ExecutionError::NoSuchOverload),
    }
}

fn bit_not(value: Value) -> ResolveResult {
    match value {
        Value::Int(v) => Ok(Value::Int(!v)),
        Value::UInt(v) => Ok(Value::UInt(!v)),
        _ => Err(ExecutionError::NoSuchOverload),
    }
}

/// `math.bitShiftLeft`/`bitShiftRight` as cel-go has them: an int or a
/// uint shifted by an int; a negative shift fails, one past 63 gives 0,
/// and an int shifts right as its unsigned bits (no sign extension).
fn shift(args: &[Value], left: bool) -> ResolveResult {
    let name = if left {
        "math.bitShiftLeft"
    } else {
        "math.bitShiftRight"
    };
    let (bits, by) = match args {
        [Value::Int(v), Value::Int(by)] => (*v as u64, *by),
        [Value::UInt(v), Value::Int(by)] => (*v, *by),
        _ => return Err(ExecutionError::NoSuchOverload),
    };
    if by < 0 {
        return Err(ExecutionError::function_error(
            name,
            format!("{name}() negative offset: {by}"),
        ));
    }
    let shifted = match (by > 63, left) {
        (true, _) => 0,
        (false, true) => bits << by,
        (false, false) => bits >> by,
    };
    Ok(match args[0] {
        Value::Int(_) => Value::Int(shifted as i64),
        _ => Value::UInt(shifted),
    })
}

/// The context every evaluation scope descends from.
pub(super) fn base() -> &'static Context<'static> {
    &BASE
}

/// Evaluates `expr` in `ctx`, answering lookups in rounds.
pub(super) fn evaluate(
    expr: &IdedExpr,
    ctx: &Context,
    lookups: &dyn Lookups,
) -> Result<Value, CelError> {
    STATE.with_borrow_mut(|s| s.answers.clear());
    for _ in 0..MAX_ROUNDS {
        STATE.with_borrow_mut(|s| {
            s.budget = COST_LIMIT as i64;
            s.pending.clear();
            s.generated.clear();
        });
        let result =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Value::resolve(expr, ctx)));
        let (pending, budget) =
            STATE.with_borrow_mut(|s| (std::mem::take(&mut s.pending), s.budget));
        if budget < 0 {
            return Err(CelError::CostLimit);
        }
        if pending.is_empty() {
            return match result {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) => Err(CelError::Eval(describe(&e))),
                Err(_) => Err(CelError::Eval(
                    "the CEL interpreter failed on this expression (unsupported construct)".into(),
                )),
            };
        }
        for lookup in pending {
            let answer = lookups.lookup(&lookup).map(|v| json_to_cel(&v));
            STATE.with_borrow_mut(|s| s.answers.push((lookup, answer)));
        }
    }
    Err(CelError::Eval("too many lookups in one expression".into()))
}

/// `<list(string)>.join([separator])`, as cel-go's strings extension: a
/// list that holds anything but strings is an error (kube-cel's join
/// prints such values in Rust's debug form, `Int(1000)`).
fn join(This(this): This<Arc<Vec<Value>>>, Arguments(args): Arguments) -> ResolveResult {
    let separator = match args.first() {
        None => "",
        Some(Value::String(s)) => s.as_str(),
        Some(_) => return Err(ExecutionError::NoSuchOverload),
    };
    let mut out = String::new();
    for (i, item) in this.iter().enumerate() {
        let Value::String(s) = item else {
            return Err(ExecutionError::NoSuchOverload);
        };
        if i > 0 {
            out.push_str(separator);
        }
        out.push_str(s);
    }
    Ok(Value::String(Arc::new(out)))
}

fn describe(e: &ExecutionError) -> String {
    match e {
        ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        // cel-go's wording.
        ExecutionError::NoSuchOverload => "no such overload".to_string(),
        ExecutionError::UndeclaredReference(r) => format!("undeclared reference to {r:?}"),
        // An error worded whole, as cel-go words it (no function prefix).
        ExecutionError::FunctionError { function, message } if function.is_empty() => {
            message.clone()
        }
        ExecutionError::FunctionError { function, message } => format!("{function}: {message}"),
        other => other.to_string(),
    }
}

/// What `generator.Apply` produced in the last evaluation on this thread.
pub(super) fn take_generated() -> Vec<(Option<String>, serde_json::Value)> {
    STATE.with_borrow_mut(|s| std::mem::take(&mut s.generated))
}

/// `generator.Apply(namespace, objects)` (GeneratingPolicy) or
/// `generator.Apply(objects)` (NamespacedGeneratingPolicy: into the
/// policy's namespace): records the objects to create; the caller creates
/// them.
fn generator_apply(ftx: &FunctionContext, Arguments(args): Arguments) -> ResolveResult {
    let (namespace, objects) = match args.as_slice() {
        [Value::String(ns), objects] => (Some(ns.to_string()), objects),
        [objects] => (None, objects),
        _ => {
            return Err(ftx.error(
                "generator.Apply takes (namespace, objects), or (objects) in a NamespacedGeneratingPolicy",
            ));
        }
    };
    let Value::List(items) = objects else {
        return Err(ftx.error("generator.Apply needs a list of objects"));
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items.iter() {
        let object = super::values::cel_to_json(item).map_err(|e| ftx.error(e))?;
        if !object.is_object() {
            return Err(ftx.error(format!("generator.Apply: {object} is not an object")));
        }
        // A list (`resource.List(...)`) stands for its items, as Kyverno's
        // generator takes an unstructured list.
        if let Some(list) = object.get("items").and_then(serde_json::Value::as_array) {
            for o in list.iter().filter(|o| o.is_object()) {
                out.push((namespace.clone(), o.clone()));
            }
            continue;
        }
        out.push((namespace.clone(), object));
    }
    STATE.with_borrow_mut(|s| s.generated.extend(out));
    // true, as Kyverno's: `all(ns, generator.apply(ns, ...))` iterates.
    Ok(Value::Bool(true))
}

/// The answer to `lookup`, or a pending marker that fails this round.
fn answer(lookup: Lookup) -> ResolveResult {
    STATE.with_borrow_mut(|s| {
        if let Some((_, a)) = s.answers.iter().find(|(l, _)| *l == lookup) {
            return a
                .clone()
                .map_err(|e| ExecutionError::function_error("lookup", e));
        }
        s.pending.push(lookup);
        Err(ExecutionError::function_error("lookup", "pending"))
    })
}

/// `dyn(x)`: a type-checker hint; the interpreter is dynamic already.
fn dyn_value(v: Value) -> ResolveResult {
    Ok(v)
}

/// The type names a policy may compare `type(x)` with; each is rewritten
/// at compile time to [`type_value`] of itself.
pub const TYPE_NAMES: &[&str] = &[
    "null_type",
    "int",
    "uint",
    "double",
    "bool",
    "string",
    "bytes",
    "list",
    "map",
    "type",
    "optional_type",
];

/// The value standing for a CEL type: the interpreter has no type values,
/// so a type is a string no object field can hold by accident.
pub fn type_value(name: &str) -> String {
    format!("{}{name}", value_text::TYPE_MARK)
}

/// `type(x)`: the value of `x`'s type, comparable with a type name.
fn type_of(v: Value) -> ResolveResult {
    Ok(Value::String(Arc::new(type_value(value_text::type_name(
        &v,
    )))))
}

/// `string(x)`: the interpreter's conversion, with cel-go's text where the
/// interpreter lacks it or differs: `string(bool)`, a timestamp as RFC 3339
/// in its own offset, a duration in seconds (`"1000000s"`, `"1.5s"`), a
/// double as Go's `%g` (`"1e+21"`).
fn string_of(ftx: &FunctionContext, This(this): This<Value>) -> ResolveResult {
    match this {
        Value::Bool(b) => Ok(Value::String(Arc::new(b.to_string()))),
        Value::Timestamp(t) => Ok(Value::String(Arc::new(value_text::timestamp(&t)))),
        Value::Duration(d) => Ok(Value::String(Arc::new(value_text::duration(&d)))),
        Value::Float(d) => Ok(Value::String(Arc::new(value_text::double(d)))),
        Value::Bytes(b) => match std::str::from_utf8(&b) {
            Ok(s) => Ok(Value::String(Arc::new(s.to_string()))),
            Err(_) => Err(ftx.error("invalid UTF-8 in bytes, cannot convert to string")),
        },
        other => kube_cel::cel::functions::string(ftx, This(other)),
    }
}

/// 2^63 as a double.
const TWO_TO_63: f64 = 9_223_372_036_854_775_808.0;

/// `int(x)`: the interpreter's conversion, plus a timestamp's Unix
/// seconds, and a double outside int's range an error (the interpreter
/// saturates at the ends), as the CEL spec has them.
fn int_of(ftx: &FunctionContext, This(this): This<Value>) -> ResolveResult {
    match this {
        Value::Timestamp(t) => Ok(Value::Int(t.timestamp())),
        // Both ends are 2^63 exactly: i64::MAX is not a double.
        Value::Float(v) if !(v > -TWO_TO_63 && v < TWO_TO_63) => Err(ftx.error("integer overflow")),
        other => kube_cel::cel::functions::int(ftx, This(other)),
    }
}

/// `duration(x)`: a duration, or a string in Go's syntax, strictly (the
/// cel crate accepted trailing text, `4h-x`), with cel-go's error.
fn duration_of(This(this): This<Value>) -> ResolveResult {
    let conversion_error = || {
        ExecutionError::function_error(
            "",
            "type conversion error from 'string' to 'google.protobuf.Duration'",
        )
    };
    match this {
        Value::Duration(d) => Ok(Value::Duration(d)),
        Value::String(s) => {
            let ns = duration_nanos(&s).ok_or_else(conversion_error)?;
            Ok(Value::Duration(chrono::Duration::nanoseconds(ns)))
        }
        _ => Err(ExecutionError::NoSuchOverload),
    }
}

/// A duration's text in Go's syntax as nanoseconds, in the range of Go's
/// `time.Duration` (int64), which cel-go's durations have; `None` for
/// anything else. The interpreter's `duration()` and the direct
/// evaluator's read it alike.
pub(crate) fn duration_nanos(text: &str) -> Option<i64> {
    crate::units::duration::Duration::parse(text).and_then(|d| i64::try_from(d.0).ok())
}

/// cel-go's range of timestamps: 0001-01-01T00:00:00Z to
/// 9999-12-31T23:59:59.999999999Z, in Unix seconds.
const TIMESTAMP_SECONDS: std::ops::RangeInclusive<i64> = -62_135_596_800..=253_402_300_799;

/// Whether `t` is in cel-go's range of timestamps (the years 1 to 9999).
pub(crate) fn timestamp_in_range(t: &chrono::DateTime<chrono::FixedOffset>) -> bool {
    TIMESTAMP_SECONDS.contains(&t.timestamp())
}

/// `timestamp(x)`: an RFC 3339 string, Unix seconds or a timestamp, in
/// cel-go's range of years (1 to 9999), with its error outside it.
fn timestamp_of(ftx: &FunctionContext, This(this): This<Value>) -> ResolveResult {
    let t = match this {
        Value::Timestamp(t) => t,
        Value::String(s) => chrono::DateTime::parse_from_rfc3339(&s)
            .map_err(|e| ftx.error(format!("timestamp: {e}")))?,
        Value::Int(seconds) => chrono::DateTime::from_timestamp(seconds, 0)
            .ok_or_else(|| ftx.error("timestamp out of range"))?
            .fixed_offset(),
        _ => return Err(ExecutionError::NoSuchOverload),
    };
    if !timestamp_in_range(&t) {
        return Err(ftx.error("timestamp out of range"));
    }
    Ok(Value::Timestamp(t))
}

/// `bytes(x)`: a string's UTF-8, or bytes as they are.
fn bytes_of(This(this): This<Value>) -> ResolveResult {
    match this {
        Value::Bytes(b) => Ok(Value::Bytes(b)),
        Value::String(s) => Ok(Value::Bytes(Arc::new(s.as_bytes().to_vec()))),
        _ => Err(ExecutionError::NoSuchOverload),
    }
}

/// `bool(x)`: a bool, or the spellings of one the CEL spec accepts in a
/// string ("true", "t", "1", "TRUE", "True", and the same for false).
fn bool_of(ftx: &FunctionContext, This(this): This<Value>) -> ResolveResult {
    match this {
        Value::Bool(b) => Ok(Value::Bool(b)),
        Value::String(s) => match s.as_str() {
            "1" | "t" | "true" | "TRUE" | "True" => Ok(Value::Bool(true)),
            "0" | "f" | "false" | "FALSE" | "False" => Ok(Value::Bool(false)),
            other => Err(ftx.error(format!(
                "type conversion error from 'string' to 'bool': {other:?}"
            ))),
        },
        other => Err(ftx.error(format!("cannot convert {other:?} to bool"))),
    }
}

/// `==`: the value's equality, which compares numbers across types.
fn equal(a: Value, b: Value) -> ResolveResult {
    Ok(Value::Bool(a == b))
}

fn not_equal(a: Value, b: Value) -> ResolveResult {
    Ok(Value::Bool(a != b))
}

/// `x in container`: a list element equal to `x` (numbers across types),
/// or a map key `x` stands for (an integer of any numeric type).
fn contained_in(ftx: &FunctionContext, item: Value, container: Value) -> ResolveResult {
    match container {
        Value::List(items) => Ok(Value::Bool(items.contains(&item))),
        Value::Map(map) => {
            let has = |k: Key| map.map.contains_key(&k);
            let found = match item {
                Value::String(s) => has(Key::String(s)),
                Value::Bool(b) => has(Key::Bool(b)),
                Value::Int(i) => {
                    has(Key::Int(i)) || u64::try_from(i).is_ok_and(|u| has(Key::Uint(u)))
                }
                Value::UInt(u) => {
                    has(Key::Uint(u)) || i64::try_from(u).is_ok_and(|i| has(Key::Int(i)))
                }
                Value::Float(f) if f.fract() == 0.0 && f.abs() < TWO_TO_63 => {
                    has(Key::Int(f as i64)) || (f >= 0.0 && has(Key::Uint(f as u64)))
                }
                Value::Float(_) => false,
                other => {
                    return Err(ftx.error(format!("unsupported map key type {}", other.type_of())));
                }
            };
            Ok(Value::Bool(found))
        }
        other => Err(ftx.error(format!("no such overload: in {}", other.type_of()))),
    }
}

fn tick(v: Value, weight: i64) -> ResolveResult {
    let left = STATE.with_borrow_mut(|s| {
        s.budget -= weight;
        s.budget
    });
    if left < 0 {
        return Err(ExecutionError::function_error(
            "cost",
            "operation cancelled: actual cost limit exceeded",
        ));
    }
    Ok(v)
}

/// cel-go's field selection (on unstructured JSON, as Kubernetes and
/// Kyverno bind objects): a map's entry or `no such key`; a list's is an
/// index error; anything else has no fields.
fn select_field(operand: Value, field: Arc<String>) -> ResolveResult {
    // A field of an optional is optional, as in cel-go: `optional.of(m).c`
    // is `m.?c`, and a field of none is none.
    match optional_inner(&operand) {
        Some(None) => return Ok(opt_none()),
        Some(Some(Value::Map(m))) => {
            return Ok(match m.map.get(&Key::String(field)) {
                Some(v) => opt_of(v.clone()),
                None => opt_none(),
            });
        }
        Some(Some(other)) => return select_field(other, field),
        None => {}
    }
    match &operand {
        Value::Map(m) => match m.map.get(&Key::String(field.clone())) {
            Some(v) => Ok(v.clone()),
            None => Err(ExecutionError::NoSuchKey(field)),
        },
        Value::List(_) => Err(string_index_on_list()),
        _ => Err(ExecutionError::NoSuchKey(field)),
    }
}

/// cel-go's `has()`: whether a map has the key; an index error on a list;
/// false on anything else.
fn has_field(operand: Value, field: Arc<String>) -> ResolveResult {
    match optional_inner(&operand) {
        Some(None) => return Ok(Value::Bool(false)),
        Some(Some(inner)) => return has_field(inner, field),
        None => {}
    }
    match &operand {
        Value::Map(m) => Ok(Value::Bool(m.map.contains_key(&Key::String(field)))),
        Value::List(_) => Err(string_index_on_list()),
        _ => Ok(Value::Bool(false)),
    }
}

/// `-x`: see [`NEGATE`].
fn negate(ftx: &FunctionContext, v: Value) -> ResolveResult {
    match v {
        Value::Int(i) => i
            .checked_neg()
            .map(Value::Int)
            .ok_or_else(|| ftx.error("integer overflow")),
        Value::Float(d) => Ok(Value::Float(-d)),
        _ => Err(ExecutionError::NoSuchOverload),
    }
}

/// A list or map as it is; anything else is cel-go's error for a
/// comprehension over it (the interpreter's is no such overload).
fn iterable(range: Value) -> ResolveResult {
    let go_type = match &range {
        Value::List(_) | Value::Map(_) => return Ok(range),
        Value::Null => "types.Null",
        Value::Bool(_) => "types.Bool",
        Value::Int(_) => "types.Int",
        Value::UInt(_) => "types.Uint",
        Value::Float(_) => "types.Double",
        Value::String(_) => "types.String",
        Value::Bytes(_) => "types.Bytes",
        Value::Duration(_) => "types.Duration",
        Value::Timestamp(_) => "types.Timestamp",
        v if optional_inner(v).is_some() => "*types.Optional",
        _ => return Err(ExecutionError::NoSuchOverload),
    };
    Err(ExecutionError::function_error(
        "",
        format!("got '{go_type}', expected iterable type"),
    ))
}

fn pairs(range: Value) -> ResolveResult {
    let pair = |a: Value, b: &Value| Value::List(Arc::new(vec![a, b.clone()]));
    Ok(Value::List(Arc::new(match iterable(range)? {
        Value::List(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| pair(Value::Int(i as i64), item))
            .collect(),
        Value::Map(map) => map
            .map
            .iter()
            .map(|(key, value)| pair(key.clone().into(), value))
            .collect(),
        _ => return Err(ExecutionError::NoSuchOverload),
    })))
}

fn map_of_pairs(pairs: Value) -> ResolveResult {
    let Value::List(pairs) = pairs else {
        return Err(ExecutionError::NoSuchOverload);
    };
    let mut map = std::collections::HashMap::with_capacity(pairs.len());
    for pair in pairs.iter() {
        let Value::List(pair) = pair else {
            return Err(ExecutionError::NoSuchOverload);
        };
        let [key, value] = pair.as_slice() else {
            return Err(ExecutionError::NoSuchOverload);
        };
        let key: Key = key
            .clone()
            .try_into()
            .map_err(|_| ExecutionError::NoSuchOverload)?;
        map.insert(key, value.clone());
    }
    Ok(Value::Map(kube_cel::cel::objects::Map {
        map: Arc::new(map),
    }))
}

/// cel-go's error for a field or string key of a list.
pub(super) fn string_index_on_list() -> ExecutionError {
    ExecutionError::function_error("", "unsupported index type 'string' in list")
}

fn logical_and(ftx: &FunctionContext) -> ResolveResult {
    logical(ftx, false)
}

fn logical_or(ftx: &FunctionContext) -> ResolveResult {
    logical(ftx, true)
}

/// cel-go's `&&` (`decisive` false) and `||` (`decisive` true): the
/// decisive value of either operand is the answer, whatever the other
/// gives; otherwise the first operand that is not a bool is the error (its
/// own, or no such overload).
fn logical(ftx: &FunctionContext, decisive: bool) -> ResolveResult {
    let [left, right] = ftx.args else {
        return Err(ExecutionError::invalid_argument_count(2, ftx.args.len()));
    };
    let left = Value::resolve(left, ftx.ptx);
    if matches!(left, Ok(Value::Bool(b)) if b == decisive) {
        return Ok(Value::Bool(decisive));
    }
    let right = Value::resolve(right, ftx.ptx);
    match (left, right) {
        (_, Ok(Value::Bool(b))) if b == decisive => Ok(Value::Bool(decisive)),
        (Ok(Value::Bool(_)), Ok(Value::Bool(_))) => Ok(Value::Bool(!decisive)),
        (Err(e), _) | (Ok(Value::Bool(_)), Err(e)) => Err(e),
        _ => Err(ExecutionError::NoSuchOverload),
    }
}

fn or_value(This(this): This<Value>, other: Value) -> ResolveResult {
    Ok(match optional_inner(&this) {
        Some(Some(v)) => v,
        Some(None) => other,
        None => this,
    })
}

fn has_value(This(this): This<Value>) -> ResolveResult {
    Ok(Value::Bool(!matches!(optional_inner(&this), Some(None))))
}

fn value_of(ftx: &FunctionContext, This(this): This<Value>) -> ResolveResult {
    match optional_inner(&this) {
        Some(Some(v)) => Ok(v),
        Some(None) => Err(ftx.error("optional.none() dereference")),
        None => Ok(this),
    }
}

fn optional_inner(v: &Value) -> Option<Option<Value>> {
    <&OptionalValue>::try_from(v)
        .ok()
        .map(|o| o.value().cloned())
}

/// `a.?f`: an optional of the field, none when it is absent.
fn opt_select(operand: Value, field: Arc<String>) -> ResolveResult {
    let target = match optional_inner(&operand) {
        Some(None) => return Ok(opt_none()),
        Some(Some(v)) => v,
        None => operand,
    };
    match &target {
        Value::Map(m) => Ok(match m.map.get(&Key::String(field)) {
            Some(v) => opt_of(v.clone()),
            None => opt_none(),
        }),
        Value::List(_) => Err(string_index_on_list()),
        // cel-go: a value that is not a map or list has no fields.
        _ => Ok(opt_none()),
    }
}

/// `a[?k]`: an optional of the entry, none when it is absent.
fn opt_index(ftx: &FunctionContext, operand: Value, key: Value) -> ResolveResult {
    let target = match optional_inner(&operand) {
        Some(None) => return Ok(opt_none()),
        Some(Some(v)) => v,
        None => operand,
    };
    match (&target, &key) {
        (Value::Map(m), _) => {
            let k = match key {
                Value::String(s) => Key::String(s),
                Value::Int(i) => Key::Int(i),
                Value::UInt(u) => Key::Uint(u),
                Value::Bool(b) => Key::Bool(b),
                other => return Err(ftx.error(format!("unsupported key type {}", other.type_of()))),
            };
            Ok(m.map.get(&k).cloned().map_or_else(opt_none, opt_of))
        }
        (Value::List(l), Value::Int(i)) => Ok(usize::try_from(*i)
            .ok()
            .and_then(|i| l.get(i))
            .cloned()
            .map_or_else(opt_none, opt_of)),
        (Value::List(_), Value::String(_)) => Err(string_index_on_list()),
        (Value::Null, _) => Ok(opt_none()),
        (other, _) => Err(ftx.error(format!(
            "no such overload: optional index on {}",
            other.type_of()
        ))),
    }
}

fn string_arg(ftx: &FunctionContext, args: &[Value], i: usize) -> Result<String, ExecutionError> {
    match args.get(i) {
        Some(Value::String(s)) => Ok(s.to_string()),
        Some(other) => Err(ftx.error(format!(
            "argument {} must be a string, got {}",
            i + 1,
            other.type_of()
        ))),
        None => Err(ftx.error(format!("missing argument {}", i + 1))),
    }
}

fn resource_get(ftx: &FunctionContext, Arguments(args): Arguments) -> ResolveResult {
    answer(Lookup::Resource {
        api_version: string_arg(ftx, &args, 0)?,
        resource: string_arg(ftx, &args, 1)?,
        namespace: string_arg(ftx, &args, 2)?,
        name: string_arg(ftx, &args, 3)?,
    })
}

fn resource_list(ftx: &FunctionContext, Arguments(args): Arguments) -> ResolveResult {
    answer(Lookup::ResourceList {
        api_version: string_arg(ftx, &args, 0)?,
        resource: string_arg(ftx, &args, 1)?,
        namespace: string_arg(ftx, &args, 2)?,
    })
}

fn global_context_get(ftx: &FunctionContext, Arguments(args): Arguments) -> ResolveResult {
    answer(Lookup::GlobalContext {
        name: string_arg(ftx, &args, 0)?,
        projection: if args.len() > 1 {
            string_arg(ftx, &args, 1)?
        } else {
            String::new()
        },
    })
}

fn image_metadata(ftx: &FunctionContext, Arguments(args): Arguments) -> ResolveResult {
    answer(Lookup::ImageMetadata(string_arg(ftx, &args, 0)?))
}

/// The attestor list argument of the verification functions.
fn list_arg(ftx: &FunctionContext, args: &[Value], i: usize) -> Result<(), ExecutionError> {
    match args.get(i) {
        Some(Value::List(_)) => Ok(()),
        Some(other) => Err(ftx.error(format!(
            "argument {} must be a list of attestors, got {}",
            i + 1,
            other.type_of()
        ))),
        None => Err(ftx.error(format!("missing argument {}", i + 1))),
    }
}

/// `verifyImageSignatures(image, [attestors])`: how many attestors
/// verified the image's signature.
fn verify_image_signatures(ftx: &FunctionContext, Arguments(args): Arguments) -> ResolveResult {
    let image = string_arg(ftx, &args, 0)?;
    list_arg(ftx, &args, 1)?;
    answer(Lookup::ImageVerification {
        function: "verifyImageSignatures",
        image,
        attestation: None,
    })
}

/// `verifyAttestationSignatures(image, attestation, [attestors])`.
fn verify_attestation_signatures(
    ftx: &FunctionContext,
    Arguments(args): Arguments,
) -> ResolveResult {
    let image = string_arg(ftx, &args, 0)?;
    let attestation = string_arg(ftx, &args, 1)?;
    list_arg(ftx, &args, 2)?;
    answer(Lookup::ImageVerification {
        function: "verifyAttestationSignatures",
        image,
        attestation: Some(attestation),
    })
}

/// `getImageData(image)`: the image's manifest and config.
fn get_image_data(ftx: &FunctionContext, Arguments(args): Arguments) -> ResolveResult {
    answer(Lookup::ImageVerification {
        function: "getImageData",
        image: string_arg(ftx, &args, 0)?,
        attestation: None,
    })
}

/// `extractPayload(image, attestation)`: a verified attestation's payload.
fn extract_payload(ftx: &FunctionContext, Arguments(args): Arguments) -> ResolveResult {
    answer(Lookup::ImageVerification {
        function: "extractPayload",
        image: string_arg(ftx, &args, 0)?,
        attestation: Some(string_arg(ftx, &args, 1)?),
    })
}

fn http_get(ftx: &FunctionContext, Arguments(args): Arguments) -> ResolveResult {
    answer(Lookup::Http {
        method: "GET".into(),
        url: string_arg(ftx, &args, 0)?,
        body: None,
    })
}

fn http_post(ftx: &FunctionContext, Arguments(args): Arguments) -> ResolveResult {
    let body = args
        .get(1)
        .map(|v| super::values::cel_to_json(v).map_err(|e| ftx.error(e)))
        .transpose()?;
    answer(Lookup::Http {
        method: "POST".into(),
        url: string_arg(ftx, &args, 0)?,
        body,
    })
}

/// `parseServiceAccount("system:serviceaccount:ns:name")` gives
/// `{Namespace, Name}`; anything else gives empty fields.
fn parse_service_account(user: Arc<String>) -> ResolveResult {
    let parts: Vec<&str> = user.split(':').collect();
    let (ns, name) = match parts.as_slice() {
        ["system", "serviceaccount", ns, name] => (*ns, *name),
        _ => ("", ""),
    };
    Ok(json_to_cel(
        &serde_json::json!({"Namespace": ns, "Name": name}),
    ))
}

/// The methods of an image value, each reading its field.
const IMAGE_FIELDS: [&str; 5] = ["registry", "repository", "identifier", "tag", "digest"];

/// `image(ref)`: an image value is a map of its parts.
fn image_of(ftx: &FunctionContext, reference: Arc<String>) -> ResolveResult {
    let r = super::image_ref::parse(&reference).map_err(|e| ftx.error(e))?;
    Ok(json_to_cel(&serde_json::json!({
        "image": r.image,
        "registry": r.registry,
        "repository": r.repository,
        "identifier": r.identifier(),
        "tag": r.tag,
        "digest": r.digest,
    })))
}

fn is_image(reference: Arc<String>) -> ResolveResult {
    Ok(Value::Bool(super::image_ref::parse(&reference).is_ok()))
}

fn image_field(ftx: &FunctionContext, this: &Value, field: &str) -> ResolveResult {
    match this {
        Value::Map(m) => m
            .map
            .get(&Key::String(Arc::new(field.to_string())))
            .cloned()
            .ok_or_else(|| ftx.error(format!("{field}() needs an image (from image())"))),
        _ => Err(ftx.error(format!("{field}() needs an image (from image())"))),
    }
}

fn time_now() -> ResolveResult {
    Ok(Value::Timestamp(chrono::Utc::now().fixed_offset()))
}

fn json_unmarshal(ftx: &FunctionContext, text: Arc<String>) -> ResolveResult {
    serde_json::from_str::<serde_json::Value>(&text)
        .map(|v| json_to_cel(&v))
        .map_err(|e| ftx.error(e.to_string()))
}

fn yaml_parse(ftx: &FunctionContext, text: Arc<String>) -> ResolveResult {
    serde_saphyr::from_str::<serde_json::Value>(&text)
        .map(|v| json_to_cel(&v))
        .map_err(|e| ftx.error(e.to_string()))
}
