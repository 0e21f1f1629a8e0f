//! The ground truth of a generator: every record generated once, valid
//! events summed overall, by UTC day and by every dimension of the layout
//! (`zigzag_model::Truth::add_event`, the brute-force oracle), from the
//! generator's own description of each event, not from decoding it.

use crate::generator::Generator;
use crate::traffic::{Drawn, Traffic};
use zigzag_model::{Config, ConfigError, KeyModel, Truth};

/// The truth of the shipped generator under the shipped layout.
pub fn compute(gen: &Generator) -> Truth {
    compute_for(gen, &Config::default()).expect("the shipped layout is valid")
}

/// The truth under `config`'s measures and dimensions; its fields must be
/// the ones `gen` writes.
pub fn compute_for(gen: &dyn Traffic, config: &Config) -> Result<Truth, ConfigError> {
    compute_where(gen, config, |_, _, _| true)
}

/// [`compute_for`] counting only the valid events `accepted(shard, seq,
/// event ms)` keeps (the others are records, neither valid nor malformed:
/// e.g. those a seal refuses).
pub fn compute_where(
    gen: &dyn Traffic,
    config: &Config,
    accepted: impl Fn(u32, u64, i64) -> bool,
) -> Result<Truth, ConfigError> {
    let set = config.measure_set()?;
    let keys = KeyModel::new(config)?;
    let fields = config.typed_fields()?;
    if config.fields != gen.fields() {
        return Err(ConfigError::Invalid(
            "the layout declares other fields than the generator writes (a declared schema's traffic comes from \
             loadgen --config with that schema)"
                .into(),
        ));
    }
    let mut t = Truth { seed: gen.config().seed, ..Default::default() };
    let mut buf = Vec::with_capacity(256);
    for shard in 0..gen.config().shards {
        for seq in 1..=gen.shard_len(shard) {
            t.records += 1;
            match gen.draw(shard, seq, &mut buf) {
                Drawn::Valid(ev) if !accepted(shard, seq, ev.ts_ms) => {}
                Drawn::Valid(ev) => {
                    t.late += u64::from(ev.late);
                    t.add_event(&set, &keys, &fields, ev.ts_ms, &ev.values);
                }
                Drawn::Malformed(_) => t.malformed += 1,
            }
        }
    }
    Ok(t)
}
