//! The keys as they were at a past revision, from the keys as they are and the log of what
//! changed since: every event row keeps the key's state before it, so the first event of a key
//! after revision `r` says what the key was at `r`, and a key with no event after `r` is as it
//! is now. The events after `r` are never compacted while `r` is at or above the floor, so a
//! past read needs no older row.

use crate::etcd::proto::mvccpb::{Event, KeyValue};
use std::collections::BTreeMap;

/// The keys at a past revision `r`: `now`, the keys of a span as they are (any order), and
/// `after`, the span's events with a revision above `r` in revision order (each with its
/// `prev_kv`: `None` where the key did not exist before it). In key order.
pub(crate) fn state_at(now: Vec<KeyValue>, after: &[Event]) -> Vec<KeyValue> {
    let mut then: BTreeMap<Vec<u8>, Option<KeyValue>> = BTreeMap::new();
    for event in after {
        if let Some(kv) = &event.kv {
            then.entry(kv.key.clone())
                .or_insert_with(|| event.prev_kv.clone());
        }
    }
    let mut keys: BTreeMap<Vec<u8>, KeyValue> = now
        .into_iter()
        .filter(|kv| !then.contains_key(&kv.key))
        .map(|kv| (kv.key.clone(), kv))
        .collect();
    keys.extend(then.into_iter().filter_map(|(k, kv)| Some((k, kv?))));
    keys.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::etcd::proto::mvccpb::event::EventType;

    use super::super::kv;

    fn event(kind: EventType, kv: KeyValue, prev: Option<KeyValue>) -> Event {
        Event {
            r#type: kind as i32,
            kv: Some(kv),
            prev_kv: prev,
        }
    }

    #[test]
    fn past_states_come_from_the_first_later_event() {
        // rev 2: put a=1; rev 3: put b=1; rev 4: put a=2; rev 5: delete b; rev 6: put c=1.
        let a1 = kv("a", "1", 2, 2, 1);
        let b1 = kv("b", "1", 3, 3, 1);
        let a2 = kv("a", "2", 2, 4, 2);
        let c1 = kv("c", "1", 6, 6, 1);
        let log = [
            event(EventType::Put, a1.clone(), None),
            event(EventType::Put, b1.clone(), None),
            event(EventType::Put, a2.clone(), Some(a1.clone())),
            event(EventType::Delete, kv("b", "", 0, 5, 0), Some(b1.clone())),
            event(EventType::Put, c1.clone(), None),
        ];
        let now = vec![c1.clone(), a2.clone()];
        let at = |r: i64| {
            let after: Vec<Event> = log
                .iter()
                .filter(|e| e.kv.as_ref().unwrap().mod_revision > r)
                .cloned()
                .collect();
            state_at(now.clone(), &after)
        };
        assert_eq!(at(1), vec![]);
        assert_eq!(at(2), vec![a1.clone()]);
        assert_eq!(at(3), vec![a1.clone(), b1.clone()]);
        assert_eq!(at(4), vec![a2.clone(), b1.clone()]);
        assert_eq!(at(5), vec![a2.clone()]);
        assert_eq!(at(6), vec![a2, c1]);
    }

    proptest::proptest! {
        /// For any run of puts and deletes, the keys at every revision are what a copy taken
        /// at that revision holds.
        #[test]
        fn every_past_state_is_the_snapshot(
            ops in proptest::collection::vec((0u8..4, proptest::bool::ANY, 0u8..3), 0..40)
        ) {
            use std::collections::BTreeMap;
            let mut keys: BTreeMap<Vec<u8>, KeyValue> = BTreeMap::new();
            let mut snapshots = vec![keys.clone()];
            let mut log = Vec::new();
            for (at, (k, is_put, v)) in ops.iter().enumerate() {
                let rev = i64::try_from(at).unwrap() + 1;
                let key = vec![b'k', *k];
                let prev = keys.get(&key).cloned();
                if *is_put {
                    let kv = KeyValue {
                        key: key.clone(),
                        value: vec![*v],
                        create_revision: prev.as_ref().map_or(rev, |p| p.create_revision),
                        mod_revision: rev,
                        version: prev.as_ref().map_or(0, |p| p.version) + 1,
                        lease: 0,
                    };
                    keys.insert(key, kv.clone());
                    log.push(event(EventType::Put, kv, prev));
                } else if let Some(prev) = keys.remove(&key) {
                    let gone = KeyValue { key, mod_revision: rev, ..KeyValue::default() };
                    log.push(event(EventType::Delete, gone, Some(prev)));
                }
                snapshots.push(keys.clone());
            }
            for (r, snapshot) in snapshots.iter().enumerate() {
                let r = i64::try_from(r).unwrap();
                let after: Vec<Event> = log
                    .iter()
                    .filter(|e| e.kv.as_ref().unwrap().mod_revision > r)
                    .cloned()
                    .collect();
                let expected: Vec<KeyValue> = snapshot.values().cloned().collect();
                proptest::prop_assert_eq!(state_at(keys.values().cloned().collect(), &after), expected);
            }
        }
    }
}
