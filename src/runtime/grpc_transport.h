// The grpc transport (runtime.transport: grpc; the default is tcp_transport.h):
// gRPC on the completion-queue API, polled by one thread of its own
// (docs/efficiency.md). Every engine process serves txn.Peer on its endpoint
// (the first of its nodes' ports), and reads a stream only when it carries the
// deployment's token in its metadata (as the tcp transport's connections open
// with it); outbound, one channel and one long-lived
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
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "envelope.grpc.pb.h"
#include "runtime/transport.h"

namespace grpc {
class Server;
class ServerCompletionQueue;
}

namespace txn::runtime {

class GrpcTransport final : public Transport {
 public:
  GrpcTransport(const Deployment& d, std::vector<NodeId> local, TransportOptions o, Deliver deliver, Log log);
  ~GrpcTransport() override;
  // Starts serving on the endpoint's port, and the completion-queue thread (what is sent before waits for it).
  bool listen(std::string* err) override;
  void send(Envelope msg) override;      // thread-safe
  void enqueue(Envelope msg) override;   // thread-safe
  void flush() override;

  struct Tag;
  struct PeerConn;
  struct ClientStream;
  class ServerStream;
  class PingCall;
  static constexpr const char* kTokenKey = "edge-txn-token";

 private:
  // Completions of a peer's client stream, on the completion-queue thread.
  void on_started(PeerConn& p, bool ok);
  void on_write_done(PeerConn& p, bool ok);
  void on_finished(PeerConn& p, bool ok);
  void write_inflight(PeerConn& p);   // p.mu held, p.stream open
  void stream_over(PeerConn& p, std::unique_lock<std::mutex>& lk);
  void cq_loop();
  void op_started() { ++ops_; }
  PeerConn& peer(NodeId endpoint);
  bool queue(Envelope&& msg, PeerConn** p);   // false: delivered here or dropped
  void flush(PeerConn& p);            // write what is pending for p
  void watch_loop();
  void watch_connections(TimeUs now);
  void give_up(PeerConn& p);

  // The deployment's token (TransportOptions::token), as every client stream of this process sends it in its
  // metadata (kTokenKey) and every incoming stream must: a stream without it is junk, refused before its first read.
  // Empty: no token asked or sent.
  std::string token_hex_;

  std::atomic<bool> stop_{false};
  std::atomic<bool> listening_{false};   // cq_ is there
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
