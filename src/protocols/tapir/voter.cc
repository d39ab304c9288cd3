// A restarted TAPIR replica's votes (txn::Voter; docs/protocols/tapir.md, "A restarted replica votes again").
//
// Its state follows a live replica of its shard (a Learner: the store, the history, the order it applies in are its
// source's). Its Prepare results are its own, by Site's validation: ABSTAIN when a conflicting transaction holds one
// of the keys here, ABORT when a read version is not the key's last writer applied here, else OK (and it holds the
// keys). The versions are those of the state it follows: its source's record when it took that state over
// (follow()), then every transaction it applies after. What it forgot, the holds, it takes from the sealed records of
// both other replicas of its shard: every transaction either holds is held here, until it is applied here (its
// source applied it), aborted (an Abort to this replica), or its recorder says it holds it no more (an Abort sent to
// this replica while it was down: asked once a hold from a record is a second old).
//
// Why that is safe (IR's view change, its Merge simplified to a union): a shard's result counts the results of one
// epoch only (Coordinator::on_prepare_reply). A result decided before the seal had a majority of the old epoch's
// results, which holds one of a replica that sealed, cast before its seal, so in its record: every transaction
// prepared OK on a majority before the seal holds its keys here too, and no conflicting transaction gets an OK here
// while it does; after the seal every replica that counts remembers its own results. Holding more than a replica
// that never forgot only refuses more (ABSTAIN: the coordinator retries).
#include <algorithm>

#include "protocols/tapir/tapir.h"

namespace txn::tapir {

Voter::Voter(const Deployment& d, NodeId self, const Workload& w) : d_(d), me_(d.node(self)) { (void)w; }

void Voter::follow(const std::string& record) {
  ::tapir::Record rec;
  if (!rec.ParseFromString(record)) return;   // no versions known: every read is checked against none (ABORT)
  flush();
  for (auto& [_, ks] : keys_) {   // the versions are the new state's; the holds stay
    ks.writer = ks.accessor = 0;
    ks.readers.clear();
  }
  for (const auto& k : rec.keys()) {
    KeyState& ks = keys_[k.key()];
    ks.writer = k.writer();
    ks.accessor = k.accessor();
    ks.readers.assign(k.readers().begin(), k.readers().end());
  }
  applied_.clear();
}

bool Voter::adopt(uint64_t epoch, const std::vector<std::string>& records, const ShardExecutor& state) {
  flush();
  for (const ExecEvent& e : state.history()) applied_.insert(e.txn);   // what its state holds: decided
  std::vector<::tapir::Record> recs(records.size());
  for (size_t i = 0; i < records.size(); ++i)
    if (!recs[i].ParseFromString(records[i])) return false;
  epoch_ = epoch;
  // every transaction either record holds is held here (the recorder: the first replica of the shard that is not
  // this one and recorded it), unless applied in the state it follows since it took it over
  std::vector<NodeId> peers;
  for (NodeId r : d_.replicas_of(me_.shard))
    if (r != me_.id) peers.push_back(r);
  for (size_t i = 0; i < recs.size(); ++i)
    for (const auto& h : recs[i].held()) {
      if (applied_.count(h.id()) || held_.count(h.id())) continue;
      Held& x = held_[h.id()];
      x.reads.insert(h.reads().begin(), h.reads().end());
      x.writes.insert(h.writes().begin(), h.writes().end());
      x.holds = true;
      x.recorder = i < peers.size() ? peers[i] : 0;
      for (const auto* set : {&x.reads, &x.writes})
        for (const auto& k : *set) keys_[k].holders.insert(h.id());
    }
  adopted_ = true;
  return true;
}

// executed(): the pieces of one transaction are applied one after the other; its keys' versions change once all are
// (as Site::try_apply sets them), which is when the next transaction's piece (or a message) comes.
void Voter::executed(uint64_t txn, const Piece& piece) {
  if (txn != applying_) flush();
  applying_ = txn;
  applying_writes_.insert(piece.write_keys().begin(), piece.write_keys().end());
  applying_reads_.insert(piece.read_keys().begin(), piece.read_keys().end());
}

void Voter::flush() {
  if (applying_ == 0) return;
  const TxnId t = applying_;
  for (const auto& k : applying_writes_) applying_reads_.erase(k);
  for (const auto& k : applying_writes_) {
    KeyState& ks = keys_[k];
    ks.writer = ks.accessor = t;
    ks.readers.clear();
  }
  for (const auto& k : applying_reads_) {
    KeyState& ks = keys_[k];
    ks.readers.push_back(t);
    ks.accessor = t;
  }
  applied_.insert(t);
  release(t);
  applying_ = 0;
  applying_reads_.clear();
  applying_writes_.clear();
}

void Voter::release(TxnId id) {
  auto it = held_.find(id);
  if (it == held_.end()) return;
  for (const auto* set : {&it->second.reads, &it->second.writes})
    for (const auto& k : *set) keys_[k].holders.erase(id);
  held_.erase(it);
}

bool Voter::conflicts(const Held& a, const Held& b) const {
  for (const auto& k : a.writes)
    if (b.writes.count(k) || b.reads.count(k)) return true;
  for (const auto& k : a.reads)
    if (b.writes.count(k)) return true;
  return false;
}

void Voter::reply(Env& env, NodeId to, TxnId id, const Held& h) {
  env.send(to, prepare_reply(me_, id, h.result, epoch_, h.deps));
}

void Voter::prepare(Env& env, NodeId from, ::tapir::Prepare& m, ShardExecutor& state) {
  const TxnRequest& t = m.txn();
  const TxnId id = t.txn_id();
  if (auto it = held_.find(id); it != held_.end() && it->second.voted) {   // asked again: the same result
    ++n_again_;
    state.declare_vote(id, {}, false, epoch_);
    return reply(env, from, id, it->second);
  }
  if (applied_.count(id)) return;   // applied here already: decided
  Held l;
  conflict_keys(t, me_.shard, &l.reads, &l.writes);
  ::tapir::Result result = ::tapir::OK;
  for (const auto* set : {&l.reads, &l.writes})
    for (const auto& k : *set) {
      auto ks = keys_.find(k);
      if (ks == keys_.end()) continue;
      for (TxnId h : ks->second.holders)
        if (h != id && conflicts(l, held_.at(h))) result = ::tapir::ABSTAIN;
    }
  if (result == ::tapir::OK) {   // the read versions, as Site::versions_of has them applied here
    std::set<std::string> read;
    for (const auto& p : t.pieces())
      if (p.shard() == me_.shard) read.insert(p.read_keys().begin(), p.read_keys().end());
    auto stale = [&](const std::string& k, bool by_writer) {
      auto ks = keys_.find(k);
      const TxnId now = ks == keys_.end() ? 0 : by_writer ? ks->second.writer : ks->second.accessor;
      auto v = m.versions().find(k);
      return v == m.versions().end() || v->second != now;
    };
    for (const auto& k : read)   // a key it reads: its last writer
      if (stale(k, true)) result = ::tapir::ABORT;
    for (const auto& k : l.writes)   // a key it only writes: its last accessor
      if (!read.count(k) && stale(k, false)) result = ::tapir::ABORT;
  }
  l.result = result;
  l.voted = true;
  if (result == ::tapir::OK) {
    std::set<TxnId> deps;
    for (const auto* set : {&l.reads, &l.writes})
      for (const auto& k : *set)
        if (auto ks = keys_.find(k); ks != keys_.end() && ks->second.writer) deps.insert(ks->second.writer);
    for (const auto& k : l.writes)
      if (auto ks = keys_.find(k); ks != keys_.end()) deps.insert(ks->second.readers.begin(), ks->second.readers.end());
    l.deps.assign(deps.begin(), deps.end());
    state.declare_vote(id, l.deps, false, epoch_);   // as Site's: the decision must hold it where it counts it
    l.holds = true;
    for (const auto* set : {&l.reads, &l.writes})
      for (const auto& k : *set) keys_[k].holders.insert(id);
  } else {
    state.declare_vote(id, {}, false, epoch_);   // a refusal names nothing, but it was cast, and in this epoch
  }
  ++n_votes_;
  reply(env, from, id, held_[id] = std::move(l));
}

// Holds from a record a second old: their recorder is asked which it holds no more.
void Voter::ask_recorders(Env& env) {
  const TimeUs now = env.mono_us();
  if (now - asked_us_ < kAskUs) return;
  asked_us_ = now;
  std::map<NodeId, std::vector<TxnId>> ask;
  for (auto& [id, h] : held_) {
    if (h.voted || h.committed || h.recorder == 0) continue;
    if (h.since == 0) h.since = now;
    else if (now - h.since >= kAskUs) ask[h.recorder].push_back(id);
  }
  for (const auto& [to, ids] : ask) {
    Envelope e;
    for (TxnId id : ids) e.mutable_tapir()->mutable_still_held()->add_ids(id);
    ++n_asked_;
    env.send(to, std::move(e));
  }
}

void Voter::on_message(Env& env, Envelope& m, ShardExecutor& state) {
  if (!m.has_tapir()) return;
  flush();   // what it applied so far is applied before it votes
  auto& t = *m.mutable_tapir();
  switch (t.body_case()) {
    case ::tapir::Msg::kPrepare: prepare(env, m.from(), *t.mutable_prepare(), state); break;
    case ::tapir::Msg::kFinalize: {   // the decided result binds it too, where it knows the transaction
      auto it = held_.find(t.finalize().txn_id());
      if (it == held_.end() || !it->second.voted) break;
      if (t.finalize().result() == ::tapir::OK && !it->second.holds) {
        it->second.holds = true;
        for (const auto* set : {&it->second.reads, &it->second.writes})
          for (const auto& k : *set) keys_[k].holders.insert(it->first);
      }
      Envelope e;
      auto* r = e.mutable_tapir()->mutable_finalize_reply();
      r->set_txn_id(t.finalize().txn_id());
      r->set_shard(me_.shard);
      r->set_replica(me_.replica);
      env.send(m.from(), std::move(e));
      break;
    }
    case ::tapir::Msg::kCommit: {   // it holds the keys until it applies it (its source does)
      const auto& c = t.commit();
      state.declare_quorum_masks(c.txn_id(), c.quorum(), c.finalized(), c.epoch());
      auto it = held_.find(c.txn_id());
      if (it != held_.end() && !applied_.count(c.txn_id())) {
        it->second.committed = true;
        if (!it->second.holds) {
          it->second.holds = true;
          for (const auto* set : {&it->second.reads, &it->second.writes})
            for (const auto& k : *set) keys_[k].holders.insert(it->first);
        }
      }
      break;
    }
    case ::tapir::Msg::kAbort:
      release(t.abort().txn_id());
      state.forget(t.abort().txn_id());   // as Site::on_abort
      break;
    case ::tapir::Msg::kNoLongerHeld:
      for (TxnId id : t.no_longer_held().ids()) {
        auto it = held_.find(id);
        if (it != held_.end() && it->second.recorder == m.from() && !it->second.voted && !it->second.committed) {
          release(id);
          ++n_released_;
        }
      }
      break;
    case ::tapir::Msg::kStillHeld: {   // a later rejoin asks about holds of the record it took from here
      Envelope e;
      auto* r = e.mutable_tapir()->mutable_no_longer_held();
      for (TxnId id : t.still_held().ids()) {
        auto it = held_.find(id);
        if (it == held_.end() || !it->second.holds) r->add_ids(id);
      }
      env.send(m.from(), std::move(e));
      break;
    }
    default: break;   // Read (sent to replica 0), replies (to coordinators)
  }
  ask_recorders(env);
}

// A later restarted peer's Seal (it voted here since its own seal): the versions of the state it follows and every
// transaction holding keys here, in Site's record format.
bool Voter::seal(uint64_t epoch, std::string* record) {
  flush();
  epoch_ = std::max(epoch_, epoch);
  ::tapir::Record rec;
  rec.set_epoch(epoch_);
  record_versions(keys_, &rec);
  for (const auto& [id, h] : held_)
    if (h.holds) record_hold(id, h.reads, h.writes, &rec);
  rec.SerializeToString(record);
  return true;
}

std::map<std::string, int64_t> Voter::counters() const {
  return {{"rejoined_votes", n_votes_}, {"rejoined_votes_again", n_again_},
          {"rejoined_holds_released", n_released_}, {"rejoined_holds_asked", n_asked_}};
}

}  // namespace txn::tapir
