#include "runtime/grpc_transport.h"

#include <grpcpp/grpcpp.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "envelope.grpc.pb.h"
#include "runtime/clock.h"

// Every gRPC operation of this transport completes on cq_, and its tag runs on
// cq_thread_ only (never inline in the thread that started it), so our mutexes
// may be held while starting one.

namespace txn::runtime {
// What the completion-queue thread does when an operation completes.
struct GrpcTransport::Tag {
  virtual ~Tag() = default;
  virtual void done(bool ok) = 0;
};

// One long-lived client stream to a peer process. Its call is started, then
// finished at once (the status arrives when the stream breaks or is
// cancelled), with at most one write in flight: the peer's inflight batch.
// Owned by its PeerConn; retired (stream_over) on the queue's thread once its
// finish and every other operation started on it have come back, in whatever
// order the queue returns them.
struct GrpcTransport::ClientStream {
  struct Hook final : Tag {
    Hook(GrpcTransport* t, PeerConn* p, void (GrpcTransport::*fn)(PeerConn&, bool)) : t(t), p(p), fn(fn) {}
    void done(bool ok) override { (t->*fn)(*p, ok); }
    GrpcTransport* t;
    PeerConn* p;
    void (GrpcTransport::*fn)(PeerConn&, bool);
  };
  ClientStream(GrpcTransport* t, PeerConn* p)
      : started(t, p, &GrpcTransport::on_started), written(t, p, &GrpcTransport::on_write_done),
        finished(t, p, &GrpcTransport::on_finished) {}
  Hook started, written, finished;
  grpc::ClientContext ctx;
  Ack ack;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncWriter<Batch>> call;
  int ops = 0;                  // operations started on it whose tag has not come back (guarded by the peer's mu)
  bool open = false;            // the call started: writes may go
  bool over = false;            // its finish came back: no new operation
};

struct GrpcTransport::PeerConn {
  NodeId to = 0;
  std::mutex mu;                   // guards everything below
  std::vector<Envelope> pending;   // sent, not yet written
  Batch inflight;                  // being written; kept for a retry if its stream breaks
  bool busy = false;               // inflight is being written (only its completion starts the next)
  std::unique_ptr<ClientStream> stream;   // the live stream, if any
  int failures = 0;                // streams broken in a row with a batch not through
  TimeUs blocked_since = 0;        // data has waited to be written since then (0: none)
  bool gone = false;               // unreachable client, or a peer lost while draining: drop
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<txn::Peer::Stub> stub;
};

// Server side of one peer's stream: unpacks each batch into deliveries. Its
// operations are sequential (accept, read, read, ..., finish), one tag.
class GrpcTransport::ServerStream final : public Tag {
 public:
  explicit ServerStream(GrpcTransport* t) : t_(t), reader_(&ctx_) {
    t_->op_started();
    t_->service_->RequestStream(&ctx_, &reader_, t_->cq_.get(), t_->cq_.get(), this);
  }
  void done(bool ok) override {
    switch (state_) {
      case State::kAccepting:
        if (!ok || t_->stop_) {  // the server is shutting down
          delete this;
          return;
        }
        new ServerStream(t_);   // the next peer's stream
        peer_ = ctx_.peer();
        state_ = State::kFinishing;
        if (!t_->token_hex_.empty()) {   // a stranger's stream: refused before any batch of it is read
          const auto& md = ctx_.client_metadata();
          const auto it = md.find(kTokenKey);
          if (it == md.end() || std::string(it->second.data(), it->second.size()) != t_->token_hex_) {
            t_->junk(peer_, it == md.end() ? "its stream did not carry the deployment's token"
                                           : "its stream carried another deployment's token");
            t_->op_started();
            reader_.FinishWithError(grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "not this deployment's token"),
                                    this);
            return;
          }
        }
        state_ = State::kReading;
        read();
        return;
      case State::kReading:
        if (ok) {
          for (auto& m : *batch_.mutable_msgs()) {
            ++n_;
            t_->on_incoming(std::move(m), peer_);
          }
          batch_.Clear();
          if (!t_->stop_) {
            read();
            return;
          }
        }
        if (t_->stop_) {  // no operation starts while the queue is being shut down
          delete this;
          return;
        }
        ack_.set_received(n_);
        state_ = State::kFinishing;
        t_->op_started();
        reader_.Finish(ack_, grpc::Status::OK, this);
        return;
      case State::kFinishing:
        delete this;
        return;
    }
  }

 private:
  void read() {
    t_->op_started();
    reader_.Read(&batch_, this);
  }
  enum class State { kAccepting, kReading, kFinishing };
  GrpcTransport* t_;
  State state_ = State::kAccepting;
  grpc::ServerContext ctx_;
  grpc::ServerAsyncReader<Ack, Batch> reader_;
  Batch batch_;
  Ack ack_;
  std::string peer_;
  uint64_t n_ = 0;
};

// Ping: the process's endpoint node, for launchers and operators (grpcurl).
class GrpcTransport::PingCall final : public Tag {
 public:
  explicit PingCall(GrpcTransport* t) : t_(t), responder_(&ctx_) {
    t_->op_started();
    t_->service_->RequestPing(&ctx_, &req_, &responder_, t_->cq_.get(), t_->cq_.get(), this);
  }
  void done(bool ok) override {
    if (!ok || answered_ || t_->stop_) {
      delete this;
      return;
    }
    new PingCall(t_);
    answered_ = true;
    PingReply rep;
    rep.set_node(t_->self());
    rep.set_name(t_->deployment().node(t_->self()).name);
    t_->op_started();
    responder_.Finish(rep, grpc::Status::OK, this);
  }

 private:
  GrpcTransport* t_;
  grpc::ServerContext ctx_;
  PingRequest req_;
  grpc::ServerAsyncResponseWriter<PingReply> responder_;
  bool answered_ = false;
};

GrpcTransport::GrpcTransport(const Deployment& d, std::vector<NodeId> local, TransportOptions o, Deliver deliver, Log log)
    : Transport(d, std::move(local), std::move(o), std::move(deliver), std::move(log)), peers_(d.nodes.size()) {
  if (o_.token) {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(o_.token));
    token_hex_ = hex;
  }
  watcher_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "txn-watch");
    watch_loop();
  });
}

GrpcTransport::~GrpcTransport() {
  {
    std::lock_guard<std::mutex> g(watch_mu_);
    stop_ = true;
    watch_cv_.notify_all();
  }
  watcher_.join();
  {
    // From here no operation starts (flush() and the tags check stop_); cancel the live ones.
    std::lock_guard<std::mutex> g(peers_mu_);
    for (auto& p : peers_) {
      if (!p) continue;
      std::lock_guard<std::mutex> g2(p->mu);
      if (p->stream) p->stream->ctx.TryCancel();
    }
  }
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  if (cq_) {
    {
      // Every started operation's tag comes back (cancelled) before the queue may be shut down.
      std::unique_lock<std::mutex> lk(ops_mu_);
      ops_cv_.wait_for(lk, std::chrono::seconds(5), [&] { return ops_ == 0; });
    }
    cq_->Shutdown();
    cq_thread_.join();
  }
  server_.reset();
  for (auto& p : peers_)
    if (p) p->stream.reset();   // over, or abandoned with the queue
}

bool GrpcTransport::listen(std::string* err) {
  const auto& me = d_.node(self_);
  std::string addr = o_.bind_host + ":" + std::to_string(me.port);
  service_ = std::make_unique<txn::Peer::AsyncService>();
  grpc::ServerBuilder b;
  int bound = 0;
  b.AddListeningPort(addr, grpc::InsecureServerCredentials(), &bound);
  b.RegisterService(service_.get());
  b.AddChannelArgument(GRPC_ARG_MINIMAL_STACK, 1);
  auto cq = b.AddCompletionQueue();
  server_ = b.BuildAndStart();
  if (!server_ || bound == 0) {
    *err = "cannot listen on " + addr;
    server_.reset();
    return false;
  }
  cq_ = std::move(cq);
  listening_ = true;
  new ServerStream(this);
  new PingCall(this);
  cq_thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "txn-cq");
    cq_loop();
  });
  // What was sent before there was a queue.
  std::vector<PeerConn*> ps;
  {
    std::lock_guard<std::mutex> g(peers_mu_);
    for (auto& p : peers_)
      if (p) ps.push_back(p.get());
  }
  for (PeerConn* p : ps) flush(*p);
  return true;
}

void GrpcTransport::cq_loop() {
  void* tag = nullptr;
  bool ok = false;
  while (cq_->Next(&tag, &ok)) {
    static_cast<Tag*>(tag)->done(ok);
    if (--ops_ == 0 && stop_) {
      std::lock_guard<std::mutex> g(ops_mu_);
      ops_cv_.notify_all();
    }
  }
}

GrpcTransport::PeerConn& GrpcTransport::peer(NodeId ep) {
  std::lock_guard<std::mutex> g(peers_mu_);
  auto& p = peers_[ep];
  if (!p) {
    p = std::make_unique<PeerConn>();
    p->to = ep;
  }
  return *p;
}

bool GrpcTransport::queue(Envelope&& msg, PeerConn** out) {
  NodeId ep;
  if (!route_out(msg, &ep)) return false;
  PeerConn& p = peer(ep);
  std::lock_guard<std::mutex> g(p.mu);
  p.pending.push_back(std::move(msg));
  *out = &p;
  return true;
}

void GrpcTransport::send(Envelope msg) {
  PeerConn* p = nullptr;
  if (queue(std::move(msg), &p)) flush(*p);
}

void GrpcTransport::enqueue(Envelope msg) {
  PeerConn* p = nullptr;
  if (!queue(std::move(msg), &p)) return;
  std::lock_guard<std::mutex> g(dirty_mu_);
  if (std::find(dirty_.begin(), dirty_.end(), p) == dirty_.end()) dirty_.push_back(p);
}

void GrpcTransport::flush() {
  std::vector<PeerConn*> ps;
  {
    std::lock_guard<std::mutex> g(dirty_mu_);
    ps.swap(dirty_);
  }
  for (PeerConn* p : ps) flush(*p);
}

void GrpcTransport::watch_loop() {
  std::unique_lock<std::mutex> lk(watch_mu_);
  while (!stop_) {
    // Waiting writes are checked for unreachable peers a tenth of the timeout apart (0.1-1 s).
    watch_cv_.wait_for(lk, std::chrono::duration<double>(watch_every_s()));
    if (stop_) break;
    lk.unlock();
    watch_connections(steady_us());
    lk.lock();
  }
}

void GrpcTransport::flush(PeerConn& p) {
  std::unique_lock<std::mutex> lk(p.mu);
  if (p.busy) return;  // the write in flight picks up what is pending when it is done
  if (p.gone || stop_) {  // shutting down: the destructor cancels the live streams
    const uint64_t lost = p.gone && !stop_ ? p.pending.size() + static_cast<size_t>(p.inflight.msgs_size()) : 0;
    p.pending.clear();
    p.inflight.Clear();   // not busy: no write of it in progress
    lk.unlock();
    if (lost > 0) count_drops(p.to, lost);
    return;
  }
  if (p.pending.empty() && p.inflight.msgs_size() == 0) return;
  if (!listening_) return;   // before listen(): it flushes
  if (p.stream && p.stream->over) return;   // its last tag retires it and flushes (stream_over)
  for (auto& m : p.pending) *p.inflight.add_msgs() = std::move(m);  // after a batch being retried
  p.pending.clear();
  p.busy = true;
  count_write(static_cast<uint64_t>(p.inflight.msgs_size()));
  if (p.blocked_since == 0) p.blocked_since = steady_us();
  if (p.stream) {
    if (p.stream->open) write_inflight(p);   // else its start writes the batch
    return;
  }
  if (!p.channel) {
    const auto& n = d_.node(p.to);
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    args.SetInt(GRPC_ARG_MINIMAL_STACK, 1);  // no deadline/census filters: less work per message
    p.channel = grpc::CreateCustomChannel(n.host + ":" + std::to_string(n.port), grpc::InsecureChannelCredentials(),
                                          args);
    p.stub = txn::Peer::NewStub(p.channel);
  }
  // A new stream. It waits for the peer to come up; the watcher gives up after connect_timeout_s.
  p.stream = std::make_unique<ClientStream>(this, &p);
  ClientStream& s = *p.stream;
  s.ctx.set_wait_for_ready(true);
  if (!token_hex_.empty()) s.ctx.AddMetadata(kTokenKey, token_hex_);
  s.call = p.stub->PrepareAsyncStream(&s.ctx, &s.ack, cq_.get());
  s.ops = 2;
  op_started();
  s.call->StartCall(&s.started);
  op_started();
  s.call->Finish(&s.status, &s.finished);   // comes back when the stream ends
}

void GrpcTransport::write_inflight(PeerConn& p) {
  ClientStream& s = *p.stream;
  ++s.ops;
  op_started();
  s.call->Write(p.inflight, &s.written);
}

void GrpcTransport::on_started(PeerConn& p, bool ok) {
  std::unique_lock<std::mutex> lk(p.mu);
  ClientStream& s = *p.stream;
  --s.ops;
  if (ok && !s.over && !stop_) {   // else its finish says how it ended
    s.open = true;
    if (p.busy) write_inflight(p);   // the batch that waited for the start
  }
  if (s.over && s.ops == 0) stream_over(p, lk);
}

void GrpcTransport::on_write_done(PeerConn& p, bool ok) {
  std::unique_lock<std::mutex> lk(p.mu);
  ClientStream& s = *p.stream;
  --s.ops;
  if (ok) {
    p.inflight.Clear();
    p.failures = 0;
    p.blocked_since = 0;
    p.busy = false;
  }
  if (s.over) {   // no write on a finished call: retired, and what is pending goes on a new stream
    if (s.ops == 0) stream_over(p, lk);
    return;
  }
  if (!ok) return;  // the stream broke: its finish retires it and retries the batch on a new one
  lk.unlock();
  flush(p);
}

void GrpcTransport::on_finished(PeerConn& p, bool) {   // over either way
  std::unique_lock<std::mutex> lk(p.mu);
  ClientStream& s = *p.stream;
  --s.ops;
  s.over = true;
  if (s.ops == 0) stream_over(p, lk);
}

// The stream is over and none of its operations is left: retry what it did not get through on a new one.
void GrpcTransport::stream_over(PeerConn& p, std::unique_lock<std::mutex>& lk) {
  std::unique_ptr<ClientStream> dead = std::move(p.stream);   // freed last: its hook is running
  int dropped = 0;
  if (p.busy) {  // its last write did not get through
    p.busy = false;
    if (p.gone) {
      p.inflight.Clear();
    } else if (++p.failures >= kMaxBreaks) {
      dropped = p.inflight.msgs_size();
      p.inflight.Clear();
      p.failures = 0;
      if (p.pending.empty()) p.blocked_since = 0;
    }
  }
  lk.unlock();
  if (!stop_) dropped_after_breaks(p.to, static_cast<uint64_t>(dropped));
  else if (dropped > 0) count_drops(p.to, static_cast<uint64_t>(dropped));
  flush(p);  // a new stream for what is still to be written
}

void GrpcTransport::watch_connections(TimeUs now) {
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
    give_up(*p);
  }
}

void GrpcTransport::give_up(PeerConn& p) {
  uint64_t dropped;
  {
    std::lock_guard<std::mutex> g(p.mu);
    p.gone = true;
    dropped = p.pending.size() + static_cast<size_t>(p.inflight.msgs_size());
    p.pending.clear();
    if (p.stream) p.stream->ctx.TryCancel();   // its write and finish come back cancelled
  }
  unreachable(p.to, dropped);   // given up for good: this transport does not take it back (docs/nemesis.md)
}

}  // namespace txn::runtime
