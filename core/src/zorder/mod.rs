//! Z-order geometry: addresses, the bit layout, query boxes, BIGMIN/LITMAX
//! and range decomposition. Pure computation: no I/O, no schema types.

mod address;
mod costed;
mod decompose;
mod layout;
mod zbox;

pub use address::{bytes_for, words_for, ZAddress};
pub use costed::{costed_ranges, CostModel, CostedRange};
pub use decompose::{decompose, span_end_within_garbage, Decomposition, ZRange};
pub use layout::{Layout, LayoutError, MAX_DIM_BITS};
pub(crate) use zbox::Overlap;
pub use zbox::{dim_max, BoxError, ZBox};
