// Small file helpers shared by everything the runtime writes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace tpc::runtime {

/// Writes the concatenation of `pieces` to `path` atomically: a temporary
/// file "<path>.tmp.<pid>" in the same directory, fsync, rename, fsync of the
/// directory. A failure throws std::runtime_error ("<path>: <what failed>:
/// <reason>") and leaves neither a partial file nor the temporary one. Every
/// file the runtime writes goes through here.
void writeFileAtomically(const std::string &path,
                         std::span<const std::span<const std::byte>> pieces);
/// The same for one piece of text or bytes.
void writeFileAtomically(const std::string &path, std::string_view data);

/// Checks, without creating or changing anything, that `path` can be
/// written atomically (as writeFileAtomically does): it is not a directory,
/// and its directory exists and is writable. Throws std::runtime_error
/// ("<flag> <path>: ...").
void checkWritableFile(const std::string &path, const std::string &flag);

/// Checks that `path` is a writable directory, or can be created as one
/// (its nearest existing ancestor is a writable directory). Throws
/// std::runtime_error ("<flag> <path>: ...").
void checkWritableDirectory(const std::string &path, const std::string &flag);

/// Checks that `path` names a regular file (not a device, FIFO or
/// directory: /dev/zero never ends) of at most `maxBytes` bytes and returns
/// its size, before anything reads it. Throws std::runtime_error
/// ("<path>: ...", naming `what` the file is meant to be).
uint64_t checkRegularFile(const std::string &path, uint64_t maxBytes,
                          std::string_view what);

/// Reads all of `path` after checkRegularFile; a file that grows while it is
/// read is still cut off at `maxBytes`.
std::string readRegularFile(const std::string &path, uint64_t maxBytes,
                            std::string_view what);

/// Byte counts for messages: "3.0 GiB", "17 MiB", "512 bytes".
std::string formatBytes(uint64_t bytes);

/// The double closest to the shortest decimal that reads back as `value`
/// (0.001f -> 0.001, not 0.0010000000474974513), for JSON written for
/// people; non-finite values are returned as they are.
double shortestDouble(float value);

} // namespace tpc::runtime
