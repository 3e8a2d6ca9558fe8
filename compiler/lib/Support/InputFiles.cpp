//===- InputFiles.cpp - Bounded reads of untrusted input files ------------===//

#include "tpc/Support/InputFiles.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

using namespace llvm;

Expected<std::unique_ptr<MemoryBuffer>>
tpc::readBoundedInput(StringRef path, uint64_t maxBytes, StringRef what) {
  auto fail = [&](const Twine &why) {
    return createStringError(inconvertibleErrorCode(), path + ": " + why);
  };
  sys::fs::file_t handle;
  if (path == "-") {
    handle = sys::fs::getStdinHandle();
  } else {
    Expected<sys::fs::file_t> opened = sys::fs::openNativeFileForRead(path);
    if (!opened)
      return fail("cannot open the " + what + ": " +
                  toString(opened.takeError()));
    handle = *opened;
  }
  scope_exit closeHandle([&] {
    if (path != "-")
      sys::fs::closeFile(handle);
  });
  sys::fs::file_status status;
  if (std::error_code error = sys::fs::status(handle, status))
    return fail("cannot stat the " + what + ": " + error.message());
  if (status.type() == sys::fs::file_type::directory_file)
    return fail("is a directory, not a " + what);
  auto tooLarge = [&] {
    return fail(
        formatv("is larger than the {0} bytes a {1} may have", maxBytes, what));
  };
  if (status.type() == sys::fs::file_type::regular_file &&
      status.getSize() > maxBytes)
    return tooLarge();
  // Read in chunks to the limit: a pipe or device has no size to check.
  SmallString<0> data;
  constexpr size_t kChunk = 1 << 16;
  while (true) {
    size_t start = data.size();
    data.resize_for_overwrite(start + kChunk);
    Expected<size_t> got = sys::fs::readNativeFile(
        handle, MutableArrayRef(data.data() + start, kChunk));
    if (!got)
      return fail("cannot read the " + what + ": " + toString(got.takeError()));
    data.truncate(start + *got);
    if (*got == 0)
      break;
    if (data.size() > maxBytes)
      return tooLarge();
  }
  return MemoryBuffer::getMemBufferCopy(data, path);
}

Error tpc::checkOutputFile(StringRef path, StringRef flag) {
  if (path == "-")
    return Error::success();
  auto fail = [&](const Twine &why) {
    return createStringError(inconvertibleErrorCode(),
                             flag + " " + path + ": " + why);
  };
  if (sys::fs::is_directory(path))
    return fail("is a directory");
  SmallString<256> dir(sys::path::parent_path(path));
  if (dir.empty())
    dir = ".";
  if (!sys::fs::is_directory(dir))
    return fail("the directory " + dir + " does not exist");
  if (sys::fs::access(dir, sys::fs::AccessMode::Write))
    return fail("the directory " + dir + " is not writable");
  return Error::success();
}

Expected<json::Value> tpc::parseJsonBounded(StringRef text,
                                            unsigned maxNesting) {
  // Count the depth outside strings; the parser reports everything else.
  unsigned depth = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (inString) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        inString = false;
      continue;
    }
    if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > maxNesting)
        return createStringError(
            inconvertibleErrorCode(),
            formatv("arrays and objects nest deeper than {0} levels (at "
                    "byte {1})",
                    maxNesting, i));
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return json::parse(text);
}
