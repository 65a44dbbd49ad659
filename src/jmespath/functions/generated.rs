//! Kyverno's functions whose answer is made rather than read:
//! `image_normalize(image)` (a reference with its registry and tag, as
//! Kyverno's image utilities write it) and `random(pattern)` (a random
//! string the regular expression matches, as goregen generates one).

use super::{Args, R, want_str};
use crate::image_reference::ImageInfo;
use crate::jmespath::JmesError;
use regex_syntax::hir::{Class, Hir, HirKind};
use serde_json::Value;

/// goregen's bound on an unbounded repetition (`*`, `+`, `{n,}`).
const MAX_UNBOUNDED_REPEAT: u32 = 10;

pub(super) fn image_normalize(args: &Args) -> R {
    args.check(1)?;
    ImageInfo::parse(want_str(args.name, args.v(0))?)
        .map(|info| Value::String(info.reference()))
        .map_err(|e| JmesError::Runtime(format!("JMESPath function 'image_normalize': {e}")))
}

pub(super) fn random(args: &Args) -> R {
    args.check(1)?;
    let pattern = want_str(args.name, args.v(0))?;
    if pattern.is_empty() {
        return Err(JmesError::Runtime("no pattern provided".into()));
    }
    let hir = regex_syntax::parse(pattern)
        .map_err(|e| JmesError::Runtime(format!("error parsing regexp: {e}")))?;
    let mut out = String::new();
    generate(&hir, &mut Rng::seeded(), &mut out);
    Ok(Value::String(out))
}

/// A small generator (xorshift64*) seeded from the process's hash keys and
/// the clock: `random` needs variety, not cryptographic strength.
struct Rng(u64);

impl Rng {
    fn seeded() -> Rng {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        Rng(h.finish() | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1)
    }
}

fn generate(hir: &Hir, rng: &mut Rng, out: &mut String) {
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => {}
        HirKind::Literal(lit) => out.push_str(&String::from_utf8_lossy(&lit.0)),
        HirKind::Class(Class::Unicode(class)) => {
            let total: u64 = class
                .iter()
                .map(|r| u64::from(r.end() as u32 - r.start() as u32) + 1)
                .sum();
            let mut pick = rng.below(total);
            for r in class.iter() {
                let size = u64::from(r.end() as u32 - r.start() as u32) + 1;
                if pick < size {
                    if let Some(c) = char::from_u32(r.start() as u32 + pick as u32) {
                        out.push(c);
                    }
                    return;
                }
                pick -= size;
            }
        }
        HirKind::Class(Class::Bytes(class)) => {
            let total: u64 = class
                .iter()
                .map(|r| u64::from(r.end() - r.start()) + 1)
                .sum();
            let mut pick = rng.below(total);
            for r in class.iter() {
                let size = u64::from(r.end() - r.start()) + 1;
                if pick < size {
                    out.push(char::from(r.start() + pick as u8));
                    return;
                }
                pick -= size;
            }
        }
        HirKind::Repetition(rep) => {
            let max = rep.max.unwrap_or(rep.min + MAX_UNBOUNDED_REPEAT);
            let times = rep.min + rng.below(u64::from(max - rep.min) + 1) as u32;
            for _ in 0..times {
                generate(&rep.sub, rng, out);
            }
        }
        HirKind::Capture(cap) => generate(&cap.sub, rng, out),
        HirKind::Concat(parts) => parts.iter().for_each(|p| generate(p, rng, out)),
        HirKind::Alternation(choices) => {
            let i = rng.below(choices.len() as u64) as usize;
            generate(&choices[i], rng, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::jmespath::Expression;
    use serde_json::{Value, json};

    fn call(expr: &str) -> Result<Value, String> {
        Expression::parse(expr)
            .unwrap()
            .resolve(&json!({}))
            .map(|v| v.into_owned())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn random_strings_match_their_pattern() {
        for pattern in [
            "[a-z]{8}",
            "[0-9a-f]{6}-(dev|prod)",
            "x+y*z?",
            "^[A-Z][a-z0-9_]{3,10}$",
            "\\d{4}",
        ] {
            let re = regex::Regex::new(&format!("^(?:{pattern})$")).unwrap();
            let mut seen = std::collections::HashSet::new();
            for _ in 0..20 {
                let Value::String(s) = call(&format!("random('{pattern}')")).unwrap() else {
                    panic!("not a string");
                };
                assert!(re.is_match(&s), "{pattern}: {s}");
                seen.insert(s);
            }
            assert!(seen.len() > 1, "{pattern}: always {seen:?}");
        }
        assert!(
            call("random('')")
                .unwrap_err()
                .contains("no pattern provided")
        );
        assert!(
            call("random('(')")
                .unwrap_err()
                .contains("error parsing regexp")
        );
    }

    #[test]
    fn image_normalize_as_kyverno() {
        assert_eq!(
            call("image_normalize('nginx')"),
            Ok(json!("docker.io/nginx:latest"))
        );
        let e = call("image_normalize('Nginx')").unwrap_err();
        assert!(
            e.contains("JMESPath function 'image_normalize': bad image: docker.io/Nginx"),
            "{e}"
        );
    }
}
