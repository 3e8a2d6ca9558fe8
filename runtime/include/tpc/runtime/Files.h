// Small file helpers shared by everything the runtime writes.
#pragma once

#include <string>
#include <string_view>

namespace tpc::runtime {

/// Writes `data` to `path` atomically: a temporary file in the same
/// directory, fsync, rename. A failure throws std::runtime_error
/// ("<path>: ...") and leaves neither a partial file nor the temporary one.
void writeFileAtomically(const std::string &path, std::string_view data);

} // namespace tpc::runtime
