// The Winograd transforms (conv_winograd_transforms.h) compiled for AVX-512; only reached through these
// getters when cpu_features says the CPU has the ISA.
#include "kernels/cpu/conv_winograd_transforms.h"

namespace dnnfusion::kernels::wino_detail {

InputFn input_fn_avx512(int m, int64_t icb) { return pick_input(m, icb); }
OutputFn output_fn_avx512(int m, int64_t ocb) { return pick_output(m, ocb); }

}  // namespace dnnfusion::kernels::wino_detail
