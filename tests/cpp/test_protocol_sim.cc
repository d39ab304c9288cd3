// The protocol-neutral simulation suite: every registered protocol (read from
// the registry when the tests start, so registering a protocol is all it takes)
// runs TPC-C and TPC-A over several seeds, under message reordering, heavy
// delay variation, cross-region jitter and clock skew, and must pass
// run_and_check (sim_cluster.h): every client finishes with everything
// committed, no node is left with work, the replicas of each shard agree, no
// message is rejected or lost, and the post-run checks (the history checker's
// hook) hold.
#include <gtest/gtest.h>

#include <random>

#include "sim_cluster.h"

using namespace txn;
using txn::test::SimCluster;

namespace {

enum class Stress { Reordering, HeavyDelayVariation, CrossRegionJitter, ClockSkew, AllAtOnce };

struct Case {
  std::string mode, workload;
  uint64_t seed;
};

// One run of `mode` under `stress`; the seed also picks the skews.
void run_case(const Case& k, Stress stress) {
  SCOPED_TRACE(k.mode + " " + k.workload + " seed " + std::to_string(k.seed));
  Deployment d = txn::test::small_deployment(k.mode, k.workload);
  sim::Options o;
  o.seed = k.seed;
  const bool all = stress == Stress::AllAtOnce;
  if (all || stress == Stress::Reordering) o.extra_delay_us = 4'000;  // reorders messages across channels
  if (stress == Stress::HeavyDelayVariation) o.extra_delay_us = 150'000;  // far above the configured RTT
  if (all || stress == Stress::CrossRegionJitter) d.link.jitter_ms = 20;  // cross-region RTT 100 +- 28 ms
  if (all || stress == Stress::ClockSkew) {
    std::mt19937_64 rng(k.seed);
    std::uniform_int_distribution<TimeUs> skew(-8'000, 8'000);
    for (const auto& n : d.nodes) o.clock_skew_us[n.id] = skew(rng);
  }
  SimCluster c(std::move(d), std::move(o), true);
  txn::test::run_and_check(c);
}

class ProtocolSim : public ::testing::TestWithParam<std::string> {
 protected:
  void run_all(Stress stress, std::initializer_list<uint64_t> seeds) {
    for (uint64_t seed : seeds)
      for (const char* workload : {"tpcc", "tpca"}) run_case({GetParam(), workload, seed}, stress);
  }
};

TEST_P(ProtocolSim, Reordering) { run_all(Stress::Reordering, {101, 102}); }
TEST_P(ProtocolSim, HeavyDelayVariation) { run_all(Stress::HeavyDelayVariation, {111}); }
TEST_P(ProtocolSim, CrossRegionJitter) { run_all(Stress::CrossRegionJitter, {121, 122}); }
TEST_P(ProtocolSim, ClockSkew) { run_all(Stress::ClockSkew, {131, 132}); }
TEST_P(ProtocolSim, AllAtOnce) { run_all(Stress::AllAtOnce, {141, 142, 143}); }

// The history checker's hook runs after every run and sees every replica.
TEST_P(ProtocolSim, PostRunChecksSeeTheFinishedCluster) {
  int calls = 0;
  size_t replicas = 0;
  auto& checks = txn::test::post_run_checks();
  checks.push_back([&](const SimCluster& c) {
    ++calls;
    replicas = c.replicas.size();
    EXPECT_TRUE(c.clients_finished());
  });
  run_case({GetParam(), "tpca", 151}, Stress::Reordering);
  checks.pop_back();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(replicas, 3u * 2 * 3);  // 3 regions x 2 shards x 3 replicas
}

INSTANTIATE_TEST_SUITE_P(Registered, ProtocolSim, ::testing::ValuesIn(protocol_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
