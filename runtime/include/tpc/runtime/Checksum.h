// Content checksums of the files the runtime writes and later trusts again
// (checkpoints): XXH3-64 (Debian's libxxhash, header-only), printed as 16
// lowercase hex digits. XXH3 is not cryptographic: it detects corruption
// (a flipped byte, a truncated copy), not tampering.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace tpc::runtime {

/// XXH3-64 (seed 0) of `bytes`.
uint64_t contentChecksum(std::span<const std::byte> bytes);

/// XXH3-64 of the file's bytes, read in chunks; throws std::runtime_error
/// ("<path>: cannot read ...") if it cannot be read.
uint64_t fileChecksum(const std::string &path);

/// The checksum as 16 lowercase hex digits.
std::string checksumHex(uint64_t checksum);

} // namespace tpc::runtime
