//! A CSV record (one line, RFC 4180 quoting, `csv-core`'s parser) split
//! into the declared columns' cells, each routed to its field's slot.

use super::DecodeError;
use std::borrow::Cow;
use zigzag_model::schema::FieldSpec;

#[derive(Debug, Clone)]
pub struct Columns {
    names: Vec<String>,
    /// Per column, the field it feeds (None: not declared, ignored).
    slot: Vec<Option<usize>>,
}

impl Columns {
    pub fn new(names: &[String], fields: &[FieldSpec]) -> Columns {
        let slot = names.iter().map(|c| fields.iter().position(|f| f.column_name() == c)).collect();
        Columns { names: names.to_vec(), slot }
    }

    /// Fills `out` (one per field) with each declared column's cell.
    pub fn split<'a>(&self, line: &'a str, out: &mut [Option<Cow<'a, str>>]) -> Result<(), DecodeError> {
        let line = line.strip_suffix('\n').unwrap_or(line);
        let line = line.strip_suffix('\r').unwrap_or(line);
        let cells = cells(line)?;
        if cells.len() != self.names.len() {
            return Err(DecodeError::Columns { got: cells.len(), expected: self.names.len() });
        }
        if cells.iter().zip(&self.names).all(|(c, n)| *c == **n) {
            return Err(DecodeError::Header);
        }
        for (cell, slot) in cells.into_iter().zip(&self.slot) {
            if let Some(i) = slot {
                out[*i] = Some(cell);
            }
        }
        Ok(())
    }
}

thread_local! {
    /// The parser of quoted lines, one per thread, reset for each line:
    /// building one makes its transition table, which was four fifths of
    /// decoding a quoted line (and a copy is no shortcut: csv-core's `Clone`
    /// of a built reader loses part of the table, so it misreads lines).
    static QUOTED: std::cell::RefCell<csv_core::Reader> = std::cell::RefCell::new(csv_core::Reader::new());
}

/// The cells of one line: borrowed when the line has no quotes (then
/// RFC 4180 cells are exactly the text between commas), unescaped by
/// `csv-core` otherwise.
fn cells(line: &str) -> Result<Vec<Cow<'_, str>>, DecodeError> {
    if !line.contains('"') {
        return Ok(line.split(',').map(Cow::Borrowed).collect());
    }
    QUOTED.with_borrow_mut(|reader| {
        reader.reset();
        unquoted(line, reader)
    })
}

fn unquoted(line: &str, reader: &mut csv_core::Reader) -> Result<Vec<Cow<'static, str>>, DecodeError> {
    // Unescaped cells are never longer than the line, and there is at most
    // one cell per byte plus one: neither buffer can fill.
    let mut output = vec![0u8; line.len()];
    let mut ends = vec![0usize; line.len() + 1];
    let (mut input, mut wrote_all, mut ended_all) = (line.as_bytes(), 0, 0);
    loop {
        let (result, read, wrote, ended) = reader.read_record(input, &mut output[wrote_all..], &mut ends[ended_all..]);
        input = &input[read..];
        wrote_all += wrote;
        ended_all += ended;
        match result {
            csv_core::ReadRecordResult::Record | csv_core::ReadRecordResult::End => break,
            // The line is consumed: an empty input ends the record.
            csv_core::ReadRecordResult::InputEmpty => {}
            csv_core::ReadRecordResult::OutputFull | csv_core::ReadRecordResult::OutputEndsFull => {
                return Err(DecodeError::Csv("a record larger than its line".into()))
            }
        }
    }
    let text = std::str::from_utf8(&output[..wrote_all]).map_err(|_| DecodeError::Csv("a cell is not UTF-8".into()))?;
    let mut start = 0;
    let mut out = Vec::with_capacity(ended_all);
    for &end in &ends[..ended_all] {
        let cell = text.get(start..end).ok_or_else(|| DecodeError::Csv("a cell splits a character".into()))?;
        out.push(Cow::Owned(cell.to_string()));
        start = end;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(line: &str) -> Vec<String> {
        cells(line).unwrap().into_iter().map(|c| c.into_owned()).collect()
    }

    #[test]
    fn quoting_and_borrowing() {
        assert_eq!(split("a,b,,d"), ["a", "b", "", "d"]);
        assert_eq!(split(r#""x,y","say ""hi""",z"#), ["x,y", r#"say "hi""#, "z"]);
        assert_eq!(split(""), [""]);
        assert!(matches!(cells("a,b").unwrap()[1], Cow::Borrowed("b")));
        let long = "v".repeat(10_000);
        assert_eq!(split(&format!("{long},{long}")), [long.clone(), long]);
        let many = vec!["1"; 100].join(",");
        assert_eq!(split(&many).len(), 100);
    }

    #[test]
    fn quoted_lines_in_a_row_each_start_afresh() {
        let lines = [r#"a,"x,y",1"#, r#""b""c",d"#, r#""unterminated,e"#, r#"f,"g""#];
        let expected: [&[&str]; 4] = [&["a", "x,y", "1"], &[r#"b"c"#, "d"], &["unterminated,e"], &["f", "g"]];
        for _ in 0..2 {
            for (line, want) in lines.iter().zip(expected) {
                assert_eq!(split(line), want, "{line}");
            }
        }
    }
}
