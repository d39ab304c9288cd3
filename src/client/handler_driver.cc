#include "client/handler_driver.h"

namespace txn {

void HandlerClientDriver::submit(Env& env, const TxnRequest& txn, uint32_t attempt) {
  Envelope e;
  *e.mutable_submit()->mutable_txn() = txn;
  e.mutable_submit()->set_attempt(attempt);
  env.send(handler_of(d_, txn.home_shard()), std::move(e));
}

void HandlerClientDriver::on_message(Env& env, Envelope& msg) {
  if (!msg.has_reply()) throw BadMessage(protocol_ + " client expects ClientReply");
  if (done_) done_(env, Outcome{msg.reply().txn_id(), msg.reply().committed(), &msg.reply().outputs(), &msg.reply().stored()});
}

}  // namespace txn
