//===- InputFiles.h - Bounded reads of untrusted input files ----*- C++ -*-===//
//
// Everything the compiler's tools read from a user (config.json, cluster
// files) is untrusted: /dev/zero never ends, and llvm::json::parse recurses
// once per nesting level, so 40,000 nested brackets overflow the stack.
//
//===----------------------------------------------------------------------===//

#ifndef TPC_SUPPORT_INPUTFILES_H
#define TPC_SUPPORT_INPUTFILES_H

#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include <memory>

namespace tpc {

/// Nesting deeper than any real config or cluster file, far below what
/// overflows the stack.
constexpr unsigned kMaxJsonNesting = 512;

/// Reads `path` ("-": standard input), at most `maxBytes` bytes of it: a
/// regular file's size is checked before reading, anything else (a pipe, a
/// device) is read up to the limit and refused past it. Errors are one line
/// naming the path and `what` the file is.
llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>>
readBoundedInput(llvm::StringRef path, uint64_t maxBytes, llvm::StringRef what);

/// llvm::json::parse after checking that arrays and objects nest at most
/// `maxNesting` deep.
llvm::Expected<llvm::json::Value>
parseJsonBounded(llvm::StringRef text, unsigned maxNesting = kMaxJsonNesting);

/// Checks, before any work, that `path` ("-": standard output) can be
/// written atomically (a temporary beside it, renamed over it): it is not a
/// directory, and its directory exists and is writable. The error names
/// `flag` and the path in one line.
llvm::Error checkOutputFile(llvm::StringRef path, llvm::StringRef flag);

} // namespace tpc

#endif // TPC_SUPPORT_INPUTFILES_H
