#include "client/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace txn {

double percentile_nearest_rank(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) throw std::invalid_argument("percentile of an empty sample");
  if (!(p > 0 && p <= 100)) throw std::invalid_argument("percentile p must be in (0, 100]");
  double n = static_cast<double>(sorted.size());
  // Small epsilon so that e.g. 99.9/100*1000 does not round up past the exact rank.
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * n - 1e-9));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

namespace {

struct Acc {
  ClassSummary s;
  std::vector<double> lat_ms;
  void finish() {
    if (lat_ms.empty()) return;
    std::sort(lat_ms.begin(), lat_ms.end());
    s.p50_ms = percentile_nearest_rank(lat_ms, 50);
    s.p90_ms = percentile_nearest_rank(lat_ms, 90);
    s.p95_ms = percentile_nearest_rank(lat_ms, 95);
    s.p99_ms = percentile_nearest_rank(lat_ms, 99);
    s.p999_ms = percentile_nearest_rank(lat_ms, 99.9);
    double sum = 0;
    for (double v : lat_ms) sum += v;
    s.mean_ms = sum / lat_ms.size();
  }
};

std::string class_json(const ClassSummary& c) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"committed\": %llu, \"given_up\": %llu, \"abandoned\": %llu, \"attempts\": %llu, \"p50_ms\": %.3f, "
                "\"p90_ms\": %.3f, \"p95_ms\": %.3f, \"p99_ms\": %.3f, \"p999_ms\": %.3f, "
                "\"mean_ms\": %.3f}",
                (unsigned long long)c.committed, (unsigned long long)c.given_up,
                (unsigned long long)c.abandoned, (unsigned long long)c.attempts, c.p50_ms, c.p90_ms, c.p95_ms, c.p99_ms, c.p999_ms,
                c.mean_ms);
  return buf;
}

}  // namespace

Summary summarize(const std::vector<TxnRecord>& recs, double duration_s, double warmup_s,
                  double cooldown_s) {
  Summary out;
  out.window_start_s = warmup_s;
  out.window_end_s = duration_s - cooldown_s;
  const TimeUs ws = static_cast<TimeUs>(std::llround(warmup_s * 1e6));
  const TimeUs we = static_cast<TimeUs>(std::llround((duration_s - cooldown_s) * 1e6));
  Acc irt, crt, all;
  uint64_t window_commits = 0;
  for (const auto& r : recs) {
    TimeUs end = r.start_us + r.latency_us;
    if (r.committed && end >= ws && end <= we) ++window_commits;
    if (r.start_us < ws || r.start_us > we) continue;
    for (Acc* a : {r.crt ? &crt : &irt, &all}) {
      a->s.attempts += r.attempts;
      if (r.committed) {
        ++a->s.committed;
        a->lat_ms.push_back(r.latency_us / 1000.0);
      } else if (r.abandoned) {
        ++a->s.abandoned;
      } else {
        ++a->s.given_up;
      }
    }
    // an abandoned transaction's last attempt has no outcome: only its earlier ones aborted
    out.aborted_attempts += r.committed || r.abandoned ? (r.attempts > 0 ? r.attempts - 1 : 0) : r.attempts;
  }
  irt.finish();
  crt.finish();
  all.finish();
  out.irt = irt.s;
  out.crt = crt.s;
  out.all = all.s;
  double len = out.window_end_s - out.window_start_s;
  out.throughput_tps = len > 0 ? window_commits / len : 0;
  return out;
}

std::string summary_json(const Summary& s) {
  std::ostringstream o;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "{\"window_start_s\": %.3f, \"window_end_s\": %.3f, \"throughput_tps\": %.3f, "
                "\"aborted_attempts\": %llu, ",
                s.window_start_s, s.window_end_s, s.throughput_tps,
                (unsigned long long)s.aborted_attempts);
  o << buf << "\"irt\": " << class_json(s.irt) << ", \"crt\": " << class_json(s.crt)
    << ", \"all\": " << class_json(s.all) << "}";
  return o.str();
}

std::string records_csv(const std::vector<TxnRecord>& recs,
                        const std::vector<std::string>& type_names) {
  std::ostringstream o;
  o << "txn_id,type,type_name,class,start_us,latency_us,attempts,status,outputs,session,sent_us\n";
  for (const auto& r : recs) {
    std::string tn = r.type < type_names.size() ? type_names[r.type] : std::to_string(r.type);
    o << r.txn_id << ',' << r.type << ',' << tn << ',' << (r.crt ? "CRT" : "IRT") << ','
      << r.start_us << ',' << r.latency_us << ',' << r.attempts << ','
      << (r.committed ? "committed" : r.abandoned ? "abandoned" : "given_up") << ',' << r.outputs << ',' << r.session << ',' << r.sent_us
      << '\n';
  }
  return o.str();
}

}  // namespace txn
