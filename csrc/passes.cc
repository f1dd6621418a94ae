#include "passes.h"

#include "rewrite/fold_constants.h"

namespace dnnfusion {

Pass fold_constants_pass() {
  return {"fold_constants", [](PassContext& c) {
            int n = 0;
            c.g = rewrite::fold_constants(c.g, c.evaluate, &n);
            c.stats.folded_nodes += n;
            c.changed = n > 0;
            c.detail = std::to_string(n) + " nodes folded";
          }};
}

Pass counting_pass(std::string name, CountingRewrite f, std::string what, std::string rule, std::string counter) {
  return {std::move(name), [f, what = std::move(what), rule = std::move(rule), counter = std::move(counter)](PassContext& c) {
            int n = 0;
            c.g = f(c.g, &n);
            c.changed = n > 0;
            c.detail = std::to_string(n) + " " + what;
            if (n && !rule.empty()) c.stats.rules_applied[rule] += n;
            if (!counter.empty()) c.stats.target_counters[counter] += n;
          }};
}

}  // namespace dnnfusion
