// Staging single transactions on a simulated cluster: pick a generated
// transaction of a given shape and submit it by hand, as a client would.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <set>

#include <map>
#include <string>

#include "core/protocol.h"
#include "core/workload.h"
#include "sim/sim.h"
#include "sim_cluster.h"

namespace txn::test {

// `node` hears nothing for the first `for_us` of the load: every message to it is `for_us` late (it answers late,
// as a paused process does, and then catches up from what it was sent).
inline void silence(Deployment& d, NodeId node, TimeUs for_us) {
  LinkFault f;
  f.id = "silent";
  f.kind = LinkFault::Kind::Spike;
  for (uint32_t r = 0; r < d.regions; ++r) f.links.push_back({r, d.node(node).region});
  f.amount_us = for_us;
  f.w = {0, for_us};
  f.to_nodes = {d.node(node).name};
  f.to_ids = {node};
  d.faults.links.push_back(f);
}

// A sim::Options::lose that loses every message `kind` picks on its way to a replica 0 of `d` (as to a replica 0
// crashed, paused or restarted, for that kind alone), counting them in `*lost`.
inline std::function<bool(NodeId, NodeId, const Envelope&)> lose_to_replica0(
    const Deployment& d, std::function<bool(const Envelope&)> kind, uint64_t* lost) {
  std::set<NodeId> replica0;
  for (uint32_t s = 0; s < d.n_shards(); ++s) replica0.insert(d.replica_id(s, 0));
  return [replica0, kind = std::move(kind), lost](NodeId, NodeId to, const Envelope& m) {
    const bool gone = replica0.count(to) && kind(m);
    *lost += gone;
    return gone;
  };
}

// The first transaction the workload generates for `home` that is (not) a CRT and passes `extra`.
inline TxnRequest find_txn(const Workload& w, uint32_t home, bool crt, std::mt19937_64& rng,
                           const std::function<bool(const TxnRequest&)>& extra = nullptr) {
  ClientContext ctx{home, 0};
  for (int i = 0; i < 100000; ++i) {
    TxnRequest t = w.generate(rng, ctx);
    if (t.crt() == crt && (!extra || extra(t))) return t;
  }
  ADD_FAILURE() << "no matching transaction generated";
  return {};
}

// A ClientSubmit of `t` as attempt 1 of transaction `id`.
inline Envelope submit(const TxnRequest& t, uint64_t id) {
  Envelope e;
  *e.mutable_submit()->mutable_txn() = t;
  e.mutable_submit()->mutable_txn()->set_txn_id(id);
  e.mutable_submit()->set_attempt(1);
  return e;
}

// An IRT made of `t`'s first piece on `shard` (the same keys: a direct conflict with `t` there).
inline TxnRequest irt_of_piece(const TxnRequest& t, uint32_t shard) {
  TxnRequest irt;
  irt.set_type(t.type());
  irt.set_crt(false);
  irt.set_home_shard(shard);
  for (const auto& p : t.pieces())
    if (p.shard() == shard) {
      *irt.add_pieces() = p;
      break;
    }
  return irt;
}

// Simulator options: a seed and a uniform extra delay per message (reorders across channels).
inline sim::Options sim_options(uint64_t seed, TimeUs extra_delay_us) {
  sim::Options o;
  o.seed = seed;
  o.extra_delay_us = extra_delay_us;
  return o;
}

// Protocol counters over replicas: summed, or the maximum for a name ending in "_max".
template <class Replicas>
std::map<std::string, int64_t> sum_counters(const Replicas& replicas) {
  std::map<std::string, int64_t> sum;
  for (const auto* r : replicas)
    for (const auto& [k, v] : r->counters()) {
      const bool is_max = k.size() > 4 && k.compare(k.size() - 4, 4, "_max") == 0;
      sum[k] = is_max ? std::max(sum[k], v) : sum[k] + v;
    }
  return sum;
}

// What one follower of shard 0 silent for the first 2 s of the load (silence()) costs a run of `d`, checked as every
// run: the slowest IRT started in [0.5, 1.5) s (start to answer), the transactions answered during the silence and
// in all, and the protocol's counter `timeouts` summed over the replicas (none if empty). `silent` false: the same
// run with nobody silent, to compare with.
struct SilenceCost {
  TimeUs worst_irt_us = 0;
  uint64_t answered_during = 0, committed = 0;
  // committed transactions touching shard 0 answered in [0.6, 2) s: well into the silence, before it ends
  uint64_t silent_shard_answered = 0;
  int64_t timeouts = 0;
  std::map<std::string, int64_t> counters;   // every protocol counter, summed over the replicas
};
inline SilenceCost silent_follower_cost(Deployment d, const std::string& timeouts, bool silent = true) {
  if (silent) silence(d, d.replica_id(0, 1), 2'000'000);
  SimCluster c(std::move(d), sim_options(5, 0), true);
  run_and_check(c);
  SilenceCost out;
  std::set<uint64_t> on_shard0;
  for (const auto& [client, log] : c.txn_logs)
    for (const auto& e : log)
      for (const auto& p : e.txn().pieces())
        if (p.shard() == 0) on_shard0.insert(e.txn().txn_id());
  for (auto* cl : c.clients)
    for (const auto& r : cl->records()) {
      if (!r.committed) continue;
      const TimeUs end = r.start_us + r.latency_us;
      if (on_shard0.count(r.txn_id) && end >= 600'000 && end < 2'000'000) ++out.silent_shard_answered;
      if (!r.crt && r.start_us >= 500'000 && r.start_us < 1'500'000)
        out.worst_irt_us = std::max(out.worst_irt_us, r.latency_us);
      if (r.start_us + r.latency_us < 2'000'000) ++out.answered_during;
    }
  out.counters = sum_counters(c.replicas);
  if (!timeouts.empty()) out.timeouts = out.counters.at(timeouts);
  const auto n = count_records(c);
  out.committed = n.irt + n.crt;
  return out;
}

}  // namespace txn::test
