//! The lease table as operators read it (`ingest leases`): one row per
//! shard — parents, owner, checkpoint, lag, state — and one per lane.
//! Expiry is judged over time by each worker's own clock, so a one-shot
//! report shows each lane's beat instead of calling anyone dead.

use crate::items::{IntentState, Lane, ShardLease};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use std::collections::HashMap;

/// What a shard is doing, from the table alone.
pub fn shard_state(lease: &ShardLease, by_id: &HashMap<&str, &ShardLease>, lanes: &[Lane]) -> String {
    if lease.finished {
        return "finished".into();
    }
    let waiting: Vec<&str> = lease
        .parents
        .iter()
        .filter(|p| by_id.get(p.as_str()).is_some_and(|l| !l.finished))
        .map(String::as_str)
        .collect();
    if !waiting.is_empty() {
        return format!("waiting for {}", waiting.join(", "));
    }
    let in_flight = lanes.iter().find_map(|l| {
        let i = l.in_flight()?;
        i.ranges.iter().any(|r| r.shard == lease.shard).then_some((l.lane, i.k, i.state))
    });
    let base = match (&lease.owner, in_flight) {
        (None, _) => "unowned".to_string(),
        (Some(_), Some((lane, k, state))) => {
            let what = if state == IntentState::Open { "opening" } else { "writing" };
            format!("flushing ({what} lane {lane} flush {k})")
        }
        (Some(_), None) => "reading".to_string(),
    };
    match &lease.handoff {
        Some(to) => format!("{base}; handing over to {to}"),
        None => base,
    }
}

pub fn render(stream: &str, leases: &[ShardLease], lanes: &[Lane]) -> String {
    let by_id: HashMap<&str, &ShardLease> = leases.iter().map(|l| (l.shard.as_str(), l)).collect();
    let lane_of: HashMap<&str, u32> = lanes.iter().filter_map(|l| Some((l.owner.as_deref()?, l.lane))).collect();
    let mut shards = Table::new();
    shards.load_preset(UTF8_FULL_CONDENSED);
    shards.set_header(["shard", "parents", "owner (lane)", "lease", "checkpoint", "lag ms", "state"]);
    for l in leases {
        let owner = match &l.owner {
            Some(o) => match lane_of.get(o.as_str()) {
                Some(lane) => format!("{o} ({lane})"),
                None => format!("{o} (no lane: gone)"),
            },
            None => "-".into(),
        };
        shards.add_row([
            l.shard.clone(),
            if l.parents.is_empty() { "-".into() } else { l.parents.join(", ") },
            owner,
            l.lease.to_string(),
            l.checkpoint.to_string(),
            l.lag_ms.map_or("-".into(), |v| v.to_string()),
            shard_state(l, &by_id, lanes),
        ]);
    }
    let mut lane_table = Table::new();
    lane_table.load_preset(UTF8_FULL_CONDENSED);
    lane_table.set_header(["lane", "owner", "stream", "beat", "flushes", "layout", "intent"]);
    for l in lanes {
        let intent = match &l.intent {
            Some(i) if i.state != IntentState::Done => {
                format!("flush {} {:?} over {} shard(s)", i.k, i.state, i.ranges.len()).to_lowercase()
            }
            _ => "-".into(),
        };
        // Who beats it, when that is not its owner: a take or a release
        // between its two writes (or a crash there, which expiry repairs).
        let owner = match (&l.owner, &l.beater) {
            (o, b) if o == b => o.clone().unwrap_or_else(|| "(free)".into()),
            (o, b) => format!("{} (beaten by {})", o.as_deref().unwrap_or("(free)"), b.as_deref().unwrap_or("nobody")),
        };
        lane_table.add_row([
            l.lane.to_string(),
            owner,
            l.stream.clone(),
            l.beat.to_string(),
            l.flush.to_string(),
            // The layout version its owner writes (`adoption.rs`).
            match l.layout.version {
                0 => "-".into(),
                v => format!("v{v}"),
            },
            intent,
        ]);
    }
    let finished = leases.iter().filter(|l| l.finished).count();
    format!(
        "stream {stream}: {} shards ({finished} finished)\n{shards}\nlanes (writers of the aggregate table, all streams)\n{lane_table}\n",
        leases.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::items::{Intent, ShardRange};
    use zigzag_model::Position;

    fn lease(shard: &str, owner: Option<&str>, parents: &[&str], finished: bool) -> ShardLease {
        ShardLease {
            seal: 0,
            shard: shard.into(),
            lag_ms: Some(120),
            at_ms: None,
            owner: owner.map(String::from),
            lease: 2,
            parents: parents.iter().map(|p| p.to_string()).collect(),
            checkpoint: Some(Position::at(7)).into(),
            finished,
            handoff: None,
            start_ms: None,
            owed: None,
            layout: None,
        }
    }

    #[test]
    fn states_name_what_each_shard_waits_for() {
        let leases = vec![
            lease("p", Some("w1"), &[], false),
            lease("c", None, &["p"], false),
            lease("old", None, &[], true),
            lease("s", Some("w2"), &[], false),
        ];
        let range = ShardRange {
            seal: 0,
            shard: "s".into(),
            lease: 2,
            from: crate::Checkpoint::none(),
            sets: None,
            of: 0,
            first: None,
            to: Position::at(9),
            ends: false,
            behind_ms: None,
            owed: None,
            layout: String::new(),
        };
        let lanes = vec![
            Lane {
                seal: 0,
                layout: Default::default(),
                wrote_to_ms: 0,
                lane: 0,
                owner: Some("w1".into()),
                beater: Some("w1".into()),
                stream: "st".into(),
                beat: 4,
                flush: 3,
                intent: None,
            },
            Lane {
                seal: 0,
                layout: Default::default(),
                wrote_to_ms: 0,
                lane: 1,
                owner: Some("w2".into()),
                beater: Some("w2".into()),
                stream: "st".into(),
                beat: 9,
                flush: 5,
                intent: Some(Intent { k: 6, state: IntentState::Valid, ranges: vec![range], layout: "L".into() }),
            },
        ];
        let by_id: HashMap<&str, &ShardLease> = leases.iter().map(|l| (l.shard.as_str(), l)).collect();
        let states: Vec<String> = leases.iter().map(|l| shard_state(l, &by_id, &lanes)).collect();
        assert_eq!(states, ["reading", "waiting for p", "finished", "flushing (writing lane 1 flush 6)"]);
        let text = render("st", &leases, &lanes);
        assert!(text.contains("w1 (0)") && text.contains("flush 6 valid over 1 shard(s)"), "{text}");
    }
}
