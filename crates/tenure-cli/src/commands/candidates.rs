//! `tenure candidates NAME`: who campaigns for NAME (and who only follows it), best first.

use super::{check_global, check_name};
use crate::cli::{CandidatesArgs, Global};
use crate::database;
use crate::exit::{Outcome, OK};
use crate::output::{print_json, print_table};
use crate::roster::RosterJson;

pub(super) async fn candidates(global: &Global, args: CandidatesArgs) -> Outcome {
    check_global(global)?;
    check_name(&args.name)?;
    let store = database::connect(global).await?;
    let roster = RosterJson::read(&store, &args.name).await?;
    if global.json {
        print_json(&roster);
    } else if roster.candidates.is_empty() {
        println!("{}: no candidates", args.name);
    } else {
        print_table(
            &[
                "CANDIDATE",
                "PRIORITY",
                "ROLE",
                "LIVE",
                "LAST SEEN",
                "METADATA",
            ],
            &roster.rows(),
        );
    }
    Ok(OK)
}
