//! The seam's batch of lease operations (`Tx::leases`) in a transaction of its own, for the
//! model-based test (feature `testing`): what a layer sends in one batch — renewals, releases
//! and takes of many leases — is checked against the model operation by operation, as
//! `Backend::apply`'s answers are.

use super::tx::{Body, Outcome, Tx};
use super::{Applied, Backend};
use crate::error::Result;
use crate::model::Op;

/// Runs `ops` (each name once) as one `Tx::leases` call in one transaction on `backend`: the
/// answers in the order of `ops`.
///
/// # Errors
/// Database errors (then nothing of the batch was committed).
pub async fn apply_batch(
    backend: &dyn Backend,
    ops: &[(&str, Op)],
    actor: &str,
) -> Result<Vec<Applied>> {
    let mut body = Batch {
        ops,
        actor,
        applied: Vec::new(),
    };
    backend.transaction(&mut body).await?;
    Ok(body.applied)
}

struct Batch<'a> {
    ops: &'a [(&'a str, Op)],
    actor: &'a str,
    applied: Vec<Applied>,
}

#[async_trait::async_trait]
impl Body for Batch<'_> {
    fn writes(&self) -> bool {
        true
    }

    fn op(&self) -> &'static str {
        "batch"
    }

    async fn run(&mut self, tx: &mut dyn Tx) -> Result<Outcome> {
        self.applied = tx.leases(self.ops, self.actor).await?;
        Ok(Outcome::Commit)
    }
}
