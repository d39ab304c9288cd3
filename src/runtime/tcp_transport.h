// The tcp transport (runtime.transport: tcp, the default; docs/efficiency.md):
// envelopes between processes as frames on plain TCP sockets, non-blocking, on a Reactor (epoll).
//
// Wire format: a frame is a 4-byte big-endian length and that many bytes of a
// serialized txn.Batch (envelope.proto), at most 64 MiB, stamped with the
// sender's steady clock at its write and that clock's domain (the kernel's boot
// id, hashed): a receiver on the same kernel counts the link's delay from the
// stamp (docs/efficiency.md, quiet waits). A connection carries
// frames one way only: each process opens one connection to every process it
// sends to and accepts the connections of those that send to it. Beside its TCP
// port a process listens on a Unix socket (abstract, `@edge-txn:<port>`); a
// sender whose destination is on loopback connects there first (then to TCP). The sender
// never reads from its connection except to notice that it ended.
//
// Outbound, per destination process: messages wait in `pending`; one write is
// in flight at a time and carries, as one frame, everything queued meanwhile
// (and what the event loop sent in one round: enqueue() then flush()). What waits
// for a peer that cannot take it (not connected, its socket full) is serialized
// at once into one buffer per peer (`parked`), to go first in the next frame. A frame
// whose connection broke is written again on the next one (at most kMaxBreaks
// times running, then dropped and counted); a destination not connected within
// connect_timeout_s while messages wait for it is unreachable (Transport).
// Reconnects back off from 0.1 s to 1 s.
//
// Threads: given a reactor (the event loop's), the transport runs on it and
// every call must come from the thread that runs it: a received frame costs no
// hand-off and no wake-up beyond the socket's own. Without one, it runs its own
// reactor on a thread of its own, and send/enqueue/flush may be called from any
// thread.
#pragma once
#include <atomic>
#include <functional>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "runtime/transport.h"

namespace txn::runtime {

class TcpTransport final : public Transport {
 public:
  static constexpr uint32_t kMaxFrame = 64u << 20;
  TcpTransport(const Deployment& d, std::vector<NodeId> local, TransportOptions o, Deliver deliver, Log log,
               Reactor* reactor = nullptr);
  ~TcpTransport() override;
  bool listen(std::string* err) override;
  void send(Envelope msg) override;
  void enqueue(Envelope msg) override;
  void flush() override;

  // The frame that carries `msgs` (tests and tools write frames with it too), stamped with the sender's steady
  // clock and its domain (clock_domain()) when they are given.
  // `entries`: messages already serialized as a Batch's entries, which go before `msgs`.
  static std::string frame(const std::vector<Envelope>& msgs, TimeUs sent_steady_us = 0, uint64_t domain = 0,
                           const std::string& entries = {});
  // The most bytes that ever waited, serialized, for one peer that could not take them (facts: queued_peak_bytes).
  uint64_t queued_peak_bytes() const override { return parked_peak_.load(std::memory_order_relaxed); }
  // The name of the Unix socket a process listens on beside TCP port `port`, in the abstract namespace (written
  // with a leading '@'; the address has a 0 byte there).
  static std::string unix_socket_name(uint16_t port) { return "edge-txn:" + std::to_string(port); }
  // Called (on the reactor's thread) the first time a frame comes without this process's clock domain: from a
  // process on another kernel, or from one that stamps nothing; its messages count their delay from arrival.
  void on_foreign_clock(std::function<void()> f) { on_foreign_clock_ = std::move(f); }

  struct Peer;
  struct InConn;

 private:
  // All of these run on the reactor's thread.
  void queue(Envelope&& m);
  void flush_dirty();
  void write(Peer& p);
  void park(Peer& p);   // p.pending serialized onto p.parked
  // Writes bytes[off..] to p's socket, advancing off: true once all is written; false when the socket is full
  // (EPOLLOUT is watched) or the connection broke (broke() has run).
  bool send_all(Peer& p, const std::string& bytes, size_t& off);
  void on_peer_event(Peer& p, uint32_t events);
  void connect(Peer& p);
  void start_connect(Peer& p);   // to p.addrs from p.next_addr on; when none answers, retry later
  void connected(Peer& p);
  void broke(Peer& p);
  void close_peer(Peer& p);
  void retry_later(Peer& p);
  // A frame came from `from`'s process: it is up, so a connection to it that waits out a retry's backoff is tried
  // now (a restarted peer's first Ask is answered at once, not after the 1 s its peers back off to).
  void heard_from(NodeId from);
  void on_accept(int listening_fd);
  void on_readable(InConn& c);
  void close_in(int fd);
  bool take_frames(InConn& c);   // false: the connection sent garbage and is closed
  void watch();
  void give_up(Peer& p);
  void close_all();
  template <class F>
  void on_io(F&& f);

  std::unique_ptr<Reactor> own_;               // without a reactor given: ours, run by thread_
  Reactor& r_;
  int listen_fd_ = -1;
  int local_fd_ = -1;                          // the Unix socket beside it, for senders on this host
  std::shared_ptr<bool> alive_;   // false once destroyed: work still posted (a resolver's answer) does nothing
  std::vector<std::unique_ptr<Peer>> peers_;   // by endpoint node id, created lazily
  std::vector<Peer*> dirty_;                   // queued to since the last flush
  std::atomic<uint64_t> parked_peak_{0};
  std::unordered_map<int, std::unique_ptr<InConn>> ins_;   // by fd
  uint64_t watch_timer_ = 0;
  bool stop_ = false;
  bool foreign_clock_ = false;                 // a frame came without our clock domain
  std::string token_;                          // TransportOptions::token, big-endian (empty: no handshake)
  std::function<void()> on_foreign_clock_;
  std::atomic<bool> run_{false};
  std::thread thread_;                         // without a reactor given: the one that runs ours
};

}  // namespace txn::runtime
