//! How a value is written in an expression — a measure's `where` and
//! gather's `--where` — when it holds spaces, commas, the word `and`, or
//! starts with an operator character: quoted with `"`, with `\"` and `\\`
//! the only escapes. Bare values end where each grammar says.

/// The quoted value at the start of `text` and the text after its closing
/// quote; `None` if `text` does not start with `"`.
pub fn quoted(text: &str) -> Option<Result<(String, &str), String>> {
    let inner = text.strip_prefix('"')?;
    let mut out = String::new();
    let mut chars = inner.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some(Ok((out, &inner[i + 1..]))),
            '\\' => match chars.next() {
                Some((_, e @ ('"' | '\\'))) => out.push(e),
                _ => return Some(Err(format!("only \\\" and \\\\ are escapes, at {:?}", &inner[i..]))),
            },
            c => out.push(c),
        }
    }
    Some(Err(format!("a quoted value does not end: {text:?}")))
}

#[cfg(test)]
mod tests {
    use super::quoted;

    #[test]
    fn a_quoted_value_ends_at_its_closing_quote_and_unescapes() {
        assert_eq!(quoted(r#""a, b" and x"#), Some(Ok(("a, b".to_string(), " and x"))));
        assert_eq!(quoted(r#""say \"hi\" \\ o""#), Some(Ok((r#"say "hi" \ o"#.to_string(), ""))));
        assert_eq!(quoted(r#""""#), Some(Ok((String::new(), ""))));
        assert_eq!(quoted("bare"), None);
        assert!(quoted(r#""open"#).unwrap().unwrap_err().contains("does not end"));
        assert!(quoted(r#""a\q""#).unwrap().unwrap_err().contains("escapes"));
        assert!(quoted(r#""a\"#).unwrap().unwrap_err().contains("escapes"));
    }
}
