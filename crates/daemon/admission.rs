//! [`Admission`]: who gets one of the listener's slots for connections that are not (yet) an
//! accepted WebSocket — page loads, health checks, handshakes — which anyone may open before
//! showing a token.
//!
//! # Why a few clients cannot keep the page from everyone else
//! A client is an address — an IPv4 address, or an IPv6 /64 (one host's share of addresses:
//! a single machine picks freely among 2⁶⁴ of them, so per address would be no limit). A
//! client holds at most `max_pending_per_client` slots. While slots of `max_pending` are
//! free, a connection takes one. Once they are all taken, a connection from a client that
//! holds fewer than the biggest holder less one takes the biggest holder's oldest slot: that
//! connection is closed (it was waiting for its headers, or loading a page, like a thousand
//! others of the same client) and the newcomer gets its slot. So slots are shared out evenly
//! as soon as they are scarce: ten clients holding 32 each cannot keep an eleventh out — it
//! takes a slot from one of them; only as many clients as there are slots, each holding one,
//! fill them for good. Then `reserved` more serve only health checks and requests with
//! credentials (the router checks them; anything else is answered 503 at once and has
//! [`RESERVED_HEADER_TIMEOUT`](crate::server::RESERVED_HEADER_TIMEOUT) to send its headers),
//! one per client at a time, and are never taken from their holder.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio_util::sync::CancellationToken;

/// The slots, and who holds them.
#[derive(Clone)]
pub(crate) struct Admission {
    state: Arc<Mutex<State>>,
}

/// How many slots there are.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slots {
    pub pending: usize,
    pub per_client: usize,
    pub reserved: usize,
}

struct State {
    slots: Slots,
    pending: usize,
    reserved: usize,
    /// Each client's held slots, oldest first; a client with none has no entry.
    clients: HashMap<IpAddr, VecDeque<Held>>,
    next: u64,
}

struct Held {
    id: u64,
    reserved: bool,
    /// Cancelled when the slot is taken from it.
    taken: CancellationToken,
}

/// Why a connection got no slot.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Its client holds its whole share.
    Client,
    /// Every slot is taken, none of them from a client that holds more.
    Full,
}

/// A connection's slot: given back when dropped. `reserved`: one of the reserved slots.
pub(crate) struct Ticket {
    id: u64,
    client: IpAddr,
    pub(crate) reserved: bool,
    taken: CancellationToken,
    state: Arc<Mutex<State>>,
}

impl Ticket {
    /// Cancelled when the slot is taken from this connection for another client's.
    pub(crate) fn taken(&self) -> &CancellationToken {
        &self.taken
    }
}

impl Admission {
    pub(crate) fn new(slots: Slots) -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                slots,
                pending: 0,
                reserved: 0,
                clients: HashMap::new(),
                next: 0,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A slot for a connection from `ip`, or why not (see the module doc).
    pub(crate) fn admit(&self, ip: IpAddr) -> Result<Ticket, Refused> {
        let client = client_of(ip);
        let mut state = self.lock();
        let slots = state.slots;
        let held = state.clients.get(&client).map_or(0, VecDeque::len);
        if held >= slots.per_client.max(1) {
            return Err(Refused::Client);
        }
        let reserved = if state.pending < slots.pending {
            state.pending += 1;
            false
        } else if state.take_from_the_biggest(held) {
            false
        } else if state.reserved < slots.reserved && !state.holds_reserved(&client) {
            state.reserved += 1;
            true
        } else {
            return Err(Refused::Full);
        };
        state.next += 1;
        let id = state.next;
        let taken = CancellationToken::new();
        state.clients.entry(client).or_default().push_back(Held {
            id,
            reserved,
            taken: taken.clone(),
        });
        Ok(Ticket {
            id,
            client,
            reserved,
            taken,
            state: self.state.clone(),
        })
    }

    /// Slots held now: (pending, reserved).
    #[cfg(test)]
    fn held(&self) -> (usize, usize) {
        let state = self.lock();
        (state.pending, state.reserved)
    }
}

impl State {
    /// Whether `client` holds a reserved slot: one each, so a few clients cannot hold the
    /// reserve for its second each.
    fn holds_reserved(&self, client: &IpAddr) -> bool {
        self.clients
            .get(client)
            .is_some_and(|slots| slots.iter().any(|slot| slot.reserved))
    }

    /// Takes the oldest slot of the client holding the most, when that is at least two more
    /// than `held` (the newcomer's): the slot stays counted, now the newcomer's.
    fn take_from_the_biggest(&mut self, held: usize) -> bool {
        let biggest = self
            .clients
            .iter()
            .map(|(client, slots)| (*client, slots.iter().filter(|s| !s.reserved).count()))
            .max_by_key(|(_, count)| *count);
        let Some((client, count)) = biggest else {
            return false;
        };
        if count < held + 2 {
            return false;
        }
        let Some(slots) = self.clients.get_mut(&client) else {
            return false;
        };
        let Some(at) = slots.iter().position(|slot| !slot.reserved) else {
            return false;
        };
        if let Some(slot) = slots.remove(at) {
            slot.taken.cancel();
        }
        if slots.is_empty() {
            self.clients.remove(&client);
        }
        true
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(slots) = state.clients.get_mut(&self.client) else {
            return;
        };
        // A slot taken for another client is no longer this one's to give back.
        let Some(at) = slots.iter().position(|slot| slot.id == self.id) else {
            return;
        };
        slots.remove(at);
        if slots.is_empty() {
            state.clients.remove(&self.client);
        }
        if self.reserved {
            state.reserved -= 1;
        } else {
            state.pending -= 1;
        }
    }
}

/// The client an address belongs to: an IPv4 address (also written IPv4-mapped), or an IPv6
/// address's /64.
pub(crate) fn client_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let prefix = u128::from(v6) & !u128::from(u64::MAX);
                IpAddr::V6(Ipv6Addr::from(prefix))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(last: u8, third: u8) -> IpAddr {
        IpAddr::from([10, 0, third, last])
    }

    const SLOTS: Slots = Slots {
        pending: 256,
        per_client: 32,
        reserved: 32,
    };

    #[test]
    fn ten_clients_holding_their_whole_share_cannot_keep_an_eleventh_out() {
        let admission = Admission::new(SLOTS);
        let mut held = Vec::new();
        for client in 0..10 {
            for _ in 0..32 {
                if let Ok(ticket) = admission.admit(v4(client, 0)) {
                    held.push((client, ticket));
                }
            }
        }
        assert_eq!(admission.held().0, 256, "the slots are all taken");
        // The eight who filled them gave slots to the two who came after: shared evenly
        // (what the two asked for beyond that went to the reserve, answered 503 there).
        let kept = |client: u8| {
            held.iter()
                .filter(|(of, t)| *of == client && !t.reserved && !t.taken().is_cancelled())
                .count()
        };
        let shares: Vec<usize> = (0..10).map(kept).collect();
        assert!(
            shares.iter().all(|share| (25..=26).contains(share)),
            "{shares:?}"
        );
        let before = held
            .iter()
            .filter(|(_, t)| t.taken().is_cancelled())
            .count();
        let visitor = admission.admit(v4(200, 0)).expect("a slot taken for it");
        assert!(!visitor.reserved);
        let after = held
            .iter()
            .filter(|(_, t)| t.taken().is_cancelled())
            .count();
        assert_eq!(after, before + 1, "from one connection of a biggest holder");
        assert_eq!(admission.held().0, 256);
        drop(held);
        drop(visitor);
        assert_eq!(admission.held(), (0, 0), "every slot given back once");
    }

    #[test]
    fn as_many_clients_as_slots_fill_them_and_then_only_the_reserve_is_left() {
        let admission = Admission::new(Slots {
            pending: 8,
            per_client: 4,
            reserved: 2,
        });
        let held: Vec<Ticket> = (0..8)
            .map(|n| admission.admit(v4(n, 1)).expect("one each"))
            .collect();
        // Evenly held: nobody holds two more than a newcomer.
        let reserved = admission.admit(v4(100, 1)).expect("a reserved one");
        assert!(reserved.reserved);
        let _second = admission.admit(v4(101, 1)).expect("the other reserved one");
        assert_eq!(admission.admit(v4(102, 1)).err(), Some(Refused::Full));
        assert!(held.iter().all(|t| !t.taken().is_cancelled()));
        drop(held);
        assert_eq!(admission.held(), (0, 2));
    }

    #[test]
    fn one_client_is_held_to_its_share_and_an_ipv6_64_is_one_client() {
        let admission = Admission::new(SLOTS);
        let base: u128 = 0x2001_0db8_0000_0001 << 64;
        let mut held = Vec::new();
        for host in 0..40u128 {
            match admission.admit(IpAddr::V6(Ipv6Addr::from(base | host))) {
                Ok(ticket) => held.push(ticket),
                Err(refused) => assert_eq!(refused, Refused::Client),
            }
        }
        assert_eq!(held.len(), 32, "the whole /64 is one client");
        let other_64 = IpAddr::V6(Ipv6Addr::from(base + (1 << 64)));
        assert!(admission.admit(other_64).is_ok(), "the next /64 is another");
        assert_eq!(
            client_of("::ffff:10.0.0.1".parse().expect("ip")),
            v4(1, 0),
            "IPv4-mapped is the IPv4 address"
        );
    }
}
