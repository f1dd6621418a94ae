// The instruction set of the fpga target's int8 CNN accelerator, version 1 (csrc/target/fpga/ISA.md
// is the normative description; this file is its executable form): the layer descriptor, the
// encoder that turns a list of layers into the 32-bit word stream the host writes to the device's
// registers, the validating decoder the driver runs before it sends anything, a tolerant
// disassembler for people, and the analytic cost model.
//
// Precondition: none beyond the arguments' documented ranges; every violation is an InvalidInput
// naming the layer or word index, the field and the allowed values. Postcondition of decode: the
// returned layers are exactly the ones encode was given (round trip), every DMA region lies inside
// the device memory named in the header, no layer writes over what it reads or over any layer's
// weights or parameter table, and the stream's checksums matched — a stream that decodes may be
// executed; one that does not must never be.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dnnfusion::fpga {

// ---- constants of ISA version 1 ----
constexpr uint32_t kStreamMagic = 0x444E4641;  // "DNFA" read as a big-endian word
constexpr uint32_t kIsaVersion = 1;
constexpr uint64_t kDmaUnit = 64;                     // DMA offsets and memory size count 64-byte units
constexpr uint64_t kMaxMemoryBytes = uint64_t{1} << 32;
constexpr int kMaxChannels = 4096;                    // C and K (before padding to 8)
constexpr int kMaxSpatial = 2048;                     // H and W of a layer's input
constexpr int kMaxLayers = 4096;
constexpr int kHeaderWords = 4;
constexpr int kWordsPerLayer = 13;
constexpr int kParamEntryBytes = 16;                  // one per padded output channel

// Switch_REG values.
enum class LayerType : uint32_t {
  kConv3x3 = 1,      // 3x3 conv, stride 1|2, pad 0|1, folded BN, clamp activation
  kConv1x1 = 2,      // pointwise conv, stride 1|2, pad 0
  kDepthwise3x3 = 3, // depthwise 3x3, stride 1|2, pad 0|1
  kMaxPool = 4,      // max pool, kernel 1..8, stride 1..8, pad < kernel
  kAdd = 5,          // residual add of two int8 tensors, each requantized into the output scale
};

// Control_REG values (the state a CTRL word moves the device to).
enum class Control : uint32_t { kIdle = 0, kCompute = 1, kParam = 2, kReset = 3 };

// Register ids: the top 4 bits of every word after the header; id * 4 is the register's address
// offset in the device's register file (Control_REG 0x00, Switch_REG 0x04, Reg0 0x08 ... Reg7 0x24).
enum class RegId : uint32_t {
  kCtrl = 0x0, kSwitch = 0x1,
  kReg0 = 0x2, kReg1 = 0x3, kReg2 = 0x4, kReg3 = 0x5, kReg4 = 0x6, kReg5 = 0x7, kReg6 = 0x8, kReg7 = 0x9,
  kEnd = 0xE,  // host-side word: wait for the end-of-layer interrupt; carries the layer checksum
};

// One layer as the accelerator runs it. Channel counts are the real ones (the device pads them to
// multiples of 8); offsets are byte addresses in device memory, multiples of kDmaUnit. Fields a
// layer type does not use must hold their neutral value (0 offsets, kernel 1 / stride 1 / pad 0
// for kAdd), so that an encoded stream has exactly one spelling.
struct LayerDesc {
  LayerType type = LayerType::kConv3x3;
  int32_t in_channels = 0;   // C
  int32_t out_channels = 0;  // K (== C for depthwise, max pool, add)
  int32_t in_h = 0, in_w = 0;
  int32_t kernel = 3, stride = 1, pad = 0;
  int32_t act_lo = -128, act_hi = 127;  // output clamp: none [-128,127], ReLU [0,127], ReLU6 [0,q6]
  uint64_t weight_offset = 0;   // packed weights (conv, depthwise)
  uint64_t param_offset = 0;    // per-output-channel table: bias + requant (conv, dw), requant pair (add)
  uint64_t input_offset = 0;    // input tensor (input A of add)
  uint64_t input_b_offset = 0;  // input B of add
  uint64_t output_offset = 0;
};

bool operator==(const LayerDesc& a, const LayerDesc& b);
inline bool operator!=(const LayerDesc& a, const LayerDesc& b) { return !(a == b); }

struct Program {
  uint64_t memory_bytes = 0;  // the device memory the stream was built for (header word 2)
  std::vector<LayerDesc> layers;
};

// ---- sizes the datapath and the validator agree on ----
inline int64_t pad8(int64_t c) { return (c + 7) / 8 * 8; }
inline int64_t pad32(int64_t c) { return (c + 31) / 32 * 32; }
int32_t out_h(const LayerDesc& d);
int32_t out_w(const LayerDesc& d);
// Bytes of an activation tensor in the channel-blocked layout: pad8(C) * H * W.
uint64_t activation_bytes(int64_t c, int64_t h, int64_t w);
uint64_t weight_bytes(const LayerDesc& d);  // 0 for max pool and add
uint64_t param_bytes(const LayerDesc& d);   // 0 for max pool
const char* layer_type_name(LayerType t);   // "conv3x3", ..., "?" for a value outside the enum

// Throws InvalidInput ("<where>: <field> = v, allowed ...") unless d's type, channels, sizes,
// window and clamp are ones ISA v1 runs and the offsets its type does not use are 0 (the others
// are not looked at).
void check_shape(const LayerDesc& d, const std::string& where);
// check_shape, and all its regions are 64-byte aligned inside [0, memory_bytes), its output is
// disjoint from what it reads, and its weights from its parameter table.
void check_layer(const LayerDesc& d, uint64_t memory_bytes, const std::string& where);

// ---- the stream ----
// Header (4 words) + 13 words per layer + 1 trailer word (CRC-32 of everything before it).
std::vector<uint32_t> encode(const std::vector<LayerDesc>& layers, uint64_t memory_bytes);
// Validates everything (module postcondition) and throws InvalidInput naming the word index.
Program decode_program(const uint32_t* words, size_t n);
std::vector<LayerDesc> decode(const uint32_t* words, size_t n);

// CRC-32 (IEEE 802.3, reflected, poly 0xEDB88320, init and final xor 0xFFFFFFFF) of the words
// taken as little-endian bytes.
uint32_t crc32_words(const uint32_t* words, size_t n);
// Recomputes every layer checksum and the trailer of a stream whose length is 5 + 13 * L (for
// tests and tools that patch a field on purpose; the driver never reseals what it is given).
void reseal(std::vector<uint32_t>& words);

// One line per word ("0004 30000001 SWITCH conv3x3"); never throws: a word it cannot interpret is
// shown as such, so a refused stream can be inspected.
std::vector<std::string> disassemble(const uint32_t* words, size_t n);
// A layer's fields as (name, value) pairs in register order, for printing and for Python.
std::vector<std::pair<std::string, int64_t>> fields(const LayerDesc& d);

// ---- analytic cost model (ISA.md "Cost model") ----
struct CostModel {
  double clock_hz = 200e6;
  double ddr_bytes_per_s = 12.8e9;
  int64_t conv3x3_macs_per_cycle = 576;  // 8 in x 8 out x 9 taps
  int64_t conv1x1_macs_per_cycle = 256;  // 32 in x 8 out
  int64_t dw_macs_per_cycle = 72;        // 8 channels x 9 taps
  int64_t pool_lanes = 8;                // channels compared per cycle (one window element each)
  int64_t add_lanes = 8;                 // channels added per cycle
  int64_t layer_overhead_cycles = 2000;  // reset, parameter words, interrupt round trip
};

struct LayerCost {
  uint64_t macs = 0;            // multiply-accumulates the datapath issues (padded channels included)
  uint64_t compute_cycles = 0;
  uint64_t ddr_read_bytes = 0;
  uint64_t ddr_write_bytes = 0;
  uint64_t memory_cycles = 0;   // DDR bytes / bandwidth, in clock cycles
  uint64_t cycles = 0;          // max(compute, memory) + overhead
  double seconds = 0;
};

LayerCost estimate(const LayerDesc& d, const CostModel& m = CostModel{});

}  // namespace dnnfusion::fpga
