//! The conformance suite every [`SortedTable`] must pass: the DynamoDB Query
//! behaviour the query strategies rely on. Stores run it from their tests:
//!
//! ```ignore
//! zigzag_core::table::conformance::run(&table, "namespace").await.unwrap();
//! ```
//!
//! Each check writes under its own partition key, `"{namespace}#{check}"`,
//! so one table (even a shared DynamoDB table) can run the suite repeatedly
//! with fresh namespaces.

use super::*;
use rust_decimal::Decimal;
use std::fmt;

/// The checks that failed, each with what was expected and what happened.
#[derive(Debug)]
pub struct Failures(pub Vec<(&'static str, String)>);

impl fmt::Display for Failures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} conformance check(s) failed:", self.0.len())?;
        for (name, why) in &self.0 {
            writeln!(f, "  {name}: {why}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Failures {}

type Check = Result<(), String>;

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

fn e(err: TableError) -> String {
    err.to_string()
}

/// Runs every check; returns all failures, not just the first.
pub async fn run<T: SortedTable + ?Sized>(table: &T, namespace: &str) -> Result<(), Failures> {
    run_except(table, namespace, &[]).await
}

/// Runs every check but the named ones: for a store (an emulator) that is
/// known to differ from DynamoDB in a way that does not matter to Zigzag.
/// Each exception must still exist and still fail, so a fixed emulator (or a
/// renamed check) is noticed.
pub async fn run_except<T: SortedTable + ?Sized>(table: &T, namespace: &str, except: &[&str]) -> Result<(), Failures> {
    let mut failures = Vec::new();
    let mut excepted = Vec::new();
    macro_rules! check {
        ($name:literal, $f:ident) => {
            let outcome = $f(table, &format!("{namespace}#{}", $name)).await;
            if except.contains(&$name) {
                excepted.push($name);
                if outcome.is_ok() {
                    failures.push(($name, "passes now: remove it from the exceptions".to_string()));
                }
            } else if let Err(why) = outcome {
                failures.push(($name, why));
            }
        };
    }
    check!("sort-order", sort_order_is_unsigned_bytes);
    check!("key-conditions", key_conditions);
    check!("limit-before-filter", limit_counts_evaluated_items);
    check!("limit-at-end", limit_reached_at_the_end_still_returns_a_key);
    check!("exhausted", no_key_when_exhausted);
    check!("pagination", pagination_reads_everything_once);
    check!("validation", invalid_requests_are_rejected);
    check!("partitions", partitions_are_isolated);
    check!("replace", put_replaces_the_whole_item);
    check!("capacity-empty", an_empty_query_costs_half_a_unit);
    check!("capacity", read_capacity_by_4kb_of_evaluated_items);
    check!("page-size", pages_stop_at_one_megabyte);
    check!("filter-types", filters_compare_like_dynamodb);
    check!("update-add", updates_add_and_create);
    check!("update-guards", failed_guards_change_nothing);
    check!("update-concurrent", concurrent_adds_all_apply);
    check!("update-batch", batch_updates_succeed_or_fail_one_by_one);
    check!("delete", deletes_only_when_every_guard_holds);
    for name in except {
        if !excepted.contains(name) {
            failures.push(("exceptions", format!("no check is named {name:?}")));
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Failures(failures))
    }
}

fn keys(page: &QueryPage) -> Vec<Vec<u8>> {
    page.items.iter().map(|i| i.sk.clone()).collect()
}

async fn query_all<T: SortedTable + ?Sized>(t: &T, mut req: QueryRequest) -> Result<(Vec<Item>, u32), String> {
    let mut items = Vec::new();
    let mut pages = 0;
    loop {
        let page = t.query(&req).await.map_err(e)?;
        pages += 1;
        items.extend(page.items);
        match page.last_evaluated {
            Some(k) => req.exclusive_start = Some(k),
            None => return Ok((items, pages)),
        }
        if pages > 10_000 {
            return Err("pagination does not end".into());
        }
    }
}

async fn sort_order_is_unsigned_bytes<T: SortedTable + ?Sized>(t: &T, pk: &str) -> Check {
    let mut ks: Vec<Vec<u8>> = vec![
        vec![0x80],
        vec![0x01, 0x00],
        vec![0x01],
        vec![0x00, 0xff],
        vec![0x7f, 0xff, 0xff],
        vec![0xff],
        vec![0x00],
    ];
    for k in &ks {
        t.put(Item::new(pk, k.clone())).await.map_err(e)?;
    }
    ks.sort();
    let (items, _) = query_all(t, QueryRequest::new(pk, SortKeyCondition::Any)).await?;
    let got: Vec<_> = items.into_iter().map(|i| i.sk).collect();
    ensure!(got == ks, "expected {ks:x?}, got {got:x?}");
    Ok(())
}

async fn key_conditions<T: SortedTable + ?Sized>(t: &T, pk: &str) -> Check {
    let all: Vec<Vec<u8>> = vec![vec![1], vec![2], vec![2, 0], vec![2, 5], vec![3], vec![4]];
    t.put_batch(all.iter().map(|k| Item::new(pk, k.clone())).collect()).await.map_err(e)?;
    use SortKeyCondition as C;
    let cases: Vec<(C, Vec<Vec<u8>>)> = vec![
        (C::Between(vec![2], vec![3]), vec![vec![2], vec![2, 0], vec![2, 5], vec![3]]),
        (C::Ge(vec![2, 1]), vec![vec![2, 5], vec![3], vec![4]]),
        (C::Gt(vec![2]), vec![vec![2, 0], vec![2, 5], vec![3], vec![4]]),
        (C::Le(vec![2]), vec![vec![1], vec![2]]),
        (C::Lt(vec![2, 0]), vec![vec![1], vec![2]]),
        (C::Eq(vec![2, 5]), vec![vec![2, 5]]),
        (C::BeginsWith(vec![2]), vec![vec![2], vec![2, 0], vec![2, 5]]),
        (C::Between(vec![5], vec![9]), vec![]),
    ];
    for (cond, want) in cases {
        let (items, _) = query_all(t, QueryRequest::new(pk, cond.clone())).await?;
        let got: Vec<_> = items.into_iter().map(|i| i.sk).collect();
        ensure!(got == want, "{cond:?}: expected {want:?}, got {got:?}");
    }
    Ok(())
}

async fn put_numbered<T: SortedTable + ?Sized>(t: &T, pk: &str, n: u8) -> Check {
    let items = (0..n).map(|i| Item::new(pk, vec![i + 1]).with("n", i as i64)).collect();
    t.put_batch(items).await.map_err(e)
}

async fn limit_counts_evaluated_items<T: SortedTable + ?Sized>(t: &T, pk: &str) -> Check {
    put_numbered(t, pk, 10).await?;
    let mut req = QueryRequest::new(pk, SortKeyCondition::Any);
    req.filter = Filter::none().and("n", Test::Ge(AttrValue::from(5)));
    req.limit = Some(3);
    let p = t.query(&req).await.map_err(e)?;
    ensure!(
        p.scanned_count == 3 && p.count == 0 && p.items.is_empty(),
        "page 1: scanned {} count {}",
        p.scanned_count,
        p.count
    );
    ensure!(
        p.last_evaluated == Some(vec![3]),
        "page 1: LastEvaluatedKey must be the last evaluated (filtered-out) key [3], got {:?}",
        p.last_evaluated
    );
    req.exclusive_start = p.last_evaluated;
    let p = t.query(&req).await.map_err(e)?;
    ensure!(p.scanned_count == 3 && p.count == 1, "page 2: scanned {} count {}", p.scanned_count, p.count);
    ensure!(keys(&p) == vec![vec![6]], "page 2 items {:?}", keys(&p));
    ensure!(p.last_evaluated == Some(vec![6]), "page 2 key {:?}", p.last_evaluated);
    Ok(())
}

async fn limit_reached_at_the_end_still_returns_a_key<T: SortedTable + ?Sized>(t: &T, pk: &str) -> Check {
    put_numbered(t, pk, 4).await?;
    let mut req = QueryRequest::new(pk, SortKeyCondition::Any);
    req.limit = Some(4);
    let p = t.query(&req).await.map_err(e)?;
    ensure!(p.count == 4, "count {}", p.count);
    ensure!(
        p.last_evaluated == Some(vec![4]),
        "Limit reached on the last item: DynamoDB still returns LastEvaluatedKey; got {:?}",
        p.last_evaluated
    );
    req.exclusive_start = p.last_evaluated;
    let p = t.query(&req).await.map_err(e)?;
    ensure!(p.count == 0 && p.scanned_count == 0 && p.last_evaluated.is_none(), "after the end: {p:?}");
    Ok(())
}

async fn no_key_when_exhausted<T: SortedTable + ?Sized>(t: &T, pk: &str) -> Check {
    put_numbered(t, pk, 4).await?;
    let mut req = QueryRequest::new(pk, SortKeyCondition::Between(vec![2], vec![3]));
    req.limit = Some(10);
    let p = t.query(&req).await.map_err(e)?;
    ensure!(p.count == 2 && p.last_evaluated.is_none(), "count {} key {:?}", p.count, p.last_evaluated);
    Ok(())
}

async fn pagination_reads_everything_once<T: SortedTable + ?Sized>(t: &T, pk: &str) -> Check {
    put_numbered(t, pk, 25).await?;
    let mut req = QueryRequest::new(pk, SortKeyCondition::Between(vec![3], vec![23]));
    req.limit = Some(7);
    req.filter = Filter::none()
        .and("n", Test::In(vec![AttrValue::from(2), AttrValue::from(9), AttrValue::from(22), AttrValue::from(24)]));
    let (items, pages) = query_all(t, req).await?;
    let got: Vec<_> = items.into_iter().map(|i| i.sk).collect();
    ensure!(got == vec![vec![3], vec![10], vec![23]], "got {got:?}");
    ensure!(
        pages == 3 || pages == 4,
        "21 items at Limit 7 take 3 pages (+1 empty when the limit lands on the end); took {pages}"
    );
    Ok(())
}

async fn invalid_requests_are_rejected<T: SortedTable + ?Sized>(t: &T, pk: &str) -> Check {
    put_numbered(t, pk, 3).await?;
    let mut bad = Vec::new();
    let mut r = QueryRequest::new(pk, SortKeyCondition::Between(vec![2], vec![3]));
    r.exclusive_start = Some(vec![9]);
    bad.push(("ExclusiveStartKey outside the key condition", r));
    bad.push(("BETWEEN with lower > upper", QueryRequest::new(pk, SortKeyCondition::Between(vec![3], vec![2]))));
    let mut r = QueryRequest::new(pk, SortKeyCondition::Any);
    r.limit = Some(0);
    bad.push(("Limit 0", r));
    for (what, req) in bad {
        match t.query(&req).await {
            Err(TableError::InvalidRequest(_)) => {}
            other => return Err(format!("{what}: expected InvalidRequest, got {other:?}")),
        }
    }
    Ok(())
}

async fn partitions_are_isolated<T: SortedTable + ?Sized>(t: &T, pk: &str) -> Check {
    let other = format!("{pk}-other");
    t.put(Item::new(pk, vec![1]).with("who", "mine")).await.map_err(e)?;
    t.put(Item::new(other.as_str(), vec![1]).with("who", "theirs")).await.map_err(e)?;
    t.put(Item::new(other.as_str(), vec![2])).await.map_err(e)?;
    let (items, _) = query_all(t, QueryRequest::new(pk, SortKeyCondition::Any)).await?;
    ensure!(items.len() == 1 && items[0].attrs.get("who") == Some(&AttrValue::from("mine")), "got {items:?}");
    Ok(())
}

async fn put_replaces_the_whole_item<T: SortedTable + ?Sized>(t: &T, pk: &str) -> Check {
    t.put(Item::new(pk, vec![1]).with("a", 1)).await.map_err(e)?;
    t.put(Item::new(pk, vec![1]).with("b", 2)).await.map_err(e)?;
    let (items, _) = query_all(t, QueryRequest::new(pk, SortKeyCondition::Any)).await?;
    ensure!(items.len() == 1, "{} items", items.len());
    ensure!(
        !items[0].attrs.contains_key("a") && items[0].attrs.get("b") == Some(&AttrValue::from(2)),
        "got {:?}",
        items[0].attrs
    );
    Ok(())
}

/// An item of exactly `size` bytes by DynamoDB's rules.
fn sized_item(pk: &str, sk: u8, size: usize) -> Item {
    let base = Item::new(pk, vec![sk]).with("p", AttrValue::B(Vec::new())).size();
    Item::new(pk, vec![sk]).with("p", AttrValue::B(vec![0xab; size - base]))
}

async fn an_empty_query_costs_half_a_unit<T: SortedTable + ?Sized>(t: &T, pk: &str) -> Check {
    let empty = t.query(&QueryRequest::new(pk, SortKeyCondition::Any)).await.map_err(e)?;
    ensure!(
        empty.consumed_rcu == 0.5,
        "an empty eventually consistent Query costs 0.5 RCU, got {}",
        empty.consumed_rcu
    );
    Ok(())
}

async fn read_capacity_by_4kb_of_evaluated_items<T: SortedTable + ?Sized>(t: &T, pk: &str) -> Check {
    t.put_batch((1..=4).map(|i| sized_item(pk, i, 1024)).collect()).await.map_err(e)?;
    let mut req = QueryRequest::new(pk, SortKeyCondition::Any);
    let p = t.query(&req).await.map_err(e)?;
    ensure!(p.consumed_rcu == 0.5, "4 x 1 KB eventually consistent: 0.5 RCU, got {}", p.consumed_rcu);
    req.consistent = true;
    let p = t.query(&req).await.map_err(e)?;
    ensure!(p.consumed_rcu == 1.0, "4 x 1 KB strongly consistent: 1 RCU, got {}", p.consumed_rcu);
    t.put(sized_item(pk, 5, 1024)).await.map_err(e)?;
    let p = t.query(&req).await.map_err(e)?;
    ensure!(p.consumed_rcu == 2.0, "5 x 1 KB strongly consistent rounds up to 8 KB: 2 RCU, got {}", p.consumed_rcu);
    // A filter that drops everything saves nothing.
    req.filter = Filter::none().and("missing", Test::Eq(AttrValue::from(1)));
    let p = t.query(&req).await.map_err(e)?;
    ensure!(p.count == 0 && p.scanned_count == 5 && p.consumed_rcu == 2.0, "filtered: {p:?}");
    Ok(())
}

async fn pages_stop_at_one_megabyte<T: SortedTable + ?Sized>(t: &T, pk: &str) -> Check {
    for i in 1..=12 {
        t.put(sized_item(pk, i, 100 * 1024)).await.map_err(e)?;
    }
    let req = QueryRequest::new(pk, SortKeyCondition::Any);
    let p = t.query(&req).await.map_err(e)?;
    ensure!(p.last_evaluated.is_some(), "1.2 MB of items must not fit one page");
    ensure!((10..=11).contains(&p.scanned_count), "a page holds about 1 MB: scanned {}", p.scanned_count);
    let (items, _) = query_all(t, req).await?;
    ensure!(items.len() == 12, "all pages together: {}", items.len());
    Ok(())
}

async fn filters_compare_like_dynamodb<T: SortedTable + ?Sized>(t: &T, pk: &str) -> Check {
    let n = |v: i64| AttrValue::N(Decimal::from(v));
    t.put_batch(vec![
        Item::new(pk, vec![1]).with("v", n(9)),
        Item::new(pk, vec![2]).with("v", n(10)),
        Item::new(pk, vec![3]).with("v", "10"),
        Item::new(pk, vec![4]).with("v", "9"),
        Item::new(pk, vec![5]),
    ])
    .await
    .map_err(e)?;
    let run = |test: Test| {
        let mut req = QueryRequest::new(pk, SortKeyCondition::Any);
        req.filter = Filter::none().and("v", test);
        async move { query_all(t, req).await.map(|(items, _)| items.into_iter().map(|i| i.sk[0]).collect::<Vec<u8>>()) }
    };
    let got = run(Test::Ge(n(10))).await?;
    ensure!(got == vec![2], "numbers compare numerically and never match strings: {got:?}");
    let got = run(Test::Ge(AttrValue::from("5"))).await?;
    ensure!(got == vec![4], "strings compare as bytes (\"9\" >= \"5\" > \"10\"): {got:?}");
    let got = run(Test::Between(n(0), n(100))).await?;
    ensure!(got == vec![1, 2], "BETWEEN on numbers: {got:?}");
    let got = run(Test::In(vec![n(9), AttrValue::from("9")])).await?;
    ensure!(got == vec![1, 4], "IN matches by type and value: {got:?}");
    Ok(())
}

async fn updates_add_and_create<T: SortedTable + ?Sized>(t: &T, pk: &str) -> Check {
    let req = UpdateRequest::new(pk, vec![7]).add("n", Decimal::from(3)).set_if_absent("first", 1).set("last", 1);
    let out = t.update(&req).await.map_err(e)?;
    ensure!(out.applied(), "first update not applied: {out:?}");
    let req2 = UpdateRequest::new(pk, vec![7]).add("n", Decimal::new(-15, 1)).set_if_absent("first", 2).set("last", 2);
    t.update(&req2).await.map_err(e)?;
    let item = t.get(pk, &[7]).await.map_err(e)?.ok_or("item missing after update")?;
    ensure!(item.attrs.get("n") == Some(&AttrValue::N(Decimal::new(15, 1))), "n = {:?}", item.attrs.get("n"));
    ensure!(item.attrs.get("first") == Some(&AttrValue::from(1)), "if_not_exists overwrote: {:?}", item.attrs);
    ensure!(item.attrs.get("last") == Some(&AttrValue::from(2)), "SET lost: {:?}", item.attrs);
    ensure!(t.get(pk, &[8]).await.map_err(e)?.is_none(), "get of an absent key returned an item");
    Ok(())
}

async fn failed_guards_change_nothing<T: SortedTable + ?Sized>(t: &T, pk: &str) -> Check {
    let write = |hwm: i64| {
        UpdateRequest::new(pk, vec![1]).add("n", Decimal::ONE).set("hwm", hwm).guard("hwm", CmpOp::Lt, hwm, true)
    };
    ensure!(t.update(&write(5)).await.map_err(e)?.applied(), "absent_ok guard failed on a new item");
    match t.update(&write(5)).await.map_err(e)? {
        UpdateOutcome::ConditionFailed(Some(old)) => {
            ensure!(old.attrs.get("hwm") == Some(&AttrValue::from(5)), "old item {:?}", old.attrs)
        }
        other => return Err(format!("replayed write with the same mark: {other:?}")),
    }
    ensure!(t.update(&write(6)).await.map_err(e)?.applied(), "higher mark rejected");
    let item = t.get(pk, &[1]).await.map_err(e)?.ok_or("item missing")?;
    ensure!(item.attrs.get("n") == Some(&AttrValue::from(2)), "n = {:?} after 2 of 3 writes", item.attrs.get("n"));
    let strict = UpdateRequest::new(pk, vec![2]).set("x", 1).guard("owner", CmpOp::Eq, "me", false);
    ensure!(
        t.update(&strict).await.map_err(e)? == UpdateOutcome::ConditionFailed(None),
        "strict guard on an absent item"
    );
    ensure!(t.get(pk, &[2]).await.map_err(e)?.is_none(), "a failed update created the item");
    Ok(())
}

async fn concurrent_adds_all_apply<T: SortedTable + ?Sized>(t: &T, pk: &str) -> Check {
    let req = UpdateRequest::new(pk, vec![3]).add("n", Decimal::ONE);
    let results = futures::future::join_all((0..50).map(|_| t.update(&req))).await;
    for r in results {
        r.map_err(e)?;
    }
    let item = t.get(pk, &[3]).await.map_err(e)?.ok_or("item missing")?;
    ensure!(item.attrs.get("n") == Some(&AttrValue::from(50)), "n = {:?} after 50 adds", item.attrs.get("n"));
    Ok(())
}

async fn batch_updates_succeed_or_fail_one_by_one<T: SortedTable + ?Sized>(t: &T, pk: &str) -> Check {
    t.update(&UpdateRequest::new(pk, vec![2]).set("hwm", 9)).await.map_err(e)?;
    let reqs: Vec<UpdateRequest> = (1..=3u8)
        .map(|k| UpdateRequest::new(pk, vec![k]).add("n", Decimal::ONE).set("hwm", 5).guard("hwm", CmpOp::Lt, 5, true))
        .collect();
    let out = t.update_batch(&reqs).await.map_err(e)?.into_iter().collect::<Result<Vec<_>, _>>().map_err(e)?;
    let applied: Vec<bool> = out.iter().map(|o| o.applied()).collect();
    ensure!(applied == vec![true, false, true], "outcomes {applied:?}");
    ensure!(
        matches!(&out[1], UpdateOutcome::ConditionFailed(Some(old)) if old.attrs.get("hwm") == Some(&AttrValue::from(9))),
        "failed outcome must carry the old item: {:?}",
        out[1]
    );
    ensure!(t.get(pk, &[3]).await.map_err(e)?.is_some(), "the update after a failed one was lost");
    Ok(())
}

async fn deletes_only_when_every_guard_holds<T: SortedTable + ?Sized>(t: &T, pk: &str) -> Check {
    let req = UpdateRequest::new(pk, vec![1]).add("n", Decimal::from(5)).set("fin", AttrValue::Bool(true));
    t.update(&req).await.map_err(e)?;
    t.update(&UpdateRequest::new(pk, vec![2]).add("n", Decimal::from(1))).await.map_err(e)?;
    let guarded = |sk: u8, n: i64| {
        DeleteRequest::new(pk, vec![sk]).guard("fin", CmpOp::Eq, AttrValue::Bool(true), false).guard(
            "n",
            CmpOp::Eq,
            AttrValue::N(Decimal::from(n)),
            false,
        )
    };
    let refused = t.delete(&guarded(1, 4)).await.map_err(e)?;
    ensure!(
        matches!(&refused, DeleteOutcome::ConditionFailed(Some(i)) if i.sk == vec![1]),
        "a failed guard refuses and returns the item: {refused:?}"
    );
    let refused = t.delete(&guarded(2, 1)).await.map_err(e)?;
    ensure!(!refused.deleted(), "every guard must hold (fin is absent): {refused:?}");
    let (items, _) = query_all(t, QueryRequest::new(pk, SortKeyCondition::Any)).await?;
    ensure!(items.len() == 2, "a refused delete changes nothing: {} items", items.len());
    let deleted = t.delete(&guarded(1, 5)).await.map_err(e)?;
    ensure!(
        matches!(&deleted, DeleteOutcome::Deleted(Some(i)) if i.attrs.get("n") == Some(&AttrValue::N(Decimal::from(5)))),
        "a delete whose guards hold returns the item as it was: {deleted:?}"
    );
    let (items, _) = query_all(t, QueryRequest::new(pk, SortKeyCondition::Any)).await?;
    ensure!(keys_of(&items) == vec![vec![2]], "only the deleted item is gone: {:?}", keys_of(&items));
    let again = t.delete(&guarded(1, 5)).await.map_err(e)?;
    ensure!(!again.deleted(), "a guarded delete of an absent item is refused: {again:?}");
    let absent = t.delete(&DeleteRequest::new(pk, vec![9])).await.map_err(e)?;
    ensure!(absent == DeleteOutcome::Deleted(None), "an unguarded delete of an absent item succeeds: {absent:?}");
    Ok(())
}

fn keys_of(items: &[Item]) -> Vec<Vec<u8>> {
    items.iter().map(|i| i.sk.clone()).collect()
}
