// IndexedDataset / IndexedDatasetBuilder: exact .idx/.bin bytes against a hand-built layout,
// round trips, merging, and one specific error per kind of corruption.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "data/indexed_dataset.h"
#include "data/indexed_dataset_builder.h"
#include "data_test_util.h"

namespace megatron {
namespace {

using test::put;
using test::read_bytes;
using test::TempDir;
using test::write_bytes;
using ::testing::HasSubstr;

// Two documents: doc 0 = sequences {5, 7, 9} and {65535}; doc 1 = {1, 2}; then an empty doc.
void build_small(const std::string& prefix) {
  IndexedDatasetBuilder b(prefix, IndexDType::U16);
  b.add_item(std::vector<int32_t>{5, 7, 9});
  b.add_item(std::vector<int32_t>{65535});
  b.end_document();
  b.add_item(std::vector<int32_t>{1, 2});
  b.end_document();
  b.end_document();
  b.finalize();
}

std::vector<uint8_t> expected_small_idx() {
  std::vector<uint8_t> e;
  for (char c : std::string("MMIDIDX")) e.push_back(uint8_t(c));
  e.push_back(0);
  e.push_back(0);
  put<uint64_t>(e, 1);  // version
  e.push_back(8);       // uint16
  put<uint64_t>(e, 3);  // sequences
  put<uint64_t>(e, 4);  // document indices: 0, 2, 3, 3
  put<int32_t>(e, 3);
  put<int32_t>(e, 1);
  put<int32_t>(e, 2);
  put<int64_t>(e, 0);  // byte pointers: 0, 3·2, 4·2
  put<int64_t>(e, 6);
  put<int64_t>(e, 8);
  put<int64_t>(e, 0);
  put<int64_t>(e, 2);
  put<int64_t>(e, 3);
  put<int64_t>(e, 3);
  return e;
}

TEST(DataIndexedDataset, IdxAndBinBytesMatchMegatronLayout) {
  TempDir dir;
  build_small(dir.file("d"));
  EXPECT_EQ(read_bytes(dir.file("d.idx")), expected_small_idx());
  std::vector<uint8_t> bin;
  for (uint16_t v : {5, 7, 9, 65535, 1, 2}) put<uint16_t>(bin, v);
  EXPECT_EQ(read_bytes(dir.file("d.bin")), bin);
}

TEST(DataIndexedDataset, ReaderRoundTrip) {
  TempDir dir;
  build_small(dir.file("d"));
  IndexedDataset ds(dir.file("d"));
  EXPECT_EQ(ds.dtype(), IndexDType::U16);
  EXPECT_EQ(ds.num_sequences(), 3);
  EXPECT_EQ(ds.num_documents(), 3);
  EXPECT_EQ(ds.get(0), (std::vector<int32_t>{5, 7, 9}));
  EXPECT_EQ(ds.get(1), (std::vector<int32_t>{65535}));
  EXPECT_EQ(ds.get(2), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(ds.document_indices(), (std::vector<int64_t>{0, 2, 3, 3}));
  std::vector<int32_t> part{42};
  ds.read(0, 1, 2, part);
  EXPECT_EQ(part, (std::vector<int32_t>{42, 7, 9}));
  EXPECT_THROW(ds.read(0, 2, 2, part), Error);
}

TEST(DataIndexedDataset, Int32RoundTripAndDtypeRange) {
  TempDir dir;
  IndexedDatasetBuilder b(dir.file("w"), optimal_index_dtype(100000));
  b.add_item(std::vector<int32_t>{70000, 0, 99999});
  b.end_document();
  b.finalize();
  IndexedDataset ds(dir.file("w"));
  EXPECT_EQ(ds.dtype(), IndexDType::I32);
  EXPECT_EQ(ds.get(0), (std::vector<int32_t>{70000, 0, 99999}));
  EXPECT_EQ(optimal_index_dtype(65499), IndexDType::U16);
  EXPECT_EQ(optimal_index_dtype(65500), IndexDType::I32);

  IndexedDatasetBuilder small(dir.file("s"), IndexDType::U16);
  try {
    small.add_item(std::vector<int32_t>{65536});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("token id 65536 does not fit the dataset dtype uint16"));
  }
}

TEST(DataIndexedDataset, EveryIntegerDtypeRoundTrips) {
  TempDir dir;
  const std::vector<int32_t> tokens{0, 1, 100, 127};
  for (IndexDType dtype : {IndexDType::U8, IndexDType::I8, IndexDType::I16, IndexDType::U16,
                           IndexDType::I32, IndexDType::I64}) {
    const std::string prefix = dir.file(index_dtype_name(dtype));
    IndexedDatasetBuilder b(prefix, dtype);
    b.add_item(tokens);
    b.add_item(std::vector<int32_t>{5});
    b.end_document();
    b.finalize();
    IndexedDataset ds(prefix);
    EXPECT_EQ(ds.dtype(), dtype);
    EXPECT_EQ(ds.get(0), tokens) << index_dtype_name(dtype);
    EXPECT_EQ(ds.get(1), (std::vector<int32_t>{5}));
    EXPECT_EQ(ds.sequence_pointer(1), int64_t(4 * index_dtype_size(dtype)));
  }
  EXPECT_THROW(IndexedDatasetBuilder(dir.file("f"), IndexDType::F32), Error);
}

TEST(DataIndexedDataset, UnfinalizedBuilderLeavesNoFiles) {
  TempDir dir;
  {
    IndexedDatasetBuilder b(dir.file("p"), IndexDType::U16);
    b.add_item(std::vector<int32_t>{1, 2, 3});
    b.end_document();
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(DataIndexedDataset, MergeConcatenatesSequencesAndDocuments) {
  TempDir dir;
  build_small(dir.file("a"));
  {
    IndexedDatasetBuilder b(dir.file("b"), IndexDType::U16);
    b.add_item(std::vector<int32_t>{11});
    b.end_document();
    b.add_item(std::vector<int32_t>{12, 13});
    b.add_item(std::vector<int32_t>{14});
    b.end_document();
    b.finalize();
  }
  merge_indexed_datasets({dir.file("a"), dir.file("b")}, dir.file("m"));
  IndexedDataset m(dir.file("m"));
  EXPECT_EQ(m.num_sequences(), 6);
  EXPECT_EQ(m.document_indices(), (std::vector<int64_t>{0, 2, 3, 3, 4, 6}));
  EXPECT_EQ(m.get(3), (std::vector<int32_t>{11}));
  EXPECT_EQ(m.get(4), (std::vector<int32_t>{12, 13}));
  EXPECT_EQ(m.get(5), (std::vector<int32_t>{14}));
  EXPECT_EQ(m.get(0), (std::vector<int32_t>{5, 7, 9}));
}

// Writes the small dataset, applies `corrupt` to the .idx (or .bin) bytes, and returns the
// message of the Error the reader throws.
std::string open_error(void (*corrupt)(std::vector<uint8_t>& idx, std::vector<uint8_t>& bin)) {
  TempDir dir;
  build_small(dir.file("d"));
  std::vector<uint8_t> idx = read_bytes(dir.file("d.idx"));
  std::vector<uint8_t> bin = read_bytes(dir.file("d.bin"));
  corrupt(idx, bin);
  write_bytes(dir.file("d.idx"), idx);
  write_bytes(dir.file("d.bin"), bin);
  try {
    IndexedDataset ds(dir.file("d"));
  } catch (const Error& e) {
    return e.message();
  }
  return "no error";
}

constexpr size_t kLengths = 34, kPointers = 34 + 3 * 4, kDocIdx = 34 + 3 * 12;

TEST(DataIndexedDataset, CorruptionsGiveSpecificErrors) {
  EXPECT_THAT(open_error([](auto&, auto& bin) { bin.pop_back(); }),
              HasSubstr("is 11 bytes, expected 12"));
  EXPECT_THAT(open_error([](auto&, auto& bin) { bin.push_back(0); }),
              HasSubstr("truncated or mismatched .bin"));
  EXPECT_THAT(open_error([](auto& idx, auto&) { idx[0] = 'X'; }), HasSubstr("bad magic"));
  EXPECT_THAT(open_error([](auto& idx, auto&) { idx[9] = 2; }),
              HasSubstr("has version 2, expected version 1"));
  EXPECT_THAT(open_error([](auto& idx, auto&) { idx[17] = 9; }),
              HasSubstr("dtype code 9, expected 1..8"));
  EXPECT_THAT(open_error([](auto& idx, auto&) { idx[17] = 7; }),
              HasSubstr("stores float32 values, expected integer token ids"));
  EXPECT_THAT(open_error([](auto& idx, auto&) { idx.resize(20); }),
              HasSubstr("truncated: 20 bytes, expected at least the 34-byte header"));
  EXPECT_THAT(open_error([](auto& idx, auto&) { idx.pop_back(); }),
              HasSubstr("expected 102 for 3 sequences and 4 document indices"));
  EXPECT_THAT(open_error([](auto& idx, auto&) {
                idx[18] = 0xff;
                idx[25] = 0x7f;
              }),
              HasSubstr("more than its 102 bytes can hold"));
  EXPECT_THAT(open_error([](auto& idx, auto&) { idx[kPointers + 8] = 4; }),
              HasSubstr("sequence 1 points at byte 4, expected 6"));
  EXPECT_THAT(open_error([](auto& idx, auto&) {
                idx[kLengths] = 0xff;
                idx[kLengths + 3] = 0xff;
              }),
              HasSubstr("sequence 0 has negative length"));
  EXPECT_THAT(open_error([](auto& idx, auto&) { idx[kDocIdx] = 1; }),
              HasSubstr("document index 0 is 1, expected 0"));
  EXPECT_THAT(open_error([](auto& idx, auto&) { idx[kDocIdx + 24] = 2; }),
              HasSubstr("last document index is 2, expected the sequence count 3"));
  EXPECT_THAT(open_error([](auto& idx, auto&) {
                idx[kDocIdx + 8] = 3;
                idx[kDocIdx + 16] = 1;
              }),
              HasSubstr("document index 2 (1) is smaller than document index 1 (3)"));
}

TEST(DataIndexedDataset, MissingFileNamesPath) {
  TempDir dir;
  try {
    IndexedDataset ds(dir.file("nothing"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("nothing.idx"));
  }
}

}  // namespace
}  // namespace megatron
