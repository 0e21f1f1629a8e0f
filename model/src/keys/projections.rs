//! The set of key models one layout writes (built from a configuration by
//! `config/assemble.rs`).

use super::KeyModel;
use crate::error::ConfigError;
use crate::projection::MAX_PROJECTIONS;
use crate::rollup::Rollup;

/// Every projection a layout writes, as key models: the base first (when
/// it has rollups), then the declared ones in order. A projection's index
/// here is its number in the aggregate (`u8`: at most 255 of them).
#[derive(Debug, Clone)]
pub struct Projections {
    /// The base, rollups or not: its dimensions are every dimension, the
    /// ones an event is aggregated by.
    all_dims: KeyModel,
    written: Vec<KeyModel>,
}

impl Projections {
    /// The written models, checked: at least one, at most
    /// [`MAX_PROJECTIONS`] (`all_dims` is the base's, written or not).
    pub(crate) fn from_models(all_dims: KeyModel, written: Vec<KeyModel>) -> Result<Projections, ConfigError> {
        if written.is_empty() {
            return Err(ConfigError::Invalid(
                "nothing is written: `rollups` is empty and no [[projection]] is declared".into(),
            ));
        }
        if written.len() > MAX_PROJECTIONS {
            return Err(ConfigError::Invalid(format!(
                "{} projections; at most {MAX_PROJECTIONS} (the base included)",
                written.len()
            )));
        }
        Ok(Projections { all_dims, written })
    }

    /// The key model of every dimension (what events are aggregated by),
    /// whether or not the base is written.
    pub fn all_dims(&self) -> &KeyModel {
        &self.all_dims
    }

    /// The projections written, base first.
    pub fn iter(&self) -> std::slice::Iter<'_, KeyModel> {
        self.written.iter()
    }

    pub fn len(&self) -> usize {
        self.written.len()
    }

    pub fn is_empty(&self) -> bool {
        self.written.is_empty()
    }

    pub fn get(&self, index: usize) -> Option<&KeyModel> {
        self.written.get(index)
    }

    /// A projection by name (`base` for the base, if written).
    pub fn by_name(&self, name: &str) -> Option<&KeyModel> {
        self.written.iter().find(|p| p.name() == name)
    }

    /// The finest rollup any projection writes: what events are aggregated
    /// at (every coarser one is a sum of it).
    pub fn finest(&self) -> Rollup {
        self.written
            .iter()
            .flat_map(|p| p.rollups())
            .min_by_key(|r| r.unit_ms())
            .expect("every written projection has a rollup")
    }

    /// The most scatter prefixes of any projection.
    pub fn max_prefixes(&self) -> u32 {
        self.written.iter().map(KeyModel::prefixes).max().unwrap_or(1)
    }
}

/// One projection alone (a key model read or written by itself).
impl From<KeyModel> for Projections {
    fn from(km: KeyModel) -> Projections {
        Projections { all_dims: km.clone(), written: vec![km] }
    }
}
