// SLOG shard replica (docs/protocols/slog.md): the node (Replica) routes each message to its Handler role or its
// Site role (src/core/role.h).
//
// Routing. The handler (replica 0 of the home shard) sends a transaction whose
// pieces all lie in its region to the region's orderer (single-home) and any
// other to the global log's leader (multi-home).
//
// Execution. Each replica receives its region's local log as numbered batches
// holding the entries with a piece on its shard, and keeps the unfinished ones
// in log order. An entry runs its pieces here (each once its inputs are known)
// when it is among the first `pending_window` unfinished entries and no
// earlier unfinished entry conflicts with it on a key of this shard (one
// writes a key the other accesses): Calvin's locks granted in log order,
// without lock tables. An entry keeps its keys until every piece it has here
// has run, including one waiting for another shard's value.
//
// Why this is serializable and cannot deadlock. Every region's log holds the
// multi-home entries in global order; single-home entries are in one log only.
// So the logs' orders agree and together form one order of all transactions,
// and at every shard conflicting pieces run in that order (the later waits for
// the earlier to finish here). The earliest unfinished transaction of that
// order has, at each of its shards, no earlier conflicting entry left: its
// pieces run as their values come, and those come from its own pieces, which
// are not held either. (With a window, the earliest is also within it.)
#include <algorithm>

#include "check.h"
#include "protocols/slog/mutant.h"
#include "protocols/slog/slog.h"

namespace txn::slog {
namespace {

std::string str(uint64_t x) { return std::to_string(x); }

bool intersects(const std::set<std::string>& a, const std::set<std::string>& b) {
  const auto& [small, big] = a.size() <= b.size() ? std::tie(a, b) : std::tie(b, a);
  for (const auto& k : small)
    if (big.count(k)) return true;
  return false;
}

}  // namespace

Options::Options(const Deployment& d) {
  const ProtocolOptions o = protocol_options(d);
  batch_interval_ms = o.number("batch_interval_ms");
  pending_window = static_cast<uint32_t>(o.integer("pending_window"));
}

Site::Site(const Deployment& d, NodeId self, const Workload& w, const Options& o, SelfQueue& q)
    : RoleContext(d, self, w, q), opts_(o), exec_(w, me_.shard) {}

Handler::Handler(const Deployment& d, NodeId self, const Workload& w, const Options&, SelfQueue& q)
    : RoleContext(d, self, w, q) {}

void Site::add_counters(std::map<std::string, int64_t>& c) const {
  c["batches"] = n_batches_;
  c["batch_entries"] = n_batch_entries_;
  c["single_home_entries"] = n_single_;
  c["multi_home_entries"] = n_multi_;
  c["single_home_log_wait_us"] = single_wait_us_;
  c["multi_home_log_wait_us"] = multi_wait_us_;
  c["blocked_entries"] = n_blocked_;
  c["window_full_waits"] = n_window_full_;
}

void Replica::route(Env& env, Envelope& m) {
  if (m.has_submit()) return coord_.on_submit(env, m.from(), *m.mutable_submit());
  if (!m.has_slog()) throw BadMessage("SLOG replica got a message of another protocol");
  const auto& s = m.slog();
  switch (s.body_case()) {
    case ::slog::Msg::kBatch: return site_.on_batch(env, *m.mutable_slog()->mutable_batch());
    case ::slog::Msg::kSendOutput: return site_.on_send_output(env, s.send_output());
    case ::slog::Msg::kPieceResult: return coord_.on_piece_result(env, s.piece_result());
    case ::slog::Msg::BODY_NOT_SET: throw BadMessage("empty SLOG message");
    default: throw BadMessage("SLOG message for an orderer or the global log sent to replica " + site_.me_.name);
  }
}

// ---- handler ----------------------------------------------------------------------------

void Handler::on_submit(Env& env, NodeId from, ClientSubmit& m) {
  const TxnRequest& t = m.txn();
  check_submitted_here(t);
  std::vector<uint32_t> shards = touched_shards(d_, t);
  check_inputs_produced(t);
  if (coords_.count(t.txn_id())) throw BadMessage("txn " + str(t.txn_id()) + " submitted twice");
  Coord& c = coords_[t.txn_id()];
  c.client = from;
  c.shards = shards;
  bool single_home = true;
  for (uint32_t s : shards)
    if (d_.region_of_shard(s) != me_.region) single_home = false;
  Envelope e;
  ::slog::Entry* entry;
  NodeId to;
  if (single_home) {
    entry = e.mutable_slog()->mutable_to_local_log()->mutable_entry();
    to = d_.role_node(kOrderer, me_.region);
  } else {
    entry = e.mutable_slog()->mutable_to_global_log()->mutable_entry();
    to = d_.role_nodes(kGlobalLog).at(0);
    ++n_global_;
  }
  *entry->mutable_txn() = std::move(*m.mutable_txn());  // the handler keeps no copy (t is moved-from)
  entry->set_multi_home(!single_home);
  entry->set_submitted_us(env.now_us());
  env.send(to, std::move(e));
}

void Handler::on_piece_result(Env& env, const ::slog::PieceResult& m) {
  auto it = coords_.find(m.txn_id());
  if (it == coords_.end()) throw BadMessage("PieceResult for unknown txn " + str(m.txn_id()));
  Coord& c = it->second;
  if (!std::binary_search(c.shards.begin(), c.shards.end(), m.shard()))
    throw BadMessage("PieceResult for txn " + str(m.txn_id()) + " from shard " + str(m.shard()) + ", which it does not touch");
  for (const auto& [k, v] : m.vars()) c.outputs[k] = v;
  c.results.insert(m.shard());
  const bool all = c.results.size() == c.shards.size();
  if (!all && (!mutant::kReplyOnFirstResult || c.answered)) return;
  if (!c.answered) {
    Envelope e;
    e.mutable_reply()->set_txn_id(m.txn_id());
    e.mutable_reply()->set_committed(true);
    *e.mutable_reply()->mutable_outputs() = c.outputs;
    env.send(c.client, std::move(e));
    c.answered = true;
  }
  if (all) coords_.erase(it);
}

// ---- replica: the local log ------------------------------------------------------------

void Site::on_batch(Env& env, ::slog::Batch& m) {
  if (m.batch() < next_batch_ || early_.count(m.batch()))
    throw BadMessage("batch " + str(m.batch()) + " of the local log seen before at " + me_.name);
  for (const auto& e : m.entries()) {
    const std::vector<uint32_t> shards = touched_shards(d_, e.txn());
    if (!std::binary_search(shards.begin(), shards.end(), me_.shard))
      throw BadMessage("batch " + str(m.batch()) + " holds txn " + str(e.txn().txn_id()) + ", which does not touch shard " +
                       str(me_.shard));
  }
  const uint64_t batch = m.batch();
  early_.emplace(batch, std::move(m));   // held until its turn, then its entries' requests move into the log
  for (auto it = early_.find(next_batch_); it != early_.end(); it = early_.find(next_batch_)) {
    if (it->second.entries_size() > 0 && me_.replica == 0) {
      ++n_batches_;
      n_batch_entries_ += it->second.entries_size();
    }
    ::slog::Batch& b = it->second;
    if (mutant::kReversedBatches && me_.replica == 1) {
      for (int i = b.entries_size() - 1; i >= 0; --i)
        append(env, *b.mutable_entries(i), b.batch(), static_cast<uint64_t>(i));
    } else {
      for (int i = 0; i < b.entries_size(); ++i) append(env, *b.mutable_entries(i), b.batch(), static_cast<uint64_t>(i));
    }
    early_.erase(it);
    ++next_batch_;
  }
  try_execute(env);
}

// The order key (docs/protocols/slog.md): the entry's position in its region's local log, the one order every
// shard of the region executes conflicting pieces in (multi-home entries sit there in global order); one domain
// per region, as a shard only ever sees its own region's log.
void Site::append(Env& env, ::slog::Entry& e, uint64_t batch, uint64_t index) {
  (void)env;
  Pending p;
  p.txn = std::move(*e.mutable_txn());   // the batch is dropped after its entries are appended
  p.key = order_key(me_.region, batch, index);
  p.multi_home = e.multi_home();
  for (const auto& piece : p.txn.pieces()) {
    if (piece.shard() != me_.shard) continue;
    p.reads.insert(piece.read_keys().begin(), piece.read_keys().end());
    p.writes.insert(piece.write_keys().begin(), piece.write_keys().end());
  }
  if (me_.replica == 0) {
    const int64_t wait = std::max<int64_t>(0, e.logged_us() - e.submitted_us());
    if (e.multi_home()) {
      ++n_multi_;
      multi_wait_us_ += wait;
    } else {
      ++n_single_;
      single_wait_us_ += wait;
    }
  }
  log_.push_back(std::move(p));
}

bool Site::conflicts(const Pending& later, const Pending& earlier) const {
  if (mutant::kNoConflictWait) return false;
  if (mutant::kMultiHomeJumpsLog && later.multi_home) return false;  // "the global log ordered it already"
  return intersects(later.writes, earlier.writes) || intersects(later.writes, earlier.reads) ||
         intersects(later.reads, earlier.writes);
}

void Site::set_phase(Pending& p, Phase to) {
  transition(p.txn.txn_id(), p.phase, to,
             {{Phase::Logged, Phase::Blocked}, {Phase::Logged, Phase::Running}, {Phase::Blocked, Phase::Running}});
}

// The safety rule (docs/protocols/slog.md): an entry runs its pieces here only once no earlier unfinished entry
// of this shard's log conflicts with it (one writes a key the other accesses), and it holds its keys until every
// piece it has here has run. Every region's log holds the multi-home entries in global order, so the logs form
// one order of all transactions and conflicting pieces run in it at every shard. The window only bounds how far
// ahead a replica looks (the artifact's); safety does not need it.
void Site::try_execute(Env& env) {
  for (bool progress = true; progress;) {
    progress = false;
    const size_t window = std::min<size_t>(log_.size(), opts_.pending_window);
    for (size_t i = 0; i < window; ++i) {
      Pending& p = log_[i];
      bool free = true;
      for (size_t j = 0; j < i && free; ++j)
        if (conflicts(p, log_[j])) free = false;
      if (!free) {
        if (p.phase != Phase::Blocked) {
          set_phase(p, Phase::Blocked);
          if (me_.replica == 0) ++n_blocked_;
        }
        continue;
      }
      if (p.phase != Phase::Running) set_phase(p, Phase::Running);
      if (run_pieces(env, p)) {
        finished(env, p);
        log_.erase(log_.begin() + static_cast<std::ptrdiff_t>(i));
        progress = true;
        break;  // the window and the indices moved: start over
      }
    }
  }
  // Entries beyond the window wait for a place in it.
  for (size_t i = opts_.pending_window; i < log_.size(); ++i)
    if (log_[i].phase != Phase::Blocked) {
      set_phase(log_[i], Phase::Blocked);
      if (me_.replica == 0) {
        ++n_blocked_;
        ++n_window_full_;
      }
    }
}

bool Site::run_pieces(Env& env, Pending& pend) {
  const TxnRequest& t = pend.txn;
  Vars& known = vars_[t.txn_id()];
  bool all = true;
  for (bool progress = true; progress;) {
    progress = false;
    all = true;
    for (const auto& p : t.pieces()) {
      if (p.shard() != me_.shard || pend.done.count(p.id())) continue;
      Vars scratch, out;
      const Vars* in = piece_vars(p, known, &scratch);
      if (!in) {
        all = false;
        continue;  // waits for a value from another shard (or from a later piece here)
      }
      try {
        exec_.execute(t.txn_id(), p, *in, &out, false, pend.key);
      } catch (const BadMessage& err) {
        env.log("txn " + str(t.txn_id()) + " piece " + str(p.id()) + ": " + err.what());  // alike on every replica
      }
      pend.done.insert(p.id());
      progress = true;
      if (out.empty()) continue;
      for (const auto& [k, v] : out) known[k] = v;
      // Replica 0 sends the values to every replica of a shard that needs them: a follower may be down (before
      // issue 49 each replica sent to its own index there, and a crashed follower left its index waiting forever)
      if (me_.replica == 0)
        for (uint32_t s : consumer_shards(t, me_.shard, out))
          for (NodeId r : d_.replicas_of(s)) {
            Envelope e;
            auto* so = e.mutable_slog()->mutable_send_output();
            so->set_txn_id(t.txn_id());
            *so->mutable_vars() = out;
            post(env, r, std::move(e));
          }
    }
  }
  return all;
}

void Site::finished(Env& env, const Pending& p) {
  const TxnId id = p.txn.txn_id();
  if (me_.replica == 0) {
    Envelope e;
    auto* r = e.mutable_slog()->mutable_piece_result();
    r->set_txn_id(id);
    r->set_shard(me_.shard);
    shard_outputs(p.txn, me_.shard, vars_[id], r->mutable_vars());
    post(env, handler_of(d_, p.txn.home_shard()), std::move(e));
  }
  vars_.erase(id);
}

void Site::on_send_output(Env& env, const ::slog::SendOutput& m) {
  Vars& known = vars_[m.txn_id()];
  for (const auto& [k, v] : m.vars()) known[k] = v;
  bool pending = false;
  for (const auto& p : log_)
    if (p.txn.txn_id() == m.txn_id()) pending = true;
  if (pending) try_execute(env);
}

}  // namespace txn::slog
