//! The etcd room's flags of `tenure serve`.

use super::Member;
use clap::Args;
use std::net::SocketAddr;

/// What gRPC itself accepts above the request limit (etcd's `grpcOverheadBytes`): a message
/// larger than both is refused before it is decoded.
pub(crate) const GRPC_OVERHEAD_BYTES: usize = 512 * 1024;

/// How many revisions of history the log keeps by default.
pub(crate) const DEFAULT_RETENTION: u32 = 10_000;

/// How many batches the watch feed keeps for a slow watcher by default.
pub(crate) const DEFAULT_WATCH_BUFFER: u32 = 1024;

/// The etcd room's flags of `tenure serve`.
#[derive(Debug, Args)]
#[command(next_help_heading = "etcd API")]
pub(crate) struct EtcdArgs {
    /// Serve etcd's v3 API on ADDR: gRPC (plaintext HTTP/2) and etcd's JSON gateway
    /// (POST /v3/kv/range …, /version) on the same port. Every `tenure serve` on one database
    /// is a member of the same etcd. Like --listen: bind beyond loopback only on purpose.
    #[arg(long, value_name = "ADDR")]
    pub etcd_listen: Option<SocketAddr>,
    /// This member's name in `etcdctl member list` (etcd's --name). Default: the candidate id.
    #[arg(long, value_name = "NAME", requires = "etcd_listen")]
    pub etcd_name: Option<String>,
    /// The client URLs this member publishes in the member list (etcd's
    /// --advertise-client-urls; comma-separated or repeated), which clients such as Patroni
    /// then connect to. Default: http://ADDR of --etcd-listen.
    #[arg(
        long,
        value_name = "URL",
        value_delimiter = ',',
        requires = "etcd_listen"
    )]
    pub etcd_advertise_client_urls: Vec<String>,
    /// Keep the last N revisions of history (what watchers replay and past reads see) and
    /// compact the older ones every minute, as etcd's --auto-compaction-mode=revision
    /// --auto-compaction-retention=N; 0: never (clients then call Compact themselves).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_RETENTION)]
    pub etcd_auto_compaction_retention: u32,
    /// How many batches of new revisions the watch feed keeps for a watcher whose client reads
    /// slowly; one that falls further behind reads what it missed from the log (a read of the
    /// database per such watcher) and joins the feed again.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_WATCH_BUFFER,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub etcd_watch_buffer: u32,
}

impl EtcdArgs {
    /// This server as an etcd member listening on `bound`, named `default_name` unless
    /// `--etcd-name` says otherwise.
    ///
    /// # Errors
    /// A name or client URL etcd would refuse (the message names it).
    pub(crate) fn member(&self, bound: SocketAddr, default_name: &str) -> Result<Member, String> {
        let name = self.etcd_name.as_deref().unwrap_or(default_name);
        if name.is_empty() || name.chars().any(char::is_control) {
            return Err(format!(
                "--etcd-name {name:?}: expected a non-empty name without control characters"
            ));
        }
        let urls = if self.etcd_advertise_client_urls.is_empty() {
            vec![format!("http://{bound}")]
        } else {
            self.etcd_advertise_client_urls.clone()
        };
        for url in &urls {
            let rest = url
                .strip_prefix("http://")
                .or_else(|| url.strip_prefix("https://"));
            if rest.is_none_or(|rest| rest.is_empty() || rest.contains(char::is_whitespace)) {
                return Err(format!(
                    "--etcd-advertise-client-urls {url:?}: expected a URL such as http://10.0.0.5:2379"
                ));
            }
        }
        Ok(Member::new(name.to_string(), urls))
    }
}
