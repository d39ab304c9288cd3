// DAST's stretchable hybrid clock (docs/protocols/dast.md §clock).
#pragma once
#include <cstdint>
#include <map>
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

// Exponentially weighted moving average of a delay, seeded with a prior.
class DelayEstimate {
 public:
  DelayEstimate(double prior_us = 0, double alpha = 0.2) : value_(prior_us), alpha_(alpha) {}
  void add(double sample_us) {
    value_ = alpha_ * sample_us + (1 - alpha_) * value_;
    ++n_;
  }
  double value() const { return value_; }
  uint64_t samples() const { return n_; }

 private:
  double value_;
  double alpha_;
  uint64_t n_ = 0;
};

}  // namespace txn::dast
