#include "runtime/transport.h"
#include "runtime/clock.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <thread>

#include "envelope.grpc.pb.h"

namespace txn::runtime {

struct Transport::PeerConn {
  NodeId to = 0;
  std::mutex mu;
  std::condition_variable cv;
  struct Item {
    TimeUs at;
    Envelope msg;
  };
  std::deque<Item> q;          // delivery times are non-decreasing (per-channel FIFO)
  TimeUs last = 0;
  std::mt19937_64 rng;
  std::thread thread;
  // Used by the sender thread only (ctx also by the destructor, to cancel).
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<txn::Peer::Stub> stub;
  std::unique_ptr<grpc::ClientContext> ctx;
  Ack ack;
  std::unique_ptr<grpc::ClientWriter<Batch>> stream;
  bool gone = false;           // an exited client: later messages are dropped silently
};

class Transport::Service final : public txn::Peer::Service {
 public:
  explicit Service(Transport* t) : t_(t) {}
  grpc::Status Stream(grpc::ServerContext* ctx, grpc::ServerReader<Batch>* r, Ack* ack) override {
    Batch b;
    uint64_t n = 0;
    while (r->Read(&b)) {
      for (auto& m : *b.mutable_msgs()) {
        ++n;
        t_->on_incoming(std::move(m), ctx->peer());
      }
    }
    ack->set_received(n);
    return grpc::Status::OK;
  }
  grpc::Status Ping(grpc::ServerContext*, const PingRequest*, PingReply* rep) override {
    rep->set_node(t_->self());
    rep->set_name(t_->deployment().node(t_->self()).name);
    return grpc::Status::OK;
  }

 private:
  Transport* t_;
};

Transport::Transport(const Deployment& d, NodeId self, TransportOptions o, Deliver deliver, Log log)
    : d_(d), self_(self), o_(std::move(o)), deliver_(std::move(deliver)), log_(std::move(log)),
      emu_(d.link), peers_(d.nodes.size()) {}

Transport::~Transport() {
  stop_ = true;
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  std::vector<PeerConn*> ps;
  {
    std::lock_guard<std::mutex> g(peers_mu_);
    for (auto& p : peers_)
      if (p) ps.push_back(p.get());
  }
  for (auto* p : ps) {
    std::lock_guard<std::mutex> g(p->mu);
    p->cv.notify_all();
  }
  for (auto* p : ps)
    if (p->thread.joinable()) p->thread.join();
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
  std::lock_guard<std::mutex> g(peers_mu_);
  auto& p = peers_[to];
  if (!p) {
    p = std::make_unique<PeerConn>();
    p->to = to;
    p->rng.seed(d_.seed ^ (uint64_t{self_} << 32) ^ to ^ 0x9e3779b97f4a7c15ull);
    p->thread = std::thread([this, q = p.get()] { sender_loop(*q); });
  }
  return *p;
}

void Transport::send(Envelope msg) {
  NodeId to = msg.to();
  if (to >= d_.nodes.size()) {
    log_("send to unknown node id " + std::to_string(to) + " dropped");
    return;
  }
  PeerConn& p = peer(to);
  std::lock_guard<std::mutex> g(p.mu);
  TimeUs at = emu_.delivery_time(d_.node(self_).region, d_.node(to).region, steady_us(), p.last, p.rng);
  p.last = at;
  p.q.push_back({at, std::move(msg)});
  if (p.q.size() == 1) p.cv.notify_one();
}

void Transport::sender_loop(PeerConn& p) {
  std::unique_lock<std::mutex> lk(p.mu);
  while (!stop_) {
    if (p.q.empty()) {
      p.cv.wait(lk);
      continue;
    }
    TimeUs now = steady_us();
    if (p.q.front().at > now) {
      p.cv.wait_until(lk, steady_at(p.q.front().at));
      continue;
    }
    Batch b;
    while (!p.q.empty() && p.q.front().at <= now) {
      *b.add_msgs() = std::move(p.q.front().msg);
      p.q.pop_front();
    }
    lk.unlock();
    if (p.to == self_) {
      for (auto& m : *b.mutable_msgs()) deliver_(std::move(m));
    } else if (!write_batch(p, b) && !stop_) {
      log_("dropped " + std::to_string(b.msgs_size()) + " message(s) to unreachable " +
           d_.node(p.to).name);
    }
    lk.lock();
  }
}

bool Transport::write_batch(PeerConn& p, const Batch& b) {
  if (p.gone) return true;
  for (int tries = 0; tries < 3 && !stop_; ++tries) {
    if (!p.stream && !connect(p)) return false;
    if (p.stream->Write(b)) return true;
    // Stream broke (peer restarted or connection reset): recreate it.
    p.stream->Finish();
    p.stream.reset();
    p.ctx.reset();
  }
  return false;
}

bool Transport::connect(PeerConn& p) {
  const auto& n = d_.node(p.to);
  std::string addr = n.host + ":" + std::to_string(n.port);
  if (!p.channel) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    args.SetInt(GRPC_ARG_MINIMAL_STACK, 1);  // no deadline/census filters: less work per message
    p.channel = grpc::CreateCustomChannel(addr, grpc::InsecureChannelCredentials(), args);
    p.stub = txn::Peer::NewStub(p.channel);
  }
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<int64_t>(o_.connect_timeout_s * 1000));
  while (!p.channel->WaitForConnected(std::chrono::system_clock::now() +
                                      std::chrono::milliseconds(200))) {
    if (stop_) return false;
    if (std::chrono::steady_clock::now() >= deadline) {
      if (draining_) return false;
      if (n.kind == NodeKind::Client && self_ != p.to) {
        // Clients exit when their run is over; late replies to them are not an error.
        log_("client " + n.name + " unreachable; dropping its messages");
        p.gone = true;
        return false;
      }
      std::fprintf(stderr, "%s: error: peer %s at %s unreachable after %gs\n", o_.prog.c_str(),
                   n.name.c_str(), addr.c_str(), o_.connect_timeout_s);
      std::fflush(stderr);
      _exit(3);
    }
  }
  p.ctx = std::make_unique<grpc::ClientContext>();
  p.stream = p.stub->Stream(p.ctx.get(), &p.ack);
  return p.stream != nullptr;
}

void Transport::on_incoming(Envelope&& m, const std::string& peer) {
  std::string from = m.from() < d_.nodes.size() ? d_.node(m.from()).name : peer;
  std::string why;
  if (m.from() >= d_.nodes.size()) why = "unknown sender id " + std::to_string(m.from());
  else if (m.to() >= d_.nodes.size()) why = "unknown destination id " + std::to_string(m.to());
  else if (m.to() != self_) why = "addressed to " + d_.node(m.to()).name + ", not to me";
  else if (m.body_case() == Envelope::BODY_NOT_SET) why = "empty body";
  if (!why.empty()) {
    log_("bad message from " + from + ": " + why);
    return;
  }
  if (m.has_probe()) {  // RTT self-test: answered by the runtime, not the node
    Envelope r;
    r.set_from(self_);
    r.set_to(m.from());
    r.set_sent_us(std::chrono::duration_cast<std::chrono::microseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count());
    r.mutable_probe_reply()->set_seq(m.probe().seq());
    r.mutable_probe_reply()->set_sent_us(m.probe().sent_us());
    send(std::move(r));
    return;
  }
  deliver_(std::move(m));
}

}  // namespace txn::runtime
