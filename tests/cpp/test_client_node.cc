#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "client/client_node.h"
#include "sim_cluster.h"

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
    (*t.mutable_pieces(0)->mutable_args())["r"].set_i(static_cast<int64_t>(rng()));   // which draw it was
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
    EXPECT_EQ(r.sent_us, r.start_us) << "a closed loop sends when it starts";
    EXPECT_EQ(r.txn_id >> 40, 5u);
  }
  EXPECT_FALSE(c.open_loop());
  EXPECT_EQ(c.open_loop_stats().arrivals, 0u);
  // client_index = slot + k * n_concurrent; node 5 is the second client of shard 0.
  EXPECT_EQ(w.seen[0].client_index, 3u);
  EXPECT_EQ(w.seen[2].client_index, 5u);
  EXPECT_EQ(w.seen[0].home_shard, 0u);
  Summary s = summarize(c.records(), 1, 0.1, 0.1);
  EXPECT_NEAR(s.throughput_tps, 3 * 80 / 0.8, 3 / 0.8 + 1e-9);
}

// A clock that moves on every read (as a real one does between two reads): a closed loop's start is the time it
// sends, read once, so its records' start_us and sent_us are one.
TEST(ClientNode, ClosedLoopStartIsItsSend) {
  struct TickingEnv : FakeEnv {
    TimeUs reads = 0;
    TimeUs mono_us() override { return FakeEnv::mono_us() + reads++; }
  };
  Deployment d = dep();
  FakeWorkload w;
  ClientNode c(d, 5, w, std::make_unique<FakeDriver>(10000, 1));
  TickingEnv env;
  c.start(env);
  env.run(c, 100000000);
  ASSERT_TRUE(c.finished());
  ASSERT_FALSE(c.records().empty());
  for (const auto& r : c.records()) EXPECT_EQ(r.sent_us, r.start_us);
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

// client.retry_backoff_ms: the k-th abort's retry waits uniform [0, min(max, base * 2^(k-1))]; 0 (the default, the
// artifact's) retries at once. The waits are the transaction's own draws: the same from the same seed.
namespace {
class TimedDriver : public FakeDriver {
 public:
  using FakeDriver::FakeDriver;
  std::vector<TimeUs> at;   // when each attempt was submitted
  void submit(Env& env, const TxnRequest& txn, uint32_t attempt) override {
    at.push_back(env.now_us());
    FakeDriver::submit(env, txn, attempt);
  }
};

std::vector<TimeUs> retry_gaps(double base_ms, double max_ms, uint64_t seed = 1) {
  Deployment d = make_local_deployment("dast", 1, 1, 2);
  d.client.n_concurrent = 1;
  d.client.duration_s = 0.001;   // one transaction
  d.client.retry_limit = 8;
  d.client.retry_backoff_ms = base_ms;
  d.client.retry_backoff_max_ms = max_ms;
  d.seed = seed;
  FakeWorkload w;
  auto drv = std::make_unique<TimedDriver>(1000, 6);   // 1 ms per attempt, six aborts, then a commit
  TimedDriver* f = drv.get();
  ClientNode c(d, 4, w, std::move(drv));
  FakeEnv env;
  c.start(env);
  env.run(c, 100'000'000);
  EXPECT_TRUE(c.finished());
  EXPECT_EQ(c.records().size(), 1u);
  EXPECT_TRUE(c.records()[0].committed);
  std::vector<TimeUs> gaps;   // between an attempt's end (1 ms after its submit) and the next submit
  for (size_t i = 1; i < f->at.size(); ++i) gaps.push_back(f->at[i] - f->at[i - 1] - 1000);
  return gaps;
}
}  // namespace

TEST(ClientNode, AbortedAttemptsRetryAtOnceOrAfterARandomizedExponentialBackoff) {
  EXPECT_EQ(retry_gaps(0, 1000), std::vector<TimeUs>(6, 0)) << "the artifact's: at once";
  const auto gaps = retry_gaps(10, 50);
  ASSERT_EQ(gaps.size(), 6u);
  for (size_t k = 1; k <= gaps.size(); ++k) {
    const double upper_us = std::min(50.0, 10.0 * std::ldexp(1.0, static_cast<int>(k) - 1)) * 1000;
    EXPECT_GE(gaps[k - 1], 0);
    EXPECT_LE(gaps[k - 1], upper_us) << "after abort " << k;
  }
  EXPECT_GT(*std::max_element(gaps.begin(), gaps.end()), 10'000) << "the bound doubles";
  EXPECT_EQ(retry_gaps(10, 50), gaps) << "the same seed, the same waits";
  EXPECT_NE(retry_gaps(10, 50, 2), gaps) << "another seed, other waits";
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
  ASSERT_EQ(c.records().size(), 6u);  // 3 committed at 0.8 s, 3 abandoned at 1.5 s
  int abandoned = 0;
  for (const auto& r : c.records()) {
    EXPECT_NE(r.committed, r.abandoned) << "abandoned at the drain, or committed before it";
    abandoned += r.abandoned;
  }
  EXPECT_EQ(abandoned, 3);
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
    EXPECT_EQ(e.abandoned(), !r.committed) << "the retried ones were still running at the drain deadline";
    EXPECT_EQ(r.abandoned, !r.committed);
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
    ClientNode c(d, 4, w, std::make_unique<FakeDriver>(400000, 1));  // as above: 3 commit, 3 are abandoned
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

// ---- open loop (client.rate_tps > 0; docs/workloads.md) ----------------------------------------------------------

namespace {

Deployment open_dep(double rate_tps, uint32_t slots, double duration_s) {
  Deployment d = dep();
  d.client.rate_tps = rate_tps;
  d.client.n_concurrent = slots;
  d.client.duration_s = duration_s;
  d.client.warmup_s = 0;
  d.client.cooldown_s = 0;
  d.client.drain_timeout_s = 1000;
  d.client.retry_limit = 4;
  return d;
}

// What every open-loop run owes: every arrival is a record, shed or unsent, in the window as in the run; a slot
// (a session) runs one transaction at a time, sent no earlier than it arrived and after the slot's last one ended,
// its transactions in the order of their arrivals; latency counts from the arrival (with service_us >= 0: a
// committed one's is its wait plus its attempts' service).
void expect_open_loop_books_balance(const ClientNode& c, uint32_t slots, TimeUs service_us) {
  const auto& st = c.open_loop_stats();
  EXPECT_EQ(st.arrivals, c.records().size() + st.shed + st.unsent);
  std::map<uint32_t, TimeUs> slot_free;   // session -> when its last transaction ended
  std::map<uint32_t, TimeUs> slot_start;  // session -> the intended start of its last transaction
  for (const auto& r : c.records()) {
    EXPECT_GE(r.sent_us, r.start_us) << "txn " << r.txn_id << " sent before it arrived";
    EXPECT_LT(r.session, slots);
    EXPECT_GT(r.latency_us, r.sent_us - r.start_us);
    if (r.committed && service_us >= 0) {
      EXPECT_EQ(r.latency_us, r.sent_us - r.start_us + TimeUs(r.attempts) * service_us);
    }
    if (slot_free.count(r.session)) {
      EXPECT_GE(r.sent_us, slot_free[r.session]) << "session " << r.session << " ran two transactions at once";
      EXPECT_GE(r.start_us, slot_start[r.session]) << "session " << r.session << " out of arrival order";
    }
    slot_free[r.session] = r.start_us + r.latency_us;
    slot_start[r.session] = r.start_us;
  }
}

// An open-loop client (node `self`) over a FakeDriver answering each attempt after service_us and aborting the first
// `aborts` attempts of every transaction: start() it, then finish() runs the simulated time to its end.
struct OpenRun {
  FakeWorkload w;
  FakeEnv env;
  FakeDriver* f;
  ClientNode c;
  OpenRun(const Deployment& d, TimeUs service_us, int aborts = 0, NodeId self = 4)
      : c(d, self, w, driver(service_us, aborts)) {}
  std::unique_ptr<FakeDriver> driver(TimeUs service_us, int aborts) {
    auto drv = std::make_unique<FakeDriver>(service_us, aborts);
    f = drv.get();
    return drv;
  }
  void start() { c.start(env); }
  void finish() { env.run(c, TimeUs(1e12)); }
  void to_end() {
    start();
    finish();
  }
};

}  // namespace

// Poisson arrivals at the configured rate: over 200 virtual seconds at 500 txn/s (100,000 arrivals, sd 316) the
// count is within 1.5 %, the mean gap within 2 % of 2 ms, and the gaps are exponential: a share e^-1 of them
// longer than the mean, their coefficient of variation 1. Fast service: nothing waits, each is sent on arrival.
TEST(ClientNode, OpenLoopArrivalsArePoissonAtTheRate) {
  const double rate = 500, secs = 200;
  Deployment d = open_dep(rate, 4, secs);
  OpenRun run(d, 100, 0, 5);   // 0.1 ms per txn
  FakeDriver* f = run.f;
  ClientNode& c = run.c;
  run.start();
  EXPECT_EQ(f->outstanding, 0) << "an open loop waits for its first arrival";
  run.finish();
  ASSERT_TRUE(c.finished());
  const auto& st = c.open_loop_stats();
  const double expect = rate * secs;
  EXPECT_NEAR(double(st.arrivals), expect, 0.015 * expect);
  EXPECT_EQ(st.shed, 0u);
  EXPECT_EQ(st.unsent, 0u);
  EXPECT_EQ(st.arrivals_window, st.arrivals);   // warm-up and cool-down 0: the whole run is the window
  ASSERT_EQ(c.records().size(), st.arrivals);
  std::vector<double> gaps;
  TimeUs prev = 0;
  for (const auto& r : c.records()) {
    EXPECT_EQ(r.sent_us, r.start_us) << "a free slot takes an arrival at once";
    EXPECT_EQ(r.latency_us, 100);
    EXPECT_LT(r.start_us, TimeUs(secs * 1e6)) << "arrivals stop at the duration";
    gaps.push_back(double(r.start_us - prev));
    prev = r.start_us;
  }
  double mean = 0, var = 0;
  for (double g : gaps) mean += g;
  mean /= gaps.size();
  for (double g : gaps) var += (g - mean) * (g - mean);
  var /= gaps.size();
  EXPECT_NEAR(mean, 1e6 / rate, 0.02 * 1e6 / rate);
  EXPECT_NEAR(std::sqrt(var) / mean, 1.0, 0.03);
  const double longer = double(std::count_if(gaps.begin(), gaps.end(), [&](double g) { return g > mean; }));
  EXPECT_NEAR(longer / gaps.size(), std::exp(-1.0), 0.01);
  EXPECT_EQ(st.max_queued, 0u);
  EXPECT_EQ(c.records().front().session, 0u) << "a quiet client runs its arrivals on its first slot";
  expect_open_loop_books_balance(c, 4, 100);
  // The same seed, the same arrivals.
  Deployment d2 = open_dep(rate, 4, 2);
  ClientNode a(d2, 5, run.w, std::make_unique<FakeDriver>(100, 0));
  ClientNode b(d2, 5, run.w, std::make_unique<FakeDriver>(100, 0));
  FakeEnv ea, eb;
  a.start(ea);
  b.start(eb);
  ea.run(a, TimeUs(1e12));
  eb.run(b, TimeUs(1e12));
  ASSERT_EQ(a.records().size(), b.records().size());
  for (size_t i = 0; i < a.records().size(); ++i) EXPECT_EQ(a.records()[i].start_us, b.records()[i].start_us);
}

// A slow server: 2 slots, 50 ms per transaction (40 txn/s at most) under 100 txn/s offered. Arrivals wait for a
// slot, and each one's latency counts its wait: start_us is its arrival, sent_us when a slot took it, latency to
// the answer from the arrival. Nothing sheds (the bound is far), so the queue grows through the run and drains
// after it: the last transactions waited seconds, which a closed loop would never have recorded.
// The same seed gives the same arrivals and the same transactions whatever the timing (docs/workloads.md): each
// transaction is drawn from a stream of its own, named by its slot and number there (closed loop) or by its
// arrival's number (open loop), the gaps from another, none from the node's rng. A fast server against a slow one
// that aborts every first attempt (and, open loop, sheds most arrivals): closed loop, every session's transactions
// are the same sequence; open loop, the same arrivals, and each arrival both ran is the same transaction.
TEST(ClientNode, TheSameSeedGivesTheSameTransactionsWhateverTheTiming) {
  for (bool open : {false, true}) {
    SCOPED_TRACE(open ? "open loop" : "closed loop");
    Deployment d = open ? open_dep(200, 2, 2) : dep();
    d.client.max_outstanding = 6;
    std::map<uint32_t, std::vector<int64_t>> per_session[2];
    std::map<TimeUs, int64_t> by_arrival[2];
    uint64_t arrivals[2] = {0, 0};
    for (int k = 0; k < 2; ++k) {
      FakeWorkload w;
      ClientNode c(d, 5, w, std::make_unique<FakeDriver>(k ? 30000 : 1000, k));
      std::map<uint64_t, int64_t> draw;
      c.set_txn_sink([&](const TxnLogEntry& e) { draw[e.txn().txn_id()] = e.txn().pieces(0).args().at("r").i(); });
      FakeEnv env;
      env.r.seed(7 + k);   // the node's own rng differs too: the client's draws must not come from it
      c.start(env);
      env.run(c, TimeUs(1e12));
      ASSERT_TRUE(c.finished());
      for (const auto& r : c.records()) {
        per_session[k][r.session].push_back(draw.at(r.txn_id));
        by_arrival[k][r.start_us] = draw.at(r.txn_id);
      }
      arrivals[k] = c.open_loop_stats().arrivals;
    }
    if (!open) {
      ASSERT_EQ(per_session[1].size(), 3u);
      for (const auto& [session, seq] : per_session[1]) {
        const auto& fast = per_session[0][session];
        ASSERT_LT(seq.size(), fast.size());
        EXPECT_TRUE(std::equal(seq.begin(), seq.end(), fast.begin())) << "session " << session;
      }
    } else {
      EXPECT_EQ(arrivals[0], arrivals[1]);
      EXPECT_EQ(by_arrival[0].size(), arrivals[0]) << "the fast server ran every arrival";
      EXPECT_LT(by_arrival[1].size(), by_arrival[0].size() / 2) << "the slow one shed most";
      for (const auto& [at, x] : by_arrival[1]) {
        ASSERT_TRUE(by_arrival[0].count(at)) << "an arrival at " << at << " us the fast run did not have";
        EXPECT_EQ(by_arrival[0][at], x) << "the arrival at " << at << " us";
      }
    }
  }
}

TEST(ClientNode, OpenLoopLatencyCountsTheWaitForACoordinator) {
  Deployment d = open_dep(100, 2, 5);
  OpenRun run(d, 50000);
  run.to_end();
  ClientNode& c = run.c;
  ASSERT_TRUE(c.finished());
  const auto& st = c.open_loop_stats();
  EXPECT_EQ(st.shed, 0u);
  EXPECT_EQ(st.unsent, 0u);
  EXPECT_EQ(c.records().size(), st.arrivals) << "every arrival ran, also those waiting at the stop (drained)";
  EXPECT_EQ(run.f->max_outstanding, 2) << "never more in flight than slots";
  EXPECT_GT(st.max_queued, 200u);
  size_t waited = 0;
  TimeUs worst = 0, prev_start = 0;
  for (const auto& r : c.records()) {
    EXPECT_TRUE(r.committed);
    EXPECT_EQ(r.latency_us, r.sent_us - r.start_us + 50000) << "latency from the arrival, its wait included";
    EXPECT_GE(r.start_us, prev_start) << "waiting arrivals are taken oldest first";
    prev_start = r.start_us;
    waited += r.sent_us > r.start_us;
    worst = std::max(worst, r.latency_us);
  }
  EXPECT_GT(waited, c.records().size() * 9 / 10);
  EXPECT_GT(worst, 5000000) << "the last arrivals waited for the whole backlog";
  // A record's end is the answer's time: the next transaction of its session was sent then, not before.
  expect_open_loop_books_balance(c, 2, 50000);
  // The summary's latency population is these, from their arrivals: the median is far above the service time.
  Summary s = summarize(c.records(), 5, 0, 0);
  EXPECT_GT(s.all.p50_ms, 1000);
}

// The bound: at most max_outstanding running or waiting; every arrival beyond it is shed and counted, in the
// window too. 1 slot, 1 s per transaction, 100 txn/s for 1 s, max_outstanding 3: the first arrival runs, the next
// two wait, all others are shed; the two waiting ones drain after the stop.
TEST(ClientNode, OpenLoopShedsArrivalsBeyondTheBound) {
  Deployment d = open_dep(100, 1, 1);
  d.client.max_outstanding = 3;
  d.client.warmup_s = 0.2;
  d.client.cooldown_s = 0.2;
  OpenRun run(d, 1000000);
  run.to_end();
  ClientNode& c = run.c;
  ASSERT_TRUE(c.finished());
  const auto& st = c.open_loop_stats();
  ASSERT_EQ(c.records().size(), 3u);
  EXPECT_GT(st.arrivals, 50u);   // Poisson, mean 100 (this seed draws 70): 5 sigma below
  EXPECT_EQ(st.shed, st.arrivals - 3);
  EXPECT_EQ(st.unsent, 0u);
  EXPECT_EQ(st.max_queued, 2u);
  EXPECT_EQ(run.f->max_outstanding, 1);
  // The window [0.2, 0.8) s: the three that ran arrived in its first 0.2 s (at 100/s), so every arrival in it was
  // shed.
  for (const auto& r : c.records()) EXPECT_LT(r.start_us, 200000);
  EXPECT_EQ(st.shed_window, st.arrivals_window);
  EXPECT_GT(st.arrivals_window, 25u);   // mean 60
  EXPECT_EQ(c.records()[1].sent_us, c.records()[0].start_us + c.records()[0].latency_us);
  expect_open_loop_books_balance(c, 1, 1000000);
}

// The drain timeout: what is running is abandoned, what still waits for a slot is unsent (counted, not recorded).
TEST(ClientNode, OpenLoopDrainTimeoutCountsTheArrivalsStillWaiting) {
  Deployment d = open_dep(100, 1, 1);
  d.client.max_outstanding = 4;
  d.client.drain_timeout_s = 0.5;
  OpenRun run(d, 1000000);
  run.to_end();
  ClientNode& c = run.c;
  ASSERT_TRUE(c.finished());
  const auto& st = c.open_loop_stats();
  // The first ends at ~1.01 s, the second is running at the 1.5 s deadline (abandoned), two were never sent.
  ASSERT_EQ(c.records().size(), 2u);
  EXPECT_TRUE(c.records()[0].committed);
  EXPECT_FALSE(c.records()[1].committed);
  EXPECT_TRUE(c.records()[1].abandoned);
  EXPECT_EQ(c.records()[1].start_us + c.records()[1].latency_us, 1500000) << "abandoned at the deadline";
  EXPECT_EQ(st.unsent, 2u);
  EXPECT_EQ(st.unsent_window, 2u);
  EXPECT_EQ(st.shed, st.arrivals - 4);
  expect_open_loop_books_balance(c, 1, 1000000);
  const std::string js = c.open_loop_json();
  EXPECT_NE(js.find("\"rate_tps\": 100,"), std::string::npos) << js;
  EXPECT_NE(js.find("\"unsent\": 2,"), std::string::npos) << js;
  EXPECT_NE(js.find("\"max_outstanding\": 4,"), std::string::npos) << js;
}

// Retries as in a closed loop: the same transaction under fresh ids on its slot, its latency from its arrival.
TEST(ClientNode, OpenLoopRetriesKeepTheArrivalAsStart) {
  Deployment d = open_dep(50, 1, 2);
  OpenRun run(d, 10000, 2);   // two aborts, then a commit: 30 ms per transaction
  run.to_end();
  ClientNode& c = run.c;
  ASSERT_TRUE(c.finished());
  ASSERT_FALSE(c.records().empty());
  for (const auto& r : c.records()) {
    EXPECT_TRUE(r.committed);
    EXPECT_EQ(r.attempts, 3u);
    EXPECT_EQ(r.latency_us, r.sent_us - r.start_us + 30000);
  }
  std::set<uint64_t> uniq(run.f->ids.begin(), run.f->ids.end());
  EXPECT_EQ(uniq.size(), run.f->ids.size());
  expect_open_loop_books_balance(c, 1, 10000);
}

// Every registered protocol under an open load on the simulated network: everything commits, the protocol-neutral
// checks pass (run_and_check: replicas agree, the history checker's orders, atomicity, serializability, replay),
// and each client's books balance with its sessions one transaction at a time, in arrival order.
TEST(ClientNode, OpenLoopUnderEveryProtocolInTheSimulator) {
  for (const std::string& mode : protocol_names()) {
    SCOPED_TRACE(mode);
    Deployment d = txn::test::small_deployment(mode, "tpcc");
    d.client.n_concurrent = 4;
    d.client.rate_tps = 15;   // per client: well under what 4 coordinators carry at 100 ms cross-region RTT
    txn::test::SimCluster c(d, {}, true);
    txn::test::run_and_check(c);
    uint64_t arrivals = 0;
    for (auto* cl : c.clients) {
      EXPECT_EQ(cl->open_loop_stats().shed, 0u);
      EXPECT_EQ(cl->open_loop_stats().unsent, 0u);
      arrivals += cl->open_loop_stats().arrivals;
      expect_open_loop_books_balance(*cl, 4, -1);
    }
    const double expect = 15.0 * 3 * c.clients.size();
    EXPECT_NEAR(double(arrivals), expect, 0.2 * expect);
  }
}
