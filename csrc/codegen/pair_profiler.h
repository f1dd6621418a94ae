// Measures DNNFusion's yellow cells (Table 3, fuse_depend): for a producer/consumer node pair it
// builds a two-node graph with the pair's real shapes, attributes and weights, compiles it once as
// one fused block and once as two blocks, and times both on random inputs. All fused variants of
// one call share one generated translation unit (one compiler run). A progress bar on stderr shows
// the measurements (they run once per machine and shape: the profile database keeps them).
// Precondition: each pair is (producer, consumer) with consumer reading an output of producer and
// both accepted by codegen::can_fuse. Postcondition: one timing per pair, in microseconds (median).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "ecg/graph.h"

namespace dnnfusion::codegen {

struct PairTiming {
  double fused_us = 0;
  double separate_us = 0;
};

// What identifies a pair's measurement: ops, mapping types, shapes/dtypes and attributes.
std::string pair_key(const ecg::Graph& g, int producer, int consumer);

std::vector<PairTiming> measure_pairs(const ecg::Graph& g, const std::vector<std::pair<int, int>>& pairs, int threads);

}  // namespace dnnfusion::codegen
