#include "core/executor.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <stdexcept>
#include <unordered_set>

#include "workload/store.h"

namespace txn {

ShardExecutor::ShardExecutor(const Workload& w, uint32_t shard) : w_(w), shard_(shard), store_(w.load(shard)) {}

void ShardExecutor::execute(uint64_t txn_id, const Piece& p, const Vars& in, Vars* out, bool deferred,
                            const OrderKey& key) {
  history_.push_back(ExecEvent{txn_id, p.id(), deferred, key});
  if (tap_) {
    recovery::Event& e = tapped_.emplace_back();
    e.set_txn(txn_id);
    if (auto d = deps_.find(txn_id); d != deps_.end()) {
      e.set_deps_set(true);   // a follower declares them as this replica did (the first declaration stands)
      for (uint64_t x : d->second) e.add_deps(x);
    }
    *e.mutable_piece() = p;
    *e.mutable_in() = in;
    e.set_deferred(deferred);
    if (key.set) {
      e.set_key_set(true);
      e.set_key_domain(key.domain);
      e.set_key_hi(key.hi);
      e.set_key_lo(key.lo);
    }
  }
  w_.execute(*store_, p, in, out);
}

bool ShardExecutor::snapshot(recovery::Snapshot* out) const {
  out->set_shard(shard_);
  if (!store_->encode(out->mutable_store())) return false;
  out->mutable_history()->Reserve(static_cast<int>(history_.size()));
  for (const ExecEvent& e : history_) {
    recovery::Done* d = out->add_history();
    d->set_txn(e.txn);
    d->set_piece(e.piece);
    d->set_deferred(e.deferred);
    if (e.key.set) {
      d->set_key_set(true);
      d->set_key_domain(e.key.domain);
      d->set_key_hi(e.key.hi);
      d->set_key_lo(e.key.lo);
    }
  }
  for (const auto& [txn, deps] : deps_) {
    recovery::Deps* d = out->add_deps();
    d->set_txn(txn);
    for (uint64_t x : deps) d->add_deps(x);
  }
  return true;
}

bool ShardExecutor::install(const recovery::Snapshot& s) {
  if (!history_.empty() || s.shard() != shard_) return false;
  std::unique_ptr<ShardStore> st = w_.load(shard_);
  if (!st->decode(s.store())) return false;
  store_ = std::move(st);
  history_.reserve(static_cast<size_t>(s.history_size()));
  for (const recovery::Done& d : s.history())
    history_.push_back(ExecEvent{d.txn(), d.piece(), d.deferred(),
                                 d.key_set() ? order_key(d.key_domain(), d.key_hi(), d.key_lo()) : OrderKey{}});
  for (const recovery::Deps& d : s.deps()) declare_deps(d.txn(), {d.deps().begin(), d.deps().end()});
  return true;
}

namespace {
// The first declaration of `txn_id` in `into` stands (a transaction's dependencies are final once committed; a
// replica votes once); kept as sorted, distinct ids.
void declare_ids(std::unordered_map<uint64_t, std::vector<uint64_t>>& into, uint64_t txn_id,
                 const std::vector<uint64_t>& ids) {
  auto [it, fresh] = into.try_emplace(txn_id, ids);
  if (!fresh) return;
  std::sort(it->second.begin(), it->second.end());
  it->second.erase(std::unique(it->second.begin(), it->second.end()), it->second.end());
}
}  // namespace

void ShardExecutor::declare_deps(uint64_t txn_id, const std::vector<uint64_t>& deps) { declare_ids(deps_, txn_id, deps); }

void ShardExecutor::declare_vote(uint64_t txn_id, const std::vector<uint64_t>& deps, bool marked, uint64_t epoch) {
  if (marked && !votes_.count(txn_id)) vote_marks_.try_emplace(txn_id, history_.size());
  declare_ids(votes_, txn_id, deps);
  if (epoch > 0) vote_epochs_[txn_id] = epoch;
}

void ShardExecutor::declare_quorum(uint64_t txn_id, const std::vector<uint32_t>& replicas,
                                   const std::vector<uint32_t>* accepted, uint64_t epoch) {
  if (quorums_.count(txn_id)) return;
  declare_ids(quorums_, txn_id, std::vector<uint64_t>(replicas.begin(), replicas.end()));
  if (accepted) declare_ids(accepted_, txn_id, std::vector<uint64_t>(accepted->begin(), accepted->end()));
  if (epoch > 0) quorum_epochs_[txn_id] = epoch;
}

void ShardExecutor::declare_quorum_masks(uint64_t txn_id, uint32_t replicas, uint32_t accepted, uint64_t epoch) {
  const auto bits = [](uint32_t mask) {
    std::vector<uint32_t> out;
    for (uint32_t r = 0; r < 32; ++r)
      if (mask >> r & 1u) out.push_back(r);
    return out;
  };
  const std::vector<uint32_t> acc = bits(accepted);
  declare_quorum(txn_id, bits(replicas), accepted ? &acc : nullptr, epoch);
}

bool ShardExecutor::evaluate(const TxnRequest& t, Vars* vars) const {
  std::set<std::string> produced;  // by this shard's pieces, available to its later ones
  for (const auto& p : t.pieces())
    if (p.shard() == shard_) {
      for (const auto& v : p.inputs())
        if (!vars->count(v) && !produced.count(v)) return false;
      produced.insert(p.outputs().begin(), p.outputs().end());
    }
  // A trial on the store itself, undone after (its cost is what the pieces change), or else a copy of it.
  struct Trial {
    ShardStore* s = nullptr;
    ~Trial() {
      if (s) s->end_trial();
    }
  } trial;
  std::unique_ptr<ShardStore> copy;
  ShardStore* on = store_.get();
  if (store_->begin_trial()) {
    trial.s = on;
  } else {
    copy = store_->clone();
    if (!copy) throw std::logic_error("workload " + w_.name() + ": its store cannot be copied for evaluation");
    on = copy.get();
  }
  for (const auto& p : t.pieces()) {
    if (p.shard() != shard_) continue;
    Vars scratch, out;
    const Vars* in = piece_vars(p, *vars, &scratch, true);
    try {
      w_.execute(*on, p, *in, &out);
    } catch (const BadMessage&) {
      // rejected: skipped, as a replica executing it skips it
    }
    for (const auto& [k, v] : out) (*vars)[k] = v;
  }
  return true;
}

namespace {
// "3", "0-4", "0-2,7": ascending piece ids with runs collapsed.
void write_ids(std::ostream& o, const std::vector<uint32_t>& ids) {
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (i) o << ',';
    o << ids[i];
    if (j > i) o << '-' << ids[j];
    i = j + 1;
  }
}
}  // namespace

// One line per run of consecutive events of one transaction with one deferred
// flag and one order key: "<txn id> <piece ids>" plus " d" when deferred, plus
// " k=<domain>:<hi>.<lo>" (decimal) when the key is set, plus " v=<ids>" (this
// replica's vote) and " p=<ids>" (its declared dependencies), comma-separated,
// possibly none, on the transaction's first line when the protocol declared them; " qe=<epoch>" after q= (and a=)
// and " e=<epoch>" after v= when the decision's votes, or this replica's vote, were of an epoch above 0 (a rejoin's).
// Piece ids keep their execution order; only ascending runs are collapsed.
size_t ShardExecutor::write_history(std::ostream& o, const std::string& node) const {
  o << "# txn-history v1 node=" << node << " shard=" << shard_ << "\n";
  size_t lines = 0;
  std::vector<uint32_t> ids;
  std::unordered_set<uint64_t> declared, voted, counted;   // transactions whose " p=" / " v=" / " q=" is written
  auto ids_out = [&o](const char* tag, const std::vector<uint64_t>& v) {
    o << tag;
    for (size_t k = 0; k < v.size(); ++k) o << (k ? "," : "") << v[k];
  };
  for (size_t i = 0; i < history_.size();) {
    const ExecEvent& first = history_[i];
    ids.clear();
    size_t j = i;
    for (; j < history_.size() && history_[j].txn == first.txn && history_[j].deferred == first.deferred &&
           history_[j].key == first.key;
         ++j)
      ids.push_back(history_[j].piece);
    o << first.txn << ' ';
    // Collapse only where the ids really ascend, so the order stays readable back.
    bool ascending = std::is_sorted(ids.begin(), ids.end()) &&
                     std::adjacent_find(ids.begin(), ids.end()) == ids.end();
    if (ascending) {
      write_ids(o, ids);
    } else {
      for (size_t k = 0; k < ids.size(); ++k) o << (k ? "," : "") << ids[k];
    }
    if (first.deferred) o << " d";
    if (first.key.set) o << " k=" << first.key.domain << ':' << first.key.hi << '.' << first.key.lo;
    if (auto q = quorums_.find(first.txn); q != quorums_.end() && counted.insert(first.txn).second) {
      ids_out(" q=", q->second);
      if (auto a = accepted_.find(first.txn); a != accepted_.end()) ids_out(" a=", a->second);
      if (auto e = quorum_epochs_.find(first.txn); e != quorum_epochs_.end()) o << " qe=" << e->second;
    }
    if (auto v = votes_.find(first.txn); v != votes_.end() && voted.insert(first.txn).second) {
      auto m = vote_marks_.find(first.txn);
      ids_out(m == vote_marks_.end() ? " v=" : (" v=" + std::to_string(m->second) + "/").c_str(), v->second);
      if (auto e = vote_epochs_.find(first.txn); e != vote_epochs_.end()) o << " e=" << e->second;
    }
    if (auto d = deps_.find(first.txn); d != deps_.end() && declared.insert(first.txn).second) ids_out(" p=", d->second);
    o << '\n';
    ++lines;
    i = j;
  }
  o << "# end events=" << history_.size() << " lines=" << lines << "\n";
  return lines;
}

std::string outputs_digest(const Vars& outputs) {
  std::vector<const std::string*> names;
  names.reserve(outputs.size());
  for (const auto& [k, _] : outputs) names.push_back(&k);
  std::sort(names.begin(), names.end(), [](const std::string* a, const std::string* b) { return *a < *b; });
  wl::Fnv f;
  for (const std::string* k : names) {
    const Value& v = outputs.at(*k);
    f.s(*k);
    f.i(static_cast<int64_t>(v.v_case()));
    switch (v.v_case()) {
      case Value::kI: f.i(v.i()); break;
      case Value::kD: {
        int64_t bits;
        double x = v.d();
        std::memcpy(&bits, &x, sizeof bits);
        f.i(bits);
        break;
      }
      case Value::kS: f.s(v.s()); break;
      default: break;
    }
  }
  return f.hex();
}

Vars execute_serially(const Workload& w, std::vector<std::unique_ptr<ShardStore>>& stores,
                      const TxnRequest& t, std::vector<std::string>* errors) {
  Vars vars;
  std::set<uint32_t> done;
  for (bool progress = true; progress;) {
    progress = false;
    for (const auto& p : t.pieces()) {
      if (done.count(p.id())) continue;
      Vars scratch;
      const Vars* in = piece_vars(p, vars, &scratch);
      if (!in) continue;
      done.insert(p.id());
      progress = true;
      if (p.shard() >= stores.size()) {
        errors->push_back("piece " + std::to_string(p.id()) + ": shard " + std::to_string(p.shard()) +
                          " out of range");
        continue;
      }
      Vars out;
      try {
        w.execute(*stores[p.shard()], p, *in, &out);
      } catch (const BadMessage& e) {
        errors->push_back("piece " + std::to_string(p.id()) + ": " + e.what());
      }
      for (auto& [k, v] : out) vars[k] = v;
    }
  }
  if (done.size() != static_cast<size_t>(t.pieces_size()))
    errors->push_back("txn " + std::to_string(t.txn_id()) + ": inputs of " +
                      std::to_string(t.pieces_size() - done.size()) + " piece(s) never became known");
  return vars;
}

const Vars* piece_vars(const Piece& p, const Vars& known, Vars* scratch, bool partial) {
  if (p.inputs().empty()) return &p.args();
  *scratch = p.args();
  for (const auto& v : p.inputs()) {
    auto it = known.find(v);
    if (it != known.end()) (*scratch)[v] = it->second;
    else if (!partial) return nullptr;
  }
  return scratch;
}

}  // namespace txn
