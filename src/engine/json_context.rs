//! The JSON context (§4.2): one JSON object holding `request`, builtin
//! variables, context entries and foreach elements. Rules read it through
//! JMESPath; it is checkpointed and restored around rules and loop bodies.

use serde_json::{Map, Value};

#[derive(Debug, Clone)]
pub struct JsonContext {
    data: Value,
    /// Undo log: (top-level key, previous value) for restore().
    undo: Vec<(String, Option<Value>)>,
    delete: bool,
}

impl JsonContext {
    pub fn new(data: Value) -> JsonContext {
        let delete = data.pointer("/request/operation").and_then(Value::as_str) == Some("DELETE");
        let data = if data.is_object() {
            data
        } else {
            Value::Object(Map::new())
        };
        JsonContext {
            data,
            undo: Vec::new(),
            delete,
        }
    }

    pub fn data(&self) -> &Value {
        &self.data
    }

    pub fn is_delete(&self) -> bool {
        self.delete
    }

    fn root(&mut self) -> &mut Map<String, Value> {
        self.data
            .as_object_mut()
            .expect("context root is an object")
    }

    /// Sets a top-level name.
    pub fn set(&mut self, name: &str, value: Value) {
        let prev = self.root().insert(name.to_string(), value);
        self.undo.push((name.to_string(), prev));
    }

    /// Sets a dotted path (`request.object.metadata.name`), creating objects on the way.
    pub fn set_path(&mut self, path: &str, value: Value) {
        let mut parts = path.split('.');
        let Some(first) = parts.next() else { return };
        let rest: Vec<&str> = parts.collect();
        if rest.is_empty() {
            self.set(first, value);
            return;
        }
        let prev = self.root().get(first).cloned();
        self.undo.push((first.to_string(), prev));
        let mut cur = self
            .root()
            .entry(first.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        for (i, part) in rest.iter().enumerate() {
            if !cur.is_object() {
                *cur = Value::Object(Map::new());
            }
            let m = cur.as_object_mut().expect("just made an object");
            if i == rest.len() - 1 {
                m.insert(part.to_string(), value);
                return;
            }
            cur = m
                .entry(part.to_string())
                .or_insert_with(|| Value::Object(Map::new()));
        }
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        self.data.get(name)
    }

    pub fn checkpoint(&self) -> usize {
        self.undo.len()
    }

    /// Undoes every change made since `checkpoint`.
    pub fn restore(&mut self, checkpoint: usize) {
        while self.undo.len() > checkpoint {
            let (k, prev) = self.undo.pop().expect("len checked");
            let root = self.root();
            match prev {
                Some(v) => {
                    root.insert(k, v);
                }
                None => {
                    root.remove(&k);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn checkpoint_and_restore() {
        let mut c = JsonContext::new(json!({"request": {"operation": "CREATE"}}));
        let cp = c.checkpoint();
        c.set("element", json!(1));
        c.set_path("request.object.metadata.name", json!("x"));
        assert_eq!(
            c.data().pointer("/request/object/metadata/name"),
            Some(&json!("x"))
        );
        c.restore(cp);
        assert_eq!(c.data(), &json!({"request": {"operation": "CREATE"}}));
    }
}
