// A restarted replica's catch-up (src/core/recovery.h), for every registered protocol on the simulated network: a
// follower of shard 0 is crashed (its node replaced by one that hears nothing) and restarted empty (a Learner, as
// `txn-server --recover` builds it); no fault plan tells anyone. It must take over the state of a live replica of
// its shard, follow it, and end the run with that replica's state and history, and the run must check as every run
// does (history_check.h, with the restarted replica's history among the others).
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
  Learner* learner = nullptr;
  TimeUs caught_up_at = -1;
  uint64_t caught_up_events = 0;
  NodeId source = 0;
};

// Replica `r` of shard 0 as the engine starts it again: a Learner serving its own restarted peers in turn (with
// `vote`, voting again as its protocol's Voter says, as `txn-server --recover` builds it; without, a learner only).
std::unique_ptr<Node> restarted(test::SimCluster& c, uint32_t r, Restarted* out, bool vote = false) {
  const auto& spec = find_protocol(c.d.mode);
  auto l = std::make_unique<Learner>(c.d, c.d.replica_id(0, r), *c.w,
                                     vote && spec.make_voter ? spec.make_voter(c.d, c.d.replica_id(0, r), *c.w)
                                                             : nullptr);
  out->learner = l.get();
  l->on_caught_up([&c, out](Env&, uint64_t events, TimeUs, NodeId source) {
    out->caught_up_at = c.net->now();
    out->caught_up_events = events;
    out->source = source;
  });
  return serve_catch_up(c.d, c.d.replica_id(0, r), std::move(l));
}

// Crash follower `r` of shard 0 at `crash_us` and restart it at `restart_us`, then run the clients to their end and
// 3 s more.
Restarted crash_and_restart(test::SimCluster& c, uint32_t r, TimeUs crash_us, TimeUs restart_us, bool vote = false) {
  Restarted out;
  const NodeId victim = c.d.replica_id(0, r);
  c.net->start();
  c.net->run_until(crash_us);
  c.net->replace(victim, std::make_unique<Down>());
  c.net->run_until(restart_us);
  c.net->replace(victim, restarted(c, r, &out, vote));
  EXPECT_TRUE(c.net->run_until([&] { return c.clients_finished(); }, 120'000'000)) << c.d.mode;
  c.net->run_until(c.net->now() + 3'000'000);
  return out;
}

Deployment small(const std::string& mode) {
  Deployment d = test::small_deployment(mode, mode == "tapir" ? "tpca" : "append");
  d.client.duration_s = 4;
  d.client.retry_limit = 1000;
  EXPECT_TRUE(d.faults.empty());   // nothing is planned: the engine learns of the crash as a deployed system would
  return d;
}

void expect_same_history(const ReplicaNode& a, const ReplicaNode& b, const std::string& what) {
  EXPECT_EQ(a.store().digest(), b.store().digest()) << what;
  const auto& x = a.executor().history();
  const auto& y = b.executor().history();
  ASSERT_EQ(x.size(), y.size()) << what;
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(x[i].txn, y[i].txn) << what << " event " << i;
    ASSERT_EQ(x[i].piece, y[i].piece) << what << " event " << i;
    ASSERT_EQ(x[i].key, y[i].key) << what << " event " << i;
  }
}

class RestartSim : public ::testing::TestWithParam<std::string> {};

TEST_P(RestartSim, ARestartedFollowerTakesOverALiveReplicasStateAndEndsAsIt) {
  const std::string mode = GetParam();
  test::SimCluster c(small(mode), test::sim_options(11, 0), true);
  Restarted got = crash_and_restart(c, 1, 1000 * kMs, 1500 * kMs);
  ASSERT_NE(got.learner, nullptr);
  const ReplicaNode* back = c.replica(0, 1);
  // it took over the state of whichever live replica answered first, soon after its restart
  EXPECT_TRUE(got.learner->caught_up()) << mode;
  EXPECT_GT(got.caught_up_events, 0u) << mode;
  EXPECT_LT(got.caught_up_at, 1500 * kMs + 200 * kMs) << mode << ": caught up at " << got.caught_up_at;
  ASSERT_TRUE(got.source == c.d.replica_id(0, 0) || got.source == c.d.replica_id(0, 2)) << got.source;
  // and it ends as that replica: the same state, the same history, event by event
  const ReplicaNode* source = c.replica(0, c.d.node(got.source).replica);
  expect_same_history(*source, *back, mode);
  EXPECT_TRUE(back->idle()) << mode;
  const auto k = back->counters();
  EXPECT_EQ(k.at("restarted"), 1);
  EXPECT_EQ(static_cast<size_t>(k.at("recovered_events")), source->executor().history().size());
  EXPECT_GT(k.at("ignored_protocol_messages"), 0) << mode << ": its protocol's messages reach it and are dropped";
  const auto served = c.served(0, c.d.node(got.source).replica)->counters();
  EXPECT_EQ(served.at("catch_up_joins_served"), 1);
  EXPECT_GT(served.at("catch_up_events_served"), 0);
  // every replica's copy of every committed transaction, the restarted one's too (the history checker)
  const auto n = test::count_records(c);
  EXPECT_EQ(n.given_up, 0u) << mode;
  test::check_history(c);
}

// A fake Env for driving one node by hand.
struct HandEnv : Env {
  TimeUs now_us() override { return t; }
  TimeUs mono_us() override { return t; }
  void send(NodeId to, Envelope m) override { sent.emplace_back(to, std::move(m)); }
  void set_timer(uint64_t, TimeUs) override {}
  std::mt19937_64& rng() override { return r; }
  NodeId self() const override { return 0; }
  void log(const std::string&) override {}
  std::mt19937_64 r;
  TimeUs t = 0;
  std::vector<std::pair<NodeId, Envelope>> sent;
};

Envelope from_node(NodeId from, Envelope m) {
  m.set_from(from);
  return m;
}

// A restarted replica of a protocol that says how it votes again (ProtocolSpec::make_voter) seals its shard's other
// replicas into a new epoch and votes in it: decisions count its votes again (Janus's fast path, TAPIR's fast quorum
// come back), and the run checks as every run does, its votes and their decisions included.
TEST_P(RestartSim, ARestartedReplicaVotesAgainWhereItsProtocolSaysHow) {
  const std::string mode = GetParam();
  if (!find_protocol(mode).make_voter) GTEST_SKIP() << mode << " has no Voter: a restarted replica of it votes nothing";
  test::SimCluster c(small(mode), test::sim_options(11, 0), true);
  Restarted got = crash_and_restart(c, 1, 1000 * kMs, 1500 * kMs, true);
  ASSERT_NE(got.learner, nullptr);
  EXPECT_TRUE(got.learner->voting()) << mode;
  EXPECT_GE(got.learner->epoch(), 1u) << mode;
  const auto k = got.learner->counters();
  EXPECT_EQ(k.at("rejoin_seals"), 1) << mode;
  EXPECT_GT(k.at("voter_messages"), 0) << mode;
  // its peers sealed: they reply in its epoch
  EXPECT_EQ(c.replica(0, 0)->epoch(), got.learner->epoch()) << mode;
  EXPECT_EQ(c.replica(0, 2)->epoch(), got.learner->epoch()) << mode;
  // commits rest on its copies again: replies name replica 1 of shard 0 among the replicas a commit rests on
  // (ClientReply.stored, for a protocol that reports them)
  size_t rests = 0;
  for (const auto& [_, log] : c.txn_logs)
    for (const auto& e : log)
      for (const auto& st : e.stored()) rests += st.shard() == 0 && (st.replicas() >> 1 & 1u);
  if (find_protocol(mode).reports_copies) {
    EXPECT_GT(rests, 0u) << mode << ": no commit rests on its copy";
  }
  // where decisions declare the votes they counted (Janus, TAPIR): replica 0's name replica 1 among them, for
  // transactions it voted for after its restart, and some on the fast path (every replica's vote, no Accept or
  // Finalize round): the fast path is back
  const auto& voted = got.learner->executor().votes();
  const auto& accepted = c.replica(0, 0)->executor().acceptances();
  size_t counted = 0, fast = 0;
  for (const auto& [t, q] : c.replica(0, 0)->executor().quorums()) {
    if (!voted.count(t) || std::find(q.begin(), q.end(), 1u) == q.end()) continue;
    ++counted;
    fast += q.size() == c.d.replicas && !accepted.count(t);
  }
  if (!c.replica(0, 0)->executor().quorums().empty()) {
    EXPECT_GT(voted.size(), 0u) << mode;
    EXPECT_GT(counted, 0u) << mode << ": no decision counted the restarted replica's vote";
    EXPECT_GT(fast, 0u) << mode << ": the fast path never came back (" << counted << " decisions counted its vote)";
  }
  EXPECT_TRUE(got.learner->idle()) << mode;
  expect_same_history(*c.replica(0, c.d.node(got.source).replica), *c.replica(0, 1), mode);
  EXPECT_EQ(test::count_records(c).given_up, 0u) << mode;
  test::check_history(c);
}

// Two followers of one shard restarted one after the other: the second seals the first, which votes already (its
// Voter writes the record, Voter::seal) and moves to the second's epoch, so both vote again, in one epoch, and the
// run checks. (A voting learner that could not seal left the second sealing forever, its votes never counted.)
TEST_P(RestartSim, TwoFollowersRestartedInTurnBothVoteAgain) {
  const std::string mode = GetParam();
  if (!find_protocol(mode).make_voter) GTEST_SKIP() << mode << " has no Voter: a restarted replica of it votes nothing";
  Deployment d = small(mode);
  d.client.duration_s = 5;
  test::SimCluster c(d, test::sim_options(11, 0), true);
  Restarted first, second;
  c.net->start();
  c.net->run_until(1000 * kMs);
  c.net->replace(c.d.replica_id(0, 1), std::make_unique<Down>());
  c.net->run_until(1500 * kMs);
  c.net->replace(c.d.replica_id(0, 1), restarted(c, 1, &first, true));
  c.net->run_until(2500 * kMs);
  ASSERT_TRUE(first.learner->voting()) << mode;
  const uint64_t e1 = first.learner->epoch();
  c.net->replace(c.d.replica_id(0, 2), std::make_unique<Down>());
  c.net->run_until(3000 * kMs);
  c.net->replace(c.d.replica_id(0, 2), restarted(c, 2, &second, true));
  EXPECT_TRUE(c.net->run_until([&] { return c.clients_finished(); }, 120'000'000)) << mode;
  c.net->run_until(c.net->now() + 3'000'000);
  ASSERT_TRUE(second.learner->voting()) << mode << ": the second restarted follower never voted";
  EXPECT_TRUE(first.learner->voting()) << mode;
  EXPECT_GT(second.learner->epoch(), e1) << mode;
  EXPECT_EQ(first.learner->epoch(), second.learner->epoch()) << mode;
  EXPECT_EQ(c.replica(0, 0)->epoch(), second.learner->epoch()) << mode;
  EXPECT_EQ(second.learner->counters().at("rejoin_seals"), 1) << mode;
  EXPECT_LE(c.served(0, 0)->counters().at("seals_served"), 6) << mode << ": sealed over and over";
  EXPECT_GT(second.learner->counters().at("voter_messages"), 0) << mode;
  EXPECT_EQ(test::count_records(c).given_up, 0u) << mode;
  test::check_history(c);
}

// Of the replicas that answer its Join within kChooseUs of the first, it follows the one of the lowest index (only
// f2 answers here). Its source goes silent while it follows: it asks every other replica again, and of the answers
// takes replica 0's at once (the lowest index: nothing lower can come), ignoring what the old source or an earlier
// attempt still sends.
TEST(Recovery, ARestartedReplicaWhoseSourceGoesSilentFollowsAnother) {
  Deployment d = test::small_deployment("janus", "append");
  auto w = make_workload(d);
  const NodeId lead = d.replica_id(0, 0), f1 = d.replica_id(0, 1), f2 = d.replica_id(0, 2);
  // two live replicas, each with some history of its own
  CatchUpServer a(find_protocol("janus").make_replica(d, lead, *w));
  CatchUpServer b(find_protocol("janus").make_replica(d, f2, *w));
  Learner l(d, f1, *w);
  HandEnv env;
  l.start(env);
  // `server` (node `id`) answers the Join `join` of the learner: the Part it sends, as the learner receives it
  auto answer = [&](CatchUpServer& server, NodeId id, Envelope join) {
    env.sent.clear();
    Envelope j = from_node(f1, join);
    server.on_message(env, j);
    EXPECT_EQ(env.sent.size(), 1u);
    Envelope part = from_node(id, env.sent.back().second);
    env.sent.clear();
    return part;
  };
  ASSERT_EQ(env.sent.size(), 2u);   // a Join to each other replica of its shard
  EXPECT_EQ(env.sent[0].first, lead);
  EXPECT_EQ(env.sent[1].first, f2);
  Envelope snap = answer(b, f2, env.sent[1].second);
  l.on_message(env, snap);
  EXPECT_FALSE(l.caught_up());   // replica 0 may still answer
  env.t = Learner::kChooseUs - 1;
  l.on_timer(env, Learner::kTimer);
  EXPECT_FALSE(l.caught_up());
  env.t = Learner::kChooseUs;
  env.sent.clear();
  l.on_timer(env, Learner::kTimer);
  EXPECT_TRUE(l.caught_up());
  EXPECT_EQ(l.source(), f2);
  // silence: after kSilentUs it asks again (attempt 2), both replicas
  env.t = Learner::kChooseUs + Learner::kSilentUs;
  env.sent.clear();
  l.on_timer(env, Learner::kTimer);
  env.t += Learner::kTickUs;
  l.on_timer(env, Learner::kTimer);
  ASSERT_EQ(env.sent.size(), 2u);
  EXPECT_EQ(env.sent[0].second.recovery().join().attempt(), 2u);
  Envelope join2 = env.sent[0].second;
  env.sent.clear();
  // a late heartbeat of the old source (attempt 1) changes nothing
  Envelope beat;
  beat.set_from(f2);
  auto* bp = beat.mutable_recovery()->mutable_part();
  bp->set_attempt(1);
  bp->set_from(l.events());
  l.on_message(env, beat);
  EXPECT_EQ(l.counters().at("catch_up_stale_parts"), 1);
  Envelope snap2 = answer(a, lead, join2);
  l.on_message(env, snap2);
  EXPECT_FALSE(l.caught_up() && l.source() == lead);   // f2 may answer too: it waits kChooseUs, then takes lead's
  env.t += Learner::kChooseUs;
  l.on_timer(env, Learner::kTimer);
  EXPECT_EQ(l.source(), lead);
  EXPECT_EQ(l.counters().at("catch_up_sources"), 2);
  EXPECT_EQ(l.executor().store().digest(), a.executor().store().digest());
}

// A replica restarted a second time is another incarnation of the same node: its Joins are numbered from its start
// time, so the Parts its peers still forward to the incarnation before it (attempt 1, theirs) are stale, and a Part
// of its own attempt that comes before its sender's snapshot is not an offer (it died choosing an empty one, SIGSEGV,
// when both happened: tests/python/test_unannounced.py, a follower crashed and restarted twice).
TEST(Recovery, ASecondIncarnationTakesNoPartMeantForTheFirstAsAnOffer) {
  Deployment d = test::small_deployment("janus", "append");
  auto w = make_workload(d);
  const NodeId lead = d.replica_id(0, 0), f1 = d.replica_id(0, 1), f2 = d.replica_id(0, 2);
  CatchUpServer b(find_protocol("janus").make_replica(d, f2, *w));
  Learner l(d, f1, *w);
  HandEnv env;
  env.t = 7'000'000;   // started 7 s into the run
  l.start(env);
  ASSERT_EQ(env.sent.size(), 2u);
  const uint64_t attempt = env.sent[0].second.recovery().join().attempt();
  EXPECT_GT(attempt, 1u) << "numbered from its start, not from 0";
  Envelope join_b = from_node(f1, env.sent[1].second);
  env.sent.clear();
  for (uint64_t a : {uint64_t{1}, attempt}) {   // the first incarnation's stream, then one of its own attempt
    Envelope beat;
    beat.set_from(lead);
    auto* bp = beat.mutable_recovery()->mutable_part();
    bp->set_attempt(a);
    bp->set_from(40);
    l.on_message(env, beat);
  }
  EXPECT_EQ(l.counters().at("catch_up_stale_parts"), 2);
  b.on_message(env, join_b);
  ASSERT_EQ(env.sent.size(), 1u);
  Envelope snap = from_node(f2, env.sent.back().second);
  l.on_message(env, snap);
  EXPECT_FALSE(l.caught_up()) << "replica 0 has not offered a snapshot: it may still";
  env.t += Learner::kChooseUs;
  l.on_timer(env, Learner::kTimer);
  ASSERT_TRUE(l.caught_up());
  EXPECT_EQ(l.source(), f2);
  EXPECT_EQ(l.executor().store().digest(), b.executor().store().digest());
}

// A replica copies what it executes only while a restarted peer follows it (its executor's tap): not before the
// first Join, not after the last Leave, and not once its follower went silent; memory does not grow for a restart
// that never comes.
TEST(Recovery, AReplicaCopiesWhatItExecutesOnlyWhileFollowed) {
  Deployment d = test::small_deployment("janus", "append");
  auto w = make_workload(d);
  const NodeId lead = d.replica_id(0, 0), f = d.replica_id(0, 1);
  CatchUpServer s(find_protocol("janus").make_replica(d, lead, *w));
  HandEnv env;
  EXPECT_FALSE(s.executor().tapping());
  Envelope join;
  join.set_from(f);
  join.mutable_recovery()->mutable_join()->set_attempt(3);
  s.on_message(env, join);
  EXPECT_TRUE(s.executor().tapping());
  ASSERT_EQ(env.sent.size(), 1u);
  EXPECT_EQ(env.sent[0].first, f);
  const recovery::Part& p = env.sent[0].second.recovery().part();
  EXPECT_EQ(p.attempt(), 3u);
  EXPECT_TRUE(p.has_snapshot());
  EXPECT_EQ(p.from(), 0u);
  EXPECT_FALSE(p.snapshot().store().empty());
  Envelope leave;
  leave.set_from(f);
  leave.mutable_recovery()->mutable_leave()->set_attempt(2);   // an earlier attempt's: it still follows
  s.on_message(env, leave);
  EXPECT_TRUE(s.executor().tapping());
  leave.mutable_recovery()->mutable_leave()->set_attempt(3);
  s.on_message(env, leave);
  EXPECT_FALSE(s.executor().tapping());
  EXPECT_EQ(s.followers(), 0u);
  // a follower that goes silent is forgotten, and the tap closed
  s.on_message(env, join);
  EXPECT_EQ(s.followers(), 1u);
  env.t = CatchUpServer::kForgetUs;
  s.on_timer(env, CatchUpServer::kTimer);
  EXPECT_EQ(s.followers(), 0u);
  EXPECT_FALSE(s.executor().tapping());
}

// A snapshot that is not one of this shard's is refused and changes nothing.
TEST(Recovery, ASnapshotOfAnotherShardIsNotTakenOver) {
  Deployment d = test::small_deployment("dast", "append");
  auto w = make_workload(d);
  ShardExecutor a(*w, 0), b(*w, 1);
  recovery::Snapshot snap;
  ASSERT_TRUE(a.snapshot(&snap));
  EXPECT_FALSE(b.install(snap));
  ShardExecutor c(*w, 0);
  snap.set_store(snap.store().substr(0, snap.store().size() - 1));   // cut short: not a state
  EXPECT_FALSE(c.install(snap));
  EXPECT_EQ(c.store().digest(), w->load(0)->digest());
}

INSTANTIATE_TEST_SUITE_P(Registered, RestartSim, ::testing::ValuesIn(protocol_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace txn
