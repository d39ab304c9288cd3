// A restarted Janus replica's votes (txn::Voter; docs/protocols/janus.md, "A restarted replica votes again").
//
// Its state follows a live replica of its shard (a Learner: the store, the history, the execution are its
// source's). Its votes are its own, cast in the epoch every other replica of its shard sealed, by Site's rule for a
// PreAccept reply: the direct predecessors on each key (the chain's last writer, and for a write the readers since)
// and every other conflicting access not executed here. What it forgot (the chains and pending accesses it had before
// it died) it takes from the sealed records of both other replicas, merged: a key's chain ends, for its next access,
// at the last accesses of either record, and an access pending in either is pending here until it executes here.
//
// Why that is safe. A decision counts the replies of one epoch only (Coordinator::on_pre_accept_reply), so no reply
// cast before the seal counts with one cast after it. A decision before the seal counted a majority of the old
// epoch's replies, which holds a reply of a replica that sealed (two of three, one of which may have been the one
// that died), cast before its seal, so in its record: the access it named is in this replica's chains or pending
// accesses, and so in every vote of its after the seal that conflicts with it, as at a replica that never forgot.
// Decisions after the seal count the votes of the two sealed replicas and this one, each of whom remembers every
// vote it cast since. So two conflicting decided transactions always meet at a replica whose later vote names the
// earlier one, or an access after it: the argument of the header comment of replica.cc, with this replica's memory
// reaching back through the records.
#include <algorithm>
#include <set>

#include "protocols/janus/janus.h"

namespace txn::janus {

Voter::Voter(const Deployment& d, NodeId self, const Workload& w) : d_(d), me_(d.node(self)) { (void)w; }

void Voter::keys_here(const TxnRequest& t, std::vector<std::string>* writes, std::vector<std::string>* reads) const {
  std::set<std::string> w, r;
  for (const auto& p : t.pieces()) {
    if (p.shard() != me_.shard) continue;
    w.insert(p.write_keys().begin(), p.write_keys().end());
    r.insert(p.read_keys().begin(), p.read_keys().end());
  }
  for (const auto& k : w) r.erase(k);   // a key it writes is a write only
  writes->assign(w.begin(), w.end());
  reads->assign(r.begin(), r.end());
}

bool Voter::adopt(uint64_t epoch, const std::vector<std::string>& records, const ShardExecutor& state) {
  std::vector<::janus::Record> recs(records.size());
  for (size_t i = 0; i < records.size(); ++i)
    if (!recs[i].ParseFromString(records[i])) return false;
  epoch_ = epoch;
  for (const auto& rec : recs) {
    for (const auto& t : rec.txns()) {
      Known& k = known(t.id());
      if (k.shards.empty()) k.shards.assign(t.shards().begin(), t.shards().end());
      if (k.scc.empty()) k.scc.assign(t.scc().begin(), t.scc().end());
      k.pieces_here = std::max(k.pieces_here, t.pieces_here());
    }
    for (const auto& kr : rec.keys()) {
      Key& key = keys_[kr.key()];
      for (TxnId x : kr.writers())
        if (std::find(key.writers.begin(), key.writers.end(), x) == key.writers.end()) key.writers.push_back(x);
      for (TxnId x : kr.readers())
        if (std::find(key.readers.begin(), key.readers.end(), x) == key.readers.end()) key.readers.push_back(x);
      for (TxnId x : kr.pending_writers()) {
        key.pending_w.insert(x);
        known(x).keys.push_back(kr.key());
      }
      for (TxnId x : kr.pending_readers()) {
        key.pending_r.insert(x);
        known(x).keys.push_back(kr.key());
      }
    }
  }
  // What its state executed already is not pending here: every piece of it here is in its history.
  std::map<TxnId, uint32_t> done;
  for (const ExecEvent& e : state.history()) {
    executed_.insert(e.txn);
    if (auto k = known_.find(e.txn); k != known_.end() && !k->second.keys.empty()) ++done[e.txn];
  }
  for (const auto& [t, n] : done) {
    Known& k = known_.at(t);
    k.executed = n;
    if (k.pieces_here > 0 && n >= k.pieces_here) no_longer_pending(t, k);
  }
  std::vector<TxnId> all;
  for (const auto& [t, k] : known_) all.push_back(t);
  for (TxnId t : all) settle(t);
  adopted_ = true;
  return true;
}

Voter::Known& Voter::known(TxnId id) {
  auto it = known_.find(id);
  if (it != known_.end()) return it->second;
  Known& k = known_[id];
  if (const uint16_t v = settled_.get(id)) {
    k.shards = shard_sets_.at((v - 1u) >> 1);
    if ((v - 1) & 1) k.scc.assign(1, id);
    settled_.set(id, 0);
  }
  return k;
}

void Voter::settle(TxnId id) {
  auto it = known_.find(id);
  if (it == known_.end()) return;
  const Known& k = it->second;
  if ((k.voted && !k.done) || !k.keys.empty() || k.scc.size() > 1 || (k.scc.size() == 1 && k.scc[0] != id)) return;
  size_t s = 0;
  if (!shard_sets_.index(k.shards, 0x7ffe, &s)) return;   // (out of indexes: kept)
  settled_.set(id, static_cast<uint16_t>(1 + (s << 1 | (k.scc.empty() ? 0 : 1))));
  known_.erase(it);
}

void Voter::no_longer_pending(TxnId t, Known& k) {
  for (const auto& key : k.keys) {
    auto it = keys_.find(key);
    if (it == keys_.end()) continue;
    it->second.pending_w.erase(t);
    it->second.pending_r.erase(t);
  }
  k.keys.clear();
  k.done = true;
}

void Voter::executed(uint64_t txn, const Piece& piece) {
  (void)piece;
  if (!adopted_) return;   // adopt() counts what was executed before it from the history
  executed_.insert(txn);
  auto it = known_.find(txn);
  if (it == known_.end() || it->second.done) return;
  Known& k = it->second;
  if (++k.executed >= k.pieces_here && k.pieces_here > 0) {
    no_longer_pending(txn, k);
    settle(txn);
  }
}

void Voter::fill_dep(TxnId id, ::janus::Dep* out) const {
  out->set_id(id);
  auto it = known_.find(id);
  if (it == known_.end()) {
    if (const uint16_t v = settled_.get(id)) {
      for (uint32_t s : shard_sets_.at((v - 1u) >> 1)) out->add_shards(s);
      if ((v - 1) & 1) out->add_scc(id);
    }
    return;
  }
  for (uint32_t s : it->second.shards) out->add_shards(s);
  for (TxnId x : it->second.scc) out->add_scc(x);
}

void Voter::reply(Env& env, NodeId to, TxnId id, const Known& k) {
  Envelope e;
  auto* r = e.mutable_janus()->mutable_pre_accept_reply();
  r->set_txn_id(id);
  r->set_shard(me_.shard);
  r->set_replica(me_.replica);
  r->set_epoch(epoch_);
  for (TxnId x : k.deps) fill_dep(x, r->add_deps());
  for (TxnId x : k.pending) fill_dep(x, r->add_pending());
  env.send(to, std::move(e));
}

void Voter::on_message(Env& env, Envelope& m, ShardExecutor& state) {
  if (!m.has_janus()) return;   // a client's submit cannot reach a follower; anything else is not Janus's
  const auto& j = m.janus();
  if (j.has_pre_accept()) return pre_accept(env, m.from(), j.pre_accept().txn(), state);
  if (j.has_accept()) {
    auto it = known_.find(j.accept().txn_id());
    if (it == known_.end() || !it->second.voted || it->second.done) return;   // it voted nothing for it: silent
    Envelope e;
    auto* r = e.mutable_janus()->mutable_accept_reply();
    r->set_txn_id(j.accept().txn_id());
    r->set_shard(me_.shard);
    r->set_replica(me_.replica);
    r->set_ballot(j.accept().ballot());
    r->set_ok(true);
    ++n_accepts_;
    env.send(m.from(), std::move(e));
    return;
  }
  if (j.has_commit()) {   // what it learns of the transactions named (for its later replies), and the decision
    for (const auto& d : j.commit().deps()) {
      Known& k = known(d.id());
      if (k.shards.empty()) k.shards.assign(d.shards().begin(), d.shards().end());
      if (k.scc.empty()) k.scc.assign(d.scc().begin(), d.scc().end());
      settle(d.id());
    }
    if (j.commit().quorum() != 0)
      state.declare_quorum_masks(j.commit().txn_id(), j.commit().quorum(), j.commit().accepted(), j.commit().epoch());
    return;
  }
  // Inquire (sent to replica 0), InquireReply, SendOutput, PieceResult: its execution is its source's
}

void Voter::pre_accept(Env& env, NodeId from, const TxnRequest& t, ShardExecutor& state) {
  const TxnId id = t.txn_id();
  auto it = known_.find(id);
  if (it != known_.end() && it->second.voted) {   // asked again: the same vote, in its epoch
    if (!it->second.done) {
      state.declare_vote(id, {}, true, epoch_);
      reply(env, from, id, it->second);
    }
    ++n_again_;
    return;
  }
  // executed here already (a PreAccept queued for this replica while it was down reaches the new process): decided
  if ((it != known_.end() && it->second.done) || executed_.count(id)) return;
  std::vector<std::string> writes, reads;
  keys_here(t, &writes, &reads);
  std::set<TxnId> deps, pending;
  for (const auto& key : writes) {   // after every earlier writer and reader; then its only writer
    Key& ks = keys_[key];
    deps.insert(ks.writers.begin(), ks.writers.end());
    deps.insert(ks.readers.begin(), ks.readers.end());
    pending.insert(ks.pending_w.begin(), ks.pending_w.end());
    pending.insert(ks.pending_r.begin(), ks.pending_r.end());
    ks.writers.assign(1, id);
    ks.readers.clear();
    ks.pending_w.insert(id);
  }
  for (const auto& key : reads) {    // after the last writer; then one of its readers
    Key& ks = keys_[key];
    deps.insert(ks.writers.begin(), ks.writers.end());
    pending.insert(ks.pending_w.begin(), ks.pending_w.end());
    ks.readers.push_back(id);
    ks.pending_r.insert(id);
  }
  deps.erase(id);
  pending.erase(id);
  for (TxnId x : deps) pending.erase(x);
  Known& k = known(id);
  k.shards = touched_shards(d_, t);
  k.voted = true;
  k.pieces_here = 0;
  for (const auto& p : t.pieces()) k.pieces_here += p.shard() == me_.shard;
  k.keys = writes;
  k.keys.insert(k.keys.end(), reads.begin(), reads.end());
  k.deps.assign(deps.begin(), deps.end());
  k.pending.assign(pending.begin(), pending.end());
  std::vector<TxnId> vote(k.deps);
  vote.insert(vote.end(), k.pending.begin(), k.pending.end());
  state.declare_vote(id, vote, true, epoch_);   // the checker holds a decision that counted it to it, as any
                                                // replica's
  ++n_votes_;
  reply(env, from, id, k);
}

// A later restarted peer's Seal (it voted here since its own seal): its chains and pending accesses, in Site's
// record format, so the next rejoin merges what this replica voted as it merges a replica that never forgot.
bool Voter::seal(uint64_t epoch, std::string* record) {
  epoch_ = std::max(epoch_, epoch);
  ::janus::Record rec;
  rec.set_epoch(epoch_);
  std::set<TxnId> named;
  for (const auto& [key, ks] : keys_) {
    if (ks.writers.empty() && ks.readers.empty() && ks.pending_w.empty() && ks.pending_r.empty()) continue;
    ::janus::KeyRecord* k = rec.add_keys();
    k->set_key(key);
    for (TxnId x : ks.writers) k->add_writers(x);
    for (TxnId x : ks.readers) k->add_readers(x);
    for (TxnId x : ks.pending_w) k->add_pending_writers(x);
    for (TxnId x : ks.pending_r) k->add_pending_readers(x);
    named.insert(ks.writers.begin(), ks.writers.end());
    named.insert(ks.readers.begin(), ks.readers.end());
    named.insert(ks.pending_w.begin(), ks.pending_w.end());
    named.insert(ks.pending_r.begin(), ks.pending_r.end());
  }
  for (TxnId x : named) {
    ::janus::TxnRecord* t = rec.add_txns();
    ::janus::Dep d;
    fill_dep(x, &d);
    t->set_id(x);
    *t->mutable_shards() = d.shards();
    *t->mutable_scc() = d.scc();
    auto it = known_.find(x);
    if (it != known_.end() && !it->second.done) t->set_pieces_here(it->second.pieces_here);
  }
  rec.SerializeToString(record);
  return true;
}

std::map<std::string, int64_t> Voter::counters() const {
  return {{"rejoined_votes", n_votes_}, {"rejoined_votes_again", n_again_}, {"rejoined_accepts", n_accepts_}};
}

}  // namespace txn::janus
