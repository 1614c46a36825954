// The tuner's records in the persistent store (src/store/): one device identity's tune rows.
#pragma once

#include <string>
#include <vector>

#include "store/store.hpp"
#include "tune/tuner.hpp"

namespace kiln::tune {

class StoreRecords final : public Records {
 public:
  StoreRecords(store::Store& store, store::Identity identity)
      : store_(store), identity_(std::move(identity)) {}

  std::optional<Row> load(const std::string& key) override {
    auto r = store_.get_tune(identity_, key);
    if (!r) return std::nullopt;
    return Row{r->value, r->name, r->seconds};
  }
  void save(const std::string& key, const Row& row, const std::string& shape) override {
    store_.put_tune(identity_, key, {row.value, row.name, shape, row.seconds});
  }
  std::vector<std::string> keys() override {
    std::vector<std::string> out;
    for (const store::Entry& e : store_.list(store::Table::tune, identity_)) out.push_back(e.key);
    return out;
  }

 private:
  store::Store& store_;
  store::Identity identity_;
};

}  // namespace kiln::tune
