//! Change signals by topic: what a committed transaction tells the other processes of the
//! database about (PostgreSQL's NOTIFY, SQLite's doorbell), and what a watcher waits for.
//!
//! A signal is a hint to look again, never the data: a watcher reads the rows after it. One
//! encoding on the wire (a NOTIFY payload, a doorbell line) serves every engine: a lease's
//! topic is its name (names never hold control characters), a layer's is `\u{1}` and the
//! layer's name, and "anything may have changed" (a listener that may have missed signals) is
//! `\0`.

/// What a change signal is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topic<'a> {
    /// A lease: its followers and watchers look again.
    Lease(&'a str),
    /// A layer's own rows (its keys, sessions, revisions): that layer's
    /// watchers look again. A layer names itself with a constant of its own.
    Layer(&'a str),
    /// Anything may have changed (a listener reconnected, a doorbell was truncated): everyone
    /// looks again.
    Any,
}

/// The wire form of [`Topic::Any`].
pub(crate) const ANY: &str = "\0";
/// What starts the wire form of a [`Topic::Layer`].
const LAYER: char = '\u{1}';

impl<'a> Topic<'a> {
    /// The topic a wire payload carries.
    pub fn decode(payload: &'a str) -> Topic<'a> {
        if payload == ANY {
            Topic::Any
        } else if let Some(layer) = payload.strip_prefix(LAYER) {
            Topic::Layer(layer)
        } else {
            Topic::Lease(payload)
        }
    }

    /// Its wire payload.
    pub fn encode(&self) -> String {
        match self {
            Topic::Lease(name) => (*name).to_string(),
            Topic::Layer(layer) => format!("{LAYER}{layer}"),
            Topic::Any => ANY.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Topic;

    #[test]
    fn topics_round_trip_and_never_mix() {
        for topic in [
            Topic::Lease("billing"),
            Topic::Lease(""),
            Topic::Layer("kv"),
            Topic::Layer("revisions"),
            Topic::Any,
        ] {
            assert_eq!(Topic::decode(&topic.encode()), topic);
        }
        // A lease named like a layer is still a lease (names hold no control characters, so
        // no lease's payload starts with the layer mark).
        assert_eq!(Topic::decode("kv"), Topic::Lease("kv"));
        assert_ne!(Topic::Layer("a").encode(), Topic::Lease("a").encode());
    }
}
