//! Command-line options that select DynamoDB, shared by `ingest`, `gather`
//! and `loadgen` (flattened into their clap parsers), and opening the two
//! tables they name.

use crate::{client, ensure_table, AdminError, Billing, DynamoTable};
use std::time::Duration;
use zigzag_aws::AwsOptions;

#[derive(Debug, Clone, clap::Args)]
pub struct DynamoArgs {
    /// Store aggregates in this DynamoDB table (checkpoints go to
    /// TABLE-checkpoints) instead of the SQLite --db. Credentials and region
    /// come from the AWS default chain; AWS_ENDPOINT_URL or AWS_ENDPOINT_URL_DYNAMODB points
    /// it at an emulator.
    #[arg(long, value_name = "TABLE", global = true)]
    pub dynamodb: Option<String>,
    /// AWS region [default: from the environment or profile]
    #[arg(long, global = true)]
    pub region: Option<String>,
    /// Endpoint URL for every AWS service (overrides AWS_ENDPOINT_URL*)
    #[arg(long, value_name = "URL", global = true)]
    pub endpoint_url: Option<String>,
    /// Per-attempt timeout of an AWS call, in seconds
    #[arg(long, default_value_t = 10.0, global = true)]
    pub aws_timeout: f64,
    /// DynamoDB calls in flight at once in batch updates
    #[arg(long, default_value_t = crate::DEFAULT_CONCURRENCY, global = true)]
    pub dynamodb_concurrency: usize,
}

/// How tables are provisioned when created.
#[derive(Debug, Clone, clap::Args)]
pub struct CreateArgs {
    /// Do not create missing tables (fail instead)
    #[arg(long)]
    pub no_create_tables: bool,
    /// Create tables with provisioned capacity "READ,WRITE" (units) instead of on-demand
    #[arg(long, value_name = "READ,WRITE", value_parser = parse_provisioned)]
    pub provisioned: Option<Billing>,
}

fn parse_provisioned(s: &str) -> Result<Billing, String> {
    let (r, w) = s.split_once(',').ok_or("expected READ,WRITE, e.g. 100,50")?;
    let unit =
        |v: &str| v.trim().parse::<i64>().ok().filter(|n| *n > 0).ok_or(format!("{v:?} is not a positive integer"));
    Ok(Billing::Provisioned { read_units: unit(r)?, write_units: unit(w)? })
}

/// The aggregate table and its checkpoint table.
pub struct Tables {
    pub aggregates: DynamoTable,
    pub checkpoints: DynamoTable,
}

pub fn checkpoint_table_name(aggregates: &str) -> String {
    format!("{aggregates}-checkpoints")
}

impl DynamoArgs {
    pub fn aws_options(&self) -> AwsOptions {
        AwsOptions {
            region: self.region.clone(),
            endpoint_url: self.endpoint_url.clone(),
            attempt_timeout: Duration::from_secs_f64(self.aws_timeout.clamp(0.05, 3600.0)),
            ..AwsOptions::default()
        }
    }

    /// Opens the aggregate table alone, for readers (`gather`), without a
    /// call: a reader's first read shows whether the table is there (then
    /// [`Self::check_aggregates`] says what is wrong); the lease table is
    /// not touched. None when `--dynamodb` was not given.
    pub async fn open_aggregates(&self) -> Option<DynamoTable> {
        let name = self.dynamodb.as_ref()?;
        let client = client(&self.aws_options()).await;
        Some(DynamoTable::new(client, name).with_concurrency(self.dynamodb_concurrency))
    }

    /// Why the aggregate table cannot be read, if a DescribeTable can tell
    /// (missing, not ACTIVE, another key schema).
    pub async fn check_aggregates(&self) -> Result<(), AdminError> {
        let Some(name) = &self.dynamodb else { return Ok(()) };
        ensure_table(&client(&self.aws_options()).await, name, Billing::OnDemand, false).await.map(|_| ())
    }

    /// Opens (validating, and creating when `create` says how) the tables,
    /// or None when `--dynamodb` was not given.
    pub async fn open(&self, create: Option<&CreateArgs>) -> Result<Option<Tables>, AdminError> {
        let Some(name) = &self.dynamodb else { return Ok(None) };
        let client = client(&self.aws_options()).await;
        let (billing, may_create) = match create {
            Some(c) => (c.provisioned.unwrap_or_default(), !c.no_create_tables),
            None => (Billing::OnDemand, false),
        };
        let checkpoints = checkpoint_table_name(name);
        ensure_table(&client, name, billing, may_create).await?;
        ensure_table(&client, &checkpoints, billing, may_create).await?;
        Ok(Some(Tables {
            aggregates: DynamoTable::new(client.clone(), name).with_concurrency(self.dynamodb_concurrency),
            checkpoints: DynamoTable::new(client, checkpoints),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provisioned_capacity_parses() {
        assert_eq!(parse_provisioned("100, 50"), Ok(Billing::Provisioned { read_units: 100, write_units: 50 }));
        assert!(parse_provisioned("100").is_err());
        assert!(parse_provisioned("0,5").is_err());
    }
}
