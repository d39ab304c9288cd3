// gRPC transport on the completion-queue API, polled by one thread of its own
// (docs/efficiency.md). Every engine process serves txn.Peer on its endpoint
// (the first of its nodes' ports); outbound, one channel and one long-lived
// client stream per destination process, with one write in flight that
// carries, as a Batch, everything sent meanwhile (and what the event loop
// queued in one round, flushed together). One completion queue serves both
// sides and one thread blocks in its Next() with no deadline: that thread is
// gRPC's poller too, so a received batch costs one wake-up (its socket) and a
// completed write at most one, and no completion is handed from thread to
// thread. Incoming batches are unpacked there and handed to `deliver` with the
// time each message is due: with the app mechanism the link emulator holds
// each message for its (source region, destination region) one-way delay, plus
// jitter, keeping every channel FIFO. The receiver applies the delay (its event
// loop waits until a message is due) rather than the sender: the message
// crosses the socket at once.
//
// (Measured on the 2-core machine and not taken: gRPC's callback API, whose
// two "nexting" threads per process hand every completion to each other
// (about 11 context switches per write; this transport's predecessor); the
// completion queue polled by the event loop's own thread, whose waits have
// millisecond granularity (1 ms extra per hop); a sender-side delay queue with
// a pump thread, one more timed wake-up per message.)
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/config.h"
#include "core/link_emulator.h"
#include "envelope.grpc.pb.h"

namespace grpc {
class Server;
class ServerCompletionQueue;
}

namespace txn::runtime {

struct TransportOptions {
  double connect_timeout_s = 10;
  std::string prog = "txn-server";      // prefix of the fatal "unreachable" line
  std::string bind_host = "0.0.0.0";
};

class Transport {
 public:
  // A message for this node and the steady-clock time at which it is due.
  using Deliver = std::function<void(Envelope&&, TimeUs due_us)>;
  using Log = std::function<void(const std::string&)>;
  // Serves the nodes of self's process (all of them: Deployment::process_nodes), or exactly `local`.
  Transport(const Deployment& d, NodeId self, TransportOptions o, Deliver deliver, Log log);
  Transport(const Deployment& d, std::vector<NodeId> local, TransportOptions o, Deliver deliver, Log log);
  ~Transport();
  // Start serving on the node's port, and the completion-queue thread (what is sent before waits for it).
  // False (with *err) if the port cannot be bound.
  bool listen(std::string* err);
  // Send an envelope (from/to/sent_us already set). Thread-safe, never blocks on the network.
  void send(Envelope msg);
  // The same, but written only by the next flush() (the event loop's way: one batch per destination per round).
  void enqueue(Envelope msg);
  void flush();
  // While draining, an unreachable peer is no longer fatal: its messages are dropped.
  void set_draining(bool v) { draining_ = v; }

  // Incoming envelope (from the Peer service, or sent to ourselves): validated
  // and delivered with its due time. Public for tests.
  void on_incoming(Envelope&& m, const std::string& peer);
  const Deployment& deployment() const { return d_; }
  NodeId self() const { return self_; }   // the process's endpoint node
  bool hosts(NodeId id) const { return id < local_.size() && local_[id]; }

  // Messages this transport dropped, for the state dump (the checker fails a
  // run that lost any): outbound to a peer that was unreachable or whose
  // stream kept breaking, or to an unknown id; to clients (which may have
  // exited), counted apart; inbound ones rejected as malformed.
  struct Drops {
    uint64_t to_servers = 0, to_clients = 0, malformed = 0;
  };
  // Writes to other processes (batches) and the messages they carried (a retried batch counts again).
  uint64_t writes() const { return writes_; }
  uint64_t written() const { return written_; }
  Drops drops() const { return {drops_servers_, drops_clients_, drops_malformed_}; }

  struct Tag;
  struct PeerConn;
  struct ClientStream;
  class ServerStream;
  class PingCall;

 private:
  // Completions of a peer's client stream, on the completion-queue thread.
  void on_started(PeerConn& p, bool ok);
  void on_write_done(PeerConn& p, bool ok);
  void on_finished(PeerConn& p, bool ok);
  void write_inflight(PeerConn& p);   // p.mu held, p.stream open
  void stream_over(PeerConn& p, std::unique_lock<std::mutex>& lk);
  void cq_loop();
  void op_started() { ++ops_; }
  PeerConn& peer(NodeId to);
  bool queue(Envelope&& msg, PeerConn** p);   // false: delivered here or dropped
  void flush(PeerConn& p);            // write what is pending for p
  void watch_loop();
  void watch_connections(TimeUs now);
  void unreachable(PeerConn& p);

  const Deployment& d_;
  NodeId self_;
  std::vector<bool> local_;           // by node id: served by this process
  std::vector<NodeId> endpoint_;      // by node id: the endpoint of its process
  TransportOptions o_;
  Deliver deliver_;
  Log log_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> draining_{false};
  std::atomic<bool> listening_{false};   // cq_ is there
  std::atomic<uint64_t> writes_{0}, written_{0};
  std::atomic<uint64_t> drops_servers_{0}, drops_clients_{0}, drops_malformed_{0};
  void count_drops(NodeId to, uint64_t n);

  std::mutex in_mu_;                  // guards the two below
  LinkChannels in_;                   // incoming channels: emulated delivery times (per-channel FIFO)
  std::mt19937_64 rng_;               // jitter samples

  std::mutex peers_mu_;
  std::vector<std::unique_ptr<PeerConn>> peers_;   // by endpoint NodeId, created lazily
  std::mutex dirty_mu_;
  std::vector<PeerConn*> dirty_;                   // enqueued to since the last flush()
  std::unique_ptr<grpc::ServerCompletionQueue> cq_;   // both sides' operations, polled by cq_thread_
  std::thread cq_thread_;
  std::atomic<int64_t> ops_{0};                    // operations started on cq_ whose tag has not come back
  std::mutex ops_mu_;
  std::condition_variable ops_cv_;                 // ops_ reached 0 while stopping
  std::thread watcher_;                            // unreachable peers (every 0.1-1 s)
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  std::unique_ptr<txn::Peer::AsyncService> service_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace txn::runtime
