#include "runtime/transport.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "envelope.grpc.pb.h"
#include "runtime/clock.h"

// Never call into gRPC while holding one of our mutexes: the callback API may
// run reactions (OnWriteDone, OnDone) inline in the calling thread, and those
// take the same mutexes.

namespace txn::runtime {
namespace {
constexpr TimeUs kWatchUs = 100'000;   // how often waiting writes are checked for unreachable peers
constexpr int kMaxStreamFailures = 3;  // a batch whose stream broke this many times running is dropped
}  // namespace

struct Transport::PeerConn {
  NodeId to = 0;
  std::mutex mu;                   // guards everything below
  std::vector<Envelope> pending;   // sent, not yet written
  Batch inflight;                  // being written; kept for a retry if its stream breaks
  bool busy = false;               // a write is in flight (only its completion starts the next)
  std::shared_ptr<Writer> writer;  // the live stream, if any
  int failures = 0;                // streams broken in a row with a batch not through
  TimeUs blocked_since = 0;        // data has waited to be written since then (0: none)
  bool gone = false;               // unreachable client, or a peer lost while draining: drop
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<txn::Peer::Stub> stub;
};

// One long-lived client stream to a peer. Keeps itself alive until OnDone.
class Transport::Writer final : public grpc::ClientWriteReactor<Batch>,
                                public std::enable_shared_from_this<Writer> {
 public:
  Writer(Transport* t, PeerConn* p) : t_(t), p_(p) {}
  // Opens the stream with `first` as its first write. The call waits for the
  // peer to come up; the transport's watchdog gives up after connect_timeout_s.
  void open(txn::Peer::Stub* stub, Batch* first) {
    self_ = shared_from_this();
    ctx_.set_wait_for_ready(true);
    stub->async()->Stream(&ctx_, &ack_, this);
    StartWrite(first);
    StartCall();
  }
  void write(Batch* b) { StartWrite(b); }
  void cancel() { ctx_.TryCancel(); }
  void OnWriteDone(bool ok) override { t_->on_write_done(*p_, ok); }
  void OnDone(const grpc::Status&) override {
    auto keep = std::move(self_);  // freed when this returns, after the transport is told
    t_->on_stream_done(*p_);
  }

 private:
  Transport* t_;
  PeerConn* p_;
  grpc::ClientContext ctx_;
  Ack ack_;
  std::shared_ptr<Writer> self_;
};

namespace {
// Server side of one peer's stream: unpacks each batch into deliveries.
class Reader final : public grpc::ServerReadReactor<Batch> {
 public:
  Reader(Transport* t, grpc::CallbackServerContext* ctx, Ack* ack) : t_(t), ack_(ack), peer_(ctx->peer()) {
    StartRead(&b_);
  }
  void OnReadDone(bool ok) override {
    if (!ok) {
      ack_->set_received(n_);
      Finish(grpc::Status::OK);
      return;
    }
    for (auto& m : *b_.mutable_msgs()) {
      ++n_;
      t_->on_incoming(std::move(m), peer_);
    }
    b_.Clear();
    StartRead(&b_);
  }
  void OnDone() override { delete this; }

 private:
  Transport* t_;
  Ack* ack_;
  std::string peer_;
  Batch b_;
  uint64_t n_ = 0;
};
}  // namespace

class Transport::Service final : public txn::Peer::CallbackService {
 public:
  explicit Service(Transport* t) : t_(t) {}
  grpc::ServerReadReactor<Batch>* Stream(grpc::CallbackServerContext* ctx, Ack* ack) override {
    return new Reader(t_, ctx, ack);
  }
  grpc::ServerUnaryReactor* Ping(grpc::CallbackServerContext* ctx, const PingRequest*, PingReply* rep) override {
    rep->set_node(t_->self());
    rep->set_name(t_->deployment().node(t_->self()).name);
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }

 private:
  Transport* t_;
};

Transport::Transport(const Deployment& d, NodeId self, TransportOptions o, Deliver deliver, Log log)
    : Transport(d, d.process_nodes(d.process_of(self)), std::move(o), std::move(deliver), std::move(log)) {}

Transport::Transport(const Deployment& d, std::vector<NodeId> local, TransportOptions o, Deliver deliver, Log log)
    : d_(d), self_(local.empty() ? 0 : d.endpoint(local.front())), local_(d.nodes.size(), false),
      endpoint_(d.nodes.size()), o_(std::move(o)), deliver_(std::move(deliver)), log_(std::move(log)),
      in_(d.link), rng_(d.seed ^ (uint64_t{self_} << 32) ^ 0x9e3779b97f4a7c15ull), peers_(d.nodes.size()) {
  for (NodeId id : local) local_.at(id) = true;
  for (NodeId id = 0; id < d.nodes.size(); ++id) endpoint_[id] = d.endpoint(id);
  watcher_ = std::thread([this] { watch_loop(); });
}

Transport::~Transport() {
  {
    std::lock_guard<std::mutex> g(watch_mu_);
    stop_ = true;
    watch_cv_.notify_all();
  }
  watcher_.join();
  std::vector<std::shared_ptr<Writer>> writers;
  {
    std::lock_guard<std::mutex> g(peers_mu_);
    for (auto& p : peers_) {
      if (!p) continue;
      std::lock_guard<std::mutex> g2(p->mu);
      if (p->writer) writers.push_back(p->writer);
    }
  }
  for (auto& w : writers) w->cancel();
  writers.clear();
  {
    // Writers call back into this object until their OnDone has run.
    std::unique_lock<std::mutex> lk(writers_mu_);
    writers_cv_.wait_for(lk, std::chrono::seconds(5), [&] { return live_writers_ == 0; });
  }
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
}

bool Transport::listen(std::string* err) {
  const auto& me = d_.node(self_);
  std::string addr = o_.bind_host + ":" + std::to_string(me.port);
  service_ = std::make_unique<Service>(this);
  grpc::ServerBuilder b;
  int bound = 0;
  b.AddListeningPort(addr, grpc::InsecureServerCredentials(), &bound);
  b.RegisterService(service_.get());
  b.AddChannelArgument(GRPC_ARG_MINIMAL_STACK, 1);
  server_ = b.BuildAndStart();
  if (!server_ || bound == 0) {
    *err = "cannot listen on " + addr;
    server_.reset();
    return false;
  }
  return true;
}

Transport::PeerConn& Transport::peer(NodeId to) {
  const NodeId ep = endpoint_[to];
  std::lock_guard<std::mutex> g(peers_mu_);
  auto& p = peers_[ep];
  if (!p) {
    p = std::make_unique<PeerConn>();
    p->to = ep;
  }
  return *p;
}

bool Transport::queue(Envelope&& msg, PeerConn** out) {
  NodeId to = msg.to();
  if (to >= d_.nodes.size()) {
    ++drops_servers_;
    log_("send to unknown node id " + std::to_string(to) + " dropped");
    return false;
  }
  if (hosts(to)) {  // no socket, same link model
    on_incoming(std::move(msg), "self");
    return false;
  }
  PeerConn& p = peer(to);
  std::lock_guard<std::mutex> g(p.mu);
  p.pending.push_back(std::move(msg));
  *out = &p;
  return true;
}

void Transport::send(Envelope msg) {
  PeerConn* p = nullptr;
  if (queue(std::move(msg), &p)) flush(*p);
}

void Transport::enqueue(Envelope msg) {
  PeerConn* p = nullptr;
  if (!queue(std::move(msg), &p)) return;
  std::lock_guard<std::mutex> g(dirty_mu_);
  if (std::find(dirty_.begin(), dirty_.end(), p) == dirty_.end()) dirty_.push_back(p);
}

void Transport::flush() {
  std::vector<PeerConn*> ps;
  {
    std::lock_guard<std::mutex> g(dirty_mu_);
    ps.swap(dirty_);
  }
  for (PeerConn* p : ps) flush(*p);
}

void Transport::watch_loop() {
  std::unique_lock<std::mutex> lk(watch_mu_);
  while (!stop_) {
    watch_cv_.wait_for(lk, std::chrono::microseconds(kWatchUs));
    if (stop_) break;
    lk.unlock();
    watch_connections(steady_us());
    lk.lock();
  }
}

void Transport::flush(PeerConn& p) {
  {
    std::unique_lock<std::mutex> lk(p.mu);
    if (p.busy) return;  // the write in flight picks up what is pending when it is done
    if (p.gone || stop_) {  // shutting down: the destructor cancels the live writers
      const uint64_t lost = p.gone && !stop_ ? p.pending.size() + static_cast<size_t>(p.inflight.msgs_size()) : 0;
      p.pending.clear();
      p.inflight.Clear();   // not busy: no write of it in progress
      lk.unlock();
      if (lost > 0) count_drops(p.to, lost);
      return;
    }
    if (p.pending.empty() && p.inflight.msgs_size() == 0) return;
    for (auto& m : p.pending) *p.inflight.add_msgs() = std::move(m);  // after a batch being retried
    p.pending.clear();
    p.busy = true;
    ++writes_;
    written_ += static_cast<uint64_t>(p.inflight.msgs_size());
    if (p.blocked_since == 0) p.blocked_since = steady_us();
    std::shared_ptr<Writer> w = p.writer;
    const bool fresh = !w;
    if (fresh) {
      if (!p.channel) {
        const auto& n = d_.node(p.to);
        grpc::ChannelArguments args;
        args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
        args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
        args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
        args.SetInt(GRPC_ARG_MINIMAL_STACK, 1);  // no deadline/census filters: less work per message
        p.channel = grpc::CreateCustomChannel(n.host + ":" + std::to_string(n.port),
                                              grpc::InsecureChannelCredentials(), args);
        p.stub = txn::Peer::NewStub(p.channel);
      }
      w = std::make_shared<Writer>(this, &p);
      p.writer = w;
      std::lock_guard<std::mutex> g(writers_mu_);
      ++live_writers_;
    }
    lk.unlock();
    if (fresh) w->open(p.stub.get(), &p.inflight);
    else w->write(&p.inflight);
  }
}

void Transport::on_write_done(PeerConn& p, bool ok) {
  {
    std::lock_guard<std::mutex> g(p.mu);
    if (!ok) return;  // the stream broke: its OnDone retries the batch on a new stream
    p.inflight.Clear();
    p.failures = 0;
    p.blocked_since = 0;
    p.busy = false;
  }
  flush(p);
}

void Transport::on_stream_done(PeerConn& p) {
  int dropped = 0;
  {
    std::lock_guard<std::mutex> g(p.mu);
    p.writer.reset();
    if (p.busy) {  // its last write did not get through
      p.busy = false;
      if (p.gone) {
        p.inflight.Clear();
      } else if (++p.failures >= kMaxStreamFailures) {
        dropped = p.inflight.msgs_size();
        p.inflight.Clear();
        p.failures = 0;
        if (p.pending.empty()) p.blocked_since = 0;
      }
    }
  }
  if (dropped > 0) count_drops(p.to, static_cast<uint64_t>(dropped));
  if (dropped > 0 && !stop_)
    log_("dropped " + std::to_string(dropped) + " message(s) to " + d_.process_of(p.to) + ": its stream broke " +
         std::to_string(kMaxStreamFailures) + " times");
  flush(p);  // a new stream for what is still to be written
  std::lock_guard<std::mutex> g(writers_mu_);
  --live_writers_;
  writers_cv_.notify_all();
}

void Transport::watch_connections(TimeUs now) {
  std::vector<PeerConn*> ps;
  {
    std::lock_guard<std::mutex> g(peers_mu_);
    for (auto& p : peers_)
      if (p) ps.push_back(p.get());
  }
  const auto limit = static_cast<TimeUs>(o_.connect_timeout_s * 1e6);
  for (PeerConn* p : ps) {
    std::shared_ptr<grpc::Channel> ch;
    {
      std::lock_guard<std::mutex> g(p->mu);
      if (p->gone || p->blocked_since == 0 || now - p->blocked_since < limit) continue;
      ch = p->channel;
    }
    // Connected but slow (flow control): not unreachable.
    if (ch && ch->GetState(false) == GRPC_CHANNEL_READY) continue;
    unreachable(*p);
  }
}

void Transport::unreachable(PeerConn& p) {
  const auto& n = d_.node(p.to);
  if (!draining_ && n.kind != NodeKind::Client) {
    std::string who = d_.process_of(p.to);
    const auto members = d_.process_nodes(who);
    if (members.size() > 1 || who != n.name) {  // a process of several nodes: name them too
      who += " (";
      for (size_t i = 0; i < members.size(); ++i) who += (i ? ", " : "") + d_.node(members[i]).name;
      who += ")";
    }
    std::fprintf(stderr, "%s: error: peer %s at %s:%u unreachable after %gs\n", o_.prog.c_str(), who.c_str(),
                 n.host.c_str(), n.port, o_.connect_timeout_s);
    std::fflush(stderr);
    _exit(3);
  }
  // Clients exit when their run is over, and a draining process only finishes
  // up: late messages to them are not an error.
  std::shared_ptr<Writer> w;
  size_t dropped;
  {
    std::lock_guard<std::mutex> g(p.mu);
    p.gone = true;
    dropped = p.pending.size() + static_cast<size_t>(p.inflight.msgs_size());
    p.pending.clear();
    w = p.writer;
  }
  count_drops(p.to, dropped);
  if (n.kind == NodeKind::Client) log_("client " + d_.process_of(p.to) + " unreachable; dropping its messages");
  else log_("dropped " + std::to_string(dropped) + " message(s) to unreachable " + d_.process_of(p.to));
  if (w) w->cancel();
}

void Transport::count_drops(NodeId to, uint64_t n) {
  if (d_.node(to).kind == NodeKind::Client) drops_clients_ += n;
  else drops_servers_ += n;
}

void Transport::on_incoming(Envelope&& m, const std::string& peer) {
  std::string from = m.from() < d_.nodes.size() ? d_.node(m.from()).name : peer;
  std::string why;
  if (m.from() >= d_.nodes.size()) why = "unknown sender id " + std::to_string(m.from());
  else if (m.to() >= d_.nodes.size()) why = "unknown destination id " + std::to_string(m.to());
  else if (!hosts(m.to())) why = "addressed to " + d_.node(m.to()).name + ", not to this process";
  else if (m.body_case() == Envelope::BODY_NOT_SET) why = "empty body";
  if (!why.empty()) {
    ++drops_malformed_;
    log_("bad message from " + from + ": " + why);
    return;
  }
  TimeUs due;
  {
    // The link emulator's delay for this channel, counted from arrival; per
    // channel the due times never decrease (FIFO, as one TCP stream delivers).
    std::lock_guard<std::mutex> g(in_mu_);
    due = in_.due(d_, m.from(), m.to(), steady_us(), rng_);
  }
  deliver_(std::move(m), due);
}

}  // namespace txn::runtime
