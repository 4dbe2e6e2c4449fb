//! Exact number formatting and parsing: binary units to two decimals, digit
//! grouping, and decimal fractions read as exact rationals.

/// The binary units the field guide uses: KiB = 2^10 bytes, GiB = 2^30 bytes.
const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];

/// Formats `bits / (8 × divisor)` bytes exactly; `divisor` lets callers
/// print a mean (per sequence) without rounding twice.
pub fn binary_from_bits(bits: u128, divisor: u128) -> String {
    match divisor.max(1).checked_mul(8) {
        Some(den) => binary_ratio(bits, den),
        None => binary_ratio(bits / 8, divisor),
    }
}

/// Formats a byte count in a binary unit to two decimals.
pub fn binary(bytes: u128) -> String {
    binary_ratio(bytes, 1)
}

/// Formats `numerator / denominator` bytes in the largest binary unit whose
/// value is at least 1, rounded half-up to two decimals, without a float.
fn binary_ratio(numerator: u128, denominator: u128) -> String {
    let whole_bytes = numerator / denominator;
    let mut unit = 0usize;
    while unit + 1 < UNITS.len() && whole_bytes >> (10 * (unit as u32 + 1)) > 0 {
        unit += 1;
    }
    let shift = 10 * unit as u32;
    // value = numerator / (denominator · 2^shift). When that denominator does
    // not fit, shift the numerator instead; the lost low bits are far below
    // the second decimal of a unit that large.
    let (num, den) = match denominator.checked_mul(1u128 << shift) {
        Some(d) => (numerator, d),
        None => (numerator >> shift, denominator),
    };
    format!("{} {}", decimal_ratio(num, den), UNITS[unit])
}

/// `a / b` rounded half-up, without the `a + b/2` that can overflow.
fn round_div(a: u128, b: u128) -> u128 {
    let rest = a % b;
    a / b + u128::from(rest >= b - rest)
}

/// `4294967296` → `4,294,967,296`.
pub fn group_digits(n: u128) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// `numerator / denominator` as a decimal with two places, rounded half-up:
/// `decimal_ratio(10, 3)` → `3.33`.
pub fn decimal_ratio(numerator: u128, denominator: u128) -> String {
    let den = denominator.max(1);
    let whole = numerator / den;
    let rest = numerator % den;
    let hundredths = match rest.checked_mul(100) {
        Some(r) => round_div(r, den),
        None => rest / (den / 100),
    };
    let total = whole * 100 + hundredths;
    format!("{}.{:02}", group_digits(total / 100), total % 100)
}

/// Whole bytes for a bit count, rounded up (only int4 with an odd element
/// count can leave half a byte).
pub fn bits_to_bytes(bits: u128) -> u128 {
    bits.div_ceil(8)
}

/// An exact non-negative decimal, `numerator / 10^scale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Decimal {
    pub numerator: u128,
    pub scale: u32,
}

impl Decimal {
    pub fn denominator(self) -> u128 {
        10u128.pow(self.scale)
    }

    /// `floor(self × factor)`, exactly, or `None` on overflow.
    pub fn times_floor(self, factor: u128) -> Option<u128> {
        Some(self.numerator.checked_mul(factor)? / self.denominator())
    }

    /// Whether the value is strictly below one.
    pub fn below_one(self) -> bool {
        self.numerator < self.denominator()
    }
}

/// Parses `80`, `79.6`, `0.1`, `1e9`-free decimals exactly (at most 9
/// fraction digits, `_` allowed as a separator). Returns a message for the
/// caller to prefix with the field name.
pub fn parse_decimal(text: &str) -> Result<Decimal, String> {
    let t: String = text.trim().chars().filter(|c| *c != '_').collect();
    if t.is_empty() {
        return Err("is empty".into());
    }
    let (int_part, frac_part) = match t.split_once('.') {
        Some((a, b)) => (a, b),
        None => (t.as_str(), ""),
    };
    let digits_ok = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (int_part.is_empty() && frac_part.is_empty()) || !digits_ok(int_part) || !digits_ok(frac_part) {
        return Err(format!("`{}` is not a non-negative decimal number", text.trim()));
    }
    if frac_part.len() > 9 {
        return Err(format!("`{}` has more than 9 decimal places", text.trim()));
    }
    let joined = format!("{int_part}{frac_part}");
    let joined = joined.trim_start_matches('0');
    let numerator = if joined.is_empty() { 0 } else { joined.parse::<u128>().map_err(|_| format!("`{}` is too large", text.trim()))? };
    if numerator > u64::MAX as u128 {
        return Err(format!("`{}` is too large", text.trim()));
    }
    Ok(Decimal { numerator, scale: frac_part.len() as u32 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_figures() {
        assert_eq!(binary(4_294_967_296), "4.00 GiB");
        assert_eq!(binary(131_072), "128.00 KiB");
        assert_eq!(binary(1_073_741_824), "1.00 GiB");
        assert_eq!(group_digits(4_294_967_296), "4,294,967,296");
    }

    #[test]
    fn small_and_rounding() {
        assert_eq!(binary(0), "0.00 B");
        assert_eq!(binary(1023), "1,023.00 B");
        assert_eq!(binary(1024), "1.00 KiB");
        // 1.005 KiB is 1029.12 bytes; 1029 B = 1.00488 KiB → 1.00, 1030 B = 1.00586 → 1.01.
        assert_eq!(binary(1029), "1.00 KiB");
        assert_eq!(binary(1030), "1.01 KiB");
        assert_eq!(binary(u128::MAX / 8), "36,893,488,147,419,103,232.00 EiB");
        // A mean: 3 GiB over 2 sequences.
        assert_eq!(binary_from_bits(3 * (8u128 << 30), 2), "1.50 GiB");
    }

    #[test]
    fn decimals_are_exact() {
        let d = parse_decimal("79.6").unwrap();
        assert_eq!(d, Decimal { numerator: 796, scale: 1 });
        assert_eq!(d.times_floor(1 << 30), Some(796 * (1u128 << 30) / 10));
        assert_eq!(parse_decimal("0.10").unwrap().times_floor(1000), Some(100));
        assert!(parse_decimal("-1").is_err());
        assert!(parse_decimal("1e9").is_err());
        assert!(parse_decimal(".").is_err());
        assert_eq!(parse_decimal(".5").unwrap(), Decimal { numerator: 5, scale: 1 });
    }
}
