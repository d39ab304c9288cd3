#include "runtime/transport.h"

#include <algorithm>
#include <cstdio>

#include "runtime/clock.h"
#include "runtime/grpc_transport.h"
#include "runtime/tcp_transport.h"

namespace txn::runtime {

Transport::Transport(const Deployment& d, std::vector<NodeId> local, TransportOptions o, Deliver deliver, Log log)
    : d_(d), self_(local.empty() ? 0 : d.endpoint(local.front())), local_(d.nodes.size(), false),
      endpoint_(d.nodes.size()), o_(std::move(o)), deliver_(std::move(deliver)), log_(std::move(log)),
      in_(d.link), rng_(d.seed ^ (uint64_t{self_} << 32) ^ 0x9e3779b97f4a7c15ull) {
  for (NodeId id : local) local_.at(id) = true;
  for (NodeId id = 0; id < d.nodes.size(); ++id) endpoint_[id] = d.endpoint(id);
}

Transport::~Transport() = default;

void Transport::use_faults(const FaultAnchor* zero) {
  std::lock_guard<std::mutex> g(in_mu_);
  in_.set_faults(&d_.faults, zero);
}

bool Transport::route_out(Envelope& msg, NodeId* endpoint) {
  const NodeId to = msg.to();
  if (to >= d_.nodes.size()) {
    count_drops(to, 1);
    log_("send to unknown node id " + std::to_string(to) + " dropped");
    return false;
  }
  if (hosts(to)) {  // no socket, same link model
    on_incoming(std::move(msg), "self");
    return false;
  }
  *endpoint = endpoint_[to];
  return true;
}

bool loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

double Transport::watch_every_s() const { return std::clamp(o_.connect_timeout_s / 10, 0.1, 1.0); }

void Transport::unreachable(NodeId ep, uint64_t dropped) {
  const auto& n = d_.node(ep);
  count_drops(ep, dropped);
  if (n.kind == NodeKind::Client) {
    log_("client " + d_.process_of(ep) + " unreachable; dropping its messages");
    return;
  }
  const std::string who = d_.process_of(ep);
  {
    std::lock_guard<std::mutex> g(drops_mu_);
    if (std::find(given_up_.begin(), given_up_.end(), who) == given_up_.end()) given_up_.push_back(who);
  }
  char after[32];
  std::snprintf(after, sizeof after, "%g", o_.connect_timeout_s);
  log_("peer " + who + " at " + n.host + ":" + std::to_string(n.port) + " unreachable for " + after + " s: " +
       std::to_string(dropped) + " message(s) to it dropped" + (draining_ ? "" : "; trying it again"));
}

void Transport::dropped_after_breaks(NodeId ep, uint64_t dropped) {
  if (dropped == 0) return;
  count_drops(ep, dropped);
  log_("dropped " + std::to_string(dropped) + " message(s) to " + d_.process_of(ep) + ": its connection broke " +
       std::to_string(kMaxBreaks) + " times");
}

void Transport::count_drops(NodeId to, uint64_t n) {
  if (n == 0) return;
  if (to < d_.nodes.size() && d_.node(to).kind == NodeKind::Client) {
    drops_clients_ += n;
    return;
  }
  drops_servers_ += n;
  std::lock_guard<std::mutex> g(drops_mu_);
  drops_to_[to < d_.nodes.size() ? d_.process_of(to) : "?"] += n;
}

Transport::Drops Transport::drops() const {
  Drops d;
  d.to_servers = drops_servers_;
  d.to_clients = drops_clients_;
  d.malformed = drops_malformed_;
  std::lock_guard<std::mutex> g(drops_mu_);
  d.to_process = drops_to_;
  d.given_up = given_up_;
  return d;
}

uint64_t deployment_token(const Deployment& d) {
  uint64_t h = 1469598103934665603ull;   // FNV-1a 64
  auto mix = [&h](const std::string& s) {
    for (unsigned char c : s + '\0') {
      h ^= c;
      h *= 1099511628211ull;
    }
  };
  mix(d.mode);
  mix(std::to_string(d.seed));
  for (const auto& n : d.nodes) {
    mix(n.name);
    mix(n.host);
    mix(std::to_string(n.port));
  }
  return h ? h : 1;
}

void Transport::junk(const std::string& peer, const std::string& why) {
  bool first;
  {
    std::lock_guard<std::mutex> g(junk_mu_);
    first = junk_from_.empty();
    if (first) junk_from_ = peer;
  }
  ++junk_;
  if (first) log_("refused a connection from " + peer + ": " + why + " (not a process of this deployment)");
}

void Transport::malformed(const std::string& peer, const std::string& why) {
  ++drops_malformed_;
  log_("bad message from " + peer + ": " + why);
}

void Transport::on_incoming(Envelope&& m, const std::string& peer, TimeUs sent_steady_us) {
  std::string why;
  if (m.from() >= d_.nodes.size()) why = "unknown sender id " + std::to_string(m.from());
  else if (m.to() >= d_.nodes.size()) why = "unknown destination id " + std::to_string(m.to());
  else if (!hosts(m.to())) why = "addressed to " + d_.node(m.to()).name + ", not to this process";
  else if (m.body_case() == Envelope::BODY_NOT_SET) why = "empty body";
  if (!why.empty()) {
    malformed(m.from() < d_.nodes.size() ? d_.node(m.from()).name : peer, why);
    return;
  }
  TimeUs due;
  {
    // The link emulator's delay for this channel, counted from the sender's write where this process reads the
    // same clock, else from arrival; per channel the due times never decrease (FIFO, as one TCP stream delivers).
    const TimeUs now = steady_us();
    const TimeUs from = sent_steady_us > 0 && sent_steady_us < now ? sent_steady_us : now;
    std::lock_guard<std::mutex> g(in_mu_);
    due = in_.due(d_, m.from(), m.to(), from, rng_);
  }
  deliver_(std::move(m), due);
}

std::unique_ptr<Transport> make_transport(const Deployment& d, std::vector<NodeId> local, TransportOptions o,
                                          Transport::Deliver deliver, Transport::Log log, Reactor* reactor) {
  if (d.runtime.transport == "grpc")
    return std::make_unique<GrpcTransport>(d, std::move(local), std::move(o), std::move(deliver), std::move(log));
  return std::make_unique<TcpTransport>(d, std::move(local), std::move(o), std::move(deliver), std::move(log),
                                        reactor);
}

std::unique_ptr<Transport> make_transport(const Deployment& d, NodeId self, TransportOptions o,
                                          Transport::Deliver deliver, Transport::Log log, Reactor* reactor) {
  return make_transport(d, d.process_nodes(d.process_of(self)), std::move(o), std::move(deliver), std::move(log),
                        reactor);
}

}  // namespace txn::runtime
