//! How the tables print numbers: a leaf module every study's table uses,
//! so no study depends on the report module for it (the report depends on
//! the studies, never the other way round).

/// Milliseconds as the tables print them: `137 ms`, `42.5 ms`.
pub fn format_ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0} ms")
    } else {
        format!("{v:.1} ms")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn whole_milliseconds_from_a_hundred() {
        assert_eq!(super::format_ms(137.4), "137 ms");
        assert_eq!(super::format_ms(42.46), "42.5 ms");
    }
}
