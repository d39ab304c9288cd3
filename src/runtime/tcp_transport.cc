#include "runtime/tcp_transport.h"

#include <google/protobuf/io/coded_stream.h>
#include <pthread.h>

#include <algorithm>
#include <asio.hpp>
#include <cstring>
#include <optional>

#include "runtime/clock.h"

namespace txn::runtime {

using asio::ip::tcp;
using google::protobuf::io::CodedOutputStream;

// The io_context (ours, or the event loop's) and what lives on it.
struct TcpTransport::Io {
  explicit Io(asio::io_context* given)
      : own(given ? nullptr : std::make_unique<asio::io_context>(1)), ctx(given ? *given : *own), acceptor(ctx),
        resolver(ctx), watch(ctx) {}
  std::unique_ptr<asio::io_context> own;
  asio::io_context& ctx;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;   // ours, while it runs
  tcp::acceptor acceptor;
  tcp::resolver resolver;
  asio::steady_timer watch;
};

// The connection to one destination process.
struct TcpTransport::Peer {
  Peer(asio::io_context& ctx, NodeId to) : to(to), sock(ctx), retry(ctx) {}
  enum class State { kIdle, kConnecting, kConnected };
  NodeId to;
  tcp::socket sock;
  asio::steady_timer retry;        // the next connection attempt, after a failed one
  State state = State::kIdle;
  uint64_t gen = 0;                // the connection's generation: handlers of an older one do nothing
  std::vector<Envelope> pending;   // queued, not yet in a frame
  std::string out;                 // the frame being written, kept until it is through
  uint64_t out_msgs = 0;
  bool busy = false;               // out is being written
  bool retrying = false;           // a connection attempt is scheduled (retry)
  bool dirty = false;              // in dirty_
  int breaks = 0;                  // connections broken in a row with `out` not through
  double backoff_s = 0.1;
  TimeUs blocked_since = 0;        // messages have waited for a connection since then (0: none)
  bool gone = false;               // unreachable client, or a peer lost while draining: drop
  char sink[256];                  // what the peer never sends: a read here sees the connection end
};

// A connection some process opened to this one: frames in.
struct TcpTransport::InConn {
  explicit InConn(asio::io_context& ctx) : sock(ctx) {}
  tcp::socket sock;
  std::string peer;                // its address, for log lines
  std::vector<char> buf = std::vector<char>(64 << 10);
  size_t have = 0;
  Batch batch;                     // reused: its messages' storage too
};

TcpTransport::TcpTransport(const Deployment& d, std::vector<NodeId> local, TransportOptions o, Deliver deliver,
                           Log log, asio::io_context* io)
    : Transport(d, std::move(local), std::move(o), std::move(deliver), std::move(log)),
      io_(std::make_unique<Io>(io)), alive_(std::make_shared<bool>(true)), peers_(d.nodes.size()) {}

TcpTransport::~TcpTransport() {
  if (thread_.joinable()) {
    asio::post(io_->ctx, [this] {
      close_all();
      io_->ctx.stop();
    });
    thread_.join();
  } else {
    close_all();
  }
  *alive_ = false;
}

void TcpTransport::close_all() {
  stop_ = true;
  std::error_code ec;
  io_->acceptor.close(ec);
  io_->resolver.cancel();
  io_->watch.cancel();
  for (auto& p : peers_) {
    if (!p) continue;
    p->retry.cancel();
    p->sock.close(ec);
  }
  for (auto& c : ins_) c->sock.close(ec);
  ins_.clear();
}

template <class F>
void TcpTransport::on_io(F&& f) {
  if (!io_->own) {
    f();   // the caller runs the io_context
    return;
  }
  asio::post(io_->ctx, [a = alive_, f = std::forward<F>(f)]() mutable {
    if (*a) f();
  });
}

bool TcpTransport::listen(std::string* err) {
  const auto& me = d_.node(self_);
  const std::string addr = o_.bind_host + ":" + std::to_string(me.port);
  std::error_code ec;
  const auto ip = asio::ip::make_address(o_.bind_host, ec);
  if (ec) {
    *err = "cannot listen on " + addr + ": bad address";
    return false;
  }
  const tcp::endpoint ep(ip, me.port);
  auto& a = io_->acceptor;
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    *err = "cannot listen on " + addr + ": " + ec.message();
    a.close(ec);
    return false;
  }
  accept();
  watch();
  if (io_->own) {
    io_->guard.emplace(io_->ctx.get_executor());
    thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "txn-tcp");
      io_->ctx.run();
    });
  }
  return true;
}

void TcpTransport::send(Envelope msg) {
  on_io([this, m = std::move(msg)]() mutable {
    queue(std::move(m));
    flush_dirty();
  });
}

void TcpTransport::enqueue(Envelope msg) {
  on_io([this, m = std::move(msg)]() mutable { queue(std::move(m)); });
}

void TcpTransport::flush() {
  on_io([this] { flush_dirty(); });
}

void TcpTransport::queue(Envelope&& m) {
  NodeId ep;
  if (!route_out(m, &ep)) return;
  auto& p = peers_[ep];
  if (!p) p = std::make_unique<Peer>(io_->ctx, ep);
  p->pending.push_back(std::move(m));
  if (!p->dirty) {
    p->dirty = true;
    dirty_.push_back(p.get());
  }
}

void TcpTransport::flush_dirty() {
  // write() never adds to dirty_: a swap is safe, and keeps the vector's storage.
  std::vector<Peer*> ps;
  ps.swap(dirty_);
  for (Peer* p : ps) {
    p->dirty = false;
    write(*p);
  }
  ps.clear();
  if (dirty_.empty()) dirty_.swap(ps);
}

std::string TcpTransport::frame(const std::vector<Envelope>& msgs) {
  // A Batch written field by field: each message as field 1 (length-delimited), so nothing is copied into a
  // Batch first.
  size_t body = 0;
  for (const auto& m : msgs) {
    const size_t n = m.ByteSizeLong();
    body += 1 + CodedOutputStream::VarintSize32(static_cast<uint32_t>(n)) + n;
  }
  std::string f(4 + body, '\0');
  auto* q = reinterpret_cast<uint8_t*>(f.data());
  q[0] = static_cast<uint8_t>(body >> 24);
  q[1] = static_cast<uint8_t>(body >> 16);
  q[2] = static_cast<uint8_t>(body >> 8);
  q[3] = static_cast<uint8_t>(body);
  q += 4;
  for (const auto& m : msgs) {
    *q++ = 0x0a;   // field 1, wire type 2
    q = CodedOutputStream::WriteVarint32ToArray(static_cast<uint32_t>(m.GetCachedSize()), q);
    q = m.SerializeWithCachedSizesToArray(q);
  }
  return f;
}

void TcpTransport::write(Peer& p) {
  if (stop_ || p.busy) return;   // the write in flight takes what is pending when it is done
  if (p.gone) {
    const uint64_t lost = p.pending.size();
    p.pending.clear();
    count_drops(p.to, lost);
    return;
  }
  if (p.out.empty() && p.pending.empty()) return;
  if (p.state != Peer::State::kConnected) {
    if (p.blocked_since == 0) p.blocked_since = steady_us();
    if (p.state == Peer::State::kIdle && !p.retrying) connect(p);
    return;
  }
  if (p.out.empty()) {
    p.out = frame(p.pending);
    p.out_msgs = p.pending.size();
    p.pending.clear();
  }
  count_write(p.out_msgs);
  p.busy = true;
  asio::async_write(p.sock, asio::buffer(p.out), [this, a = alive_, &p, gen = p.gen](std::error_code ec, size_t) {
    if (!*a || gen != p.gen) return;   // that connection is over (broke() ran)
    p.busy = false;
    if (ec) {
      broke(p, gen);
      return;
    }
    p.out.clear();
    p.out_msgs = 0;
    p.breaks = 0;
    write(p);
  });
}

void TcpTransport::connect(Peer& p) {
  p.state = Peer::State::kConnecting;
  const auto& n = d_.node(p.to);
  auto done = [this, a = alive_, &p, gen = p.gen](std::error_code ec) {
    if (!*a || gen != p.gen || stop_) return;
    if (ec) retry_later(p);
    else connected(p);
  };
  std::error_code ec;
  const auto ip = asio::ip::make_address(n.host, ec);
  if (!ec) {   // an address: no resolver (whose Linux implementation runs a thread of its own)
    p.sock.async_connect(tcp::endpoint(ip, n.port), std::move(done));
    return;
  }
  io_->resolver.async_resolve(n.host, std::to_string(n.port),
                              [this, a = alive_, &p, gen = p.gen, done = std::move(done)](
                                  std::error_code ec, tcp::resolver::results_type rs) mutable {
                                if (!*a || gen != p.gen || stop_) return;
                                if (ec) {
                                  retry_later(p);
                                  return;
                                }
                                asio::async_connect(p.sock, rs,
                                                    [done = std::move(done)](std::error_code ec,
                                                                             const tcp::endpoint&) { done(ec); });
                              });
}

void TcpTransport::retry_later(Peer& p) {
  std::error_code ec;
  p.sock.close(ec);
  ++p.gen;
  p.state = Peer::State::kIdle;
  p.retry.expires_after(std::chrono::duration_cast<asio::steady_timer::duration>(
      std::chrono::duration<double>(p.backoff_s)));
  p.backoff_s = std::min(1.0, p.backoff_s * 2);
  p.retrying = true;
  p.retry.async_wait([this, a = alive_, &p](std::error_code ec) {
    if (!*a || ec || stop_) return;
    p.retrying = false;
    if (!p.gone && (!p.out.empty() || !p.pending.empty())) connect(p);
  });
}

void TcpTransport::connected(Peer& p) {
  p.state = Peer::State::kConnected;
  p.backoff_s = 0.1;
  p.blocked_since = 0;
  std::error_code ec;
  p.sock.set_option(tcp::no_delay(true), ec);
  // The peer sends nothing: this read ends when the connection does.
  p.sock.async_read_some(asio::buffer(p.sink), [this, a = alive_, &p, gen = p.gen](std::error_code ec, size_t) {
    if (!*a || gen != p.gen) return;
    broke(p, gen);
  });
  write(p);
}

void TcpTransport::broke(Peer& p, uint64_t gen) {
  if (gen != p.gen || stop_) return;
  ++p.gen;   // the other handler of this connection (its write or its read) does nothing
  std::error_code ec;
  p.sock.close(ec);
  p.state = Peer::State::kIdle;
  p.busy = false;
  if (!p.out.empty() && ++p.breaks >= kMaxBreaks) {
    const uint64_t lost = p.out_msgs;
    p.out.clear();
    p.out_msgs = 0;
    p.breaks = 0;
    dropped_after_breaks(p.to, lost);
  }
  if (!p.out.empty() || !p.pending.empty()) {
    p.blocked_since = steady_us();
    retry_later(p);   // soon (0.1 s first), then backing off: a peer that restarts comes back
  }
}

void TcpTransport::watch() {
  io_->watch.expires_after(std::chrono::duration_cast<asio::steady_timer::duration>(
      std::chrono::duration<double>(watch_every_s())));
  io_->watch.async_wait([this, a = alive_](std::error_code ec) {
    if (!*a || ec || stop_) return;
    const TimeUs now = steady_us(), limit = static_cast<TimeUs>(o_.connect_timeout_s * 1e6);
    for (auto& p : peers_)
      if (p && !p->gone && p->state != Peer::State::kConnected && p->blocked_since != 0 &&
          now - p->blocked_since >= limit)
        give_up(*p);
    watch();
  });
}

void TcpTransport::give_up(Peer& p) {
  const uint64_t lost = p.pending.size() + p.out_msgs;
  p.gone = true;
  p.pending.clear();
  p.out.clear();
  p.out_msgs = 0;
  p.retry.cancel();
  p.retrying = false;
  std::error_code ec;
  p.sock.close(ec);
  ++p.gen;
  p.state = Peer::State::kIdle;
  unreachable(p.to, lost);   // fatal, unless a client's or draining
}

void TcpTransport::accept() {
  auto c = std::make_shared<InConn>(io_->ctx);
  io_->acceptor.async_accept(c->sock, [this, a = alive_, c](std::error_code ec) {
    if (!*a || stop_) return;
    if (!ec) {
      std::error_code e2;
      const auto r = c->sock.remote_endpoint(e2);
      c->peer = e2 ? "?" : r.address().to_string() + ":" + std::to_string(r.port());
      c->sock.set_option(tcp::no_delay(true), e2);
      ins_.insert(c);
      read(c);
    }
    accept();
  });
}

void TcpTransport::read(const std::shared_ptr<InConn>& c) {
  if (c->buf.size() - c->have < 4096) c->buf.resize(c->buf.size() * 2);
  c->sock.async_read_some(asio::buffer(c->buf.data() + c->have, c->buf.size() - c->have),
                          [this, a = alive_, c](std::error_code ec, size_t n) {
                            if (!*a || stop_) return;
                            c->have += n;
                            if (ec || !take_frames(*c)) {
                              std::error_code e2;
                              c->sock.close(e2);
                              ins_.erase(c);
                              return;
                            }
                            read(c);
                          });
}

bool TcpTransport::take_frames(InConn& c) {
  size_t at = 0;
  while (c.have - at >= 4) {
    const auto* h = reinterpret_cast<const uint8_t*>(c.buf.data() + at);
    const uint32_t len = uint32_t{h[0]} << 24 | uint32_t{h[1]} << 16 | uint32_t{h[2]} << 8 | h[3];
    if (len > kMaxFrame) {
      malformed(c.peer, "frame of " + std::to_string(len) + " bytes (at most " + std::to_string(kMaxFrame) +
                            "); closing its connection");
      return false;
    }
    if (c.have - at - 4 < len) {   // not all here yet: room for the whole frame
      if (c.buf.size() < size_t{len} + 4 + 4096) c.buf.resize(size_t{len} + 4 + 4096);
      break;
    }
    c.batch.Clear();
    if (!c.batch.ParseFromArray(c.buf.data() + at + 4, static_cast<int>(len))) {
      malformed(c.peer, "a frame of " + std::to_string(len) + " bytes that is no txn.Batch; closing its connection");
      return false;
    }
    for (auto& m : *c.batch.mutable_msgs()) on_incoming(std::move(m), c.peer);
    at += 4 + len;
  }
  if (at > 0) {
    std::memmove(c.buf.data(), c.buf.data() + at, c.have - at);
    c.have -= at;
  }
  return true;
}

}  // namespace txn::runtime
