#include "client/client_node.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace txn {
namespace {
// Client-owned timer ids live far above anything a driver uses.
constexpr uint64_t kStopTimer = (uint64_t{1} << 62) + 1;
constexpr uint64_t kDrainTimer = (uint64_t{1} << 62) + 2;
constexpr uint64_t kArrivalTimer = (uint64_t{1} << 62) + 3;
// A slot's retry after its backoff: kRetryTimer + the slot.
constexpr uint64_t kRetryTimer = (uint64_t{1} << 62) + (uint64_t{1} << 32);
// The purposes of the client's random streams (ClientNode::stream).
constexpr uint32_t kGaps = 1, kSlotTxn = 2, kArrivalTxn = 3, kRetry = 4;
}  // namespace

ClientNode::ClientNode(const Deployment& d, NodeId self, const Workload& w,
                       std::unique_ptr<ClientDriver> driver)
    : d_(d), self_(self), w_(w), driver_(std::move(driver)), slots_(d.client.n_concurrent), gaps_(stream(kGaps)) {
  for (NodeId c : d_.clients())
    if (c < self_ && d_.node(c).shard == d_.node(self_).shard) ++shard_index_;
  driver_->set_done([this](Env& env, const ClientDriver::Outcome& o) { finish_attempt(env, o); });
  // Open loop's free slots, a stack with slot 0 on top: a lightly loaded client runs its arrivals on its first slots.
  for (uint32_t i = static_cast<uint32_t>(slots_.size()); i-- > 0;) free_.push_back(i);
}

void ClientNode::start(Env& env) {
  start_us_ = env.mono_us();
  env.set_timer(kStopTimer, static_cast<TimeUs>(d_.client.duration_s * 1e6));
  if (open_loop()) {
    next_arrival_us_ = next_gap_us();   // a Poisson process from the run start
    arrivals(env);
    return;
  }
  for (uint32_t i = 0; i < slots_.size(); ++i) issue(env, i);
}

void ClientNode::on_message(Env& env, Envelope& msg) { driver_->on_message(env, msg); }

void ClientNode::on_timer(Env& env, uint64_t id) {
  if (id == kStopTimer) {
    if (open_loop()) arrivals(env);   // arrivals due by now that this timer overtook: the run's last ones
    stopping_ = true;
    env.set_timer(kDrainTimer, static_cast<TimeUs>(d_.client.drain_timeout_s * 1e6));
    maybe_finish(env);
  } else if (id == kDrainTimer) {
    if (finished_) return;
    TimeUs now = env.mono_us();
    for (auto& s : slots_)
      if (s.busy) record(s, now, false, nullptr, nullptr, true);
    // Arrivals still waiting for a coordinator were never sent: counted (the summary says so), not recorded.
    for (const Arrival& a : queued_) {
      const TimeUs at = a.at;
      ++ol_.unsent;
      ol_.unsent_window += in_window(at);
    }
    queued_.clear();
    finished_ = true;
  } else if (id == kArrivalTimer) {
    arrivals(env);
  } else if (id >= kRetryTimer && id < kRetryTimer + slots_.size()) {
    Slot& s = slots_[id - kRetryTimer];
    if (s.busy && s.backing_off && !finished_) {
      s.backing_off = false;
      driver_->submit(env, s.txn, s.attempts);
    }
  } else {
    driver_->on_timer(env, id);
  }
}

TimeUs ClientNode::retry_backoff_us(const Slot& s) const {
  const auto& c = d_.client;
  if (c.retry_backoff_ms <= 0) return 0;   // the artifact's: at once
  // After the k-th abort (k = s.attempts): uniform in [0, min(max, base * 2^(k-1))], drawn from the transaction's own
  // stream (what drew it, and k), so the same seed backs off alike whatever the timing.
  const uint32_t k = std::min<uint32_t>(s.attempts, 40);
  const double upper_ms =
      std::min(c.retry_backoff_max_ms, c.retry_backoff_ms * std::ldexp(1.0, static_cast<int>(k) - 1));
  auto g = stream(kRetry + (s.key.first << 8), s.key.second, k);
  const double u = static_cast<double>(g() >> 11) * 0x1.0p-53;
  return static_cast<TimeUs>(std::llround(u * upper_ms * 1000));
}

std::mt19937_64 ClientNode::stream(uint32_t purpose, uint64_t a, uint64_t b) const {
  // The name folded into one 64-bit seed by SplitMix64's finalizer (a bijection, so names that differ in one word
  // differ), then mt19937_64 as the standard specifies it: the same streams with any library. (A std::seed_seq over
  // the same words costs 10.9 us a stream here, a third of a simulated transaction's CPU; this, 1.7 us.)
  auto mix = [](uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  uint64_t h = mix(d_.seed);
  for (uint64_t v : {uint64_t{self_}, uint64_t{purpose}, a, b}) h = mix(h ^ v);
  return std::mt19937_64(h);
}

ClientContext ClientNode::context(uint32_t terminal) const {
  return ClientContext{d_.node(self_).shard, terminal + shard_index_ * d_.client.n_concurrent};
}

void ClientNode::issue(Env& env, uint32_t slot, std::optional<Arrival> arrival) {
  Slot& s = slots_[slot];
  if (arrival) {
    s.txn = std::move(arrival->txn);
    s.key = {kArrivalTxn, arrival->n};
  } else {
    s.key = {kSlotTxn, uint64_t{slot} << 40 | s.drawn++};
    if (!s.draws) s.draws = std::make_unique<std::mt19937_64>(stream(kSlotTxn, slot));
    s.txn = w_.generate(*s.draws, context(slot));   // the slot's transactions, one after another, from its stream
  }
  s.txn.set_txn_id((uint64_t{self_} << 40) | next_seq_++);
  s.sent = env.mono_us();
  s.first_start = arrival ? arrival->at : s.sent;
  s.attempts = 1;
  s.failed.clear();
  s.busy = true;
  ++busy_;
  driver_->submit(env, s.txn, 1);
}

void ClientNode::arrivals(Env& env) {
  if (stopping_) return;
  const TimeUs now = env.mono_us() - start_us_;
  const double end = d_.client.duration_s * 1e6;   // arrivals stop at the duration, as a closed loop's issues do
  // Every arrival due by now, each at its own time: a timer that fires late (a busy event loop) delays their
  // sends, never their intended starts.
  while (next_arrival_us_ < end && next_arrival_us_ <= static_cast<double>(now)) {
    arrive(env, start_us_ + static_cast<TimeUs>(std::ceil(next_arrival_us_)));
    next_arrival_us_ += next_gap_us();
  }
  if (next_arrival_us_ < end)
    env.set_timer(kArrivalTimer, static_cast<TimeUs>(std::ceil(next_arrival_us_)) - now);
}

void ClientNode::arrive(Env& env, TimeUs at) {
  const bool window = in_window(at);
  const uint64_t n = ol_.arrivals++;
  ol_.arrivals_window += window;
  if (busy_ + queued_.size() >= d_.client.max_outstanding) {
    ++ol_.shed;
    ol_.shed_window += window;
    return;
  }
  // Its transaction: arrival n's own stream, and terminal n mod the coordinators (TPC-C's district), whichever
  // coordinator runs it and whether or not earlier arrivals were shed.
  auto g = stream(kArrivalTxn, n);
  Arrival a{at, w_.generate(g, context(static_cast<uint32_t>(n % d_.client.n_concurrent))), n};
  if (!free_.empty()) {   // (then nothing waits: a slot that frees takes the oldest waiting arrival first)
    uint32_t slot = free_.back();
    free_.pop_back();
    issue(env, slot, std::move(a));
    return;
  }
  queued_.push_back(std::move(a));
  ol_.max_queued = std::max<uint64_t>(ol_.max_queued, queued_.size());
}

double ClientNode::next_gap_us() {
  // Inverse transform of 53 random bits, -ln(1 - u) / rate with u in [0, 1): the same gaps from the same seed with
  // any standard library (std::exponential_distribution's algorithm is the library's own).
  const double u = static_cast<double>(gaps_() >> 11) * 0x1.0p-53;
  return -std::log1p(-u) * 1e6 / d_.client.rate_tps;
}

std::string ClientNode::open_loop_json() const {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"rate_tps\": %.17g, \"max_outstanding\": %u, \"arrivals\": %llu, \"shed\": %llu, "
                "\"unsent\": %llu, \"arrivals_in_window\": %llu, \"shed_in_window\": %llu, "
                "\"unsent_in_window\": %llu, \"max_queued\": %llu}",
                d_.client.rate_tps, d_.client.max_outstanding, (unsigned long long)ol_.arrivals,
                (unsigned long long)ol_.shed, (unsigned long long)ol_.unsent, (unsigned long long)ol_.arrivals_window,
                (unsigned long long)ol_.shed_window, (unsigned long long)ol_.unsent_window,
                (unsigned long long)ol_.max_queued);
  return buf;
}

bool ClientNode::in_window(TimeUs at) const {
  const TimeUs rel = at - start_us_;
  const auto& c = d_.client;
  return rel >= static_cast<TimeUs>(std::llround(c.warmup_s * 1e6)) &&
         rel < static_cast<TimeUs>(std::llround((c.duration_s - c.cooldown_s) * 1e6));
}

void ClientNode::finish_attempt(Env& env, const ClientDriver::Outcome& o) {
  if (finished_) return;
  auto it = std::find_if(slots_.begin(), slots_.end(),
                         [&](const Slot& s) { return s.busy && s.txn.txn_id() == o.txn_id; });
  if (it == slots_.end()) return;  // stale outcome (e.g. a duplicate reply)
  Slot& s = *it;
  uint32_t slot = static_cast<uint32_t>(it - slots_.begin());
  if (!o.committed && s.attempts < d_.client.retry_limit) {
    // Retry the same transaction under a fresh id: at once, or after its backoff (retry_backoff_us).
    s.failed.push_back(s.txn.txn_id());
    const TimeUs wait = retry_backoff_us(s);
    s.txn.set_txn_id((uint64_t{self_} << 40) | next_seq_++);
    ++s.attempts;
    if (wait > 0) {
      s.backing_off = true;
      env.set_timer(kRetryTimer + slot, wait);
    } else {
      driver_->submit(env, s.txn, s.attempts);
    }
    return;
  }
  record(s, env.mono_us(), o.committed, o.outputs, o.stored);
  if (!open_loop()) {
    if (!stopping_) issue(env, slot);  // zero think time
  } else if (!queued_.empty()) {
    // The oldest waiting arrival takes the slot, also while draining (it arrived within the run). In arrival order,
    // a slot's transactions run in the order of their intended starts, so the checker's session order (a
    // session's records sorted by start; histories.py) is the order the slot ran them in.
    Arrival a = std::move(queued_.front());
    queued_.pop_front();
    issue(env, slot, std::move(a));
  } else {
    free_.push_back(slot);
  }
  maybe_finish(env);
}

void ClientNode::record(Slot& s, TimeUs end_us, bool committed, const Vars* outputs,
                        const google::protobuf::RepeatedPtrField<ShardCopies>* stored, bool abandoned) {
  static const Vars kNone;
  const Vars& out = outputs ? *outputs : kNone;
  std::string digest = committed ? outputs_digest(out) : "";
  records_.push_back({s.txn.txn_id(), s.txn.type(), s.txn.crt(), s.first_start - start_us_,
                      end_us - s.first_start, s.attempts, committed, std::move(digest),
                      static_cast<uint32_t>(&s - slots_.data()), s.sent - start_us_, abandoned});
  s.busy = false;
  --busy_;
  if (sink_) {
    // The slot is done with its request (the next issue() generates a new one): the entry takes it, no copy.
    TxnLogEntry e;
    e.mutable_txn()->Swap(&s.txn);
    e.set_committed(committed);
    e.set_abandoned(abandoned);
    for (uint64_t id : s.failed) e.add_failed_attempts(id);
    for (const auto& p : e.txn().pieces())
      if (w_.commutes(p)) e.add_commutative(p.id());
    if (committed && outputs && w_.log_outputs()) *e.mutable_outputs() = *outputs;
    if (committed && stored) *e.mutable_stored() = *stored;
    sink_(e);
  }
}

void ClientNode::maybe_finish(Env& env) {
  (void)env;
  if (!stopping_ || finished_) return;
  if (busy_ == 0 && queued_.empty()) finished_ = true;
}

}  // namespace txn
