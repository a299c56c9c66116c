// Row loops shared by the recurrent kernels (lstm_cpu.cc, gru_cpu.cc):
// passes over a row of n floats in vectors of kRowLanes (fr, vec.h) with a
// padded tail, and the split of a step's rows among XLA's intra-op threads.

#ifndef LNORM_NATIVE_ROWS_H_
#define LNORM_NATIVE_ROWS_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <type_traits>

#include "vec.h"
#include "xla/ffi/api/ffi.h"

namespace lnorm {

constexpr int64_t kL = kRowLanes;

// Stores the first n - j lanes of v at p + j (all when they fit).
inline void StoreN(float* p, int64_t j, int64_t n, fr v) {
  if (j + kL <= n) {
    Store(p + j, v);
    return;
  }
  float tmp[kL];
  Store(tmp, v);
  for (int64_t k = 0; j + k < n; ++k) p[j + k] = tmp[k];
}

// body(j, full) for the vectors starting at j < n, where full is
// std::true_type for whole vectors and std::false_type for the tail, so
// that Ld and St resolve to plain loads and stores in the main loop.
template <typename Body>
inline void ForRow(int64_t n, const Body& body) {
  int64_t j = 0;
  for (; j + kL <= n; j += kL) body(j, std::true_type{});
  if (j < n) body(j, std::false_type{});
}

// out[j] = fn(j) for the vector starting at j, for j < n; the tail
// goes through a padded temporary.
template <typename Fn>
inline void Map(float* out, int64_t n, const Fn& fn) {
  int64_t j = 0;
  for (; j + kL <= n; j += kL) Store(out + j, fn(j));
  if (j < n) StoreN(out, j, n, fn(j));
}

// Loads kL floats at p + j, reading past n only into the temporary.
inline fr LoadN(const float* p, int64_t j, int64_t n) {
  if (j + kL <= n) return Load<fr>(p + j);
  float tmp[kL] = {};
  for (int64_t k = 0; j + k < n; ++k) tmp[k] = p[j + k];
  return Load<fr>(tmp);
}

template <bool kFull>
inline fr Ld(const float* p, int64_t j, int64_t n) {
  if constexpr (kFull) {
    return Load<fr>(p + j);
  } else {
    return LoadN(p, j, n);
  }
}

template <bool kFull>
inline void St(float* p, int64_t j, int64_t n, fr v) {
  if constexpr (kFull) {
    Store(p + j, v);
  } else {
    StoreN(p, j, n, v);
  }
}

// sum_j fn(j) over the row's vectors (tails zero-padded by LoadN).
template <typename Fn>
inline float SumOf(int64_t n, const Fn& fn) {
  fr s{};
  for (int64_t j = 0; j < n; j += kL) s += fn(j);
  return lnorm::Sum(s);
}

// Below this many elements per step (B * H) the rows run on the calling
// thread: a step's work must outweigh waking a worker (microseconds).
constexpr int64_t kMinParallelWork = 1024;

// fn(b0, b1, slot) over the rows [0, B) in contiguous chunks, one per
// thread of XLA's intra-op pool (at most B), which the calling thread and
// the pool's workers claim in turn; slot is the chunk's index, so each chunk
// can pool sums into a row of its own. The pool may run tasks late or on
// this thread: the caller waits only for chunks a worker has claimed, and a
// task that starts after every chunk is claimed touches nothing but the
// shared counters.
template <typename Fn>
void ForRows(xla::ffi::ThreadPool& pool, int64_t B, int64_t H, const Fn& fn) {
  const int64_t n = B * H < kMinParallelWork
                        ? 1
                        : std::min<int64_t>(B, pool.num_threads());
  if (n <= 1) {
    fn(0, B, 0);
    return;
  }
  struct Counters {
    std::atomic<int64_t> next{0}, done{0};
  };
  auto counters = std::make_shared<Counters>();
  auto run = [counters, n, B, &fn] {
    for (int64_t k; (k = counters->next.fetch_add(1)) < n;) {
      fn(k * B / n, (k + 1) * B / n, k);
      counters->done.fetch_add(1, std::memory_order_release);
    }
  };
  for (int64_t i = 1; i < n; ++i) pool.Schedule(decltype(run)(run));
  run();
  while (counters->done.load(std::memory_order_acquire) < n) {
    std::this_thread::yield();
  }
}

}  // namespace lnorm

#endif  // LNORM_NATIVE_ROWS_H_
