//! A small subset of Kubernetes `resource.Quantity`: parsing the suffixed forms used in
//! configuration (`"500m"`, `"1.5Gi"`, `"2"`) and formatting the values edgecore reports.

/// Parses `s` and returns its value times `10^scale`, rounded up (as the kubelet rounds
/// `MilliValue`): `parse_scaled("500m", 3) == Some(500)`, `parse_scaled("1Ki", 0) == Some(1024)`.
/// Returns `None` for negative, malformed or overflowing input and for exponent forms (`1e3`).
pub fn parse_scaled(s: &str, scale: u32) -> Option<u64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let (binary_pow, decimal_exp): (u32, i32) = match suffix {
        "" => (0, 0),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        _ => return None,
    };
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    if int_part.is_empty() && frac_part.is_empty() {
        return None;
    }
    let digits = format!("{int_part}{frac_part}");
    let mantissa: u128 = digits.parse().ok()?;
    let exp = decimal_exp + i32::try_from(scale).ok()? - i32::try_from(frac_part.len()).ok()?;
    let pow10 = |e: i32| 10u128.checked_pow(e.unsigned_abs());
    let mut numerator = mantissa.checked_mul(1u128 << binary_pow)?;
    let mut denominator = 1u128;
    if exp >= 0 {
        numerator = numerator.checked_mul(pow10(exp)?)?;
    } else {
        denominator = pow10(exp)?;
    }
    u64::try_from(numerator.div_ceil(denominator)).ok()
}

/// Bytes as a binary-suffixed quantity, rounded down to whole KiB: `16777216` -> `"16384Ki"`
/// (the form the kubelet reports memory in).
pub fn format_ki(bytes: u64) -> String {
    format!("{}Ki", bytes / 1024)
}

/// CPU millicores as a quantity: `2000` -> `"2"`, `1500` -> `"1500m"`.
pub fn format_cpu(millis: u64) -> String {
    if millis.is_multiple_of(1000) {
        (millis / 1000).to_string()
    } else {
        format!("{millis}m")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_suffixes() {
        assert_eq!(parse_scaled("500m", 3), Some(500));
        assert_eq!(parse_scaled("2", 3), Some(2000));
        assert_eq!(parse_scaled("0.5", 3), Some(500));
        assert_eq!(parse_scaled("1Ki", 0), Some(1024));
        assert_eq!(parse_scaled("1.5Gi", 0), Some(3 << 29));
        assert_eq!(parse_scaled("1k", 0), Some(1000));
        assert_eq!(parse_scaled("1m", 0), Some(1), "rounded up");
        for bad in ["", "x", "-1", "1Qi", "1e3", "."] {
            assert_eq!(parse_scaled(bad, 0), None, "{bad:?}");
        }
    }

    #[test]
    fn formats() {
        assert_eq!(format_ki(16 << 20), "16384Ki");
        assert_eq!(format_cpu(4000), "4");
        assert_eq!(format_cpu(3500), "3500m");
    }
}
