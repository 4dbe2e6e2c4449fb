//! Run-length lists such as `8192x4` or `2048,4096,8192x2`.
//!
//! The same syntax serves sequence lengths (`seqs`), per-layer KV-head counts
//! (`layer_kv_heads`) and layer kinds (`layer_types`, e.g. `slidingx5,full`).
//! A list stays run-length encoded in memory, so `8192x1000000` costs one
//! entry, not a million.

/// One run: `value` repeated `count` times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run<T> {
    pub value: T,
    pub count: u64,
}

/// Parses `a[xN],b[xN],…`. Whitespace around items is ignored; the repeat
/// marker is the last `x` (or `×`) followed only by digits, so words such as
/// `sliding` parse as items. `parse_item` returns an error message for a bad
/// item; the returned message names the item.
pub fn parse_runs<T>(text: &str, parse_item: impl Fn(&str) -> Result<T, String>) -> Result<Vec<Run<T>>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("is empty".into());
    }
    let mut runs = Vec::new();
    for raw in text.split(',') {
        let item = raw.trim();
        if item.is_empty() {
            return Err(format!("has an empty entry in `{text}`"));
        }
        let (value_text, count) = split_repeat(item)?;
        if count == 0 {
            return Err(format!("entry `{item}` repeats zero times"));
        }
        let value = parse_item(value_text.trim()).map_err(|m| format!("entry `{item}`: {m}"))?;
        runs.push(Run { value, count });
    }
    Ok(runs)
}

fn split_repeat(item: &str) -> Result<(&str, u64), String> {
    let lower = item.to_ascii_lowercase();
    let marker = lower.rfind(['x', '*']).map(|i| (i, 1)).or_else(|| item.rfind('×').map(|i| (i, '×'.len_utf8())));
    if let Some((at, width)) = marker {
        let tail = item[at + width..].trim();
        if !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit()) {
            let count = tail.parse::<u64>().map_err(|_| format!("repeat count `{tail}` is too large"))?;
            let head = item[..at].trim();
            if head.is_empty() {
                return Err(format!("entry `{item}` has a repeat count but no value"));
            }
            return Ok((head, count));
        }
    }
    Ok((item, 1))
}

/// Writes runs back in the canonical form: adjacent equal values merged,
/// `xN` only where N > 1.
pub fn format_runs<T: PartialEq>(runs: &[Run<T>], show: impl Fn(&T) -> String) -> String {
    let mut merged: Vec<(&T, u64)> = Vec::new();
    for run in runs {
        match merged.last_mut() {
            Some((value, count)) if **value == run.value => *count += run.count,
            _ => merged.push((&run.value, run.count)),
        }
    }
    merged.iter().map(|(v, n)| if *n == 1 { show(v) } else { format!("{}x{}", show(v), n) }).collect::<Vec<_>>().join(",")
}

/// Total number of entries the runs expand to.
pub fn total_count<T>(runs: &[Run<T>]) -> u128 {
    runs.iter().map(|r| r.count as u128).sum()
}

/// Parses an unsigned integer, accepting `_` or `,`-free digit groups like
/// `131_072`. Returns a message for the caller to prefix with the field name.
pub fn parse_u64(text: &str) -> Result<u64, String> {
    let cleaned: String = text.trim().chars().filter(|c| *c != '_').collect();
    if cleaned.is_empty() {
        return Err("is empty".into());
    }
    if !cleaned.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("`{}` is not a whole number", text.trim()));
    }
    cleaned.parse::<u64>().map_err(|_| format!("`{}` is larger than 18446744073709551615", text.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn num(s: &str) -> Result<u64, String> {
        parse_u64(s)
    }

    #[test]
    fn parses_the_issue_examples() {
        let r = parse_runs("8192x4", num).unwrap();
        assert_eq!(r, vec![Run { value: 8192, count: 4 }]);
        let r = parse_runs("2048,4096,8192x2", num).unwrap();
        assert_eq!(total_count(&r), 4);
        assert_eq!(format_runs(&r, |v| v.to_string()), "2048,4096,8192x2");
    }

    #[test]
    fn words_with_repeat_and_merge() {
        let r = parse_runs("slidingx5, full ,sliding*2", |s| Ok(s.to_string())).unwrap();
        assert_eq!(total_count(&r), 8);
        assert_eq!(format_runs(&r, |v| v.clone()), "slidingx5,full,slidingx2");
        let merged = parse_runs("8x2,8,4", num).unwrap();
        assert_eq!(format_runs(&merged, |v| v.to_string()), "8x3,4");
    }

    #[test]
    fn rejects_bad_lists_with_a_message() {
        assert!(parse_runs("", num).unwrap_err().contains("empty"));
        assert!(parse_runs("8192x0", num).unwrap_err().contains("zero"));
        assert!(parse_runs("8192,,4", num).unwrap_err().contains("empty entry"));
        assert!(parse_runs("abc", num).unwrap_err().contains("`abc`"));
        assert!(parse_runs("x4", num).unwrap_err().contains("no value"));
        assert!(parse_runs("-5", num).unwrap_err().contains("not a whole number"));
    }
}
