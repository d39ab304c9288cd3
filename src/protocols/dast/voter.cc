// A restarted DAST replica's part again (txn::Voter; docs/protocols/dast.md, "A restarted replica stores and
// acknowledges again").
//
// Its state follows a live replica of its shard (a Learner), which follows its leader's order as every follower
// does: so it executes in the leader's order, with the leader's timestamps, as a follower must. What a follower
// votes is no order (the leader's proposal is counted for every CRT, and the leader orders): it stores what it is
// sent and says so, which a commit rests on (an IRT on 2 of 3 stored copies per shard, a CRT on each shard's leader
// and a majority). So once it holds a state and its peers sealed (the Learner's rejoin point), it stores every
// StoreIRT and StoreCRT it gets from then on (a copy, kept until its state executed every piece of it here) and
// acknowledges it as a follower does: StoreIRTAck without a clock, RemotePrepared proposing T_r as it is.
#include "protocols/dast/dast.h"

namespace txn::dast {

Voter::Voter(const Deployment& d, NodeId self, const Workload& w) : d_(d), me_(d.node(self)) { (void)w; }

bool Voter::adopt(uint64_t epoch, const std::vector<std::string>& records, const ShardExecutor& state) {
  (void)epoch;
  (void)records;
  for (const ExecEvent& e : state.history()) done_.insert(e.txn);   // what its state holds already
  return true;   // nothing else to remember: its acknowledgements order nothing
}

void Voter::store(const TxnRequest& t) {
  // its state executed it already (its source was quicker, or a message queued for it while it was down came to this
  // process): nothing to keep
  if (done_.count(t.txn_id())) return;
  Copy& c = stored_[t.txn_id()];
  c.txn = t;
  c.pieces_here = 0;
  for (const auto& p : t.pieces()) c.pieces_here += p.shard() == me_.shard;
}

void Voter::on_message(Env& env, Envelope& m, ShardExecutor& state) {
  (void)state;
  if (!m.has_dast()) return;
  const auto& x = m.dast();
  if (x.has_store_irt()) {
    const auto& s = x.store_irt();
    store(s.txn());
    Envelope e;
    auto* a = e.mutable_dast()->mutable_store_irt_ack();
    a->set_txn_id(s.txn().txn_id());
    a->set_shard(me_.shard);
    a->set_replica(me_.replica);
    ++n_acks_;
    env.send(s.handler(), std::move(e));
  } else if (x.has_store_crt()) {
    const auto& s = x.store_crt();
    store(s.txn());
    Envelope e;
    auto* rp = e.mutable_dast()->mutable_remote_prepared();
    rp->set_txn_id(s.txn().txn_id());
    rp->set_shard(me_.shard);
    rp->set_replica(me_.replica);
    *rp->mutable_proposal() = s.tr();
    ++n_proposals_;
    env.send(s.coordinator(), std::move(e));
  }
  // the rest (decisions, the leader's order, clocks, values): its execution is its source's
}

void Voter::executed(uint64_t txn, const Piece& piece) {
  (void)piece;
  auto it = stored_.find(txn);
  if (it != stored_.end() && ++it->second.executed >= it->second.pieces_here) stored_.erase(it);
  done_.insert(txn);
}

std::map<std::string, int64_t> Voter::counters() const {
  return {{"rejoined_acks", n_acks_}, {"rejoined_proposals", n_proposals_},
          {"rejoined_copies_held", static_cast<int64_t>(stored_.size())}};
}

}  // namespace txn::dast
