//! Which calls to disturb (rules, a plan), and each rule's reproducible draws.

use super::Fault;
use hyper::StatusCode;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::io;

/// Which calls to disturb, how often, and how.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Matches calls whose `X-Amz-Target` starts with this: a whole operation
    /// (`DynamoDB_20120810.UpdateItem`) or a whole service (`Kinesis_20131202.`). Empty matches
    /// every call, including those without a target. The first matching rule decides.
    pub target_prefix: String,
    /// Probability (0..=1) that a matching call gets a fault.
    pub share: f64,
    /// The faults to apply, taken in turn (round-robin over this rule's injections), so a test sees
    /// every listed shape and can predict their counts.
    pub faults: Vec<Fault>,
    /// Stop injecting after this many faults (the draws go on, so the sequence stays the same).
    pub max_injections: Option<u64>,
}

impl Rule {
    pub fn new(target_prefix: impl Into<String>, share: f64, faults: Vec<Fault>) -> Rule {
        Rule { target_prefix: target_prefix.into(), share, faults, max_injections: None }
    }

    pub fn max_injections(mut self, max: u64) -> Rule {
        self.max_injections = Some(max);
        self
    }

    fn validate(&self) -> io::Result<()> {
        if !(0.0..=1.0).contains(&self.share) {
            return Err(invalid(format!("rule {:?}: share {} is not within 0..=1", self.target_prefix, self.share)));
        }
        if self.share > 0.0 && self.faults.is_empty() {
            return Err(invalid(format!("rule {:?}: a share above 0 needs at least one fault", self.target_prefix)));
        }
        for fault in &self.faults {
            if let Fault::Error { status, .. } | Fault::ApplyThenError { status, .. } = fault {
                if StatusCode::from_u16(*status).is_err() {
                    return Err(invalid(format!("rule {:?}: invalid HTTP status {status}", self.target_prefix)));
                }
            }
        }
        Ok(())
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// The rules of a proxy with the seed of their random draws.
#[derive(Debug, Clone, Default)]
pub struct FaultPlan {
    pub rules: Vec<Rule>,
    pub seed: u64,
}

impl FaultPlan {
    pub fn new(seed: u64) -> FaultPlan {
        FaultPlan { rules: Vec::new(), seed }
    }

    pub fn rule(mut self, rule: Rule) -> FaultPlan {
        self.rules.push(rule);
        self
    }
}

/// A rule with the state of its draws.
pub(super) struct RuleState {
    pub(super) rule: Rule,
    pub(super) rng: ChaCha8Rng,
    pub(super) injections: u64,
}

pub(super) fn rule_states(rules: Vec<Rule>, seed: u64) -> io::Result<Vec<RuleState>> {
    rules
        .into_iter()
        .enumerate()
        .map(|(i, rule)| {
            rule.validate()?;
            // One independent stream per rule: calls of one operation do not shift the draws of
            // another, whose call count may depend on timing (e.g. GetRecords polling).
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            rng.set_stream(i as u64);
            Ok(RuleState { rule, rng, injections: 0 })
        })
        .collect()
}
