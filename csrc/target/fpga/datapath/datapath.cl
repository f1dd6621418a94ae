// The OpenCL C datapath of the fpga target's int8 CNN accelerator, ISA version 1
// (csrc/target/fpga/ISA.md): one kernel per layer type (Switch_REG 1..5), each decoding the layer's
// 13 register words itself and computing in the ISA's tiles — a work-group is one row segment of
// TILE_X output pixels of one 8-channel output block; a work-item owns one output pixel of that
// block and runs the hardware's steps on it (3x3: an 8-out x 8-in tap line, 64 MACs; 1x1: an
// 8-out x 32-in step, 256 MACs; depthwise: 8 lanes per tap; pooling: 8 lanes per window element;
// add: 8 lanes). Results are bit-identical to datapath/simulate.cc.
//
// Precondition: the host validated the whole stream with decode() (regions inside `mem`, no
// forbidden overlap, fields in range), `regs` holds the layer's 13 words in stream order, and the
// NDRange is (Wo rounded up to TILE_X, Ho, pad8(K)/8) in work-groups of (TILE_X, 1, 1).
// Postcondition: every byte of the layer's output region is written (padded lanes as 0) and nothing
// else in `mem` changes; or, when the words are not a layer of this kernel's type (a register id,
// control state or Switch_REG value out of place), nothing is written to `mem` and status[0] holds
// the refusal code (0x100 | word: wrong register id; 0x200 | word: wrong control state;
// 0x300 | type: another layer type), status[1] the END word's layer index.
//
// OpenCL C 1.2 core only. Signed overflow is undefined in OpenCL C as in C, so the int32
// accumulators are uint (wrapping mod 2^32 is exactly the ISA's rule); requantization runs in long.

#ifndef TILE_X
#define TILE_X 8
#endif

#define TYPE_CONV3X3 1u
#define TYPE_CONV1X1 2u
#define TYPE_DW3X3 3u
#define TYPE_MAXPOOL 4u
#define TYPE_ADD 5u

#define PAYLOAD(word) ((word) & 0x0FFFFFFFu)

// The register id each of a layer's 13 words must carry (ISA.md 5.3): CTRL, CTRL, SWITCH,
// REG0..REG7, CTRL, END.
__constant uchar kSlotRegister[13] = {0x0, 0x0, 0x1, 0x2, 0x3, 0x4, 0x5, 0x6, 0x7, 0x8, 0x9, 0x0, 0xE};

// One layer as the registers describe it; channel counts are real, offsets are bytes.
typedef struct {
  int c, k, h, w;
  int window, stride, pad;  // "kernel" is a keyword in OpenCL C
  int lo, hi;
  int ho, wo;
  ulong weights, params, input, input_b, output;
  uint layer;
} layer_t;

// Checks the words' structure against ISA.md 5.3; 0 when they are a layer of type `type`.
uint check_words(__global const uint* regs, uint type) {
  for (uint i = 0; i < 13; ++i)
    if ((regs[i] >> 28) != kSlotRegister[i]) return 0x100u | i;
  if (PAYLOAD(regs[0]) != 3u) return 0x200u | 0u;   // RESET
  if (PAYLOAD(regs[1]) != 2u) return 0x200u | 1u;   // PARAM
  if (PAYLOAD(regs[11]) != 1u) return 0x200u | 11u; // COMPUTE
  const uint t = PAYLOAD(regs[2]);
  if (t != type) return 0x300u | (t & 0xFFu);
  return 0;
}

// Field extraction (ISA.md 5.2); the DMA registers count 64-byte units.
void decode_layer(__global const uint* regs, layer_t* L) {
  const uint r0 = regs[3], r1 = regs[4], r2 = regs[5];
  L->c = (int)(r0 & 0xFFFu) + 1;
  L->k = (int)((r0 >> 12) & 0xFFFu) + 1;
  L->h = (int)(r1 & 0x7FFu) + 1;
  L->w = (int)((r1 >> 11) & 0x7FFu) + 1;
  L->window = (int)(r2 & 7u) + 1;
  L->stride = (int)((r2 >> 3) & 7u) + 1;
  L->pad = (int)((r2 >> 6) & 7u);
  L->lo = (int)(char)((r2 >> 9) & 0xFFu);  // int8 bit patterns
  L->hi = (int)(char)((r2 >> 17) & 0xFFu);
  L->weights = (ulong)PAYLOAD(regs[6]) * 64;
  L->params = (ulong)PAYLOAD(regs[7]) * 64;
  L->input = (ulong)PAYLOAD(regs[8]) * 64;
  L->input_b = (ulong)PAYLOAD(regs[9]) * 64;
  L->output = (ulong)PAYLOAD(regs[10]) * 64;
  L->ho = (L->h + 2 * L->pad - L->window) / L->stride + 1;
  L->wo = (L->w + 2 * L->pad - L->window) / L->stride + 1;
  L->layer = (regs[12] >> 16) & 0xFFFu;
}

// Every work-item checks and decodes the words (they are the only description of the layer it
// gets); one reports a refusal, all of them then stop before touching memory.
bool begin_layer(__global const uint* regs, uint type, __global uint* status, layer_t* L) {
  const uint code = check_words(regs, type);
  if (code != 0) {
    if (get_global_id(0) == 0 && get_global_id(1) == 0 && get_global_id(2) == 0) {
      status[0] = code;
      status[1] = (regs[12] >> 16) & 0xFFFu;
    }
    return false;
  }
  decode_layer(regs, L);
  return true;
}

// A little-endian int32 table field, whatever the device's byte order.
uint le32(__global const uchar* p) {
  const uchar4 b = vload4(0, p);
  return (uint)b.s0 | ((uint)b.s1 << 8) | ((uint)b.s2 << 16) | ((uint)b.s3 << 24);
}

// requant.h with the table's wiring (31 multiplier bits, 5 shift bits), before the clamp.
long scale(int acc, uint m_word, uint shift_word) {
  long p = (long)acc * (long)(m_word & 0x7FFFFFFFu);
  const uint s = shift_word & 31u;
  if (s > 0) p = (p + ((long)1 << (s - 1))) >> s;  // >> of a negative long fills with ones in OpenCL C
  return p;
}

// Byte offset of the 8-lane pixel (block, y, x) of an h x w channel-blocked tensor.
ulong pixel_at(ulong base, int block, int y, int x, int h, int w) {
  return base + (((ulong)block * (ulong)h + (ulong)y) * (ulong)w + (ulong)x) * 8;
}

int hsum8(int8 v) {
  const int4 a = v.lo + v.hi;
  const int2 b = a.lo + a.hi;
  return b.x + b.y;
}

// Accumulators of an 8-channel output block start at the table's biases.
uint8 bias_block(__global const uchar* table, int block) {
  uint b[8];
  for (int i = 0; i < 8; ++i) b[i] = le32(table + (block * 8 + i) * 16);
  return vload8(0, b);
}

// Requantizes an 8-channel output block and writes its 8 bytes; lanes at or past `real` are 0.
void write_block(__global uchar* out, uint8 acc, __global const uchar* table, int block, int real, int lo, int hi) {
  uint a[8];
  vstore8(acc, 0, a);
  char o[8];
  for (int i = 0; i < 8; ++i) {
    const int k = block * 8 + i;
    __global const uchar* e = table + k * 16;
    o[i] = k < real ? (char)clamp(scale(as_int(a[i]), le32(e + 4), le32(e + 8)), (long)lo, (long)hi) : (char)0;
  }
  vstore8(vload8(0, o), 0, (__global char*)out);
}

// One 3x3 step on one pixel: the 8x8 tap line [ko][ci] times the pixel's 8 input lanes (64 MACs).
uint8 step_8x8(uint8 acc, __global const char* line, char8 px) {
  const int8 x = convert_int8(px);
  const int8 s = (int8)(hsum8(convert_int8(vload8(0, line)) * x), hsum8(convert_int8(vload8(1, line)) * x),
                        hsum8(convert_int8(vload8(2, line)) * x), hsum8(convert_int8(vload8(3, line)) * x),
                        hsum8(convert_int8(vload8(4, line)) * x), hsum8(convert_int8(vload8(5, line)) * x),
                        hsum8(convert_int8(vload8(6, line)) * x), hsum8(convert_int8(vload8(7, line)) * x));
  return acc + as_uint8(s);
}

// One 1x1 step row: 32 weights of one output channel times the step's 32 input lanes.
int row_32(__global const char* row, char8 x0, char8 x1, char8 x2, char8 x3) {
  const int8 p = convert_int8(vload8(0, row)) * convert_int8(x0) + convert_int8(vload8(1, row)) * convert_int8(x1) +
                 convert_int8(vload8(2, row)) * convert_int8(x2) + convert_int8(vload8(3, row)) * convert_int8(x3);
  return hsum8(p);
}

// One 1x1 step: 8 output rows x 32 input channels (256 MACs).
uint8 step_8x32(uint8 acc, __global const char* step, char8 x0, char8 x1, char8 x2, char8 x3) {
  const int8 s = (int8)(row_32(step, x0, x1, x2, x3), row_32(step + 32, x0, x1, x2, x3),
                        row_32(step + 64, x0, x1, x2, x3), row_32(step + 96, x0, x1, x2, x3),
                        row_32(step + 128, x0, x1, x2, x3), row_32(step + 160, x0, x1, x2, x3),
                        row_32(step + 192, x0, x1, x2, x3), row_32(step + 224, x0, x1, x2, x3));
  return acc + as_uint8(s);
}

// Work-item (ox, oy, output block); the row tail past Wo only fills the last work-group.
__kernel __attribute__((reqd_work_group_size(TILE_X, 1, 1)))
void conv3x3(__global const uint* regs, __global uchar* mem, __global uint* status) {
  layer_t L;
  if (!begin_layer(regs, TYPE_CONV3X3, status, &L)) return;
  const int ox = (int)get_global_id(0), oy = (int)get_global_id(1), kb = (int)get_global_id(2);
  if (ox >= L.wo || oy >= L.ho) return;
  const int cbs = (L.c + 7) / 8;
  __global const uchar* table = mem + L.params;
  __global const char* block = (__global const char*)(mem + L.weights) + (ulong)kb * (ulong)cbs * 576;
  uint8 acc = bias_block(table, kb);
  for (int cb = 0; cb < cbs; ++cb)
    for (int tap = 0; tap < 9; ++tap) {
      const int iy = oy * L.stride - L.pad + tap / 3, ix = ox * L.stride - L.pad + tap % 3;
      if (iy < 0 || iy >= L.h || ix < 0 || ix >= L.w) continue;  // zero padding contributes nothing
      const char8 px = vload8(0, (__global const char*)(mem + pixel_at(L.input, cb, iy, ix, L.h, L.w)));
      acc = step_8x8(acc, block + (cb * 9 + tap) * 64, px);
    }
  write_block(mem + pixel_at(L.output, kb, oy, ox, L.ho, L.wo), acc, table, kb, L.k, L.lo, L.hi);
}

// Work-item (ox, oy, output block); a step's 8-channel input blocks past pad8(C) are not fetched.
__kernel __attribute__((reqd_work_group_size(TILE_X, 1, 1)))
void conv1x1(__global const uint* regs, __global uchar* mem, __global uint* status) {
  layer_t L;
  if (!begin_layer(regs, TYPE_CONV1X1, status, &L)) return;
  const int ox = (int)get_global_id(0), oy = (int)get_global_id(1), kb = (int)get_global_id(2);
  if (ox >= L.wo || oy >= L.ho) return;
  const int cbs = (L.c + 7) / 8, steps = (L.c + 31) / 32;
  const int iy = oy * L.stride, ix = ox * L.stride;
  __global const uchar* table = mem + L.params;
  __global const char* block = (__global const char*)(mem + L.weights) + (ulong)kb * (ulong)steps * 256;
  uint8 acc = bias_block(table, kb);
  for (int s = 0; s < steps; ++s) {
    char8 x[4];
    for (int j = 0; j < 4; ++j) {
      const int cb = s * 4 + j;
      x[j] = cb < cbs ? vload8(0, (__global const char*)(mem + pixel_at(L.input, cb, iy, ix, L.h, L.w))) : (char8)0;
    }
    acc = step_8x32(acc, block + s * 256, x[0], x[1], x[2], x[3]);
  }
  write_block(mem + pixel_at(L.output, kb, oy, ox, L.ho, L.wo), acc, table, kb, L.k, L.lo, L.hi);
}

// Work-item (ox, oy, channel block): 9 taps of 8 lanes, one weight per lane.
__kernel __attribute__((reqd_work_group_size(TILE_X, 1, 1)))
void dw3x3(__global const uint* regs, __global uchar* mem, __global uint* status) {
  layer_t L;
  if (!begin_layer(regs, TYPE_DW3X3, status, &L)) return;
  const int ox = (int)get_global_id(0), oy = (int)get_global_id(1), cb = (int)get_global_id(2);
  if (ox >= L.wo || oy >= L.ho) return;
  __global const uchar* table = mem + L.params;
  __global const char* taps = (__global const char*)(mem + L.weights) + (ulong)cb * 72;
  uint8 acc = bias_block(table, cb);
  for (int tap = 0; tap < 9; ++tap) {
    const int iy = oy * L.stride - L.pad + tap / 3, ix = ox * L.stride - L.pad + tap % 3;
    if (iy < 0 || iy >= L.h || ix < 0 || ix >= L.w) continue;
    const char8 px = vload8(0, (__global const char*)(mem + pixel_at(L.input, cb, iy, ix, L.h, L.w)));
    acc += as_uint8(convert_int8(vload8(tap, taps)) * convert_int8(px));
  }
  write_block(mem + pixel_at(L.output, cb, oy, ox, L.ho, L.wo), acc, table, cb, L.k, L.lo, L.hi);
}

// Clamps 8 lanes to [lo, hi], zeroes those at or past `real`, writes them.
void write_clamped(__global uchar* out, int8 v, int block, int real, int lo, int hi) {
  const int8 lane = (int8)(0, 1, 2, 3, 4, 5, 6, 7) + block * 8;
  const int8 r = select((int8)0, clamp(v, (int8)lo, (int8)hi), lane < (int8)real);
  vstore8(convert_char8(r), 0, (__global char*)out);
}

// Work-item (ox, oy, channel block): the running max starts at -128 and padding is skipped.
__kernel __attribute__((reqd_work_group_size(TILE_X, 1, 1)))
void maxpool(__global const uint* regs, __global uchar* mem, __global uint* status) {
  layer_t L;
  if (!begin_layer(regs, TYPE_MAXPOOL, status, &L)) return;
  const int ox = (int)get_global_id(0), oy = (int)get_global_id(1), cb = (int)get_global_id(2);
  if (ox >= L.wo || oy >= L.ho) return;
  int8 m = (int8)(-128);
  for (int r = 0; r < L.window; ++r) {
    const int iy = oy * L.stride - L.pad + r;
    if (iy < 0 || iy >= L.h) continue;
    for (int s = 0; s < L.window; ++s) {
      const int ix = ox * L.stride - L.pad + s;
      if (ix < 0 || ix >= L.w) continue;
      m = max(m, convert_int8(vload8(0, (__global const char*)(mem + pixel_at(L.input, cb, iy, ix, L.h, L.w)))));
    }
  }
  write_clamped(mem + pixel_at(L.output, cb, oy, ox, L.ho, L.wo), m, cb, L.k, L.lo, L.hi);
}

// Work-item (x, y, channel block): each input requantized into the output scale with 32-bit
// saturation, summed exactly in 64 bits, clamped to the activation bounds.
__kernel __attribute__((reqd_work_group_size(TILE_X, 1, 1)))
void add(__global const uint* regs, __global uchar* mem, __global uint* status) {
  layer_t L;
  if (!begin_layer(regs, TYPE_ADD, status, &L)) return;
  const int x = (int)get_global_id(0), y = (int)get_global_id(1), cb = (int)get_global_id(2);
  if (x >= L.wo || y >= L.ho) return;
  const char8 a = vload8(0, (__global const char*)(mem + pixel_at(L.input, cb, y, x, L.h, L.w)));
  const char8 b = vload8(0, (__global const char*)(mem + pixel_at(L.input_b, cb, y, x, L.h, L.w)));
  char av[8], bv[8], o[8];
  vstore8(a, 0, av);
  vstore8(b, 0, bv);
  for (int i = 0; i < 8; ++i) {
    const int c = cb * 8 + i;
    __global const uchar* e = mem + L.params + c * 16;
    const long ta = clamp(scale(av[i], le32(e), le32(e + 4)), (long)INT_MIN, (long)INT_MAX);
    const long tb = clamp(scale(bv[i], le32(e + 8), le32(e + 12)), (long)INT_MIN, (long)INT_MAX);
    o[i] = c < L.k ? (char)clamp(ta + tb, (long)L.lo, (long)L.hi) : (char)0;
  }
  vstore8(vload8(0, o), 0, (__global char*)(mem + pixel_at(L.output, cb, y, x, L.ho, L.wo)));
}
