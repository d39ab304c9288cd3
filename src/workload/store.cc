#include "workload/store.h"

#include <cinttypes>
#include <cstdio>
#include <sstream>

namespace txn::wl {

std::string Fnv::hex() const {
  char b[17];
  std::snprintf(b, sizeof b, "%016" PRIx64, h);
  return b;
}

int64_t get_int(const Vars& v, const char* name) {
  auto it = v.find(name);
  if (it == v.end()) throw BadMessage(std::string("missing variable '") + name + "'");
  if (it->second.v_case() != Value::kI) throw BadMessage(std::string("variable '") + name + "' is not an integer");
  return it->second.i();
}

std::string get_str(const Vars& v, const char* name) {
  auto it = v.find(name);
  if (it == v.end()) throw BadMessage(std::string("missing variable '") + name + "'");
  if (it->second.v_case() != Value::kS) throw BadMessage(std::string("variable '") + name + "' is not a string");
  return it->second.s();
}

std::string money(int64_t cents) {
  char b[32];
  std::snprintf(b, sizeof b, "%s%" PRId64 ".%02" PRId64, cents < 0 ? "-" : "",
                (cents < 0 ? -cents : cents) / 100, (cents < 0 ? -cents : cents) % 100);
  return b;
}

// ---- TPC-C ---------------------------------------------------------------------------

std::string TpccStore::digest() const {
  Fnv f;
  f.s(w_name); f.i(w_tax_bp); f.i(w_ytd);
  for (const auto& d : district) { f.s(d.name); f.i(d.tax_bp); f.i(d.next_o_id); f.i(d.ytd); }
  for (const auto& c : customer) {
    f.i(c.last); f.i(c.bad_credit); f.i(c.discount_bp); f.i(c.balance); f.i(c.ytd_payment);
    f.i(c.payment_cnt); f.i(c.delivery_cnt); f.i(c.last_o_id);
  }
  // HISTORY has no key and no order (TPC-C 1.3): hash it as a multiset, so
  // replicas that appended the same rows in different orders agree.
  uint64_t rows = 0;
  for (const auto& h : history) {
    Fnv r;
    r.i(h.c_id); r.i(h.c_d); r.i(h.c_w); r.i(h.d); r.i(h.amount); r.s(h.data);
    rows += r.h;
  }
  f.i(static_cast<int64_t>(history.size()));
  f.i(static_cast<int64_t>(rows));
  f.i(static_cast<int64_t>(order.size()));
  for (const auto& [k, o] : order) { f.i(k.first); f.i(k.second); f.i(o.c_id); f.i(o.carrier); f.i(o.ol_cnt); f.i(o.all_local); }
  f.i(static_cast<int64_t>(new_order.size()));
  for (const auto& [k, _] : new_order) { f.i(k.first); f.i(k.second); }
  f.i(static_cast<int64_t>(order_line.size()));
  for (const auto& [k, l] : order_line) {
    for (auto x : k) f.i(x);
    f.i(l.i_id); f.i(l.supply_w); f.i(l.qty); f.i(l.amount); f.i(l.delivered);
  }
  for (auto p : item_price) f.i(p);
  for (const auto& s : stock) { f.i(s.quantity); f.i(s.ytd); f.i(s.order_cnt); f.i(s.remote_cnt); }
  return f.hex();
}

std::vector<DistrictAgg> TpccStore::aggregates() const {
  std::vector<DistrictAgg> out;
  for (int32_t d = 0; d < static_cast<int32_t>(district.size()); ++d) {
    DistrictAgg a{d, district[d].ytd, district[d].next_o_id, 0, 0, 0, 0, 0, 0};
    auto lo = order.lower_bound({d, 0}), hi = order.lower_bound({d + 1, 0});
    for (auto it = lo; it != hi; ++it) { a.max_o_id = it->first.second; a.sum_ol_cnt += it->second.ol_cnt; }
    auto nlo = new_order.lower_bound({d, 0}), nhi = new_order.lower_bound({d + 1, 0});
    for (auto it = nlo; it != nhi; ++it) {
      if (a.no_count++ == 0) a.min_no_o_id = it->first.second;
      a.max_no_o_id = it->first.second;
    }
    if (a.no_count == 0) {   // empty NEW-ORDER: report an empty range so 3.3.2.3 holds vacuously
      a.min_no_o_id = a.d_next_o_id;
      a.max_no_o_id = a.d_next_o_id - 1;
    }
    auto llo = order_line.lower_bound({d, 0, 0}), lhi = order_line.lower_bound({d + 1, 0, 0});
    for (auto it = llo; it != lhi; ++it) ++a.ol_count;
    out.push_back(a);
  }
  return out;
}

std::string TpccStore::dump_json() const {
  std::ostringstream o;
  o << "{\"shard\": " << shard << ", \"workload\": \"tpcc\", \"digest\": \"" << digest() << "\", "
    << "\"rows\": {\"warehouse\": 1, \"district\": " << district.size()
    << ", \"customer\": " << customer.size() << ", \"history\": " << history.size()
    << ", \"order\": " << order.size() << ", \"new_order\": " << new_order.size()
    << ", \"order_line\": " << order_line.size() << ", \"item\": " << item_price.size()
    << ", \"stock\": " << stock.size() << "}, \"executed_pieces\": " << executed
    << ", \"tpcc\": {\"warehouses\": [{\"w_id\": " << shard << ", \"w_ytd\": " << money(w_ytd)
    << ", \"districts\": [";
  bool first = true;
  for (const auto& a : aggregates()) {
    o << (first ? "" : ", ") << "{\"d_id\": " << a.d_id << ", \"d_ytd\": " << money(a.d_ytd)
      << ", \"d_next_o_id\": " << a.d_next_o_id << ", \"max_o_id\": " << a.max_o_id
      << ", \"max_no_o_id\": " << a.max_no_o_id << ", \"min_no_o_id\": " << a.min_no_o_id
      << ", \"no_count\": " << a.no_count << ", \"sum_ol_cnt\": " << a.sum_ol_cnt
      << ", \"ol_count\": " << a.ol_count << "}";
    first = false;
  }
  o << "]}]}}";
  return o.str();
}

// ---- TPC-A ---------------------------------------------------------------------------

int64_t TpcaTable::sum() const {
  int64_t s = 0;
  for (const auto& [_, b] : balance) s += b;
  return s;
}

std::string TpcaStore::digest() const {
  Fnv f;
  for (const auto& t : table) {
    f.i(static_cast<int64_t>(t.balance.size()));
    for (const auto& [k, b] : t.balance) { f.i(k); f.i(b); }
  }
  return f.hex();
}

std::string TpcaStore::dump_json() const {
  std::ostringstream o;
  o << "{\"shard\": " << shard << ", \"workload\": \"tpca\", \"digest\": \"" << digest()
    << "\", \"rows\": {";
  for (int i = 0; i < 3; ++i) o << (i ? ", " : "") << "\"" << kTables[i] << "\": " << table[i].balance.size();
  o << "}, \"executed_pieces\": " << executed << ", \"tpca\": {\"tables\": {";
  for (int i = 0; i < 3; ++i) {
    const auto& t = table[i];
    o << (i ? ", " : "") << "\"" << kTables[i] << "\": {\"sum\": " << t.sum()
      << ", \"initial_sum\": " << t.initial_sum << ", \"applied_delta\": " << t.applied_delta
      << ", \"applied_count\": " << t.applied_count << "}";
  }
  o << "}}}";
  return o.str();
}

}  // namespace txn::wl
