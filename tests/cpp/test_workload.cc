// Workload layer: generators, loaders, executor, dumps.
#include <gtest/gtest.h>

#include "serial_exec.h"

#include <chrono>
#include <cmath>
#include <map>
#include <set>

#include "workload/store.h"

using namespace txn;
using txn::wl::TpccStore;
using txn::wl::TpcaStore;

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

}  // namespace

TEST(Workload, FactoryRejectsUnknownName) {
  EXPECT_THROW(make_workload(dep("tpcx", 1, 2)), ConfigError);
  try {
    make_workload(dep("tpcx", 1, 2));
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "unknown workload 'tpcx' (known: tpcc, tpca)");
  }
  EXPECT_EQ(make_workload(dep("tpcc", 1, 2))->name(), "tpcc");
  EXPECT_EQ(make_workload(dep("tpca", 1, 2))->name(), "tpca");
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
  for (const char* name : {"tpcc", "tpca"}) {
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
  auto a = dep("tpca", 3, 2);
  auto tpca = make_workload(a);
  for (int i = 0; i < 200; ++i) {
    TxnRequest t = tpca->generate(g, {0, 0});
    for (const auto& p : t.pieces()) EXPECT_FALSE(tpca->commutes(p));
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
  for (const char* name : {"tpcc", "tpca", "tpcc-uniform"}) {
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
    for (uint32_t s = 0; s < d.n_shards(); ++s) {
      EXPECT_EQ(a[s]->digest(), b[s]->digest()) << name << " shard " << s;
      EXPECT_NE(a[s]->digest(), initial[s]) << name << " shard " << s;
      EXPECT_EQ(a[s]->dump_json(), b[s]->dump_json());
      if (d.workload.name == "tpcc") {
        expect_tpcc_consistent(*a[s]);
      } else {
        const auto& st = dynamic_cast<const TpcaStore&>(*a[s]);
        for (int k = 0; k < 3; ++k) {
          EXPECT_EQ(st.table[k].sum() - st.table[k].initial_sum, st.table[k].applied_delta);
          total_delta[k] += st.table[k].applied_delta;
        }
      }
    }
    if (d.workload.name == "tpcc") expect_tpcc_balances(a);
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
  for (const char* name : {"tpcc", "tpca"}) {
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
