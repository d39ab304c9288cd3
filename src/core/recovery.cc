#include "core/recovery.h"

#include <algorithm>

namespace txn {

// Deliberately broken variants for `make mutants` (tests/mutants/README.md): -DMUTANT=recovery.<name> compiles
// this file with RECOVERY_MUTANT_<NAME>.
#ifdef RECOVERY_MUTANT_SKIPS_EVENT
constexpr bool kSkipsEvent = true;         // a Part after the first leaves out the event it starts at
#else
constexpr bool kSkipsEvent = false;
#endif
#ifdef RECOVERY_MUTANT_STOPS_WHEN_CAUGHT_UP
constexpr bool kStopsWhenCaughtUp = true;  // the restarted replica stops asking once it has caught up
#else
constexpr bool kStopsWhenCaughtUp = false;
#endif

CatchUpServer::CatchUpServer(std::unique_ptr<ReplicaNode> inner) : inner_(std::move(inner)) {
  // The executor is the inner replica's own (not a const object): it keeps what it executes from now on.
  const_cast<ShardExecutor&>(inner_->executor()).retain();
}

void CatchUpServer::on_message(Env& env, Envelope& m) {
  if (!m.has_recovery()) {
    inner_->on_message(env, m);
    return;
  }
  if (!m.recovery().has_ask()) throw BadMessage("recovery: replica 0 takes an Ask only");
  const auto& all = inner_->executor().retained();
  const uint64_t from = m.recovery().ask().from();
  if (from > all.size())
    throw BadMessage("recovery: Ask from event " + std::to_string(from) + " of " + std::to_string(all.size()));
  Envelope out;
  recovery::Part* p = out.mutable_recovery()->mutable_part();
  p->set_from(from);
  const uint64_t skip = kSkipsEvent && from > 0 && from < all.size() ? 1 : 0;
  const uint64_t to = std::min<uint64_t>(all.size(), from + skip + kPartEvents);
  for (uint64_t i = from + skip; i < to; ++i) *p->add_events() = all[i];
  p->set_total(all.size());
  p->set_idle(inner_->idle());
  ++parts_;
  events_sent_ += static_cast<int64_t>(to - from - skip);
  env.send(m.from(), std::move(out));
}

std::map<std::string, int64_t> CatchUpServer::counters() const {
  auto c = inner_->counters();
  c["catch_up_parts_served"] = parts_;
  c["catch_up_events_served"] = events_sent_;
  return c;
}

Learner::Learner(const Deployment& d, NodeId self, const Workload& w)
    : leader_(d.replica_id(d.node(self).shard, 0)), exec_(w, d.node(self).shard) {}

void Learner::start(Env& env) {
  started_us_ = env.mono_us();
  ask(env);
  env.set_timer(kTimer, kPollUs);
}

void Learner::ask(Env& env) {
  if (kStopsWhenCaughtUp && caught_up_) return;
  Envelope m;
  m.mutable_recovery()->mutable_ask()->set_from(have_);
  env.send(leader_, std::move(m));
  asking_ = true;
  asked_us_ = env.mono_us();
}

void Learner::on_message(Env& env, Envelope& m) {
  if (!m.has_recovery()) {   // its protocol's: it takes no part in it (header)
    ++ignored_;
    return;
  }
  if (!m.recovery().has_part() || m.from() != leader_)
    throw BadMessage("recovery: a restarted replica takes a Part from replica 0 of its shard only");
  const recovery::Part& p = m.recovery().part();
  if (p.from() != have_) {   // an answer to an Ask asked again: what it brings is here already, or comes next
    ++stale_;
    return;
  }
  ++parts_;
  Vars out;
  for (const auto& e : p.events()) {
    const OrderKey key = e.key_set() ? order_key(e.key_domain(), e.key_hi(), e.key_lo()) : OrderKey{};
    out.clear();
    try {
      exec_.execute(e.txn(), e.piece(), e.in(), &out, e.deferred(), key);
    } catch (const BadMessage&) {
      // rejected here as at replica 0 (recorded in the history the same way)
    }
  }
  have_ += static_cast<uint64_t>(p.events_size());
  leader_total_ = std::max(leader_total_, p.total());
  leader_idle_ = p.idle();
  asking_ = false;
  if (have_ < p.total()) {
    ask(env);
    return;
  }
  if (!caught_up_) {
    caught_up_ = true;
    caught_up_us_ = env.mono_us() - started_us_;
    if (on_caught_up_) on_caught_up_(env, have_, caught_up_us_);
  }
}

void Learner::on_timer(Env& env, uint64_t id) {
  if (id != kTimer) return;
  const TimeUs now = env.mono_us();
  if (!asking_ || now - asked_us_ >= kResendUs) ask(env);
  env.set_timer(kTimer, kPollUs);
}

std::map<std::string, int64_t> Learner::counters() const {
  return {{"restarted", 1},
          {"recovered_events", static_cast<int64_t>(have_)},
          {"caught_up_ms", caught_up_us_ < 0 ? -1 : caught_up_us_ / 1000},
          {"catch_up_parts", parts_},
          {"catch_up_stale_parts", stale_},
          {"ignored_protocol_messages", ignored_}};
}

std::unique_ptr<ReplicaNode> serve_restarts(const Deployment& d, NodeId id, std::unique_ptr<ReplicaNode> r) {
  if (!d.faults.serves_restart(d, id)) return r;
  return std::make_unique<CatchUpServer>(std::move(r));
}

}  // namespace txn
