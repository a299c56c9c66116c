// A team of threads that steps through a kernel's whole loop together: the
// calling thread and the workers of XLA's intra-op pool that join it, with a
// barrier (a spin, then a sleep) between the phases of each step. Waking a
// pool worker costs microseconds; a barrier between two running threads
// costs a fraction of one, so a recurrent kernel that owns its whole time
// loop hands off once a sequence instead of twice a step.
//
// Each member holds a CPU of its own while the team runs. A scheduler may
// wake a partner on its waker's CPU and leave it there while another CPU
// idles (a guest kernel that packs threads onto few vCPUs does so by design):
// then every barrier waits for the other thread's time slice. Measured on a
// 2-vCPU VM at B = 8, the LSTM's forward calls took 3 ms at the median and
// 7 ms at the 90th percentile; held apart, 3.3-3.5 (BENCHMARKS.md, "Stalls").
// The cost: another thread that wants a held CPU shares it with the member
// until the call ends.

#ifndef LNORM_NATIVE_TEAM_H_
#define LNORM_NATIVE_TEAM_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <memory>
#include <thread>

#include "xla/ffi/api/ffi.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>
#endif

namespace lnorm {

inline void Pause() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// For the short waits while a team forms and disbands: spin briefly, then
// give the core away.
inline void Relax(int64_t& spins) {
  if (++spins < 200) {
    Pause();
  } else {
    std::this_thread::yield();
  }
}

#if defined(__linux__)
// Sleeps while *word == value (or until woken, or a millisecond).
inline void FutexWait(std::atomic<int32_t>* word, int32_t value) {
  const timespec timeout{0, 1000000};
  syscall(SYS_futex, reinterpret_cast<int32_t*>(word), FUTEX_WAIT_PRIVATE,
          value, &timeout, nullptr, 0);
}
inline void FutexWakeAll(std::atomic<int32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<int32_t*>(word), FUTEX_WAKE_PRIVATE,
          INT_MAX, nullptr, nullptr, 0);
}
#else
inline void FutexWait(std::atomic<int32_t>*, int32_t) { std::this_thread::yield(); }
inline void FutexWakeAll(std::atomic<int32_t>*) {}
#endif

#if defined(__linux__)
// The CPUs this thread may run on, in order.
struct CpuList {
  int cpus[CPU_SETSIZE];
  int n = 0;
  CpuList() {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return;
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) cpus[n++] = c;
    }
  }
  // Index of the CPU this thread is on (0 if unknown).
  int Current() const {
    const int c = sched_getcpu();
    for (int i = 0; i < n; ++i) {
      if (cpus[i] == c) return i;
    }
    return 0;
  }
};

// Holds this thread on one CPU for its lifetime, then restores the thread's
// own affinity (a pool worker keeps whatever it had).
class CpuHold {
 public:
  explicit CpuHold(int cpu) {
    if (sched_getaffinity(0, sizeof old_, &old_) != 0) return;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    held_ = sched_setaffinity(0, sizeof one, &one) == 0;
  }
  ~CpuHold() {
    if (held_) sched_setaffinity(0, sizeof old_, &old_);
  }
  CpuHold(const CpuHold&) = delete;
  CpuHold& operator=(const CpuHold&) = delete;

 private:
  cpu_set_t old_;
  bool held_ = false;
};
#endif

// What a team's barrier shares.
struct Rendezvous {
  std::atomic<int64_t> count{0};
  std::atomic<int32_t> generation{0}, sleepers{0};
};

class Team {
 public:
  Team(int64_t id, int64_t size, Rendezvous* r) : id_(id), size_(size), r_(r) {}

  int64_t id() const { return id_; }
  int64_t size() const { return size_; }

  // [begin, end) of the team's even split of [0, n) for this thread.
  int64_t Begin(int64_t n) const { return id_ * n / size_; }
  int64_t End(int64_t n) const { return (id_ + 1) * n / size_; }

  // Waits until every thread of the team has called it: what each wrote
  // before is visible to all after. A thread that waits long sleeps: when
  // another process's thread (or a spinning idle thread of another pool)
  // has taken a partner's core, a waiter that only spun or yielded would
  // keep its own core busy, and the scheduler would not move the partner
  // there; asleep, it leaves the core to the partner.
  void Sync() {
    if (size_ == 1) return;
    const int32_t g = r_->generation.load();
    if (r_->count.fetch_add(1) == size_ - 1) {
      r_->count.store(0, std::memory_order_relaxed);
      r_->generation.store(g + 1);
      if (r_->sleepers.load() > 0) FutexWakeAll(&r_->generation);
      return;
    }
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::microseconds(50);
    for (int64_t spins = 0; r_->generation.load(std::memory_order_acquire) == g;) {
      if (++spins % 64 != 0 || std::chrono::steady_clock::now() < until) {
        Pause();
        continue;
      }
      r_->sleepers.fetch_add(1);
      if (r_->generation.load() == g) FutexWait(&r_->generation, g);
      r_->sleepers.fetch_sub(1);
    }
  }

 private:
  int64_t id_, size_;
  Rendezvous* r_;
};

// Runs fn(team) on up to `want` threads, at most one per CPU this thread
// may use: this one and the pool workers that join within a millisecond (a
// busy pool may start its tasks late or never; the team then runs smaller,
// down to this thread alone). Member k runs on the k-th CPU after the
// caller's (the caller stays where it is). Returns once every member has
// returned. A task that starts after the team has formed touches only the
// shared state and leaves.
template <typename Fn>
void RunTeam(xla::ffi::ThreadPool& pool, int64_t want, const Fn& fn) {
  want = std::max<int64_t>(1, std::min<int64_t>(want, pool.num_threads()));
#if defined(__linux__)
  const CpuList cpus;
  want = std::min<int64_t>(want, std::max(cpus.n, 1));
#endif
  if (want == 1) {
    Rendezvous rendezvous;
    Team team(0, 1, &rendezvous);
    fn(team);
    return;
  }
  constexpr int64_t kClosed = int64_t{1} << 40;
  struct State {
    std::atomic<int64_t> members{1};  // the caller; kClosed once formed
    std::atomic<int64_t> done{0};
    Rendezvous rendezvous;
  };
  auto st = std::make_shared<State>();
#if defined(__linux__)
  // The CPU of member id: the caller's, then the next ones in the list.
  const int first = cpus.Current();
  const auto cpu_of = [&cpus, first](int64_t id) {
    return cpus.cpus[(first + id) % cpus.n];
  };
  const auto run = [&cpu_of, &fn](Team& team) {
    CpuHold hold(cpu_of(team.id()));
    fn(team);
  };
#else
  const auto& run = fn;
#endif
  for (int64_t i = 1; i < want; ++i) {
    // A task that starts after the team has formed leaves without touching
    // run or fn: only a member (whom the caller waits for) uses them.
    pool.Schedule([st, &run] {
      int64_t s = st->members.load(std::memory_order_acquire);
      do {
        if (s & kClosed) return;  // formed without this thread
      } while (!st->members.compare_exchange_weak(s, s + 1,
                                                  std::memory_order_acq_rel));
      const int64_t id = s;
      int64_t spins = 0;
      while (!((s = st->members.load(std::memory_order_acquire)) & kClosed)) {
        Relax(spins);
      }
      Team team(id, s & (kClosed - 1), &st->rendezvous);
      run(team);
      st->done.fetch_add(1, std::memory_order_release);
    });
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
  int64_t spins = 0;
  while (st->members.load(std::memory_order_acquire) < want &&
         std::chrono::steady_clock::now() < deadline) {
    Relax(spins);
  }
  const int64_t size =
      st->members.fetch_or(kClosed, std::memory_order_acq_rel) & (kClosed - 1);
  Team team(0, size, &st->rendezvous);
  run(team);
  spins = 0;
  while (st->done.load(std::memory_order_acquire) < size - 1) Relax(spins);
}

}  // namespace lnorm

#endif  // LNORM_NATIVE_TEAM_H_
