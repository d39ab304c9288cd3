// What carries envelopes between the engine's processes (docs/efficiency.md).
// Every process listens on one endpoint (the port of its first node); what its
// nodes send to another process goes to that process's endpoint over one
// connection, in batches. The receiver applies the link emulation: each
// incoming message is handed to `deliver` with the time it is due (the
// (source region, destination region) one-way delay plus jitter, every channel
// FIFO, counted from the sender's write when the batch carries this kernel's
// steady clock, else from arrival), and the event loop holds it until then.
// The message crosses the socket at once.
//
// Two implementations, chosen by the deployment's runtime.transport:
//   tcp  (default) length-prefixed txn.Batch frames on plain TCP sockets, run
//        on the event loop's own thread (its reactor): no thread hand-off per message
//        (tcp_transport.h);
//   grpc txn.Peer client streams on gRPC's completion queue, polled by a
//        thread of its own (grpc_transport.h).
// What both share is here: the checks on incoming envelopes, the link
// emulation, the drop counters and the "unreachable" line. A peer process that stays unreachable for
// runtime.connect_timeout_s is given up, whatever stopped it: what waited for it is dropped (counted per peer, for
// the checker, which holds every drop to a peer that was never lost as a lost message) and it is tried again, so
// that a restarted process is reached when it listens. Nothing here knows the nemesis's plan.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/link_emulator.h"
#include "envelope.pb.h"

namespace txn::runtime {

class Reactor;

struct TransportOptions {
  double connect_timeout_s = 10;
  std::string prog = "txn-server";      // prefix of the fatal "unreachable" line
  std::string bind_host = "0.0.0.0";    // a deployment on the loopback only: 127.0.0.1 (txn-server's choice)
  // The deployment's token (deployment_token): a connection's first 8 bytes must be it, or the connection is junk
  // (counted and closed, nothing of it read). 0: no handshake (tests that write frames by hand).
  uint64_t token = 0;
};

// A deployment's token: FNV-1a over its mode, seed and every node's name, host and port, never 0. The same in
// every process of the deployment (each reads the same file); another deployment's, or a stranger's, differs.
uint64_t deployment_token(const Deployment& d);

// `host` names this machine's loopback: 127.x.y.z, ::1 or localhost.
bool loopback_host(const std::string& host);

class Transport {
 public:
  // A message for this node and the steady-clock time at which it is due.
  using Deliver = std::function<void(Envelope&&, TimeUs due_us)>;
  using Log = std::function<void(const std::string&)>;
  // Serves `local` (node ids of one process; the endpoint is the first one's process endpoint).
  Transport(const Deployment& d, std::vector<NodeId> local, TransportOptions o, Deliver deliver, Log log);
  virtual ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // Start serving on the endpoint's port. False (with *err) if it cannot be bound.
  virtual bool listen(std::string* err) = 0;
  // Send an envelope (from/to/sent_us already set); never blocks on the network.
  virtual void send(Envelope msg) = 0;
  // The same, but written only by the next flush() (the event loop's way: one batch per destination per round).
  virtual void enqueue(Envelope msg) = 0;
  virtual void flush() = 0;
  // While draining, an unreachable peer is not tried again (its messages are dropped).
  void set_draining(bool v) { draining_ = v; }
  // The deployment's fault plan applies to incoming channels from load start on (`zero`: on the steady clock,
  // e.g. EventLoop::load_start_mono(); it outlives the transport). Call before listen().
  void use_faults(const FaultAnchor* zero);

  // Incoming envelope (from a peer, or sent to ourselves): validated and
  // delivered with its due time, the link's delay counted from `sent_steady_us` (the sender's write, on this
  // process's steady clock: a peer on the same kernel) or, when that is 0 or in the future, from now. Public for
  // tests.
  void on_incoming(Envelope&& m, const std::string& peer, TimeUs sent_steady_us = 0);
  // Incoming bytes that are no envelope batch: counted and logged, as a malformed message.
  void malformed(const std::string& peer, const std::string& why);
  // A connection from outside the deployment (no token, another deployment's): counted, its first peer kept, logged
  // once; the process's facts say it (docs/checker.md). Nothing it sent is read.
  void junk(const std::string& peer, const std::string& why);
  uint64_t junk_connections() const { return junk_; }
  std::string junk_from() const {
    std::lock_guard<std::mutex> g(junk_mu_);
    return junk_from_;
  }
  const Deployment& deployment() const { return d_; }
  NodeId self() const { return self_; }   // the process's endpoint node
  bool hosts(NodeId id) const { return id < local_.size() && local_[id]; }

  // Messages this transport dropped, for the state dump (the checker fails a run that dropped any to a process
  // that was never lost): outbound to a peer that was unreachable or whose connection kept breaking, or to an
  // unknown id; to clients (which may have exited), counted apart; inbound ones rejected as malformed.
  struct Drops {
    uint64_t to_servers = 0, to_clients = 0, malformed = 0;
    std::map<std::string, uint64_t> to_process;   // to_servers by destination process (an unknown id: "?")
    std::vector<std::string> given_up;            // server processes given up as unreachable at least once
  };
  // Writes to other processes (batches) and the messages they carried (a retried batch counts again).
  uint64_t writes() const { return writes_; }
  uint64_t written() const { return written_; }
  Drops drops() const;
  // The most bytes that waited at once for one peer that could not take them (0 where not counted).
  virtual uint64_t queued_peak_bytes() const { return 0; }

  // A batch whose connection broke this many times running is dropped.
  static constexpr int kMaxBreaks = 3;

 protected:
  // Where a message goes: false if it was handled here (to a node of this
  // process: delivered with the same link model; to an unknown id: dropped),
  // else *endpoint is the destination process's endpoint node.
  bool route_out(Envelope& msg, NodeId* endpoint);
  // The destination process stayed unreachable for the connect timeout: the caller drops what waited for it (counted
  // here) and tries it again unless draining; this logs it (a server's once per time it is given up) and records it.
  void unreachable(NodeId endpoint, uint64_t dropped);
  void dropped_after_breaks(NodeId endpoint, uint64_t dropped);
  void count_drops(NodeId to, uint64_t n);
  void count_write(uint64_t messages) {
    ++writes_;
    written_ += messages;
  }
  // How often waiting writes are checked for an unreachable peer: a tenth of the timeout, 0.1-1 s.
  double watch_every_s() const;

  const Deployment& d_;
  NodeId self_;
  std::vector<bool> local_;           // by node id: served by this process
  std::vector<NodeId> endpoint_;      // by node id: the endpoint of its process
  TransportOptions o_;
  Deliver deliver_;
  Log log_;
  std::atomic<bool> draining_{false};

 private:
  std::atomic<uint64_t> writes_{0}, written_{0};
  std::atomic<uint64_t> drops_servers_{0}, drops_clients_{0}, drops_malformed_{0};
  mutable std::mutex drops_mu_;       // guards the two below
  std::map<std::string, uint64_t> drops_to_;   // drops to servers by destination process
  std::vector<std::string> given_up_;          // server processes given up at least once, in that order
  std::atomic<uint64_t> junk_{0};
  mutable std::mutex junk_mu_;        // guards junk_from_
  std::string junk_from_;             // the first junk connection's peer
  std::mutex in_mu_;                  // guards the two below
  LinkChannels in_;                   // incoming channels: emulated delivery times (per-channel FIFO)
  std::mt19937_64 rng_;               // jitter samples
};

// The deployment's transport (d.runtime.transport) for the nodes `local` of one process. With `reactor`, a tcp
// transport runs on it (the event loop's: every call then comes from the thread that runs it); without, it runs a
// thread of its own and is thread-safe. The grpc transport always polls a thread of its own.
std::unique_ptr<Transport> make_transport(const Deployment& d, std::vector<NodeId> local, TransportOptions o,
                                          Transport::Deliver deliver, Transport::Log log,
                                          Reactor* reactor = nullptr);
// The same for the process of node `self` (all of Deployment::process_nodes).
std::unique_ptr<Transport> make_transport(const Deployment& d, NodeId self, TransportOptions o,
                                          Transport::Deliver deliver, Transport::Log log,
                                          Reactor* reactor = nullptr);

}  // namespace txn::runtime
