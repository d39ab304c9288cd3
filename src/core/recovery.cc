#include "core/recovery.h"

#include <malloc.h>

#include <algorithm>

// tcmalloc's (gperftools), where the engine is linked with it: hand freed pages back to the system (nullptr
// otherwise). glibc's malloc_trim does the same for its heap.
extern "C" void MallocExtension_ReleaseFreeMemory(void) __attribute__((weak));
extern "C" void MallocExtension_MarkThreadIdle(void) __attribute__((weak));

namespace txn {

namespace {
// A snapshot made or taken over, and a history fetched in chunks, are megabytes that are freed at once: given back,
// so that a replica that served or took one does not keep them for the rest of the run (its resident memory stays
// what its state needs).
void give_back_freed() {
  // This thread's cache of freed small objects first (the event loop's, which made and freed them): back to the
  // central lists, so that spans whose objects are all free become whole free pages the release can hand back.
  if (MallocExtension_MarkThreadIdle) MallocExtension_MarkThreadIdle();
  if (MallocExtension_ReleaseFreeMemory) MallocExtension_ReleaseFreeMemory();
  else malloc_trim(0);
}
// ... when it is due (`at`: when; -1: none due), once.
void give_back_if_due(TimeUs* at, TimeUs now) {
  if (*at < 0 || now < *at) return;
  *at = -1;
  give_back_freed();
}
}  // namespace

// Deliberately broken variants for `make mutants` (tests/mutants/README.md): -DMUTANT=recovery.<name> compiles
// this file with RECOVERY_MUTANT_<NAME>.
#ifdef RECOVERY_MUTANT_SKIPS_EVENT
constexpr bool kSkipsEvent = true;         // a source's Part after its snapshot leaves out the first event it holds,
                                           // numbered as if it held it (a gap the follower cannot see)
#else
constexpr bool kSkipsEvent = false;
#endif
#ifdef RECOVERY_MUTANT_VOTES_BEFORE_SEALED
constexpr bool kVotesBeforeSealed = true;  // a restarted replica votes as soon as it holds a state, unsealed
#else
constexpr bool kVotesBeforeSealed = false;
#endif
#ifdef RECOVERY_MUTANT_REUSES_EPOCH
constexpr bool kReusesEpoch = true;        // a restarted replica seals in its peers' epoch, not above it
#else
constexpr bool kReusesEpoch = false;
#endif
#ifdef RECOVERY_MUTANT_STOPS_WHEN_CAUGHT_UP
constexpr bool kStopsWhenCaughtUp = true;  // the restarted replica executes nothing after the snapshot it took over,
                                           // yet counts what its source sent as held (it never sees a gap)
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
  if (m.has_recovery() && !m.recovery().has_part() && !m.recovery().has_sealed() &&
      !m.recovery().has_written()) {   // Join, Ack, Leave, Seal, Fetch
    serve(env, m.from(), m.recovery());
  } else {
    inner_->on_message(env, m);   // its protocol's, or a Part or Sealed for a restarted inner replica (a Learner)
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
  give_back_if_due(&give_back_at_us_, now);
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
    if (give_back_at_us_ >= 0) {   // a snapshot it sent to a peer that left at once (it chose another source)
      env.set_timer(kTimer, kBeatUs);
      return;
    }
    beating_ = false;
    return;
  }
  if (now - sent_us_ >= kBeatUs) forward(env, true);
  env.set_timer(kTimer, kBeatUs);
}

void CatchUpServer::serve(Env& env, NodeId from, const recovery::Msg& m) {
  if (m.has_join()) {
    if (auto* l = dynamic_cast<const Learner*>(inner_.get());
        l != nullptr && (!l->caught_up() || !l->executor().history_complete()))
      return;   // a restarted replica that holds no state (or history) yet has none to give: the joiner hears from another
    // Its state now, and from now on every event it executes (the tap), so that nothing falls between the two.
    if (!followers_.empty()) forward(env, false);   // what earlier followers are owed, before the tap is shared
    Envelope out = part_envelope(m.join().attempt(), executor().events(), executor().events(),
                                 inner_->idle());
    out.mutable_recovery()->mutable_part()->set_epoch(inner_->epoch());
    out.mutable_recovery()->mutable_part()->set_has_record(
        inner_->seal(0, out.mutable_recovery()->mutable_part()->mutable_record()));   // 0: its epoch unchanged
    if (!executor().snapshot(out.mutable_recovery()->mutable_part()->mutable_snapshot()))
      throw BadMessage("recovery: this workload's store cannot be sent as a snapshot");
    snapshot_bytes_ += static_cast<int64_t>(out.recovery().part().snapshot().ByteSizeLong());
    ++joins_;
    followers_[from] = Follower{m.join().attempt(), env.mono_us(), executor().events()};
    served_ = &executor();
    exec().tap(true);
    sent_us_ = env.mono_us();
    env.send(from, std::move(out));
    give_back_at_us_ = env.mono_us() + kGiveBackUs;   // once the transport has written it
    if (!beating_) {
      beating_ = true;
      env.set_timer(kTimer, kBeatUs);
    }
    return;
  }
  if (m.has_seal()) {   // a restarted peer votes from now on: no vote of this replica's before counts with one after
    if (followers_.count(from)) forward(env, false);   // what it executed before its record, ahead of the record
    Envelope out;
    recovery::Sealed* r = out.mutable_recovery()->mutable_sealed();
    r->set_attempt(m.seal().attempt());
    r->set_has_record(inner_->seal(m.seal().epoch(), r->mutable_record()));
    r->set_epoch(inner_->epoch());
    ++seals_;
    env.send(from, std::move(out));
    return;
  }
  auto f = followers_.find(from);
  if (m.has_fetch()) {   // a chunk of the history its snapshot named: read from the file now, sent, freed
    if (f == followers_.end() || f->second.attempt != m.fetch().attempt() || &executor() != served_)
      return;   // not a follower of this state (any more): it asks again, and is answered with a new snapshot
    f->second.heard_us = env.mono_us();
    Envelope out;
    recovery::Written* w = out.mutable_recovery()->mutable_written();
    uint64_t next = 0, events = 0;
    if (!executor().read_written(m.fetch().offset(), m.fetch().end(), kChunkBytes, w->mutable_text(), &next, &events))
      throw BadMessage("recovery: a Fetch of bytes [" + std::to_string(m.fetch().offset()) + ", " +
                       std::to_string(m.fetch().end()) + ") that are not whole lines of this replica's history file");
    w->set_attempt(m.fetch().attempt());
    w->set_offset(m.fetch().offset());
    w->set_next(next);
    w->set_events(events);
    ++chunks_;
    chunk_bytes_ += static_cast<int64_t>(w->text().size());
    env.send(from, std::move(out));
    give_back_at_us_ = env.mono_us() + kGiveBackUs;   // the chunk's pages, once the last one is written
    return;
  }
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
  const uint64_t total = executor().events();
  const size_t skip = kSkipsEvent && !events.empty() ? 1 : 0;
  for (auto& [to, f] : followers_) {
    Envelope out = part_envelope(f.attempt, f.sent, total, inner_->idle());
    recovery::Part* p = out.mutable_recovery()->mutable_part();
    for (size_t i = skip; i < events.size(); ++i) *p->add_events() = events[i];
    f.sent += events.size() - skip;   // the events it has sent this follower: the next Part's first (the mutant's
    ++parts_;                         // gap is numbered away, so the follower cannot see it)
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
    c["catch_up_history_chunks_served"] = chunks_;
    c["catch_up_history_bytes_served"] = chunk_bytes_;
  }
  if (seals_ > 0) c["seals_served"] = seals_;
  return c;
}

Learner::Learner(const Deployment& d, NodeId self, const Workload& w, std::unique_ptr<Voter> voter)
    : d_(d), me_(d.node(self)), w_(w), exec_(std::make_unique<ShardExecutor>(w, d.node(self).shard)),
      voter_(std::move(voter)) {}

std::vector<NodeId> Learner::peers() const {
  std::vector<NodeId> out;
  for (NodeId r : d_.replicas_of(me_.shard))
    if (r != me_.id) out.push_back(r);
  return out;
}

void Learner::start(Env& env) {
  started_us_ = env.mono_us();
  // Its Joins and Seals are numbered from its start time, not from 0: a replica restarted again is another
  // incarnation of the same node, and what its peers still send the one before it (a source's Parts, forwarded to
  // the node until its new Join arrives) must not pass for an answer to this one's.
  attempt_ = seal_attempt_ = static_cast<uint64_t>(std::max<TimeUs>(started_us_, 0));
  join(env);
  env.set_timer(kTimer, kTickUs);
}

// Asks every other replica of its shard, anew; of those that answer, it will follow the one of the lowest index.
void Learner::join(Env& env) {
  ++attempt_;
  source_ = kNone;
  offers_.clear();
  epochs_.clear();
  first_offer_us_ = -1;
  fetch_sent_us_ = -1;
  heard_us_ = env.mono_us();
  if (voting_) {   // its state is about to be another's: its votes wait for a new seal
    voting_ = false;
    env.log("recovery: not voting until the shard's other replicas seal again");
  }
  for (NodeId r : peers()) {
    Envelope m;
    m.mutable_recovery()->mutable_join()->set_attempt(attempt_);
    env.send(r, std::move(m));
  }
}

void Learner::on_message(Env& env, Envelope& m) {
  if (!m.has_recovery()) {   // its protocol's: its Voter's once it votes (kept for it until then), else dropped
    if (voting_) {
      voter_->on_message(env, m, *exec_);
      ++voted_;
    } else if (voter_ && held_.size() < kHeldMax) {
      held_.push_back(std::move(m));
    } else {
      ++ignored_;
    }
    return;
  }
  const NodeInfo& from = d_.node(m.from());
  if (from.kind != NodeKind::Replica || from.shard != me_.shard || from.id == me_.id)
    throw BadMessage("recovery: a message from " + from.name + ", not another replica of shard " +
                     std::to_string(me_.shard));
  if (m.recovery().has_part()) return take_part(env, m.from(), m.recovery().part());
  if (m.recovery().has_sealed()) return take_sealed(env, m.from(), m.recovery().sealed());
  if (m.recovery().has_written()) return take_written(env, m.from(), m.recovery().written());
  throw BadMessage("recovery: a restarted replica takes Parts, Written and Sealed answers only");
}

void Learner::take_part(Env& env, NodeId from, const recovery::Part& p) {
  if (p.attempt() != attempt_ || (source_ != kNone && from != source_)) {   // an answer to an earlier Join, or
    ++stale_;                                                               // from one it does not follow
    if (p.has_snapshot()) {
      Envelope m;
      m.mutable_recovery()->mutable_leave()->set_attempt(p.attempt());
      env.send(from, std::move(m));
    }
    return;
  }
  heard_us_ = env.mono_us();
  if (source_ == kNone) {   // still choosing: kept, in order, per peer
    auto it = offers_.find(from);
    if ((it == offers_.end()) != p.has_snapshot()) {   // a Part before its snapshot, or a second snapshot: cannot be
      ++stale_;
      return;
    }
    auto& offer = offers_[from];   // (an offer is never empty: it starts with its snapshot)
    if (p.has_snapshot()) epochs_[from] = p.epoch();
    offer.push_back(p);
    if (first_offer_us_ < 0) first_offer_us_ = env.mono_us();
    if (offers_.size() == peers().size()) choose(env);
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
    have_ += static_cast<uint64_t>(p.events_size());
    source_total_ = p.total();
    source_idle_ = p.idle();
    return;
  }
  Vars out;
  for (const auto& e : p.events()) {
    const OrderKey key = e.key_set() ? order_key(e.key_domain(), e.key_hi(), e.key_lo()) : OrderKey{};
    if (e.deps_set()) exec_->declare_deps(e.txn(), {e.deps().begin(), e.deps().end()});
    out.clear();
    try {
      exec_->execute(e.txn(), e.piece(), e.in(), &out, e.deferred(), key);
    } catch (const BadMessage&) {
      // rejected here as at its source (recorded in the history the same way)
    }
    if (voter_) voter_->executed(e.txn(), e.piece());
  }
  have_ += static_cast<uint64_t>(p.events_size());
  source_total_ = p.total();
  source_idle_ = p.idle();
}

// Of the peers that answered this Join, it follows the one of the lowest index (replica 0 when it answered) and
// leaves the others; what its source sent since its snapshot is executed now.
void Learner::choose(Env& env) {
  first_offer_us_ = -1;   // chosen now; a snapshot it cannot take over (BadMessage below) leaves it to ask again
  if (offers_.empty()) return;
  const NodeId from = offers_.begin()->first;
  std::vector<recovery::Part> parts = std::move(offers_.begin()->second);
  for (const auto& [peer, _] : offers_)
    if (peer != from) {
      Envelope m;
      m.mutable_recovery()->mutable_leave()->set_attempt(attempt_);
      env.send(peer, std::move(m));
    }
  offers_.clear();
  const recovery::Part& first = parts.front();
  auto fresh = std::make_unique<ShardExecutor>(w_, me_.shard);
  if (exec_->history_file() && !fresh->stream_to(exec_->history_file(), exec_->keep_events()))   // its history file, started anew
    throw std::runtime_error("recovery: cannot write " + exec_->history_file()->path + ".part");
  if (!fresh->install(first.snapshot()) || first.snapshot().written_events() + static_cast<uint64_t>(first.snapshot().history_size()) != first.from())
    throw BadMessage("recovery: a snapshot of " + d_.node(from).name + " that cannot be taken over");
  exec_ = std::move(fresh);
  source_ = from;
  ++sources_;
  have_ = first.from();
  snapshot_events_ = static_cast<int64_t>(have_);
  source_total_ = first.total();
  source_idle_ = first.idle();
  if (caught_up_us_ < 0) {
    caught_up_us_ = env.mono_us() - started_us_;
    if (on_caught_up_) on_caught_up_(env, have_, caught_up_us_, from);
  }
  if (voter_) voter_->follow(first.has_record() ? first.record() : std::string());
  fetch_at_ = first.snapshot().written_begin();
  fetch_end_ = first.snapshot().written_events() > 0 ? first.snapshot().written_end() : fetch_at_;
  if (fetch_at_ < fetch_end_) fetch(env);   // its source's written history, a chunk at a time
  for (size_t i = 1; i < parts.size(); ++i) take_part(env, from, parts[i]);
  give_back_at_us_ = env.mono_us() + CatchUpServer::kGiveBackUs;   // the snapshot, once its message is freed too
  if (voter_ && source_ == from) {
    if (kVotesBeforeSealed) {   // (mutant) its votes count at once, in its peers' epoch, from no record
      uint64_t e = 0;
      for (const auto& [_, x] : epochs_) e = std::max(e, x);
      voting_ = voter_->adopt(e, {}, *exec_);
      seal_epoch_ = e;
      return;
    }
    uint64_t e = 0;
    for (const auto& [_, x] : epochs_) e = std::max(e, x);
    seal(env, kReusesEpoch ? e : e + 1);
  }
}

void Learner::fetch(Env& env) {
  Envelope m;
  recovery::Fetch* f = m.mutable_recovery()->mutable_fetch();
  f->set_attempt(attempt_);
  f->set_offset(fetch_at_);
  f->set_end(fetch_end_);
  fetch_sent_us_ = env.mono_us();
  ++fetches_;
  env.send(source_, std::move(m));
}

// A chunk of its source's written history: to its own history file (or memory), then the next asked for.
void Learner::take_written(Env& env, NodeId from, const recovery::Written& w) {
  if (w.attempt() != attempt_ || from != source_ || fetch_sent_us_ < 0 || w.offset() != fetch_at_) {
    ++stale_;   // an answer to an earlier Join or Fetch
    return;
  }
  if (w.next() <= w.offset() || w.next() > fetch_end_ || !exec_->take_written(w.text(), w.events()) ||
      (w.next() == fetch_end_ && !exec_->history_complete()))
    throw BadMessage("recovery: a chunk of " + d_.node(from).name + "'s history that does not continue its snapshot");
  fetched_bytes_ += static_cast<int64_t>(w.text().size());
  fetch_at_ = w.next();
  fetch_sent_us_ = -1;
  if (fetch_at_ < fetch_end_) fetch(env);
  else give_back_at_us_ = env.mono_us() + CatchUpServer::kGiveBackUs;   // the chunks' pages, the last one freed too
}

// Asks every other replica to move to `epoch` and send its record.
void Learner::seal(Env& env, uint64_t epoch) {
  ++seal_attempt_;
  seal_epoch_ = epoch;
  seal_sent_us_ = env.mono_us();
  sealed_.clear();
  for (NodeId r : peers()) {
    Envelope m;
    m.mutable_recovery()->mutable_seal()->set_attempt(seal_attempt_);
    m.mutable_recovery()->mutable_seal()->set_epoch(epoch);
    env.send(r, std::move(m));
  }
}

bool Learner::seal(uint64_t epoch, std::string* record) {
  if (!voting_ || !voter_) return false;
  if (!voter_->seal(std::max(seal_epoch_, epoch), record)) return false;
  seal_epoch_ = std::max(seal_epoch_, epoch);
  return true;
}

void Learner::take_sealed(Env& env, NodeId from, const recovery::Sealed& s) {
  if (voting_ || s.attempt() != seal_attempt_ || seal_sent_us_ < 0) {
    ++stale_;
    return;
  }
  sealed_[from] = s;
  if (sealed_.size() < peers().size()) return;
  uint64_t top = 0;
  bool all_records = true, same = true;
  for (const auto& [_, x] : sealed_) {
    top = std::max(top, x.epoch());
    all_records = all_records && x.has_record();
    same = same && x.epoch() == seal_epoch_;
  }
  if (!all_records) {   // a peer that is itself restarting and not voting yet: its Seal is asked again in kSilentUs
    env.log("recovery: a peer sealed without a record (it is rejoining too): asking again later");
    return;
  }
  if (!same) return seal(env, std::max(top, seal_epoch_) + 1);   // one had moved past it (another rejoin)
  std::vector<std::string> records;
  for (const auto& [_, x] : sealed_) records.push_back(x.record());   // in replica order (a map by node id)
  seal_sent_us_ = -1;
  if (!voter_->adopt(seal_epoch_, records, *exec_)) throw BadMessage("recovery: a sealed record its Voter cannot read");
  voting_ = true;
  ++seals_;
  if (on_voting_) on_voting_(env, seal_epoch_, env.mono_us() - started_us_);
  // What came while it sealed, in the order it came: later than every record, it is voted on as if it came now
  for (Envelope& m : std::exchange(held_, {})) {
    voter_->on_message(env, m, *exec_);
    ++voted_;
  }
}

void Learner::on_timer(Env& env, uint64_t id) {
  if (id != kTimer) return;
  const TimeUs now = env.mono_us();
  give_back_if_due(&give_back_at_us_, now);
  if (source_ == kNone && first_offer_us_ >= 0 && now - first_offer_us_ >= kChooseUs) {
    choose(env);   // the others did not answer in time: the lowest of those that did
  } else if (now - heard_us_ >= kSilentUs) {   // its source went silent, or nobody answered: whoever is live now
    if (source_ != kNone) env.log("recovery: " + d_.node(source_).name + " silent; asking the shard's replicas again");
    join(env);
  } else if (source_ != kNone) {
    Envelope m;
    m.mutable_recovery()->mutable_ack()->set_attempt(attempt_);
    m.mutable_recovery()->mutable_ack()->set_have(have_);
    env.send(source_, std::move(m));
    if (voter_ && !voting_ && seal_sent_us_ >= 0 && now - seal_sent_us_ >= kSilentUs)
      seal(env, seal_epoch_ + 1);   // a peer did not answer its Seal: ask again, above it
    if (fetch_sent_us_ >= 0 && now - fetch_sent_us_ >= kSilentUs) fetch(env);   // unanswered: asked again
  }
  env.set_timer(kTimer, kTickUs);
}

std::map<std::string, int64_t> Learner::counters() const {
  std::map<std::string, int64_t> c = {{"restarted", 1},
                                      {"recovered_events", static_cast<int64_t>(have_)},
                                      {"snapshot_events", snapshot_events_},
                                      {"caught_up_ms", caught_up_us_ < 0 ? -1 : caught_up_us_ / 1000},
                                      {"catch_up_parts", parts_},
                                      {"catch_up_stale_parts", stale_},
                                      {"catch_up_sources", sources_},
                                      {"history_fetched_bytes", fetched_bytes_},
                                      {"history_fetches", fetches_},
                                      {"ignored_protocol_messages", ignored_}};
  if (voter_) {
    c["rejoin_seals"] = seals_;
    c["rejoin_epoch"] = voting_ ? static_cast<int64_t>(seal_epoch_) : 0;
    c["voter_messages"] = voted_;
    for (const auto& [k, v] : voter_->counters()) c[k] = v;
  }
  return c;
}

std::unique_ptr<ReplicaNode> serve_catch_up(const Deployment&, NodeId, std::unique_ptr<ReplicaNode> r) {
  return std::make_unique<CatchUpServer>(std::move(r));
}

}  // namespace txn
