//! The ground truth of a generator: every record generated once, valid
//! events summed overall, by UTC day and by every dimension of the layout
//! (`zigzag_model::Truth::add_event`, the brute-force oracle), from the
//! generator's own description of each event, not from decoding it.

use crate::generator::{Generated, Generator};
use zigzag_model::{Config, ConfigError, KeyModel, Truth};

/// The truth under the shipped layout.
pub fn compute(gen: &Generator) -> Truth {
    compute_for(gen, &Config::default()).expect("the shipped layout is valid")
}

/// The truth under `config`'s measures and dimensions (its fields must be
/// the shipped ones: they are what the generator writes).
pub fn compute_for(gen: &Generator, config: &Config) -> Result<Truth, ConfigError> {
    let set = config.measure_set()?;
    let keys = KeyModel::new(config)?;
    let fields = config.typed_fields()?;
    if config.fields != Config::default().fields {
        return Err(ConfigError::Invalid(
            "loadgen generates the shipped click/impression events; this layout declares other fields".into(),
        ));
    }
    let mut t = Truth { seed: gen.config().seed, ..Default::default() };
    let mut buf = Vec::with_capacity(256);
    for shard in 0..gen.config().shards {
        for seq in 1..=gen.shard_len(shard) {
            t.records += 1;
            match gen.record(shard, seq, &mut buf) {
                Generated::Valid(ev) => {
                    t.late += u64::from(ev.late);
                    t.add_event(&set, &keys, &fields, ev.ts_ms, &ev.values());
                }
                Generated::Malformed(_) => t.malformed += 1,
            }
        }
    }
    Ok(t)
}
