// The shared piece executor and its execution history (core/executor.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/executor.h"
#include "sim_cluster.h"
#include "workload/store.h"

using namespace txn;

namespace {

Deployment tpca(uint32_t regions = 1, uint32_t shards = 2) {
  Deployment d;
  d.regions = regions;
  d.shards_per_region = shards;
  d.workload.name = "tpca";
  d.workload.scale = 0.01;
  return d;
}

// A TPC-A update of `key` (which must live on shard key % P) by `delta`.
Piece update(uint32_t id, uint32_t shard, int64_t key, int64_t delta) {
  Piece p;
  p.set_id(id);
  p.set_shard(shard);
  p.set_proc(1);
  (*p.mutable_args())["table"] = wl::int_value(0);
  (*p.mutable_args())["key"] = wl::int_value(key);
  (*p.mutable_args())["delta"] = wl::int_value(delta);
  p.add_outputs("customer_balance");
  return p;
}

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

}  // namespace

TEST(Executor, RecordsEveryPieceInExecutionOrder) {
  Deployment d = tpca();
  auto w = make_workload(d);
  ShardExecutor ex(*w, 0);
  const std::string before = ex.store().digest();
  Vars out;
  ex.execute(7, update(0, 0, 0, 5), update(0, 0, 0, 5).args(), &out);
  EXPECT_EQ(out.at("customer_balance").i(), 1000005);
  ex.execute(7, update(2, 0, 2, 1), update(2, 0, 2, 1).args(), &out);
  ex.execute(9, update(1, 0, 4, -3), update(1, 0, 4, -3).args(), &out, /*deferred=*/true);
  ex.execute(7, update(3, 0, 6, 1), update(3, 0, 6, 1).args(), &out);
  EXPECT_NE(ex.store().digest(), before);
  ASSERT_EQ(ex.history().size(), 4u);
  EXPECT_EQ(ex.history()[0].txn, 7u);
  EXPECT_EQ(ex.history()[1].piece, 2u);
  EXPECT_TRUE(ex.history()[2].deferred);
  EXPECT_FALSE(ex.history()[3].deferred);
}

// Evaluation (optimistic protocols' read phase): the pieces' outputs as
// executing them now would give, on a copy: the store, its digest and the
// history stay as they were; a piece lacking an input makes it refuse.
TEST(Executor, EvaluateComputesOutputsWithoutChangingTheStore) {
  Deployment d = tpca();
  auto w = make_workload(d);
  ShardExecutor ex(*w, 0);
  const std::string before = ex.store().digest();
  TxnRequest t;
  t.set_txn_id(3);
  *t.add_pieces() = update(0, 0, 0, 5);
  *t.add_pieces() = update(1, 1, 1, 7);  // another shard's piece: not evaluated here
  Vars vars;
  ASSERT_TRUE(ex.evaluate(t, &vars));
  EXPECT_EQ(vars.at("customer_balance").i(), 1000005);
  EXPECT_EQ(ex.store().digest(), before);
  EXPECT_TRUE(ex.history().empty());
  Vars out;  // executing it for real gives the same output
  ex.execute(3, t.pieces(0), t.pieces(0).args(), &out);
  EXPECT_EQ(out.at("customer_balance").i(), 1000005);
  t.mutable_pieces(0)->add_inputs("from_elsewhere");
  Vars none;
  EXPECT_FALSE(ex.evaluate(t, &none));
  EXPECT_TRUE(none.empty());
}

TEST(Executor, RejectedPieceIsRecordedAndRethrown) {
  Deployment d = tpca();
  auto w = make_workload(d);
  ShardExecutor ex(*w, 0);
  Piece bad = update(0, 0, 1, 5);   // key 1 lives on shard 1
  Vars out;
  EXPECT_THROW(ex.execute(3, bad, bad.args(), &out), BadMessage);
  ASSERT_EQ(ex.history().size(), 1u) << "a rejection is deterministic: the replay rejects it too";
  EXPECT_EQ(ex.history()[0].txn, 3u);
}

TEST(Executor, HistoryFileGroupsRunsAndCountsForTruncation) {
  Deployment d = tpca(1, 1);
  auto w = make_workload(d);
  ShardExecutor ex(*w, 0);
  Vars out;
  auto run = [&](uint64_t txn, uint32_t piece, bool deferred = false) {
    Piece p = update(piece, 0, 0, 1);
    ex.execute(txn, p, p.args(), &out, deferred);
  };
  for (uint32_t p : {0, 1, 2, 5}) run(11, p);   // one line: 0-2,5
  run(12, 3);
  run(12, 1);                                      // not ascending: kept as executed
  run(11, 4, true);                                // deferred: its own line
  run(13, 0);
  run(13, 1);
  std::ostringstream o;
  EXPECT_EQ(ex.write_history(o, "s0.0.1"), 4u);
  EXPECT_EQ(lines(o.str()), (std::vector<std::string>{"# txn-history v1 node=s0.0.1 shard=0", "11 0-2,5",
                                                       "12 3,1", "11 4 d", "13 0-1",
                                                       "# end events=9 lines=4"}));
  std::ostringstream empty;
  ShardExecutor(*w, 0).write_history(empty, "x");
  EXPECT_EQ(lines(empty.str()).back(), "# end events=0 lines=0");
}

TEST(Executor, HistoryLinesCarryTheOrderKeyAndSplitWhereItChanges) {
  Deployment d = tpca(1, 1);
  auto w = make_workload(d);
  ShardExecutor ex(*w, 0);
  Vars out;
  auto run = [&](uint64_t txn, uint32_t piece, const OrderKey& key, bool deferred = false) {
    Piece p = update(piece, 0, 0, 1);
    ex.execute(txn, p, p.args(), &out, deferred, key);
  };
  const OrderKey a = order_key(0, 1732600000123456, 4294967297), b = order_key(0, 1732600000123456, 4294967298);
  run(21, 0, a);
  run(21, 1, a);                     // same key: one line
  run(21, 2, b);                     // another key: its own line
  run(22, 0, order_key(18446744073709551615ull, 7, 0));
  run(22, 1, {});                    // unset: no suffix
  run(23, 0, order_key(2, 5, 1), true);
  run(23, 1, order_key(2, 5, 1), true);
  EXPECT_EQ(ex.history()[2].key, b);
  EXPECT_FALSE(ex.history()[4].key.set);
  std::ostringstream o;
  EXPECT_EQ(ex.write_history(o, "s0.0.0"), 5u);
  EXPECT_EQ(lines(o.str()),
            (std::vector<std::string>{"# txn-history v1 node=s0.0.0 shard=0", "21 0-1 k=0:1732600000123456.4294967297",
                                      "21 2 k=0:1732600000123456.4294967298", "22 0 k=18446744073709551615:7.0",
                                      "22 1", "23 0-1 d k=2:5.1", "# end events=7 lines=5"}));
}

TEST(Executor, DeclaredDependenciesAreWrittenOnceOnTheTransactionsFirstLine) {
  Deployment d = tpca(1, 1);
  auto w = make_workload(d);
  ShardExecutor ex(*w, 0);
  Vars out;
  auto run = [&](uint64_t txn, uint32_t piece, const OrderKey& key = {}) {
    Piece p = update(piece, 0, 0, 1);
    ex.execute(txn, p, p.args(), &out, false, key);
  };
  ex.declare_deps(31, {9, 4, 9});
  ex.declare_deps(31, {5});           // the first declaration stands
  ex.declare_vote(31, {9, 4});
  ex.declare_vote(31, {7});           // likewise the first vote
  ex.declare_vote(33, {2});           // a vote without declared dependencies
  ex.declare_vote(33, {}, true, 1);   // the same vote cast again in epoch 1: the history names both epochs
  const std::vector<uint32_t> accepted{0, 1};
  ex.declare_quorum(31, {2, 0}, &accepted);   // decided on replicas 0 and 2's votes, accepted by 0 and 1
  ex.declare_quorum(31, {0, 1, 2}, nullptr);  // the first decision stands
  run(31, 0, order_key(1, 2, 3));
  run(31, 1);                         // the key changes: a second line, without the dependencies
  ex.declare_deps(32, {});
  run(32, 0);
  ex.declare_vote(34, {31});          // voted with 3 pieces executed here
  run(33, 0);                         // none declared: no suffix
  run(31, 2);                         // the transaction again, later: written once only
  ex.declare_vote(35, {31}, false, 2);   // a vote without the mark (TAPIR's), in epoch 2, then again in 3
  ex.declare_vote(35, {}, false, 3);
  ex.declare_vote(35, {}, false, 3);
  run(35, 0);
  EXPECT_EQ(ex.deps().at(31), (std::vector<uint64_t>{4, 9}));
  EXPECT_EQ(ex.votes().at(31), (std::vector<uint64_t>{4, 9}));
  std::ostringstream o;
  EXPECT_EQ(ex.write_history(o, "s0.0.0"), 6u);
  EXPECT_EQ(lines(o.str()), (std::vector<std::string>{"# txn-history v1 node=s0.0.0 shard=0",
                                                      "31 0 k=1:2.3 q=0,2 a=0,1 v=0/4,9 p=4,9", "31 1", "32 0 p=",
                                                      "33 0 v=0/2 e=0,1", "31 2", "35 0 v=31 e=2,3",
                                                      "# end events=6 lines=6"}));
  EXPECT_EQ(ex.vote_marks().at(34), 3u);
  EXPECT_FALSE(ex.vote_marks().count(35));
  EXPECT_EQ(ex.quorums().at(31), (std::vector<uint64_t>{0, 2}));
}

// The engine streams a replica's history to its file as it grows (HistoryFile): only the last kKeepEvents or so stay
// in memory, the file ends as the history written at once would (the same lines, each transaction's declarations on
// its first line), a declaration that comes after its transaction's line went out has a line of its own, and so has
// one of a transaction that never executed here, once long enough ago (which of the two it is the file cannot know;
// the checker drops the second kind, as write_history never writes it), and a snapshot reads the written events back.
TEST(Executor, AStreamedHistoryIsTheHistoryWrittenAtOnceInBoundedMemory) {
  Deployment d = tpca();
  auto w = make_workload(d);
  ShardExecutor all(*w, 0), streamed(*w, 0);
  const std::string path = ::testing::TempDir() + "/streamed.history.txt";
  ASSERT_TRUE(streamed.stream_to(std::make_shared<HistoryFile>(path, "s0.0.0")));
  const uint64_t n = 5 * ShardExecutor::kKeepEvents + 17;
  size_t most = 0;
  Vars out;
  for (uint64_t t = 1; t <= n; ++t) {
    for (ShardExecutor* ex : {&all, &streamed}) {
      if (t % 3 == 0) ex->declare_deps(t, {t - 1, t - 2});
      if (t % 5 == 0) ex->declare_vote(t, {t - 1}, true, t % 10 == 0 ? 2 : 0);
      if (t % 7 == 0) ex->declare_vote(n + t, {t});   // an attempt that never executes here
      const Piece p = update(static_cast<uint32_t>(t % 2), 0, static_cast<int64_t>(2 * (t % 50)), 1);
      ex->execute(t, p, p.args(), &out, t % 11 == 0, t % 13 == 0 ? order_key(1, t, 0) : OrderKey{});
    }
    most = std::max(most, streamed.history().size());
  }
  all.declare_quorum(3, {0, 2}, nullptr);   // late: its transaction's line went out long ago
  streamed.declare_quorum(3, {0, 2}, nullptr);
  EXPECT_LE(most, 2 * ShardExecutor::kKeepEvents) << "the history in memory is bounded";
  EXPECT_EQ(streamed.events(), n);
  // a snapshot of either, taken over by a fresh executor, is the same history (the streamed one's first events as
  // its file's lines, its own votes and decisions left out)
  recovery::Snapshot a, b;
  ASSERT_TRUE(all.snapshot(&a));
  ASSERT_TRUE(streamed.snapshot(&b));
  EXPECT_EQ(a.written_events(), 0u);
  EXPECT_GE(b.written_events(), n - 2 * ShardExecutor::kKeepEvents);
  EXPECT_LE(static_cast<size_t>(b.history_size()), 2 * ShardExecutor::kKeepEvents);
  EXPECT_LT(b.ByteSizeLong(), 2 * ShardExecutor::kKeepEvents * 64) << "the snapshot is bounded: its written events "
                                                                       "are fetched a chunk at a time";
  ShardExecutor from_a(*w, 0), from_b(*w, 0);
  ASSERT_TRUE(from_a.install(a));
  EXPECT_TRUE(from_a.history_complete());
  ASSERT_TRUE(from_b.install(b));
  EXPECT_FALSE(from_b.history_complete());
  // the written events, fetched in chunks of about 4 KB (bytes the snapshot named: whole lines, the file's own
  // votes and declaration lines left out)
  uint64_t at = b.written_begin(), chunks = 0, fetched = 0;
  std::string text, all_text;
  while (at < b.written_end()) {
    uint64_t next = 0, events = 0;
    ASSERT_TRUE(streamed.read_written(at, b.written_end(), 4096, &text, &next, &events));
    ASSERT_GT(next, at);
    EXPECT_LE(text.size(), 4096u + 200u);
    ASSERT_TRUE(from_b.take_written(text, events));
    all_text += text;
    fetched += events;
    at = next;
    ++chunks;
  }
  EXPECT_GT(chunks, 10u);
  EXPECT_EQ(fetched, b.written_events());
  EXPECT_TRUE(from_b.history_complete());
  EXPECT_EQ(all_text.find(" v="), std::string::npos);
  EXPECT_NE(all_text.find(" p="), std::string::npos);
  // bytes that are not whole lines of the file, or past what it holds, are refused
  {
    uint64_t next = 0, events = 0;
    EXPECT_FALSE(streamed.read_written(b.written_begin() + 1, b.written_end(), 4096, &text, &next, &events));
    EXPECT_FALSE(streamed.read_written(b.written_begin(), b.written_end() + 1'000'000, 1 << 30, &text, &next, &events));
    EXPECT_FALSE(streamed.read_written(0, b.written_end(), 4096, &text, &next, &events));
  }
  ShardExecutor more(*w, 0);   // a chunk of more events than the snapshot named is refused
  ASSERT_TRUE(more.install(b));
  EXPECT_FALSE(more.take_written(all_text + all_text, 2 * b.written_events()));
  ASSERT_EQ(from_a.history().size(), n);
  ASSERT_EQ(from_b.history().size(), n);
  for (size_t i = 0; i < n; ++i) {
    const ExecEvent &x = from_a.history()[i], &y = from_b.history()[i];
    ASSERT_TRUE(x.txn == y.txn && x.piece == y.piece && x.deferred == y.deferred && x.key == y.key) << "event " << i;
  }
  EXPECT_EQ(from_a.store().digest(), from_b.store().digest());
  std::string err;
  ASSERT_TRUE(streamed.finish_history(&err)) << err;
  std::ifstream in(path);
  std::stringstream got;
  got << in.rdbuf();
  std::ostringstream want;
  all.write_history(want, "s0.0.0");
  auto g = lines(got.str()), x = lines(want.str());
  // the late quorum: on transaction 3's first line when written at once; a line of its own when streamed
  auto late = std::find(g.begin(), g.end(), "3 = q=0,2");
  ASSERT_NE(late, g.end()) << "no declaration line for the late quorum";
  g.erase(late);
  auto first3 = std::find_if(x.begin(), x.end(), [](const std::string& l) { return l.rfind("3 ", 0) == 0; });
  ASSERT_NE(first3, x.end());
  EXPECT_NE(first3->find(" q=0,2"), std::string::npos) << *first3;
  first3->erase(first3->find(" q=0,2"), 6);
  size_t never = 0;
  for (auto it = g.begin(); it != g.end();) {
    std::istringstream f(*it);
    uint64_t t = 0;
    std::string eq;
    if (f >> t >> eq && eq == "=" && t > n) {
      it = g.erase(it);
      ++never;
    } else {
      ++it;
    }
  }
  EXPECT_GT(never, 0u);
  EXPECT_LE(never, n / 7);
  ASSERT_EQ(g.size(), x.size());
  for (size_t i = 1; i + 1 < g.size(); ++i) ASSERT_EQ(g[i], x[i]) << "line " << i;
  EXPECT_EQ(g.back(), "# end events=" + std::to_string(n) + " lines=" + std::to_string(g.size() - 2 + never + 1));
  EXPECT_FALSE(std::ifstream(path + ".part").good()) << "renamed once complete";
}

TEST(Executor, OutputsDigestIsOrderFreeAndSeesNamesTypesAndValues) {
  Vars a, b;
  a["o_id"] = wl::int_value(3);
  a["w_name"] = wl::str_value("W1");
  b["w_name"] = wl::str_value("W1");
  b["o_id"] = wl::int_value(3);
  EXPECT_EQ(outputs_digest(a), outputs_digest(b));
  Vars c = a;
  c["o_id"] = wl::int_value(4);
  Vars e = a;
  e["o_id"] = wl::str_value("3");
  Vars f;
  f["o_idx"] = wl::int_value(3);
  f["w_name"] = wl::str_value("W1");
  for (const Vars* x : {&c, &e, &f}) EXPECT_NE(outputs_digest(a), outputs_digest(*x));
  EXPECT_NE(outputs_digest(a), outputs_digest(Vars{}));
}

TEST(Executor, SerialExecutionFollowsInputsAndReportsWhatItCannotRun) {
  Deployment d;
  d.regions = 1;
  d.shards_per_region = 2;
  d.workload.name = "tpcc";
  d.workload.scale = 0.01;
  d.workload.payment_crt_rate = 0;
  d.workload.by_name_prob = 1;   // Payment by name: the history piece needs c_id from the lookup
  auto w = make_workload(d);
  std::vector<std::unique_ptr<ShardStore>> stores;
  for (uint32_t s = 0; s < d.n_shards(); ++s) stores.push_back(w->load(s));
  std::mt19937_64 g(5);
  TxnRequest t = w->generate(g, {0, 0});
  ASSERT_EQ(t.pieces(t.pieces_size() - 1).inputs_size(), 3);   // c_id, w_name, d_name
  // Put the consumer first: it must still run after its producers.
  std::rotate(t.mutable_pieces()->begin(), t.mutable_pieces()->end() - 1, t.mutable_pieces()->end());
  std::vector<std::string> errors;
  Vars out = execute_serially(*w, stores, t, &errors);
  EXPECT_TRUE(errors.empty()) << errors.front();
  EXPECT_TRUE(out.count("c_id") && out.count("w_name") && out.count("d_name"));
  const auto& st = dynamic_cast<const wl::TpccStore&>(*stores[0]);
  EXPECT_EQ(st.history.size(), 301u) << "the HISTORY insert ran";
  // An input nobody produces: reported, and the other pieces still run.
  TxnRequest u = w->generate(g, {0, 0});
  u.mutable_pieces(u.pieces_size() - 1)->add_inputs("nobody_makes_this");
  errors.clear();
  execute_serially(*w, stores, u, &errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("never became known"), std::string::npos) << errors[0];
}

// DAST executes through the executor: every replica's history holds each of its
// shard's pieces once, replicas agree on the order of the pieces that do not
// commute, and TPC-C's HISTORY insert is marked deferred where it ran after its
// slot (only commutative pieces are).
TEST(Executor, DastReplicasRecordTheirExecutions) {
  Deployment d = txn::test::small_deployment("dast", "tpcc");
  d.workload.payment_crt_rate = 50;   // many cross-region Payments: deferred HISTORY inserts
  d.workload.by_name_prob = 1;
  txn::test::SimCluster c(d, {}, true);
  c.net->start();
  ASSERT_TRUE(c.net->run_until([&] { return c.clients_finished(); }, 60'000'000));
  c.net->run_until(c.net->now() + 2'000'000);
  std::set<std::pair<uint64_t, uint32_t>> commutative;
  for (const auto& [client, log] : c.txn_logs)  // what the clients' txn sinks received
    for (const auto& e : log)
      for (uint32_t p : e.commutative()) commutative.insert({e.txn().txn_id(), p});
  ASSERT_FALSE(commutative.empty());
  uint64_t deferred = 0;
  auto strip = [&](const std::deque<ExecEvent>& h) {
    std::vector<std::pair<uint64_t, uint32_t>> o;
    for (const auto& e : h)
      if (!commutative.count({e.txn, e.piece})) o.emplace_back(e.txn, e.piece);
    return o;
  };
  for (uint32_t s = 0; s < d.n_shards(); ++s) {
    const auto& h0 = c.replica(s, 0)->executor().history();
    for (uint32_t r = 1; r < d.replicas; ++r)
      EXPECT_EQ(strip(h0), strip(c.replica(s, r)->executor().history())) << "shard " << s;
    std::set<std::pair<uint64_t, uint32_t>> seen;
    for (const auto& e : h0) {
      EXPECT_TRUE(seen.insert({e.txn, e.piece}).second) << "piece executed twice";
      if (e.deferred) {
        ++deferred;
        EXPECT_TRUE(commutative.count({e.txn, e.piece})) << "deferred a piece that does not commute";
      }
    }
    const auto& st = dynamic_cast<const wl::TpccStore&>(c.replica(s, 0)->store());
    EXPECT_EQ(h0.size(), st.executed) << "every executed piece is in the history";
  }
  EXPECT_GT(deferred, 0u) << "no deferred HISTORY insert recorded";
  txn::test::check_history(c);  // deferred pieces have no place in the order, but the run is serializable
}

// Every built-in protocol records the order key its registration declares (docs/protocol-registry.md): each
// executed piece carries one when order_key is declared, none when it is "" (TAPIR), so the history checker's
// order-key check (f) cannot pass by the keys having gone missing. Pieces of one transaction on one shard share a
// key; replicas of a shard give a transaction the same key (SLOG: its local-log position; DAST: its timestamp).
TEST(Executor, EveryProtocolRecordsTheOrderKeyItDeclares) {
  for (const auto& mode : built_in_protocols()) {
    SCOPED_TRACE(mode);
    Deployment d = txn::test::small_deployment(mode, "tpcc");
    d.client.duration_s = 1.5;
    txn::test::SimCluster c(d, {}, true);
    c.net->start();
    ASSERT_TRUE(c.net->run_until([&] { return c.clients_finished(); }, 60'000'000));
    c.net->run_until(c.net->now() + 2'000'000);
    const bool declared = !find_protocol(mode).order_key.empty();
    size_t events = 0, keyed = 0;
    for (uint32_t s = 0; s < d.n_shards(); ++s) {
      std::map<uint64_t, OrderKey> first;  // per transaction, at replica 0
      for (uint32_t r = 0; r < d.replicas; ++r)
        for (const auto& e : c.replica(s, r)->executor().history()) {
          ++events;
          keyed += e.key.set;
          auto [it, fresh] = first.emplace(e.txn, e.key);
          if (!fresh && !e.deferred) {
            EXPECT_EQ(it->second, e.key) << "txn " << e.txn << " at shard " << s;
          }
        }
    }
    ASSERT_GT(events, 0u);
    EXPECT_EQ(keyed, declared ? events : 0u);
    txn::test::check_history(c);
  }
}

namespace {
// A store that cannot try (ShardStore::begin_trial is false): evaluation falls back to a copy of it.
class CopyOnly : public ShardStore {
 public:
  explicit CopyOnly(std::unique_ptr<ShardStore> s) : s_(std::move(s)) {}
  std::string digest() const override { return s_->digest(); }
  std::string dump_json() const override { return s_->dump_json(); }
  std::unique_ptr<ShardStore> clone() const override { return s_->clone(); }
  ShardStore& inner() { return *s_; }

 private:
  std::unique_ptr<ShardStore> s_;
};

// The same workload, but its stores evaluate on copies: the reference for the trials.
class OnCopies : public Workload {
 public:
  explicit OnCopies(const Workload& w) : w_(w) {}
  std::string name() const override { return w_.name(); }
  std::unique_ptr<ShardStore> load(uint32_t shard) const override { return std::make_unique<CopyOnly>(w_.load(shard)); }
  TxnRequest generate(std::mt19937_64& rng, const ClientContext& ctx) const override { return w_.generate(rng, ctx); }
  void execute(ShardStore& store, const Piece& p, const Vars& v, Vars* out) const override {
    auto* c = dynamic_cast<CopyOnly*>(&store);
    w_.execute(c ? c->inner() : store, p, v, out);
  }
  std::string type_name(uint32_t t) const override { return w_.type_name(t); }
  uint32_t n_types() const override { return w_.n_types(); }

 private:
  const Workload& w_;
};
}  // namespace

// Evaluation as a trial on the store (undone after) gives exactly what evaluation on a copy gives, and leaves the
// store as it was, for every workload and every kind of transaction: 600 transactions each, each evaluated
// with both, then executed on both (so later trials meet orders to deliver, customers by name, long lists).
TEST(Executor, TrialEvaluationMatchesACopyAndUndoesEverything) {
  for (const std::string name : {"tpcc", "tpca", "append"}) {
    SCOPED_TRACE(name);
    Deployment d;
    d.regions = 1;
    d.shards_per_region = 2;
    d.workload.name = name;
    d.workload.scale = 0.01;
    auto w = make_workload(d);
    OnCopies ref_w(*w);
    ShardExecutor trial(*w, 0), copy(ref_w, 0);
    std::mt19937_64 rng(7);
    int evaluated = 0;
    for (int n = 0; n < 600; ++n) {
      TxnRequest t = w->generate(rng, ClientContext{0, 0});
      t.set_txn_id(n + 1);
      Vars a, b;
      const std::string before = trial.store().digest(), before_json = trial.store().dump_json();
      const bool ta = trial.evaluate(t, &a), tb = copy.evaluate(t, &b);
      ASSERT_EQ(ta, tb);
      ASSERT_EQ(trial.store().digest(), before) << "txn " << n << ": the trial left a change";
      ASSERT_EQ(trial.store().dump_json(), before_json);
      ASSERT_EQ(outputs_digest(a), outputs_digest(b)) << "txn " << n;
      evaluated += ta;
      // Execute its pieces on shard 0 for real, on both, with the outputs evaluation gave as inputs.
      for (const auto& p : t.pieces()) {
        if (p.shard() != 0) continue;
        Vars scratch, out1, out2;
        const Vars* in = piece_vars(p, a, &scratch, true);
        try {
          trial.execute(t.txn_id(), p, *in, &out1);
        } catch (const BadMessage&) {
        }
        try {
          copy.execute(t.txn_id(), p, *in, &out2);
        } catch (const BadMessage&) {
        }
        ASSERT_EQ(outputs_digest(out1), outputs_digest(out2));
      }
      ASSERT_EQ(trial.store().digest(), copy.store().digest()) << "txn " << n;
    }
    EXPECT_GT(evaluated, 300);
  }
}
