// Test fixture for tests/cpp/test_ptx_interpreter.cc: a direct 3x3 convolution in the style of
// the cuda target's sparse-conv template (weights as literals, zero weights deleted), compiled once
// to PTX with
//
//   nvcc -ptx -arch=compute_80 -O3 direct_conv3x3.cu -o direct_conv3x3.ptx      (nvcc 13.0)
//
// Shape: x [N=2, C=5, H=10, W=10], weight [K=8, 5, 3, 3], stride 1, padding 1, y [2, 8, 10, 10];
// y = relu6(conv(x) + bias[k] + residual). Weights follow a formula the test recomputes (all are
// multiples of 1/16, so the literals are exact):
//   h = (7k + 5c + 3r + 11s) mod 19;  w = 0 if h == 9 or (k + 2c + r + s) mod 5 == 0,
//   else (h - 9) / 16.
// Launch: grid (4 tiles of 8x8 outputs, 2 groups of 4 output channels, 2 images), block (8, 4):
// each thread computes output rows ty and ty + 4 of its column for 4 channels. The input tile
// with its halo is staged in shared memory 3 channels at a time (chunks of 3 and 2 channels).

#define C 5
#define H 10
#define W 10
#define K 8
#define TH 8
#define TW 8
#define CCH 3
#define TILES_X ((W + TW - 1) / TW)

extern "C" __global__ void conv(const float* __restrict__ x, const float* __restrict__ bias,
                                const float* __restrict__ residual, float* __restrict__ y) {
  __shared__ float xs[CCH][TH + 2][TW + 2];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int tid = ty * blockDim.x + tx, nthreads = blockDim.x * blockDim.y;
  const int oh0 = (blockIdx.x / TILES_X) * TH, ow0 = (blockIdx.x % TILES_X) * TW;
  const int g = blockIdx.y, n = blockIdx.z;
  float acc00 = 0.f;
  float acc01 = 0.f;
  float acc02 = 0.f;
  float acc03 = 0.f;
  float acc10 = 0.f;
  float acc11 = 0.f;
  float acc12 = 0.f;
  float acc13 = 0.f;
  for (int c0 = 0; c0 < C; c0 += CCH) {
    for (int i = tid; i < CCH * (TH + 2) * (TW + 2); i += nthreads) {
      const int cc = i / ((TH + 2) * (TW + 2)), rem = i % ((TH + 2) * (TW + 2));
      const int ih = oh0 - 1 + rem / (TW + 2), iw = ow0 - 1 + rem % (TW + 2);
      float v = 0.f;
      if (c0 + cc < C && ih >= 0 && ih < H && iw >= 0 && iw < W) v = x[((n * C + c0 + cc) * H + ih) * W + iw];
      xs[cc][rem / (TW + 2)][rem % (TW + 2)] = v;
    }
    __syncthreads();
    if (c0 == 0) {
      switch (g) {
        case 0: {
          { const float v = xs[0][ty + 0][tx + 0];
            acc01 = __fmaf_rn(v, -0.125f, acc01);
            acc02 = __fmaf_rn(v, 0.3125f, acc02);
            acc03 = __fmaf_rn(v, -0.4375f, acc03);
          }
          { const float v = xs[0][ty + 4][tx + 0];
            acc11 = __fmaf_rn(v, -0.125f, acc11);
            acc12 = __fmaf_rn(v, 0.3125f, acc12);
            acc13 = __fmaf_rn(v, -0.4375f, acc13);
          }
          { const float v = xs[0][ty + 0][tx + 1];
            acc00 = __fmaf_rn(v, 0.125f, acc00);
            acc01 = __fmaf_rn(v, 0.5625f, acc01);
            acc02 = __fmaf_rn(v, -0.1875f, acc02);
            acc03 = __fmaf_rn(v, 0.25f, acc03);
          }
          { const float v = xs[0][ty + 4][tx + 1];
            acc10 = __fmaf_rn(v, 0.125f, acc10);
            acc11 = __fmaf_rn(v, 0.5625f, acc11);
            acc12 = __fmaf_rn(v, -0.1875f, acc12);
            acc13 = __fmaf_rn(v, 0.25f, acc13);
          }
          { const float v = xs[0][ty + 0][tx + 2];
            acc00 = __fmaf_rn(v, -0.375f, acc00);
            acc01 = __fmaf_rn(v, 0.0625f, acc01);
            acc02 = __fmaf_rn(v, 0.5f, acc02);
          }
          { const float v = xs[0][ty + 4][tx + 2];
            acc10 = __fmaf_rn(v, -0.375f, acc10);
            acc11 = __fmaf_rn(v, 0.0625f, acc11);
            acc12 = __fmaf_rn(v, 0.5f, acc12);
          }
          { const float v = xs[0][ty + 1][tx + 0];
            acc00 = __fmaf_rn(v, -0.375f, acc00);
            acc01 = __fmaf_rn(v, 0.0625f, acc01);
            acc02 = __fmaf_rn(v, 0.5f, acc02);
            acc03 = __fmaf_rn(v, -0.25f, acc03);
          }
          { const float v = xs[0][ty + 5][tx + 0];
            acc10 = __fmaf_rn(v, -0.375f, acc10);
            acc11 = __fmaf_rn(v, 0.0625f, acc11);
            acc12 = __fmaf_rn(v, 0.5f, acc12);
            acc13 = __fmaf_rn(v, -0.25f, acc13);
          }
          { const float v = xs[0][ty + 1][tx + 1];
            acc00 = __fmaf_rn(v, 0.3125f, acc00);
            acc01 = __fmaf_rn(v, -0.4375f, acc01);
          }
          { const float v = xs[0][ty + 5][tx + 1];
            acc10 = __fmaf_rn(v, 0.3125f, acc10);
            acc11 = __fmaf_rn(v, -0.4375f, acc11);
          }
          { const float v = xs[0][ty + 1][tx + 2];
            acc00 = __fmaf_rn(v, -0.1875f, acc00);
            acc01 = __fmaf_rn(v, 0.25f, acc01);
            acc03 = __fmaf_rn(v, -0.0625f, acc03);
          }
          { const float v = xs[0][ty + 5][tx + 2];
            acc10 = __fmaf_rn(v, -0.1875f, acc10);
            acc11 = __fmaf_rn(v, 0.25f, acc11);
            acc13 = __fmaf_rn(v, -0.0625f, acc13);
          }
          { const float v = xs[0][ty + 2][tx + 0];
            acc00 = __fmaf_rn(v, -0.1875f, acc00);
            acc01 = __fmaf_rn(v, 0.25f, acc01);
            acc02 = __fmaf_rn(v, -0.5f, acc02);
          }
          { const float v = xs[0][ty + 6][tx + 0];
            acc10 = __fmaf_rn(v, -0.1875f, acc10);
            acc11 = __fmaf_rn(v, 0.25f, acc11);
            acc12 = __fmaf_rn(v, -0.5f, acc12);
          }
          { const float v = xs[0][ty + 2][tx + 1];
            acc00 = __fmaf_rn(v, 0.5f, acc00);
            acc01 = __fmaf_rn(v, -0.25f, acc01);
            acc03 = __fmaf_rn(v, -0.5625f, acc03);
          }
          { const float v = xs[0][ty + 6][tx + 1];
            acc10 = __fmaf_rn(v, 0.5f, acc10);
            acc11 = __fmaf_rn(v, -0.25f, acc11);
            acc13 = __fmaf_rn(v, -0.5625f, acc13);
          }
          { const float v = xs[0][ty + 2][tx + 2];
            acc02 = __fmaf_rn(v, -0.3125f, acc02);
            acc03 = __fmaf_rn(v, 0.125f, acc03);
          }
          { const float v = xs[0][ty + 6][tx + 2];
            acc12 = __fmaf_rn(v, -0.3125f, acc12);
            acc13 = __fmaf_rn(v, 0.125f, acc13);
          }
          { const float v = xs[1][ty + 0][tx + 0];
            acc00 = __fmaf_rn(v, -0.25f, acc00);
            acc01 = __fmaf_rn(v, 0.1875f, acc01);
            acc02 = __fmaf_rn(v, -0.5625f, acc02);
          }
          { const float v = xs[1][ty + 4][tx + 0];
            acc10 = __fmaf_rn(v, -0.25f, acc10);
            acc11 = __fmaf_rn(v, 0.1875f, acc11);
            acc12 = __fmaf_rn(v, -0.5625f, acc12);
          }
          { const float v = xs[1][ty + 0][tx + 1];
            acc00 = __fmaf_rn(v, 0.4375f, acc00);
            acc01 = __fmaf_rn(v, -0.3125f, acc01);
            acc03 = __fmaf_rn(v, 0.5625f, acc03);
          }
          { const float v = xs[1][ty + 4][tx + 1];
            acc10 = __fmaf_rn(v, 0.4375f, acc10);
            acc11 = __fmaf_rn(v, -0.3125f, acc11);
            acc13 = __fmaf_rn(v, 0.5625f, acc13);
          }
          { const float v = xs[1][ty + 0][tx + 2];
            acc00 = __fmaf_rn(v, -0.0625f, acc00);
            acc02 = __fmaf_rn(v, -0.375f, acc02);
            acc03 = __fmaf_rn(v, 0.0625f, acc03);
          }
          { const float v = xs[1][ty + 4][tx + 2];
            acc10 = __fmaf_rn(v, -0.0625f, acc10);
            acc12 = __fmaf_rn(v, -0.375f, acc12);
            acc13 = __fmaf_rn(v, 0.0625f, acc13);
          }
          { const float v = xs[1][ty + 1][tx + 0];
            acc00 = __fmaf_rn(v, -0.0625f, acc00);
            acc01 = __fmaf_rn(v, 0.375f, acc01);
            acc03 = __fmaf_rn(v, 0.0625f, acc03);
          }
          { const float v = xs[1][ty + 5][tx + 0];
            acc10 = __fmaf_rn(v, -0.0625f, acc10);
            acc11 = __fmaf_rn(v, 0.375f, acc11);
            acc13 = __fmaf_rn(v, 0.0625f, acc13);
          }
          { const float v = xs[1][ty + 1][tx + 1];
            acc00 = __fmaf_rn(v, -0.5625f, acc00);
            acc02 = __fmaf_rn(v, 0.3125f, acc02);
            acc03 = __fmaf_rn(v, -0.4375f, acc03);
          }
          { const float v = xs[1][ty + 5][tx + 1];
            acc10 = __fmaf_rn(v, -0.5625f, acc10);
            acc12 = __fmaf_rn(v, 0.3125f, acc12);
            acc13 = __fmaf_rn(v, -0.4375f, acc13);
          }
          { const float v = xs[1][ty + 1][tx + 2];
            acc01 = __fmaf_rn(v, 0.5625f, acc01);
            acc02 = __fmaf_rn(v, -0.1875f, acc02);
            acc03 = __fmaf_rn(v, 0.25f, acc03);
          }
          { const float v = xs[1][ty + 5][tx + 2];
            acc11 = __fmaf_rn(v, 0.5625f, acc11);
            acc12 = __fmaf_rn(v, -0.1875f, acc12);
            acc13 = __fmaf_rn(v, 0.25f, acc13);
          }
          { const float v = xs[1][ty + 2][tx + 0];
            acc00 = __fmaf_rn(v, 0.125f, acc00);
            acc02 = __fmaf_rn(v, -0.1875f, acc02);
            acc03 = __fmaf_rn(v, 0.25f, acc03);
          }
          { const float v = xs[1][ty + 6][tx + 0];
            acc10 = __fmaf_rn(v, 0.125f, acc10);
            acc12 = __fmaf_rn(v, -0.1875f, acc12);
            acc13 = __fmaf_rn(v, 0.25f, acc13);
          }
          { const float v = xs[1][ty + 2][tx + 1];
            acc01 = __fmaf_rn(v, 0.0625f, acc01);
            acc02 = __fmaf_rn(v, 0.5f, acc02);
            acc03 = __fmaf_rn(v, -0.25f, acc03);
          }
          { const float v = xs[1][ty + 6][tx + 1];
            acc11 = __fmaf_rn(v, 0.0625f, acc11);
            acc12 = __fmaf_rn(v, 0.5f, acc12);
            acc13 = __fmaf_rn(v, -0.25f, acc13);
          }
          { const float v = xs[1][ty + 2][tx + 2];
            acc00 = __fmaf_rn(v, 0.3125f, acc00);
            acc01 = __fmaf_rn(v, -0.4375f, acc01);
            acc03 = __fmaf_rn(v, 0.4375f, acc03);
          }
          { const float v = xs[1][ty + 6][tx + 2];
            acc10 = __fmaf_rn(v, 0.3125f, acc10);
            acc11 = __fmaf_rn(v, -0.4375f, acc11);
            acc13 = __fmaf_rn(v, 0.4375f, acc13);
          }
          { const float v = xs[2][ty + 0][tx + 0];
            acc00 = __fmaf_rn(v, 0.0625f, acc00);
            acc02 = __fmaf_rn(v, -0.25f, acc02);
            acc03 = __fmaf_rn(v, 0.1875f, acc03);
          }
          { const float v = xs[2][ty + 4][tx + 0];
            acc10 = __fmaf_rn(v, 0.0625f, acc10);
            acc12 = __fmaf_rn(v, -0.25f, acc12);
            acc13 = __fmaf_rn(v, 0.1875f, acc13);
          }
          { const float v = xs[2][ty + 0][tx + 1];
            acc02 = __fmaf_rn(v, 0.4375f, acc02);
            acc03 = __fmaf_rn(v, -0.3125f, acc03);
          }
          { const float v = xs[2][ty + 4][tx + 1];
            acc12 = __fmaf_rn(v, 0.4375f, acc12);
            acc13 = __fmaf_rn(v, -0.3125f, acc13);
          }
          { const float v = xs[2][ty + 0][tx + 2];
            acc00 = __fmaf_rn(v, 0.25f, acc00);
            acc01 = __fmaf_rn(v, -0.5f, acc01);
            acc02 = __fmaf_rn(v, -0.0625f, acc02);
            acc03 = __fmaf_rn(v, 0.375f, acc03);
          }
          { const float v = xs[2][ty + 4][tx + 2];
            acc10 = __fmaf_rn(v, 0.25f, acc10);
            acc11 = __fmaf_rn(v, -0.5f, acc11);
            acc12 = __fmaf_rn(v, -0.0625f, acc12);
            acc13 = __fmaf_rn(v, 0.375f, acc13);
          }
          { const float v = xs[2][ty + 1][tx + 0];
            acc01 = __fmaf_rn(v, -0.5f, acc01);
            acc02 = __fmaf_rn(v, -0.0625f, acc02);
            acc03 = __fmaf_rn(v, 0.375f, acc03);
          }
          { const float v = xs[2][ty + 5][tx + 0];
            acc11 = __fmaf_rn(v, -0.5f, acc11);
            acc12 = __fmaf_rn(v, -0.0625f, acc12);
            acc13 = __fmaf_rn(v, 0.375f, acc13);
          }
          { const float v = xs[2][ty + 1][tx + 1];
            acc00 = __fmaf_rn(v, -0.25f, acc00);
            acc01 = __fmaf_rn(v, 0.1875f, acc01);
            acc02 = __fmaf_rn(v, -0.5625f, acc02);
            acc03 = __fmaf_rn(v, -0.125f, acc03);
          }
          { const float v = xs[2][ty + 5][tx + 1];
            acc10 = __fmaf_rn(v, -0.25f, acc10);
            acc11 = __fmaf_rn(v, 0.1875f, acc11);
            acc12 = __fmaf_rn(v, -0.5625f, acc12);
            acc13 = __fmaf_rn(v, -0.125f, acc13);
          }
          { const float v = xs[2][ty + 1][tx + 2];
            acc00 = __fmaf_rn(v, 0.4375f, acc00);
            acc01 = __fmaf_rn(v, -0.3125f, acc01);
            acc02 = __fmaf_rn(v, 0.125f, acc02);
          }
          { const float v = xs[2][ty + 5][tx + 2];
            acc10 = __fmaf_rn(v, 0.4375f, acc10);
            acc11 = __fmaf_rn(v, -0.3125f, acc11);
            acc12 = __fmaf_rn(v, 0.125f, acc12);
          }
          { const float v = xs[2][ty + 2][tx + 0];
            acc00 = __fmaf_rn(v, 0.4375f, acc00);
            acc01 = __fmaf_rn(v, -0.3125f, acc01);
            acc02 = __fmaf_rn(v, 0.125f, acc02);
            acc03 = __fmaf_rn(v, 0.5625f, acc03);
          }
          { const float v = xs[2][ty + 6][tx + 0];
            acc10 = __fmaf_rn(v, 0.4375f, acc10);
            acc11 = __fmaf_rn(v, -0.3125f, acc11);
            acc12 = __fmaf_rn(v, 0.125f, acc12);
            acc13 = __fmaf_rn(v, 0.5625f, acc13);
          }
          { const float v = xs[2][ty + 2][tx + 1];
            acc00 = __fmaf_rn(v, -0.0625f, acc00);
            acc01 = __fmaf_rn(v, 0.375f, acc01);
            acc02 = __fmaf_rn(v, -0.375f, acc02);
          }
          { const float v = xs[2][ty + 6][tx + 1];
            acc10 = __fmaf_rn(v, -0.0625f, acc10);
            acc11 = __fmaf_rn(v, 0.375f, acc11);
            acc12 = __fmaf_rn(v, -0.375f, acc12);
          }
          { const float v = xs[2][ty + 2][tx + 2];
            acc00 = __fmaf_rn(v, -0.5625f, acc00);
            acc01 = __fmaf_rn(v, -0.125f, acc01);
            acc03 = __fmaf_rn(v, -0.4375f, acc03);
          }
          { const float v = xs[2][ty + 6][tx + 2];
            acc10 = __fmaf_rn(v, -0.5625f, acc10);
            acc11 = __fmaf_rn(v, -0.125f, acc11);
            acc13 = __fmaf_rn(v, -0.4375f, acc13);
          }
          break;
        }
        case 1: {
          { const float v = xs[0][ty + 0][tx + 0];
            acc02 = __fmaf_rn(v, -0.3125f, acc02);
            acc03 = __fmaf_rn(v, 0.125f, acc03);
          }
          { const float v = xs[0][ty + 4][tx + 0];
            acc12 = __fmaf_rn(v, -0.3125f, acc12);
            acc13 = __fmaf_rn(v, 0.125f, acc13);
          }
          { const float v = xs[0][ty + 0][tx + 1];
            acc01 = __fmaf_rn(v, -0.0625f, acc01);
            acc02 = __fmaf_rn(v, 0.375f, acc02);
            acc03 = __fmaf_rn(v, -0.375f, acc03);
          }
          { const float v = xs[0][ty + 4][tx + 1];
            acc11 = __fmaf_rn(v, -0.0625f, acc11);
            acc12 = __fmaf_rn(v, 0.375f, acc12);
            acc13 = __fmaf_rn(v, -0.375f, acc13);
          }
          { const float v = xs[0][ty + 0][tx + 2];
            acc00 = __fmaf_rn(v, 0.1875f, acc00);
            acc01 = __fmaf_rn(v, -0.5625f, acc01);
            acc02 = __fmaf_rn(v, -0.125f, acc02);
            acc03 = __fmaf_rn(v, 0.3125f, acc03);
          }
          { const float v = xs[0][ty + 4][tx + 2];
            acc10 = __fmaf_rn(v, 0.1875f, acc10);
            acc11 = __fmaf_rn(v, -0.5625f, acc11);
            acc12 = __fmaf_rn(v, -0.125f, acc12);
            acc13 = __fmaf_rn(v, 0.3125f, acc13);
          }
          { const float v = xs[0][ty + 1][tx + 0];
            acc01 = __fmaf_rn(v, -0.5625f, acc01);
            acc02 = __fmaf_rn(v, -0.125f, acc02);
            acc03 = __fmaf_rn(v, 0.3125f, acc03);
          }
          { const float v = xs[0][ty + 5][tx + 0];
            acc11 = __fmaf_rn(v, -0.5625f, acc11);
            acc12 = __fmaf_rn(v, -0.125f, acc12);
            acc13 = __fmaf_rn(v, 0.3125f, acc13);
          }
          { const float v = xs[0][ty + 1][tx + 1];
            acc00 = __fmaf_rn(v, -0.3125f, acc00);
            acc01 = __fmaf_rn(v, 0.125f, acc01);
            acc02 = __fmaf_rn(v, 0.5625f, acc02);
            acc03 = __fmaf_rn(v, -0.1875f, acc03);
          }
          { const float v = xs[0][ty + 5][tx + 1];
            acc10 = __fmaf_rn(v, -0.3125f, acc10);
            acc11 = __fmaf_rn(v, 0.125f, acc11);
            acc12 = __fmaf_rn(v, 0.5625f, acc12);
            acc13 = __fmaf_rn(v, -0.1875f, acc13);
          }
          { const float v = xs[0][ty + 1][tx + 2];
            acc00 = __fmaf_rn(v, 0.375f, acc00);
            acc01 = __fmaf_rn(v, -0.375f, acc01);
            acc02 = __fmaf_rn(v, 0.0625f, acc02);
          }
          { const float v = xs[0][ty + 5][tx + 2];
            acc10 = __fmaf_rn(v, 0.375f, acc10);
            acc11 = __fmaf_rn(v, -0.375f, acc11);
            acc12 = __fmaf_rn(v, 0.0625f, acc12);
          }
          { const float v = xs[0][ty + 2][tx + 0];
            acc00 = __fmaf_rn(v, 0.375f, acc00);
            acc01 = __fmaf_rn(v, -0.375f, acc01);
            acc02 = __fmaf_rn(v, 0.0625f, acc02);
            acc03 = __fmaf_rn(v, 0.5f, acc03);
          }
          { const float v = xs[0][ty + 6][tx + 0];
            acc10 = __fmaf_rn(v, 0.375f, acc10);
            acc11 = __fmaf_rn(v, -0.375f, acc11);
            acc12 = __fmaf_rn(v, 0.0625f, acc12);
            acc13 = __fmaf_rn(v, 0.5f, acc13);
          }
          { const float v = xs[0][ty + 2][tx + 1];
            acc00 = __fmaf_rn(v, -0.125f, acc00);
            acc01 = __fmaf_rn(v, 0.3125f, acc01);
            acc02 = __fmaf_rn(v, -0.4375f, acc02);
          }
          { const float v = xs[0][ty + 6][tx + 1];
            acc10 = __fmaf_rn(v, -0.125f, acc10);
            acc11 = __fmaf_rn(v, 0.3125f, acc11);
            acc12 = __fmaf_rn(v, -0.4375f, acc12);
          }
          { const float v = xs[0][ty + 2][tx + 2];
            acc00 = __fmaf_rn(v, 0.5625f, acc00);
            acc01 = __fmaf_rn(v, -0.1875f, acc01);
            acc03 = __fmaf_rn(v, -0.5f, acc03);
          }
          { const float v = xs[0][ty + 6][tx + 2];
            acc10 = __fmaf_rn(v, 0.5625f, acc10);
            acc11 = __fmaf_rn(v, -0.1875f, acc11);
            acc13 = __fmaf_rn(v, -0.5f, acc13);
          }
          { const float v = xs[1][ty + 0][tx + 0];
            acc00 = __fmaf_rn(v, 0.3125f, acc00);
            acc01 = __fmaf_rn(v, -0.4375f, acc01);
            acc03 = __fmaf_rn(v, 0.4375f, acc03);
          }
          { const float v = xs[1][ty + 4][tx + 0];
            acc10 = __fmaf_rn(v, 0.3125f, acc10);
            acc11 = __fmaf_rn(v, -0.4375f, acc11);
            acc13 = __fmaf_rn(v, 0.4375f, acc13);
          }
          { const float v = xs[1][ty + 0][tx + 1];
            acc00 = __fmaf_rn(v, -0.1875f, acc00);
            acc01 = __fmaf_rn(v, 0.25f, acc01);
            acc02 = __fmaf_rn(v, -0.5f, acc02);
          }
          { const float v = xs[1][ty + 4][tx + 1];
            acc10 = __fmaf_rn(v, -0.1875f, acc10);
            acc11 = __fmaf_rn(v, 0.25f, acc11);
            acc12 = __fmaf_rn(v, -0.5f, acc12);
          }
          { const float v = xs[1][ty + 0][tx + 2];
            acc00 = __fmaf_rn(v, 0.5f, acc00);
            acc01 = __fmaf_rn(v, -0.25f, acc01);
            acc03 = __fmaf_rn(v, -0.5625f, acc03);
          }
          { const float v = xs[1][ty + 4][tx + 2];
            acc10 = __fmaf_rn(v, 0.5f, acc10);
            acc11 = __fmaf_rn(v, -0.25f, acc11);
            acc13 = __fmaf_rn(v, -0.5625f, acc13);
          }
          { const float v = xs[1][ty + 1][tx + 0];
            acc00 = __fmaf_rn(v, 0.5f, acc00);
            acc01 = __fmaf_rn(v, -0.25f, acc01);
            acc02 = __fmaf_rn(v, 0.1875f, acc02);
          }
          { const float v = xs[1][ty + 5][tx + 0];
            acc10 = __fmaf_rn(v, 0.5f, acc10);
            acc11 = __fmaf_rn(v, -0.25f, acc11);
            acc12 = __fmaf_rn(v, 0.1875f, acc12);
          }
          { const float v = xs[1][ty + 1][tx + 1];
            acc01 = __fmaf_rn(v, 0.4375f, acc01);
            acc03 = __fmaf_rn(v, 0.125f, acc03);
          }
          { const float v = xs[1][ty + 5][tx + 1];
            acc11 = __fmaf_rn(v, 0.4375f, acc11);
            acc13 = __fmaf_rn(v, 0.125f, acc13);
          }
          { const float v = xs[1][ty + 1][tx + 2];
            acc00 = __fmaf_rn(v, -0.5f, acc00);
            acc02 = __fmaf_rn(v, 0.375f, acc02);
            acc03 = __fmaf_rn(v, -0.375f, acc03);
          }
          { const float v = xs[1][ty + 5][tx + 2];
            acc10 = __fmaf_rn(v, -0.5f, acc10);
            acc12 = __fmaf_rn(v, 0.375f, acc12);
            acc13 = __fmaf_rn(v, -0.375f, acc13);
          }
          { const float v = xs[1][ty + 2][tx + 0];
            acc00 = __fmaf_rn(v, -0.5f, acc00);
            acc01 = __fmaf_rn(v, -0.0625f, acc01);
            acc03 = __fmaf_rn(v, -0.375f, acc03);
          }
          { const float v = xs[1][ty + 6][tx + 0];
            acc10 = __fmaf_rn(v, -0.5f, acc10);
            acc11 = __fmaf_rn(v, -0.0625f, acc11);
            acc13 = __fmaf_rn(v, -0.375f, acc13);
          }
          { const float v = xs[1][ty + 2][tx + 1];
            acc00 = __fmaf_rn(v, 0.1875f, acc00);
            acc02 = __fmaf_rn(v, -0.125f, acc02);
            acc03 = __fmaf_rn(v, 0.3125f, acc03);
          }
          { const float v = xs[1][ty + 6][tx + 1];
            acc10 = __fmaf_rn(v, 0.1875f, acc10);
            acc12 = __fmaf_rn(v, -0.125f, acc12);
            acc13 = __fmaf_rn(v, 0.3125f, acc13);
          }
          { const float v = xs[1][ty + 2][tx + 2];
            acc01 = __fmaf_rn(v, 0.125f, acc01);
            acc02 = __fmaf_rn(v, 0.5625f, acc02);
            acc03 = __fmaf_rn(v, -0.1875f, acc03);
          }
          { const float v = xs[1][ty + 6][tx + 2];
            acc11 = __fmaf_rn(v, 0.125f, acc11);
            acc12 = __fmaf_rn(v, 0.5625f, acc12);
            acc13 = __fmaf_rn(v, -0.1875f, acc13);
          }
          { const float v = xs[2][ty + 0][tx + 0];
            acc00 = __fmaf_rn(v, -0.5625f, acc00);
            acc01 = __fmaf_rn(v, -0.125f, acc01);
            acc03 = __fmaf_rn(v, -0.4375f, acc03);
          }
          { const float v = xs[2][ty + 4][tx + 0];
            acc10 = __fmaf_rn(v, -0.5625f, acc10);
            acc11 = __fmaf_rn(v, -0.125f, acc11);
            acc13 = __fmaf_rn(v, -0.4375f, acc13);
          }
          { const float v = xs[2][ty + 0][tx + 1];
            acc00 = __fmaf_rn(v, 0.125f, acc00);
            acc02 = __fmaf_rn(v, -0.1875f, acc02);
            acc03 = __fmaf_rn(v, 0.25f, acc03);
          }
          { const float v = xs[2][ty + 4][tx + 1];
            acc10 = __fmaf_rn(v, 0.125f, acc10);
            acc12 = __fmaf_rn(v, -0.1875f, acc12);
            acc13 = __fmaf_rn(v, 0.25f, acc13);
          }
          { const float v = xs[2][ty + 0][tx + 2];
            acc01 = __fmaf_rn(v, 0.0625f, acc01);
            acc02 = __fmaf_rn(v, 0.5f, acc02);
            acc03 = __fmaf_rn(v, -0.25f, acc03);
          }
          { const float v = xs[2][ty + 4][tx + 2];
            acc11 = __fmaf_rn(v, 0.0625f, acc11);
            acc12 = __fmaf_rn(v, 0.5f, acc12);
            acc13 = __fmaf_rn(v, -0.25f, acc13);
          }
          { const float v = xs[2][ty + 1][tx + 0];
            acc00 = __fmaf_rn(v, -0.375f, acc00);
            acc02 = __fmaf_rn(v, 0.5f, acc02);
            acc03 = __fmaf_rn(v, -0.25f, acc03);
          }
          { const float v = xs[2][ty + 5][tx + 0];
            acc10 = __fmaf_rn(v, -0.375f, acc10);
            acc12 = __fmaf_rn(v, 0.5f, acc12);
            acc13 = __fmaf_rn(v, -0.25f, acc13);
          }
          { const float v = xs[2][ty + 1][tx + 1];
            acc01 = __fmaf_rn(v, -0.4375f, acc01);
            acc03 = __fmaf_rn(v, 0.4375f, acc03);
          }
          { const float v = xs[2][ty + 5][tx + 1];
            acc11 = __fmaf_rn(v, -0.4375f, acc11);
            acc13 = __fmaf_rn(v, 0.4375f, acc13);
          }
          { const float v = xs[2][ty + 1][tx + 2];
            acc00 = __fmaf_rn(v, -0.1875f, acc00);
            acc01 = __fmaf_rn(v, 0.25f, acc01);
            acc02 = __fmaf_rn(v, -0.5f, acc02);
            acc03 = __fmaf_rn(v, -0.0625f, acc03);
          }
          { const float v = xs[2][ty + 5][tx + 2];
            acc10 = __fmaf_rn(v, -0.1875f, acc10);
            acc11 = __fmaf_rn(v, 0.25f, acc11);
            acc12 = __fmaf_rn(v, -0.5f, acc12);
            acc13 = __fmaf_rn(v, -0.0625f, acc13);
          }
          { const float v = xs[2][ty + 2][tx + 0];
            acc01 = __fmaf_rn(v, 0.25f, acc01);
            acc02 = __fmaf_rn(v, -0.5f, acc02);
            acc03 = __fmaf_rn(v, -0.0625f, acc03);
          }
          { const float v = xs[2][ty + 6][tx + 0];
            acc11 = __fmaf_rn(v, 0.25f, acc11);
            acc12 = __fmaf_rn(v, -0.5f, acc12);
            acc13 = __fmaf_rn(v, -0.0625f, acc13);
          }
          { const float v = xs[2][ty + 2][tx + 1];
            acc00 = __fmaf_rn(v, 0.5f, acc00);
            acc01 = __fmaf_rn(v, -0.25f, acc01);
            acc02 = __fmaf_rn(v, 0.1875f, acc02);
            acc03 = __fmaf_rn(v, -0.5625f, acc03);
          }
          { const float v = xs[2][ty + 6][tx + 1];
            acc10 = __fmaf_rn(v, 0.5f, acc10);
            acc11 = __fmaf_rn(v, -0.25f, acc11);
            acc12 = __fmaf_rn(v, 0.1875f, acc12);
            acc13 = __fmaf_rn(v, -0.5625f, acc13);
          }
          { const float v = xs[2][ty + 2][tx + 2];
            acc01 = __fmaf_rn(v, 0.4375f, acc01);
            acc02 = __fmaf_rn(v, -0.3125f, acc02);
          }
          { const float v = xs[2][ty + 6][tx + 2];
            acc11 = __fmaf_rn(v, 0.4375f, acc11);
            acc12 = __fmaf_rn(v, -0.3125f, acc12);
          }
          break;
        }
      }
    } else if (c0 == 3) {
      switch (g) {
        case 0: {
          { const float v = xs[0][ty + 0][tx + 0];
            acc00 = __fmaf_rn(v, 0.375f, acc00);
            acc01 = __fmaf_rn(v, -0.375f, acc01);
            acc02 = __fmaf_rn(v, 0.0625f, acc02);
            acc03 = __fmaf_rn(v, 0.5f, acc03);
          }
          { const float v = xs[0][ty + 4][tx + 0];
            acc10 = __fmaf_rn(v, 0.375f, acc10);
            acc11 = __fmaf_rn(v, -0.375f, acc11);
            acc12 = __fmaf_rn(v, 0.0625f, acc12);
            acc13 = __fmaf_rn(v, 0.5f, acc13);
          }
          { const float v = xs[0][ty + 0][tx + 1];
            acc00 = __fmaf_rn(v, -0.125f, acc00);
            acc01 = __fmaf_rn(v, 0.3125f, acc01);
            acc02 = __fmaf_rn(v, -0.4375f, acc02);
          }
          { const float v = xs[0][ty + 4][tx + 1];
            acc10 = __fmaf_rn(v, -0.125f, acc10);
            acc11 = __fmaf_rn(v, 0.3125f, acc11);
            acc12 = __fmaf_rn(v, -0.4375f, acc12);
          }
          { const float v = xs[0][ty + 0][tx + 2];
            acc00 = __fmaf_rn(v, 0.5625f, acc00);
            acc01 = __fmaf_rn(v, -0.1875f, acc01);
            acc03 = __fmaf_rn(v, -0.5f, acc03);
          }
          { const float v = xs[0][ty + 4][tx + 2];
            acc10 = __fmaf_rn(v, 0.5625f, acc10);
            acc11 = __fmaf_rn(v, -0.1875f, acc11);
            acc13 = __fmaf_rn(v, -0.5f, acc13);
          }
          { const float v = xs[0][ty + 1][tx + 0];
            acc00 = __fmaf_rn(v, 0.5625f, acc00);
            acc01 = __fmaf_rn(v, -0.1875f, acc01);
            acc02 = __fmaf_rn(v, 0.25f, acc02);
          }
          { const float v = xs[0][ty + 5][tx + 0];
            acc10 = __fmaf_rn(v, 0.5625f, acc10);
            acc11 = __fmaf_rn(v, -0.1875f, acc11);
            acc12 = __fmaf_rn(v, 0.25f, acc12);
          }
          { const float v = xs[0][ty + 1][tx + 1];
            acc00 = __fmaf_rn(v, 0.0625f, acc00);
            acc01 = __fmaf_rn(v, 0.5f, acc01);
            acc03 = __fmaf_rn(v, 0.1875f, acc03);
          }
          { const float v = xs[0][ty + 5][tx + 1];
            acc10 = __fmaf_rn(v, 0.0625f, acc10);
            acc11 = __fmaf_rn(v, 0.5f, acc11);
            acc13 = __fmaf_rn(v, 0.1875f, acc13);
          }
          { const float v = xs[0][ty + 1][tx + 2];
            acc00 = __fmaf_rn(v, -0.4375f, acc00);
            acc02 = __fmaf_rn(v, 0.4375f, acc02);
            acc03 = __fmaf_rn(v, -0.3125f, acc03);
          }
          { const float v = xs[0][ty + 5][tx + 2];
            acc10 = __fmaf_rn(v, -0.4375f, acc10);
            acc12 = __fmaf_rn(v, 0.4375f, acc12);
            acc13 = __fmaf_rn(v, -0.3125f, acc13);
          }
          { const float v = xs[0][ty + 2][tx + 0];
            acc00 = __fmaf_rn(v, -0.4375f, acc00);
            acc03 = __fmaf_rn(v, -0.3125f, acc03);
          }
          { const float v = xs[0][ty + 6][tx + 0];
            acc10 = __fmaf_rn(v, -0.4375f, acc10);
            acc13 = __fmaf_rn(v, -0.3125f, acc13);
          }
          { const float v = xs[0][ty + 2][tx + 1];
            acc00 = __fmaf_rn(v, 0.25f, acc00);
            acc02 = __fmaf_rn(v, -0.0625f, acc02);
            acc03 = __fmaf_rn(v, 0.375f, acc03);
          }
          { const float v = xs[0][ty + 6][tx + 1];
            acc10 = __fmaf_rn(v, 0.25f, acc10);
            acc12 = __fmaf_rn(v, -0.0625f, acc12);
            acc13 = __fmaf_rn(v, 0.375f, acc13);
          }
          { const float v = xs[0][ty + 2][tx + 2];
            acc01 = __fmaf_rn(v, 0.1875f, acc01);
            acc02 = __fmaf_rn(v, -0.5625f, acc02);
            acc03 = __fmaf_rn(v, -0.125f, acc03);
          }
          { const float v = xs[0][ty + 6][tx + 2];
            acc11 = __fmaf_rn(v, 0.1875f, acc11);
            acc12 = __fmaf_rn(v, -0.5625f, acc12);
            acc13 = __fmaf_rn(v, -0.125f, acc13);
          }
          { const float v = xs[1][ty + 0][tx + 0];
            acc00 = __fmaf_rn(v, -0.5f, acc00);
            acc01 = __fmaf_rn(v, -0.0625f, acc01);
            acc03 = __fmaf_rn(v, -0.375f, acc03);
          }
          { const float v = xs[1][ty + 4][tx + 0];
            acc10 = __fmaf_rn(v, -0.5f, acc10);
            acc11 = __fmaf_rn(v, -0.0625f, acc11);
            acc13 = __fmaf_rn(v, -0.375f, acc13);
          }
          { const float v = xs[1][ty + 0][tx + 1];
            acc00 = __fmaf_rn(v, 0.1875f, acc00);
            acc02 = __fmaf_rn(v, -0.125f, acc02);
            acc03 = __fmaf_rn(v, 0.3125f, acc03);
          }
          { const float v = xs[1][ty + 4][tx + 1];
            acc10 = __fmaf_rn(v, 0.1875f, acc10);
            acc12 = __fmaf_rn(v, -0.125f, acc12);
            acc13 = __fmaf_rn(v, 0.3125f, acc13);
          }
          { const float v = xs[1][ty + 0][tx + 2];
            acc01 = __fmaf_rn(v, 0.125f, acc01);
            acc02 = __fmaf_rn(v, 0.5625f, acc02);
            acc03 = __fmaf_rn(v, -0.1875f, acc03);
          }
          { const float v = xs[1][ty + 4][tx + 2];
            acc11 = __fmaf_rn(v, 0.125f, acc11);
            acc12 = __fmaf_rn(v, 0.5625f, acc12);
            acc13 = __fmaf_rn(v, -0.1875f, acc13);
          }
          { const float v = xs[1][ty + 1][tx + 0];
            acc00 = __fmaf_rn(v, -0.3125f, acc00);
            acc02 = __fmaf_rn(v, 0.5625f, acc02);
            acc03 = __fmaf_rn(v, -0.1875f, acc03);
          }
          { const float v = xs[1][ty + 5][tx + 0];
            acc10 = __fmaf_rn(v, -0.3125f, acc10);
            acc12 = __fmaf_rn(v, 0.5625f, acc12);
            acc13 = __fmaf_rn(v, -0.1875f, acc13);
          }
          { const float v = xs[1][ty + 1][tx + 1];
            acc01 = __fmaf_rn(v, -0.375f, acc01);
            acc02 = __fmaf_rn(v, 0.0625f, acc02);
            acc03 = __fmaf_rn(v, 0.5f, acc03);
          }
          { const float v = xs[1][ty + 5][tx + 1];
            acc11 = __fmaf_rn(v, -0.375f, acc11);
            acc12 = __fmaf_rn(v, 0.0625f, acc12);
            acc13 = __fmaf_rn(v, 0.5f, acc13);
          }
          { const float v = xs[1][ty + 1][tx + 2];
            acc00 = __fmaf_rn(v, -0.125f, acc00);
            acc01 = __fmaf_rn(v, 0.3125f, acc01);
            acc02 = __fmaf_rn(v, -0.4375f, acc02);
          }
          { const float v = xs[1][ty + 5][tx + 2];
            acc10 = __fmaf_rn(v, -0.125f, acc10);
            acc11 = __fmaf_rn(v, 0.3125f, acc11);
            acc12 = __fmaf_rn(v, -0.4375f, acc12);
          }
          { const float v = xs[1][ty + 2][tx + 0];
            acc01 = __fmaf_rn(v, 0.3125f, acc01);
            acc02 = __fmaf_rn(v, -0.4375f, acc02);
          }
          { const float v = xs[1][ty + 6][tx + 0];
            acc11 = __fmaf_rn(v, 0.3125f, acc11);
            acc12 = __fmaf_rn(v, -0.4375f, acc12);
          }
          { const float v = xs[1][ty + 2][tx + 1];
            acc00 = __fmaf_rn(v, 0.5625f, acc00);
            acc01 = __fmaf_rn(v, -0.1875f, acc01);
            acc02 = __fmaf_rn(v, 0.25f, acc02);
            acc03 = __fmaf_rn(v, -0.5f, acc03);
          }
          { const float v = xs[1][ty + 6][tx + 1];
            acc10 = __fmaf_rn(v, 0.5625f, acc10);
            acc11 = __fmaf_rn(v, -0.1875f, acc11);
            acc12 = __fmaf_rn(v, 0.25f, acc12);
            acc13 = __fmaf_rn(v, -0.5f, acc13);
          }
          { const float v = xs[1][ty + 2][tx + 2];
            acc00 = __fmaf_rn(v, 0.0625f, acc00);
            acc01 = __fmaf_rn(v, 0.5f, acc01);
            acc02 = __fmaf_rn(v, -0.25f, acc02);
          }
          { const float v = xs[1][ty + 6][tx + 2];
            acc10 = __fmaf_rn(v, 0.0625f, acc10);
            acc11 = __fmaf_rn(v, 0.5f, acc11);
            acc12 = __fmaf_rn(v, -0.25f, acc12);
          }
          break;
        }
        case 1: {
          { const float v = xs[0][ty + 0][tx + 0];
            acc01 = __fmaf_rn(v, 0.1875f, acc01);
            acc02 = __fmaf_rn(v, -0.5625f, acc02);
            acc03 = __fmaf_rn(v, -0.125f, acc03);
          }
          { const float v = xs[0][ty + 4][tx + 0];
            acc11 = __fmaf_rn(v, 0.1875f, acc11);
            acc12 = __fmaf_rn(v, -0.5625f, acc12);
            acc13 = __fmaf_rn(v, -0.125f, acc13);
          }
          { const float v = xs[0][ty + 0][tx + 1];
            acc00 = __fmaf_rn(v, 0.4375f, acc00);
            acc01 = __fmaf_rn(v, -0.3125f, acc01);
            acc02 = __fmaf_rn(v, 0.125f, acc02);
            acc03 = __fmaf_rn(v, 0.5625f, acc03);
          }
          { const float v = xs[0][ty + 4][tx + 1];
            acc10 = __fmaf_rn(v, 0.4375f, acc10);
            acc11 = __fmaf_rn(v, -0.3125f, acc11);
            acc12 = __fmaf_rn(v, 0.125f, acc12);
            acc13 = __fmaf_rn(v, 0.5625f, acc13);
          }
          { const float v = xs[0][ty + 0][tx + 2];
            acc00 = __fmaf_rn(v, -0.0625f, acc00);
            acc01 = __fmaf_rn(v, 0.375f, acc01);
            acc02 = __fmaf_rn(v, -0.375f, acc02);
          }
          { const float v = xs[0][ty + 4][tx + 2];
            acc10 = __fmaf_rn(v, -0.0625f, acc10);
            acc11 = __fmaf_rn(v, 0.375f, acc11);
            acc12 = __fmaf_rn(v, -0.375f, acc12);
          }
          { const float v = xs[0][ty + 1][tx + 0];
            acc00 = __fmaf_rn(v, -0.0625f, acc00);
            acc01 = __fmaf_rn(v, 0.375f, acc01);
            acc02 = __fmaf_rn(v, -0.375f, acc02);
            acc03 = __fmaf_rn(v, 0.0625f, acc03);
          }
          { const float v = xs[0][ty + 5][tx + 0];
            acc10 = __fmaf_rn(v, -0.0625f, acc10);
            acc11 = __fmaf_rn(v, 0.375f, acc11);
            acc12 = __fmaf_rn(v, -0.375f, acc12);
            acc13 = __fmaf_rn(v, 0.0625f, acc13);
          }
          { const float v = xs[0][ty + 1][tx + 1];
            acc00 = __fmaf_rn(v, -0.5625f, acc00);
            acc01 = __fmaf_rn(v, -0.125f, acc01);
            acc02 = __fmaf_rn(v, 0.3125f, acc02);
          }
          { const float v = xs[0][ty + 5][tx + 1];
            acc10 = __fmaf_rn(v, -0.5625f, acc10);
            acc11 = __fmaf_rn(v, -0.125f, acc11);
            acc12 = __fmaf_rn(v, 0.3125f, acc12);
          }
          { const float v = xs[0][ty + 1][tx + 2];
            acc00 = __fmaf_rn(v, 0.125f, acc00);
            acc01 = __fmaf_rn(v, 0.5625f, acc01);
            acc03 = __fmaf_rn(v, 0.25f, acc03);
          }
          { const float v = xs[0][ty + 5][tx + 2];
            acc10 = __fmaf_rn(v, 0.125f, acc10);
            acc11 = __fmaf_rn(v, 0.5625f, acc11);
            acc13 = __fmaf_rn(v, 0.25f, acc13);
          }
          { const float v = xs[0][ty + 2][tx + 0];
            acc00 = __fmaf_rn(v, 0.125f, acc00);
            acc01 = __fmaf_rn(v, 0.5625f, acc01);
            acc02 = __fmaf_rn(v, -0.1875f, acc02);
          }
          { const float v = xs[0][ty + 6][tx + 0];
            acc10 = __fmaf_rn(v, 0.125f, acc10);
            acc11 = __fmaf_rn(v, 0.5625f, acc11);
            acc12 = __fmaf_rn(v, -0.1875f, acc12);
          }
          { const float v = xs[0][ty + 2][tx + 1];
            acc00 = __fmaf_rn(v, -0.375f, acc00);
            acc01 = __fmaf_rn(v, 0.0625f, acc01);
            acc03 = __fmaf_rn(v, -0.25f, acc03);
          }
          { const float v = xs[0][ty + 6][tx + 1];
            acc10 = __fmaf_rn(v, -0.375f, acc10);
            acc11 = __fmaf_rn(v, 0.0625f, acc11);
            acc13 = __fmaf_rn(v, -0.25f, acc13);
          }
          { const float v = xs[0][ty + 2][tx + 2];
            acc00 = __fmaf_rn(v, 0.3125f, acc00);
            acc03 = __fmaf_rn(v, 0.4375f, acc03);
          }
          { const float v = xs[0][ty + 6][tx + 2];
            acc10 = __fmaf_rn(v, 0.3125f, acc10);
            acc13 = __fmaf_rn(v, 0.4375f, acc13);
          }
          { const float v = xs[1][ty + 0][tx + 0];
            acc00 = __fmaf_rn(v, 0.0625f, acc00);
            acc01 = __fmaf_rn(v, 0.5f, acc01);
            acc02 = __fmaf_rn(v, -0.25f, acc02);
          }
          { const float v = xs[1][ty + 4][tx + 0];
            acc10 = __fmaf_rn(v, 0.0625f, acc10);
            acc11 = __fmaf_rn(v, 0.5f, acc11);
            acc12 = __fmaf_rn(v, -0.25f, acc12);
          }
          { const float v = xs[1][ty + 0][tx + 1];
            acc00 = __fmaf_rn(v, -0.4375f, acc00);
            acc03 = __fmaf_rn(v, -0.3125f, acc03);
          }
          { const float v = xs[1][ty + 4][tx + 1];
            acc10 = __fmaf_rn(v, -0.4375f, acc10);
            acc13 = __fmaf_rn(v, -0.3125f, acc13);
          }
          { const float v = xs[1][ty + 0][tx + 2];
            acc00 = __fmaf_rn(v, 0.25f, acc00);
            acc02 = __fmaf_rn(v, -0.0625f, acc02);
            acc03 = __fmaf_rn(v, 0.375f, acc03);
          }
          { const float v = xs[1][ty + 4][tx + 2];
            acc10 = __fmaf_rn(v, 0.25f, acc10);
            acc12 = __fmaf_rn(v, -0.0625f, acc12);
            acc13 = __fmaf_rn(v, 0.375f, acc13);
          }
          { const float v = xs[1][ty + 1][tx + 0];
            acc00 = __fmaf_rn(v, 0.25f, acc00);
            acc01 = __fmaf_rn(v, -0.5f, acc01);
            acc03 = __fmaf_rn(v, 0.375f, acc03);
          }
          { const float v = xs[1][ty + 5][tx + 0];
            acc10 = __fmaf_rn(v, 0.25f, acc10);
            acc11 = __fmaf_rn(v, -0.5f, acc11);
            acc13 = __fmaf_rn(v, 0.375f, acc13);
          }
          { const float v = xs[1][ty + 1][tx + 1];
            acc00 = __fmaf_rn(v, -0.25f, acc00);
            acc02 = __fmaf_rn(v, -0.5625f, acc02);
            acc03 = __fmaf_rn(v, -0.125f, acc03);
          }
          { const float v = xs[1][ty + 5][tx + 1];
            acc10 = __fmaf_rn(v, -0.25f, acc10);
            acc12 = __fmaf_rn(v, -0.5625f, acc12);
            acc13 = __fmaf_rn(v, -0.125f, acc13);
          }
          { const float v = xs[1][ty + 1][tx + 2];
            acc01 = __fmaf_rn(v, -0.3125f, acc01);
            acc02 = __fmaf_rn(v, 0.125f, acc02);
            acc03 = __fmaf_rn(v, 0.5625f, acc03);
          }
          { const float v = xs[1][ty + 5][tx + 2];
            acc11 = __fmaf_rn(v, -0.3125f, acc11);
            acc12 = __fmaf_rn(v, 0.125f, acc12);
            acc13 = __fmaf_rn(v, 0.5625f, acc13);
          }
          { const float v = xs[1][ty + 2][tx + 0];
            acc00 = __fmaf_rn(v, 0.4375f, acc00);
            acc02 = __fmaf_rn(v, 0.125f, acc02);
            acc03 = __fmaf_rn(v, 0.5625f, acc03);
          }
          { const float v = xs[1][ty + 6][tx + 0];
            acc10 = __fmaf_rn(v, 0.4375f, acc10);
            acc12 = __fmaf_rn(v, 0.125f, acc12);
            acc13 = __fmaf_rn(v, 0.5625f, acc13);
          }
          { const float v = xs[1][ty + 2][tx + 1];
            acc01 = __fmaf_rn(v, 0.375f, acc01);
            acc02 = __fmaf_rn(v, -0.375f, acc02);
            acc03 = __fmaf_rn(v, 0.0625f, acc03);
          }
          { const float v = xs[1][ty + 6][tx + 1];
            acc11 = __fmaf_rn(v, 0.375f, acc11);
            acc12 = __fmaf_rn(v, -0.375f, acc12);
            acc13 = __fmaf_rn(v, 0.0625f, acc13);
          }
          { const float v = xs[1][ty + 2][tx + 2];
            acc00 = __fmaf_rn(v, -0.5625f, acc00);
            acc01 = __fmaf_rn(v, -0.125f, acc01);
            acc02 = __fmaf_rn(v, 0.3125f, acc02);
            acc03 = __fmaf_rn(v, -0.4375f, acc03);
          }
          { const float v = xs[1][ty + 6][tx + 2];
            acc10 = __fmaf_rn(v, -0.5625f, acc10);
            acc11 = __fmaf_rn(v, -0.125f, acc11);
            acc12 = __fmaf_rn(v, 0.3125f, acc12);
            acc13 = __fmaf_rn(v, -0.4375f, acc13);
          }
          break;
        }
      }
    }
    __syncthreads();
  }
  {
    const int k = g * 4 + 0;
    const float b = bias[k];
    { const int oh = oh0 + ty + 0, ow = ow0 + tx;
      if (oh < H && ow < W) {
        const int idx = ((n * K + k) * H + oh) * W + ow;
        y[idx] = fminf(fmaxf(acc00 + b + residual[idx], 0.f), 6.f);
      } }
    { const int oh = oh0 + ty + 4, ow = ow0 + tx;
      if (oh < H && ow < W) {
        const int idx = ((n * K + k) * H + oh) * W + ow;
        y[idx] = fminf(fmaxf(acc10 + b + residual[idx], 0.f), 6.f);
      } }
  }
  {
    const int k = g * 4 + 1;
    const float b = bias[k];
    { const int oh = oh0 + ty + 0, ow = ow0 + tx;
      if (oh < H && ow < W) {
        const int idx = ((n * K + k) * H + oh) * W + ow;
        y[idx] = fminf(fmaxf(acc01 + b + residual[idx], 0.f), 6.f);
      } }
    { const int oh = oh0 + ty + 4, ow = ow0 + tx;
      if (oh < H && ow < W) {
        const int idx = ((n * K + k) * H + oh) * W + ow;
        y[idx] = fminf(fmaxf(acc11 + b + residual[idx], 0.f), 6.f);
      } }
  }
  {
    const int k = g * 4 + 2;
    const float b = bias[k];
    { const int oh = oh0 + ty + 0, ow = ow0 + tx;
      if (oh < H && ow < W) {
        const int idx = ((n * K + k) * H + oh) * W + ow;
        y[idx] = fminf(fmaxf(acc02 + b + residual[idx], 0.f), 6.f);
      } }
    { const int oh = oh0 + ty + 4, ow = ow0 + tx;
      if (oh < H && ow < W) {
        const int idx = ((n * K + k) * H + oh) * W + ow;
        y[idx] = fminf(fmaxf(acc12 + b + residual[idx], 0.f), 6.f);
      } }
  }
  {
    const int k = g * 4 + 3;
    const float b = bias[k];
    { const int oh = oh0 + ty + 0, ow = ow0 + tx;
      if (oh < H && ow < W) {
        const int idx = ((n * K + k) * H + oh) * W + ow;
        y[idx] = fminf(fmaxf(acc03 + b + residual[idx], 0.f), 6.f);
      } }
    { const int oh = oh0 + ty + 4, ow = ow0 + tx;
      if (oh < H && ow < W) {
        const int idx = ((n * K + k) * H + oh) * W + ow;
        y[idx] = fminf(fmaxf(acc13 + b + residual[idx], 0.f), 6.f);
      } }
  }
}
