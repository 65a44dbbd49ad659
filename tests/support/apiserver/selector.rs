//! Label and field selectors as the API parses them:
//! `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`.

#[derive(Debug, Clone, PartialEq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selector(Vec<Requirement>);

impl Selector {
    pub fn parse(text: &str) -> Result<Selector, String> {
        let mut out = Vec::new();
        for term in split_terms(text) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            out.push(parse_term(term)?);
        }
        Ok(Selector(out))
    }

    /// `value(key)` gives the object's value for a key (label or field).
    pub fn matches<'a>(&self, value: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => value(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => value(k) != Some(v.as_str()),
            Requirement::In(k, vs) => value(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => value(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            Requirement::Exists(k) => value(k).is_some(),
            Requirement::NotExists(k) => value(k).is_none(),
        })
    }
}

/// Splits at commas outside parentheses.
fn split_terms(text: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&text[start..]);
    terms
}

fn parse_term(term: &str) -> Result<Requirement, String> {
    let set = |op: &str| -> Option<Result<(String, Vec<String>), String>> {
        let (key, rest) = term.split_once(op)?;
        let rest = rest.trim();
        let inner = match rest.strip_prefix('(').and_then(|r| r.strip_suffix(')')) {
            Some(inner) => inner,
            None => return Some(Err(format!("invalid selector {term:?}: expected (values)"))),
        };
        Some(Ok((
            key.trim().to_string(),
            inner.split(',').map(|v| v.trim().to_string()).collect(),
        )))
    };
    if let Some(r) = set(" notin ") {
        let (k, vs) = r?;
        return Ok(Requirement::NotIn(k, vs));
    }
    if let Some(r) = set(" in ") {
        let (k, vs) = r?;
        return Ok(Requirement::In(k, vs));
    }
    if let Some((k, v)) = term.split_once("!=") {
        return Ok(Requirement::NotEquals(k.trim().into(), v.trim().into()));
    }
    if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok(Requirement::Equals(k.trim().into(), v.trim().into()));
    }
    if let Some(k) = term.strip_prefix('!') {
        return Ok(Requirement::NotExists(k.trim().into()));
    }
    if term.contains([' ', '(', ')']) {
        return Err(format!("invalid selector {term:?}"));
    }
    Ok(Requirement::Exists(term.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors() {
        let labels = |k: &str| match k {
            "app" => Some("web"),
            "tier" => Some("front"),
            _ => None,
        };
        for (text, want) in [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app in (web, db)", true),
            ("app notin (web)", false),
            ("app,tier", true),
            ("!app", false),
            ("!missing", true),
            ("missing!=x", true),
            ("app=web,tier in (back)", false),
        ] {
            assert_eq!(
                Selector::parse(text).unwrap().matches(labels),
                want,
                "{text}"
            );
        }
        assert!(Selector::parse("app in web").is_err());
    }
}
