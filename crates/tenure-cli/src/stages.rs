//! Stage stamps of a handover, for the benchmark (`tenure-bench --only handover`): when
//! `TENURE_STAGE_STAMPS` names a file, every `tenure::stage` event (the library's and this
//! binary's, at debug level) is appended to it as one line
//! `STAGE MONO_NS PID PARENT NAME`, its time read from CLOCK_MONOTONIC as the event is
//! recorded, whatever the log level. Off (no layer, no file) unless the variable is set.
//!
//! The stages, in the order of a graceful handover: `exited` (the old leader saw its command's
//! tree gone), `release_sent` and `released` (its release statement sent and committed),
//! `woken` (a follower's change signal: NOTIFY, doorbell or bell), `campaign_sent` and
//! `acquired` (its campaign sent and the grant received), `spawning` and `started` (its
//! supervision set up and the command exec'd: the keeper reports the start).

use std::fs::File;
use std::io::Write;
use std::sync::Mutex;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::Context;
use tracing_subscriber::Layer;

/// The target of stage events.
pub(crate) const TARGET: &str = "tenure::stage";

/// The layer that writes stage stamps, if `TENURE_STAGE_STAMPS` asks for one.
pub(crate) fn layer<S>() -> Option<impl Layer<S>>
where
    S: Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    let path = std::env::var_os("TENURE_STAGE_STAMPS").filter(|p| !p.is_empty())?;
    let file = File::options().create(true).append(true).open(path).ok()?;
    let stamps = Stamps {
        file: Mutex::new(file),
        pid: std::process::id(),
        parent: std::os::unix::process::parent_id(),
    };
    Some(stamps.with_filter(Targets::new().with_target(TARGET, LevelFilter::DEBUG)))
}

struct Stamps {
    file: Mutex<File>,
    pid: u32,
    parent: u32,
}

/// The `stage` and `name` fields of an event.
#[derive(Default)]
struct Fields {
    stage: String,
    name: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "stage" => self.stage = value.to_string(),
            "name" => self.name = value.to_string(),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "stage" => self.stage = format!("{value:?}").trim_matches('"').to_string(),
            "name" => self.name = format!("{value:?}").trim_matches('"').to_string(),
            _ => {}
        }
    }
}

impl<S: Subscriber> Layer<S> for Stamps {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let at = mono_ns();
        let mut fields = Fields::default();
        event.record(&mut fields);
        if fields.stage.is_empty() {
            return;
        }
        let name = if fields.name.is_empty() {
            "-"
        } else {
            fields.name.as_str()
        };
        let line = format!(
            "{} {at} {} {} {}\n",
            fields.stage,
            self.pid,
            self.parent,
            name.replace(char::is_whitespace, "_")
        );
        // One write per line on an O_APPEND file: the lines of several processes never mix.
        if let Ok(mut file) = self.file.lock() {
            let _ = file.write_all(line.as_bytes());
        }
    }
}

/// CLOCK_MONOTONIC in nanoseconds (the clock of the benchmark's own stamps).
fn mono_ns() -> i64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map_or(0, |t| t.tv_sec() * 1_000_000_000 + t.tv_nsec())
}
