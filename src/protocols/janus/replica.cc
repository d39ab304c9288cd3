// Janus replica (docs/protocols/janus.md): the node (Replica) routes each message to its Coordinator role
// (replica 0 of the home shard; "coordinator" below) or its Site role ("replica: ordering", execution).
//
// Ordering. A replica records, per conflict key (the pieces' read_keys and
// write_keys), the last transaction that wrote it and those that read it
// since. A PreAccepted transaction depends on the last writer of every key it
// accesses and, for a key it writes, on the readers since; older conflicting
// transactions are its ancestors through that chain. The coordinator commits
// the union of the replies (after an Accept round unless every replica of
// every shard answered the same).
//
// The coordinator decides once every replica of every touched shard has
// replied, so each replica's chain of accesses to a key (every access depends
// on the one before it that conflicts with it) is in the committed graph, and
// two transactions that conflict at a shard are joined by a path of that
// shard's transactions.
//
// A replica down (docs/fault-tolerance.md): after `preaccept_timeout_ms` the
// coordinator decides a shard on the replies of a majority (the slow path: an
// Accept round, then Commit), as the paper's "a majority of each server replica
// alive" asks. The chains alone are then not enough: a replica left out of one
// decision may hold the only chain link between two conflicting transactions
// (T3 decided without C, whose chain ran T2 -> T3 -> T1, leaves T1 unordered
// against T2 and T3). So each reply also carries the replica's pending
// conflicting transactions (every one of this shard that accessed a common key
// and has not executed here), and a decision holds every counted reply's deps
// and pending ones. Two conflicting committed transactions T (first) and U then
// meet at a replica X of both majorities: if T had not executed at X when U
// arrived, U's reply from X holds T; if it had, U holds X's last executed
// access, which X executed after T and so (by induction on commit time) follows
// T in the graph. Where every replica replies, the pending ones add only edges
// already implied by the chains: the components and the execution order are
// those of the chains alone. The fast path still needs every replica's reply
// (3 of 3, the authors' fast quorum) and compares the chains. A replica that let
// a round time out is then not waited for by later rounds until the coordinator
// hears from it again (`suspect_on_timeout`, src/core/suspects.h): they take the
// slow path on a majority at once. The Commit names
// the replies it holds per shard (`quorum`); each replica writes it into its
// history (`q=`), and the checker holds the decision to be a majority's and to
// hold each counted vote.
//
// Execution. The committed graph orders transactions: components (SCCs) in
// topological order, members of a component by id. A replica executes a
// committed transaction T of its shard once it knows T's component, every
// member with a smaller id that touches this shard has executed here, and so
// has every transaction of this shard that a member depends on outside the
// component -- and so has every other member of that transaction's component
// that touches this shard (members run by id, not in the order of this
// shard's per-key chains: without this, a transaction whose chain ends at a
// member could run before another member it conflicts with). Following those
// paths, every shard executes conflicting pieces in
// the order of one global order (a linear extension of the components' order,
// ids within a component): serializable, and nothing waits for a transaction
// that global order puts later, so execution cannot deadlock.
//
// T's component is found by walking its ancestors through their final
// dependencies. The walk stops at a transaction whose component is already
// decided (a component is the same wherever it is computed; if T is not in it,
// none of its ancestors is in T's) and at one of this shard that has executed
// here (its component was decided then). An ancestor that does not touch this
// shard and is not committed here is asked about with an Inquire to a replica
// of a shard it touches (this region's if any), which answers once it has the
// transaction's final dependencies.
//
// Inquires. The Inquire goes to replica 0 of that shard; one not answered
// within `inquire_timeout_ms` goes to the shard's other replicas too, and the
// first answer counts (each is the transaction's committed dependencies, the
// same at every replica). So any live replica of the shard answers: a replica
// down, paused or restarted (a restarted one executes its source's order and
// answers no Inquire) delays the walk by the timeout, never for good.
#include <algorithm>
#include <stdexcept>

#include "check.h"
#include "protocols/janus/janus.h"
#include "protocols/janus/mutant.h"

namespace txn::janus {
namespace {

std::string str(uint64_t x) { return std::to_string(x); }

bool same_ids(const std::vector<::janus::Dep>& a, const std::vector<::janus::Dep>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].id() != b[i].id()) return false;
  return true;
}

// The union of dependency lists, each transaction once with what any list knew of it.
void merge(std::map<TxnId, ::janus::Dep>& u, const std::vector<::janus::Dep>& deps) {
  for (const auto& d : deps) {
    ::janus::Dep& x = u[d.id()];
    x.set_id(d.id());
    if (x.shards_size() == 0) *x.mutable_shards() = d.shards();
    if (x.scc_size() == 0) *x.mutable_scc() = d.scc();
  }
}

}  // namespace

Site::Site(const Deployment& d, NodeId self, const Workload& w, const Options& o, SelfQueue& q)
    : RoleContext(d, self, w, q), exec_(w, me_.shard), opts_(o) {}

Coordinator::Coordinator(const Deployment& d, NodeId self, const Workload& w, const Options& o, SelfQueue& q)
    : RoleContext(d, self, w, q), opts_(o) {}

void Coordinator::add_counters(std::map<std::string, int64_t>& c) const {
  c["fast_commits"] = n_fast_;
  c["slow_commits"] = n_slow_;
  c["preaccept_timeouts"] = n_timeouts_;
  c["preaccept_unwaited"] = n_unwaited_;
  if (n_asked_again_) c["preaccepts_asked_again"] = n_asked_again_;
}

void Site::add_counters(std::map<std::string, int64_t>& c) const {
  c["inquiries"] = n_inquiries_;
  if (n_inquiries_again_) c["inquiries_again"] = n_inquiries_again_;
  c["largest_scc_max"] = largest_scc_;
  c["walk_visits"] = n_walk_visits_;
  c["forgotten"] = n_forgotten_;
  c["vertices_kept"] = static_cast<int64_t>(graph_.size());
  if (n_again_) c["preaccepts_answered_again"] = n_again_;
  if (epoch_) c["epoch_max"] = static_cast<int64_t>(epoch_);
}

// ---- plumbing --------------------------------------------------------------------------

void Replica::route(Env& env, Envelope& m) {
  if (m.has_submit()) return coord_.on_submit(env, m.from(), *m.mutable_submit());
  if (!m.has_janus()) throw BadMessage("Janus replica got a message of another protocol");
  auto& j = *m.mutable_janus();
  switch (j.body_case()) {
    case ::janus::Msg::kPreAccept: return site_.on_pre_accept(env, m.from(), *j.mutable_pre_accept());
    case ::janus::Msg::kPreAcceptReply: return coord_.on_pre_accept_reply(env, j.pre_accept_reply());
    case ::janus::Msg::kAccept: return site_.on_accept(env, m.from(), j.accept());
    case ::janus::Msg::kAcceptReply: return coord_.on_accept_reply(env, j.accept_reply());
    case ::janus::Msg::kCommit: return site_.on_commit(env, j.commit());
    case ::janus::Msg::kInquire: return site_.on_inquire(env, m.from(), j.inquire());
    case ::janus::Msg::kInquireReply: return site_.on_inquire_reply(env, j.inquire_reply());
    case ::janus::Msg::kSendOutput: return site_.on_send_output(env, j.send_output());
    case ::janus::Msg::kPieceResult: return coord_.on_piece_result(env, j.piece_result());
    default: throw BadMessage("empty Janus message");
  }
}

Site::Vertex& Site::vertex(TxnId id) { return graph_[id]; }

void Site::set_status(TxnId id, Vertex& v, Status to) {
  transition(id, v.status, to,
             {{Status::Unknown, Status::PreAccepted}, {Status::PreAccepted, Status::Accepted},
              {Status::PreAccepted, Status::Committed}, {Status::Accepted, Status::Committed},
              {Status::Unknown, Status::Committed}, {Status::Committed, Status::Executed}});
}

void Site::set_scc(const Scc& scc) {
  for (TxnId id : *scc) {   // every member holds it: a walk cuts at any of them (decide_sccs)
    Vertex& v = vertex(id);
    if (v.scc) continue;
    v.scc = scc;
    ++version_;
  }
  to_forget_.push_back(scc->front());
}

// What a replica forgets. A replica would otherwise keep a vertex for every transaction it ever met, for the whole
// run. A decided component whose members that touch this shard have all executed here is never walked again (a walk
// cuts at a decided component), never waited for again (ready(): executed here, or not of this shard) and never voted
// on or executed again (a PreAccept and a Commit come before the execution, each channel is FIFO). All anyone can
// still ask of a member is what fill_dep says: its id, its shards and its component, for a reply naming it as a
// dependency or an Inquire. So the members' vertices are dropped, all at once, and those kept: a byte per transaction
// of the deployment (forgotten_ spans every id of a client; shard sets interned), and for a component of several
// members the list, shared, and an entry per member (multi_). The mutant forgets_components forgets a member of a
// component of several as soon as it has executed here, as a component of its own (a replica that asks of it then
// learns the wrong component).
void Site::forget_settled() {
  const auto settled = [this](TxnId x) {
    auto it = graph_.find(x);
    return it != graph_.end() && (!it->second.local || it->second.status == Status::Executed);
  };
  for (TxnId id : to_forget_) {
    auto it = graph_.find(id);
    if (it == graph_.end() || !it->second.scc) continue;
    const Scc scc = it->second.scc;   // (the vertex goes)
    size_t shards = 0;
    if (mutant::kForgetsComponents && scc->size() > 1) {
      for (TxnId x : *scc)
        if (settled(x) && shard_sets_.index(graph_.at(x).shards, kMulti - 1, &shards)) {
          forgotten_.set(x, static_cast<uint8_t>(1 + shards));
          graph_.erase(x);
          ++n_forgotten_;
        }
      continue;
    }
    if (!std::all_of(scc->begin(), scc->end(), settled)) continue;   // (a member forgotten: all were, at once)
    for (TxnId x : *scc) {
      if (!shard_sets_.index(graph_.at(x).shards, kMulti - 1, &shards)) continue;   // out of indexes: kept
      if (scc->size() == 1) {
        forgotten_.set(x, static_cast<uint8_t>(1 + shards));
      } else {
        forgotten_.set(x, kMulti);
        multi_[x] = {static_cast<uint8_t>(shards), scc};
      }
      graph_.erase(x);
      ++n_forgotten_;
    }
  }
  to_forget_.clear();
}

void Site::learn(const ::janus::Dep& d) {
  if (forgotten(d.id())) return;   // settled here: nothing to learn
  Vertex& v = vertex(d.id());
  if (v.shards.empty() && d.shards_size() > 0) {
    v.shards.assign(d.shards().begin(), d.shards().end());
    v.local = std::binary_search(v.shards.begin(), v.shards.end(), me_.shard);
  }
  if (!v.scc && d.scc_size() > 0) set_scc(std::make_shared<const std::vector<TxnId>>(d.scc().begin(), d.scc().end()));
}

void Site::fill_dep(TxnId id, ::janus::Dep* out) {
  out->set_id(id);
  auto it = graph_.find(id);
  if (it == graph_.end()) {
    if (const uint8_t f = forgotten_.get(id)) {   // what was kept of it: its shards and its component
      const Forgotten* m = f == kMulti ? &multi_.at(id) : nullptr;
      for (uint32_t s : shard_sets_.at(m ? m->shards : f - 1u)) out->add_shards(s);
      if (m) {
        for (TxnId x : *m->scc) out->add_scc(x);
      } else {
        out->add_scc(id);
      }
    }
    return;
  }
  for (uint32_t s : it->second.shards) out->add_shards(s);
  if (it->second.scc)
    for (TxnId x : *it->second.scc) out->add_scc(x);
}

// ---- coordinator ------------------------------------------------------------------------

void Coordinator::on_submit(Env& env, NodeId from, ClientSubmit& m) {
  const TxnRequest& in = m.txn();
  check_submitted_here(in);
  std::vector<uint32_t> shards = touched_shards(d_, in);
  if (coords_.count(in.txn_id())) throw BadMessage("txn " + str(in.txn_id()) + " submitted twice");
  Coord& c = coords_[in.txn_id()];
  c.txn_id = in.txn_id();
  c.client = from;
  c.shards = shards;
  c.txn = std::move(*m.mutable_txn());   // kept until decided: a replica may have to be asked again
  c.deadline = env.mono_us() + opts_.preaccept_timeout_us;
  preaccept_timer_.arm(env, c.deadline);
  for (uint32_t s : shards)
    for (NodeId r : d_.replicas_of(s)) pre_accept(env, c, r);
}

void Coordinator::pre_accept(Env& env, const Coord& c, NodeId to) {
  Envelope e;
  *e.mutable_janus()->mutable_pre_accept()->mutable_txn() = c.txn;
  post(env, to, std::move(e));
}

void Coordinator::on_pre_accept_reply(Env& env, const ::janus::PreAcceptReply& m) {
  auto it = coords_.find(m.txn_id());
  if (it == coords_.end()) return;  // decided and answered already: a late reply
  Coord& c = it->second;
  if (!std::binary_search(c.shards.begin(), c.shards.end(), m.shard()) || m.replica() >= d_.replicas)
    throw BadMessage("PreAcceptReply for txn " + str(m.txn_id()) + " from shard " + str(m.shard()) + " replica " +
                     str(m.replica()) + ", which it does not touch");
  heard(m.shard(), m.replica());
  if (c.phase != Phase::PreAccepting) return;
  // A restarted replica votes in an epoch its shard's other replicas sealed: no reply cast before the seal counts with
  // one cast after (docs/protocols/janus.md, "A restarted replica votes again"). Replies of an older epoch than the
  // newest this shard's replies carried are dropped and their replicas asked again (they answer in their epoch now).
  const uint32_t s = m.shard();
  bool count = true;
  if (m.epoch() != 0 || c.epochs.count(s)) {   // (without a rejoin every vote is of epoch 0: nothing to keep)
    std::vector<uint32_t> replied;
    for (const auto& [r, _] : c.replies[s]) replied.push_back(r);
    count = c.epochs[s].take(
        m.epoch(), m.replica(), replied,
        [&] {
          c.replies[s].clear();
          c.pending[s].clear();
        },
        [&](uint32_t r) {
          ++n_asked_again_;
          pre_accept(env, c, d_.replica_id(s, r));
        },
        mutant::kMixesEpochs);
  }
  if (!count) return;
  c.replies[s][m.replica()] = {m.deps().begin(), m.deps().end()};
  c.pending[s][m.replica()] = {m.pending().begin(), m.pending().end()};
  maybe_decide(env, c);
}

// The PreAccept rounds whose timeout passed are decided on the replies in, where they are a majority's per shard
// (else on the next reply that makes one). The timer is armed for the next deadline.
void Coordinator::on_timer(Env& env, uint64_t id) {
  if (id != kPreAcceptTimer) return;
  const auto due = preaccept_timer_.fire(env, coords_, [](const Coord& c) {
    return c.phase == Phase::PreAccepting ? c.deadline : TimeUs{0};
  });
  bool suspected = false;
  for (TxnId txn : due) {
    Coord& c = coords_.at(txn);
    const bool first = !c.timed_out;
    c.timed_out = true;
    if (opts_.suspect_on_timeout && first)   // the replicas that let it time out are not waited for until heard from
      for (uint32_t s : c.shards)
        for (uint32_t r = 0; r < d_.replicas; ++r)
          if (!c.replies[s].count(r) && !suspects_.suspected(d_.replica_id(s, r))) {
            suspects_.suspect(d_.replica_id(s, r));
            suspected = true;
          }
    maybe_decide(env, c);
    if (c.phase != Phase::PreAccepting) continue;
    // Still no majority's replies of one epoch in some shard (its replicas were sealing, or a restarted one never got
    // the PreAccept): every replica without a reply counted is asked again, once per timeout.
    for (uint32_t s : c.shards)
      if (c.replies[s].size() < d_.replicas / 2 + 1)
        for (uint32_t r = 0; r < d_.replicas; ++r)
          if (!c.replies[s].count(r)) {
            ++n_asked_again_;
            pre_accept(env, c, d_.replica_id(s, r));
          }
    c.deadline = env.mono_us() + opts_.preaccept_timeout_us;
    preaccept_timer_.arm(env, c.deadline);
  }
  if (!suspected) return;
  // the other rounds waiting only for them are decided now (in id order: the same at every run of the simulator)
  std::vector<TxnId> waiting;
  for (const auto& [id, c] : coords_)
    if (c.phase == Phase::PreAccepting && !c.timed_out) waiting.push_back(id);
  std::sort(waiting.begin(), waiting.end());
  for (TxnId id : waiting) maybe_decide(env, coords_.at(id));
}

void Coordinator::heard(uint32_t shard, uint32_t replica) {
  if (suspects_.size() > 0 && replica < d_.replicas) suspects_.heard(d_.replica_id(shard, replica));
}

// Decided once every replica of every touched shard has replied, or, after the
// timeout, a majority of each (see the header comment). Fast path: every
// replica replied and the replies of each shard name the same direct
// predecessors. Slow path otherwise (or with the option off): Accept the union
// of the counted replies' deps and pending ones.
void Coordinator::maybe_decide(Env& env, Coord& c) {
  const size_t all = d_.replicas, majority = d_.replicas / 2 + 1;
  // Not waited for: every reply missing is a suspected replica's (suspect_on_timeout), in some shard at least.
  bool unwaited = false;
  if (!c.timed_out && suspects_.size() > 0) {
    bool only_suspects = true;
    for (uint32_t s : c.shards) {
      const auto& got = c.replies[s];
      if (got.size() == all) continue;
      if (!suspects_.only_suspects_missing(d_.replicas_of(s), replica_mask(got))) only_suspects = false;
      else unwaited = true;
    }
    unwaited = unwaited && only_suspects;
  }
  const size_t need = c.timed_out || unwaited ? (mutant::kSlowPathOnMinority ? 1 : majority)
                                              : mutant::kMajorityReplies ? majority : all;
  bool agree = opts_.fast_path;
  for (uint32_t s : c.shards) {
    const auto& got = c.replies[s];
    if (got.size() < need) return;
    if (got.size() < all && !mutant::kMajorityReplies) agree = false;   // 3 of 3 is the fast quorum
    for (const auto& [r, deps] : got)
      if (!same_ids(deps, got.begin()->second)) agree = false;
  }
  if (c.timed_out) ++n_timeouts_;
  else if (unwaited) ++n_unwaited_;
  if ((c.timed_out || unwaited) && mutant::kTimeoutSkipsAccept) agree = true;
  std::map<TxnId, ::janus::Dep> u;
  for (const auto& [s, got] : c.replies)
    for (const auto& [r, deps] : got) merge(u, deps);
  for (const auto& [s, got] : c.pending)
    for (const auto& [r, deps] : got) merge(u, deps);
  c.deps.clear();
  for (auto& [id, d] : u) c.deps.push_back(d);
  if (agree) {
    ++n_fast_;
    return commit(env, c);
  }
  set_phase(c, Phase::Accepting);
  for (uint32_t s : c.shards)
    for (NodeId r : d_.replicas_of(s)) {
      Envelope e;
      auto* a = e.mutable_janus()->mutable_accept();
      a->set_txn_id(c.txn_id);
      a->set_ballot(1);
      for (const auto& d : c.deps) *a->add_deps() = d;
      post(env, r, std::move(e));
    }
}

void Coordinator::on_accept_reply(Env& env, const ::janus::AcceptReply& m) {
  auto it = coords_.find(m.txn_id());
  if (it == coords_.end() || it->second.phase == Phase::Committed) return;
  Coord& c = it->second;
  if (c.phase != Phase::Accepting) throw BadMessage("AcceptReply for txn " + str(m.txn_id()) + ", which is not accepting");
  if (!m.ok()) throw BadMessage("Accept of txn " + str(m.txn_id()) + " refused (no recovery: one ballot)");
  if (m.replica() >= d_.replicas || !std::binary_search(c.shards.begin(), c.shards.end(), m.shard()))
    throw BadMessage("AcceptReply for txn " + str(m.txn_id()) + " from shard " + str(m.shard()) + " replica " +
                     str(m.replica()) + ", which it does not touch");
  heard(m.shard(), m.replica());
  c.accept_oks[m.shard()] |= 1u << m.replica();
  for (uint32_t s : c.shards)
    if (static_cast<uint32_t>(__builtin_popcount(c.accept_oks[s])) < d_.replicas / 2 + 1) return;
  ++n_slow_;
  commit(env, c);
}

void Coordinator::set_phase(Coord& c, Phase to) {
  transition(c.txn_id, c.phase, to,
             {{Phase::PreAccepting, Phase::Accepting}, {Phase::PreAccepting, Phase::Committed},
              {Phase::Accepting, Phase::Committed}});
}

void Coordinator::commit(Env& env, Coord& c) {
  set_phase(c, Phase::Committed);
  std::map<uint32_t, uint32_t> quorum;   // shard -> the replicas whose replies the decision holds
  for (const auto& [s, got] : c.replies) quorum[s] = replica_mask(got);
  for (uint32_t s : c.shards)
    for (NodeId r : d_.replicas_of(s)) {
      Envelope e;
      auto* m = e.mutable_janus()->mutable_commit();
      m->set_txn_id(c.txn_id);
      for (const auto& d : c.deps) *m->add_deps() = d;
      m->set_quorum(quorum[s]);
      if (auto e = c.epochs.find(s); e != c.epochs.end()) m->set_epoch(e->second.now);
      if (auto a = c.accept_oks.find(s); a != c.accept_oks.end()) m->set_accepted(a->second);
      post(env, r, std::move(e));
    }
  // The decision is durable where it was accepted (slow path), else where every reply of its fast quorum holds it.
  for (uint32_t s : c.shards)
    c.stored[s] = c.accept_oks.count(s) ? c.accept_oks[s] : quorum[s];
  c.replies.clear();   // decided: what the replies said is in c.deps
  c.pending.clear();
}

void Coordinator::on_piece_result(Env& env, const ::janus::PieceResult& m) {
  auto it = coords_.find(m.txn_id());
  if (it == coords_.end()) throw BadMessage("PieceResult for unknown txn " + str(m.txn_id()));
  Coord& c = it->second;
  if (c.phase != Phase::Committed || !std::binary_search(c.shards.begin(), c.shards.end(), m.shard()))
    throw BadMessage("PieceResult for txn " + str(m.txn_id()) + " from shard " + str(m.shard()) + " unexpected");
  for (const auto& [k, v] : m.vars()) c.outputs[k] = v;
  c.results.insert(m.shard());
  const bool all = c.results.size() == c.shards.size();
  if (!all && (!mutant::kReplyOnFirstResult || c.answered)) return;
  if (!c.answered) {
    Envelope e;
    e.mutable_reply()->set_txn_id(c.txn_id);
    e.mutable_reply()->set_committed(true);
    *e.mutable_reply()->mutable_outputs() = c.outputs;
    for (const auto& [s, mask] : c.stored) add_stored(*e.mutable_reply(), s, mask);
    env.send(c.client, std::move(e));
    c.answered = true;
  }
  if (all) coords_.erase(it);
}

// ---- replica: ordering ------------------------------------------------------------------

void Site::on_pre_accept(Env& env, NodeId from, ::janus::PreAccept& m) {
  const TxnRequest& t = m.txn();
  std::vector<uint32_t> shards = touched_shards(d_, t);
  if (!std::binary_search(shards.begin(), shards.end(), me_.shard))
    throw BadMessage("PreAccept of txn " + str(t.txn_id()) + " at shard " + str(me_.shard) + ", which it does not touch");
  if (auto l = locals_.find(t.txn_id()); l != locals_.end()) {   // asked again: the same vote, in its epoch now
    const Vertex& v = graph_.at(t.txn_id());
    if (v.status == Status::PreAccepted || v.status == Status::Accepted) {
      ++n_again_;
      exec_.declare_vote(t.txn_id(), {}, true, epoch_);   // the same vote, cast again in this epoch
      reply_pre_accept(env, from, t.txn_id(), v.deps, l->second.pending);
    }
    return;   // decided already: nobody waits for it
  }
  if (forgotten(t.txn_id()) || (graph_.count(t.txn_id()) && graph_[t.txn_id()].status != Status::Unknown))
    return;   // executed: decided
  check_inputs_produced(t, me_.shard);
  const TxnId id = t.txn_id();
  // Dependencies at this shard, then this transaction becomes the keys' latest access: each key of its pieces here
  // once (a key it writes as a write), looked up once. Beside the direct predecessors, every conflicting access not
  // executed here yet (pending).
  std::set<TxnId> deps, pending;
  std::vector<const std::string*> writes, reads;
  keys_here(t, &writes, &reads);
  std::vector<KeyState*> wks, rks;   // kept until it executes here (the map's values do not move)
  for (const std::string* k : writes) {   // after every earlier writer and reader; then its only writer
    KeyState& ks = keys_[*k];
    wks.push_back(&ks);
    if (ks.writer) deps.insert(ks.writer);
    deps.insert(ks.readers.begin(), ks.readers.end());
    pending.insert(ks.pending_writers.begin(), ks.pending_writers.end());
    pending.insert(ks.pending_readers.begin(), ks.pending_readers.end());
    ks.writer = id;
    ks.readers.clear();
    ks.pending_writers.push_back(id);
  }
  for (const std::string* k : reads) {    // after the last writer; then one of its readers
    KeyState& ks = keys_[*k];
    rks.push_back(&ks);
    if (ks.writer) deps.insert(ks.writer);
    pending.insert(ks.pending_writers.begin(), ks.pending_writers.end());
    ks.readers.push_back(id);
    ks.pending_readers.push_back(id);
  }
  deps.erase(id);
  pending.erase(id);
  for (TxnId x : deps) pending.erase(x);
  if (mutant::kNoPendingDeps) pending.clear();

  Vertex& v = vertex(id);
  set_status(id, v, Status::PreAccepted);
  v.shards = shards;
  v.local = true;
  v.deps.assign(deps.begin(), deps.end());
  std::vector<TxnId> vote(v.deps);
  vote.insert(vote.end(), pending.begin(), pending.end());
  exec_.declare_vote(id, vote, true, epoch_);   // a decision that counts this reply must hold it: the checker sees
                                                // one that did not
  Local& l = locals_[id];
  l.txn = std::move(*m.mutable_txn());  // t is moved-from below this line
  l.coordinator = from;
  l.write_keys = std::move(wks);
  l.read_keys = std::move(rks);
  l.pending.assign(pending.begin(), pending.end());
  reply_pre_accept(env, from, id, v.deps, l.pending);
}

void Site::reply_pre_accept(Env& env, NodeId to, TxnId id, const std::vector<TxnId>& deps,
                            const std::vector<TxnId>& pending) {
  Envelope e;
  auto* r = e.mutable_janus()->mutable_pre_accept_reply();
  r->set_txn_id(id);
  r->set_shard(me_.shard);
  r->set_replica(me_.replica);
  r->set_epoch(epoch_);
  for (TxnId x : deps) fill_dep(x, r->add_deps());
  for (TxnId x : pending) fill_dep(x, r->add_pending());
  post(env, to, std::move(e));
}

// A restarted peer's Seal: from now on its replies carry `epoch` (if above its own), and its record says, per key,
// the chain's last accesses and the accesses not executed here, with what it knows of each transaction named.
void Site::seal(uint64_t epoch, std::string* record) {
  if (!mutant::kKeepsEpoch) epoch_ = std::max(epoch_, epoch);
  ::janus::Record rec;
  rec.set_epoch(epoch_);
  std::set<TxnId> named;
  for (const auto& [key, ks] : keys_) {
    if (!ks.writer && ks.readers.empty() && ks.pending_writers.empty() && ks.pending_readers.empty()) continue;
    ::janus::KeyRecord* k = rec.add_keys();
    k->set_key(key);
    if (ks.writer) k->add_writers(ks.writer);
    for (TxnId x : ks.readers) k->add_readers(x);
    for (TxnId x : ks.pending_writers) k->add_pending_writers(x);
    for (TxnId x : ks.pending_readers) k->add_pending_readers(x);
    if (ks.writer) named.insert(ks.writer);
    named.insert(ks.readers.begin(), ks.readers.end());
    named.insert(ks.pending_writers.begin(), ks.pending_writers.end());
    named.insert(ks.pending_readers.begin(), ks.pending_readers.end());
  }
  for (TxnId x : named) {
    ::janus::TxnRecord* t = rec.add_txns();
    ::janus::Dep d;
    fill_dep(x, &d);
    t->set_id(x);
    *t->mutable_shards() = d.shards();
    *t->mutable_scc() = d.scc();
    if (auto l = locals_.find(x); l != locals_.end()) {   // not executed here: how many pieces it has here
      uint32_t n = 0;
      for (const auto& p : l->second.txn.pieces()) n += p.shard() == me_.shard;
      t->set_pieces_here(n);
    }
  }
  rec.SerializeToString(record);
}

void Site::keys_here(const TxnRequest& t, std::vector<const std::string*>* writes,
                     std::vector<const std::string*>* reads) const {
  for (const auto& p : t.pieces()) {
    if (p.shard() != me_.shard) continue;
    for (const auto& k : p.write_keys()) writes->push_back(&k);
    if (!mutant::kWritesOnly)
      for (const auto& k : p.read_keys()) reads->push_back(&k);
  }
  const auto less = [](const std::string* a, const std::string* b) { return *a < *b; };
  const auto same = [](const std::string* a, const std::string* b) { return *a == *b; };
  std::sort(writes->begin(), writes->end(), less);
  writes->erase(std::unique(writes->begin(), writes->end(), same), writes->end());
  std::sort(reads->begin(), reads->end(), less);
  reads->erase(std::unique(reads->begin(), reads->end(), same), reads->end());
  // a key it writes is a write only
  reads->erase(std::remove_if(reads->begin(), reads->end(),
                              [&](const std::string* k) { return std::binary_search(writes->begin(), writes->end(), k, less); }),
               reads->end());
}

void Site::on_accept(Env& env, NodeId from, const ::janus::Accept& m) {
  auto it = locals_.find(m.txn_id());
  if (it == locals_.end()) throw BadMessage("Accept of txn " + str(m.txn_id()) + ", not pre-accepted here");
  const Status s = vertex(m.txn_id()).status;
  if (s == Status::Committed) throw BadMessage("Accept of txn " + str(m.txn_id()) + " after its commit");
  if (s == Status::Accepted) throw BadMessage("Accept of txn " + str(m.txn_id()) + " twice (one ballot)");
  std::vector<TxnId> deps;
  for (const auto& d : m.deps()) {
    learn(d);
    deps.push_back(d.id());
  }
  Vertex& v = vertex(m.txn_id());  // learn() may have grown the graph
  set_status(m.txn_id(), v, Status::Accepted);
  v.deps = std::move(deps);
  Envelope e;
  auto* r = e.mutable_janus()->mutable_accept_reply();
  r->set_txn_id(m.txn_id());
  r->set_shard(me_.shard);
  r->set_replica(me_.replica);
  r->set_ballot(m.ballot());
  r->set_ok(true);
  post(env, from, std::move(e));
}

void Site::on_commit(Env& env, const ::janus::Commit& m) {
  const TxnId id = m.txn_id();
  if (!locals_.count(id)) throw BadMessage("Commit of txn " + str(id) + ", not pre-accepted here");
  Vertex& v = vertex(id);
  if (v.status == Status::Committed) throw BadMessage("Commit of txn " + str(id) + " twice");
  std::vector<TxnId> deps;
  for (const auto& d : m.deps()) {
    if (d.id() == id) throw BadMessage("txn " + str(id) + " depends on itself");
    learn(d);
    deps.push_back(d.id());
  }
  Vertex& w = vertex(id);  // learn() may have grown the graph
  w.deps = std::move(deps);
  if (m.quorum() != 0) {   // whose votes the decision holds, and whose AcceptOKs (history `q=`, `a=`: the checker's)
    exec_.declare_quorum_masks(id, m.quorum(), m.accepted(), m.epoch());
  }
  set_status(id, w, Status::Committed);
  ++version_;
  committed_.insert(id);
  answer_inquiries(env, id);
  try_execute(env);
}

// ---- replica: inquiries -----------------------------------------------------------------

void Site::on_inquire(Env& env, NodeId from, const ::janus::Inquire& m) {
  // Not committed here yet (perhaps not even pre-accepted: the inquirer
  // learned that it touches this shard): answered at its commit. Forgotten: at once, with what was kept of it.
  if (forgotten(m.txn_id())) {
    Envelope e;
    auto* r = e.mutable_janus()->mutable_inquire_reply();
    ::janus::Dep d;
    fill_dep(m.txn_id(), &d);
    r->set_txn_id(m.txn_id());
    *r->mutable_shards() = d.shards();
    *r->mutable_scc() = d.scc();
    return post(env, from, std::move(e));
  }
  auto it = graph_.find(m.txn_id());
  inquirers_[m.txn_id()].push_back(from);
  if (it != graph_.end() && (it->second.status == Status::Committed || it->second.status == Status::Executed))
    answer_inquiries(env, m.txn_id());
}

void Site::answer_inquiries(Env& env, TxnId id) {
  auto q = inquirers_.find(id);
  if (q == inquirers_.end()) return;
  const Vertex& v = graph_.at(id);
  for (NodeId to : q->second) {
    Envelope e;
    auto* r = e.mutable_janus()->mutable_inquire_reply();
    r->set_txn_id(id);
    for (uint32_t s : v.shards) r->add_shards(s);
    for (TxnId x : v.deps) fill_dep(x, r->add_deps());
    if (v.scc)
      for (TxnId x : *v.scc) r->add_scc(x);
    post(env, to, std::move(e));
  }
  inquirers_.erase(q);
}

void Site::on_inquire_reply(Env& env, const ::janus::InquireReply& m) {
  asked_.erase(m.txn_id());
  if (forgotten(m.txn_id())) return;   // its component was learned meanwhile
  Vertex& v0 = vertex(m.txn_id());
  if (v0.local) throw BadMessage("InquireReply about txn " + str(m.txn_id()) + ", which touches this shard");
  if (v0.status == Status::Committed) return;  // answered twice
  std::vector<TxnId> deps;
  for (const auto& d : m.deps()) {
    learn(d);
    deps.push_back(d.id());
  }
  Vertex& v = vertex(m.txn_id());
  if (v.shards.empty()) v.shards.assign(m.shards().begin(), m.shards().end());
  v.deps = std::move(deps);
  set_status(m.txn_id(), v, Status::Committed);
  if (m.scc_size() > 0) set_scc(std::make_shared<const std::vector<TxnId>>(m.scc().begin(), m.scc().end()));
  ++version_;
  try_execute(env);
}

// An Inquire unanswered by its deadline: the shard's other replicas are asked too, unless the transaction's
// dependencies or component were learned meanwhile (another message, another answer).
void Site::on_timer(Env& env, uint64_t id) {
  if (id != kInquireTimer) return;
  for (TxnId t : inquire_timer_.fire(env, asked_, [](const Asked& a) { return a.deadline; })) {
    const uint32_t shard = asked_.at(t).shard;
    asked_.erase(t);
    const auto g = graph_.find(t);
    if (forgotten(t) || g == graph_.end() || g->second.scc || g->second.status == Status::Committed) continue;
    ++n_inquiries_again_;
    for (uint32_t r = 1; r < d_.replicas; ++r) {
      Envelope e;
      e.mutable_janus()->mutable_inquire()->set_txn_id(t);
      post(env, d_.replica_id(shard, r), std::move(e));
    }
  }
}

// ---- replica: execution -----------------------------------------------------------------

// Finds the components of `roots` (committed transactions of this shard whose component is not known), or sends
// the Inquires that finding them needs, in one walk. The walk covers the roots' ancestors, cut at decided
// components and at executed transactions (which have theirs). Tarjan's algorithm over the walked committed
// transactions then decides every component of the walk whose ancestors are all committed, not only the roots':
// each is final (the committed dependencies do not change, and a cut is never in a walked transaction's component:
// a decided component is held by every member known here, set_scc), so no later walk passes through it again.
// Before (issue 51), each root was walked on its own after every change, and only its own component was kept: the
// committed transactions of other shards met as ancestors were walked again and again, by every root behind them,
// and the cost per transaction grew with the load and the run.
void Site::decide_sccs(Env& env, const std::vector<TxnId>& roots) {
  struct Mark {
    uint32_t index, low;
    bool on_stack, tainted;  // tainted: reaches a transaction not committed here yet (its component may still grow)
  };
  std::unordered_map<TxnId, Mark> mark;
  std::vector<TxnId> tarjan;  // Tarjan's stack
  struct Frame {
    TxnId x;
    size_t next;  // the next of x's deps to look at
  };
  std::vector<Frame> dfs;
  uint32_t counter = 0;
  // What a dependency p of a walked transaction is: walked (a Tarjan vertex), a cut (decided) or not committed.
  enum class Kind { Walk, Cut, Open };
  auto kind = [&](TxnId p) {
    if (forgotten(p)) return Kind::Cut;
    Vertex& v = vertex(p);
    if (v.scc || v.status == Status::Executed) return Kind::Cut;
    if (v.status == Status::Committed) return Kind::Walk;
    // One of this shard commits here in time; another is asked about.
    if (!v.local && !v.inquired && !v.shards.empty()) {
      v.inquired = true;
      ++n_inquiries_;
      uint32_t target = v.shards.front();
      for (uint32_t s : v.shards)
        if (d_.region_of_shard(s) == me_.region) { target = s; break; }
      // to that shard's replica 0, and to its others if it has not answered by the deadline (on_timer)
      Envelope e;
      e.mutable_janus()->mutable_inquire()->set_txn_id(p);
      post(env, d_.replica_id(target, 0), std::move(e));
      const TimeUs deadline = env.mono_us() + opts_.inquire_timeout_us;
      asked_[p] = Asked{deadline, target};
      inquire_timer_.arm(env, deadline);
    }
    return Kind::Open;
  };
  auto enter = [&](TxnId x) {
    ++n_walk_visits_;
    mark[x] = Mark{counter, counter, true, false};
    ++counter;
    tarjan.push_back(x);
    dfs.push_back({x, 0});
  };
  for (TxnId root : roots) {
    if (mark.count(root) || kind(root) != Kind::Walk) continue;
    enter(root);
    while (!dfs.empty()) {
      Frame& f = dfs.back();
      const std::vector<TxnId>& deps = graph_.at(f.x).deps;
      if (f.next < deps.size()) {
        const TxnId p = deps[f.next++];
        Mark& m = mark.at(f.x);
        if (auto it = mark.find(p); it != mark.end()) {
          if (it->second.on_stack) m.low = std::min(m.low, it->second.index);
          else m.tainted |= it->second.tainted;   // a component already settled in this walk
          continue;
        }
        switch (kind(p)) {
          case Kind::Cut: break;
          case Kind::Open: m.tainted = true; break;
          case Kind::Walk: enter(p); break;   // f is not used after this: dfs may have moved
        }
        continue;
      }
      const TxnId x = f.x;
      dfs.pop_back();
      Mark& mx = mark.at(x);
      if (!dfs.empty()) {   // hand x's low link and taint to its parent in the walk
        Mark& parent = mark.at(dfs.back().x);
        parent.low = std::min(parent.low, mx.low);
      }
      if (mx.low != mx.index) continue;
      // x is the root of a component: the members are on Tarjan's stack above it.
      std::vector<TxnId> members;
      bool tainted = false;
      for (;;) {
        const TxnId y = tarjan.back();
        tarjan.pop_back();
        Mark& my = mark.at(y);
        my.on_stack = false;
        tainted |= my.tainted;
        members.push_back(y);
        if (y == x) break;
      }
      for (TxnId y : members) mark.at(y).tainted = tainted;
      if (!dfs.empty() && tainted) mark.at(dfs.back().x).tainted = true;
      if (tainted && !mutant::kSettleOpen) continue;
      std::sort(members.begin(), members.end());
      auto scc = std::make_shared<const std::vector<TxnId>>(std::move(members));
      set_scc(scc);
      largest_scc_ = std::max<int64_t>(largest_scc_, static_cast<int64_t>(scc->size()));
    }
  }
}

// The safety rule (Execution, above): a committed transaction of this shard executes only after every member
// of its component with a smaller id that touches this shard, and every transaction of this shard a member
// depends on outside the component, has executed here -- and, with such a transaction, every other member of its
// component that touches this shard: that component precedes this one, and its members run by id, not in the order
// of this shard's per-key chains, so the chain from this component may end at a member that ran before another
// one of its component (found by the anomaly workload: a transaction depending on member A of an earlier
// component ran before member B, whose id is larger than A's, and B wrote a list it wrote).
bool Site::ready(TxnId t) const {
  if (mutant::kNoDependencyWait) return true;
  const auto& scc = *graph_.at(t).scc;
  auto unexecuted_here = [this](TxnId x) {
    auto it = graph_.find(x);
    return it != graph_.end() && it->second.local && it->second.status != Status::Executed;
  };
  for (TxnId m : scc) {
    auto it = graph_.find(m);
    if (it == graph_.end()) continue;
    const Vertex& v = it->second;
    const bool before = mutant::kComponentOrderDescending ? m > t : m < t;
    if (!mutant::kNoComponentOrder && before && v.local && v.status != Status::Executed) return false;
    for (TxnId p : v.deps) {
      if (mutant::kNoExternalWait || std::binary_search(scc.begin(), scc.end(), p)) continue;
      const auto di = graph_.find(p);
      if (di == graph_.end()) continue;   // forgotten: executed here, or not of this shard (its deps were learned)
      const Vertex& d = di->second;
      if (!d.local) continue;
      if (d.status != Status::Executed) return false;
      if (d.scc && std::any_of(d.scc->begin(), d.scc->end(), unexecuted_here)) return false;
    }
  }
  return true;
}

void Site::try_execute(Env& env) {
  for (bool progress = true; progress;) {
    progress = false;
    // One walk for every committed transaction whose component is not known, if the graph changed since its last.
    std::vector<TxnId> roots;
    for (TxnId t : committed_)
      if (!graph_.at(t).scc && locals_.at(t).explored_at != version_) roots.push_back(t);
    if (!roots.empty()) {
      decide_sccs(env, roots);
      for (TxnId t : roots) locals_.at(t).explored_at = version_;
    }
    for (auto it = committed_.begin(); it != committed_.end();) {
      const TxnId t = *it++;
      Local& l = locals_.at(t);
      if (!graph_.at(t).scc || !ready(t)) continue;
      if (run_pieces(env, t, l)) {
        executed(env, t);
        progress = true;
      }
    }
  }
  forget_settled();
}

bool Site::run_pieces(Env& env, TxnId t, Local& l) {
  Vars& known = vars_[t];
  exec_.declare_deps(t, graph_.at(t).deps);   // the committed dependencies, for the checker (the first call stands)
  for (const auto& p : l.txn.pieces()) {
    if (p.shard() != me_.shard || l.done.count(p.id())) continue;
    Vars scratch, out;
    const Vars* in = piece_vars(p, known, &scratch);
    if (!in) return false;  // waits for a value from another shard
    try {
      // The order key (docs/protocols/janus.md): members of one component run by id at every shard; the
      // component (its smallest id) is the key's domain, since components order by the graph, not by a key.
      exec_.execute(t, p, *in, &out, false, order_key(graph_.at(t).scc->front(), t, 0));
    } catch (const BadMessage& err) {
      env.log("txn " + str(t) + " piece " + str(p.id()) + ": " + err.what());  // skipped on every replica alike
    }
    l.done.insert(p.id());
    if (out.empty()) continue;
    for (const auto& [k, v] : out) known[k] = v;
    for (uint32_t s : consumer_shards(l.txn, me_.shard, out))
      for (NodeId r : d_.replicas_of(s)) {
        Envelope e;
        auto* so = e.mutable_janus()->mutable_send_output();
        so->set_txn_id(t);
        *so->mutable_vars() = out;
        post(env, r, std::move(e));
      }
  }
  return true;
}

void Site::executed(Env& env, TxnId t) {
  Local& l = locals_.at(t);
  Vertex& v = vertex(t);
  set_status(t, v, Status::Executed);
  const auto drop = [t](std::vector<TxnId>& ids) {   // no longer pending at its keys
    if (auto it = std::find(ids.begin(), ids.end(), t); it != ids.end()) ids.erase(it);
    if (ids.empty()) std::vector<TxnId>().swap(ids);   // (a key's state is kept for the run: its heap part is not)
  };
  for (KeyState* ks : l.write_keys) drop(ks->pending_writers);
  for (KeyState* ks : l.read_keys) drop(ks->pending_readers);
  if (me_.replica == 0) {
    Envelope e;
    auto* r = e.mutable_janus()->mutable_piece_result();
    r->set_txn_id(t);
    r->set_shard(me_.shard);
    shard_outputs(l.txn, me_.shard, vars_[t], r->mutable_vars());
    for (TxnId x : *v.scc) r->add_scc(x);
    post(env, l.coordinator, std::move(e));
  }
  vars_.erase(t);
  committed_.erase(t);
  locals_.erase(t);
  to_forget_.push_back(t);
}

void Site::on_send_output(Env& env, const ::janus::SendOutput& m) {
  auto g = graph_.find(m.txn_id());
  if (forgotten(m.txn_id()) || (g != graph_.end() && g->second.status == Status::Executed))
    return;  // every piece here ran already
  Vars& known = vars_[m.txn_id()];
  for (const auto& [k, v] : m.vars()) known[k] = v;
  if (committed_.count(m.txn_id())) try_execute(env);
}

// ---- registration -----------------------------------------------------------------------

Options::Options(const Deployment& d) {
  const ProtocolOptions o = protocol_options(d);
  fast_path = o.flag("fast_path");
  preaccept_timeout_us = static_cast<TimeUs>(o.integer("preaccept_timeout_ms")) * 1000;
  suspect_on_timeout = o.flag("suspect_on_timeout");
  inquire_timeout_us = static_cast<TimeUs>(o.integer("inquire_timeout_ms")) * 1000;
}

ProtocolSpec spec() {
  ProtocolSpec p;
  p.name = "janus";
  p.summary = "dependency graphs on conflict keys: one round trip when replicas agree, execution in SCC order";
  p.min_regions = 1;
  p.guarantee = "strict_serializable";
  p.reports_copies = true;   // the fast quorum's replies, or the Accept round's majority
  p.order_key = "within one strongly connected component, the txn id (domain: the component's smallest id); "
                "components are ordered by the dependency graph, not by a key";
  p.options = {
      OptionSpec::flag("fast_path", true,
                       "commit on identical PreAccept replies from every replica of every touched shard "
                       "(false: always take the Accept round)"),
      OptionSpec::integer("preaccept_timeout_ms", 500, 1, 600000,
                          "a shard whose replicas have not all answered PreAccept by then is decided on a "
                          "majority's replies, by the Accept round (ours: the authors' code has no timeout; "
                          "TAPIR's IR uses 500 ms)"),
      OptionSpec::flag("suspect_on_timeout", true,
                       "a replica that let a PreAccept round time out is not waited for by later rounds until the "
                       "coordinator hears from it: they are decided on a majority's replies by the Accept round at "
                       "once (ours, as the timeout is: the authors' code waits for every reply)"),
      OptionSpec::integer("inquire_timeout_ms", 500, 1, 600000,
                          "an Inquire that the asked shard's replica 0 has not answered by then is sent to the "
                          "shard's other replicas too; the first answer counts (ours: the authors' code has no "
                          "timer around Inquire; 500 ms as preaccept_timeout_ms)"),
  };
  p.make_replica = [](const Deployment& d, NodeId id, const Workload& w) -> std::unique_ptr<ReplicaNode> {
    return std::make_unique<Replica>(d, id, w);
  };
  p.make_client_driver = [](const Deployment& d, NodeId) -> std::unique_ptr<ClientDriver> {
    return std::make_unique<HandlerClientDriver>(d, "Janus");
  };
  p.make_voter = [](const Deployment& d, NodeId id, const Workload& w) -> std::unique_ptr<txn::Voter> {
    return std::make_unique<Voter>(d, id, w);
  };
  return p;
}

}  // namespace txn::janus
