// SLOG on the simulated network (docs/protocols/slog.md): its blocking
// mechanisms (an earlier conflicting multi-home entry; the pending window)
// staged next to DAST's, both paths and their counters, the global log's
// order and skips, three regions at least, and malformed messages. The
// protocol-neutral suite (test_protocol_sim.cc) and the history checker run it
// too.
#include <gtest/gtest.h>

#include <iostream>

#include "protocols/slog/slog.h"
#include "sim_cluster.h"
#include "sim_txns.h"

using namespace txn;
using txn::test::find_txn;
using txn::test::ProbeClient;
using txn::test::SimCluster;
using txn::test::sim_options;
using txn::test::submit;

namespace {

// A CRT homed at shard 0 whose piece there needs a value from a shard of
// another region (TPC-C Payment by last name with a remote customer: the
// history row at the home warehouse needs c_id).
bool waits_for_remote_value(const Deployment& d, const TxnRequest& t) {
  for (const auto& p : t.pieces())
    if (p.shard() == 0 && !p.inputs().empty())
      for (const auto& q : t.pieces())
        if (d.region_of_shard(q.shard()) != 0)
          for (const auto& o : q.outputs())
            if (std::find(p.inputs().begin(), p.inputs().end(), o) != p.inputs().end()) return true;
  return false;
}

// An IRT of one piece: `t`'s first piece on `shard` that needs no input.
TxnRequest irt_of_free_piece(const TxnRequest& t, uint32_t shard) {
  TxnRequest irt;
  irt.set_type(t.type());
  irt.set_crt(false);
  irt.set_home_shard(shard);
  for (const auto& p : t.pieces())
    if (p.shard() == shard && p.inputs().empty()) {
      *irt.add_pieces() = p;
      break;
    }
  return irt;
}

struct Staged {
  TimeUs irt_us = 0;       // the IRT's latency
  TimeUs crt_us = 0;       // the CRT's latency (0: no CRT)
  TimeUs irt_at_us = 0;    // when the IRT was submitted, after the CRT's
  std::vector<uint64_t> order_at_shard0;
  std::map<std::string, int64_t> counters;
};

Deployment tpcc(const std::string& mode) { return txn::test::small_deployment(mode, "tpcc"); }

// The CRT is submitted at 100 ms. Once shard 0 (region 0) has run the first
// of the CRT's pieces there, so that the CRT is in its log and waits for
// c_id from the other region, an IRT writing the same warehouse row is
// submitted. Without a CRT, the IRT alone at 300 ms.
Staged stage(const std::string& mode, bool with_crt, bool conflicting = true, uint32_t window = 0) {
  Deployment d = tpcc(mode);
  if (window) d.protocols["slog"]["pending_window"] = static_cast<int64_t>(window);
  SimCluster c(d, {}, false);
  const NodeId client = c.d.clients().front();  // homed at shard 0
  ProbeClient* pc = c.attach_probe(client);
  const NodeId handler = c.d.replica_id(0, 0);
  c.net->start();
  c.net->run_until(100'000);
  std::mt19937_64 rng(9);
  const TxnRequest crt = find_txn(*c.w, 0, true, rng, [&](const TxnRequest& t) {
    return waits_for_remote_value(c.d, t);
  });
  TxnRequest irt = irt_of_free_piece(crt, 0);
  if (!conflicting) {  // an Order-Status at shard 0: reads customer and order rows, none the Payment writes there
    irt = find_txn(*c.w, 0, false, rng, [](const TxnRequest& t) { return t.type() == 3; });
  }
  EXPECT_GE(irt.pieces_size(), 1);
  Staged s;
  size_t want = 1;
  if (with_crt) {
    c.net->send(client, handler, submit(crt, 1));
    ++want;
    EXPECT_TRUE(c.net->run_until([&] { return !c.replica(0, 0)->executor().history().empty(); }, 2'000'000));
  } else {
    c.net->run_until(300'000);
  }
  EXPECT_TRUE(pc->replies.empty());
  s.irt_at_us = c.net->now();
  c.net->send(client, handler, submit(irt, 2));
  EXPECT_TRUE(c.net->run_until([&] { return pc->replies.size() == want; }, 3'000'000)) << mode;
  c.net->run_until(c.net->now() + 100'000);
  if (!pc->replies.count(2)) return s;
  s.irt_us = pc->replies.at(2) - s.irt_at_us;
  if (with_crt && pc->replies.count(1)) s.crt_us = pc->replies.at(1) - 100'000;
  for (const auto& e : c.replica(0, 0)->executor().history())
    if (s.order_at_shard0.empty() || s.order_at_shard0.back() != e.txn) s.order_at_shard0.push_back(e.txn);
  s.counters = txn::test::sum_counters(c.replicas);
  EXPECT_TRUE(c.net->logs().empty()) << c.net->logs().front();
  return s;
}

}  // namespace

// SLOG's blocking mechanism, from its rules alone: the CRT took its place in
// region 0's local log before the IRT, and holds its rows at shard 0 until its
// history piece has run there, which needs c_id from the other region (half a
// cross-region RTT after that region's shard ran its part, which waited for
// the same global order). The IRT, later in the log and writing the same row,
// waits all that time. Under DAST the same IRT does not wait for the CRT.
TEST(SlogSim, IrtWaitsBehindConflictingMultiHomeEntryWhereDastDoesNot) {
  const Staged alone = stage("slog", false);
  const Staged slog = stage("slog", true);
  const Staged dast = stage("dast", true);
  std::cout << "IRT latency: slog alone " << alone.irt_us / 1000.0 << " ms, slog behind a CRT "
            << slog.irt_us / 1000.0 << " ms (submitted " << (slog.irt_at_us - 100'000) / 1000.0
            << " ms after the CRT; CRT " << slog.crt_us / 1000.0 << " ms), dast behind a CRT " << dast.irt_us / 1000.0
            << " ms (submitted " << (dast.irt_at_us - 100'000) / 1000.0 << " ms after; CRT " << dast.crt_us / 1000.0
            << " ms)\n";
  ::testing::Test::RecordProperty("slog_irt_alone_us", alone.irt_us);
  ::testing::Test::RecordProperty("slog_irt_behind_crt_us", slog.irt_us);
  ::testing::Test::RecordProperty("dast_irt_behind_crt_us", dast.irt_us);
  // Alone: to the orderer (2.5 ms), the batch tick (<= 5 ms), the backup's
  // copy (5 ms), the batch to the shard (2.5 ms), the reply (2.5 ms): ~15-20 ms.
  EXPECT_GE(alone.irt_us, 12'500);
  EXPECT_LT(alone.irt_us, 25'000);
  // Behind the CRT: it ends only after the CRT's value crossed regions (>= 50 ms one way).
  EXPECT_GE(slog.irt_us, 50'000);
  EXPECT_GE(slog.irt_at_us + slog.irt_us, 100'000 + slog.crt_us - 5'000) << "the IRT finishes after the CRT";
  ASSERT_EQ(slog.order_at_shard0.size(), 2u);
  EXPECT_EQ(slog.order_at_shard0[0], 1u) << "SLOG runs the CRT first: it is earlier in the log";
  EXPECT_EQ(slog.counters.at("blocked_entries"), 1) << "the IRT, counted at replica 0 of shard 0";
  // DAST: the IRT does not wait for the CRT.
  EXPECT_LT(dast.irt_us, 20'000);
}

// The other way an IRT waits: with a window of one pending entry, a shard
// holding a multi-home entry that waits for a cross-region value runs nothing
// else, even a transaction on other rows; with the artifact's window of 5 that
// one runs at once.
TEST(SlogSim, IrtBeyondThePendingWindowWaitsOnNonConflictingEntry) {
  const Staged narrow = stage("slog", true, false, 1);
  const Staged wide = stage("slog", true, false, 5);
  std::cout << "non-conflicting IRT behind a waiting CRT: window 1 " << narrow.irt_us / 1000.0 << " ms, window 5 "
            << wide.irt_us / 1000.0 << " ms\n";
  EXPECT_GE(narrow.irt_us, 50'000);
  EXPECT_EQ(narrow.counters.at("window_full_waits"), 1);
  EXPECT_LT(wide.irt_us, 25'000);
  EXPECT_EQ(wide.counters.at("window_full_waits"), 0);
  EXPECT_EQ(wide.counters.at("blocked_entries"), 0);
}

namespace {
Deployment contended(const std::string& workload) {
  Deployment d = txn::test::small_deployment("slog", workload);
  d.workload.zipf = 0.99;
  d.client.n_concurrent = 4;
  return d;
}
}  // namespace

// Both paths under contention and reordering, counted: single-home entries
// through the local logs, multi-home ones through the global log, batches;
// every run passes the protocol-neutral checks and the history checker.
TEST(SlogSim, BothPathsUnderContentionAreCounted) {
  for (const std::string workload : {"tpca", "tpcc", "append"}) {
    Deployment d = contended(workload);
    if (workload == "tpcc") d.workload.district = "uniform";
    SimCluster c(d, sim_options(3, 4'000), true);
    txn::test::run_and_check(c);
    const auto k = txn::test::sum_counters(c.replicas);
    const auto n = txn::test::count_records(c);
    std::cout << workload << ": single-home entries " << k.at("single_home_entries") << " multi-home entries "
              << k.at("multi_home_entries") << " global entries " << k.at("global_entries") << " batches "
              << k.at("batches") << " (entries " << k.at("batch_entries") << ") blocked " << k.at("blocked_entries")
              << " window full " << k.at("window_full_waits") << "; committed IRT " << n.irt << " CRT " << n.crt
              << "; mean log wait single " << k.at("single_home_log_wait_us") / std::max<int64_t>(1, k.at("single_home_entries"))
              << " us multi " << k.at("multi_home_log_wait_us") / std::max<int64_t>(1, k.at("multi_home_entries"))
              << " us\n";
    // Every committed CRT went through the global log once (no aborts in SLOG).
    EXPECT_EQ(static_cast<uint64_t>(k.at("global_entries")), n.crt);
    EXPECT_GE(static_cast<uint64_t>(k.at("single_home_entries")), n.irt);
    EXPECT_GE(static_cast<uint64_t>(k.at("multi_home_entries")), 2 * n.crt) << "a CRT enters >= 2 shards' logs";
    EXPECT_EQ(k.at("batch_entries"), k.at("single_home_entries") + k.at("multi_home_entries"));
    // TPC-A's and append's pieces need no value from another shard: an entry runs whole when its batch arrives,
    // so none is pending when the next comes. TPC-C's Payment by last name and New-Order with remote stock wait
    // for values.
    if (workload == "tpcc") EXPECT_GT(k.at("blocked_entries"), 0);
    else EXPECT_EQ(k.at("blocked_entries"), 0);
    // A multi-home entry waits at least the global log's round trip (100 ms); a single-home one the hop from
    // the handler to the orderer (2.5 ms + up to 4 ms of the simulator's extra delay).
    EXPECT_GE(k.at("multi_home_log_wait_us"), 100'000 * k.at("multi_home_entries"));
    EXPECT_LT(k.at("single_home_log_wait_us"), 7'000 * k.at("single_home_entries"));
  }
}

TEST(SlogSim, FewerThanThreeRegionsIsRefusedInOneLine) {
  try {
    validate(make_local_deployment("slog", 2, 2, 1));
    FAIL() << "two regions accepted";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("slog"), std::string::npos) << what;
    EXPECT_NE(what.find("3"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

// The orderer inserts the global log's contiguous prefix: an entry ahead of a
// gap waits for it, a skip only moves the prefix on.
TEST(SlogSim, OrdererInsertsGlobalEntriesInIndexOrderAndSkips) {
  SimCluster c(tpcc("slog"), {}, false);
  c.net->start();
  c.net->run_until(50'000);
  const NodeId orderer = c.d.role_node(txn::slog::kOrderer, 0);
  const NodeId leader = c.d.role_nodes(txn::slog::kGlobalLog).at(0);
  std::mt19937_64 rng(4);
  auto ordered = [&](uint64_t index, const TxnRequest* t) {
    Envelope e;
    auto* o = e.mutable_slog()->mutable_ordered();
    o->set_global_index(index);
    if (t) {
      *o->mutable_entry()->mutable_txn() = *t;
      o->mutable_entry()->set_multi_home(true);
      o->mutable_entry()->set_global_index(index);
    }
    return e;
  };
  TxnRequest a = find_txn(*c.w, 0, true, rng), b = find_txn(*c.w, 0, true, rng);
  a.set_txn_id(11);
  b.set_txn_id(13);
  c.net->send(leader, orderer, ordered(3, &b));   // ahead of the gap at 1 and 2
  c.net->run_until(100'000);
  EXPECT_TRUE(c.replica(0, 0)->executor().history().empty()) << "an entry ahead of a gap was inserted";
  c.net->send(leader, orderer, ordered(2, nullptr));  // a skip: still the gap at 1
  c.net->run_until(150'000);
  EXPECT_TRUE(c.replica(0, 0)->executor().history().empty());
  c.net->send(leader, orderer, ordered(1, &a));
  c.net->run_until(200'000);
  std::vector<uint64_t> order;
  for (const auto& e : c.replica(0, 0)->executor().history())
    if (order.empty() || order.back() != e.txn) order.push_back(e.txn);
  ASSERT_GE(order.size(), 1u);
  EXPECT_EQ(order.front(), 11u) << "index 1 goes first";
  for (const auto& line : c.net->logs())  // (the handler knows neither transaction: their results are refused)
    EXPECT_EQ(line.find("global index"), std::string::npos) << line;
}

TEST(SlogSim, MalformedMessagesAreRejectedAndTheNodeKeepsWorking) {
  SimCluster c(txn::test::small_deployment("slog", "tpca"), {}, false);
  const NodeId client = c.d.clients().front();
  ProbeClient* pc = c.attach_probe(client);
  c.net->start();
  c.net->run_until(50'000);
  const NodeId handler = c.d.replica_id(0, 0);
  const NodeId orderer = c.d.role_node(txn::slog::kOrderer, 0);
  Envelope bad;  // a PieceResult for a transaction never submitted
  bad.mutable_slog()->mutable_piece_result()->set_txn_id(777);
  c.net->send(c.d.replica_id(1, 0), handler, bad);
  std::mt19937_64 rng(1);
  TxnRequest t = find_txn(*c.w, 0, false, rng);
  t.mutable_pieces(0)->set_shard(99);  // a shard that does not exist
  Envelope local;
  *local.mutable_slog()->mutable_to_local_log()->mutable_entry()->mutable_txn() = t;
  c.net->send(handler, orderer, local);
  TxnRequest crt = find_txn(*c.w, 0, true, rng);  // a multi-home txn sent as single-home
  Envelope wrong;
  *wrong.mutable_slog()->mutable_to_local_log()->mutable_entry()->mutable_txn() = crt;
  c.net->send(handler, orderer, wrong);
  Envelope nothing;  // an SLOG message with no body
  nothing.mutable_slog();
  c.net->send(c.d.replica_id(1, 0), handler, nothing);
  c.net->run_until(100'000);
  ASSERT_EQ(c.net->logs().size(), 4u);
  EXPECT_NE(c.net->logs()[0].find("PieceResult for unknown txn 777"), std::string::npos);
  EXPECT_NE(c.net->logs()[1].find("shard 99 out of range"), std::string::npos);
  EXPECT_NE(c.net->logs()[2].find("outside region 0"), std::string::npos);
  EXPECT_NE(c.net->logs()[3].find("empty SLOG message"), std::string::npos);
  TxnRequest good = find_txn(*c.w, 0, false, rng);
  c.net->send(client, handler, submit(good, 8));
  ASSERT_TRUE(c.net->run_until([&] { return pc->replies.count(8) == 1; }, 1'000'000));
}
