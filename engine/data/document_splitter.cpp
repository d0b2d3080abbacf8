// document_splitter.cpp — delimiter search across chunk boundaries.
#include "engine/data/document_splitter.h"

#include <stdexcept>
#include <utility>

#include "base/user_error.h"

namespace fp4::data {

DocumentSplitter::DocumentSplitter(std::string delimiter, std::function<void(std::string_view)> on_bytes,
                                   std::function<void()> on_end)
    : delimiter_(std::move(delimiter)), on_bytes_(std::move(on_bytes)), on_end_(std::move(on_end)) {
  if (delimiter_.empty()) throw UserError("document delimiter must not be empty");
}

void DocumentSplitter::feed(std::string_view chunk) {
  // The previous call held back at most delimiter_.size() - 1 bytes (a possible start of a
  // delimiter); searching them together with the new chunk finds matches that straddle chunks.
  pending_.append(chunk);
  std::string_view data(pending_);
  size_t start = 0;
  for (;;) {
    size_t hit = data.find(delimiter_, start);
    if (hit == std::string_view::npos) break;
    if (hit > start) on_bytes_(data.substr(start, hit - start));
    on_end_();
    start = hit + delimiter_.size();
  }
  // No delimiter starts before `keep_from`: a match starting there would have been found unless it
  // runs past the end, which only a start in the last size()-1 bytes can.
  size_t tail = delimiter_.size() - 1;
  size_t keep_from = data.size() > start + tail ? data.size() - tail : start;
  if (keep_from > start) on_bytes_(data.substr(start, keep_from - start));
  pending_.erase(0, keep_from);
}

void DocumentSplitter::finish() {
  if (!pending_.empty()) on_bytes_(pending_);
  pending_.clear();
  on_end_();
}

}  // namespace fp4::data
