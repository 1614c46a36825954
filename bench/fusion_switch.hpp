// Config::fusion switched for a benchmark's lifetime: set() switches it (running what was
// recorded first), the destructor restores the configuration found at construction.
#pragma once

#include "kiln/config.hpp"

namespace kiln_bench {

class FusionSwitch {
 public:
  FusionSwitch() : saved_(kiln::config()) {}
  explicit FusionSwitch(bool on) : FusionSwitch() { set(on); }
  ~FusionSwitch() { kiln::set_config(saved_); }
  FusionSwitch(const FusionSwitch&) = delete;
  FusionSwitch& operator=(const FusionSwitch&) = delete;
  static void set(bool on) {
    kiln::Config c = kiln::config();
    if (c.fusion != on) {
      c.fusion = on;
      kiln::set_config(c);
    }
  }

 private:
  kiln::Config saved_;
};

}  // namespace kiln_bench
