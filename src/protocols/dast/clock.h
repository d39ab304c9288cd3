// DAST's stretchable hybrid clock (docs/protocols/dast.md §clock).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>

#include "dast.pb.h"
#include "node.h"

namespace txn::dast {

struct Ts {
  int64_t t = 0;      // microseconds
  int64_t c = 0;      // logical counter
  uint32_t site = 0;  // issuer
  bool operator<(const Ts& o) const { return std::tie(t, c, site) < std::tie(o.t, o.c, o.site); }
  bool operator==(const Ts& o) const { return t == o.t && c == o.c && site == o.site; }
  bool operator<=(const Ts& o) const { return !(o < *this); }
  bool operator>(const Ts& o) const { return o < *this; }
};

inline Ts from_proto(const ::dast::Ts& p) { return Ts{p.t(), p.c(), p.site()}; }
inline ::dast::Ts to_proto(const Ts& ts) {
  ::dast::Ts p;
  p.set_t(ts.t);
  p.set_c(ts.c);
  p.set_site(ts.site);
  return p;
}

// Per-site clock. Timestamps it issues are strictly increasing. While CRT
// timestamps are pending, the physical part freezes just below the oldest
// one (stretch), so new local timestamps order before every unresolved CRT.
class StretchClock {
 public:
  explicit StretchClock(uint32_t site) : site_(site) {}

  // Issue a fresh timestamp at physical time `now`.
  Ts fresh(TimeUs now);
  // Learn a timestamp issued by another site of the region: advance the
  // physical offset if it is ahead of us (catch-up) and never issue anything
  // at or below it afterwards.
  void observe(const Ts& r, TimeUs now);

  // Pending CRT timestamps, keyed by transaction (one entry per txn).
  void add_pending(uint64_t txn, const Ts& ts);
  void remove_pending(uint64_t txn);
  const Ts* min_pending() const { return pending_.empty() ? nullptr : &pending_.begin()->first; }
  size_t n_pending() const { return pending_by_txn_.size(); }

  const Ts& last() const { return last_; }
  int64_t offset() const { return offset_; }

 private:
  uint32_t site_;
  Ts last_{};
  int64_t offset_ = 0;
  std::map<Ts, uint64_t> pending_;
  std::unordered_map<uint64_t, Ts> pending_by_txn_;
};

// Exponentially weighted moving average of a delay, seeded with a prior, that does not believe a sample held by a
// fault. A sample above `outlier_factor` x the estimate is taken only once it is confirmed: by a sample of a request
// sent after the first unconfirmed outlier of the streak came back. A partition, or a paused process, holds the
// requests sent before its end and hands their replies over together at the heal: each is seconds long, and none
// was sent after another came back, so none is believed (counted in `held()`) and the requests sent after the heal
// are anticipated by the delay measured before it. A network that really got slower gives slow samples of requests
// sent after the first slow one came back, and the estimate follows it from the second. A sample at or below the
// bound, or an `outlier_factor` of 0, is taken at once (0: the plain EWMA).
class DelayEstimate {
 public:
  DelayEstimate(double prior_us = 0, double alpha = 0.2, double outlier_factor = 0)
      : value_(prior_us), alpha_(alpha), outlier_factor_(outlier_factor) {}
  // `sent_us`: when the request whose reply gave the sample was sent; `now_us`: when the reply came (one clock).
  void add(double sample_us, int64_t sent_us, int64_t now_us) {
    if (outlier_factor_ > 0 && sample_us > outlier_factor_ * value_) {
      if (!streak_since_ || sent_us < *streak_since_) {
        if (!streak_since_) streak_since_ = now_us;
        ++held_;
        return;
      }
    } else {
      streak_since_.reset();
    }
    value_ = alpha_ * sample_us + (1 - alpha_) * value_;
    ++n_;
  }
  double value() const { return value_; }
  uint64_t samples() const { return n_; }  // taken
  uint64_t held() const { return held_; }  // not believed

 private:
  double value_;
  double alpha_;
  double outlier_factor_;
  std::optional<int64_t> streak_since_;
  uint64_t n_ = 0;
  uint64_t held_ = 0;
};

}  // namespace txn::dast
