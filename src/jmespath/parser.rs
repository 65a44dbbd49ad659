//! JMESPath parsing: expression text in, an [`Ast`] out. Done once per
//! expression at policy compile time; evaluation never re-parses.
//!
//! A Pratt parser following the JMESPath specification's binding powers.

use super::JmesError;
use crate::json_doc::Key;
use serde_json::Value;

/// A parsed JMESPath expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Ast {
    Identity,
    Current,
    Field(String),
    /// `a.b.c`: a chain of plain fields, walked in one loop (the most
    /// common expression in policies). Made from nested subexpressions.
    FieldPath(Vec<Key>),
    Subexpression(Box<Ast>, Box<Ast>),
    Index(i64),
    Slice(Option<i64>, Option<i64>, Option<i64>),
    /// `left[index-or-slice]`.
    IndexExpression(Box<Ast>, Box<Ast>),
    /// List projection: evaluate `right` on each element of `left`.
    Projection(Box<Ast>, Box<Ast>),
    /// Object projection (`*`): evaluate `right` on each value of `left`.
    ValueProjection(Box<Ast>, Box<Ast>),
    FilterProjection(Box<Ast>, Box<Ast>, Box<Ast>),
    Flatten(Box<Ast>),
    Literal(Value),
    MultiSelectList(Vec<Ast>),
    MultiSelectHash(Vec<(String, Ast)>),
    Comparator(Cmp, Box<Ast>, Box<Ast>),
    Or(Box<Ast>, Box<Ast>),
    And(Box<Ast>, Box<Ast>),
    Not(Box<Ast>),
    Pipe(Box<Ast>, Box<Ast>),
    Function(String, Vec<Ast>),
    ExpRef(Box<Ast>),
}

impl Ast {
    /// Whether evaluating this against the root reads nothing of the root
    /// but its field `name`: what a right-hand side, a projection or an
    /// expression reference reads is relative to a value it is given, not
    /// to the root. `@` or an index at the root reads the whole root.
    pub fn reads_only_root_field(&self, name: &str) -> bool {
        self.reads_only_under(&[name])
    }

    /// [`Ast::reads_only_root_field`] for a path: whether every read of the
    /// root is at or below `path` (`request.operation`), so that the value
    /// depends on the root only through the value there.
    pub fn reads_only_under(&self, path: &[&str]) -> bool {
        match self {
            Ast::Field(k) => path == [k.as_str()],
            Ast::FieldPath(keys) => {
                keys.len() >= path.len() && keys.iter().zip(path).all(|(k, p)| k.as_str() == *p)
            }
            Ast::Subexpression(l, _)
            | Ast::IndexExpression(l, _)
            | Ast::Projection(l, _)
            | Ast::ValueProjection(l, _)
            | Ast::FilterProjection(l, _, _)
            | Ast::Pipe(l, _)
            | Ast::Flatten(l)
            | Ast::Not(l) => l.reads_only_under(path),
            Ast::Comparator(_, l, r) | Ast::Or(l, r) | Ast::And(l, r) => {
                l.reads_only_under(path) && r.reads_only_under(path)
            }
            Ast::MultiSelectList(items) => items.iter().all(|a| a.reads_only_under(path)),
            Ast::MultiSelectHash(pairs) => pairs.iter().all(|(_, a)| a.reads_only_under(path)),
            Ast::Function(_, args) => args.iter().all(|a| a.reads_only_under(path)),
            Ast::Literal(_) | Ast::ExpRef(_) => true,
            Ast::Identity | Ast::Current | Ast::Index(_) | Ast::Slice(..) => false,
        }
    }

    /// Whether the expression calls a function anywhere. Some read more
    /// than their arguments (`time_now_utc()`, `random()`), so a value
    /// decided ahead of a request must call none.
    pub fn calls_function(&self) -> bool {
        match self {
            Ast::Function(..) => true,
            Ast::Subexpression(l, r)
            | Ast::IndexExpression(l, r)
            | Ast::Projection(l, r)
            | Ast::ValueProjection(l, r)
            | Ast::Comparator(_, l, r)
            | Ast::Or(l, r)
            | Ast::And(l, r)
            | Ast::Pipe(l, r) => l.calls_function() || r.calls_function(),
            Ast::FilterProjection(l, r, c) => {
                l.calls_function() || r.calls_function() || c.calls_function()
            }
            Ast::Flatten(a) | Ast::Not(a) | Ast::ExpRef(a) => a.calls_function(),
            Ast::MultiSelectList(items) => items.iter().any(Ast::calls_function),
            Ast::MultiSelectHash(pairs) => pairs.iter().any(|(_, a)| a.calls_function()),
            Ast::Identity
            | Ast::Current
            | Ast::Field(_)
            | Ast::FieldPath(_)
            | Ast::Index(_)
            | Ast::Slice(..)
            | Ast::Literal(_) => false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    QuotedIdent(String),
    Number(i64),
    Literal(Value),
    Dot,
    Star,
    Flatten,
    Filter,
    LBracket,
    RBracket,
    LBrace,
    RBrace,
    LParen,
    RParen,
    Comma,
    Colon,
    Pipe,
    Or,
    And,
    Not,
    Cmp(Cmp),
    At,
    Ampersand,
    Eof,
}

fn binding_power(tok: &Tok) -> u8 {
    match tok {
        Tok::Pipe => 1,
        Tok::Or => 2,
        Tok::And => 3,
        Tok::Cmp(_) => 5,
        Tok::Flatten => 9,
        Tok::Star => 20,
        Tok::Filter => 21,
        Tok::Dot => 40,
        Tok::Not => 45,
        Tok::LBrace => 50,
        Tok::LBracket => 55,
        Tok::LParen => 60,
        _ => 0,
    }
}

fn lex(src: &str) -> Result<Vec<Tok>, JmesError> {
    let chars: Vec<char> = src.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    let err = |msg: String| JmesError::Syntax(format!("{msg} in {src:?}"));
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' | '\n' | '\r' => i += 1,
            'a'..='z' | 'A'..='Z' | '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                toks.push(Tok::Ident(chars[start..i].iter().collect()));
            }
            '0'..='9' | '-' => {
                let start = i;
                i += 1;
                while i < chars.len() && chars[i].is_ascii_digit() {
                    i += 1;
                }
                let text: String = chars[start..i].iter().collect();
                let n = text
                    .parse::<i64>()
                    .map_err(|_| err(format!("invalid number {text:?}")))?;
                toks.push(Tok::Number(n));
            }
            '"' => {
                let (s, next) = read_delimited(&chars, i, '"')
                    .ok_or_else(|| err("unterminated quoted identifier".into()))?;
                let decoded: String = serde_json::from_str(&format!("\"{s}\""))
                    .map_err(|e| err(format!("invalid quoted identifier: {e}")))?;
                toks.push(Tok::QuotedIdent(decoded));
                i = next;
            }
            '\'' => {
                let (s, next) = read_delimited(&chars, i, '\'')
                    .ok_or_else(|| err("unterminated raw string".into()))?;
                toks.push(Tok::Literal(Value::String(s.replace("\\'", "'"))));
                i = next;
            }
            '`' => {
                let (s, next) = read_delimited(&chars, i, '`')
                    .ok_or_else(|| err("unterminated literal".into()))?;
                let text = s.replace("\\`", "`");
                let value = match serde_json::from_str::<Value>(text.trim()) {
                    Ok(v) => v,
                    // JMESPath's legacy form: an unquoted literal string.
                    Err(_) => Value::String(text.trim().to_string()),
                };
                toks.push(Tok::Literal(value));
                i = next;
            }
            '.' => {
                toks.push(Tok::Dot);
                i += 1;
            }
            '*' => {
                toks.push(Tok::Star);
                i += 1;
            }
            '[' => {
                if chars.get(i + 1) == Some(&']') {
                    toks.push(Tok::Flatten);
                    i += 2;
                } else if chars.get(i + 1) == Some(&'?') {
                    toks.push(Tok::Filter);
                    i += 2;
                } else {
                    toks.push(Tok::LBracket);
                    i += 1;
                }
            }
            ']' => {
                toks.push(Tok::RBracket);
                i += 1;
            }
            '{' => {
                toks.push(Tok::LBrace);
                i += 1;
            }
            '}' => {
                toks.push(Tok::RBrace);
                i += 1;
            }
            '(' => {
                toks.push(Tok::LParen);
                i += 1;
            }
            ')' => {
                toks.push(Tok::RParen);
                i += 1;
            }
            ',' => {
                toks.push(Tok::Comma);
                i += 1;
            }
            ':' => {
                toks.push(Tok::Colon);
                i += 1;
            }
            '@' => {
                toks.push(Tok::At);
                i += 1;
            }
            '|' => {
                if chars.get(i + 1) == Some(&'|') {
                    toks.push(Tok::Or);
                    i += 2;
                } else {
                    toks.push(Tok::Pipe);
                    i += 1;
                }
            }
            '&' => {
                if chars.get(i + 1) == Some(&'&') {
                    toks.push(Tok::And);
                    i += 2;
                } else {
                    toks.push(Tok::Ampersand);
                    i += 1;
                }
            }
            '!' => {
                if chars.get(i + 1) == Some(&'=') {
                    toks.push(Tok::Cmp(Cmp::Ne));
                    i += 2;
                } else {
                    toks.push(Tok::Not);
                    i += 1;
                }
            }
            '=' if chars.get(i + 1) == Some(&'=') => {
                toks.push(Tok::Cmp(Cmp::Eq));
                i += 2;
            }
            '<' | '>' => {
                let eq = chars.get(i + 1) == Some(&'=');
                let cmp = match (c, eq) {
                    ('<', true) => Cmp::Le,
                    ('<', false) => Cmp::Lt,
                    (_, true) => Cmp::Ge,
                    _ => Cmp::Gt,
                };
                toks.push(Tok::Cmp(cmp));
                i += if eq { 2 } else { 1 };
            }
            other => return Err(err(format!("unexpected character {other:?}"))),
        }
    }
    toks.push(Tok::Eof);
    Ok(toks)
}

/// Reads up to the closing `delim`, keeping backslash escapes verbatim.
fn read_delimited(chars: &[char], start: usize, delim: char) -> Option<(String, usize)> {
    let mut i = start + 1;
    let mut out = String::new();
    while i < chars.len() {
        match chars[i] {
            '\\' if i + 1 < chars.len() => {
                out.push('\\');
                out.push(chars[i + 1]);
                i += 2;
            }
            c if c == delim => return Some((out, i + 1)),
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    None
}

/// Parses a JMESPath expression.
pub fn parse(src: &str) -> Result<Ast, JmesError> {
    let toks = lex(src)?;
    let mut p = Parser { toks, pos: 0, src };
    let ast = p.expression(0)?;
    if p.peek() != &Tok::Eof {
        return Err(p.error("unexpected token after expression"));
    }
    Ok(ast)
}

/// The fields of `ast` when it is a plain field chain.
fn field_chain(ast: &Ast) -> Option<Vec<Key>> {
    match ast {
        Ast::Field(k) => Some(vec![Key::new(k)]),
        Ast::FieldPath(keys) => Some(keys.clone()),
        Ast::Subexpression(l, r) => {
            let mut keys = field_chain(l)?;
            keys.extend(field_chain(r)?);
            Some(keys)
        }
        _ => None,
    }
}

struct Parser<'s> {
    toks: Vec<Tok>,
    pos: usize,
    src: &'s str,
}

impl Parser<'_> {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos]
    }

    fn peek_at(&self, n: usize) -> &Tok {
        self.toks.get(self.pos + n).unwrap_or(&Tok::Eof)
    }

    fn advance(&mut self) -> Tok {
        let t = self.toks[self.pos].clone();
        if self.pos < self.toks.len() - 1 {
            self.pos += 1;
        }
        t
    }

    fn error(&self, msg: &str) -> JmesError {
        JmesError::Syntax(format!("{msg} (token {:?}) in {:?}", self.peek(), self.src))
    }

    fn expect(&mut self, tok: Tok) -> Result<(), JmesError> {
        if *self.peek() == tok {
            self.advance();
            Ok(())
        } else {
            Err(self.error(&format!("expected {tok:?}")))
        }
    }

    fn expression(&mut self, rbp: u8) -> Result<Ast, JmesError> {
        let tok = self.advance();
        let mut left = self.nud(tok)?;
        while rbp < binding_power(self.peek()) {
            let tok = self.advance();
            left = self.led(tok, left)?;
        }
        Ok(left)
    }

    fn nud(&mut self, tok: Tok) -> Result<Ast, JmesError> {
        Ok(match tok {
            Tok::Literal(v) => Ast::Literal(v),
            Tok::Ident(name) => Ast::Field(name),
            Tok::QuotedIdent(name) => {
                if *self.peek() == Tok::LParen {
                    return Err(self.error("quoted identifier cannot be a function name"));
                }
                Ast::Field(name)
            }
            Tok::Star => {
                let right = if *self.peek() == Tok::RBracket {
                    Ast::Identity
                } else {
                    self.projection_rhs(binding_power(&Tok::Star))?
                };
                Ast::ValueProjection(Box::new(Ast::Identity), Box::new(right))
            }
            Tok::Filter => self.led_filter(Ast::Identity)?,
            Tok::LBrace => self.multi_select_hash()?,
            Tok::LParen => {
                let e = self.expression(0)?;
                self.expect(Tok::RParen)?;
                e
            }
            Tok::Flatten => {
                let left = Ast::Flatten(Box::new(Ast::Identity));
                let right = self.projection_rhs(binding_power(&Tok::Flatten))?;
                Ast::Projection(Box::new(left), Box::new(right))
            }
            Tok::Not => Ast::Not(Box::new(self.expression(binding_power(&Tok::Not))?)),
            Tok::LBracket => match self.peek() {
                Tok::Number(_) | Tok::Colon => {
                    let right = self.index_expression()?;
                    self.project_if_slice(Ast::Identity, right)?
                }
                Tok::Star if *self.peek_at(1) == Tok::RBracket => {
                    self.advance();
                    self.advance();
                    let right = self.projection_rhs(binding_power(&Tok::Star))?;
                    Ast::Projection(Box::new(Ast::Identity), Box::new(right))
                }
                _ => self.multi_select_list()?,
            },
            Tok::At => Ast::Current,
            Tok::Ampersand => Ast::ExpRef(Box::new(self.expression(0)?)),
            other => {
                return Err(JmesError::Syntax(format!(
                    "unexpected token {other:?} in {:?}",
                    self.src
                )));
            }
        })
    }

    fn led(&mut self, tok: Tok, left: Ast) -> Result<Ast, JmesError> {
        Ok(match tok {
            Tok::Dot => {
                if *self.peek() == Tok::Star {
                    self.advance();
                    let right = self.projection_rhs(binding_power(&Tok::Dot))?;
                    Ast::ValueProjection(Box::new(left), Box::new(right))
                } else {
                    let right = self.dot_rhs(binding_power(&Tok::Dot))?;
                    let sub = Ast::Subexpression(Box::new(left), Box::new(right));
                    match field_chain(&sub) {
                        Some(keys) => Ast::FieldPath(keys),
                        None => sub,
                    }
                }
            }
            Tok::Pipe => Ast::Pipe(Box::new(left), Box::new(self.expression(1)?)),
            Tok::Or => Ast::Or(Box::new(left), Box::new(self.expression(2)?)),
            Tok::And => Ast::And(Box::new(left), Box::new(self.expression(3)?)),
            Tok::Cmp(c) => Ast::Comparator(c, Box::new(left), Box::new(self.expression(5)?)),
            Tok::LParen => {
                let Ast::Field(name) = left else {
                    return Err(self.error("function name must be an identifier"));
                };
                let mut args = Vec::new();
                while *self.peek() != Tok::RParen {
                    args.push(self.expression(0)?);
                    if *self.peek() == Tok::Comma {
                        self.advance();
                    } else if *self.peek() != Tok::RParen {
                        return Err(self.error("expected , or ) in function call"));
                    }
                }
                self.expect(Tok::RParen)?;
                Ast::Function(name, args)
            }
            Tok::Filter => self.led_filter(left)?,
            Tok::Flatten => {
                let left = Ast::Flatten(Box::new(left));
                let right = self.projection_rhs(binding_power(&Tok::Flatten))?;
                Ast::Projection(Box::new(left), Box::new(right))
            }
            Tok::LBracket => match self.peek() {
                Tok::Number(_) | Tok::Colon => {
                    let right = self.index_expression()?;
                    self.project_if_slice(left, right)?
                }
                _ => {
                    self.expect(Tok::Star)?;
                    self.expect(Tok::RBracket)?;
                    let right = self.projection_rhs(binding_power(&Tok::Star))?;
                    Ast::Projection(Box::new(left), Box::new(right))
                }
            },
            other => {
                return Err(JmesError::Syntax(format!(
                    "unexpected token {other:?} in {:?}",
                    self.src
                )));
            }
        })
    }

    fn led_filter(&mut self, left: Ast) -> Result<Ast, JmesError> {
        let condition = self.expression(0)?;
        self.expect(Tok::RBracket)?;
        let right = if *self.peek() == Tok::Flatten {
            Ast::Identity
        } else {
            self.projection_rhs(binding_power(&Tok::Filter))?
        };
        Ok(Ast::FilterProjection(
            Box::new(left),
            Box::new(right),
            Box::new(condition),
        ))
    }

    fn index_expression(&mut self) -> Result<Ast, JmesError> {
        if *self.peek() == Tok::Colon || *self.peek_at(1) == Tok::Colon {
            let mut parts = [None, None, None];
            let mut idx = 0;
            while *self.peek() != Tok::RBracket {
                match self.advance() {
                    Tok::Colon => {
                        idx += 1;
                        if idx > 2 {
                            return Err(self.error("too many colons in slice"));
                        }
                    }
                    Tok::Number(n) => parts[idx] = Some(n),
                    _ => return Err(self.error("invalid slice")),
                }
            }
            self.expect(Tok::RBracket)?;
            if parts[2] == Some(0) {
                return Err(self.error("slice step cannot be 0"));
            }
            Ok(Ast::Slice(parts[0], parts[1], parts[2]))
        } else {
            let Tok::Number(n) = self.advance() else {
                return Err(self.error("expected index"));
            };
            self.expect(Tok::RBracket)?;
            Ok(Ast::Index(n))
        }
    }

    fn project_if_slice(&mut self, left: Ast, right: Ast) -> Result<Ast, JmesError> {
        let is_slice = matches!(right, Ast::Slice(..));
        let index = Ast::IndexExpression(Box::new(left), Box::new(right));
        if is_slice {
            let rhs = self.projection_rhs(binding_power(&Tok::Star))?;
            Ok(Ast::Projection(Box::new(index), Box::new(rhs)))
        } else {
            Ok(index)
        }
    }

    fn projection_rhs(&mut self, bp: u8) -> Result<Ast, JmesError> {
        match self.peek() {
            t if binding_power(t) < 10 => Ok(Ast::Identity),
            Tok::LBracket | Tok::Filter => self.expression(bp),
            Tok::Dot => {
                self.advance();
                self.dot_rhs(bp)
            }
            _ => Err(self.error("invalid token after projection")),
        }
    }

    fn dot_rhs(&mut self, bp: u8) -> Result<Ast, JmesError> {
        match self.peek() {
            Tok::Ident(_) | Tok::QuotedIdent(_) | Tok::Star => self.expression(bp),
            Tok::LBracket => {
                self.advance();
                self.multi_select_list()
            }
            Tok::LBrace => {
                self.advance();
                self.multi_select_hash()
            }
            _ => Err(self.error("expected identifier, [ or { after dot")),
        }
    }

    fn multi_select_list(&mut self) -> Result<Ast, JmesError> {
        let mut items = Vec::new();
        loop {
            items.push(self.expression(0)?);
            match self.advance() {
                Tok::Comma => continue,
                Tok::RBracket => break,
                _ => return Err(self.error("expected , or ] in multi-select list")),
            }
        }
        Ok(Ast::MultiSelectList(items))
    }

    fn multi_select_hash(&mut self) -> Result<Ast, JmesError> {
        let mut pairs = Vec::new();
        loop {
            let key = match self.advance() {
                Tok::Ident(k) | Tok::QuotedIdent(k) => k,
                _ => return Err(self.error("expected key in multi-select hash")),
            };
            self.expect(Tok::Colon)?;
            let value = self.expression(0)?;
            pairs.push((key, value));
            // kyverno-compat: go-jmespath reads the next key when neither a
            // comma nor a brace follows a value (`{a: x b: y}`), and
            // Kyverno's policies rely on it.
            match self.peek() {
                Tok::Comma => {
                    self.advance();
                }
                Tok::RBrace => {
                    self.advance();
                    break;
                }
                _ => {}
            }
        }
        Ok(Ast::MultiSelectHash(pairs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_kyverno_expressions() {
        for src in [
            "request.object.metadata.name",
            "request.object.spec.[ephemeralContainers, initContainers, containers][].securityContext.capabilities.add[]",
            "request.object.spec.containers[?securityContext.privileged == `true`].name",
            "length(request.object.spec.containers[*].image)",
            "request.operation || 'BACKGROUND'",
            "items(@, 'key', 'value')[?starts_with(key, 'a')]",
            "a[0:2].b",
            "{a: b, c: d}",
            "sort_by(a, &b)",
            "\"quoted-key\".x",
            "!a && b",
            "a[-1]",
            "*.b",
        ] {
            parse(src).unwrap_or_else(|e| panic!("{src}: {e}"));
        }
    }

    #[test]
    fn rejects_bad_syntax() {
        for src in [
            "a.", "a[", "foo(", "a ==", "[?a", "{a}", "{a: b", "{a: b c}", "[a b]",
        ] {
            assert!(parse(src).is_err(), "{src} should fail");
        }
    }

    /// go-jmespath reads a multi-select hash's next key when no comma
    /// follows a value; Kyverno's CLI tests write such hashes.
    #[test]
    fn hash_keys_need_no_comma_between_them() {
        let data = serde_json::json!({"x": 1, "y": 2});
        for src in ["{a: x b: y}", "{a: x, b: y}", "{a: x\n b: y }"] {
            let hash = parse(src).unwrap_or_else(|e| panic!("{src}: {e}"));
            let Ast::MultiSelectHash(pairs) = &hash else {
                panic!("{src}: {hash:?}");
            };
            assert_eq!(pairs.len(), 2, "{src}");
            let value = crate::jmespath::Expression::parse(src)
                .unwrap()
                .resolve(&data)
                .unwrap()
                .into_owned();
            assert_eq!(value, serde_json::json!({"a": 1, "b": 2}), "{src}");
        }
    }
}
