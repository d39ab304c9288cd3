#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "client/client_node.h"

using namespace txn;

namespace {

// Virtual-time Env: a timer heap, no network.
class FakeEnv : public Env {
 public:
  TimeUs now = 0;
  std::multimap<std::pair<TimeUs, uint64_t>, uint64_t> timers;  // (at, seq) -> id
  uint64_t seq = 0;
  std::mt19937_64 r{1};
  TimeUs now_us() override { return now; }
  TimeUs mono_us() override { return now + 1000000; }  // offset: records must be relative
  void send(NodeId, Envelope) override {}
  void set_timer(uint64_t id, TimeUs delay) override { timers.insert({{now + delay, seq++}, id}); }
  std::mt19937_64& rng() override { return r; }
  NodeId self() const override { return 5; }
  void log(const std::string&) override {}
  // Run until no timers remain or `limit`.
  void run(Node& n, TimeUs limit) {
    while (!timers.empty() && timers.begin()->first.first <= limit) {
      auto it = timers.begin();
      now = it->first.first;
      uint64_t id = it->second;
      timers.erase(it);
      n.on_timer(*this, id);
    }
  }
};

class FakeWorkload : public Workload {
 public:
  std::vector<ClientContext> seen;
  std::string name() const override { return "fake"; }
  std::unique_ptr<ShardStore> load(uint32_t) const override { return nullptr; }
  TxnRequest generate(std::mt19937_64& rng, const ClientContext& ctx) const override {
    const_cast<FakeWorkload*>(this)->seen.push_back(ctx);
    TxnRequest t;
    t.set_type(rng() % 2);
    t.set_crt(t.type() == 1);
    t.set_home_shard(ctx.home_shard);
    for (uint32_t i = 0; i < 2; ++i) {
      Piece* p = t.add_pieces();
      p->set_id(i);
      p->set_proc(i == 1 ? 7 : 1);   // proc 7 commutes
    }
    return t;
  }
  bool commutes(const Piece& p) const override { return p.proc() == 7; }
  bool log_outputs() const override { return log; }
  bool log = false;   // keep the outputs in the transaction log (append does)
  void execute(ShardStore&, const Piece&, const Vars&, Vars*) const override {}
  std::string type_name(uint32_t t) const override { return "T" + std::to_string(t); }
  uint32_t n_types() const override { return 2; }
};

// Finishes each attempt after `delay_us`; aborts the first `aborts` attempts of every txn
// (or every attempt if aborts < 0).
class FakeDriver : public ClientDriver {
 public:
  TimeUs delay_us;
  int aborts;
  int outstanding = 0, max_outstanding = 0, submits = 0;
  std::map<uint64_t, uint32_t> pending;  // timer id -> attempt
  std::map<uint64_t, uint64_t> txn_of;   // timer id -> txn id
  std::vector<uint64_t> ids;
  FakeDriver(TimeUs d, int a) : delay_us(d), aborts(a) {}
  void submit(Env& env, const TxnRequest& txn, uint32_t attempt) override {
    ++submits;
    max_outstanding = std::max(max_outstanding, ++outstanding);
    uint64_t tid = 1000 + submits;  // small ids: routed here by ClientNode
    pending[tid] = attempt;
    txn_of[tid] = txn.txn_id();
    ids.push_back(txn.txn_id());
    env.set_timer(tid, delay_us);
  }
  void on_message(Env&, Envelope&) override {}
  void on_timer(Env& env, uint64_t id) override {
    --outstanding;
    bool ok = aborts >= 0 && pending[id] > uint32_t(aborts);
    Vars out;
    out["x"].set_i(static_cast<int64_t>(txn_of[id]));
    done_(env, {txn_of[id], ok, &out});
  }
};

Deployment dep() {
  Deployment d = make_local_deployment("dast", 1, 1, 2);  // clients are node ids 4 and 5 (both shard 0)
  d.client.n_concurrent = 3;
  d.client.duration_s = 1;
  d.client.warmup_s = 0.1;
  d.client.cooldown_s = 0.1;
  d.client.drain_timeout_s = 1;
  d.client.retry_limit = 4;
  return d;
}

}  // namespace

TEST(ClientNode, ClosedLoopStopsAtDuration) {
  Deployment d = dep();
  FakeWorkload w;
  auto drv = std::make_unique<FakeDriver>(10000, 0);  // 10 ms per txn, always commits
  FakeDriver* f = drv.get();
  ClientNode c(d, 5, w, std::move(drv));
  FakeEnv env;
  c.start(env);
  EXPECT_EQ(f->outstanding, 3);
  env.run(c, 100000000);
  EXPECT_TRUE(c.finished());
  EXPECT_EQ(f->max_outstanding, 3);
  // 3 slots x 100 txns in 1 s (the 100th of each starts at 990 ms and finishes at 1 s).
  EXPECT_EQ(c.records().size(), 300u);
  for (const auto& r : c.records()) {
    EXPECT_TRUE(r.committed);
    EXPECT_EQ(r.latency_us, 10000);
    EXPECT_EQ(r.attempts, 1u);
    EXPECT_LT(r.start_us, 1000000);
    EXPECT_EQ(r.txn_id >> 40, 5u);
  }
  // client_index = slot + k * n_concurrent; node 5 is the second client of shard 0.
  EXPECT_EQ(w.seen[0].client_index, 3u);
  EXPECT_EQ(w.seen[2].client_index, 5u);
  EXPECT_EQ(w.seen[0].home_shard, 0u);
  Summary s = summarize(c.records(), 1, 0.1, 0.1);
  EXPECT_NEAR(s.throughput_tps, 3 * 80 / 0.8, 3 / 0.8 + 1e-9);
}

TEST(ClientNode, RetriesWithFreshIdsThenGivesUp) {
  Deployment d = dep();
  d.client.duration_s = 0.05;
  d.client.warmup_s = 0;
  d.client.cooldown_s = 0;
  FakeWorkload w;
  auto drv = std::make_unique<FakeDriver>(10000, -1);  // always aborts
  FakeDriver* f = drv.get();
  ClientNode c(d, 5, w, std::move(drv));
  FakeEnv env;
  c.start(env);
  env.run(c, 100000000);
  EXPECT_TRUE(c.finished());
  ASSERT_EQ(c.records().size(), 3u * 2);  // 40 ms per txn (4 attempts): 2 per slot in 50 ms
  for (const auto& r : c.records()) {
    EXPECT_FALSE(r.committed);
    EXPECT_EQ(r.attempts, 4u);
    EXPECT_EQ(r.latency_us, 40000);
  }
  std::set<uint64_t> uniq(f->ids.begin(), f->ids.end());
  EXPECT_EQ(uniq.size(), f->ids.size());  // every attempt has a fresh txn id
}

TEST(ClientNode, AbortThenCommit) {
  Deployment d = dep();
  FakeWorkload w;
  ClientNode c(d, 4, w, std::make_unique<FakeDriver>(10000, 2));
  FakeEnv env;
  c.start(env);
  env.run(c, 100000000);
  ASSERT_FALSE(c.records().empty());
  for (const auto& r : c.records()) {
    EXPECT_TRUE(r.committed);
    EXPECT_EQ(r.attempts, 3u);
  }
}

TEST(ClientNode, DrainTimeoutGivesUpOutstanding) {
  Deployment d = dep();
  d.client.drain_timeout_s = 0.5;
  FakeWorkload w;
  ClientNode c(d, 4, w, std::make_unique<FakeDriver>(800000, 0));  // 0.8 s per txn
  FakeEnv env;
  c.start(env);
  env.run(c, 1400000);  // stop at 1 s, drain deadline at 1.5 s
  EXPECT_FALSE(c.finished());
  env.run(c, 1500000);
  EXPECT_TRUE(c.finished());
  ASSERT_EQ(c.records().size(), 6u);  // 3 committed at 0.8 s, 3 given up at 1.5 s
  int given_up = 0;
  for (const auto& r : c.records()) given_up += !r.committed;
  EXPECT_EQ(given_up, 3);
}

TEST(ClientNode, LogsEveryFinishedTransactionForTheChecker) {
  Deployment d = dep();
  d.client.drain_timeout_s = 0.5;
  FakeWorkload w;
  ClientNode c(d, 4, w, std::make_unique<FakeDriver>(400000, 1));  // 0.4 s per attempt, the first aborts
  std::vector<TxnLogEntry> log;
  c.set_txn_sink([&](const TxnLogEntry& e) { log.push_back(e); });
  FakeEnv env;
  c.start(env);
  env.run(c, 1500000);   // 3 commit at 0.8 s; 3 more retried at 1.2 s, still running at the 1.5 s drain deadline
  ASSERT_TRUE(c.finished());
  ASSERT_EQ(log.size(), c.records().size());
  ASSERT_EQ(log.size(), 6u);
  for (size_t i = 0; i < log.size(); ++i) {
    const TxnLogEntry& e = log[i];
    const TxnRecord& r = c.records()[i];
    EXPECT_EQ(e.txn().txn_id(), r.txn_id);
    EXPECT_EQ(e.committed(), r.committed);
    ASSERT_EQ(e.failed_attempts_size(), 1) << "the first attempt aborted";
    EXPECT_NE(e.failed_attempts(0), r.txn_id);
    EXPECT_EQ(e.failed_attempts(0) >> 40, 4u);
    ASSERT_EQ(e.commutative_size(), 1);
    EXPECT_EQ(e.commutative(0), 1u);
    EXPECT_EQ(e.txn().pieces_size(), 2);
    if (r.committed) {
      Vars out;
      out["x"].set_i(static_cast<int64_t>(r.txn_id));
      EXPECT_EQ(r.outputs, outputs_digest(out));
    } else {
      EXPECT_EQ(r.outputs, "") << "a given-up transaction received no outputs";
    }
  }
  EXPECT_EQ(std::count_if(log.begin(), log.end(), [](const TxnLogEntry& e) { return e.committed(); }), 3);
}

// Workload::log_outputs (append): each committed transaction's log entry carries the outputs its client
// received; a given-up one, or any under a workload that does not ask, carries none. txn-replay --dump prints
// them as protobuf JSON, a string Value as {"s": ...}, whatever the string.
TEST(ClientNode, LogsOutputsOnlyWhenTheWorkloadAsksAndTheTransactionCommitted) {
  for (bool ask : {false, true}) {
    Deployment d = dep();
    d.client.drain_timeout_s = 0.5;
    FakeWorkload w;
    w.log = ask;
    ClientNode c(d, 4, w, std::make_unique<FakeDriver>(400000, 1));  // as above: 3 commit, 3 are given up
    std::vector<TxnLogEntry> log;
    c.set_txn_sink([&](const TxnLogEntry& e) { log.push_back(e); });
    FakeEnv env;
    c.start(env);
    env.run(c, 1500000);
    ASSERT_TRUE(c.finished());
    ASSERT_EQ(log.size(), 6u);
    int with_outputs = 0;
    for (const TxnLogEntry& e : log) {
      if (!ask || !e.committed()) {
        EXPECT_EQ(e.outputs_size(), 0) << "ask " << ask << " committed " << e.committed();
        continue;
      }
      ++with_outputs;
      ASSERT_EQ(e.outputs_size(), 1);
      EXPECT_EQ(e.outputs().at("x").i(), static_cast<int64_t>(e.txn().txn_id()));
    }
    EXPECT_EQ(with_outputs, ask ? 3 : 0);
  }
  TxnLogEntry e;
  e.set_committed(true);
  (*e.mutable_outputs())["r0_0"].set_s("0");
  (*e.mutable_outputs())["r1_2"].set_s("2:5,7");
  google::protobuf::util::JsonPrintOptions opt;   // txn-replay --dump's
  opt.preserve_proto_field_names = true;
  std::string json;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(e, &json, opt).ok());
  EXPECT_NE(json.find("\"outputs\":{"), std::string::npos) << json;
  EXPECT_NE(json.find("\"r0_0\":{\"s\":\"0\"}"), std::string::npos) << json;
  EXPECT_NE(json.find("\"r1_2\":{\"s\":\"2:5,7\"}"), std::string::npos) << json;
  TxnLogEntry back;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &back).ok());
  EXPECT_EQ(back.outputs().at("r0_0").s(), "0");
}
