#include "sim/sim.h"

#include <algorithm>

namespace txn::sim {

class Network::SimEnv : public Env {
 public:
  SimEnv(Network& net, NodeId id, uint64_t seed) : net_(net), id_(id), rng_(seed) {}
  TimeUs now_us() override {
    auto it = net_.o_.clock_skew_us.find(id_);
    const TimeUs t = net_.now_ + (it == net_.o_.clock_skew_us.end() ? 0 : it->second);
    if (net_.d_.faults.clocks.empty()) return t;
    return t + net_.d_.faults.clock_shift(id_, net_.now_ - net_.o_.load_start_us);
  }
  TimeUs mono_us() override { return net_.now_; }
  void send(NodeId to, Envelope msg) override { net_.send(id_, to, std::move(msg)); }
  void set_timer(uint64_t id, TimeUs delay_us) override {
    net_.push(net_.now_ + std::max<TimeUs>(delay_us, 0), Event{id_, true, id, {}});
  }
  std::mt19937_64& rng() override { return rng_; }
  NodeId self() const override { return id_; }
  void log(const std::string& line) override {
    net_.logs_.push_back(net_.d_.node(id_).name + ": " + line);
  }

 private:
  Network& net_;
  NodeId id_;
  std::mt19937_64 rng_;
};

namespace {
LinkModel simulated(LinkModel m) {
  m.mechanism = "app";  // the simulator always delays messages as the link model says
  return m;
}
}  // namespace

Network::Network(const Deployment& d, Options o)
    : d_(d), o_(std::move(o)), rng_(o_.seed), channels_(simulated(o_.actual_link ? *o_.actual_link : d.link)) {
  load_start_.set(o_.load_start_us);
  channels_.set_faults(&d_.faults, &load_start_);
}
Network::~Network() = default;

void Network::add(NodeId id, std::unique_ptr<Node> node) {
  nodes_[id] = std::move(node);
  envs_[id] = std::make_unique<SimEnv>(*this, id, o_.seed * 1000003 + id);
}

void Network::replace(NodeId id, std::unique_ptr<Node> node) {
  add(id, std::move(node));
  nodes_[id]->start(*envs_[id]);
}

void Network::start() {
  for (auto& [id, n] : nodes_) n->start(*envs_[id]);
}

void Network::push(TimeUs at, Event ev) { events_.emplace(std::make_pair(at, seq_++), std::move(ev)); }

void Network::send(NodeId from, NodeId to, Envelope msg) {
  msg.set_from(from);
  msg.set_to(to);
  msg.set_sent_us(now_);
  if (o_.tap) o_.tap(from, to, msg);
  if (o_.lose && o_.lose(from, to, msg)) return;
  TimeUs extra = 0;
  if (o_.extra_delay_us > 0) extra = std::uniform_int_distribution<TimeUs>(0, o_.extra_delay_us)(rng_);
  // The transport's own delay model (one-way delay, cross-region jitter), per-channel FIFO.
  TimeUs at = channels_.due(d_, from, to, now_ + extra, rng_);
  push(at, Event{to, false, 0, std::move(msg)});
}

bool Network::step() {
  if (events_.empty()) return false;
  auto it = events_.begin();
  now_ = it->first.first;
  Event ev = std::move(it->second);
  events_.erase(it);
  auto n = nodes_.find(ev.node);
  if (n == nodes_.end()) {  // node not simulated (timers come only from simulated ones): message dropped
    ++dropped_;
    return true;
  }
  SimEnv& env = *envs_[ev.node];
  if (o_.on_event) o_.on_event(ev.node, now_, ev.is_timer);
  try {
    if (ev.is_timer) {
      n->second->on_timer(env, ev.timer);
    } else {
      ++delivered_;
      n->second->on_message(env, ev.msg);
    }
  } catch (const BadMessage& e) {
    logs_.push_back(d_.node(ev.node).name + ": bad message: " + e.what());
  }
  return true;
}

void Network::run_until(TimeUs t) {
  while (!events_.empty() && events_.begin()->first.first <= t) step();
  now_ = std::max(now_, t);
}

bool Network::run_until(const std::function<bool()>& pred, TimeUs limit) {
  while (!pred()) {
    if (events_.empty() || events_.begin()->first.first > limit) return false;
    step();
  }
  return true;
}

}  // namespace txn::sim
