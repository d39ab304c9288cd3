// The shards a transaction's pieces touch, checked against the deployment.
#pragma once
#include <set>
#include <string>
#include <vector>

#include "config.h"
#include "node.h"
#include "workload.h"

namespace txn {

// Ascending. Throws BadMessage for a request without pieces, with a piece on a
// shard that does not exist, or with a piece id used twice.
inline std::vector<uint32_t> touched_shards(const Deployment& d, const TxnRequest& t) {
  const std::string id = std::to_string(t.txn_id());
  if (t.pieces_size() == 0) throw BadMessage("txn " + id + " has no pieces");
  std::set<uint32_t> shards, ids;
  for (const auto& p : t.pieces()) {
    if (p.shard() >= d.n_shards())
      throw BadMessage("txn " + id + " piece " + std::to_string(p.id()) + ": shard " + std::to_string(p.shard()) +
                       " out of range (" + std::to_string(d.n_shards()) + " shards)");
    if (!ids.insert(p.id()).second) throw BadMessage("txn " + id + ": piece id " + std::to_string(p.id()) + " twice");
    shards.insert(p.shard());
  }
  return {shards.begin(), shards.end()};
}

// Throws BadMessage when an input of a piece on `shard` (every shard: -1) is
// produced by no piece of the transaction (it would wait forever).
inline void check_inputs_produced(const TxnRequest& t, int64_t shard = -1) {
  std::set<std::string> produced;
  for (const auto& q : t.pieces()) produced.insert(q.outputs().begin(), q.outputs().end());
  for (const auto& p : t.pieces())
    if (shard < 0 || p.shard() == shard)
      for (const auto& v : p.inputs())
        if (!produced.count(v))
          throw BadMessage("txn " + std::to_string(t.txn_id()) + " piece " + std::to_string(p.id()) + ": input '" + v +
                           "' produced by no piece");
}

// The shards other than `shard` with a piece that needs one of the values in `out`.
inline std::set<uint32_t> consumer_shards(const TxnRequest& t, uint32_t shard, const Vars& out) {
  std::set<uint32_t> consumers;
  for (const auto& q : t.pieces())
    for (const auto& v : q.inputs())
      if (q.shard() != shard && out.count(v)) consumers.insert(q.shard());
  return consumers;
}

// What `t`'s pieces on `shard` produced, as far as `known` holds it (a shard's report to the coordinator).
inline void shard_outputs(const TxnRequest& t, uint32_t shard, const Vars& known, Vars* to) {
  for (const auto& p : t.pieces())
    if (p.shard() == shard)
      for (const auto& o : p.outputs()) {
        auto it = known.find(o);
        if (it != known.end()) (*to)[o] = it->second;
      }
}

}  // namespace txn
