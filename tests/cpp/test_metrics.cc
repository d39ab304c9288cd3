#include <gtest/gtest.h>

#include "client/metrics.h"

using namespace txn;

TEST(Metrics, NearestRank) {
  std::vector<double> a;
  for (int i = 1; i <= 10; ++i) a.push_back(i);
  EXPECT_EQ(percentile_nearest_rank(a, 50), 5);
  EXPECT_EQ(percentile_nearest_rank(a, 100), 10);
  EXPECT_EQ(percentile_nearest_rank(a, 1), 1);
  std::vector<double> b;
  for (int i = 1; i <= 100; ++i) b.push_back(i);
  EXPECT_EQ(percentile_nearest_rank(b, 99), 99);
  EXPECT_EQ(percentile_nearest_rank(b, 99.9), 100);
  EXPECT_EQ(percentile_nearest_rank(b, 100), 100);
  std::vector<double> c;
  for (int i = 1; i <= 1000; ++i) c.push_back(i);
  EXPECT_EQ(percentile_nearest_rank(c, 99.9), 999);
  EXPECT_THROW(percentile_nearest_rank({}, 50), std::invalid_argument);
  EXPECT_THROW(percentile_nearest_rank(a, 0), std::invalid_argument);
  EXPECT_THROW(percentile_nearest_rank(a, 101), std::invalid_argument);
}

TEST(Metrics, SummarizeWindow) {
  // duration 10 s, warmup 2, cooldown 1: window [2, 9] s, 7 s long.
  std::vector<TxnRecord> r;
  auto add = [&](double start_s, double lat_ms, bool crt, bool ok, uint32_t att = 1, bool abandoned = false) {
    r.push_back({r.size() + 1, 0, crt, TimeUs(start_s * 1e6), TimeUs(lat_ms * 1000), att, ok, "", 0, 0, abandoned});
  };
  add(1.0, 100, false, true);    // started in warmup: no latency sample
  add(1.95, 100, false, true);   // started in warmup, completes in window: counts for throughput
  add(3.0, 10, false, true);
  add(4.0, 20, false, true, 3);
  add(5.0, 200, true, true);
  add(6.0, 500, true, false, 20);  // given up
  add(8.95, 100, false, true);   // started in window, completes after it
  add(7.0, 12000, true, false, 3, true);  // abandoned at the drain: its third attempt has no outcome
  Summary s = summarize(r, 10, 2, 1);
  EXPECT_DOUBLE_EQ(s.window_start_s, 2);
  EXPECT_DOUBLE_EQ(s.window_end_s, 9);
  EXPECT_EQ(s.irt.committed, 3u);
  EXPECT_EQ(s.crt.committed, 1u);
  EXPECT_EQ(s.crt.given_up, 1u);
  EXPECT_EQ(s.all.committed, 4u);
  EXPECT_EQ(s.all.given_up, 1u);
  EXPECT_EQ(s.crt.abandoned, 1u);
  EXPECT_EQ(s.all.abandoned, 1u);
  EXPECT_EQ(s.irt.abandoned, 0u);
  EXPECT_DOUBLE_EQ(s.irt.p50_ms, 20);
  EXPECT_DOUBLE_EQ(s.irt.p99_ms, 100);
  EXPECT_DOUBLE_EQ(s.crt.p50_ms, 200);
  EXPECT_DOUBLE_EQ(s.all.p50_ms, 20);
  EXPECT_DOUBLE_EQ(s.irt.mean_ms, (10 + 20 + 100) / 3.0);
  EXPECT_EQ(s.aborted_attempts, 2u + 20u + 2u);
  EXPECT_NEAR(s.throughput_tps, 4 / 7.0, 1e-9);  // 1.95s-start, 3, 4, 5 complete in the window
  std::string js = summary_json(s);
  EXPECT_NE(js.find("\"throughput_tps\""), std::string::npos);
  EXPECT_NE(js.find("\"crt\": {"), std::string::npos);
  EXPECT_NE(js.find("\"abandoned\": 1"), std::string::npos);
}

TEST(Metrics, RecordsCsv) {
  std::vector<TxnRecord> r = {{42, 1, true, 10, 2000, 2, true, "00ff", 3, 250},
                              {43, 7, false, 11, 5, 20, false, "", 0, 11},
                              {44, 0, false, 12, 9, 1, false, "", 1, 12, true}};
  std::string csv = records_csv(r, {"NewOrder", "Payment"});
  EXPECT_EQ(csv,
            "txn_id,type,type_name,class,start_us,latency_us,attempts,status,outputs,session,sent_us\n"
            "42,1,Payment,CRT,10,2000,2,committed,00ff,3,250\n"
            "43,7,7,IRT,11,5,20,given_up,,0,11\n"
            "44,0,NewOrder,IRT,12,9,1,abandoned,,1,12\n");
}
