// commands.h — each file of cli/ registers one family of subcommands on the root app.
#pragma once

#include <CLI/CLI.hpp>

namespace fp4::cli {

// `fp4lab quant ...`: the quantizer probe.
void register_quant_commands(CLI::App& app);

// `fp4lab data ...`: token shards from text, synthetic sources, their entropies.
void register_data_commands(CLI::App& app);

// `fp4lab train --config run.json --dir DIR [--resume]`: one training run.
void register_train_commands(CLI::App& app);

// `fp4lab sweep plan|run|status|slurm|ingest`: grids of runs and their store.
void register_sweep_commands(CLI::App& app);

// `fp4lab fit STUDY.toml | --store FILE.db | --points FILE.csv`: scaling-law fits (docs/fit.md).
void register_fit_commands(CLI::App& app);

// `fp4lab plan STUDY.toml`: a study's device time and the seeds its contrasts need (docs/statistics.md).
void register_plan_commands(CLI::App& app);

// `fp4lab report STUDY.toml | --store FILE.db [--out DIR]`: the study's HTML, Markdown and CSV.
void register_report_commands(CLI::App& app);

}  // namespace fp4::cli
