//! Matrix for the Matrix channel's tests: a real homeserver ([`Synapse`], from PyPI), the
//! [`Proxy`] the bot reaches it through (where a platform fake's records are kept and its
//! faults made), and [`Person`]s with Matrix clients of their own, writing in encrypted
//! rooms as people do.

mod person;
mod proxy;
mod synapse;

pub use matrix_sdk;
pub use person::{Person, Seen};
pub use proxy::{Proxy, Write};
pub use synapse::{SERVER_NAME, Synapse, python};
