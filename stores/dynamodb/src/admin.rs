//! Creating and validating tables. Both Zigzag tables (aggregates and
//! checkpoints) have the same key schema: `pk` (string) HASH, `sk` (binary)
//! RANGE, and TTL on `expires` (retention). A table that exists with
//! another schema is refused rather than written into.

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ProvisionedThroughput, ScalarAttributeType,
    TableDescription, TableStatus, TimeToLiveSpecification,
};
use aws_sdk_dynamodb::Client;
use std::time::{Duration, Instant};
use thiserror::Error;
use zigzag_aws::ErrorClass;
use zigzag_core::table::{PK_ATTR, SK_ATTR, TTL_ATTR};

/// How a created table is billed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Billing {
    /// PAY_PER_REQUEST: no capacity planning, the default.
    #[default]
    OnDemand,
    Provisioned {
        read_units: i64,
        write_units: i64,
    },
}

#[derive(Debug, Error)]
pub enum AdminError {
    #[error("table {table} does not exist (create it, or allow creation)")]
    Missing { table: String },
    #[error("table {table} exists with another key schema: {found}; Zigzag needs pk (S, HASH) + sk (B, RANGE)")]
    WrongSchema { table: String, found: String },
    #[error("table {table} did not become ACTIVE within {waited:?} (last status {status})")]
    NotActive { table: String, status: String, waited: Duration },
    #[error("table {table}: {message}")]
    Sdk { table: String, message: String },
    /// No answer in time, throttled, or a server-side failure: the same
    /// call may succeed later.
    #[error("table {table}: {message}")]
    Unavailable { table: String, message: String },
}

impl zigzag_core::retry::Retryable for AdminError {
    fn is_retryable(&self) -> bool {
        matches!(self, AdminError::Unavailable { .. } | AdminError::NotActive { .. })
    }
}

/// A failed call on `table`, classified: worth trying again, or not.
fn failed<E>(table: &str, e: &SdkError<E>) -> AdminError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let (table, message) = (table.to_string(), zigzag_aws::describe(e));
    match zigzag_aws::classify(e) {
        ErrorClass::Throttled | ErrorClass::Unavailable => AdminError::Unavailable { table, message },
        ErrorClass::Fatal => AdminError::Sdk { table, message },
    }
}

/// What [`ensure_table`] found or did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ensured {
    Existed,
    Created,
}

const ACTIVE_WAIT: Duration = Duration::from_secs(120);

/// Makes sure `table` exists with Zigzag's key schema and is ACTIVE,
/// creating it (billed as `billing`) when `create` and it is missing.
pub async fn ensure_table(client: &Client, table: &str, billing: Billing, create: bool) -> Result<Ensured, AdminError> {
    let sdk = |message: String| AdminError::Sdk { table: table.to_string(), message };
    let described = client.describe_table().table_name(table).send().await;
    let outcome = match described {
        Ok(out) => {
            let desc = out.table.ok_or_else(|| sdk("DescribeTable returned no table".into()))?;
            check_schema(table, &desc)?;
            if desc.table_status == Some(TableStatus::Active) {
                // One DescribeTable when the table is ready (every gather
                // run opens with it; DynamoDB Local counts the items for it).
                return Ok(Ensured::Existed);
            }
            Ensured::Existed
        }
        Err(e) if e.as_service_error().is_some_and(|s| s.is_resource_not_found_exception()) => {
            if !create {
                return Err(AdminError::Missing { table: table.to_string() });
            }
            let mut req = client
                .create_table()
                .table_name(table)
                .attribute_definitions(attr_def(PK_ATTR, ScalarAttributeType::S))
                .attribute_definitions(attr_def(SK_ATTR, ScalarAttributeType::B))
                .key_schema(key_elem(PK_ATTR, KeyType::Hash))
                .key_schema(key_elem(SK_ATTR, KeyType::Range));
            req = match billing {
                Billing::OnDemand => req.billing_mode(BillingMode::PayPerRequest),
                Billing::Provisioned { read_units, write_units } => {
                    req.billing_mode(BillingMode::Provisioned).provisioned_throughput(
                        ProvisionedThroughput::builder()
                            .read_capacity_units(read_units)
                            .write_capacity_units(write_units)
                            .build()
                            .map_err(|e| sdk(e.to_string()))?,
                    )
                }
            };
            match req.send().await {
                Ok(_) => {}
                // Another process created it between our describe and create.
                Err(e) if e.as_service_error().is_some_and(|s| s.is_resource_in_use_exception()) => {}
                Err(e) => return Err(failed(table, &e)),
            }
            Ensured::Created
        }
        Err(e) => return Err(failed(table, &e)),
    };
    wait_active(client, table).await?;
    if outcome == Ensured::Created {
        enable_ttl(client, table).await?;
    }
    Ok(outcome)
}

/// Items past their retention carry [`TTL_ATTR`]: a table created here has
/// DynamoDB delete them, as the deployment's template does for its tables.
async fn enable_ttl(client: &Client, table: &str) -> Result<(), AdminError> {
    let sdk = |message: String| AdminError::Sdk { table: table.to_string(), message };
    let spec = TimeToLiveSpecification::builder()
        .attribute_name(TTL_ATTR)
        .enabled(true)
        .build()
        .map_err(|e| sdk(e.to_string()))?;
    match client.update_time_to_live().table_name(table).time_to_live_specification(spec).send().await {
        Ok(_) => Ok(()),
        // Another process created the table and enabled it first.
        Err(e) if zigzag_aws::describe(&e).contains("already enabled") => Ok(()),
        Err(e) => Err(failed(table, &e)),
    }
}

fn attr_def(name: &str, t: ScalarAttributeType) -> AttributeDefinition {
    AttributeDefinition::builder().attribute_name(name).attribute_type(t).build().expect("name and type are set")
}

fn key_elem(name: &str, t: KeyType) -> KeySchemaElement {
    KeySchemaElement::builder().attribute_name(name).key_type(t).build().expect("name and type are set")
}

fn check_schema(table: &str, desc: &TableDescription) -> Result<(), AdminError> {
    let keys: Vec<(String, KeyType)> =
        desc.key_schema().iter().map(|k| (k.attribute_name().to_string(), k.key_type().clone())).collect();
    let type_of = |name: &str| {
        desc.attribute_definitions().iter().find(|d| d.attribute_name() == name).map(|d| d.attribute_type().clone())
    };
    let ok = keys == [(PK_ATTR.to_string(), KeyType::Hash), (SK_ATTR.to_string(), KeyType::Range)]
        && type_of(PK_ATTR) == Some(ScalarAttributeType::S)
        && type_of(SK_ATTR) == Some(ScalarAttributeType::B);
    if ok {
        return Ok(());
    }
    let found = keys
        .iter()
        .map(|(n, k)| {
            format!("{n} ({}, {})", type_of(n).map(|t| t.as_str().to_string()).unwrap_or_default(), k.as_str())
        })
        .collect::<Vec<_>>()
        .join(" + ");
    Err(AdminError::WrongSchema { table: table.to_string(), found })
}

async fn wait_active(client: &Client, table: &str) -> Result<(), AdminError> {
    let start = Instant::now();
    let mut status = String::from("unknown");
    while start.elapsed() < ACTIVE_WAIT {
        let out = client.describe_table().table_name(table).send().await.map_err(|e| failed(table, &e))?;
        match out.table.and_then(|t| t.table_status) {
            Some(TableStatus::Active) => return Ok(()),
            Some(s) => status = s.as_str().to_string(),
            None => {}
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(AdminError::NotActive { table: table.to_string(), status, waited: ACTIVE_WAIT })
}
