// model_pair.h — the start of every [gpu] comparison of the CUDA model with the CPU reference: both
// models of one shape under one recipe, initialised from one seed, with the same weights.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/cuda_model/cuda_model.h"
#include "engine/model/transformer.h"
#include "engine/recipe.h"
#include "tests/run_test_helpers.h"

namespace fp4::test {

struct ModelPair {
  engine::Recipe recipe;
  std::vector<int> bf16_layers;  // the recipe's BF16 layers resolved for the shape
  std::unique_ptr<model::Model> cpu;
  std::unique_ptr<cuda_model::CudaModel> gpu;
};

// Requires the two backends' initial weights to be the same bits: initialisation is host code
// shared by both, so any difference is a copy or layout fault, not rounding.
inline ModelPair model_pair(const model::ModelShape& shape, const engine::Recipe& recipe, uint64_t seed) {
  ModelPair m;
  m.recipe = recipe;
  m.bf16_layers = engine::resolve_bf16_layers(m.recipe.bf16_layers, shape.n_layers);
  m.cpu = std::make_unique<model::Model>(shape, m.recipe, m.bf16_layers);
  m.gpu = std::make_unique<cuda_model::CudaModel>(shape, m.recipe, m.bf16_layers);
  m.cpu->init_params(seed);
  m.gpu->init_params(seed);
  REQUIRE(same_bits(m.gpu->params_to_host(), m.cpu->params()));
  return m;
}

}  // namespace fp4::test
