#include "pass_logger.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ecg/verifier.h"

namespace dnnfusion {

namespace {
bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}
}  // namespace

PassLogger::Settings PassLogger::Settings::from_env() {
  Settings s;
  s.debug = env_on("DNNFUSION_DEBUG");
  s.timing = env_on("DNNFUSION_TIME_PASSES");
  s.verify = s.debug || env_on("DNNFUSION_VERIFY");
  return s;
}

PassLogger::PassLogger(CompileStats& stats)
    : PassLogger(stats, Settings::from_env(), [](const std::string& s) { std::fputs(s.c_str(), stderr); }) {}

PassLogger::PassLogger(CompileStats& stats, Settings settings, Sink sink)
    : stats_(stats), settings_(settings), sink_(std::move(sink)) {}

void PassLogger::run(const Pass& pass, PassContext& ctx) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string before = settings_.debug ? ctx.g.dump() : std::string();
  ctx.changed = false;
  ctx.detail.clear();
  pass.run(ctx);
  PassRecord rec{pass.name, 0, ctx.changed, ctx.detail};
  rec.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (settings_.verify) ecg::verify_graph(ctx.g);
  if (settings_.debug) {
    const std::string after = ctx.g.dump();
    sink_("[dnnfusion] after pass " + pass.name + (after == before ? ": unchanged\n" : ":\n" + after));
  }
  if (settings_.timing) {
    char line[160];
    std::snprintf(line, sizeof line, "[dnnfusion] pass %-16s %8.2f ms ", pass.name.c_str(), rec.ms);
    sink_(line + rec.detail + "\n");
  }
  stats_.passes.push_back(std::move(rec));
}

void PassLogger::dump(const std::string& title, const std::string& text) const {
  if (settings_.debug) sink_("[dnnfusion] " + title + ":\n" + text);
}

}  // namespace dnnfusion
