//===- MetadataReaderTest.cpp - the runtime's metadata reader -------------===//
//
// Inline YAML the reader must accept and must refuse (each error with its
// line and column), inputs that are not NUL terminated or are nested without
// end, and agreement with the writer: metadata built with tally::Metadata,
// written by its yaml-cpp emitter (toYAML) and read back by the runtime's
// reader, field by field, including strings that need quoting and escapes.
//
//===----------------------------------------------------------------------===//

#include "tally/Runtime/MetadataReader.h"
#include "tally/Metadata/Metadata.h"

#include "gtest/gtest.h"

#include <cstring>
#include <memory>
#include <random>

using namespace tally;
using namespace tally::rt;

namespace {

/// Parses a copy of \p Text in a buffer of exactly its size, so a read past
/// the end is caught by ASan.
bool parse(const std::string &Text, ModuleMetadata &M, std::string &Error) {
  std::unique_ptr<char[]> Buf(new char[Text.size() ? Text.size() : 1]);
  std::memcpy(Buf.get(), Text.data(), Text.size());
  return parseModuleMetadata(std::string_view(Buf.get(), Text.size()), M,
                             Error);
}

ModuleMetadata parseOK(const std::string &Text) {
  ModuleMetadata M;
  std::string Error;
  EXPECT_TRUE(parse(Text, M, Error)) << Error << "\nin:\n" << Text;
  return M;
}

std::string errorOf(const std::string &Text) {
  ModuleMetadata M;
  std::string Error;
  if (parse(Text, M, Error))
    return "(accepted)";
  EXPECT_TRUE(M.Kernels.empty()) << "output left filled after an error";
  return Error;
}

// What tally-opt writes for a kernel with both variants, a partial one with
// a quoted reason and notes, and a rejected one.
const char *RealOutput = R"YAML(tally_metadata_version: 1
kernels:
  - name: block_sum
    status: transformed
    resources:
      - {arch: sm_90a, registers: 12, shared: 0, stack: 0, spill_stores: 0, spill_loads: 0, max_threads: 1024}
    variants:
      - kind: slice
        name: block_sum__tally_slice
        original_param_bytes: 20
        param_bytes: 36
        extra_params:
          - {name: __tly_slice_offset, role: slice_offset, type: u32, offset: 20, size: 4}
          - {name: __tly_grid_x, role: grid_x, type: u32, offset: 24, size: 4}
          - {name: __tly_grid_y, role: grid_y, type: u32, offset: 28, size: 4}
          - {name: __tly_grid_z, role: grid_z, type: u32, offset: 32, size: 4}
        resources:
          - {arch: sm_90a, registers: 12, shared: 0, stack: 0, spill_stores: 0, spill_loads: 0, max_threads: 1024}
      - kind: ptb
        name: block_sum__tally_ptb
        original_param_bytes: 20
        param_bytes: 48
        barrier_id: 0
        extra_params:
          - {name: __tly_ctrl, role: control, type: u64, offset: 24, size: 8}
          - {name: __tly_grid_x, role: grid_x, type: u32, offset: 32, size: 4}
          - {name: __tly_grid_y, role: grid_y, type: u32, offset: 36, size: 4}
          - {name: __tly_grid_z, role: grid_z, type: u32, offset: 40, size: 4}
          - {name: __tly_chunk, role: chunk, type: u32, offset: 44, size: 4}
        resources:
          - {arch: sm_90a, registers: 16, shared: 32, stack: 0, spill_stores: 0, spill_loads: 0, max_threads: 1024}
  - name: _Z6strideILi4EEvPfi
    status: partial
    reason: "ptb: the variant spills (2764 bytes at 255 registers, the original uses 255)"
    reads_grid_size: true
    notes:
      - "reads %nctaid: grid-stride or persistent loop; variants keep the original grid size"
    variants:
      - kind: slice
        name: _Z6strideILi4EEvPfi__tally_slice
        original_param_bytes: 12
        param_bytes: 32
        extra_params:
          - {name: __tly_slice_offset, role: slice_offset, type: u32, offset: 12, size: 4}
          - {name: __tly_grid_x, role: grid_x, type: u32, offset: 16, size: 4}
          - {name: __tly_grid_y, role: grid_y, type: u32, offset: 20, size: 4}
          - {name: __tly_grid_z, role: grid_z, type: u32, offset: 24, size: 4}
  - name: grid_sync
    status: rejected
    reason: "slice: grid-wide synchronisation; ptb: grid-wide synchronisation"
    variants:
      []
)YAML";

TEST(MetadataReader, RealOutput) {
  ModuleMetadata M = parseOK(RealOutput);
  ASSERT_EQ(M.Kernels.size(), 3u);
  const KernelMetadata *K = M.find("block_sum");
  ASSERT_NE(K, nullptr);
  EXPECT_FALSE(K->ReadsGridSize);
  EXPECT_EQ(K->Reason, "");
  ASSERT_EQ(K->Variants.size(), 2u);
  const VariantInfo *S = K->find(VariantKind::Slice);
  ASSERT_NE(S, nullptr);
  EXPECT_EQ(S->Name, "block_sum__tally_slice");
  EXPECT_EQ(S->OriginalParamBytes, 20u);
  EXPECT_EQ(S->ParamBytes, 36u);
  ASSERT_EQ(S->Extra.size(), 4u);
  EXPECT_EQ(S->Extra[0].Role, ParamRole::SliceOffset);
  EXPECT_EQ(S->Extra[0].Offset, 20u);
  EXPECT_EQ(S->Extra[3].Role, ParamRole::GridZ);
  EXPECT_EQ(S->Extra[3].Offset, 32u);
  const VariantInfo *P = K->find(VariantKind::Ptb);
  ASSERT_NE(P, nullptr);
  EXPECT_EQ(P->ParamBytes, 48u);
  ASSERT_EQ(P->Extra.size(), 5u);
  EXPECT_EQ(P->Extra[0].Role, ParamRole::Control);
  EXPECT_EQ(P->Extra[0].Size, 8u);
  EXPECT_EQ(P->Extra[4].Role, ParamRole::Chunk);
  EXPECT_EQ(P->Extra[4].Offset, 44u);

  K = M.find("_Z6strideILi4EEvPfi");
  ASSERT_NE(K, nullptr);
  EXPECT_TRUE(K->ReadsGridSize);
  EXPECT_EQ(K->Reason, "ptb: the variant spills (2764 bytes at 255 registers, "
                       "the original uses 255)");
  EXPECT_EQ(K->Variants.size(), 1u);
  EXPECT_EQ(K->find(VariantKind::Ptb), nullptr);

  K = M.find("grid_sync");
  ASSERT_NE(K, nullptr);
  EXPECT_TRUE(K->Variants.empty());
  EXPECT_EQ(M.find("nope"), nullptr);
}

const char *Head = "tally_metadata_version: 1\nkernels:\n";

/// A kernel "k" whose slice variant has the given extra_params lines
/// (original 8 bytes, param_bytes as given).
std::string sliceKernel(const std::string &Extra, uint64_t ParamBytes = 24) {
  return std::string(Head) +
         "  - name: k\n"
         "    variants:\n"
         "      - kind: slice\n"
         "        name: k__tally_slice\n"
         "        original_param_bytes: 8\n"
         "        param_bytes: " +
         std::to_string(ParamBytes) +
         "\n"
         "        extra_params:\n" +
         Extra;
}

const char *GoodSliceParams =
    "          - {role: slice_offset, type: u32, offset: 8, size: 4}\n"
    "          - {role: grid_x, type: u32, offset: 12, size: 4}\n"
    "          - {role: grid_y, type: u32, offset: 16, size: 4}\n"
    "          - {role: grid_z, type: u32, offset: 20, size: 4}\n";

TEST(MetadataReader, MinimalAndEmpty) {
  EXPECT_TRUE(
      parseOK("tally_metadata_version: 1\nkernels: []\n").Kernels.empty());
  EXPECT_TRUE(
      parseOK("tally_metadata_version: 1\nkernels:\n  []").Kernels.empty());
  // The version may follow the kernels; no final line break.
  EXPECT_TRUE(
      parseOK("kernels: []\ntally_metadata_version: 1").Kernels.empty());
  // A kernel without variants, or with an empty sequence of them.
  ModuleMetadata M = parseOK(std::string(Head) +
                             "  - name: a\n  - name: b\n    variants: []\n");
  ASSERT_EQ(M.Kernels.size(), 2u);
  EXPECT_TRUE(M.Kernels[0].Variants.empty());
  M = parseOK(sliceKernel(GoodSliceParams));
  ASSERT_EQ(M.Kernels.size(), 1u);
  ASSERT_EQ(M.Kernels[0].Variants.size(), 1u);
  EXPECT_EQ(M.Kernels[0].Variants[0].Extra.size(), 4u);
}

TEST(MetadataReader, YAMLForms) {
  // Comments, block mappings for the parameters, a sequence at its key's
  // indentation, "key : value", a flow mapping over two lines, quoted keys
  // and values, and extra spaces.
  const char *Text = R"YAML(# written by hand
tally_metadata_version: 1   # the version
kernels:
- name: 'it''s'
  reads_grid_size: false
  "reason"  :   'ptb: "x"'
  variants:
  -   kind: slice
      name : "k\x41\u00e9\U0001F600\t\"\\\/\N\_\L\P z\ \e\a\b\v\f\r"
      original_param_bytes: 008
      param_bytes: 24
      extra_params:
        - role: slice_offset
          type: u32
          offset: 8
          size: 4
        - {role: grid_x, type: u32,
           offset: 12, size: 4}   # continued
        - {role: grid_y,type: u32,offset: 16,size: 4,}
        -
          role: grid_z
          type: u32
          offset: 20
          size: 4

)YAML";
  ModuleMetadata M = parseOK(Text);
  ASSERT_EQ(M.Kernels.size(), 1u);
  const KernelMetadata &K = M.Kernels[0];
  EXPECT_EQ(K.Name, "it's");
  EXPECT_EQ(K.Reason, "ptb: \"x\"");
  EXPECT_FALSE(K.ReadsGridSize);
  ASSERT_EQ(K.Variants.size(), 1u);
  EXPECT_EQ(K.Variants[0].OriginalParamBytes, 8u);
  ASSERT_EQ(K.Variants[0].Extra.size(), 4u);
  EXPECT_EQ(K.Variants[0].Extra[3].Offset, 20u);
}

TEST(MetadataReader, Escapes) {
  auto Name = [](const std::string &Quoted) {
    ModuleMetadata M =
        parseOK(std::string(Head) + "  - name: " + Quoted + "\n");
    return M.Kernels.empty() ? std::string("(none)") : M.Kernels[0].Name;
  };
  EXPECT_EQ(Name(R"("k\x41\u00e9\U0001F600\t\"\\\/\N\_\L\P z\ \e\a\b\v\f\r")"),
            "kA\xc3\xa9\xf0\x9f\x98\x80\t\"\\/\xc2\x85\xc2\xa0\xe2\x80\xa8"
            "\xe2\x80\xa9 z \x1b\x07\x08\x0b\x0c\x0d");
  EXPECT_EQ(Name("'a''b\"\\n'"), "a'b\"\\n");
  EXPECT_EQ(Name("''''"), "'");
  // Plain scalars: everything up to the end of the line or " #".
  EXPECT_EQ(Name("a:b #c"), "a:b");
  EXPECT_EQ(Name("q\"uote back\\slash a#b"), "q\"uote back\\slash a#b");
  EXPECT_EQ(Name("-x"), "-x");
  EXPECT_EQ(Name(":x"), ":x");
  EXPECT_EQ(Name("true"), "true");
  EXPECT_EQ(Name("caf\xc3\xa9 \xff\x7f"), "caf\xc3\xa9 \xff\x7f");
  EXPECT_EQ(Name("\"\xff\t\""), "\xff\t");
}

TEST(MetadataReader, SkipsWhatItDoesNotRead) {
  // Unknown keys at every level (nested collections included), notes,
  // resources, barrier ids, and a variant of a kind it does not know.
  std::string Text =
      std::string("future: {a: [1, [2, {b: c}]], d: ~}\n") +
      "future_list:\n  - - x\n    - y\n  -\n    z: 1\n" + Head +
      "  - name: k\n"
      "    status: something_new\n"
      "    notes: [\"a\", 'b']\n"
      "    future: \n"
      "    variants:\n"
      "      - kind: fancy\n"
      "        whatever: [1, 2]\n"
      "        extra_params: {not: a list}\n"
      "      - kind: slice\n"
      "        name: k__tally_slice\n"
      "        original_param_bytes: 8\n"
      "        param_bytes: 24\n"
      "        barrier_id: 3\n"
      "        extra_params:\n" +
      "          - {role: slice_offset, type: u32, offset: 8, "
      "size: 4, name: x, future: [1]}\n" +
      "          - {role: grid_x, type: u32, offset: 12, size: 4}\n"
      "          - {role: grid_y, type: u32, offset: 16, size: 4}\n"
      "          - {role: grid_z, type: u32, offset: 20, size: 4}\n"
      "        resources:\n"
      "          - {arch: sm_90a, registers: 12}\n";
  ModuleMetadata M = parseOK(Text);
  ASSERT_EQ(M.Kernels.size(), 1u);
  ASSERT_EQ(M.Kernels[0].Variants.size(), 1u);
  EXPECT_EQ(M.Kernels[0].Variants[0].Kind, VariantKind::Slice);
}

struct BadCase {
  std::string Text;
  std::string Error;
};

TEST(MetadataReader, SyntaxErrors) {
  const BadCase Cases[] = {
      {"", "1:1: empty metadata"},
      {"# nothing\n\n", "3:1: empty metadata"},
      {"a: 1\n b: 2\n", "2:2: unexpected indentation"},
      {"a:\n  - x\n  y: 1\n", "3:3: unexpected indentation"
                              ""},
      {"a: b: c\n", "1:4: mapping values are not allowed here (quote the "
                    "scalar if it holds ': ')"},
      {"a: \"b\": c\n", "1:4: mapping values are not allowed here"},
      {"a: 1\nb\n", "2:1: expected ':' after the mapping key"},
      {"a: 1\na: 2\n", "2:1: duplicate key 'a'"},
      {"a: {x: 1, x: 2}\n", "1:11: duplicate key 'x'"},
      {"a: {x: 1\n", "1:4: unterminated flow mapping"},
      {"a: [1, 2\n", "1:4: unterminated flow sequence"},
      {"a: {x: 1 y: 2}\n", "1:8: mapping values are not allowed here"},
      {"a: {x 1}\n", "1:5: expected ':' after the mapping key"},
      {"a: [x: 1]\n", "1:5: mapping values are not allowed here"},
      {"a: {x: 1}}\n", "1:10: unexpected '}' after the value"},
      {"a: {x: 1, , y: 2}\n", "1:11: unexpected ','"},
      {"a: {[x]: 1}\n", "1:5: complex mapping keys are not supported"},
      {"a: \"abc\n", "1:8: line break in a quoted scalar (tally-opt writes "
                     "them as \\n)"},
      {"a: \"abc", "1:4: unterminated quoted scalar"},
      {"a: 'abc", "1:4: unterminated quoted scalar"},
      {"a: \"\\q\"", "1:5: unknown escape sequence '\\q'"},
      {"a: \"\\x4\"", "1:5: expected 2 hexadecimal digits after '\\x'"},
      {"a: \"\\ud800\"", "1:5: escape sequence for an invalid code point"},
      {"a: \"\\U00110000\"", "1:5: escape sequence for an invalid code point"},
      {"a: \"\\", "1:5: unterminated escape sequence"},
      {"a: \"x\" y\n", "1:8: unexpected 'y' after the value"},
      {"a: \"x\"# c\n", "1:7: unexpected '#' after the value"},
      {"a: &x 1\n", "1:4: anchors, aliases and tags are not supported"},
      {"a: !!str 1\n", "1:4: anchors, aliases and tags are not supported"},
      {"a: |\n  x\n", "1:4: block scalars are not supported"},
      {"a: - x\n", "1:4: a block sequence must start on a new line"},
      {"\ta: 1\n", "1:1: tab character in indentation"},
      {"a:\t1\n", "1:3: tab characters are only allowed in quoted scalars"},
      {"a: x\x01y\n", "1:5: control character byte 0x01 in a plain scalar"},
      {"a: \"x\x01\"\n", "1:6: control character byte 0x01 in a quoted scalar"},
      {"---\na: 1\n", "1:1: document markers are not supported"},
      {"a: 1\n...\n", "2:1: document markers are not supported"},
      {"a: 1\n- b\n", "2:1: expected a mapping key, found a sequence item"},
      {"- a\nb: 1\n", "2:1: unexpected content after the top-level node"},
      {"a:\n  b\n  c\n", "3:3: unexpected indentation"},
      {"a: {x: 1,\ny: 2}\n", "2:1: a flow collection's lines must be indented "
                             "more than its parent"},
      {"a: [1]: 2\n", "1:7: mapping values are not allowed here"},
      {"a:\n  [1]: 2\n", "2:6: complex mapping keys are not supported"},
      {"a: %x\n", "1:4: unexpected '%'"},
      {"? a\n: b\n", "1:1: unexpected '?'"},
  };
  for (const BadCase &C : Cases)
    EXPECT_EQ(errorOf(C.Text), C.Error) << "in:\n" << C.Text;
}

TEST(MetadataReader, SchemaErrors) {
  const std::string H = Head;
  const BadCase Cases[] = {
      {"- a\n", "1:1: the metadata must be a mapping"},
      {"x\n", "1:1: the metadata must be a mapping"},
      {"kernels: []\n", "1:1: missing 'tally_metadata_version'"},
      {"tally_metadata_version: 2\nkernels: []\n",
       "1:25: unsupported metadata version 2 (this runtime reads version 1)"},
      {"tally_metadata_version: 123456789012345678901234567890\n",
       "1:25: unsupported metadata version 123456789012345678901234567890 "
       "(this "
       "runtime reads version 1)"},
      {"tally_metadata_version: \"1\"\nkernels: []\n",
       "1:25: 'tally_metadata_version' must be an unsigned integer"},
      {"tally_metadata_version: -1\nkernels: []\n",
       "1:25: 'tally_metadata_version' must be an unsigned integer"},
      {"tally_metadata_version: 1\n", "1:1: missing 'kernels'"},
      {"tally_metadata_version: 1\nkernels: {}\n",
       "2:10: 'kernels' must be a sequence"},
      {"tally_metadata_version: 1\nkernels:\n",
       "2:1: 'kernels' must be a sequence"},
      {H + "  - x\n", "3:5: a kernel must be a mapping"},
      {H + "  - status: transformed\n", "3:5: missing 'name'"},
      {H + "  - name: [k]\n", "3:11: 'name' must be a string"},
      {H + "  - name: \"\"\n", "3:11: empty kernel name"},
      {H + "  - name: \"a\\0b\"\n", "3:11: 'name' holds a NUL character"},
      {H + "  - name: k\n    reason:\n", "4:5: 'reason' must be a string"},
      {H + "  - name: k\n    reads_grid_size: yes\n",
       "4:22: 'reads_grid_size' must be true or false"},
      {H + "  - name: k\n    reads_grid_size: \"true\"\n",
       "4:22: 'reads_grid_size' must be true or false"},
      {H + "  - name: k\n  - name: k\n", "4:11: kernel 'k' is listed twice"},
      {H + "  - name: k\n    variants: {}\n",
       "4:15: 'variants' must be a sequence"},
      {H + "  - name: k\n    variants: [1]\n",
       "4:16: a variant must be a mapping"},
      {H + "  - name: k\n    variants:\n      - name: v\n",
       "5:9: missing 'kind'"},
      // Semantic errors in a slice variant (sliceKernel: original 8 bytes).
      {sliceKernel(GoodSliceParams, 40000),
       "8:22: param_bytes 40000 exceeds CUDA's limit of 32764 bytes"},
      {sliceKernel(GoodSliceParams, 4),
       "7:31: original_param_bytes 8 exceeds param_bytes 4"},
      {sliceKernel(GoodSliceParams, 4294967296u),
       "8:22: 'param_bytes' is out of range (4294967296 does not fit in 32 "
       "bits)"},
      {sliceKernel("          - {role: slice_offset, type: u32, offset: "
                   "99999999999999999999999999, size: 4}\n"),
       "10:53: 'offset' is out of range (99999999999999999999999999 does not "
       "fit in 32 bits)"},
      {sliceKernel("          - {role: slice_offset, type: u32, offset: 0x8, "
                   "size: 4}\n"),
       "10:53: 'offset' must be an unsigned integer"},
      {sliceKernel("          - {role: slice_offset, type: u32, offset: 8}\n"),
       "10:13: missing 'size'"},
      {sliceKernel("          - {role: slice_offset, type: u32, size: 4}\n"),
       "10:13: missing 'offset'"},
      {sliceKernel("          - {role: slice_offset, offset: 8, size: 4}\n"),
       "10:13: missing 'type'"},
      {sliceKernel("          - {type: u32, offset: 8, size: 4}\n"),
       "10:13: missing 'role'"},
      {sliceKernel("          - [1]\n"),
       "10:13: an extra parameter must be a mapping"},
      {sliceKernel(
           "          - {role: magic, type: u32, offset: 8, size: 4}\n"),
       "10:20: unknown role 'magic'"},
      {sliceKernel(
           "          - {role: chunk, type: u32, offset: 8, size: 4}\n"),
       "10:20: role 'chunk' is not used by slice variants"},
      {sliceKernel(
           "          - {role: grid_x, type: u32, offset: 8, size: 4}\n"
           "          - {role: grid_x, type: u32, offset: 12, size: 4}\n"),
       "11:20: role 'grid_x' appears twice"},
      {sliceKernel(
           "          - {role: grid_x, type: f32, offset: 8, size: 4}\n"),
       "10:34: unknown type 'f32'"},
      {sliceKernel(
           "          - {role: grid_x, type: u64, offset: 8, size: 8}\n"),
       "10:34: role 'grid_x' must have type u32"},
      {sliceKernel(
           "          - {role: grid_x, type: u32, offset: 8, size: 8}\n"),
       "10:56: size 8 does not match type u32"},
      {sliceKernel(
           "          - {role: grid_x, type: u32, offset: 10, size: 4}\n"),
       "10:47: offset 10 is not a multiple of 4"},
      {sliceKernel(
           "          - {role: grid_x, type: u32, offset: 4, size: 4}\n"),
       "10:47: offset 4 is inside the original parameters (8 bytes)"},
      {sliceKernel(
           "          - {role: grid_x, type: u32, offset: 24, size: 4}\n"),
       "10:47: the parameter at offset 24 ends past param_bytes (24)"},
      {sliceKernel("          - {role: grid_x, type: u32, offset: "
                   "4294967292, size: 4}\n"),
       "10:47: the parameter at offset 4294967292 ends past param_bytes (24)"},
      {sliceKernel(
           "          - {role: grid_x, type: u32, offset: 12, size: 4}\n"
           "          - {role: grid_y, type: u32, offset: 12, size: 4}\n"),
       "11:47: the parameter at offset 12 overlaps the one at offset 12"},
      {sliceKernel("          - {role: slice_offset, type: u32, offset: 8, "
                   "size: 4}\n"),
       "5:9: slice variant 'k__tally_slice' lacks the 'grid_x' parameter"},
      {sliceKernel("          []\n"),
       "5:9: slice variant 'k__tally_slice' lacks the 'slice_offset' "
       "parameter"},
      {sliceKernel("          {}\n"),
       "10:11: 'extra_params' must be a sequence"},
      {sliceKernel(std::string(GoodSliceParams) +
                   "      - kind: slice\n        name: again\n"),
       "14:15: kernel 'k' has two slice variants"},
  };
  for (const BadCase &C : Cases)
    EXPECT_EQ(errorOf(C.Text), C.Error) << "in:\n" << C.Text;
}

TEST(MetadataReader, PtbChecks) {
  auto Ptb = [](const std::string &Extra) {
    return std::string(Head) + "  - name: k\n    variants:\n" +
           "      - {kind: ptb, name: k__tally_ptb, original_param_bytes: 4,\n"
           "         param_bytes: 32, extra_params: [" +
           Extra + "]}\n";
  };
  const std::string Ctrl = "{role: control, type: u64, offset: 8, size: 8}, ";
  const std::string Grid = "{role: grid_x, type: u32, offset: 16, size: 4}, "
                           "{role: grid_y, type: u32, offset: 20, size: 4}, "
                           "{role: grid_z, type: u32, offset: 24, size: 4}";
  const std::string Chunk = ", {role: chunk, type: u32, offset: 28, size: 4}";
  ModuleMetadata M = parseOK(Ptb(Ctrl + Grid + Chunk));
  ASSERT_EQ(M.Kernels.size(), 1u);
  const VariantInfo *V = M.Kernels[0].find(VariantKind::Ptb);
  ASSERT_NE(V, nullptr);
  EXPECT_EQ(V->Extra.size(), 5u);
  EXPECT_EQ(errorOf(Ptb(Ctrl + Grid)),
            "5:9: ptb variant 'k__tally_ptb' lacks the 'chunk' parameter");
  EXPECT_EQ(errorOf(Ptb(Grid + Chunk)),
            "5:9: ptb variant 'k__tally_ptb' lacks the 'control' parameter");
  EXPECT_EQ(errorOf(Ptb("{role: control, type: u32, offset: 8, size: 4}")),
            "6:64: role 'control' must have type u64");
  EXPECT_EQ(errorOf(Ptb("{role: control, type: u64, offset: 4, size: 8}")),
            "6:77: offset 4 is not a multiple of 8");
  EXPECT_EQ(errorOf(Ptb("{role: slice_offset, type: u32, offset: 4, size: 4}")),
            "6:49: role 'slice_offset' is not used by ptb variants");
}

TEST(MetadataReader, NotNulTerminated) {
  // Views that stop inside a token: the reader sees only what is in the
  // view (parse() copies it into a buffer of exactly its size).
  std::string Full = sliceKernel(GoodSliceParams);
  for (size_t N = 0; N < Full.size(); ++N) {
    ModuleMetadata M;
    std::string Error;
    bool OK = parse(Full.substr(0, N), M, Error);
    EXPECT_TRUE(OK || !Error.empty());
  }
  // The version's digit is the last byte of the view; what follows in
  // memory must not be read as part of it.
  std::string Buf = "kernels: []\ntally_metadata_version: 12";
  ModuleMetadata M;
  std::string Error;
  EXPECT_TRUE(parseModuleMetadata(std::string_view(Buf.data(), Buf.size() - 1),
                                  M, Error))
      << Error;
}

TEST(MetadataReader, ReplacesItsOutput) {
  ModuleMetadata M;
  M.Kernels.emplace_back();
  M.Kernels.back().Name = "stale";
  std::string Error = "stale";
  EXPECT_FALSE(parseModuleMetadata("kernels: [", M, Error));
  EXPECT_TRUE(M.Kernels.empty());
  EXPECT_EQ(Error, "1:10: unterminated flow sequence");
  M.Kernels.emplace_back();
  EXPECT_TRUE(
      parseModuleMetadata(std::string(Head) + "  - name: fresh\n", M, Error));
  EXPECT_EQ(Error, "");
  ASSERT_EQ(M.Kernels.size(), 1u);
  EXPECT_EQ(M.Kernels[0].Name, "fresh");
}

TEST(MetadataReader, DeepNesting) {
  EXPECT_EQ(errorOf("a: " + std::string(100000, '[')),
            "1:35: nesting deeper than 32 levels");
  EXPECT_EQ(errorOf(std::string(100000, '{')),
            "1:2: complex mapping keys are not supported");
  std::string Block;
  for (int I = 0; I < 2000; ++I)
    Block += std::string(I, ' ') + "a:\n";
  EXPECT_EQ(errorOf(Block), "33:33: nesting deeper than 32 levels");
  std::string Dashes;
  for (int I = 0; I < 2000; ++I)
    Dashes += "- ";
  EXPECT_EQ(errorOf(Dashes + "x\n"), "1:65: nesting deeper than 32 levels");
}

//===----------------------------------------------------------------------===//
// Agreement with the writer
//===----------------------------------------------------------------------===//

ExtraParam extra(const char *Role, uint64_t Offset) {
  bool Ctrl = std::strcmp(Role, "control") == 0;
  return {std::string("__tly_") + Role, Ctrl ? "u64" : "u32", Offset,
          Ctrl ? 8u : 4u, Role};
}

VariantRecord slice(const std::string &Kernel, uint64_t Orig) {
  VariantRecord V;
  V.Kind = "slice";
  V.Name = Kernel + "__tally_slice";
  V.OriginalParamBytes = Orig;
  uint64_t O = (Orig + 3) / 4 * 4;
  for (const char *R : {"slice_offset", "grid_x", "grid_y", "grid_z"}) {
    V.ExtraParams.push_back(extra(R, O));
    O += 4;
  }
  V.ParamBytes = O;
  V.Res.push_back({"sm_90a", 40, 0, 0, 0, 0, 1024});
  return V;
}

VariantRecord ptb(const std::string &Kernel, uint64_t Orig) {
  VariantRecord V;
  V.Kind = "ptb";
  V.Name = Kernel + "__tally_ptb";
  V.OriginalParamBytes = Orig;
  V.BarrierId = 15;
  uint64_t O = (Orig + 7) / 8 * 8;
  V.ExtraParams.push_back(extra("control", O));
  O += 8;
  // Not in the writer's usual order: the reader keeps the metadata's order.
  for (const char *R : {"chunk", "grid_z", "grid_y", "grid_x"}) {
    V.ExtraParams.push_back(extra(R, O));
    O += 4;
  }
  V.ParamBytes = O + 4; // padding at the end
  V.Res.push_back({"sm_100a", 255, 49152, 16, 8, 8, 256});
  V.Res.push_back({"sm_90a", 128, 0, 0, 0, 0, 512});
  return V;
}

/// Checks that the reader's view of toYAML(M) is M's.
void expectAgreement(const Metadata &M) {
  std::string Text = M.toYAML();
  SCOPED_TRACE(Text);
  ModuleMetadata R = parseOK(Text);
  ASSERT_EQ(R.Kernels.size(), M.Kernels.size());
  for (size_t I = 0; I < M.Kernels.size(); ++I) {
    const KernelRecord &W = M.Kernels[I];
    const KernelMetadata &K = R.Kernels[I];
    EXPECT_EQ(K.Name, W.Name);
    EXPECT_EQ(K.Reason, W.Reason);
    EXPECT_EQ(K.ReadsGridSize, W.ReadsGridSize);
    ASSERT_EQ(K.Variants.size(), W.Variants.size());
    for (size_t J = 0; J < W.Variants.size(); ++J) {
      const VariantRecord &WV = W.Variants[J];
      const VariantInfo &V = K.Variants[J];
      EXPECT_EQ(V.Kind == VariantKind::Slice ? "slice" : "ptb", WV.Kind);
      EXPECT_EQ(V.Name, WV.Name);
      EXPECT_EQ(V.OriginalParamBytes, WV.OriginalParamBytes);
      EXPECT_EQ(V.ParamBytes, WV.ParamBytes);
      ASSERT_EQ(V.Extra.size(), WV.ExtraParams.size());
      for (size_t P = 0; P < V.Extra.size(); ++P) {
        static const char *Names[] = {"slice_offset", "grid_x", "grid_y",
                                      "grid_z",       "chunk",  "control"};
        EXPECT_EQ(Names[static_cast<int>(V.Extra[P].Role)],
                  WV.ExtraParams[P].Role);
        EXPECT_EQ(V.Extra[P].Offset, WV.ExtraParams[P].Offset);
        EXPECT_EQ(V.Extra[P].Size, WV.ExtraParams[P].Size);
      }
    }
  }
}

/// Strings that need the writer's quoting and escapes.
const char *Tricky[] = {
    "ptb: the kernel \"reads\" %nctaid; slice: grid-wide sync",
    "a: b",
    "x\ny\r\n\tz",
    "back\\slash \\n",
    "'single' quotes''",
    "# not a comment",
    "trailing #",
    " leading and trailing ",
    "- dash",
    "---",
    "...",
    "[flow] {like}, this",
    "x]y}",
    "true",
    "~",
    "null",
    "123",
    "caf\xc3\xa9 \xe2\x80\xa8 \xef\xbb\xbf \xc2\x85 \xf0\x9f\x98\x80",
    "ctl \x01\x1b\x7f",
    "?x",
    ":x",
    "-x",
    "&anchor *alias !tag |block >folded %dir @at `tick",
    "key:",
    "a,b",
    "",
};

TEST(MetadataReader, AgreesWithTheWriter) {
  Metadata M;
  {
    KernelRecord &K = M.getOrAddKernel("block_sum");
    K.Notes.push_back("plain note");
    K.OriginalRes.push_back({"sm_90a", 12, 0, 0, 0, 0, 1024});
    K.Variants.push_back(slice("block_sum", 20));
    K.Variants.push_back(ptb("block_sum", 20));
  }
  {
    KernelRecord &K = M.getOrAddKernel("_Z6strideILi4EEvPfi");
    K.ReadsGridSize = true;
    K.Reason = "ptb: the variant spills (8 bytes at 255 registers, \"the "
               "original\" uses 255)";
    K.Notes.push_back("reads %nctaid: grid-stride or persistent loop; "
                      "variants keep the original grid size");
    K.Notes.push_back("ptb: 1 barrier(s) go through the convergence block:\n"
                      "\"quoted\" and 'single'");
    K.Variants.push_back(slice("_Z6strideILi4EEvPfi", 13));
  }
  {
    KernelRecord &K = M.getOrAddKernel("grid_sync");
    K.Reason = "slice: grid-wide synchronisation; ptb: grid-wide "
               "synchronisation";
  }
  // Every tricky string as a kernel name, a variant name, a reason, a note
  // and a resource's architecture.
  for (const char *S : Tricky) {
    std::string Name = std::string(S) + "#k";
    KernelRecord &K = M.getOrAddKernel(Name);
    K.Reason = S;
    K.Notes.push_back(S);
    K.OriginalRes.push_back({S, 1, 2, 3, 4, 5, 6});
    K.ReadsGridSize = Name.size() % 2;
    VariantRecord V = ptb(Name, 4294967295u % 1000);
    V.Name = S[0] ? S : "x";
    V.Res[0].Arch = S;
    K.Variants.push_back(V);
  }
  M.finalize();
  expectAgreement(M);

  Metadata Empty;
  expectAgreement(Empty);
}

/// Random strings of valid UTF-8 (the writer turns invalid UTF-8 in quoted
/// strings into U+FFFD) without NUL (refused in names), biased towards
/// YAML's special characters.
std::string randomString(std::mt19937 &G) {
  static const char *Pieces[] = {":",
                                 " ",
                                 "#",
                                 "-",
                                 "'",
                                 "\"",
                                 "\\",
                                 "\n",
                                 "\t",
                                 "\r",
                                 "[",
                                 "]",
                                 "{",
                                 "}",
                                 ",",
                                 "?",
                                 "&",
                                 "*",
                                 "!",
                                 "|",
                                 ">",
                                 "%",
                                 "@",
                                 "`",
                                 "~",
                                 "a",
                                 "k",
                                 "1",
                                 "0",
                                 "\x01",
                                 "\x7f",
                                 "\xc3\xa9",
                                 "\xc2\x85",
                                 "\xe2\x80\xa8",
                                 "\xef\xbb\xbf",
                                 "\xf0\x9f\x98\x80",
                                 "---",
                                 "...",
                                 "true",
                                 "null",
                                 "x: y",
                                 " #",
                                 ": ",
                                 "\xc2\xa0"};
  size_t N = G() % 8;
  std::string S;
  for (size_t I = 0; I < N; ++I)
    S += Pieces[G() % (sizeof(Pieces) / sizeof(Pieces[0]))];
  return S;
}

TEST(MetadataReader, AgreesWithTheWriterOnRandomStrings) {
  std::mt19937 G(20240611);
  for (int Round = 0; Round < 300; ++Round) {
    Metadata M;
    for (int I = 0; I < 4; ++I) {
      std::string Name = randomString(G) + "k" + std::to_string(I);
      KernelRecord &K = M.getOrAddKernel(Name);
      K.Reason = randomString(G);
      K.ReadsGridSize = G() % 2;
      for (int J = G() % 3; J > 0; --J)
        K.Notes.push_back(randomString(G));
      if (G() % 2)
        K.OriginalRes.push_back({randomString(G), 1, 2, 3, 4, 5, 6});
      if (G() % 2) {
        K.Variants.push_back(slice(Name, G() % 4096));
        K.Variants.back().Name = randomString(G) + "s";
      }
      if (G() % 2) {
        K.Variants.push_back(ptb(Name, G() % 4096));
        K.Variants.back().Name = randomString(G) + "p";
        K.Variants.back().Res[0].Arch = randomString(G);
      }
    }
    M.finalize();
    expectAgreement(M);
    if (HasFailure())
      return;
  }
}

} // namespace
