// The history checker (history_check.h) on small hand-made runs: a correct one
// passes, and each planted fault is caught by the right check with a message
// that names the transactions, replicas and shards.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "history_check.h"

using namespace txn;
using txn::test::check_histories;
using txn::test::FinishedTxn;
using txn::test::HistoryVerdict;
using txn::test::ReplicaRun;
using txn::test::RunHistory;

namespace {

// A key-value workload small enough to write histories by hand. Every shard
// holds int64 counters by name. Proc 0 adds `delta` to counter `key` and
// outputs the new value under its piece's output name; proc 1 appends to a
// log nobody reads (it commutes with everything).
class KvStore : public ShardStore {
 public:
  std::string digest() const override {
    std::string s;
    for (const auto& [k, v] : counters) s += k + "=" + std::to_string(v) + ";";
    return s + "log=" + std::to_string(log);
  }
  std::string dump_json() const override { return "{}"; }
  std::map<std::string, int64_t> counters;
  int64_t log = 0;
};

class KvWorkload : public Workload {
 public:
  std::string name() const override { return "kv"; }
  std::unique_ptr<ShardStore> load(uint32_t) const override { return std::make_unique<KvStore>(); }
  TxnRequest generate(std::mt19937_64&, const ClientContext&) const override { return {}; }
  void execute(ShardStore& store, const Piece& p, const Vars& vars, Vars* out) const override {
    auto& s = static_cast<KvStore&>(store);
    if (p.proc() == 1) {
      s.log += vars.at("delta").i();
      return;
    }
    int64_t& c = s.counters[vars.at("key").s()];
    c += vars.at("delta").i();
    if (p.outputs_size()) (*out)[p.outputs(0)].set_i(c);
  }
  bool commutes(const Piece& p) const override { return p.proc() == 1; }
  std::string type_name(uint32_t) const override { return "kv"; }
  uint32_t n_types() const override { return 1; }
};

// Piece `id` of a transaction: add `delta` to `key` on `shard` (read and write
// key `key`), output "v<id>"; or, with `commutative`, append to the log.
Piece add(uint32_t id, uint32_t shard, const std::string& key, int64_t delta, bool commutative = false) {
  Piece p;
  p.set_id(id);
  p.set_shard(shard);
  p.set_proc(commutative ? 1 : 0);
  (*p.mutable_args())["delta"].set_i(delta);
  if (!commutative) {
    (*p.mutable_args())["key"].set_s(key);
    p.add_read_keys(key);
    p.add_write_keys(key);
    p.add_outputs("v" + std::to_string(id));
  }
  return p;
}

// A hand-made run on 2 shards of 3 replicas ("r<shard>.<replica>"): declare the
// transactions, give each shard the order it executes them in, then build()
// executes every replica's history for real, so digests and outputs are what a
// protocol executing that way would report.
class Scenario {
 public:
  static constexpr uint32_t kShards = 2, kReplicas = 3;

  void txn(uint64_t id, std::vector<Piece> pieces, bool committed = true, std::vector<uint64_t> failed = {},
           bool abandoned = false) {
    TxnLogEntry e;
    e.mutable_txn()->set_txn_id(id);
    for (auto& p : pieces) {
      if (p.proc() == 1) e.add_commutative(p.id());
      *e.mutable_txn()->add_pieces() = std::move(p);
    }
    e.set_committed(committed);
    e.set_abandoned(abandoned);
    for (uint64_t f : failed) e.add_failed_attempts(f);
    entries_.push_back(std::move(e));
  }
  // Every replica of `shard` executes these transactions' pieces on it, in this order.
  void order(uint32_t shard, const std::vector<uint64_t>& ids) {
    for (uint32_t r = 0; r < kReplicas; ++r) {
      auto& h = histories_[{shard, r}];
      h.clear();
      for (uint64_t id : ids) append(shard, r, id);
    }
  }
  // Replica `r` of `shard` executes every piece of `id` on the shard once more, at its end.
  void append(uint32_t shard, uint32_t r, uint64_t id, bool deferred = false) {
    const TxnRequest& t = find(id).txn();
    for (const auto& p : t.pieces())
      if (p.shard() == shard) histories_[{shard, r}].push_back({id, p.id(), deferred, {}});
  }
  std::vector<ExecEvent>& history(uint32_t shard, uint32_t r) { return histories_[{shard, r}]; }
  // Every replica of `shard` declares that `id` depends on `deps` (ShardExecutor::declare_deps).
  void declare(uint32_t shard, uint64_t id, std::vector<uint64_t> deps) {
    for (uint32_t r = 0; r < kReplicas; ++r) deps_[{shard, r}][id] = deps;
  }
  // Replica `r` of `shard` declares that it voted for `deps` as `id`'s dependencies (ShardExecutor::declare_vote).
  void vote(uint32_t shard, uint32_t r, uint64_t id, std::vector<uint64_t> deps) { votes_[{shard, r}][id] = deps; }

  // The run: each replica's history executed on a fresh store; each committed
  // transaction's outputs as replica 0 of each of its shards produced them.
  // Its transactions point into this scenario (all from client "c0").
  RunHistory build() const {
    RunHistory run;
    std::map<uint64_t, Vars> outputs;
    for (uint32_t s = 0; s < kShards; ++s)
      for (uint32_t r = 0; r < kReplicas; ++r) {
        auto store = w.load(s);
        auto it = histories_.find({s, r});
        std::vector<ExecEvent> h = it == histories_.end() ? std::vector<ExecEvent>{} : it->second;
        for (const auto& e : h) {
          const Piece* p = nullptr;
          for (const auto& t : entries_)
            if (t.txn().txn_id() == e.txn)
              for (const auto& q : t.txn().pieces())
                if (q.id() == e.piece) p = &q;
          if (!p) {  // a transaction no client finished: a piece of its own
            static const Piece stray = add(0, 0, "stray", 1);
            p = &stray;
          }
          Vars out;
          w.execute(*store, *p, p->args(), &out);
          if (r == 0)
            for (const auto& [k, v] : out) outputs[e.txn][k] = v;
        }
        auto d = deps_.find({s, r});
        auto v = votes_.find({s, r});
        run.replicas.push_back({"r" + std::to_string(s) + "." + std::to_string(r), s, h, store->digest(),
                                d == deps_.end() ? std::unordered_map<uint64_t, std::vector<uint64_t>>{} : d->second,
                                v == votes_.end() ? std::unordered_map<uint64_t, std::vector<uint64_t>>{} : v->second});
      }
    for (const auto& t : entries_)
      run.txns.push_back({"c0", &t, t.committed() ? outputs_digest(outputs[t.txn().txn_id()]) : ""});
    return run;
  }
  HistoryVerdict check() const { return check_histories(w, kShards, build()); }

  KvWorkload w;

 private:
  const TxnLogEntry& find(uint64_t id) const {
    for (const auto& t : entries_)
      if (t.txn().txn_id() == id) return t;
    throw std::logic_error("no txn " + std::to_string(id));
  }
  std::vector<TxnLogEntry> entries_;
  std::map<std::pair<uint32_t, uint32_t>, std::vector<ExecEvent>> histories_;
  std::map<std::pair<uint32_t, uint32_t>, std::unordered_map<uint64_t, std::vector<uint64_t>>> deps_, votes_;
};

// Transactions 1 and 2 both update x on shard 0 and y on shard 1; 3 updates z
// on shard 0 alone. Everyone executes 1, 2, 3.
Scenario two_shard_run() {
  Scenario s;
  s.txn(1, {add(0, 0, "x", 5), add(1, 1, "y", 5)});
  s.txn(2, {add(0, 0, "x", 7), add(1, 1, "y", -7)});
  s.txn(3, {add(0, 0, "z", 1)});
  s.order(0, {1, 2, 3});
  s.order(1, {1, 2});
  return s;
}

bool has(const std::vector<std::string>& lines, const std::string& text) {
  for (const auto& l : lines)
    if (l.find(text) != std::string::npos) return true;
  return false;
}

std::string all(const HistoryVerdict& v) {
  std::string s;
  for (const auto* lines : {&v.inputs, &v.order, &v.atomicity, &v.serializability, &v.replay, &v.order_key})
    for (const auto& l : *lines) s += l + "\n";
  return s;
}

}  // namespace

TEST(HistoryCheck, ACorrectRunPasses) {
  HistoryVerdict v = two_shard_run().check();
  EXPECT_TRUE(v.ok()) << all(v);
  EXPECT_EQ(v.committed, 3u);
  EXPECT_EQ(v.conflict_edges, 1u) << "1 -> 2 (x on shard 0, y on shard 1: one edge)";
  EXPECT_EQ(v.replay_skipped, "");
}

TEST(HistoryCheck, ASwappedConflictingPairInOneReplicaIsCaught) {
  Scenario s = two_shard_run();
  auto& h = s.history(0, 2);  // r0.2 executes 2 before 1
  std::swap(h[0], h[1]);
  HistoryVerdict v = s.check();
  ASSERT_EQ(v.order.size(), 1u) << all(v);
  EXPECT_EQ(v.order[0],
            "shard 0: r0.2 executed conflicting pieces in another order than r0.0 on key x: its access 1 is txn 2 "
            "(kv, c0) piece 0 where r0.0 has txn 1 (kv, c0) piece 0");
  // Its order and the others' both enter the conflict graph: a 2-cycle on shard 0.
  ASSERT_FALSE(v.serializability.empty());
  EXPECT_TRUE(has(v.serializability, "shortest cycle (2 transactions)")) << all(v);
  EXPECT_TRUE(v.atomicity.empty()) << all(v);
  EXPECT_NE(v.replay_skipped, "");
}

namespace {
// Piece `id` that reads `key` on `shard` and writes nothing (adds 0).
Piece read(uint32_t id, uint32_t shard, const std::string& key) {
  Piece p = add(id, shard, key, 0);
  p.clear_write_keys();
  return p;
}
}  // namespace

// Pieces that do not conflict commute: replicas may interleave them differently.
TEST(HistoryCheck, IndependentTransactionsInterleavedDifferentlyPass) {
  Scenario s = two_shard_run();
  auto& h = s.history(0, 2);  // r0.2 executes 1, 3, 2 (3 touches z only)
  std::swap(h[1], h[2]);
  HistoryVerdict v = s.check();
  EXPECT_TRUE(v.ok()) << all(v);
}

TEST(HistoryCheck, ReadsOfAKeyInAnotherOrderBetweenTheSameWritesPass) {
  Scenario s = two_shard_run();
  s.txn(4, {read(0, 0, "x")});
  s.txn(5, {read(0, 0, "x")});
  s.order(0, {1, 4, 5, 2, 3});
  auto& h = s.history(0, 1);
  std::swap(h[1], h[2]);  // r0.1: 1, 5, 4, 2, 3
  HistoryVerdict v = s.check();
  EXPECT_TRUE(v.ok()) << all(v);
}

TEST(HistoryCheck, AReadMovedPastAWriteIsCaught) {
  Scenario s = two_shard_run();
  s.txn(4, {read(0, 0, "x")});
  s.order(0, {1, 4, 2, 3});
  auto& h = s.history(0, 1);
  std::swap(h[1], h[2]);  // r0.1: 1, 2, 4, 3
  HistoryVerdict v = s.check();
  ASSERT_EQ(v.order.size(), 1u) << all(v);
  EXPECT_EQ(v.order[0],
            "shard 0: r0.1 executed conflicting pieces in another order than r0.0 on key x: its access 2 is txn 2 "
            "(kv, c0) piece 0 where r0.0 has reads by txn 4 (kv, c0) piece 0");
  EXPECT_TRUE(has(v.serializability, "shortest cycle (2 transactions)")) << all(v);
}

TEST(HistoryCheck, APieceMissingAtOneReplicaIsCaughtByTheOrderCheck) {
  Scenario s = two_shard_run();
  s.history(0, 1).pop_back();  // r0.1 never executes txn 3
  HistoryVerdict v = s.check();
  ASSERT_EQ(v.order.size(), 1u) << all(v);
  EXPECT_EQ(v.order[0], "shard 0: r0.1 and r0.0 executed different pieces (1 differ, e.g. txn 3 (kv, c0) piece 0)");
  EXPECT_FALSE(v.atomicity.empty()) << all(v);
}

TEST(HistoryCheck, ATransactionMissingAtOneShardIsCaught) {
  Scenario s = two_shard_run();
  s.order(1, {1});  // shard 1 never executes txn 2
  HistoryVerdict v = s.check();
  ASSERT_EQ(v.atomicity.size(), 3u) << all(v);  // one line per replica of shard 1
  EXPECT_EQ(v.atomicity[0], "txn 2 (kv, c0) at r1.0 (shard 1): pieces [1] never executed");
  EXPECT_TRUE(has(v.atomicity, "txn 2 (kv, c0) at r1.2 (shard 1)"));
  EXPECT_TRUE(v.order.empty()) << all(v);
  // The replay applies txn 2 at shard 1: it ends elsewhere than the replicas.
  EXPECT_TRUE(has(v.replay, "shard 1: the serial replay ends in state y=-2;log=0, r1.0 in y=5;log=0")) << all(v);
}

TEST(HistoryCheck, APieceExecutedTwiceOrOnTheWrongShardIsCaught) {
  Scenario s = two_shard_run();
  s.append(0, 1, 3);  // r0.1 runs txn 3 again
  s.history(1, 0).push_back({3, 0, false, {}});  // r1.0 runs txn 3's shard-0 piece
  HistoryVerdict v = s.check();
  EXPECT_TRUE(has(v.atomicity, "txn 3 (kv, c0) at r0.1 (shard 0): pieces [0] executed more than once")) << all(v);
  EXPECT_TRUE(has(v.atomicity, "txn 3 (kv, c0) executed at r1.0, but it has no piece on shard 1")) << all(v);
}

TEST(HistoryCheck, AGivenUpAttemptThatExecutedIsCaught) {
  Scenario s = two_shard_run();
  s.txn(4, {add(0, 0, "z", 2)}, /*committed=*/false);
  s.order(0, {1, 2, 3, 4});
  HistoryVerdict v = s.check();
  EXPECT_EQ(v.atomicity, (std::vector<std::string>{"txn 4 (kv, c0) was given up but executed at r0.0",
                                                   "txn 4 (kv, c0) was given up but executed at r0.1",
                                                   "txn 4 (kv, c0) was given up but executed at r0.2"}))
      << all(v);

  // An earlier attempt of a committed transaction, and one no client logged.
  Scenario t = two_shard_run();
  t.txn(6, {add(0, 0, "x", 3)}, true, /*failed=*/{5});
  t.order(0, {1, 2, 3, 6});
  t.history(0, 0).push_back({5, 0, false, {}});
  t.history(0, 0).push_back({99, 0, false, {}});
  HistoryVerdict u = t.check();
  EXPECT_TRUE(has(u.atomicity, "txn 5 (a failed attempt of txn 6 (kv, c0)) did not commit but executed at r0.0"))
      << all(u);
  EXPECT_TRUE(has(u.atomicity, "txn 99 (in no client's log) executed at r0.0")) << all(u);
}

// Abandoned in flight at the drain: its outcome is unknown, so executed whole everywhere (then replayed) or nowhere,
// never in part.
TEST(HistoryCheck, AnAbandonedTransactionRanWholeOrNowhere) {
  Scenario s = two_shard_run();
  s.txn(4, {add(0, 0, "z", 2), add(1, 1, "y", 1)}, /*committed=*/false, {}, /*abandoned=*/true);
  HistoryVerdict nowhere = s.check();
  EXPECT_TRUE(nowhere.ok()) << all(nowhere);
  s.order(0, {1, 2, 3, 4});
  s.order(1, {1, 2, 4});
  HistoryVerdict whole = s.check();
  EXPECT_TRUE(whole.ok()) << all(whole);   // the replay ran it: the replicas' y holds its +1
  s.order(1, {1, 2});
  HistoryVerdict part = s.check();
  ASSERT_EQ(part.atomicity.size(), 3u) << all(part);
  EXPECT_EQ(part.atomicity[0],
            "txn 4 (kv, c0) (abandoned at the drain, executed elsewhere) at r1.0 (shard 1): pieces [1] never executed");
}

TEST(HistoryCheck, ACycleAcrossTwoShardsIsCaughtWithItsShortestCycle) {
  Scenario s = two_shard_run();
  s.order(1, {2, 1});  // every replica of shard 1 agrees, but against shard 0's order
  HistoryVerdict v = s.check();
  EXPECT_TRUE(v.order.empty()) << all(v);
  EXPECT_TRUE(v.atomicity.empty()) << all(v);
  ASSERT_EQ(v.serializability.size(), 1u) << all(v);
  EXPECT_EQ(v.serializability[0],
            "the conflict graph has 1 cycle component(s) over 2 transactions; shortest cycle (2 transactions): "
            "txn 1 (kv, c0) -> [shard 0, x] -> txn 2 (kv, c0) -> [shard 1, y] -> txn 1 (kv, c0)");
  EXPECT_EQ(v.replay_skipped, "the conflict graph has a cycle: no serial order to replay");
  EXPECT_TRUE(v.replay.empty());
}

TEST(HistoryCheck, TheShortestCycleIsReported) {
  // 1 -> 2 -> 3 -> 4 -> 1 through keys a..d, and a chord 3 -> 1 (key e): the
  // component holds a 4-cycle and the 3-cycle 1 -> 2 -> 3 -> 1.
  Scenario s;
  s.txn(1, {add(0, 0, "a", 1), add(1, 1, "d", 1), add(2, 1, "e", 1)});
  s.txn(2, {add(0, 0, "a", 1), add(1, 0, "b", 1)});
  s.txn(3, {add(0, 0, "b", 1), add(1, 1, "c", 1), add(2, 1, "e", 1)});
  s.txn(4, {add(0, 1, "c", 1), add(1, 1, "d", 1)});
  s.order(0, {1, 2, 3});
  s.order(1, {3, 4, 1});
  HistoryVerdict v = s.check();
  ASSERT_FALSE(v.serializability.empty()) << all(v);
  EXPECT_EQ(v.serializability[0],
            "the conflict graph has 1 cycle component(s) over 4 transactions; shortest cycle (3 transactions): "
            "txn 1 (kv, c0) -> [shard 0, a] -> txn 2 (kv, c0) -> [shard 0, b] -> txn 3 (kv, c0) -> [shard 1, e] -> "
            "txn 1 (kv, c0)");
}

TEST(HistoryCheck, AWrongOutputOrStateIsCaughtByTheReplay) {
  const Scenario s = two_shard_run();
  RunHistory run = s.build();
  for (auto& f : run.txns)
    if (f.entry->txn().txn_id() == 2) f.outputs = "0123456789abcdef";
  run.replicas[4].digest = "not-the-state";  // r1.1
  KvWorkload w;
  HistoryVerdict v = check_histories(w, Scenario::kShards, run);
  ASSERT_EQ(v.replay.size(), 2u) << all(v);
  EXPECT_EQ(v.replay[0], "shard 1: the serial replay ends in state y=-2;log=0, r1.1 in not-the-state");
  EXPECT_EQ(v.replay[1].substr(0, 70), "txn 2 (kv, c0): the client received outputs 0123456789abcdef, the seri");
  EXPECT_TRUE(v.order.empty() && v.atomicity.empty() && v.serializability.empty()) << all(v);
}

TEST(HistoryCheck, CommutativePiecesHaveNoPlaceButMustAllRun) {
  Scenario s;
  s.txn(1, {add(0, 0, "x", 1), add(1, 0, "", 10, /*commutative=*/true)});
  s.txn(2, {add(0, 0, "x", 2)});
  s.order(0, {1, 2});
  // r0.1 runs txn 1's log append after txn 2 (deferred): the same execution.
  auto& h = s.history(0, 1);
  h = {{1, 0, false, {}}, {2, 0, false, {}}, {1, 1, true, {}}};
  EXPECT_TRUE(s.check().ok()) << all(s.check());

  // r0.2 never runs it.
  s.history(0, 2) = {{1, 0, false, {}}, {2, 0, false, {}}};
  HistoryVerdict v = s.check();
  EXPECT_TRUE(has(v.order, "shard 0: r0.2 and r0.0 executed different commutative pieces (1 differ, e.g. txn 1 "
                           "(kv, c0) piece 1)"))
      << all(v);
  EXPECT_TRUE(has(v.atomicity, "txn 1 (kv, c0) at r0.2 (shard 0): pieces [1] never executed")) << all(v);
}

TEST(HistoryCheck, ADeferredPieceThatDoesNotCommuteIsCaught) {
  Scenario s = two_shard_run();
  for (auto& e : s.history(0, 1))
    if (e.txn == 3) e.deferred = true;
  HistoryVerdict v = s.check();
  ASSERT_EQ(v.serializability.size(), 1u) << all(v);
  EXPECT_EQ(v.serializability[0], "r0.1 deferred txn 3 (kv, c0) piece 0, which does not commute");
}

TEST(HistoryCheck, ListsTwentyViolationsPerCheckThenCountsTheRest) {
  Scenario s;
  std::vector<uint64_t> ids;
  for (uint64_t id = 1; id <= 30; ++id) {
    s.txn(id, {add(0, 0, "k" + std::to_string(id), 1)}, /*committed=*/false);
    ids.push_back(id);
  }
  s.order(0, ids);  // 30 given-up transactions executed at 3 replicas each
  HistoryVerdict v = s.check();
  ASSERT_EQ(v.atomicity.size(), 21u);
  EXPECT_EQ(v.atomicity.back(), "... and 70 more");
}

TEST(HistoryCheck, InputProblemsAreReported) {
  const Scenario s = two_shard_run();
  RunHistory run = s.build();
  run.txns.push_back(run.txns[0]);
  run.input_problems.push_back("c1: 3 records but its txn sink received 2 transactions");
  KvWorkload w;
  HistoryVerdict v = check_histories(w, Scenario::kShards, run);
  EXPECT_EQ(v.inputs, (std::vector<std::string>{"c1: 3 records but its txn sink received 2 transactions",
                                                  "txn 1 finished twice (c0, c0)"}));
  EXPECT_FALSE(v.ok());
}

// (f) the protocol's own order: the same order at every replica, serializable, but against the keys.
namespace {
// Gives every event of `id` at every replica of `shard` the key (domain, hi, 0).
void key(Scenario& s, uint32_t shard, uint64_t id, uint64_t domain, uint64_t hi) {
  for (uint32_t r = 0; r < Scenario::kReplicas; ++r)
    for (auto& e : s.history(shard, r))
      if (e.txn == id) e.key = order_key(domain, hi, 0);
}
}  // namespace

TEST(HistoryCheck, ConflictingPiecesInKeyOrderPass) {
  Scenario s = two_shard_run();
  key(s, 0, 1, 0, 10);
  key(s, 0, 2, 0, 20);
  key(s, 0, 3, 0, 5);  // no conflict with 1 or 2 (key z): any order
  key(s, 1, 1, 0, 10);
  key(s, 1, 2, 0, 10);  // equal keys: either order
  EXPECT_TRUE(s.check().ok()) << all(s.check());
}

TEST(HistoryCheck, ConflictingPiecesAgainstTheirKeysAreCaughtAtEveryReplica) {
  Scenario s = two_shard_run();  // every replica runs 1 before 2: (a)-(d) pass
  key(s, 0, 1, 7, 20);
  key(s, 0, 2, 7, 10);
  HistoryVerdict v = s.check();
  EXPECT_TRUE(v.order.empty() && v.serializability.empty() && v.replay.empty()) << all(v);
  ASSERT_EQ(v.order_key.size(), 3u) << all(v);
  EXPECT_EQ(v.order_key[0], "r0.0 (shard 0) executed txn 1 (kv, c0) piece 0 (order key 7:20.0) before txn 2 (kv, c0) "
                            "piece 0 (order key 7:10.0), which conflicts with it on x: against the protocol's order");
  EXPECT_TRUE(has(v.order_key, "r0.2 (shard 0) executed txn 1")) << all(v);
  // lo breaks a tie in hi.
  Scenario t = two_shard_run();
  for (uint32_t r = 0; r < Scenario::kReplicas; ++r) {
    t.history(1, r)[0].key = order_key(0, 3, 2);
    t.history(1, r)[1].key = order_key(0, 3, 1);
  }
  EXPECT_EQ(t.check().order_key.size(), 3u) << all(t.check());
}

TEST(HistoryCheck, ConflictingPiecesAreHeldToTheDeclaredDependencies) {
  Scenario s = two_shard_run();  // every replica runs 1 before 2: (a)-(d) pass
  s.declare(0, 1, {});
  s.declare(0, 2, {1});
  s.declare(0, 3, {});           // 3 conflicts with neither
  s.declare(1, 1, {});
  s.declare(1, 2, {4});          // on shard 1, 2 reaches 1 through 4, declared on shard 0 only (a path may leave
  s.declare(0, 4, {1});          // the shard)
  EXPECT_TRUE(s.check().ok()) << all(s.check());
  s.declare(0, 2, {});           // the dependencies leave 1 and 2 unordered
  s.declare(1, 2, {});
  HistoryVerdict v = s.check();
  EXPECT_TRUE(v.order.empty() && v.serializability.empty() && v.replay.empty()) << all(v);
  ASSERT_EQ(v.order_key.size(), 6u) << all(v);  // at every replica of both shards
  EXPECT_EQ(v.order_key[3], "r1.0 (shard 1) executed txn 1 (kv, c0) before txn 2 (kv, c0) piece 1, which conflicts "
                            "with it on y: the declared dependencies leave the two unordered");
  Scenario t = two_shard_run();  // only shard 0 declares: 1 ran first, though it depends on 2 (were 2 to depend on 1
  t.declare(0, 1, {2});          // too, the two would be one cycle, which Janus orders by id)
  t.declare(0, 2, {});
  v = t.check();
  ASSERT_EQ(v.order_key.size(), 6u) << all(v);  // and at each replica, 1 ran before a dependency of its own
  EXPECT_EQ(v.order_key[0], "r0.0 (shard 0) executed txn 1 (kv, c0) before txn 2 (kv, c0) piece 0, which conflicts "
                            "with it on x: against the declared dependencies (the earlier depends on the later)");
}

TEST(HistoryCheck, EveryDeclaredDependencyRunsFirstEvenWithoutASharedKey) {
  Scenario s = two_shard_run();  // shard 0 runs 1, 2, 3; 3 shares no key with 1 or 2
  s.declare(0, 1, {});
  s.declare(0, 2, {1});
  s.declare(0, 3, {2, 7});       // 7 never ran here: nothing to hold 3 to
  EXPECT_TRUE(s.check().ok()) << all(s.check());
  s.declare(0, 2, {1, 3});       // 2 ran before 3, which its decision says it depends on (a Commit applied on arrival)
  s.declare(0, 3, {});
  HistoryVerdict v = s.check();
  EXPECT_TRUE(v.order.empty() && v.serializability.empty() && v.replay.empty()) << all(v);
  ASSERT_EQ(v.order_key.size(), 3u) << all(v);  // no conflict on a key: only this check sees it
  EXPECT_EQ(v.order_key[1], "r0.1 (shard 0) executed txn 2 (kv, c0) before txn 3 (kv, c0), a dependency it declared "
                            "(the protocol's decision), which does not depend on it");
  s.declare(0, 3, {2});          // a cycle (Janus runs a component in an order of its own): not a violation
  EXPECT_TRUE(s.check().ok()) << all(s.check());
}

TEST(HistoryCheck, EveryReplicasVoteIsAmongTheDependenciesTheTransactionWasDecidedWith) {
  Scenario s = two_shard_run();  // every replica runs 1 before 2, as 2's dependencies say
  s.declare(0, 1, {});
  s.declare(0, 2, {1, 8});       // 8: a transaction of another shard
  s.declare(1, 1, {});
  s.declare(1, 2, {1});
  s.vote(0, 0, 2, {1});
  s.vote(0, 1, 2, {8, 1});       // the decision holds the union of the votes
  s.vote(1, 2, 1, {});
  s.vote(0, 2, 9, {1});          // 9 never ran here: nothing to hold it to
  EXPECT_TRUE(s.check().ok()) << all(s.check());
  s.vote(0, 2, 2, {1, 8, 4});    // a vote the decision left out (a coordinator that did not wait for this replica)
  s.vote(1, 1, 1, {2});
  HistoryVerdict v = s.check();
  EXPECT_TRUE(v.order.empty() && v.serializability.empty() && v.replay.empty()) << all(v);
  ASSERT_EQ(v.order_key.size(), 2u) << all(v);
  EXPECT_EQ(v.order_key[0], "r0.2 (shard 0) voted for dependencies of txn 2 (kv, c0) that its decision left out: "
                            "txn 4 (in no client's log)");
  EXPECT_TRUE(has(v.order_key, "r1.1 (shard 1) voted for dependencies of txn 1 (kv, c0) that its decision left out: "
                               "txn 2 (kv, c0)")) << all(v);
  Scenario t = two_shard_run();  // a replica that voted, then ran the transaction with no declared decision
  t.declare(0, 2, {1});
  t.vote(0, 1, 1, {});
  v = t.check();
  ASSERT_EQ(v.order_key.size(), 1u) << all(v);
  EXPECT_EQ(v.order_key[0], "r0.1 (shard 0) executed txn 1 (kv, c0), which it voted for, without declaring the "
                            "dependencies it was decided with");
}

TEST(HistoryCheck, OrderKeysOfDifferentDomainsOrUnsetAreNotCompared) {
  Scenario s = two_shard_run();
  key(s, 0, 1, 1, 20);
  key(s, 0, 2, 2, 10);  // another domain (e.g. another Janus component): not comparable
  key(s, 1, 1, 0, 20);  // txn 2 has no key on shard 1
  EXPECT_TRUE(s.check().ok()) << all(s.check());
  // A third transaction in domain 1 below txn 1, after it: caught, across txn 2 of domain 2 between them.
  s.txn(4, {add(0, 0, "x", 1)});
  s.order(0, {1, 2, 3, 4});
  key(s, 0, 1, 1, 20);
  key(s, 0, 2, 2, 10);
  key(s, 0, 4, 1, 15);
  HistoryVerdict v = s.check();
  ASSERT_EQ(v.order_key.size(), 3u) << all(v);
  EXPECT_TRUE(has(v.order_key, "executed txn 1 (kv, c0) piece 0 (order key 1:20.0) before txn 4 (kv, c0) piece 0 "
                               "(order key 1:15.0)"))
      << all(v);
}

TEST(HistoryCheck, OrderKeysOfReadsCommutativeAndDeferredPiecesAreExempt) {
  Scenario s;
  // Txns 1 and 2 only read x (a read and a read do not conflict); 3's log append commutes with everything.
  auto read = [](uint32_t id, const std::string& k) {
    Piece p = add(id, 0, k, 0);
    p.clear_write_keys();
    return p;
  };
  s.txn(1, {read(0, "x")});
  s.txn(2, {read(0, "x")});
  s.txn(3, {add(0, 0, "", 1, /*commutative=*/true)});
  s.txn(4, {add(0, 0, "y", 1)});
  s.txn(5, {add(0, 0, "y", 1), add(1, 0, "", 1, /*commutative=*/true)});
  s.order(0, {1, 2, 3, 4, 5});
  key(s, 0, 1, 0, 20);
  key(s, 0, 2, 0, 10);
  key(s, 0, 3, 0, 30);
  key(s, 0, 4, 0, 40);
  key(s, 0, 5, 0, 50);
  for (uint32_t r = 0; r < Scenario::kReplicas; ++r)
    for (auto& e : s.history(0, r))
      if (e.txn == 5 && e.piece == 1) e.key = order_key(0, 1, 0);  // the commutative piece, out of order
  EXPECT_TRUE(s.check().ok()) << all(s.check());
  // A write of x after them with a key between theirs: caught against the larger read.
  s.txn(6, {add(0, 0, "x", 1)});
  s.order(0, {1, 2, 3, 4, 5, 6});
  key(s, 0, 1, 0, 20);
  key(s, 0, 2, 0, 10);
  key(s, 0, 6, 0, 15);
  HistoryVerdict v = s.check();
  ASSERT_EQ(v.order_key.size(), 3u) << all(v);
  EXPECT_TRUE(has(v.order_key, "executed txn 1 (kv, c0) piece 0 (order key 0:20.0) before txn 6")) << all(v);
  // Deferred, the same write is exempt from (f) ((c) flags a deferred piece that does not commute).
  for (uint32_t r = 0; r < Scenario::kReplicas; ++r) s.history(0, r).back().deferred = true;
  EXPECT_TRUE(s.check().order_key.empty()) << all(s.check());
}

namespace {
void report_a_cycle() {
  Scenario s = two_shard_run();
  s.order(1, {2, 1});
  txn::test::report_history_failures(s.check(), "kv run");
}
}  // namespace

TEST(HistoryCheck, ViolationsBecomeTestFailuresNamingTheirCheck) {
  EXPECT_NONFATAL_FAILURE(report_a_cycle(), "kv run: history check (c) serializability: the conflict graph has 1");
  txn::test::report_history_failures(two_shard_run().check(), "kv run");  // a correct run adds none
}
