//! Kyverno's data shaping functions: `lookup` in a map or a list, `items`
//! (a map or a list as key/value pairs), and `object_from_lists`.

use super::{Args, R, err, go_sprint, type_name, want_arr, want_str};
use serde_json::{Map, Value};

pub(super) fn lookup(args: &Args) -> R {
    args.check(2)?;
    match (args.v(0), args.v(1)) {
        (Value::Object(m), Value::String(k)) => Ok(m.get(k).cloned().unwrap_or(Value::Null)),
        (Value::Array(a), Value::Number(n)) => {
            let f = n.as_f64().unwrap_or(-1.0);
            if f.fract() != 0.0 {
                return err("lookup(): index must be an integer");
            }
            Ok(if f < 0.0 {
                Value::Null
            } else {
                a.get(f as usize).cloned().unwrap_or(Value::Null)
            })
        }
        (c, k) => err(format!(
            "lookup(): cannot look up {} in {}",
            type_name(k),
            type_name(c)
        )),
    }
}

pub(super) fn items(args: &Args) -> R {
    args.check(3)?;
    let (kn, vn) = (
        want_str(args.name, args.v(1))?,
        want_str(args.name, args.v(2))?,
    );
    let pair = |k: Value, val: Value| {
        let mut m = Map::new();
        m.insert(kn.to_string(), k);
        m.insert(vn.to_string(), val);
        Value::Object(m)
    };
    match args.v(0) {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Ok(Value::Array(
                keys.into_iter()
                    .map(|k| pair(Value::String(k.clone()), m[k].clone()))
                    .collect(),
            ))
        }
        Value::Array(a) => Ok(Value::Array(
            a.iter()
                .enumerate()
                .map(|(i, x)| pair(Value::from(i), x.clone()))
                .collect(),
        )),
        other => err(format!(
            "invalid type for items(): got {}",
            type_name(other)
        )),
    }
}

pub(super) fn object_from_lists(args: &Args) -> R {
    args.check(2)?;
    let (keys, values) = (
        want_arr(args.name, args.v(0))?,
        want_arr(args.name, args.v(1))?,
    );
    let mut m = Map::new();
    for (i, k) in keys.iter().enumerate() {
        m.insert(go_sprint(k), values.get(i).cloned().unwrap_or(Value::Null));
    }
    Ok(Value::Object(m))
}
