#include <gtest/gtest.h>

#include "protocols/dast/clock.h"

using txn::dast::DelayEstimate;
using txn::dast::StretchClock;
using txn::dast::Ts;

TEST(StretchClock, MonotonicEvenWhenPhysicalTimeGoesBack) {
  StretchClock c(7);
  Ts a = c.fresh(1000);
  Ts b = c.fresh(900);   // wall clock stepped back
  Ts d = c.fresh(900);
  EXPECT_LT(a, b);
  EXPECT_LT(b, d);
  EXPECT_EQ(d.site, 7u);
}

TEST(StretchClock, NeverIssuesInAPendingCrtsMicrosecond) {
  // A site with a lower id than the CRT's issuer reaching the CRT's microsecond
  // exactly: (5000, 0, 3) orders below (5000, 0, 99), but every later timestamp
  // would bump its counter and order above the CRT.
  StretchClock c(3);
  c.add_pending(42, Ts{5000, 0, 99});
  Ts at = c.fresh(5000);
  EXPECT_LT(at.t, 5000);
  for (int i = 0; i < 10; ++i) EXPECT_LT(c.fresh(5000 + i), (Ts{5000, 0, 99}));
}

TEST(StretchClock, StretchesBelowOldestPendingCrt) {
  StretchClock c(1);
  c.add_pending(42, Ts{5000, 0, 99});
  c.add_pending(43, Ts{8000, 0, 99});
  Ts prev = c.fresh(1000);
  EXPECT_EQ(prev.t, 1000);
  for (int i = 0; i < 100; ++i) {
    Ts x = c.fresh(6000 + i * 1000);  // physical time is past the CRT
    EXPECT_LT(x, (Ts{5000, 0, 99})) << "IRT timestamps must stay below the pending CRT";
    EXPECT_LT(prev, x);
    prev = x;
  }
  c.remove_pending(42);  // resolved: the clock may now pass 5000 but not 8000
  Ts y = c.fresh(7000);
  EXPECT_GT(y, (Ts{5000, 0, 99}));
  EXPECT_EQ(y.t, 7000);
  Ts z = c.fresh(9000);
  EXPECT_LT(z, (Ts{8000, 0, 99}));
  c.remove_pending(43);
  EXPECT_EQ(c.fresh(9000).t, 9000);
  EXPECT_EQ(c.n_pending(), 0u);
}

TEST(StretchClock, CatchUpAdvancesOffsetAndOrdersAfterObserved) {
  StretchClock c(2);
  Ts remote{10'000, 3, 5};
  c.observe(remote, 4000);   // the remote site is 6 ms ahead
  EXPECT_EQ(c.offset(), 6000);
  Ts x = c.fresh(4000);
  EXPECT_GT(x, remote);
  Ts y = c.fresh(5000);      // physical + offset = 11000
  EXPECT_EQ(y.t, 11'000);
  c.observe(Ts{100, 0, 9}, 5000);  // an old timestamp changes nothing
  EXPECT_EQ(c.offset(), 6000);
  EXPECT_GT(c.fresh(5000), y);
}

TEST(StretchClock, ObservedTimestampBeyondPendingWinsOverStretch) {
  // Monotonicity is needed for the watermark, so it wins over stretching.
  StretchClock c(3);
  c.add_pending(1, Ts{5000, 0, 99});
  c.observe(Ts{6000, 0, 4}, 6000);
  EXPECT_GT(c.fresh(6000), (Ts{6000, 0, 4}));
}

TEST(DelayEstimate, MovesFromPriorToMeasurements) {
  DelayEstimate e(100'000, 0.5, 3);
  EXPECT_DOUBLE_EQ(e.value(), 100'000);
  for (int i = 0; i < 20; ++i) e.add(60'000, i * 100'000, i * 100'000 + 60'000);
  EXPECT_NEAR(e.value(), 60'000, 10);
  EXPECT_EQ(e.samples(), 20u);
  EXPECT_EQ(e.held(), 0u);
}

// A partition hands over, at its heal, the replies to every request sent before it: each a sample of seconds, and
// none of a request sent after another of them came back. None is believed.
TEST(DelayEstimate, RepliesHeldByAFaultAreNotBelieved) {
  DelayEstimate e(100'000, 0.2, 3);
  const int64_t heal = 6'000'000;
  for (int i = 0; i < 8; ++i) e.add(static_cast<double>(heal - i * 10'000), i * 10'000, heal + i);
  EXPECT_DOUBLE_EQ(e.value(), 100'000);
  EXPECT_EQ(e.held(), 8u);
  // The requests sent after the heal come back at the usual delay and are taken as usual.
  e.add(105'000, heal + 10, heal + 105'010);
  EXPECT_DOUBLE_EQ(e.value(), 101'000);
  EXPECT_EQ(e.samples(), 1u);
  // A straggler of the held batch after that is still not believed: nothing sent after it came back confirms it.
  e.add(5'000'000, heal - 100'000, heal + 4'900'000 + 200'000);
  EXPECT_DOUBLE_EQ(e.value(), 101'000);
  EXPECT_EQ(e.held(), 9u);
}

// A network that really became slower: the request sent after the first slow reply came back is as slow, and from
// then on the estimate follows the samples.
TEST(DelayEstimate, ASlowerNetworkIsFollowedFromItsSecondSample) {
  DelayEstimate e(100'000, 0.5, 3);
  e.add(400'000, 0, 400'000);
  EXPECT_DOUBLE_EQ(e.value(), 100'000);  // one slow sample: not yet
  e.add(400'000, 100'000, 500'000);      // sent before the first came back: no evidence either
  EXPECT_DOUBLE_EQ(e.value(), 100'000);
  e.add(400'000, 400'000, 800'000);  // sent after it came back: confirmed
  EXPECT_DOUBLE_EQ(e.value(), 250'000);
  for (int i = 0; i < 20; ++i) e.add(400'000, 800'000 + i * 400'000, 1'200'000 + i * 400'000);
  EXPECT_NEAR(e.value(), 400'000, 10);
  EXPECT_EQ(e.held(), 2u);
}

// A sample at or below the bound ends a streak: a later slow one needs its own confirmation.
TEST(DelayEstimate, AUsualSampleEndsTheStreak) {
  DelayEstimate e(100'000, 0.5, 3);
  e.add(400'000, 0, 400'000);
  e.add(100'000, 450'000, 550'000);
  e.add(400'000, 500'000, 900'000);  // sent after the first slow one came back, but a usual one came between
  EXPECT_DOUBLE_EQ(e.value(), 100'000);
  EXPECT_EQ(e.held(), 2u);
}

// outlier_factor 0: the plain EWMA, every sample taken (what the estimate was before 2026-11-29).
TEST(DelayEstimate, FactorZeroTakesEverySample) {
  DelayEstimate e(100'000, 0.2, 0);
  e.add(5'100'000, 0, 5'100'000);
  EXPECT_DOUBLE_EQ(e.value(), 1'100'000);
  EXPECT_EQ(e.held(), 0u);
}
