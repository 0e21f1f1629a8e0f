//! Traffic for any declared schema: each field's values drawn by its type
//! and its table in the field traffic file ([`traffic_file`]), written as
//! the schema frames records (nested JSON or CSV), with the malformed mix
//! the schema allows (`defects.rs`). Every valid record comes with the typed
//! values a correct decoder must read from it, from which the ground truth
//! is summed for every measure and every dimension.
//!
//! - `value_gen.rs`: one field's distribution, its typed value and its text;
//! - `render.rs`: the record's bytes;
//! - `defects.rs`: the malformed mix.

pub mod traffic_file;

mod defects;
mod numbers;
mod render;
mod value_gen;

#[cfg(test)]
mod tests;

use crate::traffic::{Drawn, DrawnEvent, GenConfig, Traffic};
use defects::Defects;
use rand::Rng;
use render::Shape;
use traffic_file::{TrafficError, TrafficFile};
use value_gen::FieldGen;
use zigzag_model::schema::{FieldSpec, FieldValue};
use zigzag_model::Config;

/// An instant before the accepted event times (2000 onwards): 1990-06-15.
const ANCIENT_MS: i64 = 645_408_000_000;

#[derive(Debug, Clone)]
pub struct SchemaGenerator {
    cfg: GenConfig,
    fields: Vec<FieldSpec>,
    gens: Vec<FieldGen>,
    time: usize,
    shape: Shape,
    defects: Defects,
}

impl SchemaGenerator {
    /// Traffic for `config`'s schema; `traffic` says how fields are drawn
    /// (every field it names must be declared).
    pub fn new(cfg: GenConfig, config: &Config, traffic: &TrafficFile) -> Result<SchemaGenerator, TrafficError> {
        if let Some(name) = traffic.field.keys().find(|n| config.field(n).is_none()) {
            return Err(TrafficError::Unknown(name.clone()));
        }
        let time = config
            .fields
            .iter()
            .position(|f| f.name == config.input.time)
            .ok_or_else(|| TrafficError::field(&config.input.time, "the time field is not declared"))?;
        let csv = config.input.format == zigzag_model::schema::Format::Csv;
        let typed = config.typed_fields()?;
        let gens = config
            .fields
            .iter()
            .enumerate()
            .map(|(i, f)| FieldGen::new(&typed, i, traffic.field.get(&f.name), i == time, csv))
            .collect::<Result<Vec<_>, _>>()?;
        let shape = Shape::new(config)?;
        let defects = Defects::new(&config.fields, time, &shape);
        Ok(SchemaGenerator { cfg, fields: config.fields.clone(), gens, time, shape, defects })
    }

    /// The defects its malformed records carry (each equally likely).
    pub fn defects_possible(&self) -> Vec<&'static str> {
        self.defects.names()
    }
}

impl Traffic for SchemaGenerator {
    fn config(&self) -> &GenConfig {
        &self.cfg
    }

    fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }

    fn draw(&self, shard: u32, seq: u64, out: &mut Vec<u8>) -> Drawn {
        let mut rng = self.cfg.rng(shard, seq);
        let (ts, late) = self.cfg.event_time(&mut rng, shard, seq);
        let csv = self.shape.is_csv();
        let mut values = vec![FieldValue::Absent; self.gens.len()];
        let mut parts = Vec::with_capacity(self.gens.len());
        for (i, g) in self.gens.iter().enumerate() {
            let (v, w) = g.draw(&mut rng, ts, csv, &values);
            values[i] = v;
            parts.push(w);
        }
        if rng.gen_bool(self.cfg.malformed_fraction.clamp(0.0, 1.0)) {
            let time = &self.gens[self.time];
            let broken =
                self.defects.apply(&mut rng, &self.fields, &mut parts, |rng| time.draw(rng, ANCIENT_MS, csv, &[]).1);
            self.shape.render(&parts, broken.repeat, out);
            if let Some(change) = broken.bytes {
                change(out);
            }
            return Drawn::Malformed(broken.name);
        }
        self.shape.render(&parts, None, out);
        let FieldValue::Time(ts_ms) = values[self.time] else { unreachable!("the time field draws instants") };
        Drawn::Valid(DrawnEvent { ts_ms, late, values })
    }

    fn file_extension(&self) -> &'static str {
        match self.shape.is_csv() {
            true => "csv",
            false => "jsonl",
        }
    }
}
