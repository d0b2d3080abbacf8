// document_splitter.h — cutting a byte stream into documents at a delimiter, chunk by chunk.
//
// The result is exactly Python's `data.split(delimiter)`: leftmost, non-overlapping matches; the
// pieces between them are the documents, including an empty first or last piece when the data
// starts or ends with the delimiter (so an empty input is one empty document). Documents are
// delivered as pieces as the bytes arrive, so a document never has to fit in memory.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace fp4::data {

class DocumentSplitter {
 public:
  // on_bytes(piece): the next bytes of the current document (may be called several times).
  // on_end(): the current document is complete (its delimiter, if any, is not delivered).
  DocumentSplitter(std::string delimiter, std::function<void(std::string_view)> on_bytes,
                   std::function<void()> on_end);

  void feed(std::string_view chunk);
  // End of input: delivers what is held back and ends the last document.
  void finish();

 private:
  std::string delimiter_;
  std::function<void(std::string_view)> on_bytes_;
  std::function<void()> on_end_;
  std::string pending_;  // bytes not yet delivered: searched again with the next chunk
};

}  // namespace fp4::data
