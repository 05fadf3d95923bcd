// SafetensorsFile / SafetensorsWriter: round trips, partial reads, streaming, and every kind
// of broken file giving a linnet::Error that names the file (and tensor).
#include <cstring>
#include <filesystem>
#include <random>

#include "checkpoint/safetensors.h"
#include "tests/checkpoint_test_util.h"

using namespace linnet;
using namespace linnet::testutil;
using ::testing::AllOf;
using ::testing::HasSubstr;

namespace {

const DType kAllDtypes[] = {DType::bf16, DType::f16, DType::f32, DType::i32, DType::i64};

// Distinct, exactly representable values in every dtype.
Tensor iota(Shape shape, DType dtype, int start = 0) {
  std::vector<int64_t> v(static_cast<size_t>(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<int64_t>(i % 200) - 100 + static_cast<int64_t>(i / 200);
  if (is_float(dtype)) {
    std::vector<float> f(v.begin(), v.end());
    return Tensor::from_floats(std::move(shape), f, dtype);
  }
  return Tensor::from_ints(std::move(shape), v, dtype);
}

std::string bytes(const Tensor& t) { return std::string(static_cast<const char*>(t.data()), t.nbytes()); }

// A file holding one entry `w` with this header entry text and `data_bytes` of data.
std::string one_entry(const std::string& entry, size_t data_bytes = 24) {
  return safetensors_bytes("{\"w\":" + entry + "}", std::string(data_bytes, '\x01'));
}

// The error from opening `contents` written to a fresh file; also checks it names the file.
std::string open_error(const ScratchDir& dir, const std::string& contents) {
  const std::string p = dir / "bad.safetensors";
  write_file(p, contents);
  std::string msg = error_of([&] { SafetensorsFile f(p); });
  EXPECT_THAT(msg, HasSubstr(p));
  return msg;
}

}  // namespace

TEST(Safetensors, RoundTripEveryDtypeWithMetadata) {
  ScratchDir dir;
  std::vector<std::pair<std::string, Tensor>> ts;
  for (DType t : kAllDtypes) {
    ts.emplace_back(std::string("m.") + dtype_name(t), iota({3, 5}, t, 7));
    ts.emplace_back(std::string("s.") + dtype_name(t), iota({}, t, 3));          // scalar
    ts.emplace_back(std::string("e.") + dtype_name(t), Tensor::empty({0, 4}, t));  // no elements
    ts.emplace_back(std::string("r3.") + dtype_name(t), iota({2, 3, 4}, t));
  }
  const std::string p = dir / "rt.safetensors";
  save_safetensors(p, ts, {{"format", "pt"}, {"note", "ünïcode ok"}});
  EXPECT_FALSE(std::filesystem::exists(p + ".tmp"));

  SafetensorsFile f(p);
  EXPECT_EQ(f.path(), p);
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"note", "ünïcode ok"}}));
  ASSERT_EQ(f.names().size(), ts.size());
  for (const auto& [name, t] : ts) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(f.has(name));
    EXPECT_EQ(f.info(name).name, name);
    EXPECT_EQ(f.info(name).dtype, t.dtype());
    EXPECT_EQ(f.info(name).shape, t.shape());
    EXPECT_EQ(f.info(name).end - f.info(name).begin, t.nbytes());
    Tensor v = f.view(name), r = f.read(name);
    EXPECT_EQ(v.shape(), t.shape());
    EXPECT_EQ(r.dtype(), t.dtype());
    EXPECT_EQ(bytes(v), bytes(t));
    EXPECT_EQ(bytes(r), bytes(t));
  }
  EXPECT_FALSE(f.has("nope"));
}

TEST(Safetensors, HeaderIsPaddedSoViewsAreAligned) {
  ScratchDir dir;
  const std::string p = dir / "pad.safetensors";
  save_safetensors(p, {{"x", iota({3}, DType::i64)}});
  const std::string raw = read_file(p);
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  SafetensorsFile f(p);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f.view("x").data()) % 8, 0u);
}

TEST(Safetensors, ViewKeepsMappingAliveAfterFileDies) {
  ScratchDir dir;
  const std::string p = dir / "v.safetensors";
  const Tensor t = iota({4, 4}, DType::f32);
  save_safetensors(p, {{"t", t}});
  Tensor v;
  {
    SafetensorsFile f(p);
    v = f.view("t");
  }
  EXPECT_EQ(v.to_floats(), t.to_floats());
}

TEST(Safetensors, NamesAreInDataOffsetOrder) {
  ScratchDir dir;
  const std::string p = dir / "o.safetensors";
  save_safetensors(p, {{"zeta", iota({2}, DType::f32)}, {"alpha", iota({3}, DType::i32)}, {"mid", iota({1}, DType::bf16)}});
  EXPECT_EQ(SafetensorsFile(p).names(), (std::vector<std::string>{"zeta", "alpha", "mid"}));
}

TEST(Safetensors, MisalignedTensorIsCopiedNotViewedInPlace) {
  // Legal file from a careless writer: an f32 starting 2 bytes into the data section.
  ScratchDir dir;
  const std::string p = dir / "mis.safetensors";
  float v = 1.5f;
  std::string data(2, '\0');
  data.append(reinterpret_cast<const char*>(&v), 4);
  write_file(p, safetensors_bytes(R"({"a":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]},)"
                                  R"("b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})", data));
  SafetensorsFile f(p);
  Tensor b = f.view("b");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 4, 0u);
  EXPECT_EQ(b.to_floats(), std::vector<float>{1.5f});
}

TEST(Safetensors, ReadRowsEqualsSlicesOfTheFullTensor) {
  ScratchDir dir;
  const std::string p = dir / "rows.safetensors";
  save_safetensors(p, {{"r3", iota({6, 4, 3}, DType::f32)}, {"r1", iota({9}, DType::bf16)},
                       {"r2", iota({5, 7}, DType::i64)}, {"e", Tensor::empty({0, 5}, DType::f16)}});
  SafetensorsFile f(p);
  for (const std::string name : {"r3", "r1", "r2"}) {
    const Tensor full = f.read(name);
    for (int64_t b = 0; b <= full.dim(0); ++b)
      for (int64_t e = b; e <= full.dim(0); ++e) {
        SCOPED_TRACE(name + " rows " + std::to_string(b) + ".." + std::to_string(e));
        Tensor part = f.read_rows(name, b, e);
        EXPECT_EQ(part.shape(), full.rows(b, e).shape());
        EXPECT_EQ(bytes(part), bytes(full.rows(b, e)));
      }
  }
  EXPECT_EQ(f.read_rows("e", 0, 0).shape(), (Shape{0, 5}));
  EXPECT_THAT(error_of([&] { f.read_rows("r2", 3, 6); }), AllOf(HasSubstr(p), HasSubstr("'r2'"), HasSubstr("[3, 6)")));
  EXPECT_THAT(error_of([&] { f.read_rows("r2", -1, 2); }), HasSubstr("outside [0, 5)"));
  EXPECT_THAT(error_of([&] { f.read_rows("r2", 3, 2); }), HasSubstr("outside"));
}

TEST(Safetensors, ReadRowsOfAScalarIsAnError) {
  ScratchDir dir;
  const std::string p = dir / "s.safetensors";
  save_safetensors(p, {{"s", iota({}, DType::f32)}});
  EXPECT_THAT(error_of([&] { SafetensorsFile(p).read_rows("s", 0, 0); }), AllOf(HasSubstr(p), HasSubstr("rank >= 1")));
}

TEST(Safetensors, ReadColsEqualsSlicesOfTheFullTensor) {
  ScratchDir dir;
  const std::string p = dir / "cols.safetensors";
  save_safetensors(p, {{"w", iota({5, 7}, DType::bf16)}, {"i", iota({3, 4}, DType::i64)},
                       {"z", Tensor::empty({0, 3}, DType::f32)}, {"r3", iota({2, 2, 2}, DType::f32)}});
  SafetensorsFile f(p);
  for (const std::string name : {"w", "i"}) {
    const Tensor full = f.read(name);
    const int64_t rows = full.dim(0), cols = full.dim(1);
    const size_t es = dtype_size(full.dtype());
    for (int64_t b = 0; b <= cols; ++b)
      for (int64_t e = b; e <= cols; ++e) {
        SCOPED_TRACE(name + " cols " + std::to_string(b) + ".." + std::to_string(e));
        Tensor part = f.read_cols(name, b, e);
        ASSERT_EQ(part.shape(), (Shape{rows, e - b}));
        std::string want;
        for (int64_t r = 0; r < rows; ++r)
          want += bytes(full).substr(static_cast<size_t>(r * cols + b) * es, static_cast<size_t>(e - b) * es);
        EXPECT_EQ(bytes(part), want);
      }
  }
  EXPECT_EQ(f.read_cols("z", 1, 2).shape(), (Shape{0, 1}));
  EXPECT_THAT(error_of([&] { f.read_cols("r3", 0, 1); }), AllOf(HasSubstr(p), HasSubstr("'r3'"), HasSubstr("2-D")));
  EXPECT_THAT(error_of([&] { f.read_cols("w", 2, 8); }), AllOf(HasSubstr("'w'"), HasSubstr("outside [0, 7)")));
}

TEST(Safetensors, ReadColsOfABigTensor) {
  // 4096 x 1024 bf16 = 8 MB; a 16-column slice is 128 KB, copied row by row.
  ScratchDir dir;
  const std::string p = dir / "big.safetensors";
  const int64_t rows = 4096, cols = 1024;
  {
    SafetensorsWriter w(p);
    w.declare("w", DType::bf16, {rows, cols});
    std::vector<uint16_t> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) row[static_cast<size_t>(c)] = static_cast<uint16_t>(r * 7 + c);
      w.write("w", row.data(), row.size() * 2);
    }
    w.finish();
  }
  SafetensorsFile f(p);
  Tensor part = f.read_cols("w", 500, 516);
  ASSERT_EQ(part.shape(), (Shape{rows, 16}));
  const auto* got = part.ptr<uint16_t>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < 16; ++c)
      ASSERT_EQ(got[r * 16 + c], static_cast<uint16_t>(r * 7 + 500 + c)) << r << "," << c;
}

TEST(Safetensors, StreamingWriterAcceptsChunks) {
  ScratchDir dir;
  const std::string p = dir / "stream.safetensors";
  const Tensor a = iota({1000}, DType::f32), b = iota({10, 10}, DType::i64);
  {
    SafetensorsWriter w(p);
    w.set_metadata("format", "pt");
    w.declare("a", DType::f32, a.shape());
    w.declare("empty", DType::bf16, {0});
    w.declare("b", DType::i64, b.shape());
    const char* pa = static_cast<const char*>(a.data());
    size_t done = 0;
    for (size_t chunk : {1u, 7u, 333u, 0u, 2000u}) {
      w.write("a", pa + done, chunk);
      done += chunk;
    }
    w.write("a", pa + done, a.nbytes() - done);
    w.write("empty", nullptr, 0);
    w.write("b", b.data(), 8);
    w.write("b", static_cast<const char*>(b.data()) + 8, b.nbytes() - 8);
    EXPECT_TRUE(std::filesystem::exists(p + ".tmp"));
    EXPECT_FALSE(std::filesystem::exists(p));  // only under its name once finished
    w.finish();
  }
  EXPECT_FALSE(std::filesystem::exists(p + ".tmp"));
  SafetensorsFile f(p);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(bytes(f.read("a")), bytes(a));
  EXPECT_EQ(bytes(f.read("b")), bytes(b));
  EXPECT_EQ(f.read("empty").shape(), (Shape{0}));
}

TEST(Safetensors, WriterRejectsMisuse) {
  ScratchDir dir;
  const std::string p = dir / "w.safetensors";
  const std::vector<char> buf(64, 0);
  {
    SafetensorsWriter w(p);
    w.declare("a", DType::f32, {2});
    w.declare("b", DType::i32, {3});
    EXPECT_THAT(error_of([&] { w.declare("a", DType::f32, {1}); }), AllOf(HasSubstr(p), HasSubstr("'a' declared twice")));
    EXPECT_THAT(error_of([&] { w.declare("__metadata__", DType::f32, {1}); }), HasSubstr("not a valid tensor name"));
    EXPECT_THAT(error_of([&] { w.declare("neg", DType::f32, {2, -1}); }), HasSubstr("negative dimension"));
    EXPECT_THAT(error_of([&] { w.declare("huge", DType::f32, {int64_t{1} << 40, int64_t{1} << 40}); }), HasSubstr("too large"));
    EXPECT_THAT(error_of([&] { w.write("c", buf.data(), 4); }), AllOf(HasSubstr("'c'"), HasSubstr("never declared")));
    EXPECT_THAT(error_of([&] { w.write("b", buf.data(), 4); }), AllOf(HasSubstr("out of order"), HasSubstr("'a'")));
    w.write("a", buf.data(), 4);
    EXPECT_THAT(error_of([&] { w.write("a", buf.data(), 8); }), AllOf(HasSubstr("'a'"), HasSubstr("overflow")));
    EXPECT_THAT(error_of([&] { w.declare("late", DType::f32, {1}); }), HasSubstr("after writing began"));
    w.write("a", buf.data(), 4);
    EXPECT_THAT(error_of([&] { w.write("a", buf.data(), 1); }), HasSubstr("overflow"));
    w.write("b", buf.data(), 4);
    EXPECT_THAT(error_of([&] { w.finish(); }), AllOf(HasSubstr(p), HasSubstr("'b' is incomplete")));
    EXPECT_TRUE(std::filesystem::exists(p + ".tmp"));
  }
  // Destroyed without a successful finish: no file under either name.
  EXPECT_FALSE(std::filesystem::exists(p + ".tmp"));
  EXPECT_FALSE(std::filesystem::exists(p));
  EXPECT_THAT(error_of([&] { SafetensorsWriter w(dir / "no/such/dir/x.safetensors"); }), HasSubstr("cannot create"));
}

TEST(Safetensors, WriterWithOnlyEmptyTensorsFinishes) {
  ScratchDir dir;
  const std::string p = dir / "empty.safetensors";
  {
    SafetensorsWriter w(p);
    w.declare("e", DType::f32, {0, 3});
    w.finish();
    EXPECT_THAT(error_of([&] { w.finish(); }), HasSubstr("twice"));
  }
  SafetensorsFile f(p);
  EXPECT_EQ(f.names(), std::vector<std::string>{"e"});
}

// ---- Broken files ------------------------------------------------------------------------

TEST(Safetensors, FileShorterThan8BytesIsTruncated) {
  ScratchDir dir;
  EXPECT_THAT(open_error(dir, "\x05\0\0"), HasSubstr("truncated"));
  EXPECT_THAT(open_error(dir, ""), HasSubstr("truncated"));
}

TEST(Safetensors, MissingFileIsAnError) {
  ScratchDir dir;
  const std::string p = dir / "absent.safetensors";
  EXPECT_THAT(error_of([&] { SafetensorsFile f(p); }), AllOf(HasSubstr(p), HasSubstr("cannot open")));
  EXPECT_THAT(error_of([&] { SafetensorsFile f(dir.str()); }), HasSubstr("not a regular file"));
}

TEST(Safetensors, HeaderLengthPastEndOfFile) {
  ScratchDir dir;
  std::string raw = safetensors_bytes("{}");
  raw[0] = 100;
  EXPECT_THAT(open_error(dir, raw), AllOf(HasSubstr("header length 100"), HasSubstr("past the end of the file")));
  raw = safetensors_bytes("{}");
  std::memset(raw.data(), 0xff, 8);  // 2^64 - 1: must not wrap around when added to 8
  EXPECT_THAT(open_error(dir, raw), HasSubstr("past the end of the file"));
  // The real file, cut short in the middle of its header.
  const std::string p = dir / "good.safetensors";
  save_safetensors(p, {{"w", iota({4}, DType::f32)}});
  EXPECT_THAT(open_error(dir, read_file(p).substr(0, 20)), HasSubstr("past the end of the file"));
}

TEST(Safetensors, MalformedHeaderJson) {
  ScratchDir dir;
  EXPECT_THAT(open_error(dir, safetensors_bytes(R"({"w": {"dtype": "F32",)")), HasSubstr("malformed safetensors header JSON"));
  EXPECT_THAT(open_error(dir, safetensors_bytes("")), HasSubstr("malformed safetensors header JSON"));
  EXPECT_THAT(open_error(dir, safetensors_bytes(std::string("{\"w\xff\": 1}"))), HasSubstr("malformed"));
  EXPECT_THAT(open_error(dir, safetensors_bytes(std::string(10000, '[') + std::string(10000, ']'))), HasSubstr("nests deeper"));
  EXPECT_THAT(open_error(dir, one_entry(R"({"dtype":"F32","shape":[6],"data_offsets":[0,24],"dtype":"F32"})")),
              HasSubstr("'dtype' twice"));
  EXPECT_THAT(open_error(dir, safetensors_bytes(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                                R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                                std::string(8, '\0'))),
              HasSubstr("'w' twice"));
}

TEST(Safetensors, HeaderNotAnObjectOrEntryMissingKeys) {
  ScratchDir dir;
  EXPECT_THAT(open_error(dir, safetensors_bytes("[1, 2]")), HasSubstr("header is not a JSON object"));
  EXPECT_THAT(open_error(dir, safetensors_bytes("\"text\"")), HasSubstr("header is not a JSON object"));
  EXPECT_THAT(open_error(dir, one_entry("3")), AllOf(HasSubstr("tensor 'w'"), HasSubstr("not a JSON object")));
  EXPECT_THAT(open_error(dir, one_entry(R"({"shape":[6],"data_offsets":[0,24]})")),
              AllOf(HasSubstr("tensor 'w'"), HasSubstr("no 'dtype'")));
  EXPECT_THAT(open_error(dir, one_entry(R"({"dtype":"F32","data_offsets":[0,24]})")),
              AllOf(HasSubstr("tensor 'w'"), HasSubstr("no 'shape'")));
  EXPECT_THAT(open_error(dir, one_entry(R"({"dtype":"F32","shape":[6]})")),
              AllOf(HasSubstr("tensor 'w'"), HasSubstr("no 'data_offsets'")));
  EXPECT_THAT(open_error(dir, one_entry(R"({"dtype":7,"shape":[6],"data_offsets":[0,24]})")), HasSubstr("not a string"));
  EXPECT_THAT(open_error(dir, one_entry(R"({"dtype":"F32","shape":6,"data_offsets":[0,24]})")), HasSubstr("not an array"));
  EXPECT_THAT(open_error(dir, one_entry(R"({"dtype":"F32","shape":[6],"data_offsets":[0]})")),
              HasSubstr("is not [begin, end]"));
  EXPECT_THAT(open_error(dir, safetensors_bytes(R"({"__metadata__":{"a":1}})")),
              AllOf(HasSubstr("__metadata__"), HasSubstr("'a' is not a string")));
  EXPECT_THAT(open_error(dir, safetensors_bytes(R"({"__metadata__":[]})")), HasSubstr("__metadata__ is not a JSON object"));
}

TEST(Safetensors, UnsupportedDtypeNamesTensorAndDtype) {
  ScratchDir dir;
  for (const std::string dt : {"F64", "U16", "BOOL", "F8_E5M2", "bf16", "Q4_0"})
    EXPECT_THAT(open_error(dir, one_entry(R"({"dtype":")" + dt + R"(","shape":[3],"data_offsets":[0,24]})")),
                AllOf(HasSubstr("tensor 'w'"), HasSubstr("unsupported dtype '" + dt + "'")));
}

TEST(Safetensors, NegativeOrNonIntegerShape) {
  ScratchDir dir;
  EXPECT_THAT(open_error(dir, one_entry(R"({"dtype":"F32","shape":[-1,6],"data_offsets":[0,24]})")),
              AllOf(HasSubstr("tensor 'w'"), HasSubstr("shape value -1 is negative")));
  EXPECT_THAT(open_error(dir, one_entry(R"({"dtype":"F32","shape":[2.5],"data_offsets":[0,24]})")),
              AllOf(HasSubstr("tensor 'w'"), HasSubstr("not a non-negative integer")));
  EXPECT_THAT(open_error(dir, one_entry(R"({"dtype":"F32","shape":["6"],"data_offsets":[0,24]})")),
              HasSubstr("not a non-negative integer"));
  EXPECT_THAT(open_error(dir, one_entry(R"({"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,24]})")),
              HasSubstr("too large"));
  // Each dim fits, the product does not: must be caught before it overflows.
  EXPECT_THAT(open_error(dir, one_entry(R"({"dtype":"F32","shape":[4294967296,4294967296,0],"data_offsets":[0,0]})")),
              HasSubstr("too many elements"));
  EXPECT_THAT(open_error(dir, one_entry(R"({"dtype":"I64","shape":[4611686018427387904],"data_offsets":[0,24]})")),
              HasSubstr("too large"));
  EXPECT_THAT(open_error(dir, one_entry(R"({"dtype":"F32","shape":[6],"data_offsets":[-8,24]})")),
              HasSubstr("data_offsets value -8 is negative"));
}

TEST(Safetensors, OffsetsOutOfRange) {
  ScratchDir dir;
  EXPECT_THAT(open_error(dir, one_entry(R"({"dtype":"F32","shape":[6],"data_offsets":[8,32]})")),
              AllOf(HasSubstr("tensor 'w'"), HasSubstr("past the end of the data section (24 bytes")));
  EXPECT_THAT(open_error(dir, one_entry(R"({"dtype":"F32","shape":[6],"data_offsets":[0,24]})", 20)),
              HasSubstr("past the end of the data section"));
  EXPECT_THAT(open_error(dir, one_entry(R"({"dtype":"F32","shape":[0],"data_offsets":[18446744073709551615,18446744073709551615]})")),
              HasSubstr("too large"));
}

TEST(Safetensors, BeginAfterEnd) {
  ScratchDir dir;
  EXPECT_THAT(open_error(dir, one_entry(R"({"dtype":"F32","shape":[6],"data_offsets":[24,0]})")),
              AllOf(HasSubstr("tensor 'w'"), HasSubstr("begin after end")));
}

TEST(Safetensors, OverlappingByteRanges) {
  ScratchDir dir;
  const std::string msg = open_error(
      dir, safetensors_bytes(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})",
                             std::string(20, '\0')));
  EXPECT_THAT(msg, AllOf(HasSubstr("'a'"), HasSubstr("'b'"), HasSubstr("overlap")));
  // Same range twice.
  EXPECT_THAT(open_error(dir, safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                                R"("b":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})",
                                                std::string(4, '\0'))),
              HasSubstr("overlap"));
  // Empty tensors hold no bytes, so they overlap nothing.
  const std::string p = dir / "ok.safetensors";
  write_file(p, safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                  R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
                                  std::string(8, '\0')));
  EXPECT_EQ(SafetensorsFile(p).names(), (std::vector<std::string>{"a", "e"}));
}

TEST(Safetensors, ShapeTimesDtypeSizeMustMatchByteRange) {
  ScratchDir dir;
  EXPECT_THAT(open_error(dir, one_entry(R"({"dtype":"F32","shape":[2,3],"data_offsets":[0,12]})")),
              AllOf(HasSubstr("tensor 'w'"), HasSubstr("[2, 3] of f32 needs 24 bytes"), HasSubstr("hold 12")));
  EXPECT_THAT(open_error(dir, one_entry(R"({"dtype":"BF16","shape":[6],"data_offsets":[0,24]})")),
              HasSubstr("needs 12 bytes"));
}

TEST(Safetensors, MissingTensorNamesFileAndTensor) {
  ScratchDir dir;
  const std::string p = dir / "m.safetensors";
  save_safetensors(p, {{"w", iota({2}, DType::f32)}});
  SafetensorsFile f(p);
  const std::string want = p + ": no tensor 'nope'";
  EXPECT_THAT(error_of([&] { f.info("nope"); }), HasSubstr(want));
  EXPECT_THAT(error_of([&] { f.view("nope"); }), HasSubstr(want));
  EXPECT_THAT(error_of([&] { f.read("nope"); }), HasSubstr(want));
  EXPECT_THAT(error_of([&] { f.read_rows("nope", 0, 1); }), HasSubstr(want));
  EXPECT_THAT(error_of([&] { f.read_cols("nope", 0, 1); }), HasSubstr(want));
}

// ---- Fuzzing -----------------------------------------------------------------------------

// Opens a possibly broken file and touches every tensor every way; throws linnet::Error only.
static void exercise(const std::string& path) {
  SafetensorsFile f(path);
  (void)f.metadata();
  for (const std::string& name : f.names()) {
    const TensorInfo& ti = f.info(name);
    Tensor v = f.view(name);
    if (is_float(ti.dtype)) (void)v.to_floats();
    else (void)v.to_ints();
    (void)f.read(name);
    if (ti.shape.rank() >= 1) {
      (void)f.read_rows(name, 0, ti.shape[0]);
      (void)f.read_rows(name, ti.shape[0] / 2, ti.shape[0]);
    }
    if (ti.shape.rank() == 2) (void)f.read_cols(name, ti.shape[1] / 3, ti.shape[1]);
  }
}

// Rewrites the file in place: truncating and refilling it thousands of times makes the
// filesystem free and discard blocks each time, which is slower than the test by far.
static void overwrite_file(const std::string& path, const std::string& bytes) {
  {
    std::fstream out(path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(out.good()) << path;
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(out.good()) << path;
  }
  if (std::filesystem::file_size(path) != bytes.size()) std::filesystem::resize_file(path, bytes.size());
}

TEST(Safetensors, FuzzedFilesLoadOrThrowNeverCrash) {
  ScratchDir dir;
  const std::string good = dir / "good.safetensors";
  save_safetensors(good, {{"a", iota({2, 3}, DType::f32)}, {"b", iota({4}, DType::bf16)},
                          {"c", iota({2}, DType::i64)}, {"e", Tensor::empty({0, 3}, DType::f16)},
                          {"s", iota({}, DType::i32)}, {"m", iota({3, 2}, DType::f16)}},
                   {{"format", "pt"}});
  const std::string base = read_file(good);
  uint64_t header_len = 0;
  std::memcpy(&header_len, base.data(), 8);
  ASSERT_LT(8 + header_len, base.size());

  std::mt19937_64 rng(20240607);
  auto pick = [&](uint64_t n) { return static_cast<size_t>(rng() % n); };
  const std::string tokens = "{}[]\",:-0123456789.eE \\tuf\n";
  const std::string p = dir / "fuzz.safetensors";
  write_file(p, base);
  int loaded = 0, rejected = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::string b = base;
    std::string what;
    const size_t kind = pick(20);
    if (kind < 14) {  // header bytes: JSON punctuation and digits mostly, random bytes too
      for (size_t k = 0, n = pick(2) ? 1 : 2 + pick(3); k < n; ++k) {
        const size_t at = 8 + pick(header_len);
        b[at] = pick(3) ? tokens[pick(tokens.size())] : static_cast<char>(rng());
      }
      what = "header bytes";
    } else if (kind < 16) {  // truncation anywhere
      b.resize(pick(b.size()));
      what = "truncated to " + std::to_string(b.size());
    } else if (kind < 18) {  // the 8-byte length: nudged, one byte replaced, or anything
      uint64_t n = header_len;
      const size_t how = pick(3);
      if (how == 0) n += static_cast<uint64_t>(static_cast<int64_t>(pick(33)) - 16);
      if (how == 1) n ^= uint64_t{0xff} << (8 * pick(8));
      if (how == 2) n = rng();
      std::memcpy(b.data(), &n, 8);
      what = "length " + std::to_string(n);
    } else if (kind < 19) {  // insert or delete a header byte (shifts the data section)
      const size_t at = 8 + pick(header_len);
      if (pick(2)) b.insert(at, 1, tokens[pick(tokens.size())]);
      else b.erase(at, 1);
      what = "insert/delete";
    } else {  // any byte at all, data included
      b[pick(b.size())] = static_cast<char>(rng());
      what = "any byte";
    }
    overwrite_file(p, b);
    try {
      exercise(p);
      ++loaded;
    } catch (const Error&) {
      ++rejected;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "iteration " << iter << " (" << what << "): non-linnet exception " << e.what();
    }
  }
  // Both outcomes must be common, or the mutations are not exercising the parser.
  EXPECT_GT(loaded, 100);
  EXPECT_GT(rejected, 1000);
  std::printf("fuzz: %d loaded, %d rejected\n", loaded, rejected);
}
