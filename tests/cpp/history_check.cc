// The history checker of the simulated cluster (history_check.h; the checks
// are those of docs/checker.md, as testbed/analysis/histories.py runs them on real runs).
#include "history_check.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

namespace txn::test {
namespace {

using TxnId = uint64_t;
using Event = std::pair<TxnId, uint32_t>;  // (transaction, piece)

// The violation lines of one check: the first kMaxListed, then how many more.
class Collector {
 public:
  explicit Collector(std::vector<std::string>* out) : out_(out) {}
  void add(std::string line) {
    if (out_->size() < HistoryVerdict::kMaxListed) out_->push_back(std::move(line));
    else ++more_;
  }
  void finish() {
    if (more_) out_->push_back("... and " + std::to_string(more_) + " more");
    more_ = 0;
  }

 private:
  std::vector<std::string>* out_;
  size_t more_ = 0;
};

std::string ids(const std::vector<uint32_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// What the checks need to know about one finished transaction.
struct TxnInfo {
  const FinishedTxn* f = nullptr;
  std::unordered_map<uint32_t, const Piece*> pieces;   // piece id -> piece
  std::unordered_set<uint32_t> commutative;            // piece ids
  std::map<uint32_t, std::vector<uint32_t>> shards;    // shard -> ascending piece ids on it
  TxnId id() const { return f->entry->txn().txn_id(); }
  bool committed() const { return f->entry->committed(); }
  // Committed, or abandoned in flight at the drain (outcome unknown) and executed at some replica: held to having
  // committed (the checker's histories.took_effect).
  bool took_effect = false;
};

// The run, indexed.
class Run {
 public:
  Run(const Workload& w, const RunHistory& r, Collector& inputs) : w_(w), r_(r) {
    for (const auto& f : r.txns) {
      TxnInfo t;
      t.f = &f;
      for (const auto& p : f.entry->txn().pieces()) {
        t.pieces[p.id()] = &p;
        t.shards[p.shard()].push_back(p.id());
      }
      for (auto& [_, v] : t.shards) std::sort(v.begin(), v.end());
      t.commutative.insert(f.entry->commutative().begin(), f.entry->commutative().end());
      const TxnId id = f.entry->txn().txn_id();
      auto [it, fresh] = txns_.emplace(id, std::move(t));
      if (!fresh) {
        inputs.add("txn " + std::to_string(id) + " finished twice (" + it->second.f->client + ", " + f.client + ")");
        continue;
      }
      for (uint64_t a : f.entry->failed_attempts()) failed_[a] = id;
    }
    for (size_t i = 0; i < r.replicas.size(); ++i) shards[r.replicas[i].shard].push_back(i);
    ordered_.resize(r.replicas.size());
    for (size_t i = 0; i < r.replicas.size(); ++i)
      for (const auto& e : r.replicas[i].history)
        if (!commutes(e.txn, e.piece)) ordered_[i].emplace_back(e.txn, e.piece);
    for (auto& [_, t] : txns_) t.took_effect = t.committed();
    for (const auto& rep : r.replicas)
      for (const auto& e : rep.history) {
        auto it = txns_.find(e.txn);
        if (it != txns_.end() && it->second.f->entry->abandoned()) it->second.took_effect = true;
      }
  }

  const ReplicaRun& replica(size_t i) const { return r_.replicas[i]; }
  const std::vector<ReplicaRun>& replicas() const { return r_.replicas; }
  // A replica's executions in order, without the commutative pieces (their place is no order).
  const std::vector<Event>& ordered(size_t i) const { return ordered_[i]; }
  const TxnInfo* txn(TxnId id) const {
    auto it = txns_.find(id);
    return it == txns_.end() ? nullptr : &it->second;
  }
  // Committed and given-up transactions, by id.
  std::vector<const TxnInfo*> by_id() const {
    std::vector<const TxnInfo*> v;
    for (const auto& [_, t] : txns_) v.push_back(&t);
    std::sort(v.begin(), v.end(), [](const TxnInfo* a, const TxnInfo* b) { return a->id() < b->id(); });
    return v;
  }
  // The transaction whose earlier attempt had id `id`, or nullptr.
  const TxnInfo* failed_attempt_of(TxnId id) const {
    auto it = failed_.find(id);
    return it == failed_.end() ? nullptr : txn(it->second);
  }
  bool commutes(TxnId id, uint32_t piece) const {
    const TxnInfo* t = txn(id);
    return t && t->commutative.count(piece);
  }
  const Piece* piece(TxnId id, uint32_t p) const {
    const TxnInfo* t = txn(id);
    if (!t) return nullptr;
    auto it = t->pieces.find(p);
    return it == t->pieces.end() ? nullptr : it->second;
  }
  std::string label(const TxnInfo& t) const {
    return "txn " + std::to_string(t.id()) + " (" + w_.type_name(t.f->entry->txn().type()) + ", " + t.f->client +
           ")";
  }
  std::string describe(TxnId id) const {
    if (const TxnInfo* t = txn(id)) return label(*t);
    if (const TxnInfo* t = failed_attempt_of(id))
      return "txn " + std::to_string(id) + " (a failed attempt of " + label(*t) + ")";
    return "txn " + std::to_string(id) + " (in no client's log)";
  }

  std::map<uint32_t, std::vector<size_t>> shards;  // shard -> its replicas (indexes), as listed

 private:
  const Workload& w_;
  const RunHistory& r_;
  std::unordered_map<TxnId, TxnInfo> txns_;
  std::unordered_map<TxnId, TxnId> failed_;  // failed attempt id -> the transaction's last id
  std::vector<std::vector<Event>> ordered_;
};

// ---- (a) the same order of conflicting pieces at every replica of a shard -------------------

std::map<Event, int> commutative_events(const Run& run, size_t i) {
  std::map<Event, int> m;
  for (const auto& e : run.replica(i).history)
    if (run.commutes(e.txn, e.piece)) ++m[{e.txn, e.piece}];
  return m;
}

// A replica's order as far as it matters: per conflict key, its accesses in
// execution order, each write (a piece that writes the key, whether or not it
// also reads it) one group and each run of reads between two writes one set
// (reads of a key commute with each other); and, apart, the pieces of
// transactions no client logged (their keys are unknown, so their order among
// themselves is compared as it is).
struct Access {
  bool write;
  std::set<Event> pieces;  // the write's one piece, or the run of reads
  bool operator==(const Access& o) const { return write == o.write && pieces == o.pieces; }
  bool operator!=(const Access& o) const { return !(*this == o); }
};
struct KeyAccesses {
  std::map<std::string, std::vector<Access>> per_key;
  std::vector<Event> unknown;
};
KeyAccesses key_accesses(const Run& run, size_t i) {
  KeyAccesses a;
  for (const auto& e : run.ordered(i)) {
    const Piece* piece = run.piece(e.first, e.second);
    if (!piece) {
      a.unknown.push_back(e);
      continue;
    }
    std::set<std::string> writes(piece->write_keys().begin(), piece->write_keys().end());
    for (const auto& k : writes) a.per_key[k].push_back({true, {e}});
    for (const auto& k : piece->read_keys()) {
      if (writes.count(k)) continue;
      auto& groups = a.per_key[k];
      if (!groups.empty() && !groups.back().write) groups.back().pieces.insert(e);
      else groups.push_back({false, {e}});
    }
  }
  return a;
}

std::string access(const Run& run, const std::vector<Access>& groups, size_t i) {
  if (i >= groups.size()) return "the end of its accesses";
  const Access& g = groups[i];
  auto piece = [&](const Event& e) { return run.describe(e.first) + " piece " + std::to_string(e.second); };
  if (g.write) return piece(*g.pieces.begin());
  std::string s = "reads by ";
  size_t n = 0;
  for (const auto& e : g.pieces) {
    if (n == 2) break;
    s += (n++ ? ", " : "") + piece(e);
  }
  if (g.pieces.size() > 2) s += " and " + std::to_string(g.pieces.size() - 2) + " more";
  return s;
}

// The symmetric difference of two multisets, as signed counts.
std::map<Event, int> multiset_diff(const std::map<Event, int>& a, const std::map<Event, int>& b) {
  std::map<Event, int> diff;
  for (const auto& [e, n] : a) {
    auto it = b.find(e);
    if (int d = n - (it == b.end() ? 0 : it->second)) diff[e] = d;
  }
  for (const auto& [e, n] : b)
    if (!a.count(e)) diff[e] = -n;
  return diff;
}

// (a): the replicas of a shard executed the same pieces, and every two
// conflicting pieces in the same order. Pieces that do not conflict commute,
// so their interleaving may differ (Janus executes independent transactions
// as their dependencies allow); commutative pieces are compared as a multiset.
void check_order(const Run& run, Collector& out) {
  for (const auto& [shard, reps] : run.shards) {
    const ReplicaRun& ref = run.replica(reps[0]);
    auto count = [&](size_t i) {
      std::map<Event, int> m;
      for (const auto& e : run.ordered(i)) ++m[e];
      return m;
    };
    const auto ref_events = count(reps[0]);
    const KeyAccesses ref_keys = key_accesses(run, reps[0]);
    const auto ref_comm = commutative_events(run, reps[0]);
    for (size_t k = 1; k < reps.size(); ++k) {
      const ReplicaRun& rep = run.replica(reps[k]);
      const std::string where = "shard " + std::to_string(shard) + ": " + rep.node;
      const auto events = count(reps[k]);
      if (events != ref_events) {
        const auto diff = multiset_diff(events, ref_events);
        const Event& e = diff.begin()->first;
        out.add(where + " and " + ref.node + " executed different pieces (" + std::to_string(diff.size()) +
                " differ, e.g. " + run.describe(e.first) + " piece " + std::to_string(e.second) + ")");
      } else {
        const KeyAccesses keys = key_accesses(run, reps[k]);
        static const std::vector<Access> none;
        auto of = [&](const KeyAccesses& a, const std::string& key) -> const std::vector<Access>& {
          auto it = a.per_key.find(key);
          return it == a.per_key.end() ? none : it->second;
        };
        std::set<std::string> all;
        for (const auto& [key, _] : keys.per_key) all.insert(key);
        for (const auto& [key, _] : ref_keys.per_key) all.insert(key);
        std::vector<std::string> differ;
        for (const auto& key : all)
          if (of(keys, key) != of(ref_keys, key)) differ.push_back(key);
        if (!differ.empty()) {
          const std::string& key = differ.front();
          const auto& a = of(keys, key);
          const auto& b = of(ref_keys, key);
          const size_t n = std::min(a.size(), b.size());
          size_t i = std::mismatch(a.begin(), a.begin() + n, b.begin()).first - a.begin();
          const std::string more = differ.size() > 1 ? " (" + std::to_string(differ.size()) + " keys differ)" : "";
          out.add(where + " executed conflicting pieces in another order than " + ref.node + " on key " + key + more +
                  ": its access " + std::to_string(i + 1) + " is " + access(run, a, i) + " where " + ref.node +
                  " has " + access(run, b, i));
        }
        if (keys.unknown != ref_keys.unknown)
          out.add(where + " executed pieces of transactions in no client's log in another order than " + ref.node);
      }
      const auto comm = commutative_events(run, reps[k]);
      if (comm != ref_comm) {
        const auto diff = multiset_diff(comm, ref_comm);
        const Event& e = diff.begin()->first;
        out.add(where + " and " + ref.node + " executed different commutative pieces (" + std::to_string(diff.size()) +
                " differ, e.g. " + run.describe(e.first) + " piece " + std::to_string(e.second) + ")");
      }
    }
  }
}

// ---- (b) atomicity ----------------------------------------------------------------------------

void check_atomicity(const Run& run, Collector& out) {
  // Per replica: transaction -> the pieces it executed, and the transactions in order of first execution.
  struct Executed {
    std::unordered_map<TxnId, std::vector<uint32_t>> pieces;
    std::vector<TxnId> order;
  };
  std::vector<Executed> executed(run.replicas().size());
  for (size_t i = 0; i < run.replicas().size(); ++i)
    for (const auto& e : run.replica(i).history) {
      auto [it, fresh] = executed[i].pieces.try_emplace(e.txn);
      if (fresh) executed[i].order.push_back(e.txn);
      it->second.push_back(e.piece);
    }
  for (const TxnInfo* t : run.by_id()) {
    if (!t->took_effect) continue;
    for (const auto& [shard, want] : t->shards) {
      auto reps = run.shards.find(shard);
      if (reps == run.shards.end()) {
        out.add(run.label(*t) + " touches shard " + std::to_string(shard) + ", which has no replica");
        continue;
      }
      for (size_t i : reps->second) {
        auto it = executed[i].pieces.find(t->id());
        std::vector<uint32_t> got = it == executed[i].pieces.end() ? std::vector<uint32_t>{} : it->second;
        std::sort(got.begin(), got.end());
        if (got == want) continue;
        std::vector<uint32_t> missing, twice, extra;
        std::set_difference(want.begin(), want.end(), got.begin(), got.end(), std::back_inserter(missing));
        for (size_t k = 0; k + 1 < got.size(); ++k)
          if (got[k] == got[k + 1] && (twice.empty() || twice.back() != got[k])) twice.push_back(got[k]);
        std::vector<uint32_t> distinct = got;
        distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
        std::set_difference(distinct.begin(), distinct.end(), want.begin(), want.end(), std::back_inserter(extra));
        std::string what;
        auto part = [&](const std::vector<uint32_t>& v, const char* before, const char* after) {
          if (!v.empty()) what += (what.empty() ? "" : "; ") + std::string(before) + ids(v) + after;
        };
        part(missing, "pieces ", " never executed");
        part(twice, "pieces ", " executed more than once");
        part(extra, "unknown pieces ", "");
        out.add(run.label(*t) + (t->committed() ? "" : " (abandoned at the drain, executed elsewhere)") + " at " +
                run.replica(i).node + " (shard " + std::to_string(shard) + "): " + what);
      }
    }
  }
  for (size_t i = 0; i < run.replicas().size(); ++i) {
    const ReplicaRun& rep = run.replica(i);
    for (TxnId id : executed[i].order) {
      const TxnInfo* t = run.txn(id);
      if (t && t->took_effect) {
        if (!t->shards.count(rep.shard))
          out.add(run.label(*t) + " executed at " + rep.node + ", but it has no piece on shard " +
                  std::to_string(rep.shard));
      } else if (t) {
        out.add(run.label(*t) + " was given up but executed at " + rep.node);
      } else if (run.failed_attempt_of(id)) {
        out.add(run.describe(id) + " did not commit but executed at " + rep.node);
      } else {
        out.add(run.describe(id) + " executed at " + rep.node);
      }
    }
  }
}

// ---- (c) serializability: the conflict graph ------------------------------------------------------

struct Why {
  uint32_t shard;
  std::string key;
};

// Edges u -> v (u's piece executed before a conflicting piece of v), with the
// first shard and key that made each; successors in the order they were added.
class Graph {
 public:
  void add(TxnId u, TxnId v, uint32_t shard, const std::string& key) {
    if (u == v) return;
    auto [it, fresh] = nodes_.try_emplace(u);
    if (fresh) order_.push_back(u);
    if (!it->second.why.emplace(v, Why{shard, key}).second) return;
    it->second.succ.push_back(v);
    ++edges_;
  }
  const std::vector<TxnId>& succ(TxnId u) const {
    static const std::vector<TxnId> none;
    auto it = nodes_.find(u);
    return it == nodes_.end() ? none : it->second.succ;
  }
  const Why& why(TxnId u, TxnId v) const { return nodes_.at(u).why.at(v); }
  const std::vector<TxnId>& sources() const { return order_; }  // nodes with an outgoing edge
  size_t edges() const { return edges_; }

 private:
  struct Node {
    std::vector<TxnId> succ;
    std::unordered_map<TxnId, Why> why;
  };
  std::unordered_map<TxnId, Node> nodes_;
  std::vector<TxnId> order_;
  size_t edges_ = 0;
};

// Every distinct order of a shard adds its edges, so two replicas that
// disagree on a conflicting pair make a 2-cycle. Per key the last writer and
// the readers since it are kept, so the edges stay linear in the accesses.
Graph conflict_graph(const Run& run, Collector& out) {
  Graph g;
  for (const auto& [shard, reps] : run.shards) {
    std::vector<const std::vector<Event>*> seen;
    for (size_t i : reps) {
      for (const auto& e : run.replica(i).history)
        if (e.deferred && !run.commutes(e.txn, e.piece))
          out.add(run.replica(i).node + " deferred " + run.describe(e.txn) + " piece " + std::to_string(e.piece) +
                  ", which does not commute");
      const auto& seq = run.ordered(i);
      if (std::any_of(seen.begin(), seen.end(), [&](const auto* s) { return *s == seq; })) continue;
      seen.push_back(&seq);
      std::unordered_map<std::string, TxnId> last_writer;
      std::unordered_map<std::string, std::vector<TxnId>> readers;
      for (const auto& [t, p] : seq) {
        const Piece* piece = run.piece(t, p);
        if (!piece) continue;
        for (const auto& k : piece->read_keys()) {
          auto w = last_writer.find(k);
          if (w != last_writer.end()) g.add(w->second, t, shard, k);
          readers[k].push_back(t);
        }
        for (const auto& k : piece->write_keys()) {
          auto w = last_writer.find(k);
          if (w != last_writer.end()) g.add(w->second, t, shard, k);
          auto rs = readers.find(k);
          if (rs != readers.end()) {
            for (TxnId r : rs->second) g.add(r, t, shard, k);
            readers.erase(rs);
          }
          last_writer[k] = t;
        }
      }
    }
  }
  return g;
}

// Strongly connected components with more than one transaction (Tarjan, iterative).
std::vector<std::vector<TxnId>> cycle_components(const Graph& g) {
  std::unordered_map<TxnId, size_t> index, low;
  std::unordered_set<TxnId> on_stack;
  std::vector<TxnId> stack;
  std::vector<std::vector<TxnId>> comps;
  size_t counter = 0;
  auto visit = [&](TxnId v) {
    index[v] = low[v] = counter++;
    stack.push_back(v);
    on_stack.insert(v);
  };
  for (TxnId root : g.sources()) {
    if (index.count(root)) continue;
    std::vector<std::pair<TxnId, size_t>> work;  // (node, next successor to look at)
    visit(root);
    work.emplace_back(root, 0);
    while (!work.empty()) {
      auto& [v, next] = work.back();
      const auto& succ = g.succ(v);
      bool descended = false;
      while (next < succ.size()) {
        TxnId w = succ[next++];
        if (!index.count(w)) {
          visit(w);
          work.emplace_back(w, 0);  // invalidates v and next: leave at once
          descended = true;
          break;
        }
        if (on_stack.count(w)) low[v] = std::min(low[v], index[w]);
      }
      if (descended) continue;
      const TxnId done = v;
      work.pop_back();
      if (!work.empty()) low[work.back().first] = std::min(low[work.back().first], low[done]);
      if (low[done] == index[done]) {
        std::vector<TxnId> comp;
        TxnId w;
        do {
          w = stack.back();
          stack.pop_back();
          on_stack.erase(w);
          comp.push_back(w);
        } while (w != done);
        if (comp.size() > 1) comps.push_back(std::move(comp));
      }
    }
  }
  return comps;
}

// The shortest cycle inside one component: breadth-first search from each
// member (ascending), cut at the best length found so far.
std::vector<TxnId> shortest_cycle(const Graph& g, const std::vector<TxnId>& comp) {
  const std::unordered_set<TxnId> members(comp.begin(), comp.end());
  std::vector<TxnId> starts = comp, best;
  std::sort(starts.begin(), starts.end());
  for (TxnId s : starts) {
    const size_t limit = best.empty() ? comp.size() + 1 : best.size();
    std::unordered_map<TxnId, TxnId> parent;  // BFS tree; s is its own parent
    parent[s] = s;
    std::vector<TxnId> frontier{s};
    bool found = false;
    TxnId last = 0;  // the node whose edge closes the cycle back to s
    for (size_t depth = 1; !frontier.empty() && depth < limit && !found; ++depth) {
      std::vector<TxnId> next;
      for (TxnId u : frontier) {
        for (TxnId v : g.succ(u)) {
          if (v == s) {
            found = true;
            last = u;
            break;
          }
          if (members.count(v) && parent.emplace(v, u).second) next.push_back(v);
        }
        if (found) break;
      }
      frontier = std::move(next);
    }
    if (!found) continue;
    std::vector<TxnId> path;
    for (TxnId x = last;; x = parent.at(x)) {
      path.push_back(x);
      if (x == s) break;
    }
    best.assign(path.rbegin(), path.rend());  // s ... last, and last -> s closes it
    if (best.size() == 2) break;
  }
  return best;
}

std::string describe_cycle(const Run& run, const Graph& g, const std::vector<TxnId>& cycle) {
  std::string s;
  for (size_t i = 0; i < cycle.size(); ++i) {
    const Why& why = g.why(cycle[i], cycle[(i + 1) % cycle.size()]);
    s += run.describe(cycle[i]) + " -> [shard " + std::to_string(why.shard) + ", " + why.key + "] -> ";
  }
  return s + run.describe(cycle[0]);
}

// ---- (d) serial replay ----------------------------------------------------------------------------

// The committed transactions in an order that respects every conflict edge
// between them (Kahn, ties by smallest id); empty when they form a cycle.
std::vector<const TxnInfo*> topological_order(const Run& run, const Graph& g, size_t* committed) {
  std::unordered_map<TxnId, size_t> indeg;
  for (const TxnInfo* t : run.by_id())
    if (t->took_effect) indeg[t->id()] = 0;
  *committed = indeg.size();
  for (TxnId u : g.sources())
    if (indeg.count(u))
      for (TxnId v : g.succ(u)) {
        auto it = indeg.find(v);
        if (it != indeg.end()) ++it->second;
      }
  std::priority_queue<TxnId, std::vector<TxnId>, std::greater<TxnId>> ready;
  for (const auto& [id, n] : indeg)
    if (n == 0) ready.push(id);
  std::vector<const TxnInfo*> order;
  while (!ready.empty()) {
    TxnId u = ready.top();
    ready.pop();
    order.push_back(run.txn(u));
    for (TxnId v : g.succ(u)) {
      auto it = indeg.find(v);
      if (it != indeg.end() && --it->second == 0) ready.push(v);
    }
  }
  if (order.size() != indeg.size()) order.clear();
  return order;
}

void check_replay(const Workload& w, uint32_t n_shards, const Run& run,
                  const std::vector<const TxnInfo*>& order, Collector& out) {
  std::vector<std::unique_ptr<ShardStore>> stores;
  for (uint32_t s = 0; s < n_shards; ++s) stores.push_back(w.load(s));
  std::vector<std::string> outputs;  // per transaction of `order`
  std::vector<std::string> errors;   // rejected pieces: a replica rejects them the same way
  for (const TxnInfo* t : order) outputs.push_back(outputs_digest(execute_serially(w, stores, t->f->entry->txn(), &errors)));
  std::vector<std::string> digests;
  for (const auto& s : stores) digests.push_back(s->digest());
  for (const auto& rep : run.replicas()) {
    if (rep.shard >= n_shards) {
      out.add(rep.node + ": shard " + std::to_string(rep.shard) + " is not in the deployment");
      continue;
    }
    const std::string& want = digests[rep.shard];
    if (rep.digest != want)
      out.add("shard " + std::to_string(rep.shard) + ": the serial replay ends in state " + want + ", " + rep.node +
              " in " + rep.digest);
  }
  for (size_t i = 0; i < order.size(); ++i)
    if (order[i]->committed() && order[i]->f->outputs != outputs[i])   // an abandoned one's reached no client
      out.add(run.label(*order[i]) + ": the client received outputs " + order[i]->f->outputs +
              ", the serial replay produces " + outputs[i]);
}

// ---- (f) the protocol's own order key ------------------------------------------------------------

std::string key_str(const OrderKey& k) {
  return std::to_string(k.domain) + ":" + std::to_string(k.hi) + "." + std::to_string(k.lo);
}
bool key_less(const OrderKey& a, const OrderKey& b) { return std::tie(a.hi, a.lo) < std::tie(b.hi, b.lo); }

// (f): per replica, per conflict key and key domain, the largest order key of
// the earlier writes and of all earlier accesses; a piece that reads (writes)
// the key must not have a smaller order key than the earlier writes (accesses).
void check_order_keys(const Run& run, Collector& out) {
  // The earlier access with the largest key, and the largest of another transaction than its (a piece is not
  // compared with its own transaction's).
  struct Max {
    const ExecEvent* e = nullptr;
    const ExecEvent* other = nullptr;
    void offer(const ExecEvent& x) {
      if (e && e->txn == x.txn) {
        if (key_less(e->key, x.key)) e = &x;
      } else if (!e || key_less(e->key, x.key)) {
        other = e;
        e = &x;
      } else if (!other || key_less(other->key, x.key)) {
        other = &x;
      }
    }
    const ExecEvent* against(const ExecEvent& x) const { return e && e->txn == x.txn ? other : e; }
  };
  struct State {
    Max writes, any;
  };
  for (const auto& rep : run.replicas()) {
    std::map<std::pair<std::string, uint64_t>, State> state;  // (conflict key, domain)
    for (const auto& e : rep.history) {
      if (!e.key.set || e.deferred || run.commutes(e.txn, e.piece)) continue;
      const Piece* piece = run.piece(e.txn, e.piece);
      if (!piece) continue;
      std::set<std::string> writes(piece->write_keys().begin(), piece->write_keys().end());
      auto report = [&](const ExecEvent& a, const std::string& k) {
        out.add(rep.node + " (shard " + std::to_string(rep.shard) + ") executed " + run.describe(a.txn) + " piece " +
                std::to_string(a.piece) + " (order key " + key_str(a.key) + ") before " + run.describe(e.txn) +
                " piece " + std::to_string(e.piece) + " (order key " + key_str(e.key) + "), which conflicts with it on " +
                k + ": against the protocol's order");
      };
      for (const auto& k : writes) {
        const ExecEvent* a = state[{k, e.key.domain}].any.against(e);
        if (a && key_less(e.key, a->key)) report(*a, k);
      }
      for (const auto& k : piece->read_keys()) {
        if (writes.count(k)) continue;
        const ExecEvent* a = state[{k, e.key.domain}].writes.against(e);
        if (a && key_less(e.key, a->key)) report(*a, k);
      }
      for (const auto& k : writes) {
        State& st = state[{k, e.key.domain}];
        st.writes.offer(e);
        st.any.offer(e);
      }
      for (const auto& k : piece->read_keys())
        if (!writes.count(k)) state[{k, e.key.domain}].any.offer(e);
    }
  }
}

// (f), dependencies: per replica, each access to a conflict key against the
// conflicting accesses just before it (the key's last writer; for a write also
// the readers since); the accessing transaction must reach theirs through the
// declared dependencies (transitivity covers the rest). Unordered, the pair could run the other way at another replica;
// ordered the other way, it ran against the protocol's order.
using DepsMap = std::unordered_map<uint64_t, std::vector<uint64_t>>;

// Every replica's declarations, united: a path may leave the shard (Janus: a component spans shards).
DepsMap united_deps(const Run& run) {
  DepsMap deps;
  for (const auto& rep : run.replicas())
    for (const auto& [t, ds] : rep.deps) deps[t].insert(deps[t].end(), ds.begin(), ds.end());
  return deps;
}

// Is a an ancestor of b through the declared dependencies?
bool depends_on(const DepsMap& deps, uint64_t b, uint64_t a) {
  std::unordered_set<uint64_t> seen{b};
  std::vector<uint64_t> todo{b};
  while (!todo.empty()) {
    auto it = deps.find(todo.back());
    todo.pop_back();
    if (it == deps.end()) continue;
    for (uint64_t y : it->second) {
      if (y == a) return true;
      if (deps.count(y) && seen.insert(y).second) todo.push_back(y);
    }
  }
  return false;
}

void check_declared_deps(const Run& run, Collector& out) {
  const DepsMap deps = united_deps(run);
  for (const auto& rep : run.replicas()) {
    if (rep.deps.empty()) continue;
    auto depends = [&](uint64_t b, uint64_t a) { return depends_on(deps, b, a); };
    std::map<std::string, uint64_t> writer;                   // conflict key -> its last writer here
    std::map<std::string, std::vector<uint64_t>> readers;     // ... and the transactions that read it since
    for (const auto& e : rep.history) {
      if (e.deferred || run.commutes(e.txn, e.piece)) continue;
      const Piece* piece = run.piece(e.txn, e.piece);
      if (!piece) continue;
      std::set<std::string> writes(piece->write_keys().begin(), piece->write_keys().end());
      std::map<uint64_t, std::string> before;  // earlier conflicting transaction -> a key of the conflict
      for (const auto& k : writes)
        for (uint64_t r : readers[k]) before.emplace(r, k);
      for (const auto& k : writes)
        if (writer.count(k)) before.emplace(writer[k], k);
      for (const auto& k : piece->read_keys())
        if (writer.count(k)) before.emplace(writer[k], k);
      before.erase(e.txn);
      if (deps.count(e.txn))
        for (const auto& [a, k] : before)
          if (deps.count(a) && !depends(e.txn, a))
            out.add(rep.node + " (shard " + std::to_string(rep.shard) + ") executed " + run.describe(a) + " before " +
                    run.describe(e.txn) + " piece " + std::to_string(e.piece) + ", which conflicts with it on " + k +
                    (depends(a, e.txn) ? ": against the declared dependencies (the earlier depends on the later)"
                                       : ": the declared dependencies leave the two unordered"));
      for (const auto& k : writes) {
        writer[k] = e.txn;
        readers[k].clear();
      }
      for (const auto& k : piece->read_keys())
        if (!writes.count(k) && (readers[k].empty() || readers[k].back() != e.txn)) readers[k].push_back(e.txn);
    }
  }
}

// (f), dependencies first: at each replica, a transaction ran after every dependency it declared that this replica
// also ran, whether or not the two share a key (a dependency that depends back on it, a cycle Janus runs in an order
// of its own, aside; deferred and commutative pieces' places do not count, as above).
void check_dependencies_first(const Run& run, Collector& out) {
  const DepsMap deps = united_deps(run);
  for (const auto& rep : run.replicas()) {
    if (rep.deps.empty()) continue;
    std::unordered_map<uint64_t, size_t> first;
    for (size_t i = 0; i < rep.history.size(); ++i) {  // a transaction's first piece whose place matters
      const auto& e = rep.history[i];
      if (!e.deferred && !run.commutes(e.txn, e.piece)) first.emplace(e.txn, i);
    }
    for (const auto& [t, ds] : rep.deps) {
      auto at = first.find(t);
      if (at == first.end()) continue;
      for (uint64_t x : ds) {
        auto xa = first.find(x);
        if (xa != first.end() && xa->second > at->second && !depends_on(deps, x, t))
          out.add(rep.node + " (shard " + std::to_string(rep.shard) + ") executed " + run.describe(t) + " before " +
                  run.describe(x) + ", a dependency it declared (the protocol's decision), which does not depend on it");
      }
    }
  }
}

// (f), votes cast with a mark (how many pieces had executed): two transactions that conflict at the replica and had
// neither executed there when the other voted were pending at once, so the later one's vote names the earlier.
void check_votes_name_pending(const Run& run, const ReplicaRun& rep, Collector& out) {
  if (rep.vote_marks.empty()) return;
  std::unordered_map<uint64_t, size_t> last;   // txn -> index of its last piece here
  for (size_t i = 0; i < rep.history.size(); ++i) last[rep.history[i].txn] = i;
  std::map<std::string, std::map<uint64_t, bool>> per_key;   // key -> txn -> writes it
  for (const auto& e : rep.history) {
    if (e.deferred || run.commutes(e.txn, e.piece)) continue;
    const Piece* piece = run.piece(e.txn, e.piece);
    if (!piece) continue;
    for (const auto& k : piece->write_keys()) per_key[k][e.txn] = true;
    for (const auto& k : piece->read_keys()) per_key[k].try_emplace(e.txn, false);
  }
  const auto names = [&rep](uint64_t voter, uint64_t x) {
    auto v = rep.votes.find(voter);
    return v != rep.votes.end() && std::find(v->second.begin(), v->second.end(), x) != v->second.end();
  };
  std::set<std::pair<uint64_t, uint64_t>> reported;
  for (const auto& [key, acc] : per_key) {
    std::vector<uint64_t> order;
    for (const auto& [t, w] : acc) order.push_back(t);
    std::sort(order.begin(), order.end(), [&last](uint64_t a, uint64_t b) { return last.at(a) < last.at(b); });
    for (size_t j = 0; j < order.size(); ++j) {
      const uint64_t u = order[j];
      auto m = rep.vote_marks.find(u);
      if (m == rep.vote_marks.end()) continue;
      for (size_t i = j; i-- > 0;) {
        const uint64_t t = order[i];
        if (last.at(t) < m->second) break;   // it had executed here before u voted (and so had every one before it)
        if ((acc.at(t) || acc.at(u)) && !names(u, t) && !names(t, u) && reported.insert({t, u}).second)
          out.add(rep.node + " (shard " + std::to_string(rep.shard) + "): " + run.describe(t) + " and " +
                  run.describe(u) + " conflict on " + key +
                  " and neither had executed here when the other voted, yet neither vote names the other");
      }
    }
  }
}

// (f), votes: at each replica, a transaction it voted for and executed was decided with dependencies that hold
// every one of its vote, where the decision counted it (its quorum names this replica; without one, every vote
// counts: one left out may be the only link between two conflicting transactions). A named quorum is a majority of
// the shard's 3 replicas, the same at every replica of the shard, and either every replica's (the fast quorum) or
// accepted by a majority (the Accept round).
void check_votes(const Run& run, Collector& out) {
  using Decision = std::pair<std::vector<uint64_t>, std::vector<uint64_t>>;   // votes counted, acceptances
  std::map<std::pair<uint32_t, uint64_t>, std::pair<std::string, Decision>> decided;
  const auto list = [](const std::vector<uint64_t>& v) {
    std::string s;
    for (uint64_t r : v) s += (s.empty() ? "" : ", ") + std::to_string(r);
    return "[" + s + "]";
  };
  const auto beyond = [](const std::vector<uint64_t>& v) {
    return std::any_of(v.begin(), v.end(), [](uint64_t r) { return r >= 3; });
  };
  for (const auto& rep : run.replicas()) {
    for (const auto& [t, q] : rep.quorums) {
      const auto a = rep.accepted.find(t);
      const std::string where = " of shard " + std::to_string(rep.shard);
      if (q.size() < 2 || beyond(q))
        out.add(rep.node + ": " + run.describe(t) + " was decided on the votes of replicas " + list(q) + where +
                ": not a majority of its 3");
      else if (a == rep.accepted.end() && q.size() < 3)
        out.add(rep.node + ": " + run.describe(t) + " was decided on the fast path on the votes of replicas " +
                list(q) + where + ": the fast quorum is all 3, fewer need an Accept round");
      else if (a != rep.accepted.end() && (a->second.size() < 2 || beyond(a->second)))
        out.add(rep.node + ": " + run.describe(t) + " was decided with the acceptance of replicas " +
                list(a->second) + where + ": not a majority of its 3");
      const Decision dec{q, a == rep.accepted.end() ? std::vector<uint64_t>{~0ull} : a->second};
      auto [it, fresh] = decided.try_emplace({rep.shard, t}, rep.node, dec);
      if (!fresh && it->second.second != dec)
        out.add(rep.node + " and " + it->second.first + " name different decisions of " + run.describe(t) +
                " on shard " + std::to_string(rep.shard));
    }
    if (rep.votes.empty()) continue;
    const size_t dot = rep.node.rfind('.');
    const uint64_t me = dot == std::string::npos ? ~0ull : std::stoull(rep.node.substr(dot + 1));
    std::unordered_set<uint64_t> executed;
    for (const auto& e : rep.history) executed.insert(e.txn);
    for (const auto& [t, vote] : rep.votes) {
      if (!executed.count(t)) continue;
      if (auto q = rep.quorums.find(t); q != rep.quorums.end() && std::find(q->second.begin(), q->second.end(), me) == q->second.end())
        continue;   // the decision did not count this replica's vote
      auto d = rep.deps.find(t);
      if (d == rep.deps.end()) {
        out.add(rep.node + " (shard " + std::to_string(rep.shard) + ") executed " + run.describe(t) +
                ", which it voted for, without declaring the dependencies it was decided with");
        continue;
      }
      std::string missing;
      for (uint64_t x : vote)
        if (std::find(d->second.begin(), d->second.end(), x) == d->second.end())
          missing += (missing.empty() ? "" : ", ") + run.describe(x);
      if (!missing.empty())
        out.add(rep.node + " (shard " + std::to_string(rep.shard) + ") voted for dependencies of " + run.describe(t) +
                " that its decision left out: " + missing);
    }
    check_votes_name_pending(run, rep, out);
  }
}

}  // namespace

HistoryVerdict check_histories(const Workload& w, uint32_t n_shards, const RunHistory& r) {
  HistoryVerdict v;
  Collector inputs(&v.inputs), order(&v.order), atomicity(&v.atomicity), serial(&v.serializability),
      replay(&v.replay), order_key(&v.order_key);
  for (const auto& p : r.input_problems) inputs.add(p);
  Run run(w, r, inputs);
  inputs.finish();
  check_order(run, order);
  order.finish();
  check_atomicity(run, atomicity);
  atomicity.finish();
  Graph g = conflict_graph(run, serial);
  serial.finish();
  v.conflict_edges = g.edges();
  auto comps = cycle_components(g);
  if (!comps.empty()) {
    std::vector<TxnId> best;
    size_t members = 0;
    for (const auto& c : comps) {
      members += c.size();
      auto cyc = shortest_cycle(g, c);
      if (best.empty() || cyc.size() < best.size()) best = std::move(cyc);
    }
    v.serializability.insert(v.serializability.begin(),
                             "the conflict graph has " + std::to_string(comps.size()) + " cycle component(s) over " +
                                 std::to_string(members) + " transactions; shortest cycle (" +
                                 std::to_string(best.size()) + " transactions): " + describe_cycle(run, g, best));
  }
  auto serial_order = topological_order(run, g, &v.committed);
  if (serial_order.size() != v.committed) {
    v.replay_skipped = "the conflict graph has a cycle: no serial order to replay";
  } else {
    check_replay(w, n_shards, run, serial_order, replay);
    replay.finish();
  }
  check_order_keys(run, order_key);
  check_declared_deps(run, order_key);
  check_dependencies_first(run, order_key);
  check_votes(run, order_key);
  order_key.finish();
  return v;
}

void report_history_failures(const HistoryVerdict& v, const std::string& context) {
  const std::pair<const char*, const std::vector<std::string>*> checks[] = {
      {"inputs", &v.inputs},
      {"(a) order", &v.order},
      {"(b) atomicity", &v.atomicity},
      {"(c) serializability", &v.serializability},
      {"(d) replay", &v.replay},
      {"(f) order key", &v.order_key}};
  for (const auto& [name, lines] : checks)
    for (const auto& line : *lines) ADD_FAILURE() << context << ": history check " << name << ": " << line;
}

}  // namespace txn::test
