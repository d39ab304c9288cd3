#include "core/recovery.h"

#include <algorithm>

namespace txn {

// Deliberately broken variants for `make mutants` (tests/mutants/README.md): -DMUTANT=recovery.<name> compiles
// this file with RECOVERY_MUTANT_<NAME>.
#ifdef RECOVERY_MUTANT_SKIPS_EVENT
constexpr bool kSkipsEvent = true;         // a source's Part after its snapshot leaves out the first event it holds
#else
constexpr bool kSkipsEvent = false;
#endif
#ifdef RECOVERY_MUTANT_STOPS_WHEN_CAUGHT_UP
constexpr bool kStopsWhenCaughtUp = true;  // the restarted replica executes nothing after the snapshot it took over
#else
constexpr bool kStopsWhenCaughtUp = false;
#endif

namespace {
Envelope part_envelope(uint64_t attempt, uint64_t from, uint64_t total, bool idle) {
  Envelope out;
  recovery::Part* p = out.mutable_recovery()->mutable_part();
  p->set_attempt(attempt);
  p->set_from(from);
  p->set_total(total);
  p->set_idle(idle);
  return out;
}
}  // namespace

CatchUpServer::CatchUpServer(std::unique_ptr<ReplicaNode> inner) : inner_(std::move(inner)) {}

void CatchUpServer::on_message(Env& env, Envelope& m) {
  if (m.has_recovery() && !m.recovery().has_part()) {   // a Join, Ack or Leave: this one serves it
    serve(env, m.from(), m.recovery());
  } else {
    inner_->on_message(env, m);   // its protocol's, or a Part for a restarted inner replica (a Learner)
  }
  if (!followers_.empty()) forward(env, false);
}

void CatchUpServer::on_timer(Env& env, uint64_t id) {
  if (id != kTimer) {
    inner_->on_timer(env, id);
    if (!followers_.empty()) forward(env, false);
    return;
  }
  const TimeUs now = env.mono_us();
  for (auto it = followers_.begin(); it != followers_.end();) {
    if (now - it->second.heard_us >= kForgetUs) {   // gone (its process died), or following another now
      it = followers_.erase(it);
      ++forgotten_;
    } else {
      ++it;
    }
  }
  if (followers_.empty()) {
    exec().tap(false);
    beating_ = false;
    return;
  }
  if (now - sent_us_ >= kBeatUs) forward(env, true);
  env.set_timer(kTimer, kBeatUs);
}

void CatchUpServer::serve(Env& env, NodeId from, const recovery::Msg& m) {
  if (m.has_join()) {
    if (auto* l = dynamic_cast<const Learner*>(inner_.get()); l != nullptr && !l->caught_up())
      return;   // a restarted replica that holds no state yet has none to give: the joiner hears from another
    // Its state now, and from now on every event it executes (the tap), so that nothing falls between the two.
    if (!followers_.empty()) forward(env, false);   // what earlier followers are owed, before the tap is shared
    Envelope out = part_envelope(m.join().attempt(), executor().history().size(), executor().history().size(),
                                 inner_->idle());
    if (!executor().snapshot(out.mutable_recovery()->mutable_part()->mutable_snapshot()))
      throw BadMessage("recovery: this workload's store cannot be sent as a snapshot");
    snapshot_bytes_ += static_cast<int64_t>(out.recovery().part().snapshot().ByteSizeLong());
    ++joins_;
    followers_[from] = Follower{m.join().attempt(), env.mono_us()};
    served_ = &executor();
    exec().tap(true);
    sent_us_ = env.mono_us();
    env.send(from, std::move(out));
    if (!beating_) {
      beating_ = true;
      env.set_timer(kTimer, kBeatUs);
    }
    return;
  }
  auto f = followers_.find(from);
  if (m.has_ack()) {
    if (f != followers_.end() && f->second.attempt == m.ack().attempt()) f->second.heard_us = env.mono_us();
    return;
  }
  if (m.has_leave()) {
    if (f != followers_.end() && f->second.attempt == m.leave().attempt()) followers_.erase(f);
    if (followers_.empty()) exec().tap(false);
    return;
  }
  throw BadMessage("recovery: an empty message");
}

// Every follower gets what this replica executed since the last Part (one Part each), or a heartbeat.
void CatchUpServer::forward(Env& env, bool beat) {
  if (&executor() != served_) {   // a restarted inner replica took over another state: its followers ask again
    followers_.clear();
    exec().tap(false);
    return;
  }
  std::vector<recovery::Event> events = exec().take_tapped();
  if (events.empty() && !beat) return;
  const uint64_t total = executor().history().size(), from = total - events.size();
  const size_t skip = kSkipsEvent && !events.empty() && from > 0 ? 1 : 0;
  for (const auto& [to, f] : followers_) {
    Envelope out = part_envelope(f.attempt, from + skip, total, inner_->idle());
    recovery::Part* p = out.mutable_recovery()->mutable_part();
    for (size_t i = skip; i < events.size(); ++i) *p->add_events() = events[i];
    ++parts_;
    events_sent_ += static_cast<int64_t>(events.size() - skip);
    env.send(to, std::move(out));
  }
  sent_us_ = env.mono_us();
}

std::map<std::string, int64_t> CatchUpServer::counters() const {
  auto c = inner_->counters();
  if (joins_ > 0) {
    c["catch_up_joins_served"] = joins_;
    c["catch_up_parts_served"] = parts_;
    c["catch_up_events_served"] = events_sent_;
    c["catch_up_snapshot_bytes"] = snapshot_bytes_;
    c["catch_up_followers_forgotten"] = forgotten_;
  }
  return c;
}

Learner::Learner(const Deployment& d, NodeId self, const Workload& w)
    : d_(d), me_(d.node(self)), w_(w), exec_(std::make_unique<ShardExecutor>(w, d.node(self).shard)) {}

void Learner::start(Env& env) {
  started_us_ = env.mono_us();
  join(env);
  env.set_timer(kTimer, kTickUs);
}

// Asks every other replica of its shard, anew: the first to answer is its source.
void Learner::join(Env& env) {
  ++attempt_;
  source_ = kNone;
  heard_us_ = env.mono_us();
  for (NodeId r : d_.replicas_of(me_.shard)) {
    if (r == me_.id) continue;
    Envelope m;
    m.mutable_recovery()->mutable_join()->set_attempt(attempt_);
    env.send(r, std::move(m));
  }
}

void Learner::on_message(Env& env, Envelope& m) {
  if (!m.has_recovery()) {   // its protocol's: it takes no part in it (header)
    ++ignored_;
    return;
  }
  if (!m.recovery().has_part()) throw BadMessage("recovery: a restarted replica takes Parts only");
  const NodeInfo& from = d_.node(m.from());
  if (from.kind != NodeKind::Replica || from.shard != me_.shard || from.id == me_.id)
    throw BadMessage("recovery: a Part from " + from.name + ", not another replica of shard " +
                     std::to_string(me_.shard));
  take_part(env, m.from(), m.recovery().part());
}

void Learner::take_part(Env& env, NodeId from, const recovery::Part& p) {
  if (p.attempt() != attempt_ || (source_ != kNone && from != source_)) {   // an answer to an earlier Join, or
    ++stale_;                                                               // a second one to this
    if (p.has_snapshot()) {
      Envelope m;
      m.mutable_recovery()->mutable_leave()->set_attempt(p.attempt());
      env.send(from, std::move(m));
    }
    return;
  }
  heard_us_ = env.mono_us();
  if (source_ == kNone) {
    if (!p.has_snapshot()) {   // a Part of this attempt before its snapshot: cannot be (one channel, in order)
      ++stale_;
      return;
    }
    auto fresh = std::make_unique<ShardExecutor>(w_, me_.shard);
    if (!fresh->install(p.snapshot()) || static_cast<uint64_t>(p.snapshot().history_size()) != p.from())
      throw BadMessage("recovery: a snapshot of " + d_.node(from).name + " that cannot be taken over");
    exec_ = std::move(fresh);
    source_ = from;
    ++sources_;
    have_ = p.from();
    snapshot_events_ = static_cast<int64_t>(have_);
    source_total_ = p.total();
    source_idle_ = p.idle();
    if (caught_up_us_ < 0) {
      caught_up_us_ = env.mono_us() - started_us_;
      if (on_caught_up_) on_caught_up_(env, have_, caught_up_us_, from);
    }
    return;
  }
  if (p.from() != have_) {   // a gap in what its source sent: take a source's state anew
    ++stale_;
    env.log("recovery: a Part from event " + std::to_string(p.from()) + " of " + d_.node(from).name + ", holding " +
            std::to_string(have_) + ": asking for a snapshot again");
    join(env);
    return;
  }
  ++parts_;
  if (kStopsWhenCaughtUp) {
    source_total_ = have_;
    source_idle_ = true;
    return;
  }
  Vars out;
  for (const auto& e : p.events()) {
    const OrderKey key = e.key_set() ? order_key(e.key_domain(), e.key_hi(), e.key_lo()) : OrderKey{};
    out.clear();
    try {
      exec_->execute(e.txn(), e.piece(), e.in(), &out, e.deferred(), key);
    } catch (const BadMessage&) {
      // rejected here as at its source (recorded in the history the same way)
    }
  }
  have_ += static_cast<uint64_t>(p.events_size());
  source_total_ = p.total();
  source_idle_ = p.idle();
}

void Learner::on_timer(Env& env, uint64_t id) {
  if (id != kTimer) return;
  const TimeUs now = env.mono_us();
  if (now - heard_us_ >= kSilentUs) {   // its source went silent, or nobody answered: whoever is live now
    if (source_ != kNone) env.log("recovery: " + d_.node(source_).name + " silent; asking the shard's replicas again");
    join(env);
  } else if (source_ != kNone) {
    Envelope m;
    m.mutable_recovery()->mutable_ack()->set_attempt(attempt_);
    m.mutable_recovery()->mutable_ack()->set_have(have_);
    env.send(source_, std::move(m));
  }
  env.set_timer(kTimer, kTickUs);
}

std::map<std::string, int64_t> Learner::counters() const {
  return {{"restarted", 1},
          {"recovered_events", static_cast<int64_t>(have_)},
          {"snapshot_events", snapshot_events_},
          {"caught_up_ms", caught_up_us_ < 0 ? -1 : caught_up_us_ / 1000},
          {"catch_up_parts", parts_},
          {"catch_up_stale_parts", stale_},
          {"catch_up_sources", sources_},
          {"ignored_protocol_messages", ignored_}};
}

std::unique_ptr<ReplicaNode> serve_catch_up(const Deployment&, NodeId, std::unique_ptr<ReplicaNode> r) {
  return std::make_unique<CatchUpServer>(std::move(r));
}

}  // namespace txn
