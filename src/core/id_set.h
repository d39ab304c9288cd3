// An exact set of transaction ids in about one bit per id (IdSet), and a map from them to a small value in about
// sizeof(V) bytes per id (IdMap), for the sets a replica keeps for the whole run (what it
// applied, executed or forgot). A client numbers its transactions (client << 40) | seq with seq counting up from 0
// (src/client/client_node.cc), so the ids of one client are dense: each client's are a bitmap from the first one
// seen. An id far from its client's bitmap (below it, or more than kSpan above) is kept in an ordinary set, so any
// id is held exactly, whatever its form.
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <unordered_map>
#include <vector>

namespace txn {

class IdSet {
 public:
  static constexpr uint64_t kSpan = uint64_t{1} << 24;   // bits one client's bitmap may span (2 MiB at most)

  bool count(uint64_t id) const {
    const auto it = runs_.find(id >> 40);
    if (it != runs_.end()) {
      const Run& r = it->second;
      const uint64_t s = seq(id);
      if (s >= r.base && s - r.base < r.words.size() * 64) return (r.words[(s - r.base) / 64] >> (s - r.base) % 64) & 1;
    }
    return sparse_.count(id) > 0;
  }
  // true when `id` was not in the set
  bool insert(uint64_t id) {
    const uint64_t s = seq(id);
    auto [it, fresh] = runs_.try_emplace(id >> 40);
    Run& r = it->second;
    if (fresh) r.base = s - s % 64;
    if (s < r.base || s - r.base >= kSpan) {   // (never inside the bitmap: it spans kSpan bits at most)
      if (!sparse_.insert(id).second) return false;
      ++size_;
      return true;
    }
    const uint64_t i = s - r.base;
    if (i / 64 >= r.words.size())   // grows by half (amortized), up to kSpan bits
      r.words.resize(std::min<uint64_t>(kSpan / 64, i / 64 + 1 + r.words.size() / 2), 0);
    uint64_t& w = r.words[i / 64];
    const uint64_t bit = uint64_t{1} << i % 64;
    if (w & bit) return false;
    w |= bit;
    ++size_;
    return true;
  }
  void erase(uint64_t id) {
    const auto it = runs_.find(id >> 40);
    if (it != runs_.end()) {
      Run& r = it->second;
      const uint64_t s = seq(id);
      if (s >= r.base && s - r.base < r.words.size() * 64) {
        uint64_t& w = r.words[(s - r.base) / 64];
        const uint64_t bit = uint64_t{1} << (s - r.base) % 64;
        if (w & bit) --size_;
        w &= ~bit;
        return;
      }
    }
    size_ -= sparse_.erase(id);
  }
  void clear() {
    runs_.clear();
    sparse_.clear();
    size_ = 0;
  }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t bytes() const {   // the bitmaps' words and the sparse set's nodes (about 48 bytes each), roughly
    size_t b = sparse_.size() * 48;
    for (const auto& [c, r] : runs_) b += r.words.capacity() * 8 + 32;
    return b;
  }

 private:
  static uint64_t seq(uint64_t id) { return id & ((uint64_t{1} << 40) - 1); }
  struct Run {
    uint64_t base = 0;              // the seq of words[0]'s bit 0
    std::vector<uint64_t> words;
  };
  std::unordered_map<uint64_t, Run> runs_;   // client -> its bitmap
  std::set<uint64_t> sparse_;
  size_t size_ = 0;
};

// Transaction id -> a value of a small type V, V{} meaning "none": one V per sequence number from the first one seen,
// per client; as IdSet, an id far from its client's array is kept in an ordinary map.
template <class V>
class IdMap {
 public:
  static constexpr uint64_t kSpan = uint64_t{1} << 22;   // values one client's array may span

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
  size_t size() const { return size_; }
  size_t bytes() const {
    size_t b = sparse_.size() * 48;
    for (const auto& [c, r] : runs_) b += r.values.capacity() * sizeof(V) + 32;
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

}  // namespace txn
