//===- ConfigReader.h - typed, validated reads of config.json ---*- C++ -*-===//
//
// Every importer reads its model's config.json through this class, so that
// each field's error names the field in one line, the same way for every
// model type.
//
//===----------------------------------------------------------------------===//

#ifndef TPC_FRONTENDS_CONFIGREADER_H
#define TPC_FRONTENDS_CONFIGREADER_H

#include "tpc/Dialect/TP/IR/TensorSizes.h"
#include "tpc/Support/InputFiles.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include <cmath>
#include <optional>
#include <string>
#include <vector>

namespace tpc::frontend {

/// config.json files are a few kilobytes.
constexpr uint64_t kMaxConfigBytes = 16 << 20;

inline llvm::Error configError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// `text` parsed as JSON whose top level is an object, as every config.json
/// is; the error says which of the two it is not.
inline llvm::Expected<llvm::json::Value>
parseConfigObject(llvm::StringRef text) {
  llvm::Expected<llvm::json::Value> parsed = tpc::parseJsonBounded(text);
  if (!parsed)
    return configError("not valid JSON: " + llvm::toString(parsed.takeError()));
  if (!parsed->getAsObject())
    return configError("the top level must be a JSON object");
  return parsed;
}

/// Typed, validated reads of config.json fields; the first problem wins.
class ConfigReader {
public:
  explicit ConfigReader(const llvm::json::Object &object) : object(object) {}

  bool has(llvm::StringRef key) const {
    const llvm::json::Value *value = object.get(key);
    return value && !value->getAsNull();
  }

  int64_t positiveInt(llvm::StringRef key, std::optional<int64_t> fallback) {
    const llvm::json::Value *value = object.get(key);
    if (!value || value->getAsNull()) {
      if (!fallback)
        fail(llvm::formatv("missing field '{0}'", key));
      return fallback.value_or(1);
    }
    return checkedPositive(*value, key);
  }

  /// A non-empty list of positive integers; empty after a failure.
  std::vector<int64_t> positiveIntList(llvm::StringRef key) {
    const llvm::json::Value *value = object.get(key);
    if (!value || value->getAsNull()) {
      fail(llvm::formatv("missing field '{0}'", key));
      return {};
    }
    const llvm::json::Array *list = value->getAsArray();
    if (!list || list->empty()) {
      fail(llvm::formatv("field '{0}' must be a non-empty list of positive "
                         "integers",
                         key));
      return {};
    }
    std::vector<int64_t> values;
    for (const llvm::json::Value &item : *list) {
      values.push_back(checkedPositive(item, key));
      if (failed())
        return {};
    }
    return values;
  }

  double positiveNumber(llvm::StringRef key, double fallback) {
    const llvm::json::Value *value = object.get(key);
    if (!value || value->getAsNull())
      return fallback;
    std::optional<double> number = value->getAsNumber();
    if (!number || !(*number > 0.0) || !std::isfinite(*number)) {
      fail(llvm::formatv("field '{0}' must be a positive number", key));
      return fallback;
    }
    return *number;
  }

  bool boolean(llvm::StringRef key, bool fallback) {
    const llvm::json::Value *value = object.get(key);
    if (!value || value->getAsNull())
      return fallback;
    std::optional<bool> flag = value->getAsBoolean();
    if (!flag) {
      fail(llvm::formatv("field '{0}' must be true or false", key));
      return fallback;
    }
    return *flag;
  }

  std::optional<llvm::StringRef> string(llvm::StringRef key) {
    const llvm::json::Value *value = object.get(key);
    if (!value || value->getAsNull())
      return std::nullopt;
    std::optional<llvm::StringRef> text = value->getAsString();
    if (!text)
      fail(llvm::formatv("field '{0}' must be a string", key));
    return text;
  }

  /// A token id or a list of them (eos_token_id); nullopt when absent.
  std::optional<std::vector<int64_t>> tokenIds(llvm::StringRef key) {
    const llvm::json::Value *value = object.get(key);
    if (!value || value->getAsNull())
      return std::nullopt;
    std::vector<int64_t> ids;
    auto take = [&](const llvm::json::Value &item) {
      std::optional<int64_t> id = item.getAsInteger();
      if (!id || *id < 0 || *id > mlir::tp::kMaxTensorElements)
        return false;
      ids.push_back(*id);
      return true;
    };
    bool ok = true;
    if (const llvm::json::Array *list = value->getAsArray())
      ok = llvm::all_of(*list, take);
    else
      ok = take(*value);
    if (!ok) {
      fail(llvm::formatv("field '{0}' must be a token id or a list of them",
                         key));
      return std::nullopt;
    }
    return ids;
  }

  void fail(const llvm::Twine &message) {
    if (error.empty())
      error = message.str();
  }
  bool failed() const { return !error.empty(); }
  llvm::Error takeError() const { return configError(error); }

private:
  int64_t checkedPositive(const llvm::json::Value &value, llvm::StringRef key) {
    std::optional<int64_t> integer = value.getAsInteger();
    if (!integer || *integer <= 0) {
      fail(llvm::formatv("field '{0}' must be a positive integer", key));
      return 1;
    }
    // Bounded so that the sizes derived from it (4 * n_embd, a sum of table
    // rows, ...) cannot overflow before the size checks see them.
    if (*integer > mlir::tp::kMaxTensorElements) {
      fail(llvm::formatv("field '{0}' is {1}, more than the size limit 2^40 "
                         "= {2}",
                         key, *integer, mlir::tp::kMaxTensorElements));
      return 1;
    }
    return *integer;
  }

  const llvm::json::Object &object;
  std::string error;
};

} // namespace tpc::frontend

#endif // TPC_FRONTENDS_CONFIGREADER_H
