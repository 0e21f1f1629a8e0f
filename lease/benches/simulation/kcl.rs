//! A model of KCL 2.x's lease management with its documented defaults,
//! on the same metered table, for comparison (not KCL itself: its lease
//! taker and renewer as documented, enough to count what they read and
//! write). One item per shard (partition key = shard id, as KCL's lease
//! table); every worker renews each lease it holds every failover / 3 (a
//! conditional write per lease) and, every 2 x failover, scans the whole
//! table (eventually consistent), takes expired or unowned leases up to its
//! target and steals at most one (`maxLeasesToStealAtOneTime` = 1).
//! While busy, every held lease is checkpointed every flush interval (a
//! conditional write). Left out: the shard-sync leader election and lease
//! cleanup, which add reads of their own.

use crate::meter::{Account, Meter, Metered};
use rust_decimal::Decimal;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use zigzag_core::table::{read_capacity, AttrValue, CmpOp, Item, MemoryTable, SortedTable, UpdateRequest};

/// Our table has sort keys; KCL's lease table only a partition key.
pub const LEASE_SK: &[u8] = b"l";
const OWNER: &str = "leaseOwner";
const COUNTER: &str = "leaseCounter";

/// A KCL lease item as KCL writes it (a 56-digit checkpoint, the hash key
/// range, the owner switches), about 330 bytes.
pub fn lease_item(shard: &str) -> Item {
    Item::new(shard, LEASE_SK.to_vec())
        .with(OWNER, "")
        .with(COUNTER, 0i64)
        .with("checkpoint", "49590338271490256608559692538361571095921575989136588898")
        .with("checkpointSubSequenceNumber", 0i64)
        .with("ownerSwitchesSinceCheckpoint", 0i64)
        .with("startingHashKey", "170141183460469231731687303715884105728")
        .with("endingHashKey", "340282366920938463463374607431768211455")
        .with("parentShardId", "shardId-000000000000")
}

fn n(v: u64) -> AttrValue {
    AttrValue::N(Decimal::from(v))
}

fn num(item: &Item, k: &str) -> u64 {
    match item.attrs.get(k) {
        Some(AttrValue::N(d)) => u64::try_from(*d).unwrap_or(0),
        _ => 0,
    }
}

fn owner(item: &Item) -> String {
    match item.attrs.get(OWNER) {
        Some(AttrValue::S(s)) => s.clone(),
        _ => String::new(),
    }
}

/// One KCL-like worker: renewer and taker, until aborted.
pub async fn worker(
    inner: Arc<MemoryTable>,
    meter: Arc<Meter>,
    account: Arc<Account>,
    me: String,
    shards: Arc<Vec<String>>,
) {
    let table = Metered { inner: inner.clone(), meter: meter.clone(), account: account.clone() };
    let failover = Duration::from_secs(10);
    let mut held: HashMap<String, u64> = HashMap::new();
    let mut seen: HashMap<String, (u64, tokio::time::Instant)> = HashMap::new();
    let mut next_take = tokio::time::Instant::now();
    let mut next_checkpoint = tokio::time::Instant::now();
    let mut position = 0u64;
    loop {
        // Busy: a checkpoint of every held lease every flush interval (KCL
        // checkpoints through the lease: a conditional write on its owner
        // and counter).
        if crate::BUSY.load(std::sync::atomic::Ordering::Relaxed) && tokio::time::Instant::now() >= next_checkpoint {
            next_checkpoint = tokio::time::Instant::now() + crate::FLUSH_EVERY;
            position += 100;
            for (shard, counter) in held.iter() {
                let req = UpdateRequest::new(shard.as_str(), LEASE_SK.to_vec())
                    .set(
                        "checkpoint",
                        format!("4959033827149025660855969253836157109592157598913658{position:04}").as_str(),
                    )
                    .guard(COUNTER, CmpOp::Eq, n(*counter), false)
                    .guard(OWNER, CmpOp::Eq, me.as_str(), false);
                let _ = table.update(&req).await;
            }
        }
        // Renew every held lease.
        let mut lost = Vec::new();
        for (shard, counter) in held.iter_mut() {
            let req = UpdateRequest::new(shard.as_str(), LEASE_SK.to_vec())
                .set(COUNTER, n(*counter + 1))
                .guard(COUNTER, CmpOp::Eq, n(*counter), false)
                .guard(OWNER, CmpOp::Eq, me.as_str(), false);
            match table.update(&req).await {
                Ok(out) if out.applied() => *counter += 1,
                _ => lost.push(shard.clone()),
            }
        }
        for s in lost {
            held.remove(&s);
        }
        if tokio::time::Instant::now() >= next_take {
            next_take += failover * 2;
            take(&table, &inner, &meter, &account, &me, &shards, &mut held, &mut seen, failover).await;
        }
        tokio::time::sleep(failover / 3).await;
    }
}

#[allow(clippy::too_many_arguments)]
async fn take(
    table: &Metered,
    inner: &Arc<MemoryTable>,
    meter: &Meter,
    account: &Account,
    me: &str,
    shards: &[String],
    held: &mut HashMap<String, u64>,
    seen: &mut HashMap<String, (u64, tokio::time::Instant)>,
    failover: Duration,
) {
    // The Scan: every item, 1 MB pages, eventually consistent; charged to
    // each item's partition by its bytes.
    let mut leases = Vec::new();
    let mut bytes = 0;
    for s in shards {
        if let Ok(Some(item)) = inner.get(s, LEASE_SK).await {
            bytes += item.size();
            leases.push(item);
        }
    }
    let total = read_capacity(bytes, false);
    for l in &leases {
        meter.charge(&l.pk, total * l.size() as f64 / bytes.max(1) as f64, 0.0, account);
    }
    let now = tokio::time::Instant::now();
    let mut expired = Vec::new();
    let mut load: HashMap<String, Vec<&Item>> = HashMap::new();
    for l in &leases {
        let counter = num(l, COUNTER);
        let since = match seen.get(&l.pk) {
            Some((c, t)) if *c == counter => *t,
            _ => now,
        };
        seen.insert(l.pk.clone(), (counter, since));
        let o = owner(l);
        if o.is_empty() || (o != me && now - since >= failover) {
            expired.push(l);
        } else {
            load.entry(o).or_default().push(l);
        }
    }
    let workers = load.len().max(1) + usize::from(!load.contains_key(me));
    let target = leases.len().div_ceil(workers);
    let mine = held.len();
    let mut wanted = target.saturating_sub(mine);
    for l in expired {
        if wanted == 0 {
            break;
        }
        if take_one(table, me, l, held).await {
            wanted -= 1;
        }
    }
    if wanted > 0 {
        // Steal one from the most loaded worker above the target.
        let victim = load.iter().filter(|(o, _)| o.as_str() != me).max_by_key(|(_, v)| v.len());
        if let Some((_, leases)) = victim.filter(|(_, v)| v.len() > target) {
            take_one(table, me, leases[0], held).await;
        }
    }
}

/// Takes one lease from the counter seen (expired, unowned or stolen).
async fn take_one(table: &Metered, me: &str, l: &Item, held: &mut HashMap<String, u64>) -> bool {
    let counter = num(l, COUNTER);
    let req = UpdateRequest::new(l.pk.as_str(), LEASE_SK.to_vec()).set(OWNER, me).set(COUNTER, n(counter + 1)).guard(
        COUNTER,
        CmpOp::Eq,
        n(counter),
        false,
    );
    let taken = table.update(&req).await.is_ok_and(|o| o.applied());
    if taken {
        held.insert(l.pk.clone(), counter + 1);
    }
    taken
}

/// Owner of every lease (for convergence checks; not metered).
pub async fn owners(inner: &MemoryTable, shards: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(shards.len());
    for s in shards {
        out.push(inner.get(s, LEASE_SK).await.ok().flatten().map(|i| owner(&i)).unwrap_or_default());
    }
    out
}
