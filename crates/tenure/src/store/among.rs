//! A campaign with a standing among given rivals, as one transaction (`testing` feature: the
//! model-based test's door to `Tx::lease` with a standing).

use crate::backend::tx::{Body, Outcome, Tx};
use crate::error::Result;
use crate::model::{DbTime, Op, Standing};
use crate::records::Applied;

pub(super) struct Among<'a> {
    pub name: &'a str,
    pub op: &'a Op,
    pub actor: &'a str,
    pub standing: &'a Standing<'a>,
    pub applied: Option<Applied>,
}

#[async_trait::async_trait]
impl Body for Among<'_> {
    fn writes(&self) -> bool {
        true
    }

    fn op(&self) -> &'static str {
        "campaign"
    }

    async fn run(&mut self, tx: &mut dyn Tx) -> Result<Outcome> {
        self.applied = None;
        let applied = tx
            .lease(self.name, self.op, self.actor, Some(self.standing))
            .await?;
        self.applied = Some(applied);
        Ok(Outcome::Commit)
    }

    fn db_now(&self) -> Option<DbTime> {
        self.applied.as_ref().map(|a| a.now)
    }
}
