//! Loads a CSV file (header = field names) into the two indexes `zbench`
//! compares: the Z-index (sort key = Z-address ++ row number) and a
//! single-attribute index (sort key = one field's encoding ++ row number),
//! both in memory, both keeping every CSV field as an attribute.

use super::ZbenchError;
use rust_decimal::Decimal;
use std::collections::HashMap;
use std::io::Read;
use std::str::FromStr;
use zigzag_core::query::Expected;
use zigzag_core::schema::{Encoding, Schema, Value};
use zigzag_core::table::{AttrValue, Item, MemoryTable, SortedTable};

/// Partition key of the single partition (or the prefix of per-bin ones).
pub const PARTITION: &str = "zbench";

pub struct Dataset {
    pub z_index: MemoryTable,
    pub single_index: MemoryTable,
    pub rows: usize,
    /// What each Z-index partition holds: what ingest's statistics tell
    /// `gather` of a partition, here counted exactly.
    pub partitions: HashMap<String, Expected>,
}

/// Partition key for a row or query bin.
pub fn partition_key(schema: &Schema, bin_start: Option<i64>) -> String {
    match (schema.time_bin(), bin_start) {
        (Some((_, bin)), Some(start)) => format!("{PARTITION}#{}", bin.label(start)),
        _ => PARTITION.to_string(),
    }
}

/// The stored attribute for a field: numbers (and timestamps, as epoch ms)
/// are N, the rest S, so filters compare the way DynamoDB would.
pub fn attribute(schema: &Schema, field: &str, text: &str) -> AttrValue {
    let dim = schema.index_of(field).map(|d| &schema.dims()[d]);
    match dim.map(|d| (&d.encoding, d.parse(text))) {
        Some((Encoding::Timestamp(_), Ok(Value::Time(ms)))) => AttrValue::N(Decimal::from(ms)),
        Some((Encoding::FixedStr { .. } | Encoding::Hash | Encoding::Enum { .. }, _)) => AttrValue::S(text.to_string()),
        _ => number(text).map(AttrValue::N).unwrap_or_else(|| AttrValue::S(text.to_string())),
    }
}

fn number(text: &str) -> Option<Decimal> {
    let t = text.trim();
    Decimal::from_str(t).or_else(|_| Decimal::from_scientific(t)).ok()
}

pub async fn load(schema: &Schema, order_by: usize, input: impl Read) -> Result<Dataset, ZbenchError> {
    let mut reader = csv::ReaderBuilder::new().has_headers(true).from_reader(input);
    let header: Vec<String> = reader
        .headers()
        .map_err(|e| ZbenchError::Csv { line: 1, why: e.to_string() })?
        .iter()
        .map(str::to_string)
        .collect();
    let mut columns = Vec::with_capacity(schema.dims().len());
    for d in schema.dims() {
        let col = header.iter().position(|h| h == &d.name).ok_or_else(|| ZbenchError::Csv {
            line: 1,
            why: format!("the header has no column {:?} (schema dimension); columns: {}", d.name, header.join(", ")),
        })?;
        columns.push(col);
    }
    let order_dim = &schema.dims()[order_by];
    let order_bytes = order_dim.bits.div_ceil(8) as usize;
    let bits = schema.layout().total_bits();

    let (mut z_items, mut single_items) = (Vec::new(), Vec::new());
    let mut rows = 0usize;
    let mut record = csv::StringRecord::new();
    loop {
        let line = reader.position().line() + 1;
        match reader.read_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => return Err(ZbenchError::Csv { line, why: e.to_string() }),
        }
        let line = record.position().map_or(line, |p| p.line());
        let row = u32::try_from(rows).map_err(|_| ZbenchError::Csv { line, why: "more than 2^32 rows".into() })?;
        let csv_err = |why: String| ZbenchError::Csv { line, why };
        let mut values = Vec::with_capacity(columns.len());
        for (d, &col) in schema.dims().iter().zip(&columns) {
            values.push(d.parse(&record[col]).map_err(|e| csv_err(e.to_string()))?);
        }
        let z = schema.encode_point(&values).map_err(|e| csv_err(e.to_string()))?;
        let bin_start = schema.time_bin().map(|(td, bin)| match values[td] {
            Value::Time(t) => bin.start_of(t),
            _ => unreachable!("binned dimension parses to a timestamp"),
        });
        let pk = partition_key(schema, bin_start);
        let mut sk = z.to_bytes(bits);
        sk.extend_from_slice(&row.to_be_bytes());
        let mut item = Item::new(pk.clone(), sk);
        for (name, text) in header.iter().zip(record.iter()) {
            item.attrs.insert(name.clone(), attribute(schema, name, text));
        }
        let ord = order_dim.encode(&values[order_by]).map_err(|e| csv_err(e.to_string()))?;
        let mut osk = ord.to_be_bytes()[16 - order_bytes..].to_vec();
        osk.extend_from_slice(&row.to_be_bytes());
        single_items.push(Item { pk, sk: osk, attrs: item.attrs.clone() });
        z_items.push(item);
        rows += 1;
    }
    let mut sizes: HashMap<String, (f64, f64)> = HashMap::new();
    for item in &z_items {
        let s = sizes.entry(item.pk.clone()).or_default();
        s.0 += 1.0;
        s.1 += item.size() as f64;
    }
    let partitions =
        sizes.into_iter().map(|(pk, (items, bytes))| (pk, Expected { items, item_bytes: bytes / items })).collect();
    let z_index = MemoryTable::new();
    let single_index = MemoryTable::new();
    z_index.put_batch(z_items).await.map_err(|e| ZbenchError::Internal(e.to_string()))?;
    single_index.put_batch(single_items).await.map_err(|e| ZbenchError::Internal(e.to_string()))?;
    Ok(Dataset { z_index, single_index, rows, partitions })
}
