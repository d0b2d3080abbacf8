// shard_source.h — a shard directory (manifest.json plus shards) as a DataSource, and the checks
// and statistics `fp4lab data info|entropy` show for one.
//
// Opening maps every shard listed in the manifest read-only, checks each header against the
// manifest (token count, vocabulary) and every token against the vocabulary size; the shards'
// sha256 are checked only by verify_shard_directory, which reads every byte.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/data/data_source.h"

namespace fp4::data {

std::unique_ptr<DataSource> open_shard_directory(const std::filesystem::path& dir);

// Recomputes every listed shard's sha256; throws UserError naming the first shard
// whose bytes differ from the manifest.
void verify_shard_directory(const std::filesystem::path& dir);

// How often each token occurs in the training split (vocab_size entries): the empirical unigram
// distribution, whose entropy is the loss of the best context-free model of this data.
std::vector<uint64_t> count_train_tokens(const std::filesystem::path& dir);

// Document bytes among the first n tokens of a byte-tokenizer stream whose documents are each
// followed by `separator`: n minus the separator bytes that lie inside the first n tokens.
// `tokens` must reach len(separator) - 1 tokens past n where it can (so a separator cut by the
// end of the prefix is still recognised).
uint64_t count_document_bytes(const std::vector<uint16_t>& tokens, uint64_t n, const std::string& separator);

}  // namespace fp4::data
