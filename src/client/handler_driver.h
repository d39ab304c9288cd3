// The client driver of protocols whose coordinator is the handler of the
// transaction's home shard (replica 0 there, in the client's region): the
// attempt goes to it as a ClientSubmit and its ClientReply ends the attempt.
// DAST and Janus use it.
#pragma once
#include "core/protocol.h"

namespace txn {

// Replica 0 of a shard: the handler/coordinator of the transactions homed there.
inline NodeId handler_of(const Deployment& d, uint32_t shard) { return d.replica_id(shard, 0); }

class HandlerClientDriver : public ClientDriver {
 public:
  HandlerClientDriver(const Deployment& d, std::string protocol) : d_(d), protocol_(std::move(protocol)) {}
  void submit(Env& env, const TxnRequest& txn, uint32_t attempt) override;
  void on_message(Env& env, Envelope& msg) override;

 private:
  const Deployment& d_;
  std::string protocol_;  // for the error line
};

}  // namespace txn
