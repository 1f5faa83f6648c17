//! A tracing layer that turns the elector's `campaign sent` / `campaign answered` debug events
//! and its `campaign failed` warnings into history events.

use crate::event::{EventLog, Kind};
use std::sync::Arc;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

pub(super) struct Campaigns(pub Arc<EventLog>);

#[derive(Default)]
struct Fields {
    message: String,
    effect: String,
    error: String,
    term: u64,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "effect" {
            self.effect = value.to_string();
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "term" {
            self.term = value;
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            // `error = %e`: the Debug of a Display wrapper is the Display.
            "error" => self.error = format!("{value:?}"),
            _ => {}
        }
    }
}

impl<S: Subscriber> Layer<S> for Campaigns {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        if !event.metadata().target().starts_with("tenure::elector") {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        match fields.message.as_str() {
            "campaign sent" => self.0.record(Kind::CampaignSent),
            "campaign answered" => self.0.record(Kind::CampaignAnswered {
                effect: fields.effect,
                term: fields.term,
            }),
            "campaign failed" => self.0.record(Kind::CampaignFailed {
                error: fields.error,
            }),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn failed_campaigns_are_recorded_with_their_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("n.jsonl");
        let log = Arc::new(EventLog::create(&path, "n1.1").unwrap());
        let subscriber = tracing_subscriber::registry()
            .with(
                Campaigns(log).with_filter(
                    tracing_subscriber::filter::Targets::new()
                        .with_target("tenure", tracing::Level::DEBUG),
                ),
            )
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::sink)
                    .with_filter(tracing_subscriber::filter::LevelFilter::INFO),
            );
        tracing::subscriber::with_default(subscriber, || {
            let e = std::io::Error::other("the database is read-only (x)");
            tracing::debug!(target: "tenure::elector::task", name = %"a", "campaign sent");
            tracing::warn!(target: "tenure::elector::task", name = %"a", error = %e, "campaign failed");
        });
        let kinds: Vec<Kind> = crate::event::read(&path)
            .unwrap()
            .into_iter()
            .map(|e| e.kind)
            .collect();
        assert_eq!(
            kinds,
            vec![
                Kind::CampaignSent,
                Kind::CampaignFailed {
                    error: "the database is read-only (x)".into()
                }
            ]
        );
    }
}
