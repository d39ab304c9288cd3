#include "client/client_node.h"

#include <algorithm>

namespace txn {
namespace {
// Client-owned timer ids live far above anything a driver uses.
constexpr uint64_t kStopTimer = (uint64_t{1} << 62) + 1;
constexpr uint64_t kDrainTimer = (uint64_t{1} << 62) + 2;
}  // namespace

ClientNode::ClientNode(const Deployment& d, NodeId self, const Workload& w,
                       std::unique_ptr<ClientDriver> driver)
    : d_(d), self_(self), w_(w), driver_(std::move(driver)), slots_(d.client.n_concurrent) {
  driver_->set_done([this](Env& env, const ClientDriver::Outcome& o) { finish_attempt(env, o); });
}

void ClientNode::start(Env& env) {
  start_us_ = env.mono_us();
  env.set_timer(kStopTimer, static_cast<TimeUs>(d_.client.duration_s * 1e6));
  for (uint32_t i = 0; i < slots_.size(); ++i) issue(env, i);
}

void ClientNode::on_message(Env& env, Envelope& msg) { driver_->on_message(env, msg); }

void ClientNode::on_timer(Env& env, uint64_t id) {
  if (id == kStopTimer) {
    stopping_ = true;
    env.set_timer(kDrainTimer, static_cast<TimeUs>(d_.client.drain_timeout_s * 1e6));
    maybe_finish(env);
  } else if (id == kDrainTimer) {
    if (finished_) return;
    TimeUs now = env.mono_us();
    for (auto& s : slots_)
      if (s.busy) record(s, now, false, nullptr);
    finished_ = true;
  } else {
    driver_->on_timer(env, id);
  }
}

void ClientNode::issue(Env& env, uint32_t slot) {
  if (stopping_) return;
  // k = this client's index among the clients of its home shard.
  const NodeInfo& me = d_.node(self_);
  uint32_t k = 0;
  for (NodeId c : d_.clients())
    if (c < self_ && d_.node(c).shard == me.shard) ++k;
  ClientContext ctx{me.shard, slot + k * d_.client.n_concurrent};
  Slot& s = slots_[slot];
  s.txn = w_.generate(env.rng(), ctx);
  s.txn.set_txn_id((uint64_t{self_} << 40) | next_seq_++);
  s.first_start = env.mono_us();
  s.attempts = 1;
  s.failed.clear();
  s.busy = true;
  driver_->submit(env, s.txn, 1);
}

void ClientNode::finish_attempt(Env& env, const ClientDriver::Outcome& o) {
  if (finished_) return;
  auto it = std::find_if(slots_.begin(), slots_.end(),
                         [&](const Slot& s) { return s.busy && s.txn.txn_id() == o.txn_id; });
  if (it == slots_.end()) return;  // stale outcome (e.g. a duplicate reply)
  Slot& s = *it;
  uint32_t slot = static_cast<uint32_t>(it - slots_.begin());
  if (!o.committed && s.attempts < d_.client.retry_limit) {
    // Retry the same transaction under a fresh id.
    s.failed.push_back(s.txn.txn_id());
    s.txn.set_txn_id((uint64_t{self_} << 40) | next_seq_++);
    ++s.attempts;
    driver_->submit(env, s.txn, s.attempts);
    return;
  }
  record(s, env.mono_us(), o.committed, o.outputs);
  issue(env, slot);  // zero think time; no-op once stopping
  maybe_finish(env);
}

void ClientNode::record(Slot& s, TimeUs end_us, bool committed, const Vars* outputs) {
  static const Vars kNone;
  const Vars& out = outputs ? *outputs : kNone;
  std::string digest = committed ? outputs_digest(out) : "";
  records_.push_back({s.txn.txn_id(), s.txn.type(), s.txn.crt(), s.first_start - start_us_,
                      end_us - s.first_start, s.attempts, committed, std::move(digest),
                      static_cast<uint32_t>(&s - slots_.data())});
  s.busy = false;
  if (sink_) {
    // The slot is done with its request (the next issue() generates a new one): the entry takes it, no copy.
    TxnLogEntry e;
    e.mutable_txn()->Swap(&s.txn);
    e.set_committed(committed);
    for (uint64_t id : s.failed) e.add_failed_attempts(id);
    for (const auto& p : e.txn().pieces())
      if (w_.commutes(p)) e.add_commutative(p.id());
    if (committed && outputs && w_.log_outputs()) *e.mutable_outputs() = *outputs;
    sink_(e);
  }
}

void ClientNode::maybe_finish(Env& env) {
  (void)env;
  if (!stopping_ || finished_) return;
  if (std::none_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.busy; }))
    finished_ = true;
}

}  // namespace txn
