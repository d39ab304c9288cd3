#include "protocols/dast/clock.h"

#include "protocols/dast/mutant.h"

namespace txn::dast {

Ts StretchClock::fresh(TimeUs now) {
  Ts x{now + offset_, 0, site_};
  // Stretch: freeze just below the oldest unresolved CRT's microsecond. Not
  // just below the CRT itself: a timestamp in its microsecond (lower counter or
  // site) would leave only successors above it, since the counter bumps.
  if (const Ts* m = min_pending(); m != nullptr && x.t >= m->t && !mutant::kNoStretch) {
    x.t = m->t - 1;
    x.c = 0;
  }
  if (!(last_ < x)) {  // monotonic: never reissue or go back
    x = last_;
    x.c += 1;
    x.site = site_;
  }
  last_ = x;
  return x;
}

void StretchClock::observe(const Ts& r, TimeUs now) {
  if (r.t > now + offset_) offset_ += r.t - (now + offset_);
  if (last_ < r) last_ = r;
}

void StretchClock::add_pending(uint64_t txn, const Ts& ts) {
  remove_pending(txn);
  pending_.emplace(ts, txn);
  pending_by_txn_.emplace(txn, ts);
}

void StretchClock::remove_pending(uint64_t txn) {
  auto it = pending_by_txn_.find(txn);
  if (it == pending_by_txn_.end()) return;
  pending_.erase(it->second);
  pending_by_txn_.erase(it);
}

}  // namespace txn::dast
