//! A layer's statements, built once per store: from the store's dialect and table prefix, at
//! the layer's first transaction (the handle is made before any connection says which engine
//! it is), then shared by every clone of the handle.

use super::Tx;
use std::sync::{Arc, OnceLock};

/// A cell of a layer's statement bundle `S`. Cheap to clone (clones share the bundle).
#[derive(Debug)]
pub struct Statements<S>(Arc<OnceLock<S>>);

impl<S> Clone for Statements<S> {
    fn clone(&self) -> Self {
        Statements(self.0.clone())
    }
}

impl<S> Default for Statements<S> {
    fn default() -> Self {
        Statements(Arc::default())
    }
}

impl<S> Statements<S> {
    /// The bundle, built from `tx` (its prefix, dialect and engine) the first time.
    pub fn get(&self, tx: &dyn Tx, build: fn(&dyn Tx) -> S) -> &S {
        self.0.get_or_init(|| build(tx))
    }
}
