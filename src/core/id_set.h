// A map from transaction ids to a small value in about sizeof(V) bytes per id (IdMap), and an exact set of them in
// about one bit per id (IdSet, an IdMap of bits), for what a replica keeps for the whole run (what it applied,
// executed or forgot). A client numbers its transactions (client << 40) | seq with seq counting up from 0
// (src/client/client_node.cc), so the ids of one client are dense: each client's are an array from the first one
// seen. An id far from its client's array (below it, or more than kSpan above) is kept in an ordinary map, so any
// id is held exactly, whatever its form.
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace txn {

// Transaction id -> a value of a small type V, V{} meaning "none": one V per sequence number from the first one seen,
// per client; as IdSet, an id far from its client's array is kept in an ordinary map.
template <class V>
class IdMap {
 public:
  // values one client's array may span (2^22 bytes, or 2^24 bits: 2 MiB at most)
  static constexpr uint64_t kSpan = uint64_t{1} << (std::is_same_v<V, bool> ? 24 : 22);

  V get(uint64_t id) const {
    const auto it = runs_.find(id >> 40);
    if (it != runs_.end()) {
      const Run& r = it->second;
      const uint64_t s = seq(id);
      if (s >= r.base && s - r.base < r.values.size()) return r.values[s - r.base];
    }
    const auto sp = sparse_.find(id);
    return sp == sparse_.end() ? V{} : sp->second;
  }
  void set(uint64_t id, V v) {   // V{} erases
    const uint64_t s = seq(id);
    auto [it, fresh] = runs_.try_emplace(id >> 40);
    Run& r = it->second;
    if (fresh) r.base = s;
    if (s < r.base || s - r.base >= kSpan) {
      if (v == V{}) size_ -= sparse_.erase(id);
      else if (sparse_.insert_or_assign(id, v).second) ++size_;
      return;
    }
    const uint64_t i = s - r.base;
    if (i >= r.values.size()) {
      if (v == V{}) return;
      r.values.resize(std::min<uint64_t>(kSpan, i + 1 + r.values.size() / 2), V{});
    }
    if (r.values[i] == V{} && v != V{}) ++size_;
    if (r.values[i] != V{} && v == V{}) --size_;
    r.values[i] = v;
  }
  void clear() {
    runs_.clear();
    sparse_.clear();
    size_ = 0;
  }
  size_t size() const { return size_; }
  size_t bytes() const {   // the arrays (std::vector<bool>: a bit each) and the sparse map's nodes (~48 bytes each)
    size_t b = sparse_.size() * 48;
    for (const auto& [c, r] : runs_)
      b += (std::is_same_v<V, bool> ? (r.values.capacity() + 7) / 8 : r.values.capacity() * sizeof(V)) + 32;
    return b;
  }

 private:
  static uint64_t seq(uint64_t id) { return id & ((uint64_t{1} << 40) - 1); }
  struct Run {
    uint64_t base = 0;
    std::vector<V> values;
  };
  std::unordered_map<uint64_t, Run> runs_;
  std::map<uint64_t, V> sparse_;
  size_t size_ = 0;
};

// The set: an IdMap of bits (std::vector<bool>).
class IdSet {
 public:
  bool count(uint64_t id) const { return ids_.get(id); }
  bool insert(uint64_t id) {   // true when `id` was not in the set
    if (ids_.get(id)) return false;
    ids_.set(id, true);
    return true;
  }
  void erase(uint64_t id) { ids_.set(id, false); }
  void clear() { ids_.clear(); }
  size_t size() const { return ids_.size(); }
  bool empty() const { return ids_.size() == 0; }
  size_t bytes() const { return ids_.bytes(); }

 private:
  IdMap<bool> ids_;
};

}  // namespace txn
