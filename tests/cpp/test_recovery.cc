// A restarted replica's catch-up (src/core/recovery.h), for every registered protocol on the simulated network: a
// follower of shard 0 is crashed (its node replaced by one that hears nothing) and restarted empty (a Learner); it
// must catch up from replica 0 of its shard and end the run with replica 0's state and history, and the run must
// check as every run does (history_check.h, with the restarted replica's history among the others).
#include <gtest/gtest.h>

#include "core/recovery.h"
#include "sim_cluster.h"
#include "sim_txns.h"

namespace txn {
namespace {

constexpr TimeUs kMs = 1000;

// A crashed process: nothing in, nothing out.
class Down final : public Node {
 public:
  void start(Env&) override {}
  void on_message(Env&, Envelope&) override {}
  void on_timer(Env&, uint64_t) override {}
};

struct Restarted {
  test::SimCluster* c;
  Learner* learner = nullptr;
  TimeUs caught_up_at = -1;
  uint64_t caught_up_events = 0;
};

// Crash follower `r` of shard 0 at `crash_us` and restart it at `restart_us`, then run the clients to their end and
// 3 s more; returns the learner.
Restarted crash_and_restart(test::SimCluster& c, uint32_t r, TimeUs crash_us, TimeUs restart_us) {
  Restarted out{&c};
  const NodeId victim = c.d.replica_id(0, r);
  c.net->start();
  c.net->run_until(crash_us);
  c.net->replace(victim, std::make_unique<Down>());
  c.net->run_until(restart_us);
  auto l = std::make_unique<Learner>(c.d, victim, *c.w);
  out.learner = l.get();
  l->on_caught_up([&c, &out](Env&, uint64_t events, TimeUs) {
    out.caught_up_at = c.net->now();
    out.caught_up_events = events;
  });
  c.net->replace(victim, std::move(l));
  EXPECT_TRUE(c.net->run_until([&] { return c.clients_finished(); }, 120'000'000)) << c.d.mode;
  c.net->run_until(c.net->now() + 3'000'000);
  return out;
}

Deployment with_restart(const std::string& mode, uint32_t r, TimeUs crash_us, TimeUs restart_us) {
  Deployment d = test::small_deployment(mode, mode == "tapir" ? "tpca" : "append");
  d.client.duration_s = 4;
  d.client.retry_limit = 1000;
  const NodeId victim = d.replica_id(0, r);
  d.nodes[victim].process = d.nodes[victim].name;   // alone in its process, as a crash needs
  CrashFault f;
  f.id = "c";
  f.node = d.node(victim).name;
  f.node_id = victim;
  f.start_us = crash_us;
  f.end_us = restart_us;
  d.faults.crashes.push_back(f);
  return d;
}

class RestartSim : public ::testing::TestWithParam<std::string> {};

TEST_P(RestartSim, ARestartedFollowerCatchesUpAndEndsAsItsPeers) {
  const std::string mode = GetParam();
  test::SimCluster c(with_restart(mode, 1, 1000 * kMs, 1500 * kMs), test::sim_options(11, 0), true);
  Restarted got = crash_and_restart(c, 1, 1000 * kMs, 1500 * kMs);
  ASSERT_NE(got.learner, nullptr);
  const ReplicaNode* leader = c.replica(0, 0);
  const ReplicaNode* back = c.replica(0, 1);
  ASSERT_EQ(back, got.learner);
  // it caught up soon after its restart, with what replica 0 had executed by then
  EXPECT_TRUE(got.learner->caught_up()) << mode;
  EXPECT_GT(got.caught_up_events, 0u) << mode;
  EXPECT_LT(got.caught_up_at, 1500 * kMs + 200 * kMs) << mode << ": caught up at " << got.caught_up_at;
  // and it ends as replica 0: the same state, the same history, event by event
  EXPECT_EQ(back->store().digest(), leader->store().digest()) << mode;
  const auto& a = leader->executor().history();
  const auto& b = back->executor().history();
  ASSERT_EQ(a.size(), b.size()) << mode;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].txn, b[i].txn) << mode << " event " << i;
    ASSERT_EQ(a[i].piece, b[i].piece) << mode << " event " << i;
    ASSERT_EQ(a[i].key, b[i].key) << mode << " event " << i;
  }
  EXPECT_TRUE(back->idle()) << mode;
  const auto k = back->counters();
  EXPECT_EQ(k.at("restarted"), 1);
  EXPECT_EQ(static_cast<size_t>(k.at("recovered_events")), a.size());
  EXPECT_GT(k.at("ignored_protocol_messages"), 0) << mode << ": its protocol's messages reach it and are dropped";
  EXPECT_GT(leader->counters().at("catch_up_events_served"), 0);
  // every replica's copy of every committed transaction, the restarted one's too (the history checker)
  const auto n = test::count_records(c);
  EXPECT_EQ(n.given_up, 0u) << mode;
  test::check_history(c);
}

// A restart whose replica 0 has executed nothing since its catch-up began still ends idle and equal; a replica 0
// that answers an Ask from beyond what it executed refuses it (a BadMessage, counted, state unchanged).
TEST(Recovery, AnAskBeyondWhatReplicaZeroExecutedIsRefused) {
  Deployment d = with_restart("dast", 2, 100 * kMs, 200 * kMs);
  auto w = make_workload(d);
  const NodeId leader_id = d.replica_id(0, 0);
  CatchUpServer s(find_protocol("dast").make_replica(d, leader_id, *w));
  EXPECT_TRUE(s.executor().retaining());
  Envelope ask;
  ask.set_from(d.replica_id(0, 2));
  ask.mutable_recovery()->mutable_ask()->set_from(5);
  struct NoEnv : Env {
    TimeUs now_us() override { return 0; }
    TimeUs mono_us() override { return 0; }
    void send(NodeId, Envelope) override { ++sent; }
    void set_timer(uint64_t, TimeUs) override {}
    std::mt19937_64& rng() override { return r; }
    NodeId self() const override { return 0; }
    void log(const std::string&) override {}
    std::mt19937_64 r;
    int sent = 0;
  } env;
  EXPECT_THROW(s.on_message(env, ask), BadMessage);
  ask.mutable_recovery()->mutable_ask()->set_from(0);
  s.on_message(env, ask);
  EXPECT_EQ(env.sent, 1);
}

// Only replica 0 of a shard with a planned restart keeps what it executes (a copy of every piece): no other replica,
// and nobody in a run without restarts.
TEST(Recovery, OnlyTheLeaderOfARestartedReplicasShardRetains) {
  Deployment d = with_restart("janus", 1, 100 * kMs, 200 * kMs);
  auto w = make_workload(d);
  for (const auto& n : d.nodes) {
    if (n.kind != NodeKind::Replica) continue;
    auto r = serve_restarts(d, n.id, find_protocol("janus").make_replica(d, n.id, *w));
    EXPECT_EQ(r->executor().retaining(), n.shard == 0 && n.replica == 0) << n.name;
  }
  d.faults.crashes.front().end_us = kNoTime;   // crashed for good: nobody to catch up
  for (const auto& n : d.nodes) {
    if (n.kind != NodeKind::Replica) continue;
    EXPECT_FALSE(serve_restarts(d, n.id, find_protocol("janus").make_replica(d, n.id, *w))->executor().retaining());
  }
}

INSTANTIATE_TEST_SUITE_P(Registered, RestartSim, ::testing::ValuesIn(protocol_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace txn
