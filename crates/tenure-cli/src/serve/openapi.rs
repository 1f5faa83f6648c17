//! `/openapi.json`: the house's part of the API description with the parts of the rooms this
//! build compiles in, merged — so the document describes exactly the routes this server has.

use serde_json::{Map, Value};

/// The house's part: the document's head, `/health`, `/metrics` and `/openapi.json`.
const HOUSE: &str = include_str!("openapi.json");

/// The document for the rooms whose parts are `rooms` (each a JSON object with `tags`,
/// `paths` and `components`).
pub(super) fn document(rooms: &[&str]) -> Value {
    let mut doc: Value = serde_json::from_str(HOUSE).expect("the house's openapi.json is JSON");
    for room in rooms {
        let part: Value = serde_json::from_str(room).expect("a room's openapi.json is JSON");
        merge(&mut doc, part);
    }
    doc
}

/// Adds `part` to `doc`: its tags after the document's, its paths and each kind of component
/// beside the document's (a component both describe is the same; the first stays).
fn merge(doc: &mut Value, part: Value) {
    let Value::Object(part) = part else { return };
    for (key, value) in part {
        match (doc.get_mut(&key), value) {
            (Some(Value::Array(tags)), Value::Array(more)) => tags.extend(more),
            (Some(Value::Object(have)), Value::Object(more)) if key == "paths" => {
                have.extend(more);
            }
            (Some(Value::Object(kinds)), Value::Object(more)) if key == "components" => {
                for (kind, items) in more {
                    let Value::Object(items) = items else {
                        continue;
                    };
                    let into = kinds
                        .entry(kind)
                        .or_insert_with(|| Value::Object(Map::new()));
                    if let Value::Object(into) = into {
                        for (name, item) in items {
                            into.entry(name).or_insert(item);
                        }
                    }
                }
            }
            (None, value) => {
                doc.as_object_mut().map(|d| d.insert(key, value));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rooms_add_their_paths_tags_and_components() {
        let room = r#"{"tags": [{"name": "x"}], "paths": {"/x": {"get": {}}},
                       "components": {"schemas": {"X": {"type": "object"}, "Error": {"type": "string"}}}}"#;
        let doc = document(&[room]);
        assert!(doc["paths"]["/health"].is_object());
        assert!(doc["paths"]["/x"]["get"].is_object());
        assert!(doc["tags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "x"));
        assert_eq!(doc["components"]["schemas"]["X"]["type"], "object");
        // The house's own component stays.
        assert_eq!(doc["components"]["schemas"]["Error"]["type"], "object");
    }
}
