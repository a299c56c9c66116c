// A team of threads that steps through a kernel's whole loop together: the
// calling thread and the workers of XLA's intra-op pool that join it, with a
// barrier (a spin, then a sleep) between the phases of each step. Waking a
// pool worker costs microseconds; a barrier between two running threads
// costs a fraction of one, so a recurrent kernel that owns its whole time
// loop hands off once a sequence instead of twice a step.

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

// Runs fn(team) on up to `want` threads: this one and the pool workers that
// join within a millisecond (a busy pool may start its tasks late or never;
// the team then runs smaller, down to this thread alone). Returns once every
// member has returned. A task that starts after the team has formed touches
// only the shared state and leaves.
template <typename Fn>
void RunTeam(xla::ffi::ThreadPool& pool, int64_t want, const Fn& fn) {
  want = std::max<int64_t>(1, std::min<int64_t>(want, pool.num_threads()));
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
  for (int64_t i = 1; i < want; ++i) {
    pool.Schedule([st, &fn] {
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
      fn(team);
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
  fn(team);
  spins = 0;
  while (st->done.load(std::memory_order_acquire) < size - 1) Relax(spins);
}

}  // namespace lnorm

#endif  // LNORM_NATIVE_TEAM_H_
