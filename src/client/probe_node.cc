#include "client/probe_node.h"

#include <sstream>

namespace txn {
namespace {
constexpr uint64_t kRoundTimer = 1, kTimeoutTimer = 2, kWarmupTimer = 3;
constexpr TimeUs kWarmupTimeoutUs = 5000000;
}

ProbeNode::ProbeNode(const Deployment& d, NodeId self, int count, TimeUs interval_us, TimeUs timeout_us)
    : d_(d), self_(self), count_(count), interval_us_(interval_us), timeout_us_(timeout_us) {
  if (count_ < 1) throw ConfigError("--probe: the probe count must be >= 1");
  for (uint32_t r = 0; r < d.regions; ++r) targets_.push_back(target_in(d, self, r));
}

NodeId ProbeNode::target_in(const Deployment& d, NodeId self, uint32_t region) {
  const NodeInfo& me = d.node(self);
  uint32_t first = region * d.shards_per_region;
  uint32_t shard = first;
  if (region == me.region && d.shards_per_region > 1 && me.shard == first) shard = first + 1;
  return d.replicas_of(shard).at(0);
}

void ProbeNode::start(Env& env) {
  send_round(env, 0);  // warm-up: connections open in both directions
  env.set_timer(kWarmupTimer, kWarmupTimeoutUs);
}

void ProbeNode::begin_measuring(Env& env) {
  if (measuring_) return;
  measuring_ = true;
  env.set_timer(kTimeoutTimer, timeout_us_);
  send_round(env, 1);
}

void ProbeNode::send_round(Env& env, uint64_t seq) {
  for (NodeId t : targets_) {
    Envelope m;
    m.mutable_probe()->set_seq(seq);
    m.mutable_probe()->set_sent_us(env.mono_us());
    env.send(t, std::move(m));
  }
  if (seq == 0) return;
  if (++sent_rounds_ < count_) env.set_timer(kRoundTimer, interval_us_);
}

void ProbeNode::on_message(Env& env, Envelope& msg) {
  if (!msg.has_probe_reply()) return;  // nothing else is addressed to a prober
  const NodeInfo& from = d_.node(msg.from());
  if (from.region >= targets_.size() || targets_[from.region] != msg.from())
    throw BadMessage("probe reply from " + from.name + ", which was not probed");
  if (msg.probe_reply().seq() == 0) {
    if (++warm_ == static_cast<int>(targets_.size())) begin_measuring(env);
    return;
  }
  rtt_ms_[from.region].push_back((env.mono_us() - msg.probe_reply().sent_us()) / 1000.0);
  if (++received_ == count_ * static_cast<int>(targets_.size())) finished_ = true;
}

void ProbeNode::on_timer(Env& env, uint64_t id) {
  if (id == kRoundTimer) send_round(env, static_cast<uint64_t>(sent_rounds_) + 1);
  else if (id == kWarmupTimer) begin_measuring(env);  // a silent target then shows up as lost probes
  else if (id == kTimeoutTimer) finished_ = true;    // report what arrived; the rest counts as lost
}

std::string ProbeNode::result_json() const {
  std::ostringstream o;
  const NodeInfo& me = d_.node(self_);
  o << "{\"node\": \"" << me.name << "\", \"region\": " << me.region << ", \"count\": " << count_
    << ", \"targets\": {";
  for (size_t r = 0; r < targets_.size(); ++r)
    o << (r ? ", " : "") << "\"" << r << "\": \"" << d_.node(targets_[r]).name << "\"";
  o << "}, \"rtt_ms\": {";
  for (size_t r = 0; r < targets_.size(); ++r) {
    o << (r ? ", " : "") << "\"" << r << "\": [";
    auto it = rtt_ms_.find(static_cast<uint32_t>(r));
    if (it != rtt_ms_.end())
      for (size_t i = 0; i < it->second.size(); ++i) o << (i ? ", " : "") << it->second[i];
    o << "]";
  }
  o << "}, \"lost\": {";
  for (size_t r = 0; r < targets_.size(); ++r) {
    auto it = rtt_ms_.find(static_cast<uint32_t>(r));
    size_t got = it == rtt_ms_.end() ? 0 : it->second.size();
    o << (r ? ", " : "") << "\"" << r << "\": " << (count_ - static_cast<int>(got));
  }
  o << "}}";
  return o.str();
}

}  // namespace txn
