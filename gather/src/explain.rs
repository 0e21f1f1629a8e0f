//! `--explain`: the plan, its estimate, and what running it cost.

use crate::execute::{Actual, ExecOptions};
use crate::plan::Plan;
use std::fmt::Write;

/// DynamoDB on-demand price of reads in us-east-1 since the November 2024
/// reduction: USD 0.125 per million read request units. An eventually
/// consistent read of up to 4 KB is half a unit, which is how RCU are
/// counted here, so RRU = RCU.
pub const USD_PER_MILLION_RRU: f64 = 0.125;

pub fn cost_usd(rcu: f64) -> f64 {
    rcu * USD_PER_MILLION_RRU / 1e6
}

/// Every exact candidate's estimate beside what reading it cost
/// (`--explain-all`): the chosen one's `actual`, and `others` read too.
pub fn compare(plan: &Plan, actual: &Actual, others: &[(String, Actual)]) -> String {
    let mut s = String::from("candidates, estimated and actual\n");
    let _ = writeln!(
        s,
        "  {:<18} {:>10} {:>10} {:>12} {:>10} {:>10} {:>9}",
        "projection", "est. req", "requests", "est. RCU", "RCU", "items", "wall s"
    );
    for c in &plan.candidates {
        let Ok(e) = &c.verdict else { continue };
        let reading = e.chosen_reading();
        let a = if c.chosen { Some(actual) } else { others.iter().find(|(n, _)| n == &c.projection).map(|(_, a)| a) };
        let Some(a) = a else { continue };
        let _ = writeln!(
            s,
            "  {:<18} {:>10.0} {:>10} {:>12.1} {:>10.1} {:>10} {:>9.3}{}",
            c.projection,
            reading.requests,
            a.stats.requests,
            reading.rcu,
            a.stats.rcu,
            a.stats.returned,
            a.wall.as_secs_f64(),
            if c.chosen { "  (chosen)" } else { "" }
        );
    }
    s
}

pub fn explain(plan: &Plan, opts: &ExecOptions, actual: Option<&Actual>) -> String {
    let mut s = String::from("plan\n");
    for line in plan.to_string().lines() {
        let _ = writeln!(s, "  {line}");
    }
    if !plan.candidates.is_empty() {
        let _ = writeln!(s, "  candidates (projection, rollup, estimate):");
        s.push_str(&crate::choice::describe(&plan.candidates, &plan.source_reason));
        let (requests, rcu) = plan.statistics_cost;
        if requests > 0 {
            let _ = writeln!(s, "  statistics read: {requests} requests, {rcu} RCU (not in the actual cost below)");
        }
        if let Some(at) = plan.written_at.and_then(chrono::DateTime::from_timestamp_millis) {
            let _ = writeln!(
                s,
                "  freshness: {} {} items last written at {} (records read after that flush are not in them yet)",
                plan.projection,
                plan.rollups(),
                at.format("%Y-%m-%d %H:%M:%S UTC")
            );
        }
    }
    for note in &plan.filter_notes {
        let _ = writeln!(s, "  filter:   {note}");
    }
    let consistency = if opts.consistent { "strongly consistent" } else { "eventually consistent" };
    let budget = opts.rcu_per_sec.map_or("none".to_string(), |r| format!("{r} RCU/s"));
    let _ = writeln!(
        s,
        "  strategy: {}, {consistency}, concurrency {}, budget {budget}",
        match (plan.way, matches!(opts.strategy, zigzag_core::query::Strategy::Auto(_))) {
            (crate::plan::Way::Naive, true) => "naive (faster than auto within the RCU allowance)".to_string(),
            _ => opts.strategy.name(),
        },
        opts.concurrency
    );
    let e = plan.least();
    let _ = writeln!(s, "estimate");
    let _ = writeln!(
        s,
        "  at least {} requests and {} RCU (${:.8}): one page per query; at most, every item of the \
         {} partitions' time ranges, plus one request per 1 MB page",
        e.min_requests,
        e.min_rcu,
        cost_usd(e.min_rcu),
        e.queries
    );
    if let Some(a) = actual {
        let _ = writeln!(s, "actual");
        let _ = writeln!(s, "  queries:  {}", a.queries);
        if a.whole > 0 {
            let kb = crate::execute::WHOLE_PARTITION_BYTES / 1024.0;
            let pct = crate::execute::WHOLE_BOX_SHARE * 100.0;
            let _ = writeln!(
                s,
                "  read whole: {} (by the statistics, a partition of at most {kb} KB or at least {pct}% inside the box)",
                a.whole
            );
        }
        if a.compacted_bins > 0 || a.rereads > 0 {
            let _ = writeln!(
                s,
                "  compacted: {} bin(s) read from their compacted partitions (one query each); read again {} time(s)",
                a.compacted_bins, a.rereads
            );
        }
        let _ = writeln!(s, "  requests: {}", a.stats.requests);
        let _ = writeln!(s, "  scanned:  {} items", a.stats.scanned);
        let _ = writeln!(s, "  returned: {} items ({} after exact filters)", a.stats.returned, a.kept);
        let _ = writeln!(s, "  RCU:      {} (as the store reported it)", a.stats.rcu);
        let _ = writeln!(s, "  retries:  {} (throttled, timed out or 5xx)", a.retries);
        let _ = writeln!(s, "  wall:     {:.3} s", a.wall.as_secs_f64());
        let _ = writeln!(
            s,
            "  cost:     ${:.8} at on-demand prices (${USD_PER_MILLION_RRU} per million RRU, us-east-1, since November 2024)",
            cost_usd(a.stats.rcu)
        );
    }
    s
}
