// IdSet (src/core/id_set.h) holds exactly the ids a std::set would, in whatever order and form they come.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "id_set.h"

namespace txn {
namespace {

TEST(IdSet, HoldsExactlyWhatAStdSetHolds) {
  std::mt19937_64 rng(7);
  IdSet s;
  std::set<uint64_t> want;
  auto id = [&]() -> uint64_t {
    const uint64_t client = rng() % 5;
    switch (rng() % 6) {
      case 0: return (client << 40) | (rng() % (uint64_t{1} << 40));   // anywhere: mostly outside the bitmap
      case 1: return rng();                                            // any 64 bits
      case 2: return client;                                           // the smallest sequence numbers
      default: return (client << 40) | (1000 + rng() % 5000);          // dense, as clients number them
    }
  };
  for (int i = 0; i < 200000; ++i) {
    const uint64_t x = id();
    switch (rng() % 4) {
      case 0:
        s.erase(x);
        want.erase(x);
        break;
      default:
        ASSERT_EQ(s.insert(x), want.insert(x).second) << x;
    }
    const uint64_t y = rng() % 2 ? x : id();
    ASSERT_EQ(s.count(y), want.count(y) > 0) << y;
    ASSERT_EQ(s.size(), want.size());
  }
  for (uint64_t x : want) ASSERT_TRUE(s.count(x)) << x;
  s.clear();
  EXPECT_TRUE(s.empty());
  for (uint64_t x : want) ASSERT_FALSE(s.count(x)) << x;
}

TEST(IdMap, HoldsExactlyWhatAStdMapHolds) {
  std::mt19937_64 rng(11);
  IdMap<uint16_t> m;
  std::map<uint64_t, uint16_t> want;
  for (int i = 0; i < 200000; ++i) {
    const uint64_t client = rng() % 4;
    const uint64_t x = rng() % 5 == 0 ? rng() : (client << 40) | (rng() % 3 == 0 ? rng() % 100 : 500 + rng() % 4000);
    const uint16_t v = rng() % 4 == 0 ? 0 : static_cast<uint16_t>(1 + rng() % 300);
    m.set(x, v);
    if (v) want[x] = v;
    else want.erase(x);
    const uint64_t y = rng() % 2 ? x : (client << 40) | (rng() % 6000);
    const auto w = want.find(y);
    ASSERT_EQ(m.get(y), w == want.end() ? 0 : w->second) << y;
    ASSERT_EQ(m.size(), want.size());
  }
  for (const auto& [x, v] : want) ASSERT_EQ(m.get(x), v) << x;
}

TEST(IdSet, AClientsDenseIdsTakeAboutABitEach) {
  IdSet s;
  for (uint64_t seq = 0; seq < 1'000'000; seq += 3) s.insert((uint64_t{9} << 40) | seq);
  EXPECT_EQ(s.size(), 333'334u);
  EXPECT_LE(s.bytes(), 1'000'000 / 8 * 2);   // a bit per sequence number, and the vector's slack
}

}  // namespace
}  // namespace txn
