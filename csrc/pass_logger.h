// Runs passes and says what they did, the same way for every pass (as Halide's lowering does):
// each run is timed and recorded in CompileStats::passes; DNNFUSION_DEBUG=1 dumps the ECG after
// it (or says "unchanged"); DNNFUSION_TIME_PASSES=1 prints its time and detail;
// DNNFUSION_VERIFY=1 (and DNNFUSION_DEBUG) runs the ECG verifier after it.
// Precondition of run(): the context's graph verifies. Postcondition: one PassRecord appended.
#pragma once
#include <functional>
#include <string>

#include "compile_stats.h"
#include "passes.h"

namespace dnnfusion {

class PassLogger {
 public:
  struct Settings {
    bool debug = false;   // dump the graph after each pass
    bool timing = false;  // print each pass's time and detail
    bool verify = false;  // run the ECG verifier after each pass
    static Settings from_env();
  };
  using Sink = std::function<void(const std::string&)>;  // receives each printed line block

  explicit PassLogger(CompileStats& stats);  // Settings::from_env(), printing to stderr
  PassLogger(CompileStats& stats, Settings settings, Sink sink);

  void run(const Pass& pass, PassContext& ctx);
  // A debug-only dump of something that is not a pass's result (the imported ECG, a fusion plan).
  void dump(const std::string& title, const std::string& text) const;
  bool debug() const { return settings_.debug; }

 private:
  CompileStats& stats_;
  Settings settings_;
  Sink sink_;
};

}  // namespace dnnfusion
