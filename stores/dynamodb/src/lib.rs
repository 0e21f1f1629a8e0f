//! The DynamoDB store: [`DynamoTable`] is a [`SortedTable`] over one
//! DynamoDB table (aws-sdk-dynamodb), so the pipeline, the query strategies
//! and the conformance suite run on it unchanged.
//!
//! - [`admin`]: create or validate a table (on-demand or provisioned).
//! - `expr`: requests → key-condition / filter / update / condition
//!   expressions, every name and value through placeholders.
//! - `convert`: items ↔ attribute maps.
//! - [`capacity`]: consumed capacity reported by every call, totalled.
//!
//! Errors are classified ([`zigzag_aws::classify`]) into
//! `TableError::Throttled` / `Unavailable` (retryable) or a fatal error; the
//! store itself does not retry single calls — the callers' one retry
//! policy does, so retries are bounded and counted in one place.
//! `update_batch` returns each item's result, so its caller re-sends only
//! the failed items. The one exception is BatchWriteItem's UnprocessedItems
//! (`put_batch`), a partial success only the store can finish.

pub mod admin;
pub mod capacity;
mod convert;
mod expr;

pub use admin::{ensure_table, AdminError, Billing, Ensured};
pub use capacity::Capacity;

use async_trait::async_trait;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    PutRequest, ReturnConsumedCapacity, ReturnValue, ReturnValuesOnConditionCheckFailure, WriteRequest,
};
use aws_sdk_dynamodb::Client;
use capacity::{CapacityMeter, Kind};
use convert::{item_from_sdk, item_to_sdk, key, sort_key};
use expr::Expressions;
use futures::{StreamExt, TryStreamExt};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::Semaphore;
use zigzag_aws::{classify, describe, AwsOptions, ErrorClass};
use zigzag_core::retry::RetryPolicy;
use zigzag_core::table::{
    DeleteOutcome, DeleteRequest, Item, ItemResult, QueryPage, QueryRequest, SortedTable, TableError, UpdateOutcome,
    UpdateRequest, PK_ATTR, SK_ATTR,
};

/// Updates in flight at once in [`SortedTable::update_batch`].
pub const DEFAULT_CONCURRENCY: usize = 32;
/// BatchWriteItem's limit.
const BATCH_WRITE_MAX: usize = 25;

/// A DynamoDB client from the default chain (see [`zigzag_aws::load_config`]),
/// its calls logged for an IAM audit when asked ([`zigzag_aws::CallLog`]).
pub async fn client(opts: &AwsOptions) -> Client {
    let sdk = zigzag_aws::load_config(opts).await;
    Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&sdk).interceptor(zigzag_aws::CallLog::from_env()).build(),
    )
}

#[derive(Clone)]
pub struct DynamoTable {
    client: Client,
    table: String,
    concurrency: usize,
    /// Bounds the requests in flight through this handle and its clones,
    /// however many batch calls run at once.
    in_flight: Arc<Semaphore>,
    retry: RetryPolicy,
    meter: Arc<CapacityMeter>,
}

impl DynamoTable {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoTable {
            client,
            table: table.into(),
            concurrency: DEFAULT_CONCURRENCY,
            in_flight: Arc::new(Semaphore::new(DEFAULT_CONCURRENCY)),
            retry: RetryPolicy::default(),
            meter: Arc::new(CapacityMeter::default()),
        }
    }

    /// Requests in flight at once through this handle (and its clones).
    pub fn with_concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency.max(1);
        self.in_flight = Arc::new(Semaphore::new(self.concurrency));
        self
    }

    /// How BatchWriteItem's unprocessed items are retried (see the module docs).
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    pub fn name(&self) -> &str {
        &self.table
    }

    /// Capacity consumed and requests made through this handle (and its clones).
    pub fn capacity(&self) -> Capacity {
        self.meter.snapshot()
    }

    fn record(&self, kind: Kind, consumed: Option<&aws_sdk_dynamodb::types::ConsumedCapacity>) {
        self.meter.record(&self.table, kind, consumed.and_then(|c| c.capacity_units()));
    }

    /// Maps an SDK error to the table error the callers' retry policy
    /// understands.
    fn error<E>(&self, err: SdkError<E>) -> TableError
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let message = format!("{}: {}", self.table, describe(&err));
        match classify(&err) {
            ErrorClass::Throttled => {
                self.meter.record_retryable(&self.table, "throttled");
                TableError::Throttled(message)
            }
            ErrorClass::Unavailable => {
                self.meter.record_retryable(&self.table, "unavailable");
                TableError::Unavailable(message)
            }
            ErrorClass::Fatal if err.code() == Some("ValidationException") => TableError::InvalidRequest(message),
            ErrorClass::Fatal => TableError::Store(message.into()),
        }
    }

    async fn batch_write(&self, items: Vec<Item>) -> Result<(), TableError> {
        let mut pending: Vec<WriteRequest> = items
            .iter()
            .map(|item| {
                let put = PutRequest::builder()
                    .set_item(Some(item_to_sdk(item)))
                    .build()
                    .map_err(|e| TableError::InvalidRequest(e.to_string()))?;
                Ok(WriteRequest::builder().put_request(put).build())
            })
            .collect::<Result<_, TableError>>()?;
        let mut attempt = 0;
        loop {
            let out = self
                .client
                .batch_write_item()
                .request_items(&self.table, pending)
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await
                .map_err(|e| self.error(e))?;
            for c in out.consumed_capacity() {
                self.record(Kind::Write, Some(c));
            }
            pending = out.unprocessed_items.and_then(|mut m| m.remove(&self.table)).unwrap_or_default();
            if pending.is_empty() {
                return Ok(());
            }
            // Unprocessed items are DynamoDB throttling part of a batch.
            self.meter.record_retryable(&self.table, "unprocessed");
            if !self.retry.pause(&mut attempt, &self.meter.retried).await {
                return Err(TableError::Throttled(format!(
                    "{}: {} items stayed unprocessed",
                    self.table,
                    pending.len()
                )));
            }
        }
    }
}

#[async_trait]
impl SortedTable for DynamoTable {
    async fn put(&self, item: Item) -> Result<(), TableError> {
        let out = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item_to_sdk(&item)))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .map_err(|e| self.error(e))?;
        self.record(Kind::Write, out.consumed_capacity());
        Ok(())
    }

    async fn put_batch(&self, items: Vec<Item>) -> Result<(), TableError> {
        // A batch may not name one key twice; the last write wins, as it
        // would with sequential puts.
        let mut last: HashMap<(String, Vec<u8>), Item> = HashMap::new();
        let mut order = Vec::new();
        for item in items {
            let k = (item.pk.clone(), item.sk.clone());
            if last.insert(k.clone(), item).is_none() {
                order.push(k);
            }
        }
        let items: Vec<Item> = order.into_iter().filter_map(|k| last.remove(&k)).collect();
        let chunks: Vec<Vec<Item>> = items.chunks(BATCH_WRITE_MAX).map(|c| c.to_vec()).collect();
        futures::stream::iter(chunks.into_iter().map(|c| self.batch_write(c)))
            .buffer_unordered(self.concurrency)
            .try_collect::<Vec<()>>()
            .await?;
        Ok(())
    }

    async fn query(&self, req: &QueryRequest) -> Result<QueryPage, TableError> {
        req.validate()?;
        let mut e = Expressions::default();
        let key_condition = e.key_condition(&req.pk, &req.sk);
        let filter = e.filter(&req.filter);
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression(key_condition)
            .set_filter_expression(filter)
            .set_expression_attribute_names(Some(e.names))
            .set_expression_attribute_values(Some(e.values))
            .set_limit(req.limit.map(|l| l.min(i32::MAX as u32) as i32))
            .set_exclusive_start_key(req.exclusive_start.as_ref().map(|sk| key(&req.pk, sk)))
            .consistent_read(req.consistent)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .map_err(|e| self.error(e))?;
        self.record(Kind::Read, out.consumed_capacity());
        let items = out.items().iter().map(item_from_sdk).collect::<Result<Vec<_>, _>>()?;
        let last_evaluated = out.last_evaluated_key().map(sort_key).transpose()?;
        Ok(QueryPage {
            count: out.count().max(0) as u32,
            scanned_count: out.scanned_count().max(0) as u32,
            consumed_rcu: out.consumed_capacity().and_then(|c| c.capacity_units()).unwrap_or(0.0),
            items,
            last_evaluated,
        })
    }

    async fn update(&self, req: &UpdateRequest) -> Result<UpdateOutcome, TableError> {
        req.validate()?;
        let mut e = Expressions::default();
        let (update, condition) = e.update(req);
        let _permit = self.in_flight.acquire().await.map_err(|e| TableError::Store(e.into()))?;
        let sent = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(&req.pk, &req.sk)))
            .update_expression(update)
            .set_condition_expression(condition)
            .set_expression_attribute_names(Some(e.names))
            .set_expression_attribute_values(Some(e.values))
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        match sent {
            Ok(out) => {
                self.record(Kind::Write, out.consumed_capacity());
                let attrs = out.attributes.unwrap_or_default();
                Ok(UpdateOutcome::Applied(item_from_sdk(&with_key(attrs, req))?))
            }
            Err(err) => {
                if let Some(UpdateItemError::ConditionalCheckFailedException(failed)) = err.as_service_error() {
                    // A failed condition still costs a write unit; the error
                    // does not carry ConsumedCapacity, so it is counted as 1.
                    self.meter.record(&self.table, Kind::Write, Some(1.0));
                    let old = failed.item().map(|m| item_from_sdk(&with_key(m.clone(), req))).transpose()?;
                    return Ok(UpdateOutcome::ConditionFailed(old));
                }
                Err(self.error(err))
            }
        }
    }

    async fn update_batch(&self, reqs: &[UpdateRequest]) -> Result<Vec<ItemResult>, TableError> {
        // One UpdateItem per item, `concurrency` in flight (the semaphore in
        // `update`); failures come back per item for the caller to retry.
        let calls: Vec<_> = reqs.iter().map(|r| self.update(r)).collect();
        Ok(futures::stream::iter(calls).buffered(self.concurrency).collect().await)
    }

    async fn delete(&self, req: &DeleteRequest) -> Result<DeleteOutcome, TableError> {
        req.validate()?;
        let mut e = Expressions::default();
        let condition = e.condition(&req.guards);
        let (names, values) = (e.names, e.values);
        let _permit = self.in_flight.acquire().await.map_err(|e| TableError::Store(e.into()))?;
        let sent = self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(key(&req.pk, &req.sk)))
            .set_condition_expression(condition)
            // DynamoDB refuses empty maps: an unguarded delete has none.
            .set_expression_attribute_names((!names.is_empty()).then_some(names))
            .set_expression_attribute_values((!values.is_empty()).then_some(values))
            .return_values(ReturnValue::AllOld)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        match sent {
            Ok(out) => {
                self.record(Kind::Write, out.consumed_capacity());
                let old = out.attributes.map(|m| item_from_sdk(&m)).transpose()?;
                Ok(DeleteOutcome::Deleted(old))
            }
            Err(err) => {
                if let Some(DeleteItemError::ConditionalCheckFailedException(failed)) = err.as_service_error() {
                    self.meter.record(&self.table, Kind::Write, Some(1.0));
                    let old = failed.item().map(item_from_sdk).transpose()?;
                    return Ok(DeleteOutcome::ConditionFailed(old));
                }
                Err(self.error(err))
            }
        }
    }

    fn write_parallelism(&self) -> usize {
        self.concurrency
    }

    async fn get(&self, pk: &str, sk: &[u8]) -> Result<Option<Item>, TableError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key(pk, sk)))
            .consistent_read(true)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .map_err(|e| self.error(e))?;
        self.record(Kind::Read, out.consumed_capacity());
        out.item.map(|m| item_from_sdk(&m)).transpose()
    }
}

/// ALL_NEW / ALL_OLD include the key; make sure it is there either way.
fn with_key(mut attrs: convert::AttrMap, req: &UpdateRequest) -> convert::AttrMap {
    for (k, v) in key(&req.pk, &req.sk) {
        attrs.entry(k).or_insert(v);
    }
    debug_assert!(attrs.contains_key(PK_ATTR) && attrs.contains_key(SK_ATTR));
    attrs
}
