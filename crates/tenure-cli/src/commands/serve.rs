//! `tenure serve`: the HTTP service (see `crate::serve`), with an elector per `--campaign`
//! name as a sidecar. SIGINT or SIGTERM: the electors release (so another node takes over at
//! once), blocking queries answer, and the server stops after the requests in flight.

use super::{check_global, check_lease, check_name, stand};
use crate::cli::{Global, ServeArgs};
use crate::database;
use crate::exit::{Failure, Outcome, OK};
use crate::serve::{self, AppState, Campaign, Shared, Token, Watcher};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tenure::Elector;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

/// How long the requests in flight get to finish after a signal.
const DRAIN: Duration = Duration::from_secs(5);

pub(super) async fn serve(global: &Global, args: ServeArgs) -> Outcome {
    check_global(global)?;
    let mut names = BTreeSet::new();
    for name in &args.campaign {
        check_name(name)?;
        if !names.insert(name.clone()) {
            return Err(Failure::usage(format!(
                "--campaign {name:?} is given more than once"
            )));
        }
    }
    if args.observe && names.is_empty() {
        return Err(Failure::usage(
            "--observe needs at least one --campaign NAME (the names to observe)",
        ));
    }
    let timing = check_lease(&args.lease)?;
    #[cfg(feature = "consul")]
    {
        if let Some(node) = &args.consul.node {
            check_name(node)?;
        }
        if args.consul.consul_reads_need_token && args.token_file.is_none() {
            return Err(Failure::usage(
                "--consul-reads-need-token needs --token-file (the token the reads must present)",
            ));
        }
        let given = args.consul.session_ttl_min;
        if let Some(min) =
            given.filter(|min| *min < timing.db_timeout() || *min > tenure::consul::MAX_SESSION_TTL)
        {
            return Err(Failure::usage(format!(
                "--session-ttl-min {} is out of range: at least the database timeout ({}, \
                 --ttl/5 by default: a renewal that takes all of it must still land before the \
                 session ends) and at most 24h",
                humantime::format_duration(min),
                humantime::format_duration(timing.db_timeout())
            )));
        }
    }
    if let Some(m) = &args.metadata {
        tenure::validate::metadata(m)?;
    }
    if args.poll_interval < Duration::from_millis(10) {
        return Err(Failure::usage(format!(
            "--poll-interval {:?} is too short: at least 10ms",
            args.poll_interval
        )));
    }
    let token = match &args.token_file {
        Some(path) => Some(Token::read(path).map_err(Failure::usage)?),
        None => None,
    };
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let metrics = crate::watching::install()?;
    serve::metrics::describe();
    crate::watching::listen(&args.watching).await?;

    let store = database::open(global, !global.no_create, Some(timing.db_timeout())).await?;
    for name in &args.campaign {
        tenure::spread::check_no_group(&store, name).await?;
    }
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|e| Failure::usage(format!("cannot listen on {}: {e}", args.listen)))?;
    let address = listener.local_addr()?;
    if !address.ip().is_loopback() {
        tracing::warn!(%address, "listening beyond loopback: reads need no token");
    }
    let watcher = Watcher::spawn(store.clone(), args.poll_interval);
    if !watcher.first_read(store.timeout() * 2).await {
        tracing::warn!("the first read of the leases failed; /health says so until one succeeds");
    }

    // One candidate id for all the names, so that an operator sees one process.
    let candidate = args
        .lease
        .candidate
        .clone()
        .unwrap_or_else(tenure::validate::default_candidate_id);
    let mut electors = Vec::new();
    let mut campaigns = BTreeMap::new();
    for name in names {
        let mut builder = stand(Elector::builder(store.clone(), &name), &args.standing)
            .timing(timing)
            .candidate(&candidate);
        if args.observe {
            builder = builder.observe();
        }
        if let Some(m) = &args.metadata {
            builder = builder.metadata(m);
        }
        let elector = builder.spawn()?;
        tracing::info!(%name, candidate = %elector.candidate(), "campaigning");
        campaigns.insert(
            name,
            Campaign {
                candidate: elector.candidate().to_string(),
                role: elector.role(),
            },
        );
        electors.push(elector);
    }

    #[cfg(feature = "consul")]
    let consul = {
        let node = args
            .consul
            .node
            .clone()
            .unwrap_or_else(|| candidate.clone());
        let mut consul = serve::ConsulNode::spawn(
            store.clone(),
            node.clone(),
            timing.ttl(),
            args.poll_interval.min(Duration::from_millis(250)),
            args.consul.session_ttl_min(),
        );
        consul.reads_need_token = args.consul.consul_reads_need_token;
        tracing::info!(%node, "Consul API on /v1/kv and /v1/session");
        consul
    };
    #[cfg(feature = "etcd")]
    let etcd = start_etcd(
        &args,
        global,
        &store,
        &candidate,
        token.clone(),
        timing.ttl(),
    )
    .await?;
    let state = AppState::new(Shared {
        store,
        watcher,
        campaigns,
        token,
        metrics: Some(metrics),
        max_wait: args.max_wait,
        #[cfg(feature = "consul")]
        consul: consul.clone(),
    });
    if global.quiet == 0 {
        eprintln!("tenure: listening on http://{address}");
    }
    let (stop, stopped) = watch::channel(false);
    let mut server = tokio::spawn(serve::serve(listener, state, stop_signal(stopped.clone())));
    #[cfg(feature = "etcd")]
    let mut etcd = etcd.map(|(listener, room)| {
        tokio::spawn(serve::etcd::serve(
            listener,
            room,
            stop_signal(stopped.clone()),
        ))
    });
    #[cfg(not(feature = "etcd"))]
    let mut etcd: Option<tokio::task::JoinHandle<std::io::Result<()>>> = None;

    let early = tokio::select! {
        _ = interrupt.recv() => None,
        _ = terminate.recv() => None,
        result = &mut server => Some(result),
        result = room_ended(&mut etcd) => Some(result),
    };
    if let Some(result) = early {
        shutdown(electors).await;
        return match result {
            Ok(Ok(())) => Ok(OK),
            Ok(Err(e)) => Err(Failure::from(e)),
            Err(e) => Err(Failure::new(crate::exit::INTERNAL, e.to_string())),
        };
    }
    tracing::info!("stopping: releasing the campaigns, answering the waiting requests");
    #[cfg(feature = "consul")]
    consul.leave().await;
    let _ = stop.send(true);
    shutdown(electors).await;
    if let Some(etcd) = etcd.as_mut() {
        if tokio::time::timeout(DRAIN, etcd).await.is_err() {
            tracing::warn!("etcd calls still in flight after {DRAIN:?}; stopping anyway");
        }
    }
    match tokio::time::timeout(DRAIN, &mut server).await {
        Ok(Ok(Ok(()))) => Ok(OK),
        Ok(Ok(Err(e))) => Err(Failure::from(e)),
        Ok(Err(e)) => Err(Failure::new(crate::exit::INTERNAL, e.to_string())),
        Err(_) => {
            tracing::warn!("requests still in flight after {DRAIN:?}; stopping anyway");
            server.abort();
            Ok(OK)
        }
    }
}

/// Completes when `stop` turns true (or its sender is gone).
async fn stop_signal(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// The end of a room's own server, if it has one; never otherwise.
async fn room_ended(
    room: &mut Option<tokio::task::JoinHandle<std::io::Result<()>>>,
) -> Result<std::io::Result<()>, tokio::task::JoinError> {
    match room {
        Some(task) => task.await,
        None => std::future::pending().await,
    }
}

/// With `--etcd-listen`: its listener, bound, and the etcd room of this server (its upkeep
/// and watch hub running).
#[cfg(feature = "etcd")]
async fn start_etcd(
    args: &ServeArgs,
    global: &Global,
    store: &tenure::Store,
    candidate: &str,
    token: Option<Token>,
    member_ttl: Duration,
) -> Result<Option<(TcpListener, serve::etcd::Room)>, Failure> {
    let flags = &args.etcd;
    let Some(address) = flags.etcd_listen else {
        return Ok(None);
    };
    let listener = TcpListener::bind(address)
        .await
        .map_err(|e| Failure::usage(format!("cannot listen on {address} (--etcd-listen): {e}")))?;
    let address = listener.local_addr()?;
    if !address.ip().is_loopback() && token.is_none() {
        tracing::warn!(%address, "etcd API listening beyond loopback without --token-file: every call is allowed");
    }
    let member = flags.member(address, candidate).map_err(Failure::usage)?;
    tracing::info!(name = %member.name, id = %format!("{:x}", member.id), "etcd API member");
    let settings = serve::etcd::Settings {
        member,
        cluster_id: serve::etcd::cluster_id(&global.table_prefix),
        token,
        poll: args.poll_interval,
        member_ttl,
        retention: flags.etcd_auto_compaction_retention,
        watch_buffer: usize::try_from(flags.etcd_watch_buffer).unwrap_or(usize::MAX),
    };
    let room = serve::etcd::Room::start(store.clone(), settings).await;
    if global.quiet == 0 {
        eprintln!("tenure: etcd API on http://{address}");
    }
    Ok(Some((listener, room)))
}

/// Releases every campaign at once (each elector releases if it leads).
async fn shutdown(electors: Vec<Elector>) {
    let mut all = tokio::task::JoinSet::new();
    for elector in electors {
        all.spawn(elector.shutdown());
    }
    while all.join_next().await.is_some() {}
}
