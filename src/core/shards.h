// The shards a transaction's pieces touch, checked against the deployment.
#pragma once
#include <set>
#include <string>
#include <vector>

#include "config.h"
#include "node.h"

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

}  // namespace txn
