// Workload layer: generators, loaders, executor, dumps.
#include <gtest/gtest.h>

#include "serial_exec.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "workload/store.h"

using namespace txn;
using txn::wl::TpccStore;
using txn::wl::TpcaStore;
using txn::wl::AppendStore;

namespace {

Deployment dep(const std::string& name, uint32_t regions, uint32_t shards, double scale = 0.01) {
  Deployment d;
  d.regions = regions;
  d.shards_per_region = shards;
  d.workload.name = name;
  d.workload.scale = scale;
  return d;
}

std::vector<std::unique_ptr<ShardStore>> load_all(const Workload& w, const Deployment& d) {
  std::vector<std::unique_ptr<ShardStore>> s;
  for (uint32_t i = 0; i < d.n_shards(); ++i) s.push_back(w.load(i));
  return s;
}

void run(const Workload& w, std::vector<std::unique_ptr<ShardStore>>& stores, const TxnRequest& t) {
  txn::test::execute_serially(w, stores, t);
}

void expect_tpcc_consistent(const ShardStore& s) {
  const auto& st = dynamic_cast<const TpccStore&>(s);
  int64_t sum = 0;
  for (const auto& a : st.aggregates()) {
    sum += a.d_ytd;
    if (a.no_count > 0) {
      EXPECT_EQ(a.d_next_o_id - 1, a.max_o_id) << "district " << a.d_id;
      EXPECT_EQ(a.max_o_id, a.max_no_o_id) << "district " << a.d_id;
    }
    EXPECT_EQ(a.max_no_o_id - a.min_no_o_id + 1, a.no_count) << "district " << a.d_id;
    EXPECT_EQ(a.sum_ol_cnt, a.ol_count) << "district " << a.d_id;
    EXPECT_EQ(a.o_null_carrier, a.no_count) << "3.3.2.5 district " << a.d_id;
    EXPECT_EQ(a.no_with_carrier, 0) << "3.3.2.5 district " << a.d_id;
    EXPECT_EQ(a.ol_cnt_mismatch, 0) << "3.3.2.6 district " << a.d_id;
    EXPECT_EQ(a.ol_delivery_mismatch, 0) << "3.3.2.7 district " << a.d_id;
    EXPECT_EQ(a.d_ytd, a.sum_h_amount) << "3.3.2.9 district " << a.d_id;
    EXPECT_EQ(a.o_count - a.no_count, a.delivered_at_load + a.deliveries) << "3.3.2.11 district " << a.d_id;
    EXPECT_EQ(a.c_balance_mismatch, 0) << "3.3.2.12 district " << a.d_id;
  }
  EXPECT_EQ(st.w_ytd, sum) << "w_ytd != sum(d_ytd) on shard " << st.shard;
}

// 3.3.2.10 summed per customer district: sum(c_balance) = delivered amount - the
// HISTORY amounts its customers paid, wherever those rows are stored.
void expect_tpcc_balances(const std::vector<std::unique_ptr<ShardStore>>& stores) {
  std::map<std::pair<int32_t, int32_t>, int64_t> paid;
  for (const auto& s : stores)
    for (const auto& [k, v] : dynamic_cast<const TpccStore&>(*s).history_by_customer_district()) paid[k] += v;
  for (const auto& s : stores) {
    const auto& st = dynamic_cast<const TpccStore&>(*s);
    for (const auto& a : st.aggregates())
      EXPECT_EQ(a.sum_c_balance, a.sum_delivered_ol_amount - paid[std::make_pair(static_cast<int32_t>(st.shard), a.d_id)])
          << "3.3.2.10 w " << st.shard << " d " << a.d_id;
  }
}

bool is_crt(const Deployment& d, const TxnRequest& t) {
  for (const auto& p : t.pieces())
    if (d.region_of_shard(p.shard()) != d.region_of_shard(t.home_shard())) return true;
  return false;
}

// One op of an append piece, as the test reads args["ops"] (independently of the workload's parser).
struct AppendOp {
  bool read = false;
  int64_t key = 0;     // global key id g (conflict key "l<g>")
  int64_t value = 0;   // appends
};

// The ops of an append piece; a failure and nothing when the string is malformed.
std::vector<AppendOp> append_ops(const Piece& p) {
  static const std::regex op("(r) l(0|[1-9][0-9]*)|(a) l(0|[1-9][0-9]*) ([1-9][0-9]*)");
  std::vector<AppendOp> ops;
  if (!p.args().count("ops") || p.args().at("ops").v_case() != Value::kS) {
    ADD_FAILURE() << "piece " << p.id() << " has no ops string";
    return ops;
  }
  const std::string text = p.args().at("ops").s();
  size_t from = 0;
  for (;;) {
    const size_t at = text.find(';', from);
    const std::string item = text.substr(from, at == std::string::npos ? std::string::npos : at - from);
    std::smatch m;
    if (!std::regex_match(item, m, op)) {
      ADD_FAILURE() << "malformed op '" << item << "' in '" << text << "'";
      return {};
    }
    AppendOp o;
    o.read = m[1].matched;
    o.key = std::stoll(o.read ? m[2].str() : m[4].str());
    if (!o.read) o.value = std::stoll(m[5].str());
    ops.push_back(o);
    if (at == std::string::npos) break;
    from = at + 1;
  }
  return ops;
}

Piece append_piece(uint32_t shard, const std::string& ops, uint32_t id = 0) {
  Piece p;
  p.set_id(id);
  p.set_shard(shard);
  p.set_proc(1);
  (*p.mutable_args())["ops"] = wl::str_value(ops);
  return p;
}

google::protobuf::Struct parse_json(const std::string& text) {
  google::protobuf::Struct s;
  auto st = google::protobuf::util::JsonStringToMessage(text, &s);
  EXPECT_TRUE(st.ok()) << st.message() << "\n" << text.substr(0, 400);
  return s;
}

}  // namespace

TEST(Workload, FactoryRejectsUnknownName) {
  EXPECT_THROW(make_workload(dep("tpcx", 1, 2)), ConfigError);
  try {
    make_workload(dep("tpcx", 1, 2));
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "unknown workload 'tpcx' (known: tpcc, tpca, append)");
  }
  EXPECT_EQ(make_workload(dep("tpcc", 1, 2))->name(), "tpcc");
  EXPECT_EQ(make_workload(dep("tpca", 1, 2))->name(), "tpca");
  EXPECT_EQ(make_workload(dep("append", 1, 2))->name(), "append");
  // Only append asks the clients to log the outputs.
  EXPECT_FALSE(make_workload(dep("tpcc", 1, 2))->log_outputs());
  EXPECT_FALSE(make_workload(dep("tpca", 1, 2))->log_outputs());
  EXPECT_TRUE(make_workload(dep("append", 1, 2))->log_outputs());
}

TEST(Workload, TpccMixFrequencies) {
  auto d = dep("tpcc", 2, 2);
  auto w = make_workload(d);
  std::mt19937_64 g(1);
  std::vector<int> n(w->n_types());
  const int draws = 20000;
  for (int i = 0; i < draws; ++i) ++n[w->generate(g, {1, 3}).type()];
  const double expect[] = {0.44, 0.44, 0.04, 0.04, 0.04};
  for (uint32_t t = 0; t < w->n_types(); ++t)
    EXPECT_NEAR(n[t] / double(draws), expect[t], 0.015) << w->type_name(t);
}

TEST(Workload, TpccRemoteRatiosMatchDastFormula) {
  auto d = dep("tpcc", 4, 2);  // the artifact's R=4 x N=2
  auto w = make_workload(d);
  const double P = 8, N = 2, q = (P - N) / (P - 1);
  double no_expect = 0;
  for (int k = 6; k <= 15; ++k) no_expect += (1 - std::pow(1 - 0.01 * q, k)) / 10;
  std::mt19937_64 g(2);
  int no = 0, no_crt = 0, pay = 0, pay_crt = 0;
  for (int i = 0; i < 60000; ++i) {
    TxnRequest t = w->generate(g, {static_cast<uint32_t>(i % 8), static_cast<uint32_t>(i % 7)});
    if (t.type() == 0) { ++no; no_crt += t.crt(); }
    if (t.type() == 1) { ++pay; pay_crt += t.crt(); }
    if (t.type() > 1) { EXPECT_FALSE(t.crt()); }
  }
  EXPECT_NEAR(no_crt / double(no), no_expect, 0.01);      // ~8.6 %
  EXPECT_NEAR(pay_crt / double(pay), 0.15 * q, 0.01);     // ~12.9 %
}

TEST(Workload, PaymentCrtRateForcesMixAndRatio) {
  auto d = dep("tpcc", 3, 2);
  d.workload.payment_crt_rate = 30;
  auto w = make_workload(d);
  std::mt19937_64 g(3);
  int crt = 0, irt = 0, irt_multi = 0;
  const int draws = 20000;
  for (int i = 0; i < draws; ++i) {
    TxnRequest t = w->generate(g, {static_cast<uint32_t>(i % 6), 0});
    ASSERT_EQ(t.type(), 1u);
    if (t.crt()) { ++crt; continue; }
    ++irt;
    std::set<uint32_t> shards;
    for (const auto& p : t.pieces()) shards.insert(p.shard());
    irt_multi += shards.size() > 1;
  }
  EXPECT_NEAR(crt / double(draws), 0.30, 0.015);
  EXPECT_NEAR(irt_multi / double(irt), 0.15, 0.015);
}

TEST(Workload, CrtClassificationAndPieceStructure) {
  for (const char* name : {"tpcc", "tpca", "append"}) {
    auto d = dep(name, 3, 2);
    auto w = make_workload(d);
    std::mt19937_64 g(4);
    for (int i = 0; i < 5000; ++i) {
      const uint32_t home = i % 6;
      TxnRequest t = w->generate(g, {home, static_cast<uint32_t>(i)});
      ASSERT_EQ(t.home_shard(), home);
      EXPECT_EQ(t.crt(), is_crt(d, t)) << name;
      std::set<std::string> produced;
      for (int j = 0; j < t.pieces_size(); ++j) {
        const Piece& p = t.pieces(j);
        ASSERT_EQ(p.id(), static_cast<uint32_t>(j));
        ASSERT_LT(p.shard(), d.n_shards());
        // Inputs come from earlier pieces, so id order is always executable.
        for (const auto& in : p.inputs()) EXPECT_TRUE(produced.count(in)) << name << " input " << in;
        for (const auto& o : p.outputs()) produced.insert(o);
        EXPECT_FALSE(p.read_keys().empty() && p.write_keys().empty());
      }
    }
  }
}

TEST(Workload, ByNamePaymentHasCrossShardValueDependency) {
  auto d = dep("tpcc", 3, 2);
  d.workload.payment_crt_rate = 100;
  d.workload.by_name_prob = 1.0;
  auto w = make_workload(d);
  std::mt19937_64 g(5);
  TxnRequest t = w->generate(g, {0, 0});
  ASSERT_TRUE(t.crt());
  const Piece *lookup = nullptr, *cust = nullptr, *hist = nullptr;
  for (const auto& p : t.pieces()) {
    for (const auto& o : p.outputs()) if (o == "c_id") lookup = &p;
    if (!p.inputs().empty() && p.shard() != 0) cust = &p;
    if (p.shard() == 0 && !p.inputs().empty()) hist = &p;
  }
  ASSERT_TRUE(lookup && cust && hist);
  EXPECT_NE(d.region_of_shard(lookup->shard()), 0u);
  EXPECT_EQ(cust->shard(), lookup->shard());
  EXPECT_EQ(std::vector<std::string>(cust->inputs().begin(), cust->inputs().end()),
            std::vector<std::string>{"c_id"});
  std::set<std::string> hin(hist->inputs().begin(), hist->inputs().end());
  EXPECT_EQ(hin, (std::set<std::string>{"c_id", "w_name", "d_name"}));
  bool name_key = false;
  for (const auto& k : lookup->read_keys()) name_key |= k.rfind("cust_name:", 0) == 0;
  EXPECT_TRUE(name_key);
  // Executing it moves the payment onto the customer the lookup chose.
  auto stores = load_all(*w, d);
  run(*w, stores, t);
  auto& h = dynamic_cast<TpccStore&>(*stores[0]).history.back();
  EXPECT_EQ(h.c_w, static_cast<int32_t>(lookup->shard()));
  EXPECT_EQ(h.data, "W0    D0-0");
}

TEST(Workload, OnlyTheHistoryInsertCommutes) {
  auto d = dep("tpcc", 3, 2);
  auto w = make_workload(d);
  std::mt19937_64 g(8);
  int history = 0;
  for (int i = 0; i < 2000; ++i) {
    TxnRequest t = w->generate(g, {static_cast<uint32_t>(i % 6), 0});
    for (const auto& p : t.pieces()) {
      bool is_history = p.write_keys_size() == 1 && p.write_keys(0).rfind("history:", 0) == 0;
      EXPECT_EQ(w->commutes(p), is_history) << "txn type " << t.type() << " proc " << p.proc();
      if (w->commutes(p)) {
        ++history;
        EXPECT_TRUE(p.outputs().empty());
        EXPECT_TRUE(p.read_keys().empty());
      }
    }
  }
  EXPECT_GT(history, 500);
  for (const char* name : {"tpca", "append"}) {
    auto a = dep(name, 3, 2);
    auto other = make_workload(a);
    for (int i = 0; i < 200; ++i) {
      TxnRequest t = other->generate(g, {0, 0});
      for (const auto& p : t.pieces()) EXPECT_FALSE(other->commutes(p)) << name;
    }
  }
}

TEST(Workload, PaymentsInEitherOrderGiveOneDigest) {
  // Payments on one warehouse commute (sums and a HISTORY bag), so replicas that
  // apply a deferred HISTORY insert at different moments still agree.
  auto d = dep("tpcc", 1, 1);
  d.workload.payment_crt_rate = 0;   // Payments only, all on the home shard
  d.workload.by_name_prob = 0;
  auto w = make_workload(d);
  std::mt19937_64 g(4);
  TxnRequest x = w->generate(g, {0, 0}), y = w->generate(g, {0, 0});
  auto s1 = load_all(*w, d), s2 = load_all(*w, d);
  run(*w, s1, x);
  run(*w, s1, y);
  run(*w, s2, y);
  run(*w, s2, x);
  EXPECT_NE(dynamic_cast<TpccStore&>(*s1[0]).history.back().amount,
            dynamic_cast<TpccStore&>(*s2[0]).history.back().amount);
  EXPECT_EQ(s1[0]->digest(), s2[0]->digest());
  run(*w, s2, x);  // one row more is a different state
  EXPECT_NE(s1[0]->digest(), s2[0]->digest());
}

TEST(Workload, ZipfSkewMatchesPmf) {
  const int64_t n = 1000;
  const int draws = 200000;
  double f0[2];
  int i = 0;
  for (double a : {0.5, 0.9}) {
    wl::ZipfSampler z(a, n);
    std::mt19937_64 g(6);
    std::vector<int> cnt(n);
    for (int k = 0; k < draws; ++k) ++cnt[z(g)];
    for (int64_t r : {0, 1, 2, 10, 100}) {
      const double p = z.pmf(r);
      EXPECT_NEAR(cnt[r] / double(draws), p, 4 * std::sqrt(p / draws) + 1e-4) << "alpha " << a << " rank " << r;
    }
    double h = 0;
    for (int64_t r = 0; r < n; ++r) h += std::pow(r + 1.0, -a);
    EXPECT_NEAR(z.pmf(0), 1 / h, 1e-9);
    f0[i++] = cnt[0] / double(draws);
  }
  EXPECT_GT(f0[1], f0[0]);
  EXPECT_THROW(wl::ZipfSampler(1.2, 10), ConfigError);
  EXPECT_THROW(wl::ZipfSampler(-0.1, 10), ConfigError);
}

TEST(Workload, TpcaIrtCrtSplit) {
  auto d = dep("tpca", 3, 2);
  d.workload.zipf = 0.9;
  auto w = make_workload(d);
  std::mt19937_64 g(7);
  int crt = 0;
  const int draws = 20000;
  for (int i = 0; i < draws; ++i) {
    const uint32_t home = i % 6;
    TxnRequest t = w->generate(g, {home, 0});
    ASSERT_EQ(t.pieces_size(), 3);
    bool at_home = false;
    std::set<int64_t> deltas;
    for (const auto& p : t.pieces()) {
      at_home |= p.shard() == home;
      EXPECT_EQ(p.args().at("key").i() % 6, p.shard());
      deltas.insert(p.args().at("delta").i());
    }
    EXPECT_TRUE(at_home);
    EXPECT_EQ(deltas.size(), 1u);
    crt += t.crt();
  }
  EXPECT_NEAR(crt / double(draws), 0.10, 0.01);
  // One region: every transaction is an IRT.
  auto d1 = dep("tpca", 1, 4);
  auto w1 = make_workload(d1);
  for (int i = 0; i < 200; ++i) EXPECT_FALSE(w1->generate(g, {1, 0}).crt());
}

TEST(Workload, TpccInitialStateSatisfiesConditions) {
  auto d = dep("tpcc", 2, 2);
  auto w = make_workload(d);
  auto t0 = std::chrono::steady_clock::now();
  auto s = w->load(3);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  expect_tpcc_consistent(*s);
  const auto& st = dynamic_cast<const TpccStore&>(*s);
  EXPECT_EQ(st.customer.size(), 300u);
  EXPECT_EQ(st.stock.size(), 1000u);
  EXPECT_EQ(st.item_price.size(), 1000u);
  auto a = st.aggregates()[0];
  EXPECT_EQ(a.d_next_o_id, 31);
  EXPECT_EQ(a.no_count, 9);
  EXPECT_EQ(a.min_no_o_id, 22);
  EXPECT_EQ(w->load(3)->digest(), s->digest());  // deterministic
  EXPECT_NE(w->load(2)->digest(), s->digest());
  EXPECT_EQ(dynamic_cast<const TpccStore&>(*w->load(0)).item_price, st.item_price);  // replicated ITEM
  const std::string j = s->dump_json();
  EXPECT_NE(j.find("\"digest\": \"" + s->digest() + "\""), std::string::npos);
  EXPECT_NE(j.find("\"w_ytd\": 3000.00"), std::string::npos);
  EXPECT_NE(j.find("\"d_next_o_id\": 31, \"max_o_id\": 30, \"max_no_o_id\": 30, \"min_no_o_id\": 22, "
                   "\"no_count\": 9"), std::string::npos) << j.substr(0, 600);
}

TEST(Workload, ReplayIsDeterministicAndKeepsConsistency) {
  for (const char* name : {"tpcc", "tpca", "tpcc-uniform", "append"}) {
    const bool uniform = std::string(name) == "tpcc-uniform";
    auto d = dep(uniform ? "tpcc" : name, 2, 2);
    if (uniform) d.workload.district = "uniform";
    auto w = make_workload(d);
    auto a = load_all(*w, d), b = load_all(*w, d);
    std::vector<std::string> initial;
    for (auto& s : a) initial.push_back(s->digest());
    std::mt19937_64 g(8);
    std::vector<TxnRequest> txns;
    for (int i = 0; i < 4000; ++i) txns.push_back(w->generate(g, {static_cast<uint32_t>(i % 4), static_cast<uint32_t>(i % 10)}));
    for (const auto& t : txns) run(*w, a, t);
    for (const auto& t : txns) run(*w, b, t);
    int64_t total_delta[3] = {0, 0, 0};
    int64_t appends = 0, elements = 0;
    if (d.workload.name == "append")
      for (const auto& t : txns)
        for (const auto& p : t.pieces())
          for (const auto& op : append_ops(p)) appends += !op.read;
    for (uint32_t s = 0; s < d.n_shards(); ++s) {
      EXPECT_EQ(a[s]->digest(), b[s]->digest()) << name << " shard " << s;
      EXPECT_NE(a[s]->digest(), initial[s]) << name << " shard " << s;
      EXPECT_EQ(a[s]->dump_json(), b[s]->dump_json());
      if (d.workload.name == "tpcc") {
        expect_tpcc_consistent(*a[s]);
      } else if (d.workload.name == "append") {
        const auto& st = dynamic_cast<const AppendStore&>(*a[s]);
        for (int64_t i = 0; i < st.keys(); ++i) elements += static_cast<int64_t>(st.list(i).size());
      } else {
        const auto& st = dynamic_cast<const TpcaStore&>(*a[s]);
        for (int k = 0; k < 3; ++k) {
          EXPECT_EQ(st.table[k].sum() - st.table[k].initial_sum, st.table[k].applied_delta);
          total_delta[k] += st.table[k].applied_delta;
        }
      }
    }
    if (d.workload.name == "tpcc") expect_tpcc_balances(a);
    EXPECT_EQ(elements, appends) << "every append is in its list once";
    EXPECT_EQ(total_delta[0], total_delta[1]);
    EXPECT_EQ(total_delta[1], total_delta[2]);
  }
}

TEST(Workload, TpccDistrictFixedPerCoordinatorOrUniformPerTransaction) {
  auto district_of = [](const TxnRequest& t) {
    for (const auto& p : t.pieces())
      if (p.args().count("d")) return p.args().at("d").i();
    return int64_t{-1};
  };
  for (const char* mode : {"fixed", "uniform"}) {
    auto d = dep("tpcc", 1, 2);
    d.workload.district = mode;
    auto w = make_workload(d);
    std::mt19937_64 g(4);
    std::set<int64_t> seen;
    for (int i = 0; i < 500; ++i) {
      TxnRequest t = w->generate(g, {0, 13});   // coordinator 13: fixed district 3
      seen.insert(district_of(t));
    }
    if (std::string(mode) == "fixed") EXPECT_EQ(seen, std::set<int64_t>{3});
    else EXPECT_EQ(seen.size(), 10u) << "uniform draws every district";
  }
  auto d = dep("tpcc", 1, 2);
  d.workload.district = "roundrobin";
  EXPECT_THROW(make_workload(d), ConfigError);
}

TEST(Workload, BadPiecesThrowBadMessageAndLeaveStateUnchanged) {
  for (const char* name : {"tpcc", "tpca", "append"}) {
    auto d = dep(name, 1, 2);
    auto w = make_workload(d);
    auto s = w->load(0);
    const std::string before = s->digest();
    std::mt19937_64 g(9);
    TxnRequest t = w->generate(g, {0, 0});
    Piece p = t.pieces(0);
    Vars out;
    Piece unknown = p;
    unknown.set_proc(999);
    EXPECT_THROW(w->execute(*s, unknown, unknown.args(), &out), BadMessage) << name;
    for (const auto& [k, _] : p.args()) {
      Vars missing = p.args();
      missing.erase(k);
      EXPECT_THROW(w->execute(*s, p, missing, &out), BadMessage) << name << " without " << k;
    }
    Vars wrong = p.args();
    wrong[wrong.begin()->first] = wl::str_value("x");
    EXPECT_THROW(w->execute(*s, p, wrong, &out), BadMessage) << name;
    EXPECT_EQ(s->digest(), before);
  }
  // A Payment history piece without its input variable.
  auto d = dep("tpcc", 1, 2);
  d.workload.payment_crt_rate = 0;
  auto w = make_workload(d);
  auto s = w->load(0);
  std::mt19937_64 g(10);
  TxnRequest t = w->generate(g, {0, 0});
  const Piece& h = t.pieces(t.pieces_size() - 1);
  ASSERT_FALSE(h.inputs().empty());
  Vars out;
  EXPECT_THROW(w->execute(*s, h, h.args(), &out), BadMessage);
}

TEST(Workload, DeliveryDrainsDistrictAndStaysConsistent) {
  auto d = dep("tpcc", 1, 2);
  d.workload.mix = {0, 0, 1, 0, 0};   // Delivery only
  auto w = make_workload(d);
  auto stores = load_all(*w, d);
  std::mt19937_64 g(11);
  const auto& st = dynamic_cast<const TpccStore&>(*stores[0]);
  for (int i = 0; i < 12; ++i) run(*w, stores, w->generate(g, {0, 4}));   // 9 new orders in district 4
  auto a = st.aggregates()[4];
  EXPECT_EQ(a.no_count, 0);
  EXPECT_EQ(a.max_no_o_id - a.min_no_o_id + 1, 0);
  expect_tpcc_consistent(*stores[0]);
  expect_tpcc_balances(stores);
  EXPECT_EQ(a.deliveries, 9);
  for (const auto& [k, o] : st.order) EXPECT_TRUE(k.first != 4 || o.carrier > 0);
}

// ---- append (list-append, docs/workloads.md) ------------------------------------------------

TEST(Workload, AppendGeneratesWellFormedTransactions) {
  auto d = dep("append", 3, 2);   // P = 6
  d.workload.append_keys = 5;
  d.workload.append_crt_ratio = 0.3;
  auto w = make_workload(d);
  ASSERT_EQ(w->n_types(), 1u);
  EXPECT_EQ(w->type_name(0), "append");
  const uint32_t P = d.n_shards();
  std::mt19937_64 g(12);
  std::set<int64_t> values;
  std::set<int64_t> keys_seen;
  std::map<int, int> irt_pieces, crt_pieces, ops_per_piece;
  int crt = 0, reads = 0, appends = 0;
  const int draws = 6000;
  for (int i = 0; i < draws; ++i) {
    const uint32_t home = i % P;
    TxnRequest t = w->generate(g, {home, static_cast<uint32_t>(i)});
    ASSERT_EQ(t.type(), 0u);
    ASSERT_EQ(t.home_shard(), home);
    ASSERT_EQ(t.crt(), is_crt(d, t)) << "the crt flag is the real classification";
    ASSERT_GE(t.pieces_size(), t.crt() ? 2 : 1);
    ASSERT_LE(t.pieces_size(), 3);
    ASSERT_EQ(t.pieces(0).shard(), home) << "the home shard first";
    crt += t.crt();
    ++(t.crt() ? crt_pieces : irt_pieces)[t.pieces_size()];
    std::set<uint32_t> shards;
    for (int j = 0; j < t.pieces_size(); ++j) {
      const Piece& p = t.pieces(j);
      ASSERT_EQ(p.id(), static_cast<uint32_t>(j));
      ASSERT_EQ(p.proc(), 1u);
      ASSERT_LT(p.shard(), P);
      EXPECT_TRUE(shards.insert(p.shard()).second) << "one piece per shard";
      if (!t.crt()) {
        EXPECT_EQ(d.region_of_shard(p.shard()), d.region_of_shard(home)) << "an IRT stays home";
      }
      EXPECT_EQ(p.args_size(), 1);
      EXPECT_TRUE(p.inputs().empty());
      const std::vector<AppendOp> ops = append_ops(p);
      ASSERT_GE(ops.size(), 1u);
      ASSERT_LE(ops.size(), 4u);
      ++ops_per_piece[static_cast<int>(ops.size())];
      std::vector<std::string> want_reads, want_writes, want_outputs;
      for (size_t k = 0; k < ops.size(); ++k) {
        const AppendOp& op = ops[k];
        EXPECT_EQ(op.key % P, p.shard()) << "key on the piece's shard";
        EXPECT_LT(op.key / P, 5) << "one of the shard's keys";
        keys_seen.insert(op.key);
        const std::string key = "l" + std::to_string(op.key);
        auto& list = op.read ? want_reads : want_writes;
        if (std::find(list.begin(), list.end(), key) == list.end()) list.push_back(key);
        if (op.read) {
          ++reads;
          want_outputs.push_back("r" + std::to_string(j) + "_" + std::to_string(k));
        } else {
          ++appends;
          EXPECT_GE(op.value, 1);
          EXPECT_LT(op.value, int64_t{1} << 62);
          EXPECT_TRUE(values.insert(op.value).second) << "value " << op.value << " appended twice";
        }
      }
      EXPECT_EQ(std::vector<std::string>(p.read_keys().begin(), p.read_keys().end()), want_reads);
      EXPECT_EQ(std::vector<std::string>(p.write_keys().begin(), p.write_keys().end()), want_writes);
      EXPECT_EQ(std::vector<std::string>(p.outputs().begin(), p.outputs().end()), want_outputs);
    }
    if (t.crt()) {
      bool away = false;
      for (const auto& p : t.pieces()) away |= d.region_of_shard(p.shard()) != d.region_of_shard(home);
      EXPECT_TRUE(away);
    }
  }
  EXPECT_NEAR(crt / double(draws), 0.3, 0.02);
  // k uniform in 1..3: an IRT has at most 2 pieces here (2 shards per region), a CRT at least 2.
  const int irt = draws - crt;
  EXPECT_EQ(irt_pieces.count(3), 0u);
  EXPECT_NEAR(irt_pieces[1] / double(irt), 1 / 3.0, 0.03);
  EXPECT_NEAR(crt_pieces[2] / double(crt), 2 / 3.0, 0.04);
  EXPECT_NEAR(crt_pieces[3] / double(crt), 1 / 3.0, 0.04);
  int pieces = 0;
  for (const auto& [n, c] : ops_per_piece) pieces += c;
  for (int n = 1; n <= 4; ++n) EXPECT_NEAR(ops_per_piece[n] / double(pieces), 0.25, 0.03) << n << " ops";
  EXPECT_NEAR(reads / double(reads + appends), 0.5, 0.02);
  EXPECT_EQ(keys_seen.size(), static_cast<size_t>(5 * P)) << "every key is drawn";

  // One region: never a CRT. One shard per region: an IRT has one piece.
  auto d1 = dep("append", 1, 4);
  d1.workload.append_crt_ratio = 1;
  auto w1 = make_workload(d1);
  for (int i = 0; i < 300; ++i) EXPECT_FALSE(w1->generate(g, {1, 0}).crt());
  auto d2 = dep("append", 3, 1);
  d2.workload.append_crt_ratio = 0.5;
  auto w2 = make_workload(d2);
  for (int i = 0; i < 300; ++i) {
    TxnRequest t = w2->generate(g, {static_cast<uint32_t>(i % 3), 0});
    EXPECT_EQ(t.crt(), is_crt(d2, t));
    if (t.crt()) {
      EXPECT_GE(t.pieces_size(), 2);
    } else {
      EXPECT_EQ(t.pieces_size(), 1);
    }
  }
  // The workload checks its knobs itself (deployments built in code skip validate()).
  for (auto [knob, set] : std::vector<std::pair<std::string, std::function<void(WorkloadConfig&)>>>{
           {"workload.append_keys", [](WorkloadConfig& c) { c.append_keys = 0; }},
           {"workload.append_crt_ratio", [](WorkloadConfig& c) { c.append_crt_ratio = 1.01; }},
           {"workload.append_read_tail", [](WorkloadConfig& c) { c.append_read_tail = 65; }}}) {
    auto bad = dep("append", 1, 2);
    set(bad.workload);
    try {
      make_workload(bad);
      ADD_FAILURE() << knob << " not checked";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(knob + ": ", 0), 0u) << e.what();
    }
  }
  // Same seed, same transactions.
  std::mt19937_64 x(5), y(5);
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(w->generate(x, {2, 0}).SerializeAsString(), w->generate(y, {2, 0}).SerializeAsString());
}

TEST(Workload, AppendExecuteReadsTheTailAndItsOwnAppends) {
  auto d = dep("append", 1, 2);   // P = 2: shard 0 holds l0, l2, l4
  d.workload.append_keys = 3;
  d.workload.append_read_tail = 2;
  auto w = make_workload(d);
  auto s = w->load(0);
  const auto& st = dynamic_cast<const AppendStore&>(*s);
  Vars out;
  Piece p = append_piece(0, "r l0;a l0 5;r l0;a l0 7;a l0 9;r l0;r l2;a l4 11", 1);
  w->execute(*s, p, p.args(), &out);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out.at("r1_0").s(), "0");
  EXPECT_EQ(out.at("r1_2").s(), "1:5") << "a read sees its piece's earlier append";
  EXPECT_EQ(out.at("r1_5").s(), "3:7,9") << "the last append_read_tail elements, in list order";
  EXPECT_EQ(out.at("r1_6").s(), "0");
  EXPECT_EQ(st.list(0), (std::vector<int64_t>{5, 7, 9}));
  EXPECT_EQ(st.list(1), std::vector<int64_t>{});
  EXPECT_EQ(st.list(2), std::vector<int64_t>{11});
  EXPECT_EQ(st.executed, 1u);
  // A later piece sees the earlier one's appends.
  out.clear();
  Piece q = append_piece(0, "r l4;r l0", 0);
  w->execute(*s, q, q.args(), &out);
  EXPECT_EQ(out.at("r0_0").s(), "1:11");
  EXPECT_EQ(out.at("r0_1").s(), "3:7,9");

  // append_read_tail 0: the length only; a tail longer than the list: the whole list.
  auto d0 = d;
  d0.workload.append_read_tail = 0;
  auto w0 = make_workload(d0);
  auto s0 = w0->load(1);
  out.clear();
  Piece r = append_piece(1, "a l3 4;a l3 6;r l3;r l1");
  w0->execute(*s0, r, r.args(), &out);
  EXPECT_EQ(out.at("r0_2").s(), "2");
  EXPECT_EQ(out.at("r0_3").s(), "0");
  auto d64 = d;
  d64.workload.append_read_tail = 64;
  auto w64 = make_workload(d64);
  auto s64 = w64->load(1);
  out.clear();
  w64->execute(*s64, r, r.args(), &out);
  EXPECT_EQ(out.at("r0_2").s(), "2:4,6");

  // Malformed ops, keys of another shard or none, bad values: BadMessage, nothing applied.
  const std::string before = s->digest();
  for (const char* bad : {"", ";", "r l0;", "x l0", "r", "r l0 5", "a l0", "a l0 0", "a l0 -1", "a l0 +3",
                          "a l0 4611686018427387904", "a l0 99999999999999999999", "a l0 12x", "r l1", "r l6",
                          "r 0", "r l", "r l00", "r  l0", "R l0", "r l0\n", "a l2 5;r l3", "a l2 5;a l2 1 2"}) {
    Piece b = append_piece(0, bad);
    out.clear();
    EXPECT_THROW(w->execute(*s, b, b.args(), &out), BadMessage) << "'" << bad << "'";
    EXPECT_TRUE(out.empty()) << bad;
  }
  EXPECT_EQ(s->digest(), before);
  EXPECT_EQ(st.executed, 2u);
  Piece largest = append_piece(0, "a l2 4611686018427387903");   // 2^62 - 1
  EXPECT_NO_THROW(w->execute(*s, largest, largest.args(), &out));
  Piece elsewhere = append_piece(1, "r l1");
  EXPECT_THROW(w->execute(*s, elsewhere, elsewhere.args(), &out), BadMessage) << "a piece for another shard";
  EXPECT_THROW(w->execute(*s0, p, p.args(), &out), BadMessage) << "shard 0's piece on shard 1";
  Vars no_ops;
  EXPECT_THROW(w->execute(*s, q, no_ops, &out), BadMessage);
  Vars int_ops;
  int_ops["ops"] = wl::int_value(3);
  EXPECT_THROW(w->execute(*s, q, int_ops, &out), BadMessage);
  Piece proc2 = q;
  proc2.set_proc(2);
  EXPECT_THROW(w->execute(*s, proc2, proc2.args(), &out), BadMessage);
}

TEST(Workload, AppendDumpListsEveryKeyAndClonesAreIndependent) {
  auto d = dep("append", 2, 2);   // P = 4: shard 1 holds l1, l5, l9
  d.workload.append_keys = 3;
  auto w = make_workload(d);
  auto s = w->load(1);
  const std::string empty = s->digest();
  Vars out;
  Piece p = append_piece(1, "a l5 4611686018427387903;a l5 2;a l1 7");
  w->execute(*s, p, p.args(), &out);
  const std::string j = s->dump_json();
  const google::protobuf::Struct json = parse_json(j);
  const auto& f = json.fields();
  EXPECT_EQ(f.at("shard").number_value(), 1);
  EXPECT_EQ(f.at("workload").string_value(), "append");
  EXPECT_EQ(f.at("digest").string_value(), s->digest());
  EXPECT_EQ(f.at("rows").struct_value().fields().at("lists").number_value(), 3);
  EXPECT_EQ(f.at("rows").struct_value().fields().at("elements").number_value(), 3);
  EXPECT_EQ(f.at("executed_pieces").number_value(), 1);
  const auto& lists = f.at("append").struct_value().fields().at("lists").struct_value().fields();
  std::set<std::string> keys;
  for (const auto& [k, _] : lists) keys.insert(k);
  EXPECT_EQ(keys, (std::set<std::string>{"l1", "l5", "l9"})) << "every key of the shard";
  EXPECT_EQ(lists.at("l9").list_value().values_size(), 0);
  ASSERT_EQ(lists.at("l1").list_value().values_size(), 1);
  EXPECT_EQ(lists.at("l1").list_value().values(0).number_value(), 7);
  EXPECT_NE(j.find("\"l5\": [4611686018427387903, 2]"), std::string::npos) << "exact integers: " << j;
  EXPECT_NE(j.find("\"l9\": []"), std::string::npos) << j;

  // The digest covers every list in order; a clone is a copy that changes alone.
  EXPECT_NE(s->digest(), empty);
  auto other = w->load(1);
  Piece swapped = append_piece(1, "a l5 2;a l5 4611686018427387903;a l1 7");
  w->execute(*other, swapped, swapped.args(), &out);
  EXPECT_NE(other->digest(), s->digest()) << "the order of a list's elements matters";
  auto copy = s->clone();
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(copy->digest(), s->digest());
  const std::string original = s->dump_json();
  Piece more = append_piece(1, "a l5 8;a l9 9;r l5");
  out.clear();
  w->execute(*copy, more, more.args(), &out);
  EXPECT_EQ(out.at("r0_2").s(), "3:4611686018427387903,2,8");
  EXPECT_EQ(s->dump_json(), original) << "appending to a clone leaves the store alone";
  out.clear();
  w->execute(*s, more, more.args(), &out);
  EXPECT_EQ(s->digest(), copy->digest());
  EXPECT_EQ(dynamic_cast<const AppendStore&>(*copy).list(1), (std::vector<int64_t>{4611686018427387903, 2, 8}));
}

// New-Order's lines travel as one argument, "i:sw:q,...": executed as generated they make an order of ol_cnt
// lines; any other text (a field missing or out of range, a stray separator, a count that differs from ol_cnt)
// is a bad message, and the store is left as it was.
TEST(Workload, NewOrderLinesAreOneArgumentCheckedWhole) {
  auto d = dep("tpcc", 1, 2);
  d.workload.mix = {100, 0, 0, 0, 0};
  auto w = make_workload(d);
  std::mt19937_64 g(9);
  TxnRequest t = w->generate(g, {0, 0});
  const Piece& home = t.pieces(0);
  ASSERT_EQ(home.args().count("lines"), 1u);
  const int64_t n = home.args().at("ol_cnt").i();
  const std::string lines = home.args().at("lines").s();
  EXPECT_EQ(std::count(lines.begin(), lines.end(), ','), n - 1);
  EXPECT_EQ(home.args().size(), 4u) << "d, c_id, ol_cnt, lines";
  auto store = w->load(0);
  Vars out;
  w->execute(*store, home, home.args(), &out);
  const auto& s = dynamic_cast<TpccStore&>(*store);
  const int32_t o = static_cast<int32_t>(out.at("o_id").i());
  const int32_t dist = static_cast<int32_t>(home.args().at("d").i());
  EXPECT_EQ(s.order.at({dist, o}).ol_cnt, n);
  const std::string first = lines.substr(0, lines.find(','));
  for (const std::string& bad : {std::string(""), first, lines + ",", "," + lines, lines + "," + first,
                                "x" + lines.substr(1), lines.substr(0, lines.rfind(':')) + ":101",
                                lines.substr(0, lines.rfind(':')) + ":0", "-1" + lines.substr(lines.find(':')),
                                lines.substr(0, lines.find(':')) + "::" + lines.substr(lines.find(':') + 1)}) {
    SCOPED_TRACE(bad);
    Vars v = home.args();
    v["lines"] = txn::wl::str_value(bad);
    const std::string before = store->digest();
    Vars o2;
    EXPECT_THROW(w->execute(*store, home, v, &o2), BadMessage);
    EXPECT_EQ(store->digest(), before);
  }
  // The lines of a request logged before 2026-11-27, a field per entry (i<k>, sw<k>, q<k>), still execute, and
  // alike: a run folder of then replays as it ran.
  Vars old;
  for (const char* k : {"d", "c_id", "ol_cnt"}) old[k] = home.args().at(k);
  {
    std::string rest = lines;
    for (int64_t l = 0; l < n; ++l) {
      const std::string item = rest.substr(0, rest.find(','));
      rest = rest.find(',') == std::string::npos ? "" : rest.substr(rest.find(',') + 1);
      const size_t a = item.find(':'), b = item.rfind(':');
      old["i" + std::to_string(l)] = txn::wl::int_value(std::stoll(item.substr(0, a)));
      old["sw" + std::to_string(l)] = txn::wl::int_value(std::stoll(item.substr(a + 1, b - a - 1)));
      old["q" + std::to_string(l)] = txn::wl::int_value(std::stoll(item.substr(b + 1)));
    }
  }
  auto s1 = w->load(0), s2 = w->load(0);
  Vars o1, o2;
  w->execute(*s1, home, home.args(), &o1);
  w->execute(*s2, home, old, &o2);
  EXPECT_EQ(s1->digest(), s2->digest());
  EXPECT_EQ(outputs_digest(o1), outputs_digest(o2));
}

// New-Order updates stock with one piece per supplying shard that holds that shard's lines, in the home piece's
// form: together the stock pieces carry exactly the home piece's lines, each on the shard that supplies it, and
// they update the stock as the line-per-piece requests of runs before 2026-11-28 did (still executed, for their
// logs' replay); lines naming another shard, or none, are a bad message that leaves the store as it was.
TEST(Workload, NewOrderStockPiecePerSupplyingShard) {
  auto d = dep("tpcc", 1, 4);
  d.workload.mix = {100, 0, 0, 0, 0};
  d.workload.remote_item_prob = 0.5;
  auto w = make_workload(d);
  std::mt19937_64 g(5);
  auto parse = [](const std::string& text) {
    std::vector<std::array<int64_t, 3>> out;
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) {
      std::array<int64_t, 3> x{};
      char c1, c2;
      std::stringstream(item) >> x[0] >> c1 >> x[1] >> c2 >> x[2];
      out.push_back(x);
    }
    return out;
  };
  int multi = 0;
  for (int k = 0; k < 200; ++k) {
    const uint32_t home_shard = static_cast<uint32_t>(k % 4);
    TxnRequest t = w->generate(g, {home_shard, 0});
    const Piece& home = t.pieces(0);
    auto want = parse(home.args().at("lines").s());
    std::vector<std::array<int64_t, 3>> got;
    std::set<uint32_t> shards;
    auto stores = load_all(*w, d), per_line = load_all(*w, d);
    for (int j = 1; j < t.pieces_size(); ++j) {
      const Piece& p = t.pieces(j);
      EXPECT_TRUE(shards.insert(p.shard()).second) << "one piece per supplying shard";
      EXPECT_EQ(p.args().at("remote").i(), p.shard() != home_shard);
      auto lines = parse(p.args().at("lines").s());
      std::set<std::string> rows;
      for (const auto& x : lines) {
        EXPECT_EQ(x[1], p.shard());
        got.push_back(x);
        rows.insert("stock:" + std::to_string(x[1]) + ":" + std::to_string(x[0]));
      }
      EXPECT_EQ(std::set<std::string>(p.write_keys().begin(), p.write_keys().end()), rows);
      EXPECT_EQ(p.write_keys_size(), static_cast<int>(rows.size())) << "each row once";
      rows.insert("stock:" + std::to_string(p.shard()));
      EXPECT_EQ(std::set<std::string>(p.read_keys().begin(), p.read_keys().end()), rows);
      Vars out;
      w->execute(*stores[p.shard()], p, p.args(), &out);
      for (const auto& x : lines) {   // the same lines as pieces of a run before 2026-11-28 (proc 2, a line each)
        Piece old;
        old.set_shard(p.shard());
        old.set_proc(2);
        (*old.mutable_args())["i_id"] = txn::wl::int_value(x[0]);
        (*old.mutable_args())["qty"] = txn::wl::int_value(x[2]);
        (*old.mutable_args())["remote"] = txn::wl::int_value(p.shard() != home_shard);
        Vars o2;
        w->execute(*per_line[p.shard()], old, old.args(), &o2);
      }
    }
    multi += shards.size() > 1;
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, want) << "the stock pieces hold the order's lines, each once";
    for (uint32_t s = 0; s < 4; ++s) EXPECT_EQ(stores[s]->digest(), per_line[s]->digest()) << "shard " << s;
  }
  EXPECT_GT(multi, 50) << "orders with remote lines have a piece per supplying shard";

  // Malformed: a line of another shard, no line, a stray separator; the store is left alone.
  TxnRequest t = w->generate(g, {0, 0});
  const Piece& p = t.pieces(1);
  auto store = w->load(p.shard());
  const std::string lines = p.args().at("lines").s();
  const std::string other = "1:" + std::to_string((p.shard() + 1) % 4) + ":1";
  for (const std::string& bad : {std::string(""), lines + "," + other, other + "," + lines, lines + ","}) {
    SCOPED_TRACE(bad);
    Vars v = p.args();
    v["lines"] = txn::wl::str_value(bad);
    const std::string before = store->digest();
    Vars o;
    EXPECT_THROW(w->execute(*store, p, v, &o), BadMessage);
    EXPECT_EQ(store->digest(), before);
  }
}

// A store's snapshot (ShardStore::encode, what a restarted replica takes over) decodes into a store of the same
// workload and shard that is the same state: its digest, its dump, and what the next transactions do to it. Bytes
// of another shard, cut short or with bytes over, are refused and change nothing.
TEST(Workload, EveryStoreEncodesItsWholeStateAndDecodesItBack) {
  for (const char* name : {"tpcc", "tpca", "append"}) {
    auto d = dep(name, 2, 2);
    auto w = make_workload(d);
    auto a = load_all(*w, d);
    std::mt19937_64 g(3);
    for (int i = 0; i < 1500; ++i) run(*w, a, w->generate(g, {static_cast<uint32_t>(i % 4), static_cast<uint32_t>(i % 10)}));
    auto b = load_all(*w, d);
    for (uint32_t s = 0; s < d.n_shards(); ++s) {
      std::string bytes;
      ASSERT_TRUE(a[s]->encode(&bytes)) << name;
      EXPECT_NE(b[s]->digest(), a[s]->digest()) << name << ": the run changed nothing";
      const std::string before = b[s]->digest();
      EXPECT_FALSE(b[(s + 1) % d.n_shards()]->decode(bytes)) << name << ": another shard's state";
      EXPECT_FALSE(b[s]->decode(bytes.substr(0, bytes.size() - 3))) << name << ": cut short";
      EXPECT_FALSE(b[s]->decode(bytes + "x")) << name << ": bytes over";
      EXPECT_EQ(b[s]->digest(), before) << name << ": a refused snapshot changed the store";
      ASSERT_TRUE(b[s]->decode(bytes)) << name;
      EXPECT_EQ(b[s]->digest(), a[s]->digest()) << name << " shard " << s;
      EXPECT_EQ(b[s]->dump_json(), a[s]->dump_json()) << name << " shard " << s;
    }
    for (int i = 0; i < 500; ++i) {   // the decoded state goes on as the original does (derived indexes rebuilt)
      const TxnRequest t = w->generate(g, {static_cast<uint32_t>(i % 4), static_cast<uint32_t>(i % 10)});
      run(*w, a, t);
      run(*w, b, t);
    }
    for (uint32_t s = 0; s < d.n_shards(); ++s) EXPECT_EQ(b[s]->digest(), a[s]->digest()) << name << " shard " << s;
  }
}
