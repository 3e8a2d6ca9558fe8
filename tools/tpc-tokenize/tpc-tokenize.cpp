// tpc-tokenize: raw text -> token file (docs/formats.md).
//
//   tpc-tokenize input.txt -o out.tokens      # byte-level: one token per byte
//
// Byte-level tokens need a model with vocab_size >= 256. Errors are one line
// on stderr and exit code 1; the output is written atomically.

#include "tpc/runtime/Tokens.h"

#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

int main(int argc, char **argv) {
  try {
    std::string input, output;
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg == "-o" && i + 1 < argc)
        output = argv[++i];
      else if (arg == "-h" || arg == "--help") {
        std::cout << "usage: tpc-tokenize INPUT.txt -o OUTPUT.tokens\n";
        return 0;
      } else if (!arg.empty() && arg[0] == '-')
        throw std::invalid_argument("unknown flag '" + arg + "'");
      else if (input.empty())
        input = arg;
      else
        throw std::invalid_argument("unexpected argument '" + arg + "'");
    }
    if (input.empty() || output.empty())
      throw std::invalid_argument("usage: tpc-tokenize INPUT.txt -o "
                                  "OUTPUT.tokens");
    std::ifstream file(input, std::ios::binary);
    if (!file)
      throw std::runtime_error(input + ": cannot open");
    std::vector<char> bytes((std::istreambuf_iterator<char>(file)),
                            std::istreambuf_iterator<char>());
    std::vector<int32_t> tokens(bytes.size());
    for (size_t i = 0; i < bytes.size(); ++i)
      tokens[i] = static_cast<unsigned char>(bytes[i]);
    tpc::runtime::writeTokenFile(output, tokens);
    std::cout << "tpc-tokenize: " << tokens.size() << " byte tokens -> "
              << output << "\n";
    return 0;
  } catch (const std::exception &error) {
    std::cerr << "tpc-tokenize: error: " << error.what() << "\n";
    return 1;
  }
}
