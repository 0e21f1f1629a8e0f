//! `gather layout`: the layout recorded in the table, as a person reads
//! and edits it.

use super::stored_layout;
use anyhow::{bail, Result};
use clap::Subcommand;
use std::path::Path;
use zigzag_app::store::StoreArgs;

#[derive(Subcommand)]
pub(crate) enum LayoutCmd {
    /// Print the table's layout as the configuration file `ingest --config`
    /// reads: rollups, schema, dimensions, measures, projections, scatter,
    /// retention, and the [flush] cadences of --config (else the defaults:
    /// cadences are not recorded with the layout). Edit its [flush] to
    /// change cadences without retyping the layout
    Show,
}

pub(crate) async fn layout_cmd(store: &StoreArgs, config: Option<&Path>, cmd: LayoutCmd) -> Result<()> {
    match cmd {
        LayoutCmd::Show => show(store, config).await,
    }
}

async fn show(store: &StoreArgs, path: Option<&Path>) -> Result<()> {
    let table = store.open_aggregates().await?;
    let Some(stored) = stored_layout(store, table.as_ref()).await? else {
        bail!("the table records no layout: no ingest has written to it yet (ingest records its layout first)");
    };
    let given = zigzag_app::config::load(path, zigzag_app::config::Base::Full, &[])?;
    let whose = match path {
        Some(p) => format!("those of --config {}", p.display()),
        None => "the defaults (give --config FILE for a file's)".to_string(),
    };
    let text = stored.to_toml(&given.flush)?;
    print!(
        "# The layout recorded in the table (digest {}), as `ingest --config` reads it.\n# [flush] is not part of \
         the layout: its cadences are {whose}; edit them here.\n\n{text}",
        stored.digest()
    );
    Ok(())
}
