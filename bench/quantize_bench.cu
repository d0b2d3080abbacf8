// quantize_bench.cu — throughput of the fused quantizers (kernels/cuda/quantize/quantize.cuh) against a
// device-to-device copy measured in the same run.
//
// Usage: fp4lab_bench_quantize [rows cols [batches]]     (default 8192 8192 25)
//        fp4lab_bench_quantize --profile                  (two calls only, for a profiler: e2m1 RN,
//                                                          row copy, then both copies)
//
// For each preset, RN and SR, with and without the RHT, the row copy alone and both copies fused,
// for the published NVFP4 recipes' quantizers beside nvfp4's alike, and for the SR copies keyed
// by source rows (an MoE expert's group) beside the same copies unkeyed, and for the §5 presets
// through the recipe options' span kernels beside their fused kernels, it times quantize_fused
// with CUDA events around a batch of 10 back-to-back calls (after a warm-up), takes the median
// over the batches, and reports the bytes the kernels really move per second: x read once (twice
// when the amax pass runs, for e4m3x2), each copy's dequantized bf16 and fp32 block scales written
// (codes are not asked for, as in training, except in the row that says so). The copy's bytes
// count read + written too. Prints Markdown tables.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/quantize.h"  // scale_grid
#include "kernels/cuda/quantize/quantize.cuh"
#include "kernels/cuda/quantize/quantize_recipes.cuh"  // the span path, timed on the §5 presets
#include "tests/quant_presets.h"  // the presets, shared with the quantizer tests

namespace {

using namespace fp4;

// Gaussian bf16 input (Box–Muller on Philox words; the values need not be bit-reproducible here).
__global__ void fill_gaussian(bf16_t* x, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const Philox4 w = philox4x32_10(static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), 0, 0,
                                    static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
    const float u1 = (static_cast<float>(w.w[0] >> 8) + 1.0f) * (1.0f / 16777216.0f);
    const float u2 = static_cast<float>(w.w[1] >> 8) * (1.0f / 16777216.0f);
    x[i] = float_to_bf16(sqrtf(-2.0f * logf(u1)) * cosf(6.28318531f * u2));
  }
}

using Preset = fp4::test::QuantPreset;
constexpr const auto& kPresets = fp4::test::kSection5Presets;

QuantSpec make_spec(const Preset& p, BlockAlong along, bool rht, Rounding rounding, bool tile_2d) {
  QuantSpec s = fp4::test::preset_spec(p);
  s.tile_2d = tile_2d;
  s.along = along;
  s.rht = rht;
  s.rounding = rounding;
  s.seed = 42;
  s.stream = philox_stream(1, along == BlockAlong::row ? Gemm::dgrad : Gemm::wgrad, Operand::dy, 0);
  return s;
}

// Median over `batches` of the mean time of one call in a batch of 10 back-to-back calls, in µs.
template <class F>
double time_us(F&& call, int batches, cudaStream_t stream) {
  constexpr int kPerBatch = 10;
  for (int i = 0; i < 3; ++i) call();
  cudaEvent_t start, stop;
  FP4_CUDA_CHECK(cudaEventCreate(&start));
  FP4_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> t;
  for (int b = 0; b < batches; ++b) {
    FP4_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < kPerBatch; ++i) call();
    FP4_CUDA_CHECK(cudaEventRecord(stop, stream));
    FP4_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    FP4_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    t.push_back(1000.0 * ms / kPerBatch);
  }
  FP4_CUDA_CHECK(cudaEventDestroy(start));
  FP4_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Buffers {
  bf16_t* dequant = nullptr;
  uint8_t* codes = nullptr;
  float* scales = nullptr;
  float* scalars = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    const bool profile = argc >= 2 && std::string(argv[1]) == "--profile";
    if (profile) argc = 1;
    const int rows = argc >= 3 ? std::atoi(argv[1]) : 8192;
    const int cols = argc >= 3 ? std::atoi(argv[2]) : 8192;
    const int batches = argc >= 4 ? std::atoi(argv[3]) : 25;
    const size_t n = static_cast<size_t>(rows) * cols;

    cudaDeviceProp prop{};
    FP4_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s, %d SMs, %.0f MiB\n", prop.name, prop.multiProcessorCount,
                static_cast<double>(prop.totalGlobalMem) / (1 << 20));
    std::printf("tensor: %d x %d bf16 (%.1f M elements), median of %d batches of 10 calls\n\n", rows, cols,
                static_cast<double>(n) / 1e6, batches);

    cudaStream_t stream;
    FP4_CUDA_CHECK(cudaStreamCreate(&stream));
    bf16_t *x = nullptr, *copy_dst = nullptr;
    unsigned* flag = nullptr;
    FP4_CUDA_CHECK(cudaMalloc(&x, n * sizeof(bf16_t)));
    FP4_CUDA_CHECK(cudaMalloc(&copy_dst, n * sizeof(bf16_t)));
    FP4_CUDA_CHECK(cudaMalloc(&flag, sizeof(unsigned)));
    FP4_CUDA_CHECK(cudaMemset(flag, 0, sizeof(unsigned)));
    fill_gaussian<<<4 * prop.multiProcessorCount, 256, 0, stream>>>(x, n, 12345);
    FP4_CUDA_CHECK(cudaGetLastError());
    Buffers out[2];
    for (Buffers& b : out) {
      FP4_CUDA_CHECK(cudaMalloc(&b.dequant, n * sizeof(bf16_t)));
      FP4_CUDA_CHECK(cudaMalloc(&b.codes, n));
      FP4_CUDA_CHECK(cudaMalloc(&b.scales, n / 16 * sizeof(float)));
      FP4_CUDA_CHECK(cudaMalloc(&b.scalars, 2 * sizeof(float)));
    }

    cuda::Workspace ws;
    if (profile) {
      const QuantSpec rs = make_spec(kPresets[0], BlockAlong::row, false, Rounding::rn, false);
      const QuantSpec cs = make_spec(kPresets[0], BlockAlong::column, false, Rounding::rn, false);
      cuda::CopyOut ro, co;
      ro.spec = rs;
      ro.dequant = out[0].dequant;
      ro.scales = out[0].scales;
      co.spec = cs;
      co.dequant = out[1].dequant;
      co.scales = out[1].scales;
      cuda::quantize_fused(x, rows, cols, &ro, nullptr, flag, ws, stream);
      cuda::quantize_fused(x, rows, cols, &ro, &co, flag, ws, stream);
      FP4_CUDA_CHECK(cudaStreamSynchronize(stream));
      std::printf("profile calls done\n");
      return 0;
    }

    const double copy_us = time_us(
        [&] { FP4_CUDA_CHECK(cudaMemcpyAsync(copy_dst, x, n * sizeof(bf16_t), cudaMemcpyDeviceToDevice, stream)); },
        batches, stream);
    const double copy_gbs = 2.0 * n * sizeof(bf16_t) / (copy_us * 1e3);
    std::printf("cudaMemcpy device to device: %.1f us, %.0f GB/s (read + written)\n\n", copy_us, copy_gbs);

    std::printf("| preset | copies | rounding | RHT | time (us) | GB/s | of copy | time vs RN, no RHT |\n");
    std::printf("|---|---|---|---|---:|---:|---:|---:|\n");
    struct Extra {
      bool tile_2d, codes;
      const char* note;
    };
    // The median time of quantize_fused with the row copy (and the column copy when `both`), into
    // out[0] and out[1].
    // span_path: the same copies by quantize_recipes.cu's kernels (the span kernels for 1D blocks),
    // which quantize_fused takes only for docs/recipes.md's options.
    const auto time_fused = [&](const QuantSpec& rs, const QuantSpec& cs, bool both, bool codes,
                                const int32_t* source_rows = nullptr, bool span_path = false) {
      cuda::CopyOut c[2];
      c[0].spec = rs;
      c[1].spec = cs;
      for (int i = 0; i < 2; ++i) {
        c[i].dequant = out[i].dequant;
        c[i].codes = codes ? out[i].codes : nullptr;
        c[i].scales = out[i].scales;
        c[i].tensor_scale = out[i].scalars;
      }
      return time_us(
          [&] {
            if (span_path)
              cuda::detail::quantize_recipe_copies(x, rows, cols, &c[0], both ? &c[1] : nullptr, flag, source_rows,
                                                   ws, stream);
            else
              cuda::quantize_fused(x, rows, cols, &c[0], both ? &c[1] : nullptr, flag, ws, stream, source_rows);
          },
          batches, stream);
    };
    auto run = [&](const Preset& p, bool both, Rounding rounding, bool rht, Extra extra, double base_us) {
      const QuantSpec rs = make_spec(p, BlockAlong::row, rht, rounding, extra.tile_2d);
      const QuantSpec cs = make_spec(p, BlockAlong::column, rht, rounding, extra.tile_2d);
      const double us = time_fused(rs, cs, both, extra.codes);
      // Bytes the kernels move: x once (twice with the amax pass), per copy the dequantized values,
      // the block scales (and the codes when asked for).
      const int copies = both ? 2 : 1;
      const double reads = (p.scale == ScaleMode::e4m3x2 ? 2.0 : 1.0) * n * sizeof(bf16_t);
      double writes = 0.0;
      for (int i = 0; i < copies; ++i) {
        const cpu::ScaleGrid g = cpu::scale_grid(rows, cols, i == 0 ? rs : cs);
        writes += n * sizeof(bf16_t) + static_cast<double>(g.rows) * g.cols * sizeof(float) + (extra.codes ? n : 0);
      }
      const double gbs = (reads + writes) / (us * 1e3);
      std::printf("| %s%s | %s | %s | %s | %.1f | %.0f | %.1f%% | %s |\n", p.name, extra.note,
                  both ? "row + column" : "row", rounding == Rounding::sr ? "SR" : "RN", rht ? "on" : "off", us, gbs,
                  100.0 * gbs / copy_gbs, base_us > 0 ? (std::to_string(us / base_us).substr(0, 4) + "x").c_str() : "1.00x");
      std::fflush(stdout);
      return us;
    };
    double fused_base[std::size(kPresets)] = {};
    for (size_t i = 0; i < std::size(kPresets); ++i)
      for (bool both : {false, true}) {
        const Preset& p = kPresets[i];
        const double base = run(p, both, Rounding::rn, false, {false, false, ""}, 0.0);
        if (both) fused_base[i] = base;
        run(p, both, Rounding::rn, true, {false, false, ""}, base);
        run(p, both, Rounding::sr, false, {false, false, ""}, base);
        run(p, both, Rounding::sr, true, {false, false, ""}, base);
      }
    // Variants: nvfp4's weight tiles, and asking for the codes too (probes, tests).
    run(kPresets[2], true, Rounding::rn, false, {true, false, " (16x16 W tiles)"}, fused_base[2]);
    run(kPresets[2], true, Rounding::rn, false, {false, true, " (+ codes)"}, fused_base[2]);
    run(kPresets[0], true, Rounding::rn, false, {false, true, " (+ codes)"}, fused_base[0]);

    // The published NVFP4 recipes' quantizers (docs/recipes.md) beside nvfp4's with the same
    // copies, rounding and RHT: nvfp4 is the fastest existing quantizer of their scale format
    // (e4m3x2), the reference of issue 34's 1.3x goal.
    struct Option {
      const char* name;
      Rounding rounding;
      bool rht;
      void (*apply)(QuantSpec&);
    };
    const Option options[] = {
        {"four-over-six", Rounding::rn, false, [](QuantSpec& s) { s.four_over_six = true; }},
        {"four-over-six", Rounding::rn, true, [](QuantSpec& s) { s.four_over_six = true; }},
        {"double-block (TetraJet-v2)", Rounding::rn, false, [](QuantSpec& s) { s.outer_block = kOuterBlock; }},
        {"double-block (TetraJet-v2)", Rounding::sr, true, [](QuantSpec& s) { s.outer_block = kOuterBlock; }},
        {"MS-EDEN (Quartet II), RHT 128", Rounding::rn, true, [](QuantSpec& s) {
           s.ms_eden = true;
           s.rht_size = kRhtWideSize;
         }},
    };
    std::printf("\n| quantizer | copies | rounding | RHT | time (us) | nvfp4 alike (us) | time vs nvfp4 |\n");
    std::printf("|---|---|---|---|---:|---:|---:|\n");
    const Preset& nvfp4 = kPresets[2];
    for (const Option& o : options)
      for (bool both : {false, true}) {
        QuantSpec rs = make_spec(nvfp4, BlockAlong::row, o.rht, o.rounding, false);
        QuantSpec cs = make_spec(nvfp4, BlockAlong::column, o.rht, o.rounding, false);
        const double alike_us = time_fused(rs, cs, both, false);
        o.apply(rs);
        o.apply(cs);
        double us = 0.0;
        try {
          us = time_fused(rs, cs, both, false);
        } catch (const std::invalid_argument& e) {  // a combination the quantizer refuses: say so, go on
          std::printf("| %s | %s | refused: %s | | | | |\n", o.name, both ? "row + column" : "row", e.what());
          continue;
        }
        std::printf("| %s | %s | %s | %s | %.1f | %.1f | %.2fx |\n", o.name, both ? "row + column" : "row",
                    o.rounding == Rounding::sr ? "SR" : "RN", o.rht ? "on" : "off", us, alike_us, us / alike_us);
        std::fflush(stdout);
      }

    // The span path on the §5 presets, beside their fused kernels on the same specs: how much of a
    // recipe option's time above is the span kernels' own (reads, stores, the generic per-element
    // code of numerics.h) rather than the option's arithmetic.
    std::printf("\n| preset | copies | rounding | RHT | span path (us) | fused (us) | span vs fused |\n");
    std::printf("|---|---|---|---|---:|---:|---:|\n");
    for (size_t i = 0; i < std::size(kPresets); ++i)
      for (bool both : {false, true})
        for (Rounding rounding : {Rounding::rn, Rounding::sr}) {
          const Preset& p = kPresets[i];
          const QuantSpec rs = make_spec(p, BlockAlong::row, true, rounding, false);
          const QuantSpec cs = make_spec(p, BlockAlong::column, true, rounding, false);
          const double fused_us = time_fused(rs, cs, both, false);
          const double span_us = time_fused(rs, cs, both, false, nullptr, true);
          std::printf("| %s | %s | %s | on | %.1f | %.1f | %.2fx |\n", p.name, both ? "row + column" : "row",
                      rounding == Rounding::sr ? "SR" : "RN", span_us, fused_us, span_us / fused_us);
          std::fflush(stdout);
        }

    // The SR copies of an MoE expert's group of tokens, whose draws are keyed by the rows of the
    // source tensor (quantize_fused's source_rows: here the rows in reverse order), beside the same
    // copies of a dense tensor.
    {
      std::vector<int32_t> host_rows(rows);
      for (int r = 0; r < rows; ++r) host_rows[r] = rows - 1 - r;
      int32_t* source_rows = nullptr;
      FP4_CUDA_CHECK(cudaMalloc(&source_rows, host_rows.size() * sizeof(int32_t)));
      FP4_CUDA_CHECK(cudaMemcpy(source_rows, host_rows.data(), host_rows.size() * sizeof(int32_t),
                                cudaMemcpyHostToDevice));
      std::printf("\n| preset | copies | rounding | RHT | keyed by source rows (us) | dense (us) | keyed vs dense |\n");
      std::printf("|---|---|---|---|---:|---:|---:|\n");
      for (size_t i = 0; i < std::size(kPresets); ++i)
        for (bool rht : {false, true}) {
          const Preset& p = kPresets[i];
          const QuantSpec rs = make_spec(p, BlockAlong::row, rht, Rounding::sr, false);
          const QuantSpec cs = make_spec(p, BlockAlong::column, rht, Rounding::sr, false);
          const double dense_us = time_fused(rs, cs, true, false);
          const double keyed_us = time_fused(rs, cs, true, false, source_rows);
          std::printf("| %s | row + column | SR | %s | %.1f | %.1f | %.2fx |\n", p.name, rht ? "on" : "off", keyed_us,
                      dense_us, keyed_us / dense_us);
          std::fflush(stdout);
        }
      FP4_CUDA_CHECK(cudaFree(source_rows));
    }

    unsigned host_flag = 0;
    FP4_CUDA_CHECK(cudaMemcpy(&host_flag, flag, sizeof host_flag, cudaMemcpyDeviceToHost));
    if (host_flag != 0) std::printf("\nunexpected: the non-finite flag was raised\n");
    for (Buffers& b : out) {
      FP4_CUDA_CHECK(cudaFree(b.dequant));
      FP4_CUDA_CHECK(cudaFree(b.codes));
      FP4_CUDA_CHECK(cudaFree(b.scales));
      FP4_CUDA_CHECK(cudaFree(b.scalars));
    }
    FP4_CUDA_CHECK(cudaFree(x));
    FP4_CUDA_CHECK(cudaFree(copy_dst));
    FP4_CUDA_CHECK(cudaFree(flag));
    FP4_CUDA_CHECK(cudaStreamDestroy(stream));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fp4lab_bench_quantize: %s\n", e.what());
    return 1;
  }
}
