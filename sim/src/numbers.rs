//! Numbers as a server reads and writes them: integer arguments (Redis's
//! `string2ll`), floating-point arguments (`string2d`: sorted-set scores),
//! and doubles as C's `%.<p>g` prints them (a double reply is `%.17g` in
//! Redis 7.0, and so is a Lua number a script passes to a command; Lua's
//! own conversion to text is `%.14g`, which the scripts avoid).

/// An integer argument as Redis reads one (`string2ll`): decimal, an
/// optional `-`, no `+`, no leading zero, no spaces, within `i64`.
pub(crate) fn parse_int(bytes: &[u8]) -> Option<i64> {
    if bytes.is_empty() || bytes.len() > 20 {
        return None;
    }
    if bytes == b"0" {
        return Some(0);
    }
    let (negative, digits) = match bytes.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, bytes),
    };
    if !matches!(digits.first(), Some(b'1'..=b'9')) || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let magnitude = digits.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })?;
    if negative {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    }
}

/// A floating-point argument as Redis reads one (`string2d`, which is
/// `strtod` over the whole text): no leading space, no NaN, no overflow,
/// no underflow to zero; `inf`, `infinity`, a sign, a decimal point at
/// either end, an exponent and hexadecimal (`0x1.8p3`) all read. A
/// negative zero reads as zero, as a sorted set keeps it.
pub(crate) fn parse_float(bytes: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(bytes).ok()?;
    if text.is_empty() || text.starts_with(|c: char| c.is_ascii_whitespace() || c == '\x0b') {
        return None;
    }
    let (negative, unsigned) = match text.as_bytes()[0] {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let lower = unsigned.to_ascii_lowercase();
    let magnitude = if lower == "inf" || lower == "infinity" {
        f64::INFINITY
    } else if let Some(hex) = lower.strip_prefix("0x") {
        parse_hex_float(hex)?
    } else {
        parse_decimal(&lower)?
    };
    let value = if negative { -magnitude } else { magnitude };
    // `-0.0 + 0.0` is `0.0`: a sorted set keeps no negative zero.
    Some(value + 0.0)
}

/// A decimal number without its sign, finite and not an underflow to
/// zero (`strtod` flags both with `ERANGE`, which `string2d` refuses).
fn parse_decimal(text: &str) -> Option<f64> {
    let valid = text
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'+' | b'-'));
    let starts_well = text.starts_with(|c: char| c.is_ascii_digit() || c == '.');
    if !valid || !starts_well {
        // What Rust reads and `strtod` does not (`nan`, `infinity` are
        // handled before) never gets here; this keeps out the rest.
        return None;
    }
    let value: f64 = text.parse().ok()?;
    let mantissa = text.split('e').next().unwrap_or_default();
    let nonzero = mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b));
    (value.is_finite() && !(value == 0.0 && nonzero)).then_some(value)
}

/// A hexadecimal floating-point number after its `0x`: hex digits, an
/// optional point and more, an optional binary exponent `p[+-]digits`.
fn parse_hex_float(text: &str) -> Option<f64> {
    let (digits, exponent) = match text.split_once('p') {
        Some((digits, exponent)) => (digits, exponent.parse::<i32>().ok()?),
        None => (text, 0),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let all = || whole.bytes().chain(fraction.bytes());
    if all().count() == 0 || all().count() > 32 || !all().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mantissa = all().fold(0u128, |n, b| {
        n * 16 + u128::from(char::from(b).to_digit(16).unwrap_or(0))
    });
    let scale = exponent.checked_sub(4 * fraction.len() as i32)?;
    let value = mantissa as f64 * 2f64.powi(scale);
    let underflow = value == 0.0 && mantissa != 0;
    (value.is_finite() && !underflow).then_some(value)
}

/// `x` as C's `printf("%.<precision>g", x)` prints it: `precision`
/// significant digits, trailing zeros dropped, an exponent (`e+15`) when
/// it is below -4 or not below the precision.
pub(crate) fn format_g(x: f64, precision: usize) -> String {
    if x.is_nan() {
        return if x.is_sign_negative() { "-nan" } else { "nan" }.to_owned();
    }
    if x.is_infinite() {
        return if x < 0.0 { "-inf" } else { "inf" }.to_owned();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    let precision = precision.max(1);
    // The exponent after rounding to `precision` digits decides the form.
    let scientific = format!("{:.*e}", precision - 1, x);
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if exponent < -4 || exponent >= precision as i32 {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!(
            "{}e{sign}{:02}",
            without_trailing_zeros(mantissa),
            exponent.unsigned_abs()
        )
    } else {
        let decimals = (precision as i32 - 1 - exponent) as usize;
        without_trailing_zeros(&format!("{x:.decimals$}")).to_owned()
    }
}

/// `1.2500` → `1.25`, `3.000` → `3`; a text without a point as it is.
fn without_trailing_zeros(text: &str) -> &str {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_read_as_strtod_reads_them_whole() {
        for (text, value) in [
            ("1.5", 1.5),
            ("+.5", 0.5),
            ("1.", 1.0),
            ("1e3", 1000.0),
            ("-0", 0.0),
            ("INF", f64::INFINITY),
            ("-infinity", f64::NEG_INFINITY),
            ("0x10", 16.0),
            ("0x1.8p1", 3.0),
            ("1750000100123456", 1_750_000_100_123_456.0),
        ] {
            assert_eq!(parse_float(text.as_bytes()), Some(value), "{text}");
        }
        for text in [
            "", " 1", "1 ", "nan", "1e400", "1e-400", "0x", "abc", "1e", ".", "-+1",
        ] {
            assert_eq!(parse_float(text.as_bytes()), None, "{text:?}");
        }
        assert!(parse_float(b"-0").is_some_and(|z| z.is_sign_positive()));
    }

    #[test]
    fn doubles_print_as_printf_g_prints_them() {
        for (x, precision, text) in [
            (9_007_199_254_740_992.0, 14, "9.007199254741e+15"),
            (123_456_789_012_345.0, 14, "1.2345678901234e+14"),
            (1e15, 14, "1e+15"),
            (0.1, 14, "0.1"),
            (0.1, 17, "0.10000000000000001"),
            (-0.0, 14, "-0"),
            (1_750_000_100_123_456.0, 17, "1750000100123456"),
            (2_147_483_647.0, 14, "2147483647"),
            (1.5, 17, "1.5"),
            (0.0001, 14, "0.0001"),
            (0.00001, 14, "1e-05"),
            (f64::MAX, 17, "1.7976931348623157e+308"),
            (f64::NEG_INFINITY, 17, "-inf"),
        ] {
            assert_eq!(format_g(x, precision), text, "{x} at {precision}");
        }
    }
}
