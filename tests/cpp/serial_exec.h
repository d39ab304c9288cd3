// Test helper: run one transaction serially on a set of shard stores, each
// piece as soon as its input variables are known (the reference execution,
// txn::execute_serially), failing the test on any rejected piece.
#pragma once
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "core/executor.h"

namespace txn::test {

inline void execute_serially(const Workload& w, std::vector<std::unique_ptr<ShardStore>>& stores,
                             const TxnRequest& t) {
  std::vector<std::string> errors;
  Vars vars = txn::execute_serially(w, stores, t, &errors);
  for (const auto& e : errors) ADD_FAILURE() << e;
  for (const auto& p : t.pieces())
    for (const auto& o : p.outputs()) EXPECT_TRUE(vars.count(o)) << "piece did not produce " << o;
}

}  // namespace txn::test
