// A client's transaction log: clients/<name>.txns.pb.gz (docs/checker.md).
//
// One TxnLogEntry per finished transaction, in protobuf's delimited form (a
// varint length, then the message's binary encoding), the whole file gzip-
// compressed at the fastest level. Binary because the engine writes it on its
// hot path: protobuf's JSON printer cost more CPU than the transaction's
// protocol work. `txn-replay --dump FILE` prints it as protobuf-JSON lines.
#pragma once

#include <functional>
#include <string>

#include <zlib.h>

#include "txn.pb.h"

namespace txn {

class TxnLogWriter {
 public:
  explicit TxnLogWriter(std::string path);
  ~TxnLogWriter();
  TxnLogWriter(const TxnLogWriter&) = delete;
  TxnLogWriter& operator=(const TxnLogWriter&) = delete;

  bool ok() const { return gz_ != nullptr && !failed_; }
  void write(const TxnLogEntry& e);
  // Flushes and closes; false if any write failed (the log is then incomplete).
  bool close();
  uint64_t entries() const { return n_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  gzFile gz_ = nullptr;
  std::string buf_;
  uint64_t n_ = 0;
  bool failed_ = false;
};

// Calls `each` for every entry of the log at `path`, in order. Returns "" at a
// clean end of the file, else what is wrong (unreadable, truncated or malformed,
// naming the entry).
std::string read_txn_log(const std::string& path, const std::function<void(const TxnLogEntry&)>& each);

}  // namespace txn
