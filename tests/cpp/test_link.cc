#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "core/link_emulator.h"
#include "runtime/transport.h"

using namespace txn;
using namespace txn::runtime;

namespace {
LinkModel model(double jitter, const std::string& mech = "app") {
  LinkModel m;
  m.mechanism = mech;
  m.rtt_ms = {{5, 100, 40}, {100, 5, 60}, {40, 60, 5}};
  m.jitter_ms = jitter;
  return m;
}
}  // namespace

TEST(LinkEmulator, DelayPerRegionPair) {
  LinkEmulator e(model(0));
  std::mt19937_64 rng(1);
  EXPECT_EQ(e.delivery_time(0, 0, 1000, 0, rng), 1000 + 2500);
  EXPECT_EQ(e.delivery_time(0, 1, 1000, 0, rng), 1000 + 50000);
  EXPECT_EQ(e.delivery_time(2, 1, 1000, 0, rng), 1000 + 30000);
  EXPECT_EQ(e.delivery_time(0, 2, 1000, 0, rng), 1000 + 20000);
}

TEST(LinkEmulator, FifoUnderJitter) {
  LinkEmulator e(model(20));
  std::mt19937_64 rng(3);
  TimeUs last = 0, max_extra = 0;
  for (TimeUs now = 0; now < 100000; now += 100) {
    TimeUs t = e.delivery_time(0, 1, now, last, rng);
    EXPECT_GE(t, last);  // FIFO: never before the previous message of the channel
    max_extra = std::max(max_extra, t - now - 50000);
    last = t;
  }
  EXPECT_GT(max_extra, 10000);  // jitter really applies
}

TEST(LinkEmulator, JitterIsZeroMeanAroundTheDelayAndCrossRegionOnly) {
  LinkEmulator e(model(10));
  std::mt19937_64 rng(5);
  double sum = 0, sq = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    double x = static_cast<double>(e.delivery_time(0, 1, 0, 0, rng));  // last = 0: no FIFO coupling
    sum += x;
    sq += x * x;
  }
  double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 50000, 300);  // netem semantics: delay +- jitter, not delay + |jitter|
  EXPECT_NEAR(sd, 10000, 300);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(e.delivery_time(2, 2, 0, 0, rng), 2500);  // intra-region: exact
}

TEST(LinkEmulator, NetemAndNoneAddNothing) {
  std::mt19937_64 rng(1);
  EXPECT_EQ(LinkEmulator(model(5, "netem")).delivery_time(0, 1, 777, 0, rng), 777);
  EXPECT_EQ(LinkEmulator(model(5, "none")).delivery_time(0, 1, 777, 0, rng), 777);
}

// Two transports on localhost: delivery, FIFO, emulated delay, probe replies
// and rejection of malformed envelopes.
TEST(Transport, LoopbackDeliveryFifoAndDelay) {
  Deployment d = make_local_deployment(2, 1, 0, 0);
  d.link.rtt_ms = {{2, 60}, {60, 2}};
  d.nodes[0].port = 24711;   // s0.0.0 (region 0)
  d.nodes[3].port = 24712;   // s1.0.0 (region 1)
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Envelope> got_a, got_b;
  auto sink = [&](std::vector<Envelope>& v) {
    return [&](Envelope&& m) {
      std::lock_guard<std::mutex> g(mu);
      v.push_back(std::move(m));
      cv.notify_all();
    };
  };
  std::vector<std::string> logs;
  auto log = [&](const std::string& l) {
    std::lock_guard<std::mutex> g(mu);
    logs.push_back(l);
  };
  TransportOptions o;
  o.bind_host = "127.0.0.1";
  o.connect_timeout_s = 5;
  Transport a(d, 0, o, sink(got_a), log), b(d, 3, o, sink(got_b), log);
  std::string err;
  ASSERT_TRUE(a.listen(&err)) << err;
  ASSERT_TRUE(b.listen(&err)) << err;

  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 200; ++i) {
    Envelope m;
    m.set_from(0);
    m.set_to(3);
    m.mutable_probe_reply()->set_seq(i);  // any body the runtime passes through
    a.send(std::move(m));
  }
  Envelope probe;
  probe.set_from(0);
  probe.set_to(3);
  probe.mutable_probe()->set_seq(99);
  a.send(probe);
  Envelope bad;
  bad.set_from(0);
  bad.set_to(0);  // not addressed to b
  bad.mutable_probe()->set_seq(1);
  b.on_incoming(std::move(bad), "test");

  std::unique_lock<std::mutex> lk(mu);
  ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(10), [&] { return got_b.size() == 200 && got_a.size() == 1; }));
  auto elapsed = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(elapsed, std::chrono::milliseconds(30));  // 60 ms RTT -> 30 ms one way
  for (int i = 0; i < 200; ++i) EXPECT_EQ(got_b[i].probe_reply().seq(), uint64_t(i));
  EXPECT_TRUE(got_a[0].has_probe_reply());
  EXPECT_EQ(got_a[0].probe_reply().seq(), 99u);
  ASSERT_EQ(logs.size(), 1u);
  EXPECT_NE(logs[0].find("bad message from s0.0.0"), std::string::npos) << logs[0];
}
