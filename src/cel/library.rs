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

mod conversions;
mod kyverno;
mod operators;
pub use conversions::*;
use kyverno::*;
use operators::*;

use super::values::json_to_cel;
use super::{COST_LIMIT, CelError};
use kube_cel::KubeCelExt;
use kube_cel::cel::common::ast::IdedExpr;
use kube_cel::cel::extractors::{Arguments, This};
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
