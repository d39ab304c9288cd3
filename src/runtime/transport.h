// gRPC transport. Every process serves txn.Peer; outbound, one channel and
// one long-lived Stream per destination peer, fed by a sender thread that
// holds messages until their emulated delivery time (LinkEmulator) and then
// writes everything due as one Batch.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/link_emulator.h"

namespace grpc {
class Server;
}

namespace txn::runtime {

struct TransportOptions {
  double connect_timeout_s = 10;
  std::string prog = "txn-server";      // prefix of the fatal "unreachable" line
  std::string bind_host = "0.0.0.0";
};

class Transport {
 public:
  using Deliver = std::function<void(Envelope&&)>;
  using Log = std::function<void(const std::string&)>;
  Transport(const Deployment& d, NodeId self, TransportOptions o, Deliver deliver, Log log);
  ~Transport();
  // Start serving on the node's port. False (with *err) if the port cannot be bound.
  bool listen(std::string* err);
  // Queue an envelope (from/to/sent_us already set). Thread-safe, never blocks on the network.
  void send(Envelope msg);
  // While draining, an unreachable peer is no longer fatal: its messages are dropped.
  void set_draining(bool v) { draining_ = v; }

  // Incoming envelope from the Peer service (validated here). Public for the service.
  void on_incoming(Envelope&& m, const std::string& peer);
  const Deployment& deployment() const { return d_; }
  NodeId self() const { return self_; }

 private:
  struct PeerConn;
  PeerConn& peer(NodeId to);
  void sender_loop(PeerConn& p);
  bool write_batch(PeerConn& p, const Batch& b);
  bool connect(PeerConn& p);

  const Deployment& d_;
  NodeId self_;
  TransportOptions o_;
  Deliver deliver_;
  Log log_;
  LinkEmulator emu_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> draining_{false};
  std::mutex peers_mu_;
  std::vector<std::unique_ptr<PeerConn>> peers_;   // by NodeId, created lazily
  class Service;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace txn::runtime
