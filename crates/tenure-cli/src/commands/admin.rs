//! `tenure demote|handover|pause|resume`: operator actions, recorded in history with the actor.
//! `pause` and `resume` of a live spreading group's name act on all its shards (`group_admin`).

use super::group_admin::{act, group_of};
use super::{check_global, check_name};
use crate::cli::{DemoteArgs, Global, HandoverArgs, NameArg};
use crate::database;
use crate::exit::{Outcome, OK};
use crate::output::{print_json, AdminAnswer};
use tenure::candidates::{Candidates, Handover};
use tenure::{Applied, Effect};

/// Who is acting, for the history: `tenure-cli:<user>@<host>`.
fn actor() -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "unknown".into());
    let host = hostname::get()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "host".into());
    format!("tenure-cli:{user}@{host}")
}

fn report(global: &Global, action: &'static str, applied: &Applied, said: &str) -> Outcome {
    let answer = AdminAnswer::new(action, applied);
    if global.json {
        print_json(&answer);
    } else {
        println!("{said}");
        if let Some(lease) = &answer.lease {
            println!("{}", lease.line());
        }
    }
    Ok(OK)
}

pub(super) async fn demote(global: &Global, args: DemoteArgs) -> Outcome {
    check_global(global)?;
    check_name(&args.name)?;
    let store = database::connect(global).await?;
    let applied = store.demote(&args.name, args.now, &actor()).await?;
    // Said once it happened, so that a refused demote prints only its one-line error.
    if args.now && applied.effect != Effect::NoChange {
        tracing::warn!(
            "--now ended the lease at once: unsafe unless the leader's writes are fenced"
        );
    }
    let said = match (&applied.effect, args.now) {
        (Effect::NoChange, _) => format!("{}: nobody to demote", args.name),
        (_, false) => format!(
            "{}: demoted; the old leader stops at its next renew, nobody starts before the lease expires",
            args.name
        ),
        (_, true) => format!("{}: demoted immediately", args.name),
    };
    report(global, "demote", &applied, &said)
}

pub(super) async fn handover(global: &Global, args: HandoverArgs) -> Outcome {
    check_global(global)?;
    check_name(&args.name)?;
    tenure::validate::candidate(&args.candidate)?;
    let store = database::connect(global).await?;
    let how = Handover {
        immediate: args.now,
        unregistered: args.unregistered,
    };
    let applied = Candidates::new(store)
        .handover(&args.name, &args.candidate, how, &actor())
        .await?;
    if applied.effect == Effect::Forced {
        tracing::warn!(
            "--now installed the new leader at once: the old one may overlap for up to one renew interval; unsafe unless writes are fenced"
        );
    }
    let said = match &applied.effect {
        Effect::NoChange => format!(
            "{}: {} already leads or is already the handover target",
            args.name, args.candidate
        ),
        Effect::Forced => format!(
            "{}: {} installed with a new term",
            args.name, args.candidate
        ),
        _ => format!(
            "{}: handover to {} requested; the leader steps down at its next renew, and \
             priorities do not hand {}'s tenure back",
            args.name, args.candidate, args.candidate
        ),
    };
    report(global, "handover", &applied, &said)
}

pub(super) async fn pause(global: &Global, args: NameArg) -> Outcome {
    check_global(global)?;
    check_name(&args.name)?;
    let store = database::connect(global).await?;
    if let Some(group) = group_of(&store, &args.name).await? {
        return act(global, store, &args.name, group, true, &actor()).await;
    }
    let applied = store.pause(&args.name, &actor()).await?;
    let said = match applied.effect {
        Effect::NoChange => format!("{}: already paused", args.name),
        _ => format!(
            "{}: paused; the leader steps down at its next renew and nobody acquires until `tenure resume`",
            args.name
        ),
    };
    report(global, "pause", &applied, &said)
}

pub(super) async fn resume(global: &Global, args: NameArg) -> Outcome {
    check_global(global)?;
    check_name(&args.name)?;
    let store = database::connect(global).await?;
    if let Some(group) = group_of(&store, &args.name).await? {
        return act(global, store, &args.name, group, false, &actor()).await;
    }
    let applied = store.resume(&args.name, &actor()).await?;
    let said = match applied.effect {
        Effect::NoChange => format!("{}: was not paused", args.name),
        _ => format!("{}: resumed", args.name),
    };
    report(global, "resume", &applied, &said)
}
