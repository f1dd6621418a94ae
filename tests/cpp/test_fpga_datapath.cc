// The fpga target's OpenCL datapath (datapath/datapath.cl) driven by its host driver
// (driver/accelerator.h) on PoCL's CPU device: the whole device memory after a run equals
// simulate()'s bit for bit on 2,560 random layer configurations of all five types (batched, 160
// layers per stream and per upload) and on chained multi-layer programs with buffer reuse; the
// outputs equal the naive reference's on a separate subset, independently of simulate; then the
// driver's refusals (corrupt, truncated and wrong-size streams never run; out-of-range
// reads and writes; an unknown platform; bad binaries), the device's own refusal of words that are
// not its layer, programs from a saved binary, concurrent run() calls, and the time of a
// resnet18-sized 3x3 layer.
//
// Tests that need an OpenCL device FAIL when there is none (CI installs PoCL; a skip would hide a
// missing install step); DNNFUSION_SKIP_OPENCL_TESTS=1 turns those failures into skips, as in
// test_opencl_runtime.cc. Random inputs print their seed; DNNFUSION_TEST_SEED replays one.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "fpga_test_util.h"
#include "target/fpga/datapath/datapath_source.h"
#include "target/fpga/datapath/simulate.h"
#include "target/fpga/driver/accelerator.h"
#include "target/fpga/isa/isa.h"
#include "target/fpga/opencl/opencl_runtime.h"
#include "opencl_test_util.h"

namespace dnnfusion::fpga {
namespace {

namespace fs = std::filesystem;
namespace ocl = opencl;
using namespace test_util;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// One accelerator for the tests that need no special options: building the kernels is the slow part.
Accelerator& shared_accelerator() {
  static std::unique_ptr<Accelerator> acc = std::make_unique<Accelerator>();
  return *acc;
}

// Layers placed side by side in one image, encoded as one stream.
struct Batch {
  std::vector<Case> cases;
  std::vector<uint8_t> image;
  std::vector<uint32_t> words;
  std::vector<LayerDesc> layers() const {
    std::vector<LayerDesc> v;
    for (const Case& c : cases) v.push_back(c.d);
    return v;
  }
};

constexpr LayerType kTypes[] = {LayerType::kConv3x3, LayerType::kConv1x1, LayerType::kDepthwise3x3,
                                LayerType::kMaxPool, LayerType::kAdd};

// `per_type` random layers of each type in random order; `shift_base` continues the shift sweep.
Batch random_batch(std::mt19937_64& g, int per_type, int shift_base) {
  std::vector<LayerType> order;
  for (LayerType t : kTypes) order.insert(order.end(), per_type, t);
  std::shuffle(order.begin(), order.end(), g);
  Batch b;
  Image img{{}, &g};
  for (size_t i = 0; i < order.size(); ++i) {
    b.cases.push_back(random_case(g, order[i], shift_base + static_cast<int>(i)));
    place(b.cases.back(), img);
  }
  b.image = img.finish();
  b.words = encode(b.layers(), b.image.size());
  return b;
}

std::vector<uint8_t> device_memory(const Accelerator& acc) {
  std::vector<uint8_t> m(acc.memory_bytes());
  acc.read(0, m.data(), m.size());
  return m;
}

// Uploads the image, runs the stream, returns the whole device memory.
std::vector<uint8_t> run_on(Accelerator& acc, const std::vector<uint8_t>& image, const std::vector<uint32_t>& words,
                            RunStats* stats = nullptr) {
  acc.upload(image.data(), image.size());
  const RunStats s = acc.run(words.data(), words.size());
  if (stats) *stats = s;
  return device_memory(acc);
}

std::vector<uint8_t> simulated(std::vector<uint8_t> image, const std::vector<uint32_t>& words) {
  simulate(image, words.data(), words.size());
  return image;
}

// Equal images, or one failure naming the mismatch count and the layer owning the first one.
void expect_same_memory(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                        const std::vector<LayerDesc>& layers) {
  ASSERT_EQ(got.size(), want.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i] && bad++ == 0) first = i;
  if (bad == 0) return;
  std::string where = "outside every layer's output";
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerDesc& d = layers[l];
    if (first >= d.output_offset && first < d.output_offset + output_bytes(d))
      where = "in the output of layer " + std::to_string(l) + " (" + describe(d) + ")";
  }
  ADD_FAILURE() << bad << " bytes differ; first at byte " << first << ", " << where << ": got " << int(got[first])
                << ", want " << int(want[first]);
}

TEST(FpgaDatapath, MatchesSimulateOnRandomLayers) {
  REQUIRE_OPENCL();
  SCOPED_TRACE(fpga_seed_note());
  std::mt19937_64 g(fpga_test_seed() + 40);
  Accelerator& acc = shared_accelerator();
  const auto start = std::chrono::steady_clock::now();
  constexpr int kBatches = 16, kPerType = 32;
  int configs = 0;
  double device_s = 0;
  for (int b = 0; b < kBatches; ++b) {
    const Batch batch = random_batch(g, kPerType, b * 5 * kPerType);
    SCOPED_TRACE("batch " + std::to_string(b));
    RunStats stats;
    const std::vector<uint8_t> got = run_on(acc, batch.image, batch.words, &stats);
    ASSERT_NO_FATAL_FAILURE(expect_same_memory(got, simulated(batch.image, batch.words), batch.layers()));
    EXPECT_EQ(stats.layers, 5 * kPerType);
    EXPECT_EQ(stats.layer_seconds.size(), static_cast<size_t>(5 * kPerType));
    for (double s : stats.layer_seconds) EXPECT_GE(s, 0.0);
    EXPECT_GT(stats.seconds, 0.0);
    device_s += stats.seconds;
    configs += static_cast<int>(batch.cases.size());
  }
  EXPECT_GE(configs, 1000);
  for (int s = 0; s < 32; ++s) EXPECT_TRUE(shifts_seen().count(s)) << "shift " << s << " never drawn";
  std::printf("test_fpga_datapath: %d random configurations in %.2f s (run() %.2f s)\n", configs,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), device_s);
}

TEST(FpgaDatapath, MatchesReferenceIndependently) {
  REQUIRE_OPENCL();
  SCOPED_TRACE(fpga_seed_note());
  std::mt19937_64 g(fpga_test_seed() + 41);
  Accelerator& acc = shared_accelerator();
  for (int b = 0; b < 2; ++b) {
    const Batch batch = random_batch(g, 30, b * 150);
    const std::vector<uint8_t> mem = run_on(acc, batch.image, batch.words);
    for (const Case& c : batch.cases) {
      SCOPED_TRACE(describe(c.d));
      ASSERT_EQ(read_output(mem, c.d), reference(c));
    }
  }
}

TEST(FpgaDatapath, NamedShapes) {
  REQUIRE_OPENCL();
  SCOPED_TRACE(fpga_seed_note());
  std::mt19937_64 g(fpga_test_seed() + 42);
  Batch b;
  Image img{{}, &g};
  auto add = [&](LayerType t, int c, int k, int h, int w, int kernel, int stride, int pad) {
    LayerDesc d = shape(t, c, k, h, w, kernel, stride, pad);
    random_activation(g, d);
    b.cases.push_back(make_case(g, d, static_cast<int>(uniform(g, 0, 31))));
    place(b.cases.back(), img);
  };
  add(LayerType::kMaxPool, 64, 64, 28, 28, 2, 2, 0);
  add(LayerType::kMaxPool, 64, 64, 27, 27, 3, 2, 1);   // resnet stem pool, odd size
  add(LayerType::kMaxPool, 13, 13, 17, 19, 8, 8, 7);   // the largest window and stride
  add(LayerType::kConv3x3, 64, 64, 14, 14, 3, 1, 1);
  add(LayerType::kConv3x3, 32, 72, 15, 15, 3, 2, 1);
  add(LayerType::kConv3x3, 3, 5, 3, 3, 3, 1, 0);       // a single output pixel
  add(LayerType::kConv1x1, 512, 1000, 1, 1, 1, 1, 0);  // the classifier as a 1x1 conv
  add(LayerType::kConv1x1, 96, 24, 9, 9, 1, 2, 0);
  add(LayerType::kConv1x1, 33, 9, 1, 37, 1, 1, 0);     // a 33-channel step tail, a 1-row input
  add(LayerType::kDepthwise3x3, 144, 144, 11, 11, 3, 2, 1);
  add(LayerType::kAdd, 24, 24, 7, 7, 1, 1, 0);
  add(LayerType::kAdd, 1, 1, 1, 1, 1, 1, 0);
  b.image = img.finish();
  b.words = encode(b.layers(), b.image.size());
  const std::vector<uint8_t> mem = run_on(shared_accelerator(), b.image, b.words);
  expect_same_memory(mem, simulated(b.image, b.words), b.layers());
  for (const Case& c : b.cases) EXPECT_EQ(read_output(mem, c.d), reference(c)) << describe(c.d);
}

TEST(FpgaDatapath, ChainedPrograms) {
  // random_chain's five layers as one stream on the device, against simulate.
  REQUIRE_OPENCL();
  SCOPED_TRACE(fpga_seed_note());
  std::mt19937_64 g(fpga_test_seed() + 43);
  Accelerator& acc = shared_accelerator();
  for (int t = 0; t < 20; ++t) {
    const Chain ch = random_chain(g, t);
    const auto words = encode(ch.layers, ch.image.size());
    const std::vector<uint8_t> mem = run_on(acc, ch.image, words);
    SCOPED_TRACE("trial " + std::to_string(t));
    expect_same_memory(mem, simulated(ch.image, words), ch.layers);
    EXPECT_EQ(read_output(mem, ch.p.d), ch.s.xb) << "conv1x1";
    EXPECT_EQ(read_output(mem, ch.m.d), reference(ch.m)) << "final maxpool";
  }
}

TEST(FpgaDatapath, ParameterTableBitsTheHardwareDoesNotWire) {
  // Multipliers with bit 31 set and shifts above 31 (no packer writes them): the datapath uses
  // M & 0x7fffffff and shift & 31 and ignores the reserved word, as simulate does.
  REQUIRE_OPENCL();
  SCOPED_TRACE(fpga_seed_note());
  std::mt19937_64 g(fpga_test_seed() + 49);
  Batch b = random_batch(g, 6, 0);
  for (const Case& c : b.cases) {
    if (c.d.type == LayerType::kMaxPool) continue;
    for (int64_t k = 0; k < pad8(c.d.out_channels); ++k) {
      uint8_t* e = &b.image[c.d.param_offset + 16 * static_cast<size_t>(k)];
      const int first = c.d.type == LayerType::kAdd ? 0 : 4;  // the multiplier words
      for (int m = first; m < 16; m += 8) {
        put_le32(e + m, static_cast<int32_t>(static_cast<uint32_t>(get_le32(e + m)) | 0x80000000u));
        put_le32(e + m + 4, get_le32(e + m + 4) + 32 * static_cast<int32_t>(uniform(g, 1, 3)));
        if (first == 4) break;
      }
      if (first == 4) put_le32(e + 12, static_cast<int32_t>(g()));  // the reserved word
    }
  }
  const std::vector<uint8_t> want = simulated(b.image, b.words);
  expect_same_memory(run_on(shared_accelerator(), b.image, b.words), want, b.layers());
  for (const Case& c : b.cases) EXPECT_EQ(read_output(want, c.d), reference(c)) << describe(c.d);
}

TEST(FpgaDatapath, Conv1x1BlocksPastTheTensorAreNotFetched) {
  // A 1x1 step covers pad32(C) channels, the tensor only pad8(C): blocks past it read as zeros
  // (ISA.md 2.2), so not even nonzero weights there (no packer writes them) change the result.
  REQUIRE_OPENCL();
  SCOPED_TRACE(fpga_seed_note());
  std::mt19937_64 g(fpga_test_seed() + 50);
  Batch b = random_batch(g, 12, 0);
  int tails = 0;
  for (const Case& c : b.cases) {
    if (c.d.type != LayerType::kConv1x1) continue;
    const int64_t blocks = pad8(c.d.in_channels) / 8, steps = pad32(c.d.in_channels) / 32;
    for (int64_t kb = 0; kb < pad8(c.d.out_channels) / 8; ++kb)
      for (int64_t step = 0; step < steps; ++step)
        for (int64_t ko = 0; ko < 8; ++ko)
          for (int64_t ci = 0; ci < 32; ++ci)
            if (step * 4 + ci / 8 >= blocks) {
              b.image[c.d.weight_offset + static_cast<size_t>(((kb * steps + step) * 8 + ko) * 32 + ci)] =
                  static_cast<uint8_t>(uniform(g, 1, 255));
              ++tails;
            }
  }
  EXPECT_GT(tails, 0);
  const std::vector<uint8_t> want = simulated(b.image, b.words);
  expect_same_memory(run_on(shared_accelerator(), b.image, b.words), want, b.layers());
  for (const Case& c : b.cases) EXPECT_EQ(read_output(want, c.d), reference(c)) << describe(c.d);
}

TEST(FpgaDatapath, RefusedStreamsNeverRun) {
  REQUIRE_OPENCL();
  std::mt19937_64 g(fpga_test_seed() + 44);
  Accelerator& acc = shared_accelerator();
  Batch two;
  Image img{{}, &g};
  for (LayerType t : {LayerType::kConv1x1, LayerType::kAdd}) {
    two.cases.push_back(random_case(g, t, 3));
    place(two.cases.back(), img);
  }
  two.image = img.finish();
  two.words = encode(two.layers(), two.image.size());
  acc.upload(two.image.data(), two.image.size());
  int refused = 0;
  for (size_t i = 0; i < two.words.size(); ++i)
    for (int bit = 0; bit < 32; ++bit) {
      std::vector<uint32_t> w = two.words;
      w[i] ^= 1u << bit;
      EXPECT_THROW(acc.run(w.data(), w.size()), InvalidInput) << "word " << i << " bit " << bit;
      ++refused;
    }
  for (size_t n = 0; n < two.words.size(); ++n) EXPECT_THROW(acc.run(two.words.data(), n), InvalidInput) << n;
  std::vector<uint32_t> longer = two.words;
  longer.push_back(0);
  EXPECT_THROW(acc.run(longer.data(), longer.size()), InvalidInput);
  EXPECT_THROW(acc.run(nullptr, two.words.size()), InvalidInput);
  EXPECT_EQ(device_memory(acc), two.image) << "a refused stream changed device memory";

  // Built for another memory size: larger (would reach past the image) and smaller.
  for (int64_t delta : {64, -64}) {
    const auto other = encode(two.layers(), two.image.size() + delta);
    try {
      acc.run(other.data(), other.size());
      ADD_FAILURE() << "a stream for " << two.image.size() + delta << " bytes ran on " << two.image.size();
    } catch (const InvalidInput& e) {
      EXPECT_TRUE(contains(e.what(), std::to_string(two.image.size()))) << e.what();
    }
  }
  EXPECT_EQ(device_memory(acc), two.image);
  // The intact stream still runs afterwards.
  const RunStats stats = acc.run(two.words.data(), two.words.size());
  EXPECT_EQ(stats.layers, 2);
  expect_same_memory(device_memory(acc), simulated(two.image, two.words), two.layers());
  EXPECT_EQ(refused, static_cast<int>(32 * two.words.size()));
}

TEST(FpgaDatapath, ReadWriteRanges) {
  REQUIRE_OPENCL();
  Accelerator acc;
  uint8_t buf[16] = {};
  EXPECT_EQ(acc.memory_bytes(), 0u);
  EXPECT_THROW(acc.write(0, buf, 1), InvalidInput);  // nothing uploaded yet
  EXPECT_THROW(acc.read(0, buf, 1), InvalidInput);
  LayerDesc d = shape(LayerType::kAdd, 1, 1, 1, 1, 1, 1, 0);
  d.input_offset = d.input_b_offset = 128, d.output_offset = 192;
  const std::vector<uint32_t> words = encode({d}, 1024);
  EXPECT_THROW(acc.run(words.data(), words.size()), InvalidInput);
  EXPECT_THROW(acc.upload(nullptr, 64), InvalidInput);
  EXPECT_THROW(acc.upload(buf, 0), InvalidInput);

  std::vector<uint8_t> image(256);
  for (size_t i = 0; i < image.size(); ++i) image[i] = static_cast<uint8_t>(i * 7);
  acc.upload(image.data(), image.size());
  EXPECT_EQ(acc.memory_bytes(), 256u);
  const uint8_t in[4] = {1, 2, 3, 4};
  acc.write(252, in, 4);
  uint8_t out[8];
  acc.read(248, out, 8);
  EXPECT_EQ(std::vector<uint8_t>(out, out + 8), (std::vector<uint8_t>{image[248], image[249], image[250], image[251], 1, 2, 3, 4}));
  acc.write(256, in, 0);  // empty, at the end: allowed
  EXPECT_THROW(acc.write(253, in, 4), InvalidInput);
  EXPECT_THROW(acc.write(257, in, 0), InvalidInput);
  EXPECT_THROW(acc.read(256, out, 1), InvalidInput);
  EXPECT_THROW(acc.read(SIZE_MAX, out, 2), InvalidInput);
  EXPECT_THROW(acc.read(8, out, SIZE_MAX), InvalidInput);
  EXPECT_THROW(acc.write(0, nullptr, 4), InvalidInput);
  try {
    acc.read(250, out, 8);
    ADD_FAILURE() << "read past the end";
  } catch (const InvalidInput& e) {
    EXPECT_TRUE(contains(e.what(), "[250, 258)") && contains(e.what(), "[0, 256)")) << e.what();
  }
  // A second upload replaces the image.
  std::vector<uint8_t> small(128, 9);
  acc.upload(small.data(), small.size());
  EXPECT_EQ(device_memory(acc), small);
}

TEST(FpgaDatapath, UnknownPlatformListsPlatforms) {
  REQUIRE_OPENCL();
  AcceleratorOptions o;
  o.platform = "no-such-opencl-platform";
  try {
    Accelerator acc(o);
    ADD_FAILURE() << "an unknown platform was accepted";
  } catch (const InvalidInput& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "no-such-opencl-platform")) << msg;
    for (const auto& p : ocl::list_platforms()) EXPECT_TRUE(contains(msg, p.name)) << msg;
  }
  Accelerator acc;
  EXPECT_FALSE(acc.platform_name().empty());
  EXPECT_FALSE(acc.device_name().empty());
}

// A temporary file removed at scope exit.
struct TempFile {
  fs::path path;
  explicit TempFile(const std::string& stem)
      : path(fs::temp_directory_path() / (stem + "_" + std::to_string(getpid()) + ".bin")) {}
  ~TempFile() {
    std::error_code ec;
    fs::remove(path, ec);
  }
  void write(const std::vector<unsigned char>& bytes) const {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
};

TEST(FpgaDatapath, ProgramFromBinary) {
  REQUIRE_OPENCL();
  SCOPED_TRACE(fpga_seed_note());
  std::mt19937_64 g(fpga_test_seed() + 45);
  TempFile file("dnnf_fpga_datapath");
  {
    ocl::Context ctx;
    file.write(ocl::Program::from_source(ctx, datapath_source(), "-cl-std=CL1.2").binary());
  }
  AcceleratorOptions o;
  o.binary_path = file.path.string();
  Accelerator from_binary(o);
  const Batch b = random_batch(g, 8, 0);
  const std::vector<uint8_t> want = run_on(shared_accelerator(), b.image, b.words);
  expect_same_memory(run_on(from_binary, b.image, b.words), want, b.layers());
  expect_same_memory(want, simulated(b.image, b.words), b.layers());

  // Garbage where a binary should be: refused with a message, not a crash.
  std::vector<unsigned char> garbage(4096);
  for (auto& c : garbage) c = static_cast<unsigned char>(g());
  file.write(garbage);
  try {
    Accelerator bad(o);
    ADD_FAILURE() << "a garbage binary was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "binary")) << e.what();
  }
  // A valid binary of some other program lacks the datapath's kernels.
  {
    ocl::Context ctx;
    file.write(ocl::Program::from_source(ctx, "__kernel void other(__global int* p) { p[0] = 1; }").binary());
  }
  try {
    Accelerator other(o);
    ADD_FAILURE() << "a binary without the datapath kernels was accepted";
  } catch (const InvalidInput& e) {
    EXPECT_TRUE(contains(e.what(), "has no kernel 'conv3x3'") && contains(e.what(), file.path.string())) << e.what();
  }
  o.binary_path = (fs::temp_directory_path() / "dnnf_no_such_binary.aocx").string();
  EXPECT_THROW(Accelerator missing(o), InvalidInput);
}

// The device decodes the words itself: words that are not a layer of the kernel's type are refused
// on the device (status register), and memory is not touched.
TEST(FpgaDatapath, DeviceRefusesWordsOfAnotherLayer) {
  REQUIRE_OPENCL();
  std::mt19937_64 g(fpga_test_seed() + 46);
  Image img{{}, &g};
  Case c = random_case(g, LayerType::kConv3x3, 5);
  place(c, img);
  const std::vector<uint8_t> image = img.finish();
  const std::vector<uint32_t> stream = encode({c.d}, image.size());
  const std::vector<uint32_t> layer(stream.begin() + kHeaderWords, stream.begin() + kHeaderWords + kWordsPerLayer);

  ocl::Context ctx;
  const ocl::Program program = ocl::Program::from_source(ctx, datapath_source(), "-cl-std=CL1.2");
  auto run_kernel = [&](const char* name, std::vector<uint32_t> words, std::vector<uint8_t>* mem) {
    ocl::Buffer regs(ctx, words.size() * 4), memory(ctx, image.size()), status(ctx, 8);
    regs.write(words.data(), words.size() * 4);
    memory.write(image.data(), image.size());
    const uint32_t zero[2] = {0, 0};
    status.write(zero, 8);
    ocl::Kernel k(program, name);
    k.set_arg(0, regs);
    k.set_arg(1, memory);
    k.set_arg(2, status);
    const size_t wo = static_cast<size_t>(out_w(c.d));
    ctx.enqueue(k, {(wo + 7) / 8 * 8, static_cast<size_t>(out_h(c.d)), static_cast<size_t>(pad8(c.d.out_channels) / 8)},
                {8, 1, 1}).wait();
    mem->resize(image.size());
    memory.read(mem->data(), mem->size());
    uint32_t st[2];
    status.read(st, 8);
    return st[0];
  };
  std::vector<uint8_t> mem;
  EXPECT_EQ(run_kernel("conv3x3", layer, &mem), 0u);
  expect_same_memory(mem, simulated(image, stream), {c.d});

  EXPECT_EQ(run_kernel("maxpool", layer, &mem), 0x301u);  // Switch_REG says conv3x3
  EXPECT_EQ(mem, image);
  std::vector<uint32_t> w = layer;
  w[5] = (w[5] & 0x0FFFFFFFu) | (0x5u << 28);  // REG2's slot with REG3's id
  EXPECT_EQ(run_kernel("conv3x3", w, &mem), 0x105u);
  EXPECT_EQ(mem, image);
  w = layer;
  w[11] = (w[11] & 0xF0000000u) | 2u;  // PARAM where COMPUTE belongs
  EXPECT_EQ(run_kernel("conv3x3", w, &mem), 0x20Bu);
  EXPECT_EQ(mem, image);
}

TEST(FpgaDatapath, ConcurrentRunsAreSerialized) {
  REQUIRE_OPENCL();
  std::mt19937_64 g(fpga_test_seed() + 47);
  Accelerator& acc = shared_accelerator();
  const Batch b = random_batch(g, 6, 0);  // no layer reads another's output: running it twice changes nothing
  acc.upload(b.image.data(), b.image.size());
  std::vector<std::string> errors(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      try {
        for (int i = 0; i < 3; ++i) acc.run(b.words.data(), b.words.size());
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors) EXPECT_EQ(e, "");
  expect_same_memory(device_memory(acc), simulated(b.image, b.words), b.layers());
}

// resnet18's 3x3 CBR at 56x56 (64 -> 64, stride 1, pad 1, ReLU): checked, and timed on this device.
TEST(FpgaDatapath, Resnet18Conv3x3Time) {
  REQUIRE_OPENCL();
  std::mt19937_64 g(fpga_test_seed() + 48);
  LayerDesc d = shape(LayerType::kConv3x3, 64, 64, 56, 56, 3, 1, 1);
  d.act_lo = 0, d.act_hi = 127;
  Case c = make_case(g, d, 20);
  Image img{{}, &g};
  place(c, img);
  const std::vector<uint8_t> image = img.finish();
  const auto words = encode({c.d}, image.size());
  Accelerator& acc = shared_accelerator();
  RunStats first;
  const std::vector<uint8_t> mem = run_on(acc, image, words, &first);
  expect_same_memory(mem, simulated(image, words), {c.d});
  double best = first.layer_seconds.at(0), best_wall = first.seconds;
  for (int i = 0; i < 3; ++i) {
    const RunStats s = acc.run(words.data(), words.size());
    best = std::min(best, s.layer_seconds.at(0));
    best_wall = std::min(best_wall, s.seconds);
  }
  const double macs = 64.0 * 64 * 9 * 56 * 56;
  std::printf("test_fpga_datapath: %s on %s: conv3x3 64->64 56x56: kernel %.2f ms (%.2f GMAC/s), run() %.2f ms\n",
              acc.platform_name().c_str(), acc.device_name().c_str(), best * 1e3, macs / best * 1e-9, best_wall * 1e3);
}

}  // namespace
}  // namespace dnnfusion::fpga
