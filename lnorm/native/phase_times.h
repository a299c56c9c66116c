// Where a team kernel's time goes, phase by phase, for developers: built in
// only with LNORM_NATIVE_PHASES=1 (lnorm/native/__init__.py adds
// -DLNORM_PHASE_TIMES), and otherwise empty inline calls. At exit it prints
// to stderr, per kernel: the calls' wall times (percentiles, from which
// stalls show as a long tail) and each phase's mean time per call, for the
// calling thread (member 0) and for the other members together.
//
//   static lnorm::PhaseTimes times("lstm fwd", {"gemm", "wait", ...});
//   lnorm::CallClock call(times);           // one call's wall time
//   lnorm::Laps laps(times, team.id());     // in each member
//   ...; laps.Lap(0); ...; laps.Lap(1);     // phase k ends

#ifndef LNORM_NATIVE_PHASE_TIMES_H_
#define LNORM_NATIVE_PHASE_TIMES_H_

#include <cstdint>
#include <initializer_list>

#ifdef LNORM_PHASE_TIMES
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <vector>
#endif

namespace lnorm {

#ifdef LNORM_PHASE_TIMES

inline double NowUs() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class PhaseTimes {
 public:
  PhaseTimes(const char* name, std::initializer_list<const char*> phases)
      : name_(name), phases_(phases), sums_(2 * phases.size(), 0.0) {}

  ~PhaseTimes() {
    if (calls_.empty()) return;
    std::vector<double> c = calls_;
    std::sort(c.begin(), c.end());
    const auto at = [&c](double q) {
      return c[static_cast<size_t>(q * (c.size() - 1))];
    };
    std::fprintf(stderr,
                 "lnorm phases: %s, %zu calls, wall us p10 %.0f p50 %.0f "
                 "p90 %.0f p99 %.0f max %.0f\n",
                 name_, c.size(), at(0.1), at(0.5), at(0.9), at(0.99),
                 c.back());
    for (size_t k = 0; k < phases_.size(); ++k) {
      std::fprintf(stderr, "  %-18s us/call: caller %8.0f  others %8.0f\n",
                   phases_[k], sums_[k] / c.size(),
                   sums_[phases_.size() + k] / c.size());
    }
  }

  void AddCall(double us) {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back(us);
  }
  void Add(bool caller, const std::vector<double>& laps) {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t off = caller ? 0 : phases_.size();
    for (size_t k = 0; k < laps.size(); ++k) sums_[off + k] += laps[k];
  }
  size_t size() const { return phases_.size(); }

 private:
  const char* name_;
  std::vector<const char*> phases_;
  std::mutex mu_;
  std::vector<double> sums_, calls_;
};

class CallClock {
 public:
  explicit CallClock(PhaseTimes& t) : t_(t), start_(NowUs()) {}
  ~CallClock() { t_.AddCall(NowUs() - start_); }

 private:
  PhaseTimes& t_;
  double start_;
};

// One member's phase times over a call, added to the kernel's at the end.
class Laps {
 public:
  Laps(PhaseTimes& t, int64_t member)
      : t_(t), caller_(member == 0), laps_(t.size(), 0.0), last_(NowUs()) {}
  ~Laps() { t_.Add(caller_, laps_); }
  void Lap(int k) {
    const double now = NowUs();
    laps_[k] += now - last_;
    last_ = now;
  }

 private:
  PhaseTimes& t_;
  bool caller_;
  std::vector<double> laps_;
  double last_;
};

#else  // !LNORM_PHASE_TIMES: nothing recorded, nothing kept.

class PhaseTimes {
 public:
  PhaseTimes(const char*, std::initializer_list<const char*>) {}
};
class CallClock {
 public:
  explicit CallClock(PhaseTimes&) {}
};
class Laps {
 public:
  Laps(PhaseTimes&, int64_t) {}
  void Lap(int) {}
};

#endif

}  // namespace lnorm

#endif  // LNORM_NATIVE_PHASE_TIMES_H_
