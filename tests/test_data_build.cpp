// `data build --tokenizer bytes`: the document split rule, the manifest, determinism, .xz inputs,
// refusals, and the shard directory as a DataSource.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/sha256.h"
#include "base/user_error.h"
#include "engine/data/byte_shard_builder.h"
#include "engine/data/data_source.h"
#include "engine/data/document_splitter.h"
#include "engine/data/manifest.h"
#include "engine/data/shard.h"
#include "engine/data/shard_source.h"
#include "tests/test_support.h"

namespace fs = std::filesystem;
using namespace fp4::test;
using namespace fp4::data;

namespace {

const std::string kSep = "\n<|endoftext|>\n";

// Document n of a generated file: varied lengths, each ending in LF like the corpus' documents.
std::string make_doc(const std::string& file, int n) {
  std::string d = file + " document " + std::to_string(n) + "\n";
  for (int line = 0; line < n % 7; ++line) d += "line " + std::to_string(line * n) + " of text\n";
  return d;
}

std::vector<std::string> make_docs(const std::string& file, int count) {
  std::vector<std::string> docs;
  for (int n = 1; n <= count; ++n) docs.push_back(make_doc(file, n));
  return docs;
}

std::string join(const std::vector<std::string>& docs) {
  std::string out;
  for (size_t i = 0; i < docs.size(); ++i) out += (i ? kSep : "") + docs[i];
  return out;
}

// The tokens of a split, read back through its shards in manifest order, as bytes.
std::string split_bytes(const fs::path& dir, const SplitSummary& s) {
  std::string out;
  for (const ShardEntry& e : s.shards)
    for (uint16_t t : read_shard(dir / e.file)) out.push_back(static_cast<char>(t));
  return out;
}

std::vector<std::string> python_split(const std::string& data, const std::string& sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t hit; (hit = data.find(sep, start)) != std::string::npos; start = hit + sep.size())
    out.push_back(data.substr(start, hit - start));
  out.push_back(data.substr(start));
  return out;
}

bool have_xz() { return std::system("xz --version >/dev/null 2>&1") == 0; }

}  // namespace

TEST_CASE("the document splitter cuts exactly like Python's bytes.split, across any chunking", "[data][build]") {
  std::vector<std::string> cases = {
      "",
      kSep,
      "a" + kSep + "b",
      kSep + "a" + kSep,
      "x\n<|endoftext|>\n<|endoftext|>\ny",  // two delimiters sharing no bytes, back to back
      "\n<|endoftext|" + kSep + "\n<|endof" + kSep + kSep + "z\n<|endoftext|>",
      join(make_docs("f", 30)),
  };
  for (const std::string& data : cases) {
    for (size_t chunk : {size_t{1}, size_t{2}, size_t{7}, size_t{14}, size_t{15}, size_t{16}, size_t{1000}}) {
      std::vector<std::string> docs{""};
      DocumentSplitter s(kSep, [&](std::string_view b) { docs.back().append(b); }, [&] { docs.emplace_back(); });
      for (size_t i = 0; i < data.size(); i += chunk) s.feed(std::string_view(data).substr(i, chunk));
      s.finish();
      docs.pop_back();  // the entry opened after the last document ended
      INFO("chunk " << chunk << " data " << data);
      CHECK(docs == python_split(data, kSep));
    }
  }
}

TEST_CASE("data build: split rule, manifest, shards and determinism", "[data][build]") {
  ScratchDir tmp;
  std::vector<std::string> a = make_docs("a", 250), b = make_docs("b", 120);
  spit(tmp / "a.txt", join(a));
  spit(tmp / "b.txt", join(b));
  ByteBuildOptions o;
  o.inputs = {tmp / "a.txt", tmp / "b.txt"};
  o.out_dir = tmp / "out";
  o.shard_tokens = 2000;
  int progress_calls = 0;
  BuildResult r = build_byte_shards(o, [&](const BuildProgress& p) {
    ++progress_calls;
    CHECK(p.inputs == 2);
  });
  CHECK_FALSE(r.up_to_date);
  CHECK(progress_calls >= 2);
  const Manifest& m = r.manifest;

  // Documents 100 and 200 of a, 100 of b are validation; everything else is training, in order,
  // each document followed by the separator.
  std::string want_val, want_train;
  uint64_t val_doc_bytes = 0, train_doc_bytes = 0;
  for (const auto* docs : {&a, &b}) {
    for (size_t i = 0; i < docs->size(); ++i) {
      bool val = (i + 1) % 100 == 0;
      (val ? want_val : want_train) += (*docs)[i] + kSep;
      (val ? val_doc_bytes : train_doc_bytes) += (*docs)[i].size();
    }
  }
  CHECK(split_bytes(o.out_dir, m.validation) == want_val);
  CHECK(split_bytes(o.out_dir, m.train) == want_train);
  CHECK(want_val.rfind("a document 100\n", 0) == 0);
  CHECK(want_val.find("a document 200\n") != std::string::npos);
  CHECK(want_val.find("b document 100\n") != std::string::npos);

  CHECK(m.inputs.size() == 2);
  CHECK(m.inputs[0].name == "a.txt");
  CHECK(m.inputs[0].documents == 250);
  CHECK(m.inputs[0].validation_documents == 2);
  CHECK(m.inputs[0].validation_document_bytes == a[99].size() + a[199].size());
  CHECK(m.inputs[1].documents == 120);
  CHECK(m.inputs[1].validation_documents == 1);
  CHECK(m.inputs[0].sha256 == fp4::sha256_hex(join(a)));
  CHECK(m.inputs[0].text_sha256 == m.inputs[0].sha256);
  CHECK(m.inputs[0].text_bytes == join(a).size());
  CHECK(m.validation.documents == 3);
  CHECK(m.train.documents == 367);
  CHECK(m.validation.document_bytes == val_doc_bytes);
  CHECK(m.train.document_bytes == train_doc_bytes);
  CHECK(m.validation.tokens == val_doc_bytes + 3 * kSep.size());
  CHECK(m.train.tokens == train_doc_bytes + 367 * kSep.size());
  CHECK(m.vocab_size == 256);
  CHECK(m.separator == kSep);
  CHECK(m.train.shards.size() == (m.train.tokens + 1999) / 2000);
  CHECK(m.train.shards[0].file == "train_000.bin");
  CHECK(m.validation.shards[0].file == "val_000.bin");
  for (const auto* s : {&m.train, &m.validation})
    for (const ShardEntry& e : s->shards) {
      CHECK(e.tokens <= 2000);
      CHECK(e.sha256 == fp4::sha256_file(o.out_dir / e.file));
      CHECK(read_shard_header(o.out_dir / e.file).vocab == 256);
    }
  // The manifest on disk is what read_manifest reads back and names the split rule.
  Manifest back = read_manifest(o.out_dir);
  CHECK(manifest_bytes(back) == slurp(o.out_dir / "manifest.json"));
  CHECK_THAT(slurp(o.out_dir / "manifest.json"), Catch::Contains("n % 100 == 0"));

  // A second build into another directory gives identical bytes, file for file.
  ByteBuildOptions o2 = o;
  o2.out_dir = tmp / "out2";
  build_byte_shards(o2);
  size_t files = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(o.out_dir)) {
    ++files;
    CHECK(slurp(e.path()) == slurp(o2.out_dir / e.path().filename()));
  }
  CHECK(files == m.train.shards.size() + m.validation.shards.size() + 1);

  // Rerunning the same build finds it up to date and writes nothing.
  auto stamp = fs::last_write_time(o.out_dir / "manifest.json");
  BuildResult again = build_byte_shards(o);
  CHECK(again.up_to_date);
  CHECK(fs::last_write_time(o.out_dir / "manifest.json") == stamp);

  // Other settings into the same directory are refused; so is a directory holding other files.
  ByteBuildOptions other = o;
  other.shard_tokens = 3000;
  CHECK_THROWS_WITH(build_byte_shards(other), Catch::Contains("already holds a different build"));
  fs::create_directories(tmp / "foreign");
  spit(tmp / "foreign" / "notes.txt", "mine");
  other.out_dir = tmp / "foreign";
  CHECK_THROWS_WITH(build_byte_shards(other), Catch::Contains("is not empty"));

  // The leftovers of an interrupted build (shards, no manifest) are replaced.
  fs::create_directories(tmp / "partial");
  spit(tmp / "partial" / "train_099.bin", "junk");
  spit(tmp / "partial" / ".val_000.bin.tmp", "junk");
  other = o;
  other.out_dir = tmp / "partial";
  build_byte_shards(other);
  CHECK_FALSE(fs::exists(tmp / "partial" / "train_099.bin"));
  CHECK_FALSE(fs::exists(tmp / "partial" / ".val_000.bin.tmp"));
  CHECK(slurp(tmp / "partial" / "manifest.json") == slurp(o.out_dir / "manifest.json"));
}

TEST_CASE("data build reads .xz through xz and refuses what it cannot read", "[data][build]") {
  ScratchDir tmp;
  std::string text = join(make_docs("c", 205));
  spit(tmp / "c.txt", text);

  ByteBuildOptions o;
  o.out_dir = tmp / "bad";
  o.inputs = {tmp / "missing.txt"};
  CHECK_THROWS_WITH(build_byte_shards(o), Catch::Contains("missing.txt"));
  CHECK_FALSE(fs::exists(tmp / "bad"));  // nothing created before the inputs were checked
  spit(tmp / "c.txt.gz", "whatever");
  o.inputs = {tmp / "c.txt.gz"};
  CHECK_THROWS_WITH(build_byte_shards(o), Catch::Contains("c.txt.gz") && Catch::Contains("decompress"));
  CHECK_FALSE(fs::exists(tmp / "bad"));
  o.inputs = {tmp / "c.txt"};
  o.shard_tokens = 0;
  CHECK_THROWS_WITH(build_byte_shards(o), Catch::Contains("--shard-tokens"));

  if (!have_xz()) {
    WARN("xz is not installed: the .xz part of this test is skipped");
    return;
  }
  REQUIRE(std::system(("xz -k -T1 '" + (tmp / "c.txt").string() + "'").c_str()) == 0);
  ByteBuildOptions plain, packed;
  plain.inputs = {tmp / "c.txt"};
  plain.out_dir = tmp / "plain";
  packed.inputs = {tmp / "c.txt.xz"};
  packed.out_dir = tmp / "packed";
  Manifest mp = build_byte_shards(plain).manifest;
  Manifest mx = build_byte_shards(packed).manifest;
  CHECK(mx.inputs[0].text_sha256 == mp.inputs[0].text_sha256);
  CHECK(mx.inputs[0].sha256 == fp4::sha256_file(tmp / "c.txt.xz"));
  CHECK(mx.inputs[0].sha256 != mx.inputs[0].text_sha256);
  CHECK(mx.inputs[0].documents == 205);
  CHECK(split_bytes(packed.out_dir, mx.train) == split_bytes(plain.out_dir, mp.train));
  CHECK(split_bytes(packed.out_dir, mx.validation) == split_bytes(plain.out_dir, mp.validation));

  // A damaged archive is an error naming the file, not silently short text.
  std::string xz = slurp(tmp / "c.txt.xz");
  xz[xz.size() / 2] ^= 0x55;
  spit(tmp / "d.txt.xz", xz);
  ByteBuildOptions damaged;
  damaged.inputs = {tmp / "d.txt.xz"};
  damaged.out_dir = tmp / "damaged";
  CHECK_THROWS_WITH(build_byte_shards(damaged), Catch::Contains("d.txt.xz") && Catch::Contains("xz failed"));
}

TEST_CASE("a shard directory as a DataSource: batches, wrap-around, resume, validation bytes", "[data][build]") {
  ScratchDir tmp;
  std::vector<std::string> docs = make_docs("e", 320);
  spit(tmp / "e.txt", join(docs));
  ByteBuildOptions o;
  o.inputs = {tmp / "e.txt"};
  o.out_dir = tmp / "out";
  o.shard_tokens = 1000;
  Manifest m = build_byte_shards(o).manifest;
  const std::string train = split_bytes(o.out_dir, m.train), val = split_bytes(o.out_dir, m.validation);

  std::unique_ptr<DataSource> src = open_data(o.out_dir.string());
  CHECK(src->vocab_size() == 256);
  CHECK(src->train_tokens() == train.size());
  CHECK(src->validation_tokens() == val.size());
  CHECK(src->fingerprint() == fp4::sha256_file(o.out_dir / "manifest.json"));

  // Batch rows are overlapping windows of the training stream; the stream wraps at its end.
  const int64_t B = 3, T = 97;
  auto stream = src->train_stream();
  uint64_t p = 0;
  const uint64_t passes_tokens = 3 * train.size();
  StreamPosition mid;
  std::vector<std::vector<uint16_t>> after_mid;
  for (int step = 0; p < passes_tokens; ++step) {
    if (step == 5) mid = stream->position();
    std::vector<uint16_t> batch = stream->next_batch(B, T);
    if (step >= 5 && step < 9) after_mid.push_back(batch);
    for (int64_t r = 0; r < B; ++r)
      for (int64_t j = 0; j <= T; ++j)
        REQUIRE(batch[r * (T + 1) + j] ==
                static_cast<unsigned char>(train[(p + static_cast<uint64_t>(r * T + j)) % train.size()]));
    p += B * T;
    REQUIRE(stream->position().tokens == p);
  }

  // Resuming from a saved position (through its JSON form) gives the same batches.
  auto resumed = src->train_stream(StreamPosition::from_json(nlohmann::json::parse(mid.to_json().dump())));
  for (const auto& want : after_mid) CHECK(resumed->next_batch(B, T) == want);
  std::vector<int32_t> wide(B * (T + 1));
  auto again = src->train_stream(mid);
  again->next_batch(B, T, std::span<int32_t>(wide));
  for (size_t i = 0; i < wide.size(); ++i) REQUIRE(wide[i] == after_mid[0][i]);
  CHECK_THROWS_AS(again->next_batch(B, T, std::span<int32_t>(wide.data(), wide.size() - 1)), std::invalid_argument);
  CHECK_THROWS_AS(src->train_stream(StreamPosition{0, {1, 2}}), fp4::UserError);

  // Validation: a prefix of the validation split, with the document bytes among it.
  ValidationSet all = src->validation(1u << 30);
  CHECK(all.tokens.size() == val.size());
  CHECK(all.document_bytes == m.validation.document_bytes);
  CHECK(all.document_bytes == docs[99].size() + docs[199].size() + docs[299].size());
  const uint64_t first = docs[99].size();
  CHECK(src->validation(first).document_bytes == first);
  CHECK(src->validation(first + 5).document_bytes == first);  // cut inside the separator
  CHECK(src->validation(first + kSep.size() + 2).document_bytes == first + 2);
  CHECK(src->validation(10).tokens == std::vector<uint16_t>(all.tokens.begin(), all.tokens.begin() + 10));
}

TEST_CASE("a shard directory that changed after its build is refused, naming the file", "[data][build]") {
  ScratchDir tmp;
  spit(tmp / "f.txt", join(make_docs("f", 150)));
  ByteBuildOptions o;
  o.inputs = {tmp / "f.txt"};
  o.out_dir = tmp / "out";
  o.shard_tokens = 500;
  build_byte_shards(o);
  CHECK_NOTHROW(verify_shard_directory(o.out_dir));

  CHECK_THROWS_WITH(open_data((tmp / "nowhere").string()), Catch::Contains("nowhere"));
  CHECK_THROWS_WITH(open_data(tmp.path().string()), Catch::Contains("manifest.json"));

  // Same size, other bytes: only the hash check sees it.
  std::string shard = slurp(o.out_dir / "train_001.bin");
  shard[2000] = 'Z' == shard[2000] ? 'Y' : 'Z';
  spit(o.out_dir / "train_001.bin", shard);
  CHECK_NOTHROW(open_data(o.out_dir.string()));
  CHECK_THROWS_WITH(verify_shard_directory(o.out_dir), Catch::Contains("train_001.bin") && Catch::Contains("sha256"));

  // A shard with another token count than the manifest lists.
  write_shard(o.out_dir / "train_001.bin", std::vector<uint16_t>(10, 65), 256);
  CHECK_THROWS_WITH(open_data(o.out_dir.string()), Catch::Contains("train_001.bin") && Catch::Contains("manifest.json lists"));

  spit(o.out_dir / "manifest.json", "{ not json");
  CHECK_THROWS_WITH(open_data(o.out_dir.string()), Catch::Contains("manifest.json") && Catch::Contains("not valid JSON"));
}
