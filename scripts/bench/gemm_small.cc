// The recurrent kernels' small-row gemm (lnorm/native/gemm.h) alone, on one
// thread: C (M x N) = A (M x K) @ W (K x N), W packed once. Prints the best
// of 5 rounds of 200 products, and beside it the core's peak: the same
// multiply-adds (gemm.h's vector width) as independent chains that never
// leave the registers, the bound no product of these shapes can pass.
//
//   g++ -O3 -march=native -std=c++17 scripts/bench/gemm_small.cc -o /tmp/gemm_small
//   /tmp/gemm_small 8 400 1600      # the LSTM's forward product at B=8
//   /tmp/gemm_small 8 1600 400      # its backward product
//
// -march=haswell instead builds the AVX2 version on an AVX-512 host.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../../lnorm/native/gemm.h"

// Multiply-adds a second from kChains chains of n steps each, in registers.
double PeakFlops() {
  constexpr int kChains = 10;  // enough to cover the FMA units' latency
  double best = 0;
  for (int round = 0; round < 5; ++round) {
    lnorm::fw acc[kChains];
    for (int i = 0; i < kChains; ++i) acc[i] = lnorm::fw{} + 0.01f * i;
    const lnorm::fw m = lnorm::fw{} + 0.999f, b = lnorm::fw{} + 0.001f;
    const int64_t n = 20000000;
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t k = 0; k < n; ++k) {
      for (int i = 0; i < kChains; ++i) acc[i] = acc[i] * m + b;
    }
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    float sink = 0;
    for (int i = 0; i < kChains; ++i) sink += acc[i][0];
    if (sink == 12345.0f) std::printf(" ");  // keeps the chains live
    best = std::max(best, 2.0 * lnorm::kLanes * kChains * n / dt.count());
  }
  return best;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: gemm_small M K N\n");
    return 2;
  }
  const int64_t M = std::atoll(argv[1]), K = std::atoll(argv[2]),
                N = std::atoll(argv[3]);
  if (M <= 0 || K <= 0 || N <= 0) {
    std::fprintf(stderr, "gemm_small: M, K and N must be positive\n");
    return 2;
  }
  std::vector<float> w(K * N), a(M * K), c(M * N), packed(lnorm::PackedSize(K, N));
  std::srand(0);
  for (auto& x : w) x = std::rand() / static_cast<float>(RAND_MAX) - 0.5f;
  for (auto& x : a) x = std::rand() / static_cast<float>(RAND_MAX) - 0.5f;
  const int64_t P = lnorm::Panels(N);
  lnorm::Pack(w.data(), K, N, N, packed.data(), 0, K);
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int s = 0; s < 200; ++s) {
      lnorm::GemmPanels(a.data(), M, K, K, packed.data(), N, c.data(), N, 0, P);
    }
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    best = std::min(best, dt.count() / 200);
  }
  std::printf("%ld lanes, M=%ld K=%ld N=%ld: %.1f us a product, %.0f GFLOP/s (1 thread)\n",
              static_cast<long>(lnorm::kLanes), static_cast<long>(M),
              static_cast<long>(K), static_cast<long>(N), best * 1e6,
              2.0 * M * K * N / best / 1e9);
  const double peak = PeakFlops();
  std::printf("the core's peak, FMA chains in registers: %.0f GFLOP/s; the product: %.0f%% of it\n",
              peak / 1e9, 100.0 * 2.0 * M * K * N / best / peak);
  return 0;
}
