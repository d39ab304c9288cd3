#include "runtime/tcp_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <google/protobuf/io/coded_stream.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "runtime/clock.h"
#include "runtime/reactor.h"

namespace txn::runtime {

using google::protobuf::io::CodedOutputStream;

namespace {
using Addr = std::pair<int, std::string>;   // (family, sockaddr bytes)

constexpr uint32_t kPeerEvents = EPOLLIN | EPOLLRDHUP;   // an outbound connection: only its end is read

void no_delay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// A numeric address (no resolver needed), else nothing.
bool numeric(const std::string& host, uint16_t port, Addr* out) {
  sockaddr_in v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4.sin_addr) == 1) {
    v4.sin_family = AF_INET;
    v4.sin_port = htons(port);
    *out = {AF_INET, std::string(reinterpret_cast<const char*>(&v4), sizeof v4)};
    return true;
  }
  sockaddr_in6 v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6.sin6_addr) == 1) {
    v6.sin6_family = AF_INET6;
    v6.sin6_port = htons(port);
    *out = {AF_INET6, std::string(reinterpret_cast<const char*>(&v6), sizeof v6)};
    return true;
  }
  return false;
}

// The Unix socket a process listens on beside its TCP port, in the abstract namespace of its network namespace
// (nothing on disk): a sender whose destination is on loopback connects there first, as a Unix socket costs the
// kernel a fraction of loopback TCP's path (no TCP/IP stack, no netfilter, no softirq).
Addr local_addr(uint16_t port) {
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  const std::string name = TcpTransport::unix_socket_name(port);
  std::memcpy(un.sun_path + 1, name.data(), name.size());   // sun_path[0] == 0: abstract
  const size_t len = offsetof(sockaddr_un, sun_path) + 1 + name.size();
  return {AF_UNIX, std::string(reinterpret_cast<const char*>(&un), len)};
}

bool loopback(const Addr& a) {
  if (a.first == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(a.second.data())->sin_addr.s_addr) >> 24) == 127;
  if (a.first != AF_INET6) return false;
  return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(a.second.data())->sin6_addr);
}

// A destination's addresses to try in turn: its Unix socket first when it is on loopback (this host, this network
// namespace) and the kernel does not shape the links (netem's qdiscs see IP packets only), then what its host name
// gives.
std::vector<Addr> with_local(std::vector<Addr> addrs, uint16_t port, bool netem) {
  if (!netem && std::any_of(addrs.begin(), addrs.end(), loopback))
    addrs.insert(addrs.begin(), local_addr(port));
  return addrs;
}

// getaddrinfo (blocking: called on a thread of its own), IPv4 first.
std::vector<Addr> resolve(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::vector<Addr> v4, v6;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) return {};
  for (addrinfo* a = res; a; a = a->ai_next) {
    Addr x{a->ai_family, std::string(reinterpret_cast<const char*>(a->ai_addr), a->ai_addrlen)};
    (a->ai_family == AF_INET ? v4 : v6).push_back(std::move(x));
  }
  freeaddrinfo(res);
  v4.insert(v4.end(), v6.begin(), v6.end());
  return v4;
}

std::string peer_name(const sockaddr_storage& sa) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (sa.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&sa);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
  } else if (sa.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&sa);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
  } else if (sa.ss_family == AF_UNIX) {
    return "a process on this host (Unix socket)";
  }
  return std::string(host) + ":" + std::to_string(port);
}
}  // namespace

// The connection to one destination process.
struct TcpTransport::Peer {
  explicit Peer(NodeId to) : to(to) {}
  enum class State { kIdle, kResolving, kConnecting, kConnected };
  NodeId to;
  int fd = -1;
  State state = State::kIdle;
  uint64_t attempt = 0;            // the connection attempt: a resolver's late answer for an older one is ignored
  std::vector<Addr> addrs;         // the destination's addresses, tried in turn
  size_t next_addr = 0;
  std::vector<Envelope> pending;   // queued, not yet in a frame
  // Queued while the peer could not take them (not connected, or its socket full), after `out` and before
  // `pending`: serialized at once, as a frame's entries (write_entry), in one buffer. A shard's 5 s of messages to a
  // crashed follower are ~90 KB so, against ~0.55 MB as message objects (measured: 529 Janus messages), and one
  // buffer is freed whole where thousands of small objects stayed in the allocator's free lists.
  std::string parked;
  uint64_t parked_msgs = 0;
  void unpark() {   // what was parked went into a frame, or is lost: its buffer freed whole
    std::string().swap(parked);
    parked_msgs = 0;
  }
  bool waiting() const { return !out.empty() || !parked.empty() || !pending.empty(); }
  size_t greet_off = 0;            // bytes of the deployment's token (token_) written on this connection
  std::string out;                 // the frame being written, kept until it is through
  size_t out_off = 0;              // bytes of it written on this connection
  uint64_t out_msgs = 0;
  bool counted = false;            // out's write is counted (count_write) on this connection
  bool want_out = false;           // out waits for room in the socket (EPOLLOUT watched)
  uint64_t retry_timer = 0;        // the next connection attempt, after a failed one (0: none)
  bool dirty = false;              // in dirty_
  int breaks = 0;                  // connections broken in a row with `out` not through
  double backoff_s = 0.1;
  TimeUs blocked_since = 0;        // messages have waited for a connection since then (0: none)
  bool gone = false;               // unreachable client, or a peer lost while draining: drop
};

// A connection some process opened to this one: frames in.
struct TcpTransport::InConn {
  int fd = -1;
  std::string peer;                // its address, for log lines
  static constexpr size_t kBuf = 64 << 10;   // its buffer between large frames
  // At first 4 KiB (grown as bytes arrive): a stranger's connection, refused after 8 bytes, costs little.
  std::vector<char> buf = std::vector<char>(4 << 10);
  size_t have = 0;
  size_t want = 0;                 // bytes of the frame begun at buf[0] (header included), until it is all here
  bool greeted = false;            // its first 8 bytes were the deployment's token (or none is asked)
  Batch batch;                     // reused: its messages' storage too
};

TcpTransport::TcpTransport(const Deployment& d, std::vector<NodeId> local, TransportOptions o, Deliver deliver,
                           Log log, Reactor* reactor)
    : Transport(d, std::move(local), std::move(o), std::move(deliver), std::move(log)),
      own_(reactor ? nullptr : std::make_unique<Reactor>()), r_(reactor ? *reactor : *own_),
      alive_(std::make_shared<bool>(true)), peers_(d.nodes.size()) {
  for (int i = 7; o_.token && i >= 0; --i) token_.push_back(static_cast<char>(o_.token >> (8 * i)));
}

TcpTransport::~TcpTransport() {
  if (thread_.joinable()) {
    r_.post([this] {
      close_all();
      run_ = false;
    });
    thread_.join();
  } else {
    close_all();
  }
  *alive_ = false;
}

void TcpTransport::close_all() {
  stop_ = true;
  for (int* fd : {&listen_fd_, &local_fd_}) {
    if (*fd < 0) continue;
    r_.forget(*fd);
    ::close(*fd);
    *fd = -1;
  }
  if (watch_timer_) r_.cancel(watch_timer_);
  watch_timer_ = 0;
  for (auto& p : peers_) {
    if (!p) continue;
    if (p->retry_timer) r_.cancel(p->retry_timer);
    p->retry_timer = 0;
    close_peer(*p);
  }
  for (auto& [fd, c] : ins_) {
    r_.forget(fd);
    ::close(fd);
  }
  ins_.clear();
}

template <class F>
void TcpTransport::on_io(F&& f) {
  if (!own_) {
    f();   // the caller runs the reactor
    return;
  }
  r_.post([a = alive_, f = std::forward<F>(f)]() mutable {
    if (*a) f();
  });
}

namespace {
// A listening socket on `a` (non-blocking), or -1 with what failed in *why.
int listening(const Addr& a, std::string* why) {
  const int fd = ::socket(a.first, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  const char* what = "socket";
  if (fd >= 0) {
    const int one = 1;
    if (a.first != AF_UNIX) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    what = "bind";
    if (::bind(fd, reinterpret_cast<const sockaddr*>(a.second.data()), static_cast<socklen_t>(a.second.size())) == 0) {
      what = "listen";
      if (::listen(fd, SOMAXCONN) == 0) return fd;
    }
  }
  *why = std::string(what) + ": " + std::strerror(errno);
  if (fd >= 0) ::close(fd);
  return -1;
}
}  // namespace

bool TcpTransport::listen(std::string* err) {
  const auto& me = d_.node(self_);
  const std::string where = o_.bind_host + ":" + std::to_string(me.port);
  Addr a;
  if (!numeric(o_.bind_host, me.port, &a)) {
    *err = "cannot listen on " + where + ": bad address";
    return false;
  }
  std::string why;
  // Beside the TCP port, the Unix socket that senders on this host use (local_addr). The TCP port is ours, so the
  // name is too, unless a process that held the port lingers with it: then no sender must reach that one by mistake.
  const int fd = listening(a, &why);
  const int ufd = fd < 0 ? -1 : listening(local_addr(me.port), &why);
  if (fd >= 0 && ufd >= 0 && r_.watch(fd, EPOLLIN, [this](uint32_t) { on_accept(listen_fd_); }) &&
      r_.watch(ufd, EPOLLIN, [this](uint32_t) { on_accept(local_fd_); })) {
    listen_fd_ = fd;
    local_fd_ = ufd;
  } else {
    const bool unix_socket = fd >= 0 && ufd < 0;
    if (fd >= 0 && ufd >= 0) why = std::string("epoll: ") + std::strerror(errno);
    *err = unix_socket
               ? "cannot listen on Unix socket @" + unix_socket_name(me.port) + " (beside " + where + "): " + why
               : "cannot listen on " + where + ": " + why;
    for (int f : {fd, ufd}) {
      if (f < 0) continue;
      r_.forget(f);
      ::close(f);
    }
    return false;
  }
  watch();
  if (own_) {
    run_ = true;
    thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "txn-tcp");
      while (run_) r_.wait(Reactor::kForever);
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
  if (!p) p = std::make_unique<Peer>(ep);
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

namespace {
// The size of one message as a Batch's entry (tag, length, message); caches the message's size for write_entry.
size_t entry_size(const Envelope& m) {
  const size_t n = m.ByteSizeLong();
  return 1 + CodedOutputStream::VarintSize32(static_cast<uint32_t>(n)) + n;
}

// One message as a Batch's entry: field 1, length-delimited; its size cached (entry_size) before.
uint8_t* write_entry(const Envelope& m, uint8_t* q) {
  *q++ = 0x0a;   // field 1, wire type 2
  q = CodedOutputStream::WriteVarint32ToArray(static_cast<uint32_t>(m.GetCachedSize()), q);
  return m.SerializeWithCachedSizesToArray(q);
}
}  // namespace

void TcpTransport::park(Peer& p) {
  if (p.pending.empty()) return;
  size_t add = 0;
  for (const auto& m : p.pending) add += entry_size(m);
  const size_t at = p.parked.size();
  p.parked.resize(at + add);
  auto* q = reinterpret_cast<uint8_t*>(p.parked.data()) + at;
  for (const auto& m : p.pending) q = write_entry(m, q);
  p.parked_msgs += p.pending.size();
  std::vector<Envelope>().swap(p.pending);   // its storage too: it grew with the wait
  const uint64_t bytes = p.parked.size();
  if (bytes > parked_peak_.load(std::memory_order_relaxed)) parked_peak_.store(bytes, std::memory_order_relaxed);
}

std::string TcpTransport::frame(const std::vector<Envelope>& msgs, TimeUs sent_steady_us, uint64_t domain,
                                const std::string& entries) {
  // A Batch written field by field: each message as field 1 (length-delimited), so nothing is copied into a
  // Batch first (`entries`, already so, go first); then the stamp, fields 2 (varint) and 3 (fixed64), when given.
  size_t body = entries.size();
  for (const auto& m : msgs) body += entry_size(m);
  const bool stamped = sent_steady_us > 0 && domain != 0;
  if (stamped) body += 1 + CodedOutputStream::VarintSize64(static_cast<uint64_t>(sent_steady_us)) + 1 + 8;
  std::string f(4 + body, '\0');
  auto* q = reinterpret_cast<uint8_t*>(f.data());
  q[0] = static_cast<uint8_t>(body >> 24);
  q[1] = static_cast<uint8_t>(body >> 16);
  q[2] = static_cast<uint8_t>(body >> 8);
  q[3] = static_cast<uint8_t>(body);
  q += 4;
  if (!entries.empty()) q = std::copy(entries.begin(), entries.end(), q);
  for (const auto& m : msgs) q = write_entry(m, q);
  if (stamped) {
    *q++ = 0x10;   // field 2, varint
    q = CodedOutputStream::WriteVarint64ToArray(static_cast<uint64_t>(sent_steady_us), q);
    *q++ = 0x19;   // field 3, fixed64
    q = CodedOutputStream::WriteLittleEndian64ToArray(domain, q);
  }
  return f;
}

void TcpTransport::write(Peer& p) {
  if (stop_) return;
  if (p.want_out) {   // a frame waits for room: what is pending goes after it
    park(p);
    return;
  }
  if (p.gone) {
    const uint64_t lost = p.pending.size() + p.parked_msgs;
    p.pending.clear();
    p.unpark();
    count_drops(p.to, lost);
    return;
  }
  if (!p.waiting()) return;
  if (p.state != Peer::State::kConnected) {
    if (p.blocked_since == 0) p.blocked_since = steady_us();
    park(p);
    if (p.state == Peer::State::kIdle && !p.retry_timer) connect(p);
    return;
  }
  if (!send_all(p, token_, p.greet_off)) return;   // the deployment's token, before the connection's first frame
  for (;;) {
    if (p.out.empty()) {
      if (p.pending.empty() && p.parked.empty()) return;
      p.out = frame(p.pending, steady_us(), clock_domain(), p.parked);
      p.out_off = 0;
      p.out_msgs = p.parked_msgs + p.pending.size();
      p.counted = false;
      p.pending.clear();
      p.unpark();
    }
    if (!p.counted) {
      count_write(p.out_msgs);
      p.counted = true;
    }
    if (!send_all(p, p.out, p.out_off)) return;
    p.out.clear();
    p.out_off = 0;
    p.out_msgs = 0;
    p.counted = false;
    p.breaks = 0;
  }
}

bool TcpTransport::send_all(Peer& p, const std::string& bytes, size_t& off) {
  while (off < bytes.size()) {
    const ssize_t n = ::send(p.fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {   // the socket is full: go on when it has room
      p.want_out = true;
      r_.change(p.fd, kPeerEvents | EPOLLOUT);
      return false;
    }
    if (n < 0) {
      broke(p);
      return false;
    }
    off += static_cast<size_t>(n);
  }
  return true;
}

void TcpTransport::on_peer_event(Peer& p, uint32_t events) {
  if (p.state == Peer::State::kConnecting) {
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(p.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err == 0 && !(events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return;   // not decided yet
    if (err != 0 || (events & (EPOLLERR | EPOLLHUP))) {
      close_peer(p);
      if (p.next_addr < p.addrs.size()) start_connect(p);
      else retry_later(p);
      return;
    }
    connected(p);
    return;
  }
  if (p.state != Peer::State::kConnected) return;
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
    // The peer sends nothing: readable means the connection ended (or broke).
    char sink[256];
    const ssize_t n = ::recv(p.fd, sink, sizeof sink, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      broke(p);
      return;
    }
  }
  if ((events & EPOLLOUT) && p.want_out) {
    p.want_out = false;
    r_.change(p.fd, kPeerEvents);
    write(p);
  }
}

void TcpTransport::connect(Peer& p) {
  const auto& n = d_.node(p.to);
  p.addrs.clear();
  p.next_addr = 0;
  Addr a;
  if (numeric(n.host, n.port, &a)) {   // an address: no resolver
    p.addrs = with_local({a}, n.port, d_.link.mechanism == "netem");
    start_connect(p);
    return;
  }
  // A name: resolved on a thread of its own (a name that does not resolve yet may take the resolver seconds),
  // the answer handed back to this reactor.
  p.state = Peer::State::kResolving;
  const uint64_t attempt = ++p.attempt;
  std::thread([box = r_.mailbox(), a = alive_, this, &p, attempt, host = n.host, port = n.port,
               netem = d_.link.mechanism == "netem"] {
    std::vector<Addr> addrs = with_local(resolve(host, port), port, netem);
    Reactor::post(box, [a, this, &p, attempt, addrs = std::move(addrs)] {
      if (!*a || stop_ || p.attempt != attempt || p.state != Peer::State::kResolving) return;
      p.state = Peer::State::kIdle;
      p.addrs = addrs;
      start_connect(p);   // none: retries later
    });
  }).detach();
}

void TcpTransport::start_connect(Peer& p) {
  while (p.next_addr < p.addrs.size()) {
    const Addr& a = p.addrs[p.next_addr++];
    const int fd = ::socket(a.first, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    const int rc =
        ::connect(fd, reinterpret_cast<const sockaddr*>(a.second.data()), static_cast<socklen_t>(a.second.size()));
    if (rc != 0 && errno != EINPROGRESS) {
      ::close(fd);
      continue;
    }
    p.fd = fd;
    p.state = Peer::State::kConnecting;
    if (!r_.watch(fd, kPeerEvents | EPOLLOUT, [this, &p](uint32_t ev) { on_peer_event(p, ev); })) {
      ::close(fd);
      p.fd = -1;
      continue;
    }
    if (rc == 0) connected(p);
    return;
  }
  p.state = Peer::State::kIdle;
  retry_later(p);
}

void TcpTransport::close_peer(Peer& p) {
  ++p.attempt;   // a resolver still working for this attempt answers nobody
  if (p.fd >= 0) {
    r_.forget(p.fd);
    ::close(p.fd);
    p.fd = -1;
  }
  p.state = Peer::State::kIdle;
  p.want_out = false;
}

void TcpTransport::retry_later(Peer& p) {
  close_peer(p);
  if (stop_) return;
  const TimeUs at = steady_us() + static_cast<TimeUs>(p.backoff_s * 1e6);
  p.backoff_s = std::min(1.0, p.backoff_s * 2);
  p.retry_timer = r_.at(at, [this, &p] {
    p.retry_timer = 0;
    if (stop_) return;
    if (!p.gone && p.waiting()) connect(p);
  });
}

void TcpTransport::heard_from(NodeId from) {
  if (stop_ || from >= endpoint_.size()) return;
  auto& p = peers_[endpoint_[from]];
  if (!p || p->gone || !p->retry_timer) return;
  r_.cancel(p->retry_timer);
  p->retry_timer = 0;
  p->backoff_s = 0.1;
  if (p->waiting()) connect(*p);
}

void TcpTransport::connected(Peer& p) {
  p.state = Peer::State::kConnected;
  p.backoff_s = 0.1;
  p.blocked_since = 0;
  p.out_off = 0;   // a frame not through on an earlier connection is written again, whole, on this one
  p.counted = false;
  p.greet_off = 0;   // a connection opens with the deployment's token
  no_delay(p.fd);
  r_.change(p.fd, kPeerEvents);
  write(p);
}

void TcpTransport::broke(Peer& p) {
  if (stop_) return;
  close_peer(p);
  if (!p.out.empty() && ++p.breaks >= kMaxBreaks) {
    const uint64_t lost = p.out_msgs;
    p.out.clear();
    p.out_msgs = 0;
    p.breaks = 0;
    dropped_after_breaks(p.to, lost);
  }
  if (p.waiting()) {
    p.blocked_since = steady_us();
    retry_later(p);   // soon (0.1 s first), then backing off: a peer that restarts comes back
  }
}

void TcpTransport::watch() {
  watch_timer_ = r_.at(steady_us() + static_cast<TimeUs>(watch_every_s() * 1e6), [this] {
    watch_timer_ = 0;
    if (stop_) return;
    const TimeUs now = steady_us(), limit = static_cast<TimeUs>(o_.connect_timeout_s * 1e6);
    for (auto& p : peers_)
      if (p && !p->gone && p->state != Peer::State::kConnected && p->blocked_since != 0 &&
          now - p->blocked_since >= limit)
        give_up(*p);
    watch();
  });
}

void TcpTransport::give_up(Peer& p) {
  const uint64_t lost = p.pending.size() + p.parked_msgs + p.out_msgs;
  p.gone = true;
  p.pending.clear();
  p.unpark();
  p.out.clear();
  p.out_msgs = 0;
  if (p.retry_timer) r_.cancel(p.retry_timer);
  p.retry_timer = 0;
  close_peer(p);
  unreachable(p.to, lost);
  // Whatever stopped it, it may come back (a restarted process listens on the same port): tried again with what
  // comes next, its connection attempts a second apart. A client's is not (it exited at its run's end).
  if (!draining_ && d_.node(p.to).kind != NodeKind::Client) {
    p.gone = false;
    p.blocked_since = 0;
    p.backoff_s = 1.0;
  }
}

void TcpTransport::on_accept(int lfd) {
  for (;;) {
    sockaddr_storage sa{};
    socklen_t len = sizeof sa;
    const int fd = ::accept4(lfd, reinterpret_cast<sockaddr*>(&sa), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;   // none waiting (or out of descriptors: the connection waits in the backlog)
    }
    no_delay(fd);
    auto c = std::make_unique<InConn>();
    c->fd = fd;
    c->peer = peer_name(sa);
    c->greeted = o_.token == 0;
    if (!r_.watch(fd, EPOLLIN | EPOLLRDHUP, [this, fd](uint32_t) {
          auto it = ins_.find(fd);
          if (it != ins_.end()) on_readable(*it->second);
        })) {
      ::close(fd);
      continue;
    }
    ins_[fd] = std::move(c);
  }
}

void TcpTransport::close_in(int fd) {
  r_.forget(fd);
  ::close(fd);
  ins_.erase(fd);
}

void TcpTransport::on_readable(InConn& c) {
  const int fd = c.fd;
  for (;;) {
    if (c.buf.size() - c.have < 4096) {
      // Grow with what arrives (doubling, at most to the frame being read), never to what a header only announces:
      // a stranger's 4 bytes cost nothing.
      size_t to = c.buf.size() * 2;
      if (c.want > c.have) to = std::min(to, std::max(c.want, c.have + 4096));
      c.buf.resize(to);
    }
    const size_t room = c.buf.size() - c.have;
    const ssize_t n = ::recv(fd, c.buf.data() + c.have, room, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {   // the sender closed it, or it broke
      close_in(fd);
      return;
    }
    c.have += static_cast<size_t>(n);
    if (!take_frames(c)) {
      close_in(fd);
      return;
    }
    // Level-triggered: a read that did not fill the buffer took what was there; more wakes the reactor again.
    if (static_cast<size_t>(n) < room) return;
  }
}

bool TcpTransport::take_frames(InConn& c) {
  size_t at = 0;
  if (!c.greeted) {   // the deployment's token first: a stranger is refused before any frame of it is read
    if (c.have < 8) return true;
    uint64_t token = 0;
    for (int i = 0; i < 8; ++i) token = token << 8 | static_cast<uint8_t>(c.buf[i]);
    if (token != o_.token) {
      junk(c.peer, "it did not open with the deployment's token");
      return false;
    }
    c.greeted = true;
    at = 8;
  }
  while (c.have - at >= 4) {
    const auto* h = reinterpret_cast<const uint8_t*>(c.buf.data() + at);
    const uint32_t len = uint32_t{h[0]} << 24 | uint32_t{h[1]} << 16 | uint32_t{h[2]} << 8 | h[3];
    if (len > kMaxFrame) {
      malformed(c.peer, "frame of " + std::to_string(len) + " bytes (at most " + std::to_string(kMaxFrame) +
                            "); closing its connection");
      return false;
    }
    if (c.have - at - 4 < len) {   // not all here yet (on_readable grows the buffer as it comes)
      c.want = size_t{len} + 4;
      break;
    }
    c.want = 0;
    c.batch.Clear();
    if (!c.batch.ParseFromArray(c.buf.data() + at + 4, static_cast<int>(len))) {
      malformed(c.peer, "a frame of " + std::to_string(len) + " bytes that is no txn.Batch; closing its connection");
      return false;
    }
    // A frame from a process on this kernel counts its messages' delay from its write (the stamp).
    const bool ours = c.batch.clock_domain() != 0 && c.batch.clock_domain() == clock_domain();
    if (!ours && !foreign_clock_ && c.batch.msgs_size() > 0) {   // (an empty frame says nothing of its sender)
      foreign_clock_ = true;
      if (on_foreign_clock_) on_foreign_clock_();
    }
    const TimeUs sent = ours ? c.batch.sent_steady_us() : 0;
    if (c.batch.msgs_size() > 0) heard_from(c.batch.msgs(0).from());
    for (auto& m : *c.batch.mutable_msgs()) on_incoming(std::move(m), c.peer, sent);
    at += 4 + len;
  }
  if (at > 0) {
    std::memmove(c.buf.data(), c.buf.data() + at, c.have - at);
    c.have -= at;
  }
  if (c.buf.size() > InConn::kBuf && c.have <= InConn::kBuf / 2 && c.want <= InConn::kBuf / 2) {
    std::vector<char> small(InConn::kBuf);   // a large frame is through: its memory goes back
    std::memcpy(small.data(), c.buf.data(), c.have);
    c.buf.swap(small);
  }
  return true;
}

}  // namespace txn::runtime
