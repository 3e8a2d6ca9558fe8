// Tokenizers and loss-curve plots.
//
// BPE is checked against HuggingFace's GPT2Tokenizer (the slow, pure-Python
// reference) through the fixtures in Inputs/bpe/, written by
// Inputs/bpe/make_fixtures.py: a small byte-level BPE trained with
// `tokenizers` and GPT2Tokenizer's encodings of tricky strings.
#include "tpc/runtime/Tokenizer.h"
#include "Plot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <thread>
#include <unistd.h>

using namespace tpc::runtime;
using tpc::tools::writeLossCurveSvg;
namespace fs = std::filesystem;

namespace {

/// Inputs/bpe next to this source file.
fs::path fixtureDir() {
  return fs::path(__FILE__).parent_path() / "Inputs" / "bpe";
}

fs::path tempDir() {
  auto dir = fs::temp_directory_path() /
             ("tpc-tokenizer-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

std::string tempFile(const std::string &name, const std::string &contents) {
  fs::path path = tempDir() / name;
  std::ofstream(path, std::ios::binary) << contents;
  return path.string();
}

std::string readAll(const fs::path &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Expects fn() to throw an Error whose message is one line, starts with
/// `prefix` and contains `needle`.
template <typename Error>
void expectError(const std::function<void()> &fn, const std::string &needle,
                 const std::string &prefix = "") {
  try {
    fn();
    FAIL() << "no error; expected: " << needle;
  } catch (const Error &error) {
    std::string what = error.what();
    EXPECT_EQ(what.rfind(prefix, 0), 0u) << what;
    EXPECT_NE(what.find(needle), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

BpeTokenizer loadFixture() {
  return BpeTokenizer::load((fixtureDir() / "vocab.json").string(),
                            (fixtureDir() / "merges.txt").string());
}

// ---------------------------------------------------------------------------
// Byte-level.

TEST(TokenizerTest, EncodeBytesIsOneTokenPerByte) {
  EXPECT_TRUE(encodeBytes("").empty());
  EXPECT_EQ(encodeBytes(std::string("a\0\xff", 3)),
            (std::vector<int32_t>{97, 0, 255}));
}

// ---------------------------------------------------------------------------
// BPE against GPT2Tokenizer.

struct Case {
  std::string text, repr;
  std::vector<int32_t> ids;
};

std::vector<Case> readCases() {
  std::ifstream in(fixtureDir() / "cases.tsv");
  std::vector<Case> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#')
      continue;
    size_t tab1 = line.find('\t'), tab2 = line.find('\t', tab1 + 1);
    Case c;
    std::string hex = line.substr(0, tab1);
    for (size_t i = 0; i + 1 < hex.size(); i += 2)
      c.text += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    std::istringstream ids(line.substr(tab1 + 1, tab2 - tab1 - 1));
    for (int32_t id; ids >> id;)
      c.ids.push_back(id);
    c.repr = line.substr(tab2 + 1);
    cases.push_back(std::move(c));
  }
  return cases;
}

TEST(BpeTokenizerTest, MatchesGpt2TokenizerOnFixtures) {
  BpeTokenizer tokenizer = loadFixture();
  EXPECT_EQ(tokenizer.vocabSize(), 500);
  std::vector<Case> cases = readCases();
  ASSERT_GE(cases.size(), 30u);
  for (const Case &c : cases) {
    EXPECT_EQ(tokenizer.encode(c.text), c.ids) << c.repr;
    EXPECT_EQ(tokenizer.decode(c.ids), c.text) << c.repr;
  }
}

TEST(BpeTokenizerTest, RoundTripsArbitraryBytes) {
  BpeTokenizer tokenizer = loadFixture();
  std::mt19937 rng(7);
  // Random bytes (mostly invalid UTF-8), then random valid-ish text.
  for (int trial = 0; trial < 200; ++trial) {
    std::string text(rng() % 64, '\0');
    for (char &c : text)
      c = static_cast<char>(rng() % 256);
    EXPECT_EQ(tokenizer.decode(tokenizer.encode(text)), text);
  }
  const char *pieces[] = {"the", " ",    "  ",       "'s",   "'",
                          "é",   "日本", "😀",        "\n",   "\t",
                          "12",  "!?",   "\xE2\x82", "\xF0", "\xC0\xAF"};
  for (int trial = 0; trial < 200; ++trial) {
    std::string text;
    for (int k = rng() % 12; k > 0; --k)
      text += pieces[rng() % std::size(pieces)];
    EXPECT_EQ(tokenizer.decode(tokenizer.encode(text)), text);
  }
}

TEST(BpeTokenizerTest, EncodesTheSameFromManyThreads) {
  BpeTokenizer tokenizer = loadFixture();
  std::string text = readAll(fixtureDir() / "make_fixtures.py");
  std::vector<int32_t> expected = tokenizer.encode(text);
  std::vector<std::vector<int32_t>> results(4);
  std::vector<std::thread> threads;
  for (auto &result : results)
    threads.emplace_back([&] { result = tokenizer.encode(text); });
  for (auto &thread : threads)
    thread.join();
  for (const auto &result : results)
    EXPECT_EQ(result, expected);
  EXPECT_EQ(tokenizer.decode(expected), text);
}

TEST(BpeTokenizerTest, DecodeRejectsUnknownIds) {
  BpeTokenizer tokenizer = loadFixture();
  std::vector<int32_t> bad = {5, 500};
  expectError<std::out_of_range>([&] { tokenizer.decode(bad); },
                                 "token id 500 is not in the vocabulary");
  bad = {-1};
  expectError<std::out_of_range>([&] { tokenizer.decode(bad); }, "token id -1");
}

// ---------------------------------------------------------------------------
// Hand-made vocabularies: escapes and errors.

/// GPT-2's byte-to-unicode alphabet, written out independently.
std::u32string byteAlphabet() {
  std::u32string chars;
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    bool kept = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    chars += kept ? char32_t(b) : next++;
  }
  return chars;
}

/// A JSON key spelling every character as \uXXXX (surrogate pairs above
/// U+FFFF).
std::string escapedKey(const std::u32string &token) {
  std::string out = "\"";
  char buf[16];
  for (char32_t c : token) {
    if (c >= 0x10000) {
      char32_t v = c - 0x10000;
      std::snprintf(buf, sizeof buf, "\\u%04X\\u%04x", 0xD800 + (v >> 10),
                    0xDC00 + (v & 0x3FF));
    } else {
      std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
    }
    out += buf;
  }
  return out + "\"";
}

/// vocab.json text: the 256 byte tokens as ids 0..255 (all but `skipByte`),
/// then `extra`, e.g. ",\"ab\": 256".
std::string byteVocab(const std::string &extra = "", int skipByte = -1) {
  std::u32string alphabet = byteAlphabet();
  std::string json = "{\n";
  bool first = true;
  for (int b = 0; b < 256; ++b) {
    if (b == skipByte)
      continue;
    json += (first ? "  " : ",\n  ") + escapedKey(alphabet.substr(b, 1)) +
            ": " + std::to_string(b);
    first = false;
  }
  return json + extra + "\n}\n";
}

TEST(BpeTokenizerTest, ReadsEscapesAndMerges) {
  // "\u0120" is GPT-2's space; the pair spells U+1F600 (an added token that
  // BPE never produces but decode() spells as its UTF-8).
  std::string vocab = tempFile(
      "escapes.json",
      byteVocab(",\n  \"\\u0120t\": 256, \"\\u0120th\": 257,"
                " \"\\ud83d\\ude00\": 300, \"tab\\there\\\"\\\\\\/\": 301"));
  std::string merges =
      tempFile("escapes.txt", "#version: 0.2\n\xC4\xA0 t\r\n\n\xC4\xA0t h\n");
  BpeTokenizer tokenizer = BpeTokenizer::load(vocab, merges);
  EXPECT_EQ(tokenizer.vocabSize(), 302);
  EXPECT_EQ(tokenizer.encode("a th t"), (std::vector<int32_t>{'a', 257, 256}));
  std::vector<int32_t> ids = {300, 301, 'x'};
  EXPECT_EQ(tokenizer.decode(ids), "\xF0\x9F\x98\x80tab\there\"\\/x");
  ids = {299};
  EXPECT_THROW(tokenizer.decode(ids), std::out_of_range);
}

/// A tokenizer.json of GPT-2's kind around byteVocab's 256 tokens plus
/// "ab" (the merge "a b"); `model`, `top` and `added` add fields.
std::string tokenizerJson(const std::string &model = "",
                          const std::string &top = "",
                          const std::string &added =
                              R"([{"id": 257, "content": "<|eot|>",
                                   "special": true}])") {
  std::string vocab = byteVocab(", \"ab\": 256");
  return R"({"model": {"type": "BPE", "vocab": )" + vocab +
         R"(, "merges": ["a b"])" + model +
         R"(}, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false,
           "use_regex": true}, "decoder": {"type": "ByteLevel"},
           "added_tokens": )" +
         added + top + "}";
}

TEST(BpeTokenizerTest, ReadsTokenizerJson) {
  std::string path = tempFile("tokenizer.json", tokenizerJson());
  BpeTokenizer bpe = BpeTokenizer::loadTokenizerJson(path);
  EXPECT_EQ(bpe.vocabSize(), 258);
  // "ab" merges; the added token splits the text wherever it is, even
  // inside a word; a cut-short one is plain text.
  EXPECT_EQ(bpe.encode("ab"), (std::vector<int32_t>{256}));
  std::vector<int32_t> ids = bpe.encode("xab<|eot|>ab<|eot|><|eot|>a<|eo");
  // Byte b is id b (byteVocab); "<|" is one punctuation piece, "eo" one of
  // letters.
  EXPECT_EQ(ids, (std::vector<int32_t>{'x', 256, 257, 256, 257, 257, 'a', '<',
                                       '|', 'e', 'o'}));
  EXPECT_EQ(bpe.decode(ids), "xab<|eot|>ab<|eot|><|eot|>a<|eo");
  // The longest added token wins where two start.
  std::string longer =
      tempFile("longer.json", tokenizerJson("", "",
                                            R"([{"id": 257, "content": "<|e"},
                        {"id": 258, "content": "<|eot|>"}])"));
  EXPECT_EQ(BpeTokenizer::loadTokenizerJson(longer).encode("<|eot|><|e"),
            (std::vector<int32_t>{258, 257}));
}

TEST(BpeTokenizerTest, TemplateProcessingAddsItsSpecialTokens) {
  // LLaMA-3's layout: a ByteLevel step, then BOS before the sequence.
  std::string path =
      tempFile("template.json",
               tokenizerJson("", R"(, "post_processor": {"type": "Sequence",
        "processors": [{"type": "ByteLevel"}, {"type": "TemplateProcessing",
          "single": [{"SpecialToken": {"id": "<|eot|>", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}}],
          "special_tokens": {"<|eot|>": {"id": "<|eot|>", "ids": [257],
                                         "tokens": ["<|eot|>"]}}}]})"));
  EXPECT_EQ(BpeTokenizer::loadTokenizerJson(path).encode("ab"),
            (std::vector<int32_t>{257, 256}));
}

TEST(BpeTokenizerTest, ReadsSentencePieceBpe) {
  // LLaMA-2's layout: "<unk>" 0, "<s>" 1, "<0x00>".."<0xFF>" 2..257, then
  // U+2581 258, "a" 259, "b" 260, U+2581 "a" 261, "ab" 262.
  std::string vocab = R"("<unk>": 0, "<s>": 1)";
  for (int b = 0; b < 256; ++b) {
    char entry[32];
    std::snprintf(entry, sizeof entry, ", \"<0x%02X>\": %d", b, b + 2);
    vocab += entry;
  }
  vocab += R"(, "\u2581": 258, "a": 259, "b": 260, "\u2581a": 261, "ab": 262)";
  std::string json = R"({"model": {"type": "BPE", "byte_fallback": true,
      "fuse_unk": true, "unk_token": "<unk>", "vocab": {)" +
                     vocab + R"(}, "merges": ["\u2581 a", "a b"]},
    "normalizer": {"type": "Sequence", "normalizers": [
      {"type": "Prepend", "prepend": "\u2581"},
      {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "pre_tokenizer": null,
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [1]}}},
    "added_tokens": [{"id": 1, "content": "<s>", "special": true}]})";
  BpeTokenizer bpe =
      BpeTokenizer::loadTokenizerJson(tempFile("spm.json", json));
  // "ab a" is "\u2581ab\u2581a": "\u2581 a" (rank 0) merges at 0 and 3
  // before "a b" (rank 1), which the first merge used up. "e" with an acute
  // accent is not in the vocabulary: its two bytes. The added "<s>" splits
  // the text, and each piece gets its own leading U+2581; BOS goes first.
  EXPECT_EQ(bpe.encode("ab a"), (std::vector<int32_t>{1, 261, 260, 261}));
  EXPECT_EQ(bpe.encode("b\xC3\xA9<s>a"),
            (std::vector<int32_t>{1, 258, 260, 0xC3 + 2, 0xA9 + 2, 1, 261}));
  EXPECT_EQ(bpe.decode(std::vector<int32_t>{261, 260, 0xC3 + 2, 0xA9 + 2}),
            " ab\xC3\xA9");
}

TEST(BpeTokenizerTest, RejectsTokenizerJsonItDoesNotRead) {
  auto error = [&](const std::string &json, const std::string &needle) {
    SCOPED_TRACE(needle);
    std::string path = tempFile("bad-tokenizer.json", json);
    expectError<std::runtime_error>(
        [&] { BpeTokenizer::loadTokenizerJson(path); }, needle, path + ": ");
  };
  error("[1, 2", "not a JSON object (tokenizer.json)");
  error(R"({"model": {"type": "WordPiece"}})", "model.type must be \"BPE\"");
  error(tokenizerJson(R"(, "byte_fallback": true)"),
        "normalizer must be SentencePiece's (Prepend U+2581, then Replace ' ' "
        "by U+2581) with byte_fallback");
  error(tokenizerJson(R"(, "unk_token": "<unk>")"),
        "model.unk_token is set without byte_fallback");
  error(tokenizerJson("", R"(, "normalizer": {"type": "NFC"})"),
        "normalizer is set");
  error(
      tokenizerJson("", R"(, "post_processor": {"type": "RobertaProcessing"})"),
      "post_processor must be ByteLevel or TemplateProcessing");
  error(tokenizerJson("", R"(, "post_processor": {"type": "TemplateProcessing",
          "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}],
          "special_tokens": {}})"),
        "special token '<s>' is not in post_processor.special_tokens");
  error(tokenizerJson("", "",
                      R"([{"id": 257, "content": "<|eot|>", "lstrip": true}])"),
        "added_tokens[0].lstrip is set");
  error(tokenizerJson("", "", R"([{"id": 256, "content": "<|eot|>"}])"),
        "has id 256, which model.vocab gives to 'ab'");
  error(tokenizerJson("", "", R"([{"content": "<|eot|>"}])"),
        "added_tokens[0] needs a non-empty content and an id");
}

TEST(BpeTokenizerTest, RejectsBadFiles) {
  std::string goodVocab = tempFile("good.json", byteVocab(", \"ab\": 256"));
  std::string goodMerges = tempFile("good.txt", "a b\n");
  EXPECT_NO_THROW(BpeTokenizer::load(goodVocab, goodMerges));

  auto vocabError = [&](const std::string &json, const std::string &needle) {
    SCOPED_TRACE(json.substr(0, 80));
    std::string path = tempFile("bad.json", json);
    expectError<std::runtime_error>(
        [&] { BpeTokenizer::load(path, goodMerges); }, needle, path + ": ");
  };
  auto mergesError = [&](const std::string &text, const std::string &needle) {
    SCOPED_TRACE(text);
    std::string path = tempFile("bad.txt", text);
    expectError<std::runtime_error>(
        [&] { BpeTokenizer::load(goodVocab, path); }, needle, path + ": ");
  };

  std::string missing = (tempDir() / "no-such-file.json").string();
  expectError<std::runtime_error>(
      [&] { BpeTokenizer::load(missing, goodMerges); },
      missing + ": cannot open");
  expectError<std::runtime_error>(
      [&] { BpeTokenizer::load(goodVocab, missing); },
      missing + ": cannot open");

  // Syntax errors are nlohmann-json's, with their line and column.
  vocabError("", "parse error at line 1, column 1: syntax error while "
                 "parsing value - unexpected end of input");
  vocabError("[1, 2]", "expected a JSON object of token -> id, found an array");
  vocabError("7", "expected a JSON object of token -> id, found a number");
  vocabError("{}", "the vocabulary is empty");
  vocabError("{\"a\" 1}", "line 1, column 6: syntax error while parsing "
                          "object separator");
  vocabError("{\"a\": 1,}", "line 1, column 9: syntax error while parsing "
                            "object key");
  vocabError("{\"a\": 1\n \"b\": 2}", "line 2, column 4: syntax error");
  vocabError("{\"a\": 1} x", "line 1, column 10: syntax error while parsing "
                             "value - invalid literal; last read: '1} x'");
  vocabError("{\"a\": \"1\"}", "token 'a': ids must be integers, found a "
                               "string");
  vocabError("{\"a\": {}}", "token 'a': ids must be integers, found an object");
  vocabError("{\"a\": null}", "token 'a': ids must be integers, found null");
  vocabError("{\"a\": 1.0}", "token 'a': ids must be integers, found '1.0'");
  vocabError("{\"a\": 1e3}", "token 'a': ids must be integers, found '1e3'");
  vocabError("{\"a\": -1}", "token 'a' has a negative id");
  vocabError("{\"a\": 01}", "line 1, column 8: syntax error");
  vocabError("{\"a\": 2147483648}",
             "token 'a' has id 2147483648, above 2^31-1");
  vocabError("{\"a\": 99999999999999999999}",
             "token 'a': ids must be integers, found '99999999999999999999'");
  vocabError("{\"a\": 1000000}", "the largest id is 1000000 for only 1 tokens");
  vocabError("{\"a\nb\": 1}", "invalid string: control character U+000A (LF) "
                              "must be escaped");
  vocabError("{\"a\\x\": 1}", "invalid string: forbidden character after "
                              "backslash");
  vocabError("{\"a\\u12\": 1}",
             "invalid string: '\\u' must be followed by 4 hex digits");
  vocabError("{\"\\ud800\": 1}", "invalid string: surrogate U+D800..U+DBFF "
                                 "must be followed by U+DC00..U+DFFF");
  vocabError("{\"\\ud800\\u0041\": 1}", "surrogate U+D800..U+DBFF must be "
                                        "followed by U+DC00..U+DFFF");
  vocabError("{\"\\udc00\": 1}",
             "invalid string: surrogate U+DC00..U+DFFF must follow "
             "U+D800..U+DBFF");
  vocabError("{\"\xff\": 1}", "invalid string: ill-formed UTF-8 byte");
  vocabError("{\"abc", "invalid string: missing closing quote");
  vocabError("{\"a\": 1, \"a\": 2}", "token 'a' appears twice");
  vocabError(byteVocab(", \"ab\": 40"), "id 40 belongs to both '(' and 'ab'");
  vocabError(byteVocab("", '\n'),
             "the vocabulary lacks the token '\xC4\x8A' for byte 0x0A");

  mergesError("a\n", "line 1: expected two tokens separated by one space");
  mergesError("#version: 0.2\na b c\n", "line 2: expected two tokens");
  mergesError("a  b\n", "line 1: expected two tokens");
  mergesError("a b\nab zz\n", "line 2: 'zz' is not in the vocabulary");
  mergesError("b a\n",
              "line 1: the merge result 'ba' is not in the vocabulary");
}

// ---------------------------------------------------------------------------
// Loss-curve plots.

/// The points="..." of the polyline with class `cls`, as (x, y) pairs.
std::vector<std::pair<double, double>> polylinePoints(const std::string &svg,
                                                      const std::string &cls) {
  std::vector<std::pair<double, double>> points;
  size_t at = svg.find("<polyline class=\"" + cls + "\"");
  if (at == std::string::npos)
    return points;
  size_t begin = svg.find("points=\"", at) + 8, end = svg.find('"', begin);
  std::istringstream in(svg.substr(begin, end - begin));
  std::string pair;
  while (in >> pair) {
    size_t comma = pair.find(',');
    points.emplace_back(std::stod(pair.substr(0, comma)),
                        std::stod(pair.substr(comma + 1)));
  }
  return points;
}

size_t count(const std::string &text, const std::string &needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos;
       at = text.find(needle, at + 1))
    ++n;
  return n;
}

std::string plot(const std::string &name, const std::vector<int64_t> &steps,
                 const std::vector<double> &losses,
                 const std::string &title = "loss") {
  fs::path path = tempDir() / name;
  writeLossCurveSvg(path.string(), steps, losses, title);
  return readAll(path);
}

TEST(PlotTest, DecreasingCurve) {
  std::vector<int64_t> steps;
  std::vector<double> losses;
  for (int i = 0; i < 200; ++i) {
    steps.push_back(10 * i);
    losses.push_back(2.0 + 8.0 * std::exp(-i / 40.0) + 0.1 * std::sin(i));
  }
  std::string svg =
      plot("decreasing.svg", steps, losses, "gpt2 <&> \"tiny\" run");
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_EQ(count(svg, "<svg"), 1u);
  EXPECT_EQ(count(svg, "<text"), count(svg, "</text>"));
  EXPECT_NE(svg.find(">gpt2 &lt;&amp;&gt; &quot;tiny&quot; run</text>"),
            std::string::npos);
  EXPECT_EQ(svg.find("<&>"), std::string::npos);
  EXPECT_NE(svg.find(">step</text>"), std::string::npos);
  EXPECT_NE(svg.find(">loss</text>"), std::string::npos);
  EXPECT_GE(count(svg, "<line"), 8u); // gridlines

  auto raw = polylinePoints(svg, "loss"),
       smooth = polylinePoints(svg, "smoothed");
  ASSERT_EQ(raw.size(), 200u);
  ASSERT_EQ(smooth.size(), 200u);
  for (size_t i = 0; i < raw.size(); ++i) {
    EXPECT_GE(raw[i].first, 0);
    EXPECT_LE(raw[i].first, 800);
    EXPECT_GE(raw[i].second, 0);
    EXPECT_LE(raw[i].second, 480);
    if (i)
      EXPECT_GT(raw[i].first, raw[i - 1].first);
  }
  // Decreasing loss goes down the page: SVG y grows downwards.
  EXPECT_LT(raw.front().second, raw.back().second);
  EXPECT_LT(smooth.front().second, smooth.back().second);
  // No temp file is left behind.
  for (const auto &entry : fs::directory_iterator(tempDir()))
    EXPECT_EQ(entry.path().filename().string().find(".tmp."),
              std::string::npos);
}

TEST(PlotTest, SkipsNonFiniteLosses) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  std::string svg = plot("nonfinite.svg", {1, 2, 3, 4, 5, 6, 7},
                         {3.0, nan, 2.5, inf, 2.0, -inf, 1.5});
  EXPECT_EQ(polylinePoints(svg, "loss").size(), 4u);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
}

TEST(PlotTest, SinglePointConstantAndEmpty) {
  std::string one = plot("one.svg", {5}, {2.5});
  EXPECT_EQ(polylinePoints(one, "loss").size(), 1u);
  EXPECT_NE(one.find("<circle"), std::string::npos);
  EXPECT_EQ(one.find("nan"), std::string::npos);

  std::string flat = plot("flat.svg", {0, 1, 2, 3, 4, 5}, {1, 1, 1, 1, 1, 1});
  auto points = polylinePoints(flat, "loss");
  ASSERT_EQ(points.size(), 6u);
  EXPECT_EQ(points.front().second, points.back().second);
  EXPECT_GT(points.front().second, 48);  // inside the plot area, not on the
  EXPECT_LT(points.front().second, 424); // top or bottom frame
  EXPECT_EQ(flat.find("nan"), std::string::npos);

  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::string none = plot("none.svg", {1, 2}, {nan, nan});
  EXPECT_NE(none.find("no finite loss values"), std::string::npos);
  EXPECT_EQ(none.find("<polyline"), std::string::npos);
  EXPECT_EQ(plot("empty.svg", {}, {}).find("<polyline"), std::string::npos);
}

TEST(PlotTest, ValidationCurve) {
  // Training loss falls from 6 to 4; the held-out loss, every 10 steps, sits
  // above it and ends above the training range: the y range takes it in.
  std::vector<int64_t> steps, evalSteps;
  std::vector<double> losses, evalLosses;
  for (int i = 1; i <= 40; ++i) {
    steps.push_back(i);
    losses.push_back(6.0 - 2.0 * (i - 1) / 39.0);
    if (i % 10 == 0) {
      evalSteps.push_back(i);
      evalLosses.push_back(i == 40 ? 7.5 : 6.5 - 0.1 * i / 10);
    }
  }
  fs::path path = tempDir() / "validation.svg";
  writeLossCurveSvg(path.string(), steps, losses, "run", evalSteps, evalLosses);
  std::string svg = readAll(path);
  auto train = polylinePoints(svg, "loss"),
       held = polylinePoints(svg, "validation");
  ASSERT_EQ(train.size(), 40u);
  ASSERT_EQ(held.size(), 4u);
  EXPECT_EQ(count(svg, "class=\"validation-point\""), 4u);
  EXPECT_NE(svg.find(">validation loss</text>"), std::string::npos);
  // Same x scale: the held-out point at step 10 sits over training step 10.
  EXPECT_EQ(held[0].first, train[9].first);
  // Above the training curve (SVG y grows downwards) and inside the frame.
  EXPECT_LT(held[0].second, train[9].second);
  EXPECT_GE(held[3].second, 48);
  // Without held-out losses nothing of it is drawn.
  EXPECT_EQ(plot("no-validation.svg", steps, losses).find("validation"),
            std::string::npos);
}

TEST(PlotTest, Errors) {
  EXPECT_THROW(
      writeLossCurveSvg((tempDir() / "x.svg").string(), {1, 2}, {1.0}, "t"),
      std::invalid_argument);
  EXPECT_THROW(writeLossCurveSvg((tempDir() / "x.svg").string(), {1}, {1.0},
                                 "t", {1, 2}, {1.0}),
               std::invalid_argument);
  std::string bad = (tempDir() / "no-such-dir" / "x.svg").string();
  expectError<std::runtime_error>(
      [&] { writeLossCurveSvg(bad, {1}, {1.0}, "t"); },
      bad + ": cannot create " + bad + ".tmp.");
}

} // namespace
