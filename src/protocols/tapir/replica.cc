// TAPIR replica (docs/protocols/tapir.md): the node (Replica) routes each message to its Coordinator role or its
// Site role (src/core/role.h).
//
// Read. The coordinator (the handler of the home shard) asks one replica of
// each shard (replica 0, the one in the shard's region nearest to it) to
// evaluate the shard's pieces as a trial on its store, undone after (ShardExecutor::evaluate):
// their outputs, and per read key the version read, which is the last
// transaction applied there that wrote the key. A shard whose pieces need
// another shard's value is read once that value is known (rounds). A Read
// unanswered within `read_timeout_ms` goes to the shard's other replicas, and
// the first answer counts (any replica's is safe: Prepare validates the
// versions read at every replica); the replica that let it time out is not
// asked first again until the coordinator hears from it (src/core/suspects.h).
//
// Prepare (consensus operation at every replica of every touched shard): a
// replica answers ABSTAIN when a conflicting transaction holds one of the keys
// here (prepared, or committed and not yet applied), ABORT when a read version
// is not the key's last applied writer here (a stale read), else OK: the
// transaction is prepared and holds its keys, and its dependencies are the
// keys' last applied writers (and, for a key it writes, the readers applied
// since). A shard is decided OK on 3 OKs (fast path) or, once every replica
// answered or `prepare_timeout_ms` (IR's consensus timeout, 500 ms) passed with
// a majority of results in, on a majority of OKs, which is then finalized at a
// majority (slow path); any ABORT, or a majority not OK, aborts the
// transaction, and so do results of a majority after the timeout that are not
// a majority of OKs (TAPIR's decide: RETRY). The client is answered at the
// decision, with the Read round's values. A replica left out of a decision
// still gets the Prepare, then the Finalize, then the Commit, in that order
// (one FIFO channel from the coordinator), and applies along the decided
// dependencies.
//
// Commit and Abort are inconsistent operations. A replica applies a committed
// transaction (executes its pieces) once its dependencies at this shard have
// been applied here. Why replicas agree and the order is serializable: of two
// conflicting committed transactions, a replica in both OK majorities saw the
// first applied before the second's Prepare (it would have answered ABSTAIN
// otherwise), and recorded a dependency path to it through the keys' last
// applied accesses; every replica applies along those paths. A committed
// transaction reads what its Read round read: a later write of a key it read
// would have made some replica of its OK majority answer ABORT or ABSTAIN.
#include <algorithm>

#include "check.h"
#include "protocols/tapir/tapir.h"
#include "protocols/tapir/mutant.h"

namespace txn::tapir {
namespace {

std::string str(uint64_t x) { return std::to_string(x); }

bool needs_other_shard(const TxnRequest& t, uint32_t shard, const Vars& known) {
  std::set<std::string> here;
  for (const auto& p : t.pieces())
    if (p.shard() == shard) here.insert(p.outputs().begin(), p.outputs().end());
  for (const auto& p : t.pieces())
    if (p.shard() == shard)
      for (const auto& v : p.inputs())
        if (!here.count(v) && !known.count(v)) return true;
  return false;
}

}  // namespace

Site::Site(const Deployment& d, NodeId self, const Workload& w, const Options&, SelfQueue& q)
    : RoleContext(d, self, w, q), exec_(w, me_.shard) {}

Coordinator::Coordinator(const Deployment& d, NodeId self, const Workload& w, const Options& o, SelfQueue& q)
    : RoleContext(d, self, w, q), opts_(o) {}

void Coordinator::add_counters(std::map<std::string, int64_t>& c) const {
  c.insert({{"fast_prepares", n_fast_},   {"slow_prepares", n_slow_},    {"aborts_irt", n_abort_irt_},
            {"aborts_crt", n_abort_crt_}, {"aborts_stale", n_stale_}, {"aborts_conflict", n_conflict_},
            {"prepare_timeouts", n_timeouts_}, {"prepare_unwaited", n_unwaited_}});
  if (n_asked_again_) c["prepares_asked_again"] = n_asked_again_;
  if (n_reads_again_) c["reads_again"] = n_reads_again_;
  if (n_read_replies_late_) c["read_replies_late"] = n_read_replies_late_;
}

void Site::add_counters(std::map<std::string, int64_t>& c) const {
  if (n_again_) c["prepares_answered_again"] = n_again_;
  if (epoch_) c["epoch_max"] = static_cast<int64_t>(epoch_);
}

void Replica::route(Env& env, Envelope& m) {
  if (m.has_submit()) return coord_.on_submit(env, m.from(), *m.mutable_submit());
  if (!m.has_tapir()) throw BadMessage("TAPIR replica got a message of another protocol");
  auto& t = *m.mutable_tapir();
  switch (t.body_case()) {
    case ::tapir::Msg::kRead: return site_.on_read(env, m.from(), t.read());
    case ::tapir::Msg::kReadReply: return coord_.on_read_reply(env, m.from(), t.read_reply());
    case ::tapir::Msg::kPrepare: return site_.on_prepare(env, m.from(), *t.mutable_prepare());
    case ::tapir::Msg::kPrepareReply: return coord_.on_prepare_reply(env, t.prepare_reply());
    case ::tapir::Msg::kFinalize: return site_.on_finalize(env, m.from(), t.finalize());
    case ::tapir::Msg::kFinalizeReply: return coord_.on_finalize_reply(env, t.finalize_reply());
    case ::tapir::Msg::kCommit: return site_.on_commit(env, t.commit());
    case ::tapir::Msg::kAbort: return site_.on_abort(t.abort());
    case ::tapir::Msg::kStillHeld: return site_.on_still_held(env, m.from(), t.still_held());
    default: throw BadMessage("empty TAPIR message");
  }
}

// ---- coordinator ------------------------------------------------------------------------

void Coordinator::on_submit(Env& env, NodeId from, ClientSubmit& m) {
  const TxnRequest& t = m.txn();
  check_submitted_here(t);
  std::vector<uint32_t> shards = touched_shards(d_, t);
  if (coords_.count(t.txn_id())) throw BadMessage("txn " + str(t.txn_id()) + " submitted twice");
  Coord& c = coords_[t.txn_id()];
  c.txn = std::move(*m.mutable_txn());  // the coordinator keeps the submit's request
  c.client = from;
  c.shards = std::move(shards);
  send_reads(env, c);
  if (c.read_sent.empty()) {
    const TxnId id = c.txn.txn_id();
    coords_.erase(id);
    throw BadMessage("txn " + str(id) + ": no shard can be read first (its pieces wait on each other's values)");
  }
}

void Coordinator::set_phase(Coord& c, Phase to) {
  transition(c.txn.txn_id(), c.phase, to, {{Phase::Reading, Phase::Preparing}});
}

void Coordinator::send_reads(Env& env, Coord& c) {
  for (uint32_t s : c.shards) {
    if (c.read_sent.count(s) || needs_other_shard(c.txn, s, c.vars)) continue;
    c.read_sent.insert(s);
    uint32_t first = 0;   // replica 0 unless it let a Read time out and has not been heard from since
    while (first + 1 < d_.replicas && read_suspects_.suspected(d_.replica_id(s, first))) ++first;
    c.read_from[s] = first;
    read(env, c, d_.replica_id(s, first));
    c.read_deadline = env.mono_us() + opts_.read_timeout_us;
    read_timer_.arm(env, c.read_deadline);
  }
}

void Coordinator::read(Env& env, const Coord& c, NodeId to) {
  Envelope e;
  auto* r = e.mutable_tapir()->mutable_read();
  *r->mutable_txn() = c.txn;
  *r->mutable_vars() = c.vars;
  post(env, to, std::move(e));
}

// The Read rounds whose timeout passed: each shard not read yet is asked of its other replicas (the first answer
// counts), and the replica asked first is read-suspected until heard from.
void Coordinator::reads_timed_out(Env& env) {
  const auto due = read_timer_.fire(env, coords_, [](const Coord& c) {
    return c.phase == Phase::Reading ? c.read_deadline : TimeUs{0};
  });
  for (TxnId txn : due) {
    Coord& c = coords_.at(txn);
    c.read_deadline = 0;
    for (uint32_t s : c.read_sent) {
      if (c.read_done.count(s) || !c.read_again.insert(s).second) continue;
      ++n_reads_again_;
      const uint32_t first = c.read_from.at(s);
      read_suspects_.suspect(d_.replica_id(s, first));
      for (uint32_t r = 0; r < d_.replicas; ++r)
        if (r != first) read(env, c, d_.replica_id(s, r));
    }
  }
}

void Coordinator::on_read_reply(Env& env, NodeId from, const ::tapir::ReadReply& m) {
  if (m.shard() >= d_.n_shards()) throw BadMessage("ReadReply from shard " + str(m.shard()) + " out of range");
  read_suspects_.heard(from);
  auto it = coords_.find(m.txn_id());
  // A Read goes to several replicas once the first asked has let it time out: their later answers find the shard
  // read, or the transaction finished (and its Coord erased). Anything else is not a reply to a Read sent.
  if (it == coords_.end() || (it->second.read_again.count(m.shard()) && it->second.read_done.count(m.shard()))) {
    ++n_read_replies_late_;
    return;
  }
  Coord& c = it->second;
  if (!c.read_sent.count(m.shard()) || !c.read_done.insert(m.shard()).second)
    throw BadMessage("ReadReply for txn " + str(m.txn_id()) + " from shard " + str(m.shard()) + " unexpected");
  for (const auto& [k, v] : m.vars()) c.vars[k] = v;
  c.versions[m.shard()] = {m.versions().begin(), m.versions().end()};
  send_reads(env, c);
  if (c.read_done.size() < c.shards.size()) {
    if (c.read_sent.size() == c.read_done.size()) {  // nothing in flight and nothing readable: it cannot finish
      const TxnId id = m.txn_id();
      coords_.erase(it);
      throw BadMessage("txn " + str(id) + ": its pieces wait on values no shard produces");
    }
    return;
  }
  set_phase(c, Phase::Preparing);
  c.prepare_deadline = env.mono_us() + opts_.prepare_timeout_us;
  prepare_timer_.arm(env, c.prepare_deadline);
  for (uint32_t s : c.shards)
    for (NodeId r : d_.replicas_of(s)) prepare(env, c, s, r);
}

void Coordinator::prepare(Env& env, Coord& c, uint32_t shard, NodeId to) {
  Envelope e;
  auto* p = e.mutable_tapir()->mutable_prepare();
  *p->mutable_txn() = c.txn;
  for (const auto& [k, v] : c.versions[shard]) (*p->mutable_versions())[k] = v;
  post(env, to, std::move(e));
}

void Coordinator::on_prepare_reply(Env& env, const ::tapir::PrepareReply& m) {
  auto it = coords_.find(m.txn_id());
  if (it == coords_.end()) return;  // decided already: a late reply
  Coord& c = it->second;
  if (c.phase != Phase::Preparing || !std::binary_search(c.shards.begin(), c.shards.end(), m.shard()) || m.replica() >= d_.replicas)
    throw BadMessage("PrepareReply for txn " + str(m.txn_id()) + " from shard " + str(m.shard()) + " unexpected");
  heard(m.shard(), m.replica());
  if (c.decided.count(m.shard())) return;
  // A restarted replica votes in an epoch its shard's other replicas sealed: no result cast before the seal counts
  // with one cast after (docs/protocols/tapir.md, "A restarted replica votes again", IR's view change). Results of an
  // older epoch than the newest this shard's results carried are dropped and their replicas asked again.
  const uint32_t s = m.shard();
  bool count = true;
  if (m.epoch() != 0 || c.epochs.count(s)) {   // (without a rejoin every vote is of epoch 0: nothing to keep)
    std::vector<uint32_t> replied;
    for (const auto& [r, _] : c.results[s]) replied.push_back(r);
    count = c.epochs[s].take(
        m.epoch(), m.replica(), replied,
        [&] {
          c.results[s].clear();
          c.deps[s].clear();
        },
        [&](uint32_t r) {
          ++n_asked_again_;
          prepare(env, c, s, d_.replica_id(s, r));
        },
        mutant::kMixesEpochs);
  }
  if (!count) return;
  c.results[s][m.replica()] = m.result();
  if (m.result() == ::tapir::OK) c.deps[s].insert(m.deps().begin(), m.deps().end());
  decide_shard(env, c, s);
}

void Coordinator::decide_shard(Env& env, Coord& c, uint32_t shard) {
  const auto& got = c.results[shard];
  const size_t n = d_.replicas, majority = n / 2 + 1;
  size_t ok = 0, abort = 0;
  for (const auto& [r, res] : got) {
    ok += res == ::tapir::OK;
    abort += res == ::tapir::ABORT;
  }
  const size_t not_ok = got.size() - ok;
  if (abort > 0 || not_ok >= majority) {
    c.decided[shard] = abort > 0 ? ::tapir::ABORT : ::tapir::ABSTAIN;
    return finish(env, c, false);
  }
  if (got.size() < n) {  // wait for every replica (3 identical results are the fast path) until the timeout
    const size_t quorum = mutant::kTimeoutOnMinority ? 1 : majority;
    const uint32_t mask = replica_mask(got);
    // or, with suspect_on_timeout, while only replicas that let an earlier round time out are missing
    const bool unwaited = !c.timed_out && suspects_.size() > 0 &&
                          suspects_.only_suspects_missing(d_.replicas_of(shard), mask);
    if ((!c.timed_out && !unwaited) || got.size() < quorum) return;
    ++(unwaited ? n_unwaited_ : n_timeouts_);
    if (ok < quorum) {  // a majority's results, not a majority of OKs: TAPIR's decide says RETRY
      c.decided[shard] = ::tapir::ABSTAIN;
      return finish(env, c, false);
    }
  }
  c.decided[shard] = ::tapir::OK;
  if (ok == n && opts_.fast_path) return maybe_finish(env, c);
  c.slow = true;
  for (NodeId r : d_.replicas_of(shard)) {
    Envelope e;
    auto* f = e.mutable_tapir()->mutable_finalize();
    f->set_txn_id(c.txn.txn_id());
    f->set_result(::tapir::OK);
    post(env, r, std::move(e));
  }
}

// The Prepare rounds whose timeout passed: each shard still undecided is decided on the results in (if they are a
// majority's; else it waits on, as IR's client resends). The timer is armed for the next deadline.
void Coordinator::on_timer(Env& env, uint64_t id) {
  if (id == kReadTimer) return reads_timed_out(env);
  if (id != kPrepareTimer) return;
  bool suspected = false;
  const auto due = prepare_timer_.fire(env, coords_, [](const Coord& c) {
    return c.phase == Phase::Preparing ? c.prepare_deadline : TimeUs{0};
  });
  for (TxnId txn : due) {
    auto it = coords_.find(txn);
    if (it == coords_.end()) continue;
    Coord& c = it->second;
    if (c.timed_out) {   // asked again at its timeout and still short of a majority's results of one epoch
      again_if_short(env, c);
      continue;
    }
    c.timed_out = true;
    if (opts_.suspect_on_timeout)   // the replicas that let it time out are not waited for until heard from
      for (uint32_t s : c.shards)
        for (uint32_t r = 0; r < d_.replicas && !c.decided.count(s); ++r)
          if (!c.results[s].count(r) && !suspects_.suspected(d_.replica_id(s, r))) {
            suspects_.suspect(d_.replica_id(s, r));
            suspected = true;
          }
    for (uint32_t s : std::vector<uint32_t>(c.shards)) {
      if (coords_.find(txn) == coords_.end()) break;  // decided and finished by an earlier shard
      if (!c.decided.count(s) && c.results.count(s)) decide_shard(env, c, s);
    }
    if (auto still = coords_.find(txn); still != coords_.end() && still->second.phase == Phase::Preparing)
      again_if_short(env, still->second);
  }
  if (!suspected) return;
  // the other rounds waiting only for them are decided now (in id order: the same at every run of the simulator)
  std::vector<TxnId> waiting;
  for (const auto& [id, c] : coords_)
    if (c.phase == Phase::Preparing && !c.timed_out) waiting.push_back(id);
  std::sort(waiting.begin(), waiting.end());
  for (TxnId id : waiting) {
    auto first = coords_.find(id);
    if (first == coords_.end()) continue;
    for (uint32_t s : std::vector<uint32_t>(first->second.shards)) {
      auto it = coords_.find(id);
      if (it == coords_.end() || it->second.phase != Phase::Preparing) break;   // finished by an earlier shard
      if (!it->second.decided.count(s) && it->second.results.count(s)) decide_shard(env, it->second, s);
    }
  }
}

// A timed-out round with a shard still short of a majority's results of one epoch (its replicas were sealing, or a
// restarted one never got the Prepare): every replica of it without a result counted is asked again, once per
// timeout.
void Coordinator::again_if_short(Env& env, Coord& c) {
  for (uint32_t s : c.shards)
    if (!c.decided.count(s) && c.results[s].size() < d_.replicas / 2 + 1)
      for (uint32_t r = 0; r < d_.replicas; ++r)
        if (!c.results[s].count(r)) {
          ++n_asked_again_;
          prepare(env, c, s, d_.replica_id(s, r));
        }
  c.prepare_deadline = env.mono_us() + opts_.prepare_timeout_us;
  prepare_timer_.arm(env, c.prepare_deadline);
}

void Coordinator::heard(uint32_t shard, uint32_t replica) {
  if (replica >= d_.replicas) return;
  if (suspects_.size() > 0) suspects_.heard(d_.replica_id(shard, replica));
  if (read_suspects_.size() > 0) read_suspects_.heard(d_.replica_id(shard, replica));
}

void Coordinator::on_finalize_reply(Env& env, const ::tapir::FinalizeReply& m) {
  auto it = coords_.find(m.txn_id());
  if (it == coords_.end()) return;
  if (m.replica() >= d_.replicas) throw BadMessage("FinalizeReply from replica " + str(m.replica()));
  it->second.finalized[m.shard()] |= 1u << m.replica();
  maybe_finish(env, it->second);
}

bool Coordinator::fast(const Coord& c, uint32_t shard) const {
  const auto& got = c.results.at(shard);
  return opts_.fast_path && got.size() == d_.replicas &&
         std::all_of(got.begin(), got.end(), [](const auto& x) { return x.second == ::tapir::OK; });
}

void Coordinator::maybe_finish(Env& env, Coord& c) {
  for (uint32_t s : c.shards) {
    auto d = c.decided.find(s);
    if (d == c.decided.end()) return;
    // a shard decided on the slow path counts once a majority confirmed its Finalize
    const uint32_t needed = mutant::kFinalizeOnOne ? 1 : d_.replicas / 2 + 1;
    if (!fast(c, s) && static_cast<uint32_t>(__builtin_popcount(c.finalized[s])) < needed) return;
  }
  finish(env, c, true);
}

void Coordinator::finish(Env& env, Coord& c, bool commit) {
  const TxnId id = c.txn.txn_id();
  for (uint32_t s : c.shards)
    for (NodeId r : d_.replicas_of(s)) {
      Envelope e;
      if (commit) {
        auto* m = e.mutable_tapir()->mutable_commit();
        m->set_txn_id(id);
        for (TxnId x : c.deps[s]) m->add_deps(x);
        *m->mutable_vars() = c.vars;
        // whose votes the decision counted, and who confirmed its Finalize (history q=, a=: the checker's)
        m->set_quorum(replica_mask(c.results[s]));
        if (auto e = c.epochs.find(s); e != c.epochs.end()) m->set_epoch(e->second.now);
        if (!fast(c, s)) m->set_finalized(c.finalized[s]);
      } else {
        e.mutable_tapir()->mutable_abort()->set_txn_id(id);
      }
      post(env, r, std::move(e));
    }
  if (commit) {
    ++(c.slow ? n_slow_ : n_fast_);
  } else {
    ++(c.txn.crt() ? n_abort_crt_ : n_abort_irt_);
    bool stale = false;
    for (const auto& [s, res] : c.decided) stale |= res == ::tapir::ABORT;
    ++(stale ? n_stale_ : n_conflict_);
  }
  Envelope e;
  e.mutable_reply()->set_txn_id(id);
  e.mutable_reply()->set_committed(commit);
  if (commit) {
    *e.mutable_reply()->mutable_outputs() = c.vars;
    // What the commit rests on: the fast quorum's matching results, else the replicas that confirmed its Finalize
    for (uint32_t s : c.shards)
      add_stored(*e.mutable_reply(), s, fast(c, s) ? replica_mask(c.results[s]) : c.finalized[s]);
  }
  env.send(c.client, std::move(e));
  coords_.erase(id);
}

// ---- replica ----------------------------------------------------------------------------

void Site::on_read(Env& env, NodeId from, const ::tapir::Read& m) {
  const TxnRequest& t = m.txn();
  std::vector<uint32_t> shards = touched_shards(d_, t);
  if (!std::binary_search(shards.begin(), shards.end(), me_.shard))
    throw BadMessage("Read of txn " + str(t.txn_id()) + " at shard " + str(me_.shard) + ", which it does not touch");
  Vars vars = m.vars();
  if (!exec_.evaluate(t, &vars))
    throw BadMessage("Read of txn " + str(t.txn_id()) + ": a piece at shard " + str(me_.shard) + " lacks an input");
  Envelope e;
  auto* r = e.mutable_tapir()->mutable_read_reply();
  r->set_txn_id(t.txn_id());
  r->set_shard(me_.shard);
  for (const auto& [k, v] : vars)
    if (!m.vars().count(k)) (*r->mutable_vars())[k] = v;
  for (const auto& [k, version] : versions_of(t)) (*r->mutable_versions())[k] = version;
  post(env, from, std::move(e));
}

// The version of every key `t`'s pieces here access, as this replica has
// applied it: for a key they read, its last writer; for a key they only write,
// its last accessor (a write-only key can stand for rows the piece reads: TPC-C
// Stock-Level writes the coarse key stock:<w> for the stock rows it reads, which
// New-Orders access as readers of that key while they write stock:<w>:<i>).
std::map<std::string, uint64_t> Site::versions_of(const TxnRequest& t) const {
  std::set<std::string> reads, writes;
  for (const auto& p : t.pieces())
    if (p.shard() == me_.shard) {
      reads.insert(p.read_keys().begin(), p.read_keys().end());
      writes.insert(p.write_keys().begin(), p.write_keys().end());
    }
  std::map<std::string, uint64_t> v;
  for (const auto& k : reads) {
    auto ks = keys_.find(k);
    v[k] = ks == keys_.end() ? 0 : ks->second.writer;
  }
  for (const auto& k : writes)
    if (!reads.count(k)) {
      auto ks = keys_.find(k);
      v[k] = ks == keys_.end() ? 0 : ks->second.accessor;
    }
  return v;
}

bool Site::conflicts(const Local& a, const Local& b) const {
  for (const auto& k : a.writes)
    if ((b.writes.count(k) && !mutant::kNoWriteWrite) || b.reads.count(k)) return true;
  for (const auto& k : a.reads)
    if (b.writes.count(k)) return true;
  return false;
}

void Site::hold(TxnId id, Local& l) {
  for (const auto* set : {&l.reads, &l.writes})
    for (const auto& k : *set) keys_[k].holders.insert(id);
}

void Site::release(TxnId id, const Local& l) {
  for (const auto* set : {&l.reads, &l.writes})
    for (const auto& k : *set) keys_[k].holders.erase(id);
}

void Site::on_prepare(Env& env, NodeId from, ::tapir::Prepare& m) {
  const TxnRequest& t = m.txn();
  const TxnId id = t.txn_id();
  std::vector<uint32_t> shards = touched_shards(d_, t);
  if (!std::binary_search(shards.begin(), shards.end(), me_.shard))
    throw BadMessage("Prepare of txn " + str(id) + " at shard " + str(me_.shard) + ", which it does not touch");
  if (auto l = locals_.find(id); l != locals_.end()) {   // asked again: the same result, in its epoch now
    if (l->second.phase != Phase::Committed) {
      ++n_again_;
      exec_.declare_vote(id, {}, false, epoch_);   // cast again in this epoch
      reply_prepare(env, from, id, l->second);
    }
    return;
  }
  if (applied_.count(id)) return;   // applied here already: decided, nobody waits for it
  Local l;
  const std::map<std::string, uint64_t> now = versions_of(t);
  for (const auto& [k, v] : now)
    if (!m.versions().count(k)) throw BadMessage("Prepare of txn " + str(id) + ": no read version for key " + k);
  conflict_keys(t, me_.shard, &l.reads, &l.writes);

  ::tapir::Result result = ::tapir::OK;
  for (const auto* set : {&l.reads, &l.writes})
    for (const auto& k : *set) {
      auto ks = keys_.find(k);
      if (ks == keys_.end()) continue;
      for (TxnId h : ks->second.holders)
        if (!mutant::kNoAbstain && conflicts(l, locals_.at(h))) result = ::tapir::ABSTAIN;
    }
  if (result == ::tapir::OK)
    for (const auto& [k, version] : now)
      if (!mutant::kNoStaleCheck && m.versions().at(k) != version && !(mutant::kReadsUnvalidated && l.reads.count(k)))
        result = ::tapir::ABORT;
  l.result = result;
  if (result == ::tapir::OK) {
    std::set<TxnId> deps;
    for (const auto* set : {&l.reads, &l.writes})
      for (const auto& k : *set) {
        const KeyState& ks = keys_[k];
        if (ks.writer) deps.insert(ks.writer);
      }
    for (const auto& k : l.writes) deps.insert(keys_[k].readers.begin(), keys_[k].readers.end());
    l.ok_deps.assign(deps.begin(), deps.end());
    // the decision must hold this vote where it counts it (history v=; a vote names applied transactions only, a
    // conflicting held one being refused above, so it carries no mark of what was pending)
    exec_.declare_vote(id, l.ok_deps, false, epoch_);
    set_phase(id, l, Phase::Prepared);
    hold(id, l);
  } else {
    exec_.declare_vote(id, {}, false, epoch_);   // a refusal names nothing, but it was cast, and in this epoch
  }
  l.txn = std::move(*m.mutable_txn());  // t is moved-from from here on
  reply_prepare(env, from, id, locals_.emplace(id, std::move(l)).first->second);
}

void Site::reply_prepare(Env& env, NodeId to, TxnId id, const Local& l) {
  post(env, to, prepare_reply(me_, id, l.result, epoch_, l.ok_deps));
}

void conflict_keys(const TxnRequest& t, uint32_t shard, std::set<std::string>* reads, std::set<std::string>* writes) {
  for (const auto& p : t.pieces())
    if (p.shard() == shard) writes->insert(p.write_keys().begin(), p.write_keys().end());
  for (const auto& p : t.pieces())
    if (p.shard() == shard)
      for (const auto& k : p.read_keys())
        if (!writes->count(k)) reads->insert(k);
}

Envelope prepare_reply(const NodeInfo& me, TxnId id, ::tapir::Result result, uint64_t epoch,
                       const std::vector<TxnId>& deps) {
  Envelope e;
  auto* r = e.mutable_tapir()->mutable_prepare_reply();
  r->set_txn_id(id);
  r->set_shard(me.shard);
  r->set_replica(me.replica);
  r->set_result(result);
  r->set_epoch(epoch);
  if (result == ::tapir::OK)
    for (TxnId x : deps) r->add_deps(x);
  return e;
}

// A restarted peer's Seal: from now on its results carry `epoch` (if above its own), and its record says every key's
// version as applied here and every transaction that holds keys here.
void Site::seal(uint64_t epoch, std::string* record) {
  if (!mutant::kKeepsEpoch) epoch_ = std::max(epoch_, epoch);
  ::tapir::Record rec;
  rec.set_epoch(epoch_);
  record_versions(keys_, &rec);
  for (const auto& [id, l] : locals_)
    if (l.phase != Phase::Refused) record_hold(id, l.reads, l.writes, &rec);
  rec.SerializeToString(record);
}

void record_hold(TxnId id, const std::set<std::string>& reads, const std::set<std::string>& writes,
                 ::tapir::Record* rec) {
  ::tapir::HeldTxn* h = rec->add_held();
  h->set_id(id);
  for (const auto& k : reads) h->add_reads(k);
  for (const auto& k : writes) h->add_writes(k);
}

// A restarted peer asks which of the transactions this replica's record said it held it holds no more (applied or
// aborted here since): it releases them too.
void Site::on_still_held(Env& env, NodeId from, const ::tapir::StillHeld& m) {
  Envelope e;
  auto* r = e.mutable_tapir()->mutable_no_longer_held();
  for (TxnId id : m.ids()) {
    auto l = locals_.find(id);
    if (l == locals_.end() || l->second.phase == Phase::Refused) r->add_ids(id);
  }
  post(env, from, std::move(e));
}

void Site::on_finalize(Env& env, NodeId from, const ::tapir::Finalize& m) {
  auto it = locals_.find(m.txn_id());
  if (it == locals_.end()) throw BadMessage("Finalize of txn " + str(m.txn_id()) + ", not prepared here");
  if (m.result() == ::tapir::OK && it->second.phase == Phase::Refused) {
    set_phase(m.txn_id(), it->second, Phase::Prepared);  // the decided result binds this replica too
    hold(m.txn_id(), it->second);
  }
  Envelope e;
  auto* r = e.mutable_tapir()->mutable_finalize_reply();
  r->set_txn_id(m.txn_id());
  r->set_shard(me_.shard);
  r->set_replica(me_.replica);
  post(env, from, std::move(e));
}

void Site::on_commit(Env& env, const ::tapir::Commit& m) {
  auto it = locals_.find(m.txn_id());
  if (it == locals_.end()) throw BadMessage("Commit of txn " + str(m.txn_id()) + ", not prepared here");
  Local& l = it->second;
  if (l.phase == Phase::Committed) throw BadMessage("Commit of txn " + str(m.txn_id()) + " twice");
  if (l.phase == Phase::Refused && !mutant::kUnappliedNotHeld) hold(m.txn_id(), l);  // committed: holds its keys
  set_phase(m.txn_id(), l, Phase::Committed);
  l.deps.assign(m.deps().begin(), m.deps().end());
  l.vars = m.vars();
  exec_.declare_quorum_masks(m.txn_id(), m.quorum(), m.finalized(), m.epoch());
  waiting_.insert(m.txn_id());
  try_apply(env);
}

void Site::on_abort(const ::tapir::Abort& m) {
  auto it = locals_.find(m.txn_id());
  if (it == locals_.end()) throw BadMessage("Abort of txn " + str(m.txn_id()) + ", not prepared here");
  if (it->second.phase == Phase::Committed)
    throw BadMessage("Abort of txn " + str(m.txn_id()) + " after its Commit");
  release(m.txn_id(), it->second);
  locals_.erase(it);
  exec_.forget(m.txn_id());   // its vote: of an attempt that never executes anywhere, not the history's
}

void Site::set_phase(TxnId id, Local& l, Phase to) {
  transition(id, l.phase, to,
             {{Phase::Refused, Phase::Prepared}, {Phase::Refused, Phase::Committed}, {Phase::Prepared, Phase::Committed}});
}

// The safety rule (above): a committed transaction is applied here only after every dependency it recorded at
// its Prepare (the keys' last applied writers, and readers since, at this shard) has been applied here.
void Site::try_apply(Env& env) {
  for (bool progress = true; progress;) {
    progress = false;
    for (auto w = waiting_.begin(); w != waiting_.end();) {
      const TxnId t = *w;
      Local& l = locals_.at(t);
      if (!mutant::kApplyWithoutDeps &&
          !std::all_of(l.deps.begin(), l.deps.end(), [&](TxnId x) { return applied_.count(x) > 0; })) {
        ++w;
        continue;
      }
      exec_.declare_deps(t, l.deps);   // what it waited for above: the checker holds conflicting pieces to it
      for (const auto& p : l.txn.pieces()) {
        if (p.shard() != me_.shard) continue;
        Vars scratch, out;
        const Vars* in = piece_vars(p, l.vars, &scratch, true);
        try {
          exec_.execute(t, p, *in, &out);
        } catch (const BadMessage& err) {
          env.log("txn " + str(t) + " piece " + str(p.id()) + ": " + err.what());  // skipped everywhere alike
        }
      }
      for (const auto& k : l.writes) {
        keys_[k].writer = keys_[k].accessor = t;
        keys_[k].readers.clear();
      }
      for (const auto& k : l.reads) {
        keys_[k].readers.push_back(t);
        keys_[k].accessor = t;
      }
      release(t, l);
      applied_.insert(t);
      locals_.erase(t);
      w = waiting_.erase(w);
      progress = true;
    }
  }
}

// ---- registration -----------------------------------------------------------------------

Options::Options(const Deployment& d) {
  const auto o = protocol_options(d);
  fast_path = o.flag("fast_path");
  prepare_timeout_us = static_cast<TimeUs>(o.integer("prepare_timeout_ms")) * 1000;
  suspect_on_timeout = o.flag("suspect_on_timeout");
  read_timeout_us = static_cast<TimeUs>(o.integer("read_timeout_ms")) * 1000;
}

ProtocolSpec spec() {
  ProtocolSpec p;
  p.name = "tapir";
  p.summary = "optimistic validation over inconsistent replication: read, prepare on 3 (or a majority of) "
              "replicas, abort and retry on conflict";
  p.min_regions = 1;
  p.guarantee = "strict_serializable";
  p.reports_copies = true;   // the fast quorum's results, or the replicas that confirmed the Finalize
  p.order_key = "";  // none: applied in the order of dependencies recorded at Prepare (docs/protocols/tapir.md)
  p.options = {
      OptionSpec::flag("fast_path", true,
                       "decide a shard on 3 identical Prepare results (false: always a majority plus Finalize)"),
      OptionSpec::integer("prepare_timeout_ms", 500, 1, 60000,
                          "a shard whose replicas have not all answered Prepare by then is decided on the results of "
                          "a majority (slow path, Finalize), as IR's consensus timeout (500 ms in the TAPIR "
                          "authors' IRClient): a replica down is not an outage"),
      OptionSpec::flag("suspect_on_timeout", false,
                       "a replica that let a Prepare round time out is not waited for by later rounds until the "
                       "coordinator hears from it: they are decided on a majority's results at once (off: the "
                       "authors' IRClient waits out the timeout in every round)"),
      OptionSpec::integer("read_timeout_ms", 250, 1, 60000,
                          "a Read the asked replica has not answered by then goes to the shard's other replicas, and "
                          "the first answer counts; the replica that let it time out is asked first again once heard "
                          "from (250 ms is the TAPIR authors' read timeout; their client does not fail over: ours)"),
  };
  p.make_replica = [](const Deployment& d, NodeId id, const Workload& w) -> std::unique_ptr<ReplicaNode> {
    return std::make_unique<Replica>(d, id, w);
  };
  p.make_client_driver = [](const Deployment& d, NodeId) -> std::unique_ptr<ClientDriver> {
    return std::make_unique<HandlerClientDriver>(d, "TAPIR");
  };
  p.make_voter = [](const Deployment& d, NodeId id, const Workload& w) -> std::unique_ptr<txn::Voter> {
    return std::make_unique<Voter>(d, id, w);
  };
  return p;
}

}  // namespace txn::tapir
