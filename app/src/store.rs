//! Where the aggregates are: the SQLite `--db` file, or the `--dynamodb`
//! table (feature `aws`); and the lease table of the workers that write
//! them (SQLite: the `checkpoints` table of the same file; DynamoDB:
//! `TABLE-checkpoints`, [`lease_table_name`]). Writers open both,
//! validating and creating the tables when allowed; readers open the
//! aggregates without a call.

use crate::layout_cache::LayoutCache;
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::sync::Arc;
use zigzag_core::table::SortedTable;
use zigzag_sqlite::SqliteTable;
#[cfg(feature = "aws")]
use {
    crate::aws::AwsArgs,
    zigzag_dynamodb::{client, ensure_table, Billing, DynamoTable},
};

#[derive(Debug, Clone, clap::Args)]
pub struct StoreArgs {
    /// SQLite database file: the aggregates, and the lease table
    /// (`checkpoints`) of the workers writing them
    #[arg(long, default_value = zigzag_sqlite::DEFAULT_PATH, global = true)]
    pub db: PathBuf,
    #[cfg(feature = "aws")]
    /// Use this DynamoDB table for the aggregates (and TABLE-checkpoints for
    /// the leases) instead of the SQLite --db. Credentials and region come
    /// from the AWS default chain; AWS_ENDPOINT_URL or
    /// AWS_ENDPOINT_URL_DYNAMODB points it at an emulator.
    #[arg(long, value_name = "TABLE", global = true)]
    pub dynamodb: Option<String>,
    #[cfg(feature = "aws")]
    /// DynamoDB calls in flight at once in batch updates
    #[arg(long, default_value_t = zigzag_dynamodb::DEFAULT_CONCURRENCY, global = true)]
    pub dynamodb_concurrency: usize,
    #[cfg(feature = "aws")]
    #[command(flatten)]
    pub aws: AwsArgs,
}

/// How a writer provisions tables it creates.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CreateArgs {
    /// Do not create missing tables (fail instead): in production the
    /// tables come from the deployment's template
    #[arg(long)]
    pub no_create_tables: bool,
    #[cfg(feature = "aws")]
    /// Create tables with provisioned capacity "READ,WRITE" (units) instead of on-demand
    #[arg(long, value_name = "READ,WRITE", value_parser = parse_provisioned)]
    pub provisioned: Option<Billing>,
}

#[cfg(feature = "aws")]
fn parse_provisioned(s: &str) -> Result<Billing, String> {
    let (r, w) = s.split_once(',').ok_or("expected READ,WRITE, e.g. 100,50")?;
    let unit =
        |v: &str| v.trim().parse::<i64>().ok().filter(|n| *n > 0).ok_or(format!("{v:?} is not a positive integer"));
    Ok(Billing::Provisioned { read_units: unit(r)?, write_units: unit(w)? })
}

/// The lease (checkpoint) table of a DynamoDB aggregate table.
pub fn lease_table_name(aggregates: &str) -> String {
    format!("{aggregates}-checkpoints")
}

/// The aggregate table and its lease table.
pub struct Stores {
    pub aggregates: Arc<dyn SortedTable>,
    pub leases: Arc<dyn SortedTable>,
    /// The same two as DynamoDB tables, for the capacity they consumed
    /// (None: SQLite).
    #[cfg(feature = "aws")]
    pub dynamo: Option<(DynamoTable, DynamoTable)>,
}

impl StoreArgs {
    /// Both tables, for a writer (`create`: how to create what is missing)
    /// or an operator command (None: everything must exist): on DynamoDB
    /// each is validated (key schema, ACTIVE) and created when allowed; a
    /// writer's SQLite file is created when missing.
    pub async fn open(&self, create: Option<&CreateArgs>) -> Result<Stores> {
        #[cfg(feature = "aws")]
        if let Some(name) = &self.dynamodb {
            return self.open_dynamodb(name, create).await;
        }
        if create.is_none() && !self.db.exists() {
            bail!("database {} does not exist (run ingest first, or pass --db)", self.db.display());
        }
        let open = |table: &str| {
            SqliteTable::open_table(&self.db, table).with_context(|| format!("opening {}", self.db.display()))
        };
        Ok(Stores {
            aggregates: Arc::new(open(zigzag_sqlite::DEFAULT_TABLE)?),
            leases: Arc::new(open("checkpoints")?),
            #[cfg(feature = "aws")]
            dynamo: None,
        })
    }

    #[cfg(feature = "aws")]
    async fn open_dynamodb(&self, name: &str, create: Option<&CreateArgs>) -> Result<Stores> {
        let client = client(&self.aws.options()).await;
        let (billing, may_create) = match create {
            Some(c) => (c.provisioned.unwrap_or_default(), !c.no_create_tables),
            None => (Billing::OnDemand, false),
        };
        let leases = lease_table_name(name);
        for table in [name, leases.as_str()] {
            ensure_table(&client, table, billing, may_create)
                .await
                .with_context(|| format!("opening the DynamoDB table {table}"))?;
        }
        let aggregates = DynamoTable::new(client.clone(), name).with_concurrency(self.dynamodb_concurrency);
        let leases = DynamoTable::new(client, leases);
        Ok(Stores {
            aggregates: Arc::new(aggregates.clone()),
            leases: Arc::new(leases.clone()),
            dynamo: Some((aggregates, leases)),
        })
    }

    /// The aggregate table alone, for a reader: on DynamoDB without a call
    /// (its first read shows whether the table is there; [`Self::explain`]
    /// says what is wrong); a SQLite file must exist.
    pub async fn open_aggregates(&self) -> Result<Arc<dyn SortedTable>> {
        #[cfg(feature = "aws")]
        if let Some(name) = &self.dynamodb {
            let client = client(&self.aws.options()).await;
            return Ok(Arc::new(DynamoTable::new(client, name).with_concurrency(self.dynamodb_concurrency)));
        }
        if !self.db.exists() {
            bail!("database {} does not exist (run ingest first, or pass --db)", self.db.display());
        }
        let table =
            SqliteTable::open(&self.db).with_context(|| format!("opening the database {}", self.db.display()))?;
        Ok(Arc::new(table))
    }

    /// The lease table alone, for a reader (which coarse items are
    /// complete: `zigzag_lease::owed`), opened as [`Self::open_aggregates`]
    /// opens the aggregates.
    pub async fn open_leases(&self) -> Result<Arc<dyn SortedTable>> {
        #[cfg(feature = "aws")]
        if let Some(name) = &self.dynamodb {
            let client = client(&self.aws.options()).await;
            return Ok(Arc::new(DynamoTable::new(client, lease_table_name(name))));
        }
        let table = SqliteTable::open_table(&self.db, "checkpoints")
            .with_context(|| format!("opening the lease table of {}", self.db.display()))?;
        Ok(Arc::new(table))
    }

    /// The layout cache entry of the aggregate table ([`LayoutCache`]),
    /// named by where the table is: the DynamoDB table's name, endpoint and
    /// region as given (flags, then the SDK's variables), or the SQLite
    /// file's full path.
    pub fn layout_cache(&self) -> Option<LayoutCache> {
        #[cfg(feature = "aws")]
        if let Some(name) = &self.dynamodb {
            let env = |vars: &[&str]| vars.iter().find_map(|v| std::env::var(v).ok()).unwrap_or_default();
            let endpoint = self
                .aws
                .endpoint_url
                .clone()
                .unwrap_or_else(|| env(&["AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL"]));
            let region = self.aws.region.clone().unwrap_or_else(|| env(&["AWS_REGION", "AWS_DEFAULT_REGION"]));
            return LayoutCache::for_table(&format!("dynamodb\n{endpoint}\n{region}\n{name}"));
        }
        let path = self.db.canonicalize().ok()?;
        LayoutCache::for_table(&format!("sqlite\n{}", path.display()))
    }

    /// `failed`, explained by a DescribeTable of the DynamoDB aggregate
    /// table when it can tell more (missing, not ACTIVE, another key
    /// schema): for a reader whose first read failed.
    pub async fn explain(&self, failed: anyhow::Error) -> anyhow::Error {
        #[cfg(feature = "aws")]
        if let Some(name) = &self.dynamodb {
            let client = client(&self.aws.options()).await;
            if let Err(why) = ensure_table(&client, name, Billing::OnDemand, false).await {
                return anyhow::Error::new(why).context(format!("opening the DynamoDB table {name}"));
            }
        }
        failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "aws")]
    #[test]
    fn provisioned_capacity_parses() {
        assert_eq!(parse_provisioned("100, 50"), Ok(Billing::Provisioned { read_units: 100, write_units: 50 }));
        assert!(parse_provisioned("100").is_err());
        assert!(parse_provisioned("0,5").is_err());
    }

    #[test]
    fn the_lease_table_is_named_after_the_aggregates() {
        assert_eq!(lease_table_name("clicks"), "clicks-checkpoints");
    }
}
