//! What a gateway learns besides its replies: the Pub/Sub events that feed its sold-out
//! cache, and the replay filter (`gateway/src/replay_filter.rs`) read from the shards.

use crate::gateway_state::Filter;
use crate::keyspace::Event;
use crate::system::{State, System};

impl System {
    /// Every subscriber processes what it received. One step for all of them: a gateway
    /// that has not processed an event yet is a gateway that lost it until then, which
    /// [`Action::LoseEvent`] explores.
    pub(crate) fn deliver(&self, st: &mut State) -> bool {
        for gw in &mut st.gateways {
            for ev in std::mem::take(&mut gw.inbox) {
                // Every event about the SKU drops the filter read for its sold-out state.
                gw.filter = None;
                match ev {
                    Event::Empty(s) => gw.cache.insert(s),
                    Event::Restock(s) => gw.cache.remove(&s),
                };
            }
        }
        true
    }

    pub(crate) fn lose_event(&self, st: &mut State, g: u8) -> bool {
        st.faults += 1;
        let gw = &mut st.gateways[usize::from(g)];
        gw.inbox.remove(0);
        gw.lost = true;
        true
    }

    /// `replay_users`: every slice present and at most 0, every meta there; the users are
    /// the union of the `useq` hashes.
    pub(crate) fn read_filter(&self, st: &mut State, g: u8) -> bool {
        let Some(count) = self.sold_out_marks(st) else {
            return false;
        };
        let users = st
            .nodes
            .iter()
            .flat_map(|n| n.master.useq.keys().copied())
            .collect();
        st.gateways[usize::from(g)].filter = Some(Filter {
            users,
            count,
            at: st.now,
        });
        true
    }

    /// `replay_users_unchanged`: the marks again; unchanged confirms the set.
    pub(crate) fn revalidate_filter(&self, st: &mut State, g: u8) -> bool {
        let marks = self.sold_out_marks(st);
        let now = st.now;
        let gw = &mut st.gateways[usize::from(g)];
        match (marks, gw.filter.as_mut()) {
            (Some(count), Some(f)) if count == f.count => f.at = now,
            _ => gw.filter = None,
        }
        true
    }

    fn sold_out_marks(&self, st: &State) -> Option<usize> {
        let sold_out = st
            .nodes
            .iter()
            .all(|n| n.master.meta.is_some() && n.master.stock.is_some_and(|s| s <= 0));
        sold_out.then(|| st.nodes.iter().map(|n| n.master.useq.len()).sum())
    }
}
