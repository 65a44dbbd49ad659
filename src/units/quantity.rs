//! Kubernetes `resource.Quantity` parsing, comparison and formatting
//! (`100m`, `1.5Gi`, `2e3`, `500M`).

/// The suffix family a quantity was written in; results of arithmetic are
/// printed in the family of the left operand, as Kubernetes does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    BinarySI,
    DecimalSI,
    DecimalExponent,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quantity {
    pub value: f64,
    pub format: Format,
}

impl Quantity {
    /// Parses a quantity; `None` when `s` is not one.
    pub fn parse(s: &str) -> Option<Quantity> {
        let s = s.trim();
        if s.is_empty() {
            return None;
        }
        let bytes = s.as_bytes();
        let mut i = 0;
        if bytes[0] == b'+' || bytes[0] == b'-' {
            i += 1;
        }
        let num_start = i;
        let mut seen_dot = false;
        while i < bytes.len() && (bytes[i].is_ascii_digit() || (bytes[i] == b'.' && !seen_dot)) {
            seen_dot |= bytes[i] == b'.';
            i += 1;
        }
        let number = &s[..i];
        if i == num_start || &s[num_start..i] == "." {
            return None;
        }
        let mantissa: f64 = number.parse().ok()?;
        let suffix = &s[i..];
        let (mult, format) = match suffix {
            "" => (1.0, Format::DecimalSI),
            "Ki" => (1024f64, Format::BinarySI),
            "Mi" => (1024f64.powi(2), Format::BinarySI),
            "Gi" => (1024f64.powi(3), Format::BinarySI),
            "Ti" => (1024f64.powi(4), Format::BinarySI),
            "Pi" => (1024f64.powi(5), Format::BinarySI),
            "Ei" => (1024f64.powi(6), Format::BinarySI),
            "n" => (1e-9, Format::DecimalSI),
            "u" => (1e-6, Format::DecimalSI),
            "m" => (1e-3, Format::DecimalSI),
            "k" => (1e3, Format::DecimalSI),
            "M" => (1e6, Format::DecimalSI),
            "G" => (1e9, Format::DecimalSI),
            "T" => (1e12, Format::DecimalSI),
            "P" => (1e15, Format::DecimalSI),
            "E" => (1e18, Format::DecimalSI),
            exp if exp.starts_with(['e', 'E']) => {
                let e: i32 = exp[1..].parse().ok()?;
                (10f64.powi(e), Format::DecimalExponent)
            }
            _ => return None,
        };
        Some(Quantity {
            value: mantissa * mult,
            format,
        })
    }

    pub fn with_value(self, value: f64) -> Quantity {
        Quantity {
            value,
            format: self.format,
        }
    }
}

impl std::fmt::Display for Quantity {
    /// Canonical form: the largest suffix of the quantity's family that keeps an integer.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = self.value;
        if v == 0.0 {
            return write!(f, "0");
        }
        let sign = if v < 0.0 { "-" } else { "" };
        let a = v.abs();
        if self.format == Format::BinarySI && a.fract() == 0.0 {
            for (suffix, m) in [
                ("Ei", 6),
                ("Pi", 5),
                ("Ti", 4),
                ("Gi", 3),
                ("Mi", 2),
                ("Ki", 1),
            ] {
                let scale = 1024f64.powi(m);
                if a >= scale && (a / scale).fract() == 0.0 {
                    return write!(f, "{sign}{}{suffix}", (a / scale) as u64);
                }
            }
            return write!(f, "{sign}{}", a as u64);
        }
        for (suffix, scale) in [
            ("E", 1e18),
            ("P", 1e15),
            ("T", 1e12),
            ("G", 1e9),
            ("M", 1e6),
            ("k", 1e3),
            ("", 1.0),
            ("m", 1e-3),
            ("u", 1e-6),
            ("n", 1e-9),
        ] {
            let scaled = a / scale;
            if scaled >= 1.0 && (scaled - scaled.round()).abs() < 1e-9 {
                return write!(f, "{sign}{}{suffix}", scaled.round() as u64);
            }
        }
        write!(f, "{sign}{}n", (a * 1e9).ceil() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_compare_format() {
        for (text, value) in [
            ("1Gi", 1073741824.0),
            ("100m", 0.1),
            ("2e3", 2000.0),
            ("1.5", 1.5),
            ("500M", 5e8),
            ("-1k", -1000.0),
        ] {
            assert_eq!(Quantity::parse(text).unwrap().value, value, "{text}");
        }
        assert!(Quantity::parse("1Gi").unwrap().value > Quantity::parse("1000Mi").unwrap().value);
        for bad in ["", "abc", "1x", "Gi", "1.2.3", "1h"] {
            assert!(Quantity::parse(bad).is_none(), "{bad}");
        }
        let q = Quantity::parse("1Gi").unwrap();
        assert_eq!(q.with_value(q.value * 2.0).to_string(), "2Gi");
        assert_eq!(Quantity::parse("1500m").unwrap().to_string(), "1500m");
        assert_eq!(Quantity::parse("2000").unwrap().to_string(), "2k");
    }
}
