// SLOG's logs: the region's local log (orderer and backup), the global log of
// multi-home transactions, and the protocol's registration
// (docs/protocols/slog.md).
#include <algorithm>
#include <cmath>

#include "protocols/slog/mutant.h"
#include "protocols/slog/slog.h"

namespace txn::slog {
namespace {

std::string str(uint64_t x) { return std::to_string(x); }
constexpr uint64_t kBatchTimer = 1;

}  // namespace

// ---- the local log ----------------------------------------------------------------------

Orderer::Orderer(const Deployment& d, NodeId self) : d_(d), me_(d.node(self)), opts_(d) {}

void Orderer::on_message(Env& env, Envelope& msg) {
  if (!msg.has_slog()) throw BadMessage("SLOG orderer got a message of another protocol");
  const auto& s = msg.slog();
  switch (s.body_case()) {
    case ::slog::Msg::kToLocalLog: {
      const ::slog::Entry& e = s.to_local_log().entry();
      for (uint32_t shard : touched_shards(d_, e.txn()))
        if (d_.region_of_shard(shard) != me_.region)
          throw BadMessage("single-home txn " + str(e.txn().txn_id()) + " touches shard " + str(shard) +
                           " outside region " + str(me_.region));
      return add(env, e);
    }
    case ::slog::Msg::kOrdered: {
      const ::slog::Ordered& o = s.ordered();
      if (o.global_index() < next_global_ || early_.count(o.global_index()))
        throw BadMessage("global index " + str(o.global_index()) + " seen before at " + me_.name);
      if (o.has_entry()) touched_shards(d_, o.entry().txn());  // a malformed one is refused here, not at the shards
      early_.emplace(o.global_index(), o);
      // The contiguous prefix of the global log goes into the local log; a
      // skip only advances it. A gap waits for the entry that fills it.
      for (auto it = early_.find(next_global_); it != early_.end(); it = early_.find(next_global_)) {
        if (it->second.has_entry()) add(env, it->second.entry());
        early_.erase(it);
        ++next_global_;
      }
      return;
    }
    case ::slog::Msg::kReplicateReply: {
      const uint64_t b = s.replicate_reply().batch();
      if (!unacked_.count(b)) throw BadMessage("ReplicateReply for batch " + str(b) + ", not awaiting its copy");
      acked_.insert(b);
      // Batches are delivered in order: a batch whose copy came back waits for its predecessors.
      while (acked_.count(delivered_ + 1)) {
        const uint64_t next = delivered_ + 1;
        deliver(env, next, unacked_.at(next));
        unacked_.erase(next);
        acked_.erase(next);
        delivered_ = next;
      }
      return;
    }
    case ::slog::Msg::BODY_NOT_SET: throw BadMessage("empty SLOG message");
    default: throw BadMessage("SLOG message for a replica or the global log sent to orderer " + me_.name);
  }
}

// The entry takes the next position of the local log; the open batch is cut at
// the next tick of the batch period.
void Orderer::add(Env& env, ::slog::Entry e) {
  e.set_logged_us(env.now_us());
  open_.push_back(std::move(e));
  if (timer_armed_) return;
  timer_armed_ = true;
  const TimeUs period = std::max<TimeUs>(1, std::llround(opts_.batch_interval_ms * 1000));
  env.set_timer(kBatchTimer, period - env.now_us() % period);
}

void Orderer::on_timer(Env& env, uint64_t id) {
  if (id != kBatchTimer) return;
  timer_armed_ = false;
  if (open_.empty()) return;
  const uint64_t b = ++last_batch_;
  Envelope e;
  auto* r = e.mutable_slog()->mutable_replicate();
  r->set_batch(b);
  for (const auto& x : open_) *r->add_entries() = x;
  unacked_.emplace(b, std::move(open_));
  open_.clear();
  env.send(d_.role_node(kLogBackup, me_.region), std::move(e));
}

// Every replica of every shard of the region gets every batch (an empty one
// keeps the numbering contiguous), with the entries that touch its shard.
void Orderer::deliver(Env& env, uint64_t batch, const std::vector<::slog::Entry>& entries) {
  for (uint32_t s = me_.region * d_.shards_per_region; s < (me_.region + 1) * d_.shards_per_region; ++s) {
    Envelope e;
    auto* m = e.mutable_slog()->mutable_batch();
    m->set_batch(batch);
    for (const auto& x : entries)
      for (const auto& p : x.txn().pieces())
        if (p.shard() == s) {
          *m->add_entries() = x;
          break;
        }
    for (NodeId r : d_.replicas_of(s)) env.send(r, e);
  }
}

void LogBackup::on_message(Env& env, Envelope& msg) {
  if (!msg.has_slog() || !msg.slog().has_replicate())
    throw BadMessage("SLOG log backup " + me_.name + " takes Replicate only");
  if (msg.from() != d_.role_node(kOrderer, me_.region))
    throw BadMessage("Replicate from " + d_.node(msg.from()).name + ", not the orderer of region " + str(me_.region));
  ++batches_;
  Envelope e;
  e.mutable_slog()->mutable_replicate_reply()->set_batch(msg.slog().replicate().batch());
  env.send(msg.from(), std::move(e));
}

// ---- the global log ---------------------------------------------------------------------

GlobalMember::GlobalMember(const Deployment& d, NodeId self)
    : d_(d), self_(self), members_(d.role_nodes(kGlobalLog)) {
  leader_ = !members_.empty() && members_.front() == self;
}

void GlobalMember::on_message(Env& env, Envelope& msg) {
  if (!msg.has_slog()) throw BadMessage("SLOG global log got a message of another protocol");
  const auto& s = msg.slog();
  switch (s.body_case()) {
    case ::slog::Msg::kToGlobalLog: {
      if (!leader_) throw BadMessage("multi-home txn sent to a follower of the global log");
      ::slog::Entry e = s.to_global_log().entry();
      touched_shards(d_, e.txn());
      e.set_global_index(++last_);
      Envelope a;
      auto* ae = a.mutable_slog()->mutable_append_entries();
      ae->set_first_index(last_);
      *ae->add_entries() = e;
      log_.emplace(last_, std::move(e));
      for (NodeId m : members_)
        if (m != self_) env.send(m, a);
      return;
    }
    case ::slog::Msg::kAppendEntries: {
      if (leader_) throw BadMessage("AppendEntries sent to the global log's leader");
      const auto& ae = s.append_entries();
      if (ae.first_index() != last_ + 1)
        throw BadMessage("AppendEntries from index " + str(ae.first_index()) + ", expected " + str(last_ + 1));
      last_ += ae.entries_size();  // stored: a follower keeps the count (no leader change to serve)
      Envelope r;
      r.mutable_slog()->mutable_append_reply()->set_last_index(last_);
      env.send(msg.from(), std::move(r));
      return;
    }
    case ::slog::Msg::kAppendReply: {
      if (!leader_) throw BadMessage("AppendReply sent to a follower of the global log");
      const uint64_t idx = s.append_reply().last_index();
      if (idx > last_) throw BadMessage("AppendReply for index " + str(idx) + ", beyond the log (" + str(last_) + ")");
      // Leader plus this follower: a majority of three. Committed entries go
      // out in index order, to every region: the entry, or a skip.
      for (; committed_ < idx; ++committed_) {
        auto it = log_.find(committed_ + 1);
        const ::slog::Entry& e = it->second;
        std::set<uint32_t> regions;
        for (const auto& p : e.txn().pieces()) regions.insert(d_.region_of_shard(p.shard()));
        for (uint32_t r = 0; r < d_.regions; ++r) {
          Envelope o;
          auto* m = o.mutable_slog()->mutable_ordered();
          uint64_t index = committed_ + 1;
          if (mutant::kSwappedGlobalOrder && r == 1) index = index % 2 ? index + 1 : index - 1;  // 1<->2, 3<->4
          m->set_global_index(index);
          if (regions.count(r)) *m->mutable_entry() = e;
          env.send(d_.role_node(kOrderer, r), std::move(o));
        }
        log_.erase(it);
      }
      return;
    }
    case ::slog::Msg::BODY_NOT_SET: throw BadMessage("empty SLOG message");
    default: throw BadMessage("SLOG message for a region's log sent to the global log");
  }
}

// ---- registration -----------------------------------------------------------------------

ProtocolSpec spec() {
  ProtocolSpec p;
  p.name = "slog";
  p.summary = "local logs per region for single-home txns, a global log over 3 regions for multi-home ones; "
              "deterministic execution in log order";
  p.min_regions = 3;
  p.guarantee = "serializable";  // the paper's SLOG is strict; this build is not (docs/protocols/slog.md)
  p.order_key = "the entry's position in its region's local log (batch, index), multi-home entries there in "
                "global order; one domain per region";
  p.roles = {
      {kOrderer, "o", Placement::PerRegion, 1, "appends the region's local log, cuts it into batches, delivers them",
       [](const Deployment& d, NodeId id) -> std::unique_ptr<Node> { return std::make_unique<Orderer>(d, id); }},
      {kLogBackup, "b", Placement::PerRegion, 1, "keeps a copy of each batch of the region's local log",
       [](const Deployment& d, NodeId id) -> std::unique_ptr<Node> { return std::make_unique<LogBackup>(d, id); }},
      {kGlobalLog, "g", Placement::Group, 3,
       "the global log of multi-home txns (member 0 leads; committed on a majority of 3)",
       [](const Deployment& d, NodeId id) -> std::unique_ptr<Node> { return std::make_unique<GlobalMember>(d, id); }},
  };
  p.options = {
      OptionSpec::number("batch_interval_ms", 5, 0.1, 1000, "the local log is cut into a batch on this period"),
      OptionSpec::integer("pending_window", 5, 1, 100000,
                          "unfinished log entries a shard considers at a time (later ones wait for a place)"),
  };
  p.make_replica = [](const Deployment& d, NodeId id, const Workload& w) -> std::unique_ptr<ReplicaNode> {
    return std::make_unique<Replica>(d, id, w);
  };
  p.make_client_driver = [](const Deployment& d, NodeId) -> std::unique_ptr<ClientDriver> {
    return std::make_unique<HandlerClientDriver>(d, "SLOG");
  };
  return p;
}

}  // namespace txn::slog
