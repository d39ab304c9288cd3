// Test helper: run one transaction serially on a set of shard stores, each
// piece as soon as its input variables are known (the reference execution).
#pragma once
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <vector>

#include "workload.h"

namespace txn::test {

inline void execute_serially(const Workload& w, std::vector<std::unique_ptr<ShardStore>>& stores,
                             const TxnRequest& t) {
  Vars vars;
  std::set<uint32_t> done;
  for (bool progress = true; progress;) {
    progress = false;
    for (const auto& p : t.pieces()) {
      if (done.count(p.id())) continue;
      Vars in = p.args();
      bool ready = true;
      for (const auto& v : p.inputs()) {
        if (!vars.count(v)) { ready = false; break; }
        in[v] = vars.at(v);
      }
      if (!ready) continue;
      Vars out;
      w.execute(*stores[p.shard()], p, in, &out);
      for (const auto& o : p.outputs()) EXPECT_TRUE(out.count(o)) << "piece did not produce " << o;
      for (auto& [k, v] : out) vars[k] = v;
      done.insert(p.id());
      progress = true;
    }
  }
  ASSERT_EQ(done.size(), static_cast<size_t>(t.pieces_size())) << "unsatisfiable inputs";
}

}  // namespace txn::test
