//! [`Remembered`]: what an adapter notes about the people and chats it has seen (a
//! username, an author, whether a chat is a private one), bounded: past its capacity the
//! table starts over, so a flood of strangers cannot grow it. Forgetting only costs a
//! refusal until the person writes again.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, PoisonError};

/// A bounded table, shared between tasks.
#[derive(Debug)]
pub struct Remembered<K, V> {
    capacity: usize,
    table: Mutex<HashMap<K, V>>,
}

impl<K: Eq + Hash, V: Clone> Remembered<K, V> {
    /// A table of at most `capacity` entries.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            table: Mutex::new(HashMap::new()),
        }
    }

    /// Notes `value` for `key` (starting over first if the table is full).
    pub fn note(&self, key: K, value: V) {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        if table.len() >= self.capacity && !table.contains_key(&key) {
            table.clear();
        }
        table.insert(key, value);
    }

    /// Notes `value` for `key` unless something is noted for it already; whether it was
    /// new (one look, so of two tasks noting the same key at once one is first).
    pub fn note_new(&self, key: K, value: V) -> bool {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        if table.contains_key(&key) {
            return false;
        }
        if table.len() >= self.capacity {
            table.clear();
        }
        table.insert(key, value);
        true
    }

    /// Forgets `key`.
    pub fn forget<Q>(&self, key: &Q)
    where
        K: std::borrow::Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        self.table
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }

    /// What was noted for `key`, if it is still remembered.
    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        self.table
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_starts_over_and_an_update_does_not_empty_it() {
        let table = Remembered::new(2);
        table.note("a".to_owned(), 1);
        table.note("b".to_owned(), 2);
        table.note("b".to_owned(), 3);
        assert_eq!((table.get("a"), table.get("b")), (Some(1), Some(3)));
        table.note("c".to_owned(), 4);
        assert_eq!((table.get("a"), table.get("c")), (None, Some(4)));
    }

    #[test]
    fn of_two_notes_of_one_key_one_is_new_and_a_forgotten_key_is_new_again() {
        let table = Remembered::new(8);
        assert!(table.note_new("ev1".to_owned(), ()));
        assert!(!table.note_new("ev1".to_owned(), ()));
        table.forget("ev1");
        assert!(table.note_new("ev1".to_owned(), ()));
    }
}
