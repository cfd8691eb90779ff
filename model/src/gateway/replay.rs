//! The replay read (`shard-router/src/replay.rs`): a request's stored answer on its home
//! shard, and a tentative reroute's record on the shard that took it.

use crate::gateway_state::{Reply, Task};
use crate::keyspace::{Answer, ShardId};
use crate::scripts::{self, Verb};
use crate::system::{State, System};

impl System {
    /// The replay read: the stored answer on the home shard under a fence; a tentative
    /// reroute also needs its record on the taking shard under a fence there, and is then
    /// made final. `otherwise` when nothing is stored.
    pub(super) fn replay_read(
        &self,
        st: &mut State,
        task: &Task,
        home: ShardId,
        otherwise: Reply,
        lag: bool,
    ) -> Reply {
        if lag {
            return Reply::Unavailable;
        }
        st.sync(home);
        let stored = st.nodes[usize::from(home)]
            .master
            .req
            .get(&(task.user, task.rid))
            .copied();
        match stored {
            None => otherwise,
            Some(Answer::Pending) => Reply::InProgress,
            Some(Answer::Done {
                claim,
                tentative: false,
                ..
            }) => Reply::Replayed(claim),
            Some(Answer::Done {
                claim, shard, qty, ..
            }) => {
                let on_shard = st.nodes[usize::from(shard)]
                    .master
                    .stream
                    .iter()
                    .any(|(&e, r)| {
                        r.claim_id(e) == claim && r.user == task.user && r.rid == Some(task.rid)
                    });
                if !on_shard {
                    return Reply::Unavailable;
                }
                st.sync(shard);
                let fin = Answer::Done {
                    claim,
                    shard,
                    qty,
                    tentative: false,
                };
                scripts::settle(
                    st.master(home),
                    task.user,
                    0,
                    Verb::Final(fin),
                    Some(task.rid),
                    None,
                );
                st.sync(home);
                Reply::Replayed(claim)
            }
        }
    }
}
