// probe_rows.h — the shrinkage probe's rows (NUMERICS.md §8) as a run writes them into
// metrics.jsonl and the store keeps them: each field named once, here. The trainer writes a row
// from these fields, the store's ingest reads it back, and the store's INSERT binds them, all by
// walking the same list (for_each_field); a test holds the store's CREATE TABLE to the same list.
//
// Field types say everything the readers need: an integer field is a JSON integer and an INTEGER
// NOT NULL column, a text field a JSON string and TEXT NOT NULL, a real field a JSON number or null
// (a non-finite value) and a REAL column that is NULL for it.
#pragma once

#include <cstdint>
#include <string>

namespace fp4 {

// kind "probe": one quantized slot of one block linear, at one step.
struct SlotProbeRow {
  int64_t step = 0;
  int layer = 0;                  // the block
  std::string linear, slot, gemm; // "qkv"/"attn_out"/"mlp_in"/"mlp_out", engine::slot_name, "fprop"/"dgrad"/"wgrad"
  double alpha = 0, nmse = 0, sqnr_db = 0, shrink = 0, b_eff = 0;
  int64_t count = 0, nonfinite = 0;

  static constexpr const char* kKind = "probe";
  // f(name, is_key, field) for every field, in row and column order; is_key: part of the store's
  // primary key (with the run).
  template <class Row, class F>
  static void for_each_field(Row& r, F&& f) {
    f("step", true, r.step);
    f("layer", true, r.layer);
    f("linear", true, r.linear);
    f("slot", true, r.slot);
    f("gemm", false, r.gemm);
    f("alpha", false, r.alpha);
    f("nmse", false, r.nmse);
    f("sqnr_db", false, r.sqnr_db);
    f("shrink", false, r.shrink);
    f("b_eff", false, r.b_eff);
    f("count", false, r.count);
    f("nonfinite", false, r.nonfinite);
  }
};

// kind "probe_gemm": one GEMM of one block linear whose two operands were both measured, at one
// step; eta = alpha_a · alpha_b.
struct GemmProbeRow {
  int64_t step = 0;
  int layer = 0;
  std::string linear, gemm;
  double alpha_a = 0, alpha_b = 0, eta = 0;

  static constexpr const char* kKind = "probe_gemm";
  template <class Row, class F>
  static void for_each_field(Row& r, F&& f) {
    f("step", true, r.step);
    f("layer", true, r.layer);
    f("linear", true, r.linear);
    f("gemm", true, r.gemm);
    f("alpha_a", false, r.alpha_a);
    f("alpha_b", false, r.alpha_b);
    f("eta", false, r.eta);
  }
};

}  // namespace fp4
