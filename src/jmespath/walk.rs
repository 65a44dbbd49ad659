//! Projection paths compiled into direct walks of the JSON.
//!
//! Policies read lists through a few shapes of projection far more than
//! anything else: `request.object.spec.[ephemeralContainers,
//! initContainers, containers][]`, `...[].securityContext.capabilities.add[]`,
//! `element.ports[].hostPort || []`. The interpreter evaluates them node by
//! node, building a list of [`Val`]s at every projection and flattening it
//! into the next; a [`Walk`] visits the same values of the document once,
//! streaming each projection's elements into the one that consumes it, so
//! only the result list is built.
//!
//! Only the shapes whose value cannot fail are compiled (plain key paths,
//! one multi-select list of key paths, list and flatten projections whose
//! right-hand side is a key path, and `|| literal` around them); anything
//! else, and a root that is not JSON, stays with the interpreter.
//! `tests.rs` (`walks_agree_with_the_interpreter`) holds the two to the
//! same values on random documents; the corpus tests run the walks
//! wherever policies use these shapes.

use super::parser::Ast;
use super::value::{Val, null};
use crate::json_doc::{Json, JsonRef, Key, View};
use serde_json::Value;

/// A compiled projection: its value is the interpreter's for the
/// expression it was compiled from.
#[derive(Debug, Clone)]
pub struct Walk {
    body: Projection,
    /// `body || literal`: the literal when the body's value is falsy.
    otherwise: Option<Value>,
}

/// A key path, then optionally a multi-select list of key paths
/// (`a.b.[c, d.e]`), whose value is a list of the selected values, nulls
/// kept.
#[derive(Debug, Clone)]
struct Single {
    keys: Vec<Key>,
    select: Option<Vec<Vec<Key>>>,
}

/// What a projection walks the elements of.
#[derive(Debug, Clone)]
enum Source {
    Single(Single),
    /// The elements another projection yields (`a[].b[]`: the inner
    /// projection's results, flattened).
    Projection(Box<Projection>),
}

/// `source[*].rhs` or, flattened, `source[].rhs`: `rhs` of each element,
/// nulls dropped.
#[derive(Debug, Clone)]
struct Projection {
    source: Source,
    flatten: bool,
    rhs: Rhs,
}

/// What a projection takes of each element.
#[derive(Debug, Clone)]
enum Rhs {
    /// The element itself (`a[]`, `a[*]`).
    Element,
    /// A key path of it (`a[].b.c`).
    Path(Vec<Key>),
    /// `keys(@)`, the list of its keys (`volumes[].keys(@)[]`). Of
    /// anything but an object it is the interpreter's type error: the walk
    /// then hands the expression back.
    Keys,
}

/// One value a projection yields: JSON, a key (`keys(@)` flattened), or
/// the keys of an object as one list (`keys(@)` not flattened yet).
#[derive(Clone, Copy)]
enum Item<'a, V> {
    Node(V),
    Key(&'a str),
    Keys(V),
}

impl Walk {
    /// The walk for `ast`, when it has one of the compiled shapes.
    pub(super) fn compile(ast: &Ast) -> Option<Walk> {
        let (body, otherwise) = match ast {
            Ast::Or(left, right) => match &**right {
                Ast::Literal(v) => (&**left, Some(v.clone())),
                _ => return None,
            },
            other => (other, None),
        };
        Some(Walk {
            body: projection(body)?,
            otherwise,
        })
    }

    /// The expression's value on `root`, or `None` when the root's keys do
    /// not lead to JSON (a lazily served object, a computed list) or the
    /// value is an error (`keys(@)` of a non-object), and the interpreter
    /// must evaluate it.
    pub(super) fn eval<'a>(&'a self, root: Val<'a>) -> Option<Val<'a>> {
        let (start, skip) = self.json_start(root)?;
        match start {
            JsonRef::Value(v) => self.value_from(v, skip),
            JsonRef::Doc(j) => self.value_from(j, skip),
        }
    }

    /// Where the walk starts when its first keys, `path`, are known to
    /// lead to `value` (`element` bound to a foreach's element,
    /// `request.object` to the request's object): `value`, past those
    /// keys.
    fn start_under<'a>(&self, path: &[&str], value: JsonRef<'a>) -> Option<(JsonRef<'a>, usize)> {
        self.starts_with(path).then_some((value, path.len()))
    }

    /// Whether the walk's first keys are `path`.
    pub(super) fn starts_with(&self, path: &[&str]) -> bool {
        let keys = &self.body.innermost().keys;
        !path.is_empty()
            && keys.len() >= path.len()
            && keys.iter().zip(path).all(|(k, p)| k.as_str() == *p)
    }

    /// Where the walk reaches JSON from `root`, and how many of its first
    /// keys it took to get there; `None` when they do not lead to JSON.
    fn json_start<'a>(&'a self, root: Val<'a>) -> Option<(JsonRef<'a>, usize)> {
        let keys = &self.body.innermost().keys;
        let mut cur = root;
        let mut skip = 0;
        // The first keys are looked up through the scope (`request`,
        // `element`), as the interpreter does, until they reach JSON.
        loop {
            match cur {
                Val::Ref(v) => return Some((JsonRef::Value(v), skip)),
                Val::Doc(j) => return Some((JsonRef::Doc(j), skip)),
                other if skip < keys.len() => {
                    cur = other.field(keys[skip].as_str());
                    skip += 1;
                }
                _ => return None,
            }
        }
    }

    /// The walk's value on `root` given to `each` string by string rather
    /// than built: how the value ended, or `None` when it is not a list
    /// of strings, an empty list or the `|| literal` (a member that is not
    /// a string, a null that may be the interpreter's missing-key error,
    /// an error) or the root's keys do not lead to JSON. `each` may have
    /// been called before `None` is known: the caller then starts over.
    pub(super) fn stream<'a>(
        &'a self,
        root: Val<'a>,
        each: &mut dyn FnMut(&str),
    ) -> Option<Streamed<'a>> {
        self.stream_at(self.json_start(root)?, each)
    }

    /// [`Walk::stream`] with the walk's first keys, `path`, known to lead
    /// to `value`, as [`Walk::start_under`] starts.
    pub(super) fn stream_under<'a>(
        &'a self,
        path: &[&str],
        value: JsonRef<'a>,
        each: &mut dyn FnMut(&str),
    ) -> Option<Streamed<'a>> {
        self.stream_at(self.start_under(path, value)?, each)
    }

    fn stream_at<'a>(
        &'a self,
        (start, skip): (JsonRef<'a>, usize),
        each: &mut dyn FnMut(&str),
    ) -> Option<Streamed<'a>> {
        match start {
            JsonRef::Value(v) => self.stream_from(v, skip, each),
            JsonRef::Doc(j) => self.stream_from(j, skip, each),
        }
    }

    /// The walk's value on `root` given to `each` member by member, each
    /// JSON, rather than built: the number of members; `None` when the
    /// value is anything but a list of JSON values (a list of keys, the
    /// `|| literal`, a null that may be the interpreter's missing-key
    /// error, an error) or the root's keys do not lead to JSON. `each`
    /// may have been called before `None` is known.
    pub(super) fn stream_nodes<'a>(
        &'a self,
        root: Val<'a>,
        each: &mut dyn FnMut(JsonRef<'a>),
    ) -> Option<usize> {
        self.nodes_at(self.json_start(root)?, each)
    }

    /// [`Walk::stream_nodes`] with the walk's first keys, `path`, known to
    /// lead to `value`, as [`Walk::start_under`] starts.
    pub(super) fn stream_nodes_under<'a>(
        &'a self,
        path: &[&str],
        value: JsonRef<'a>,
        each: &mut dyn FnMut(JsonRef<'a>),
    ) -> Option<usize> {
        self.nodes_at(self.start_under(path, value)?, each)
    }

    fn nodes_at<'a>(
        &'a self,
        (start, skip): (JsonRef<'a>, usize),
        each: &mut dyn FnMut(JsonRef<'a>),
    ) -> Option<usize> {
        match start {
            JsonRef::Value(v) => self.nodes_from(v, skip, each),
            JsonRef::Doc(j) => self.nodes_from(j, skip, each),
        }
    }

    fn nodes_from<'a, V: Node<'a>>(
        &'a self,
        start: V,
        skip: usize,
        each: &mut dyn FnMut(JsonRef<'a>),
    ) -> Option<usize> {
        let (mut members, mut other) = (0, false);
        let listed = project(
            &self.body,
            start,
            skip,
            &mut |item: Item<'a, V>| match item {
                Item::Node(v) => {
                    members += 1;
                    each(v.json());
                }
                Item::Key(_) | Item::Keys(_) => other = true,
            },
        )?;
        // An empty list is falsy: the literal would replace it.
        let literal = members == 0 && self.otherwise.is_some();
        (listed && !other && !literal).then_some(members)
    }

    fn stream_from<'a, V: Node<'a>>(
        &'a self,
        start: V,
        skip: usize,
        each: &mut dyn FnMut(&str),
    ) -> Option<Streamed<'a>> {
        let (mut strings, mut other) = (false, false);
        let listed = project(&self.body, start, skip, &mut |item: Item<'a, V>| {
            let member = match item {
                Item::Node(v) => v.as_str(),
                Item::Key(k) => Some(k),
                Item::Keys(_) => None,
            };
            match member {
                Some(s) => {
                    strings = true;
                    each(s);
                }
                None => other = true,
            }
        })?;
        if other {
            return None;
        }
        // A list with members is truthy: the literal only replaces an
        // empty list or a null.
        match (strings, &self.otherwise, listed) {
            (true, _, _) => Some(Streamed::Strings),
            (false, Some(literal), _) => Some(Streamed::Otherwise(literal)),
            (false, None, true) => Some(Streamed::Empty),
            (false, None, false) => None,
        }
    }

    /// The expression's value when its first key names `value` (a foreach
    /// scope's `element`), evaluated on `value` without the scope; `None`
    /// when the walk starts at another key or its value is an error.
    pub(super) fn eval_bound<'a>(&'a self, name: &str, value: JsonRef<'a>) -> Option<Val<'a>> {
        let (start, skip) = self.start_under(&[name], value)?;
        match start {
            JsonRef::Value(v) => self.value_from(v, skip),
            JsonRef::Doc(j) => self.value_from(j, skip),
        }
    }

    /// The value walked from `start` (past the first `skip` keys), with
    /// `|| literal` applied; `None` when the walk's value is an error.
    fn value_from<'a, V: Node<'a>>(&'a self, start: V, skip: usize) -> Option<Val<'a>> {
        let value = self.run(start, skip)?;
        Some(match &self.otherwise {
            Some(literal) if !value.truthy() => Val::Ref(literal),
            _ => value,
        })
    }

    fn run<'a, V: Node<'a>>(&'a self, start: V, skip: usize) -> Option<Val<'a>> {
        let mut out = Vec::new();
        let listed = project(&self.body, start, skip, &mut |item: Item<'a, V>| {
            out.push(match item {
                Item::Node(v) => v.val(),
                Item::Key(k) => key(k),
                Item::Keys(v) => Val::list(v.entries().map(|(k, _)| key(k)).collect()),
            })
        })?;
        Some(if listed { Val::list(out) } else { null() })
    }
}

/// How a streamed walk's value ended ([`Walk::stream`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Streamed<'a> {
    /// A list of strings, each given to the caller.
    Strings,
    /// An empty list.
    Empty,
    /// `|| literal` replaced an empty list or a null: the value is the literal.
    Otherwise(&'a Value),
}

/// A key as the interpreter's `keys()` gives it.
fn key<'a>(k: &str) -> Val<'a> {
    Val::own(Value::String(k.to_string()))
}

/// A JSON value of either representation, turned into a [`Val`].
trait Node<'a>: View<'a> {
    fn val(self) -> Val<'a>;
    fn json(self) -> JsonRef<'a>;
}

impl<'a> Node<'a> for &'a Value {
    fn val(self) -> Val<'a> {
        Val::Ref(self)
    }

    fn json(self) -> JsonRef<'a> {
        JsonRef::Value(self)
    }
}

impl<'a> Node<'a> for Json<'a> {
    fn val(self) -> Val<'a> {
        Val::Doc(self)
    }

    fn json(self) -> JsonRef<'a> {
        JsonRef::Doc(self)
    }
}

impl Projection {
    /// The key path the walk starts from.
    fn innermost(&self) -> &Single {
        match &self.source {
            Source::Single(s) => s,
            Source::Projection(p) => p.innermost(),
        }
    }

    fn innermost_mut(&mut self) -> &mut Single {
        match &mut self.source {
            Source::Single(s) => s,
            Source::Projection(p) => p.innermost_mut(),
        }
    }
}

/// The value at `keys` under `v`; `None` for null (a missing key, or a
/// step through something that is not an object). The interpreter's key
/// paths walk JSON with it too.
pub(super) fn path<'a, V: View<'a>>(mut v: V, keys: &[Key]) -> Option<V> {
    for k in keys {
        v = v.get_key(k)?;
    }
    Some(v)
}

/// Calls `emit` with each value projection `p` yields on `v` (the walk's
/// start, past its first `skip` keys); false when the projection's value
/// is null rather than a list (its source is not a list); `None` when it
/// is an error (`keys(@)` of something that is not an object).
fn project<'a, V: View<'a>>(
    p: &'a Projection,
    v: V,
    skip: usize,
    emit: &mut dyn FnMut(Item<'a, V>),
) -> Option<bool> {
    let mut failed = false;
    let mut missing_item = false;
    let mut apply = |item: Item<'a, V>| {
        let value = match (&p.rhs, item) {
            (Rhs::Element, Item::Node(v)) => (!v.is_null()).then_some(item),
            (Rhs::Element, _) => Some(item),
            (Rhs::Path(keys), Item::Node(v)) => {
                path(v, keys).filter(|v| !v.is_null()).map(Item::Node)
            }
            // A key of a string or of a list is null.
            (Rhs::Path(_), _) => None,
            (Rhs::Keys, Item::Node(v)) if v.is_object() => Some(Item::Keys(v)),
            (Rhs::Keys, _) => {
                failed = true;
                None
            }
        };
        if let Some(value) = value {
            emit(value);
        }
    };
    // One element of the source: spliced when flattening an array.
    let mut take = |item: Item<'a, V>| match item {
        Item::Node(v) if p.flatten && v.is_array() => {
            v.elements().for_each(|e| apply(Item::Node(e)));
        }
        Item::Keys(v) if p.flatten => v.entries().for_each(|(k, _)| apply(Item::Key(k))),
        other => apply(other),
    };
    let listed = match &p.source {
        Source::Projection(inner) => project(inner, v, skip, &mut take)?,
        Source::Single(single) => match path(v, &single.keys[skip..]) {
            None => false,
            Some(v) => match &single.select {
                None if v.is_array() => {
                    v.elements().for_each(|e| take(Item::Node(e)));
                    true
                }
                None => false,
                // A multi-select list of null is null.
                Some(_) if v.is_null() => false,
                Some(paths) => {
                    for keys in paths {
                        match path(v, keys) {
                            Some(e) => take(Item::Node(e)),
                            // A missing item is null: dropped, and so is
                            // any key path of it, but its `keys(@)` is
                            // the interpreter's error.
                            None => missing_item |= matches!(p.rhs, Rhs::Keys),
                        }
                    }
                    true
                }
            },
        },
    };
    (!failed && !missing_item).then_some(listed)
}

/// `ast` as a projection of a compiled shape.
fn projection(ast: &Ast) -> Option<Projection> {
    let (left, right) = match ast {
        Ast::Projection(left, right) => (left, right),
        // `a.b[*].c` parses as `a` then the projection `b[*].c`: the
        // projection's path starts with `a`.
        Ast::Subexpression(path, inner) => {
            let keys = keys_of(path)?;
            let mut p = projection(inner)?;
            let start = &mut p.innermost_mut().keys;
            start.splice(0..0, keys);
            return Some(p);
        }
        _ => return None,
    };
    let rhs = match &**right {
        Ast::Identity | Ast::Current => Rhs::Element,
        Ast::Function(name, args)
            if name == "keys" && matches!(args.as_slice(), [Ast::Identity | Ast::Current]) =>
        {
            Rhs::Keys
        }
        other => Rhs::Path(keys_of(other)?),
    };
    Some(match &**left {
        Ast::Flatten(inner) => Projection {
            source: match projection(inner) {
                Some(p) => Source::Projection(Box::new(p)),
                None => Source::Single(single(inner)?),
            },
            flatten: true,
            rhs,
        },
        other => Projection {
            source: Source::Single(single(other)?),
            flatten: false,
            rhs,
        },
    })
}

fn single(ast: &Ast) -> Option<Single> {
    match ast {
        Ast::Subexpression(left, right) => {
            let keys = keys_of(left)?;
            let Ast::MultiSelectList(items) = &**right else {
                return None;
            };
            Some(Single {
                keys,
                select: Some(items.iter().map(keys_of).collect::<Option<_>>()?),
            })
        }
        other => Some(Single {
            keys: keys_of(other)?,
            select: None,
        }),
    }
}

fn keys_of(ast: &Ast) -> Option<Vec<Key>> {
    match ast {
        Ast::Field(k) => Some(vec![Key::new(k)]),
        Ast::FieldPath(keys) => Some(keys.clone()),
        _ => None,
    }
}
