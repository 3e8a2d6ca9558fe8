#include "tpc/runtime/Tokenizer.h"

#include "JsonErrorText.h"
#include "tpc/runtime/Files.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <mutex>
#include <queue>
#include <stdexcept>
#include <unordered_map>

namespace tpc::runtime {

std::vector<int32_t> encodeBytes(std::string_view text) {
  std::vector<int32_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i)
    tokens[i] = static_cast<unsigned char>(text[i]);
  return tokens;
}

namespace {

// ---------------------------------------------------------------------------
// Unicode classes for the pre-tokenisation pattern.
//
// \p{L} (general categories Lu Ll Lt Lm Lo) and \p{N} (Nd Nl No) as inclusive
// code point ranges, Unicode 16.0, generated from the Python `regex` module
// 2024.11.6 -- the module HuggingFace's GPT2Tokenizer matches the pattern
// with -- by testing every code point:
//   for c in range(0x110000): regex.match(r"\p{L}", chr(c))  # resp. \p{N}
// and merging consecutive hits into ranges.
struct CodeRange {
  char32_t lo, hi;
};
constexpr CodeRange kLetters[] = {
    {0x41, 0x5A},       {0x61, 0x7A},       {0xAA, 0xAA},
    {0xB5, 0xB5},       {0xBA, 0xBA},       {0xC0, 0xD6},
    {0xD8, 0xF6},       {0xF8, 0x2C1},      {0x2C6, 0x2D1},
    {0x2E0, 0x2E4},     {0x2EC, 0x2EC},     {0x2EE, 0x2EE},
    {0x370, 0x374},     {0x376, 0x377},     {0x37A, 0x37D},
    {0x37F, 0x37F},     {0x386, 0x386},     {0x388, 0x38A},
    {0x38C, 0x38C},     {0x38E, 0x3A1},     {0x3A3, 0x3F5},
    {0x3F7, 0x481},     {0x48A, 0x52F},     {0x531, 0x556},
    {0x559, 0x559},     {0x560, 0x588},     {0x5D0, 0x5EA},
    {0x5EF, 0x5F2},     {0x620, 0x64A},     {0x66E, 0x66F},
    {0x671, 0x6D3},     {0x6D5, 0x6D5},     {0x6E5, 0x6E6},
    {0x6EE, 0x6EF},     {0x6FA, 0x6FC},     {0x6FF, 0x6FF},
    {0x710, 0x710},     {0x712, 0x72F},     {0x74D, 0x7A5},
    {0x7B1, 0x7B1},     {0x7CA, 0x7EA},     {0x7F4, 0x7F5},
    {0x7FA, 0x7FA},     {0x800, 0x815},     {0x81A, 0x81A},
    {0x824, 0x824},     {0x828, 0x828},     {0x840, 0x858},
    {0x860, 0x86A},     {0x870, 0x887},     {0x889, 0x88E},
    {0x8A0, 0x8C9},     {0x904, 0x939},     {0x93D, 0x93D},
    {0x950, 0x950},     {0x958, 0x961},     {0x971, 0x980},
    {0x985, 0x98C},     {0x98F, 0x990},     {0x993, 0x9A8},
    {0x9AA, 0x9B0},     {0x9B2, 0x9B2},     {0x9B6, 0x9B9},
    {0x9BD, 0x9BD},     {0x9CE, 0x9CE},     {0x9DC, 0x9DD},
    {0x9DF, 0x9E1},     {0x9F0, 0x9F1},     {0x9FC, 0x9FC},
    {0xA05, 0xA0A},     {0xA0F, 0xA10},     {0xA13, 0xA28},
    {0xA2A, 0xA30},     {0xA32, 0xA33},     {0xA35, 0xA36},
    {0xA38, 0xA39},     {0xA59, 0xA5C},     {0xA5E, 0xA5E},
    {0xA72, 0xA74},     {0xA85, 0xA8D},     {0xA8F, 0xA91},
    {0xA93, 0xAA8},     {0xAAA, 0xAB0},     {0xAB2, 0xAB3},
    {0xAB5, 0xAB9},     {0xABD, 0xABD},     {0xAD0, 0xAD0},
    {0xAE0, 0xAE1},     {0xAF9, 0xAF9},     {0xB05, 0xB0C},
    {0xB0F, 0xB10},     {0xB13, 0xB28},     {0xB2A, 0xB30},
    {0xB32, 0xB33},     {0xB35, 0xB39},     {0xB3D, 0xB3D},
    {0xB5C, 0xB5D},     {0xB5F, 0xB61},     {0xB71, 0xB71},
    {0xB83, 0xB83},     {0xB85, 0xB8A},     {0xB8E, 0xB90},
    {0xB92, 0xB95},     {0xB99, 0xB9A},     {0xB9C, 0xB9C},
    {0xB9E, 0xB9F},     {0xBA3, 0xBA4},     {0xBA8, 0xBAA},
    {0xBAE, 0xBB9},     {0xBD0, 0xBD0},     {0xC05, 0xC0C},
    {0xC0E, 0xC10},     {0xC12, 0xC28},     {0xC2A, 0xC39},
    {0xC3D, 0xC3D},     {0xC58, 0xC5A},     {0xC5D, 0xC5D},
    {0xC60, 0xC61},     {0xC80, 0xC80},     {0xC85, 0xC8C},
    {0xC8E, 0xC90},     {0xC92, 0xCA8},     {0xCAA, 0xCB3},
    {0xCB5, 0xCB9},     {0xCBD, 0xCBD},     {0xCDD, 0xCDE},
    {0xCE0, 0xCE1},     {0xCF1, 0xCF2},     {0xD04, 0xD0C},
    {0xD0E, 0xD10},     {0xD12, 0xD3A},     {0xD3D, 0xD3D},
    {0xD4E, 0xD4E},     {0xD54, 0xD56},     {0xD5F, 0xD61},
    {0xD7A, 0xD7F},     {0xD85, 0xD96},     {0xD9A, 0xDB1},
    {0xDB3, 0xDBB},     {0xDBD, 0xDBD},     {0xDC0, 0xDC6},
    {0xE01, 0xE30},     {0xE32, 0xE33},     {0xE40, 0xE46},
    {0xE81, 0xE82},     {0xE84, 0xE84},     {0xE86, 0xE8A},
    {0xE8C, 0xEA3},     {0xEA5, 0xEA5},     {0xEA7, 0xEB0},
    {0xEB2, 0xEB3},     {0xEBD, 0xEBD},     {0xEC0, 0xEC4},
    {0xEC6, 0xEC6},     {0xEDC, 0xEDF},     {0xF00, 0xF00},
    {0xF40, 0xF47},     {0xF49, 0xF6C},     {0xF88, 0xF8C},
    {0x1000, 0x102A},   {0x103F, 0x103F},   {0x1050, 0x1055},
    {0x105A, 0x105D},   {0x1061, 0x1061},   {0x1065, 0x1066},
    {0x106E, 0x1070},   {0x1075, 0x1081},   {0x108E, 0x108E},
    {0x10A0, 0x10C5},   {0x10C7, 0x10C7},   {0x10CD, 0x10CD},
    {0x10D0, 0x10FA},   {0x10FC, 0x1248},   {0x124A, 0x124D},
    {0x1250, 0x1256},   {0x1258, 0x1258},   {0x125A, 0x125D},
    {0x1260, 0x1288},   {0x128A, 0x128D},   {0x1290, 0x12B0},
    {0x12B2, 0x12B5},   {0x12B8, 0x12BE},   {0x12C0, 0x12C0},
    {0x12C2, 0x12C5},   {0x12C8, 0x12D6},   {0x12D8, 0x1310},
    {0x1312, 0x1315},   {0x1318, 0x135A},   {0x1380, 0x138F},
    {0x13A0, 0x13F5},   {0x13F8, 0x13FD},   {0x1401, 0x166C},
    {0x166F, 0x167F},   {0x1681, 0x169A},   {0x16A0, 0x16EA},
    {0x16F1, 0x16F8},   {0x1700, 0x1711},   {0x171F, 0x1731},
    {0x1740, 0x1751},   {0x1760, 0x176C},   {0x176E, 0x1770},
    {0x1780, 0x17B3},   {0x17D7, 0x17D7},   {0x17DC, 0x17DC},
    {0x1820, 0x1878},   {0x1880, 0x1884},   {0x1887, 0x18A8},
    {0x18AA, 0x18AA},   {0x18B0, 0x18F5},   {0x1900, 0x191E},
    {0x1950, 0x196D},   {0x1970, 0x1974},   {0x1980, 0x19AB},
    {0x19B0, 0x19C9},   {0x1A00, 0x1A16},   {0x1A20, 0x1A54},
    {0x1AA7, 0x1AA7},   {0x1B05, 0x1B33},   {0x1B45, 0x1B4C},
    {0x1B83, 0x1BA0},   {0x1BAE, 0x1BAF},   {0x1BBA, 0x1BE5},
    {0x1C00, 0x1C23},   {0x1C4D, 0x1C4F},   {0x1C5A, 0x1C7D},
    {0x1C80, 0x1C8A},   {0x1C90, 0x1CBA},   {0x1CBD, 0x1CBF},
    {0x1CE9, 0x1CEC},   {0x1CEE, 0x1CF3},   {0x1CF5, 0x1CF6},
    {0x1CFA, 0x1CFA},   {0x1D00, 0x1DBF},   {0x1E00, 0x1F15},
    {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},   {0x1F48, 0x1F4D},
    {0x1F50, 0x1F57},   {0x1F59, 0x1F59},   {0x1F5B, 0x1F5B},
    {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},
    {0x1FB6, 0x1FBC},   {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},
    {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},   {0x1FD6, 0x1FDB},
    {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},
    {0x2071, 0x2071},   {0x207F, 0x207F},   {0x2090, 0x209C},
    {0x2102, 0x2102},   {0x2107, 0x2107},   {0x210A, 0x2113},
    {0x2115, 0x2115},   {0x2119, 0x211D},   {0x2124, 0x2124},
    {0x2126, 0x2126},   {0x2128, 0x2128},   {0x212A, 0x212D},
    {0x212F, 0x2139},   {0x213C, 0x213F},   {0x2145, 0x2149},
    {0x214E, 0x214E},   {0x2183, 0x2184},   {0x2C00, 0x2CE4},
    {0x2CEB, 0x2CEE},   {0x2CF2, 0x2CF3},   {0x2D00, 0x2D25},
    {0x2D27, 0x2D27},   {0x2D2D, 0x2D2D},   {0x2D30, 0x2D67},
    {0x2D6F, 0x2D6F},   {0x2D80, 0x2D96},   {0x2DA0, 0x2DA6},
    {0x2DA8, 0x2DAE},   {0x2DB0, 0x2DB6},   {0x2DB8, 0x2DBE},
    {0x2DC0, 0x2DC6},   {0x2DC8, 0x2DCE},   {0x2DD0, 0x2DD6},
    {0x2DD8, 0x2DDE},   {0x2E2F, 0x2E2F},   {0x3005, 0x3006},
    {0x3031, 0x3035},   {0x303B, 0x303C},   {0x3041, 0x3096},
    {0x309D, 0x309F},   {0x30A1, 0x30FA},   {0x30FC, 0x30FF},
    {0x3105, 0x312F},   {0x3131, 0x318E},   {0x31A0, 0x31BF},
    {0x31F0, 0x31FF},   {0x3400, 0x4DBF},   {0x4E00, 0xA48C},
    {0xA4D0, 0xA4FD},   {0xA500, 0xA60C},   {0xA610, 0xA61F},
    {0xA62A, 0xA62B},   {0xA640, 0xA66E},   {0xA67F, 0xA69D},
    {0xA6A0, 0xA6E5},   {0xA717, 0xA71F},   {0xA722, 0xA788},
    {0xA78B, 0xA7CD},   {0xA7D0, 0xA7D1},   {0xA7D3, 0xA7D3},
    {0xA7D5, 0xA7DC},   {0xA7F2, 0xA801},   {0xA803, 0xA805},
    {0xA807, 0xA80A},   {0xA80C, 0xA822},   {0xA840, 0xA873},
    {0xA882, 0xA8B3},   {0xA8F2, 0xA8F7},   {0xA8FB, 0xA8FB},
    {0xA8FD, 0xA8FE},   {0xA90A, 0xA925},   {0xA930, 0xA946},
    {0xA960, 0xA97C},   {0xA984, 0xA9B2},   {0xA9CF, 0xA9CF},
    {0xA9E0, 0xA9E4},   {0xA9E6, 0xA9EF},   {0xA9FA, 0xA9FE},
    {0xAA00, 0xAA28},   {0xAA40, 0xAA42},   {0xAA44, 0xAA4B},
    {0xAA60, 0xAA76},   {0xAA7A, 0xAA7A},   {0xAA7E, 0xAAAF},
    {0xAAB1, 0xAAB1},   {0xAAB5, 0xAAB6},   {0xAAB9, 0xAABD},
    {0xAAC0, 0xAAC0},   {0xAAC2, 0xAAC2},   {0xAADB, 0xAADD},
    {0xAAE0, 0xAAEA},   {0xAAF2, 0xAAF4},   {0xAB01, 0xAB06},
    {0xAB09, 0xAB0E},   {0xAB11, 0xAB16},   {0xAB20, 0xAB26},
    {0xAB28, 0xAB2E},   {0xAB30, 0xAB5A},   {0xAB5C, 0xAB69},
    {0xAB70, 0xABE2},   {0xAC00, 0xD7A3},   {0xD7B0, 0xD7C6},
    {0xD7CB, 0xD7FB},   {0xF900, 0xFA6D},   {0xFA70, 0xFAD9},
    {0xFB00, 0xFB06},   {0xFB13, 0xFB17},   {0xFB1D, 0xFB1D},
    {0xFB1F, 0xFB28},   {0xFB2A, 0xFB36},   {0xFB38, 0xFB3C},
    {0xFB3E, 0xFB3E},   {0xFB40, 0xFB41},   {0xFB43, 0xFB44},
    {0xFB46, 0xFBB1},   {0xFBD3, 0xFD3D},   {0xFD50, 0xFD8F},
    {0xFD92, 0xFDC7},   {0xFDF0, 0xFDFB},   {0xFE70, 0xFE74},
    {0xFE76, 0xFEFC},   {0xFF21, 0xFF3A},   {0xFF41, 0xFF5A},
    {0xFF66, 0xFFBE},   {0xFFC2, 0xFFC7},   {0xFFCA, 0xFFCF},
    {0xFFD2, 0xFFD7},   {0xFFDA, 0xFFDC},   {0x10000, 0x1000B},
    {0x1000D, 0x10026}, {0x10028, 0x1003A}, {0x1003C, 0x1003D},
    {0x1003F, 0x1004D}, {0x10050, 0x1005D}, {0x10080, 0x100FA},
    {0x10280, 0x1029C}, {0x102A0, 0x102D0}, {0x10300, 0x1031F},
    {0x1032D, 0x10340}, {0x10342, 0x10349}, {0x10350, 0x10375},
    {0x10380, 0x1039D}, {0x103A0, 0x103C3}, {0x103C8, 0x103CF},
    {0x10400, 0x1049D}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10500, 0x10527}, {0x10530, 0x10563}, {0x10570, 0x1057A},
    {0x1057C, 0x1058A}, {0x1058C, 0x10592}, {0x10594, 0x10595},
    {0x10597, 0x105A1}, {0x105A3, 0x105B1}, {0x105B3, 0x105B9},
    {0x105BB, 0x105BC}, {0x105C0, 0x105F3}, {0x10600, 0x10736},
    {0x10740, 0x10755}, {0x10760, 0x10767}, {0x10780, 0x10785},
    {0x10787, 0x107B0}, {0x107B2, 0x107BA}, {0x10800, 0x10805},
    {0x10808, 0x10808}, {0x1080A, 0x10835}, {0x10837, 0x10838},
    {0x1083C, 0x1083C}, {0x1083F, 0x10855}, {0x10860, 0x10876},
    {0x10880, 0x1089E}, {0x108E0, 0x108F2}, {0x108F4, 0x108F5},
    {0x10900, 0x10915}, {0x10920, 0x10939}, {0x10980, 0x109B7},
    {0x109BE, 0x109BF}, {0x10A00, 0x10A00}, {0x10A10, 0x10A13},
    {0x10A15, 0x10A17}, {0x10A19, 0x10A35}, {0x10A60, 0x10A7C},
    {0x10A80, 0x10A9C}, {0x10AC0, 0x10AC7}, {0x10AC9, 0x10AE4},
    {0x10B00, 0x10B35}, {0x10B40, 0x10B55}, {0x10B60, 0x10B72},
    {0x10B80, 0x10B91}, {0x10C00, 0x10C48}, {0x10C80, 0x10CB2},
    {0x10CC0, 0x10CF2}, {0x10D00, 0x10D23}, {0x10D4A, 0x10D65},
    {0x10D6F, 0x10D85}, {0x10E80, 0x10EA9}, {0x10EB0, 0x10EB1},
    {0x10EC2, 0x10EC4}, {0x10F00, 0x10F1C}, {0x10F27, 0x10F27},
    {0x10F30, 0x10F45}, {0x10F70, 0x10F81}, {0x10FB0, 0x10FC4},
    {0x10FE0, 0x10FF6}, {0x11003, 0x11037}, {0x11071, 0x11072},
    {0x11075, 0x11075}, {0x11083, 0x110AF}, {0x110D0, 0x110E8},
    {0x11103, 0x11126}, {0x11144, 0x11144}, {0x11147, 0x11147},
    {0x11150, 0x11172}, {0x11176, 0x11176}, {0x11183, 0x111B2},
    {0x111C1, 0x111C4}, {0x111DA, 0x111DA}, {0x111DC, 0x111DC},
    {0x11200, 0x11211}, {0x11213, 0x1122B}, {0x1123F, 0x11240},
    {0x11280, 0x11286}, {0x11288, 0x11288}, {0x1128A, 0x1128D},
    {0x1128F, 0x1129D}, {0x1129F, 0x112A8}, {0x112B0, 0x112DE},
    {0x11305, 0x1130C}, {0x1130F, 0x11310}, {0x11313, 0x11328},
    {0x1132A, 0x11330}, {0x11332, 0x11333}, {0x11335, 0x11339},
    {0x1133D, 0x1133D}, {0x11350, 0x11350}, {0x1135D, 0x11361},
    {0x11380, 0x11389}, {0x1138B, 0x1138B}, {0x1138E, 0x1138E},
    {0x11390, 0x113B5}, {0x113B7, 0x113B7}, {0x113D1, 0x113D1},
    {0x113D3, 0x113D3}, {0x11400, 0x11434}, {0x11447, 0x1144A},
    {0x1145F, 0x11461}, {0x11480, 0x114AF}, {0x114C4, 0x114C5},
    {0x114C7, 0x114C7}, {0x11580, 0x115AE}, {0x115D8, 0x115DB},
    {0x11600, 0x1162F}, {0x11644, 0x11644}, {0x11680, 0x116AA},
    {0x116B8, 0x116B8}, {0x11700, 0x1171A}, {0x11740, 0x11746},
    {0x11800, 0x1182B}, {0x118A0, 0x118DF}, {0x118FF, 0x11906},
    {0x11909, 0x11909}, {0x1190C, 0x11913}, {0x11915, 0x11916},
    {0x11918, 0x1192F}, {0x1193F, 0x1193F}, {0x11941, 0x11941},
    {0x119A0, 0x119A7}, {0x119AA, 0x119D0}, {0x119E1, 0x119E1},
    {0x119E3, 0x119E3}, {0x11A00, 0x11A00}, {0x11A0B, 0x11A32},
    {0x11A3A, 0x11A3A}, {0x11A50, 0x11A50}, {0x11A5C, 0x11A89},
    {0x11A9D, 0x11A9D}, {0x11AB0, 0x11AF8}, {0x11BC0, 0x11BE0},
    {0x11C00, 0x11C08}, {0x11C0A, 0x11C2E}, {0x11C40, 0x11C40},
    {0x11C72, 0x11C8F}, {0x11D00, 0x11D06}, {0x11D08, 0x11D09},
    {0x11D0B, 0x11D30}, {0x11D46, 0x11D46}, {0x11D60, 0x11D65},
    {0x11D67, 0x11D68}, {0x11D6A, 0x11D89}, {0x11D98, 0x11D98},
    {0x11EE0, 0x11EF2}, {0x11F02, 0x11F02}, {0x11F04, 0x11F10},
    {0x11F12, 0x11F33}, {0x11FB0, 0x11FB0}, {0x12000, 0x12399},
    {0x12480, 0x12543}, {0x12F90, 0x12FF0}, {0x13000, 0x1342F},
    {0x13441, 0x13446}, {0x13460, 0x143FA}, {0x14400, 0x14646},
    {0x16100, 0x1611D}, {0x16800, 0x16A38}, {0x16A40, 0x16A5E},
    {0x16A70, 0x16ABE}, {0x16AD0, 0x16AED}, {0x16B00, 0x16B2F},
    {0x16B40, 0x16B43}, {0x16B63, 0x16B77}, {0x16B7D, 0x16B8F},
    {0x16D40, 0x16D6C}, {0x16E40, 0x16E7F}, {0x16F00, 0x16F4A},
    {0x16F50, 0x16F50}, {0x16F93, 0x16F9F}, {0x16FE0, 0x16FE1},
    {0x16FE3, 0x16FE3}, {0x17000, 0x187F7}, {0x18800, 0x18CD5},
    {0x18CFF, 0x18D08}, {0x1AFF0, 0x1AFF3}, {0x1AFF5, 0x1AFFB},
    {0x1AFFD, 0x1AFFE}, {0x1B000, 0x1B122}, {0x1B132, 0x1B132},
    {0x1B150, 0x1B152}, {0x1B155, 0x1B155}, {0x1B164, 0x1B167},
    {0x1B170, 0x1B2FB}, {0x1BC00, 0x1BC6A}, {0x1BC70, 0x1BC7C},
    {0x1BC80, 0x1BC88}, {0x1BC90, 0x1BC99}, {0x1D400, 0x1D454},
    {0x1D456, 0x1D49C}, {0x1D49E, 0x1D49F}, {0x1D4A2, 0x1D4A2},
    {0x1D4A5, 0x1D4A6}, {0x1D4A9, 0x1D4AC}, {0x1D4AE, 0x1D4B9},
    {0x1D4BB, 0x1D4BB}, {0x1D4BD, 0x1D4C3}, {0x1D4C5, 0x1D505},
    {0x1D507, 0x1D50A}, {0x1D50D, 0x1D514}, {0x1D516, 0x1D51C},
    {0x1D51E, 0x1D539}, {0x1D53B, 0x1D53E}, {0x1D540, 0x1D544},
    {0x1D546, 0x1D546}, {0x1D54A, 0x1D550}, {0x1D552, 0x1D6A5},
    {0x1D6A8, 0x1D6C0}, {0x1D6C2, 0x1D6DA}, {0x1D6DC, 0x1D6FA},
    {0x1D6FC, 0x1D714}, {0x1D716, 0x1D734}, {0x1D736, 0x1D74E},
    {0x1D750, 0x1D76E}, {0x1D770, 0x1D788}, {0x1D78A, 0x1D7A8},
    {0x1D7AA, 0x1D7C2}, {0x1D7C4, 0x1D7CB}, {0x1DF00, 0x1DF1E},
    {0x1DF25, 0x1DF2A}, {0x1E030, 0x1E06D}, {0x1E100, 0x1E12C},
    {0x1E137, 0x1E13D}, {0x1E14E, 0x1E14E}, {0x1E290, 0x1E2AD},
    {0x1E2C0, 0x1E2EB}, {0x1E4D0, 0x1E4EB}, {0x1E5D0, 0x1E5ED},
    {0x1E5F0, 0x1E5F0}, {0x1E7E0, 0x1E7E6}, {0x1E7E8, 0x1E7EB},
    {0x1E7ED, 0x1E7EE}, {0x1E7F0, 0x1E7FE}, {0x1E800, 0x1E8C4},
    {0x1E900, 0x1E943}, {0x1E94B, 0x1E94B}, {0x1EE00, 0x1EE03},
    {0x1EE05, 0x1EE1F}, {0x1EE21, 0x1EE22}, {0x1EE24, 0x1EE24},
    {0x1EE27, 0x1EE27}, {0x1EE29, 0x1EE32}, {0x1EE34, 0x1EE37},
    {0x1EE39, 0x1EE39}, {0x1EE3B, 0x1EE3B}, {0x1EE42, 0x1EE42},
    {0x1EE47, 0x1EE47}, {0x1EE49, 0x1EE49}, {0x1EE4B, 0x1EE4B},
    {0x1EE4D, 0x1EE4F}, {0x1EE51, 0x1EE52}, {0x1EE54, 0x1EE54},
    {0x1EE57, 0x1EE57}, {0x1EE59, 0x1EE59}, {0x1EE5B, 0x1EE5B},
    {0x1EE5D, 0x1EE5D}, {0x1EE5F, 0x1EE5F}, {0x1EE61, 0x1EE62},
    {0x1EE64, 0x1EE64}, {0x1EE67, 0x1EE6A}, {0x1EE6C, 0x1EE72},
    {0x1EE74, 0x1EE77}, {0x1EE79, 0x1EE7C}, {0x1EE7E, 0x1EE7E},
    {0x1EE80, 0x1EE89}, {0x1EE8B, 0x1EE9B}, {0x1EEA1, 0x1EEA3},
    {0x1EEA5, 0x1EEA9}, {0x1EEAB, 0x1EEBB}, {0x20000, 0x2A6DF},
    {0x2A700, 0x2B739}, {0x2B740, 0x2B81D}, {0x2B820, 0x2CEA1},
    {0x2CEB0, 0x2EBE0}, {0x2EBF0, 0x2EE5D}, {0x2F800, 0x2FA1D},
    {0x30000, 0x3134A}, {0x31350, 0x323AF},
};
constexpr CodeRange kNumbers[] = {
    {0x30, 0x39},       {0xB2, 0xB3},       {0xB9, 0xB9},
    {0xBC, 0xBE},       {0x660, 0x669},     {0x6F0, 0x6F9},
    {0x7C0, 0x7C9},     {0x966, 0x96F},     {0x9E6, 0x9EF},
    {0x9F4, 0x9F9},     {0xA66, 0xA6F},     {0xAE6, 0xAEF},
    {0xB66, 0xB6F},     {0xB72, 0xB77},     {0xBE6, 0xBF2},
    {0xC66, 0xC6F},     {0xC78, 0xC7E},     {0xCE6, 0xCEF},
    {0xD58, 0xD5E},     {0xD66, 0xD78},     {0xDE6, 0xDEF},
    {0xE50, 0xE59},     {0xED0, 0xED9},     {0xF20, 0xF33},
    {0x1040, 0x1049},   {0x1090, 0x1099},   {0x1369, 0x137C},
    {0x16EE, 0x16F0},   {0x17E0, 0x17E9},   {0x17F0, 0x17F9},
    {0x1810, 0x1819},   {0x1946, 0x194F},   {0x19D0, 0x19DA},
    {0x1A80, 0x1A89},   {0x1A90, 0x1A99},   {0x1B50, 0x1B59},
    {0x1BB0, 0x1BB9},   {0x1C40, 0x1C49},   {0x1C50, 0x1C59},
    {0x2070, 0x2070},   {0x2074, 0x2079},   {0x2080, 0x2089},
    {0x2150, 0x2182},   {0x2185, 0x2189},   {0x2460, 0x249B},
    {0x24EA, 0x24FF},   {0x2776, 0x2793},   {0x2CFD, 0x2CFD},
    {0x3007, 0x3007},   {0x3021, 0x3029},   {0x3038, 0x303A},
    {0x3192, 0x3195},   {0x3220, 0x3229},   {0x3248, 0x324F},
    {0x3251, 0x325F},   {0x3280, 0x3289},   {0x32B1, 0x32BF},
    {0xA620, 0xA629},   {0xA6E6, 0xA6EF},   {0xA830, 0xA835},
    {0xA8D0, 0xA8D9},   {0xA900, 0xA909},   {0xA9D0, 0xA9D9},
    {0xA9F0, 0xA9F9},   {0xAA50, 0xAA59},   {0xABF0, 0xABF9},
    {0xFF10, 0xFF19},   {0x10107, 0x10133}, {0x10140, 0x10178},
    {0x1018A, 0x1018B}, {0x102E1, 0x102FB}, {0x10320, 0x10323},
    {0x10341, 0x10341}, {0x1034A, 0x1034A}, {0x103D1, 0x103D5},
    {0x104A0, 0x104A9}, {0x10858, 0x1085F}, {0x10879, 0x1087F},
    {0x108A7, 0x108AF}, {0x108FB, 0x108FF}, {0x10916, 0x1091B},
    {0x109BC, 0x109BD}, {0x109C0, 0x109CF}, {0x109D2, 0x109FF},
    {0x10A40, 0x10A48}, {0x10A7D, 0x10A7E}, {0x10A9D, 0x10A9F},
    {0x10AEB, 0x10AEF}, {0x10B58, 0x10B5F}, {0x10B78, 0x10B7F},
    {0x10BA9, 0x10BAF}, {0x10CFA, 0x10CFF}, {0x10D30, 0x10D39},
    {0x10D40, 0x10D49}, {0x10E60, 0x10E7E}, {0x10F1D, 0x10F26},
    {0x10F51, 0x10F54}, {0x10FC5, 0x10FCB}, {0x11052, 0x1106F},
    {0x110F0, 0x110F9}, {0x11136, 0x1113F}, {0x111D0, 0x111D9},
    {0x111E1, 0x111F4}, {0x112F0, 0x112F9}, {0x11450, 0x11459},
    {0x114D0, 0x114D9}, {0x11650, 0x11659}, {0x116C0, 0x116C9},
    {0x116D0, 0x116E3}, {0x11730, 0x1173B}, {0x118E0, 0x118F2},
    {0x11950, 0x11959}, {0x11BF0, 0x11BF9}, {0x11C50, 0x11C6C},
    {0x11D50, 0x11D59}, {0x11DA0, 0x11DA9}, {0x11F50, 0x11F59},
    {0x11FC0, 0x11FD4}, {0x12400, 0x1246E}, {0x16130, 0x16139},
    {0x16A60, 0x16A69}, {0x16AC0, 0x16AC9}, {0x16B50, 0x16B59},
    {0x16B5B, 0x16B61}, {0x16D70, 0x16D79}, {0x16E80, 0x16E96},
    {0x1CCF0, 0x1CCF9}, {0x1D2C0, 0x1D2D3}, {0x1D2E0, 0x1D2F3},
    {0x1D360, 0x1D378}, {0x1D7CE, 0x1D7FF}, {0x1E140, 0x1E149},
    {0x1E2F0, 0x1E2F9}, {0x1E4F0, 0x1E4F9}, {0x1E5F1, 0x1E5FA},
    {0x1E8C7, 0x1E8CF}, {0x1E950, 0x1E959}, {0x1EC71, 0x1ECAB},
    {0x1ECAD, 0x1ECAF}, {0x1ECB1, 0x1ECB4}, {0x1ED01, 0x1ED2D},
    {0x1ED2F, 0x1ED3D}, {0x1F100, 0x1F10C}, {0x1FBF0, 0x1FBF9},
};

bool inRanges(std::span<const CodeRange> ranges, char32_t cp) {
  auto it = std::upper_bound(
      ranges.begin(), ranges.end(), cp,
      [](char32_t c, const CodeRange &range) { return c < range.lo; });
  return it != ranges.begin() && cp <= std::prev(it)->hi;
}

/// \s of the `regex` module: Unicode's White_Space property.
bool isWhitespace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

enum class CharClass : uint8_t { Letter, Number, Space, Other };

CharClass classify(char32_t cp) {
  if (isWhitespace(cp))
    return CharClass::Space;
  if (inRanges(kLetters, cp))
    return CharClass::Letter;
  if (inRanges(kNumbers, cp))
    return CharClass::Number;
  return CharClass::Other;
}

const std::array<CharClass, 128> kAsciiClasses = [] {
  std::array<CharClass, 128> classes{};
  for (char32_t c = 0; c < 128; ++c)
    classes[c] = classify(c);
  return classes;
}();

constexpr char32_t kInvalid = 0xFFFFFFFF;

struct CodePoint {
  char32_t cp;   // kInvalid for a byte that does not start valid UTF-8
  uint32_t size; // bytes, >= 1
};

/// Decodes the code point at text[i] (i < text.size()): strict UTF-8, no
/// overlong forms, surrogates or values above U+10FFFF.
CodePoint decodeAt(std::string_view text, size_t i) {
  auto c = static_cast<unsigned char>(text[i]);
  if (c < 0x80)
    return {c, 1};
  uint32_t size;
  char32_t cp;
  if (c >= 0xC2 && c <= 0xDF) {
    size = 2;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    size = 3;
    cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    size = 4;
    cp = c & 0x07;
  } else {
    return {kInvalid, 1};
  }
  if (text.size() - i < size)
    return {kInvalid, 1};
  for (uint32_t k = 1; k < size; ++k) {
    auto d = static_cast<unsigned char>(text[i + k]);
    if ((d & 0xC0) != 0x80)
      return {kInvalid, 1};
    cp = (cp << 6) | (d & 0x3F);
  }
  if ((size == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
      (size == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
    return {kInvalid, 1};
  return {cp, size};
}

CharClass classAt(std::string_view text, size_t i, uint32_t *size) {
  auto c = static_cast<unsigned char>(text[i]);
  if (c < 0x80) {
    *size = 1;
    return kAsciiClasses[c];
  }
  CodePoint point = decodeAt(text, i);
  *size = point.size;
  return point.cp == kInvalid ? CharClass::Other : classify(point.cp);
}

/// The end of the run of `cls` code points that starts at i.
size_t runEnd(std::string_view text, size_t i, CharClass cls) {
  uint32_t size;
  while (i < text.size() && classAt(text, i, &size) == cls)
    i += size;
  return i;
}

/// The end of the piece of GPT-2's pattern
///   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
/// that starts at i (i < text.size()): the alternatives in order, the first
/// that matches wins, as in a backtracking regex engine.
size_t pieceEnd(std::string_view text, size_t i) {
  const size_t n = text.size();
  if (text[i] == '\'' && i + 1 < n) {
    char c = text[i + 1];
    if (c == 's' || c == 't' || c == 'm' || c == 'd')
      return i + 2;
    if (i + 2 < n) {
      std::string_view two = text.substr(i + 1, 2);
      if (two == "re" || two == "ve" || two == "ll")
        return i + 3;
    }
  }
  uint32_t size;
  CharClass first = classAt(text, i, &size);
  // " ?X+" for X in letters, numbers, other: the optional space is taken
  // whenever the next code point starts a run (the alternatives are tried in
  // order, but a space is never a letter, number or other).
  if (text[i] == ' ' && i + 1 < n) {
    uint32_t nextSize;
    CharClass next = classAt(text, i + 1, &nextSize);
    if (next != CharClass::Space)
      return runEnd(text, i + 1, next);
  }
  if (first != CharClass::Space)
    return runEnd(text, i, first);
  // \s+(?!\S): the whole run at the end of the text, else the run but its
  // last code point (which then starts the next piece, e.g. " word"); a
  // single whitespace code point before a non-space falls to \s+.
  size_t last = i, end = i;
  while (end < n && classAt(text, end, &size) == CharClass::Space) {
    last = end;
    end += size;
  }
  if (end == n || last == i)
    return end;
  return last;
}

/// The end of the piece of LLaMA-3's pattern (tiktoken's cl100k)
///   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
///    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
/// that starts at i (i < text.size()), the alternatives in order.
size_t llama3PieceEnd(std::string_view text, size_t i) {
  const size_t n = text.size();
  auto isNewline = [&](size_t at) {
    return text[at] == '\r' || text[at] == '\n';
  };
  // Contractions in any case; case folding also matches U+017F (long s) to
  // 's'.
  if (text[i] == '\'' && i + 1 < n) {
    auto lower = [&](size_t at) {
      return at < n ? char(std::tolower(static_cast<unsigned char>(text[at])))
                    : '\0';
    };
    const char c = lower(i + 1), d = lower(i + 2);
    if ((c == 'r' && d == 'e') || (c == 'v' && d == 'e') ||
        (c == 'l' && d == 'l'))
      return i + 3;
    if (c == 's' || c == 't' || c == 'm' || c == 'd')
      return i + 2;
    if (text.substr(i + 1, 2) == "\xC5\xBF") // U+017F
      return i + 3;
  }
  uint32_t size;
  const CharClass first = classAt(text, i, &size);
  if (first == CharClass::Letter)
    return runEnd(text, i, CharClass::Letter);
  // [^\r\n\p{L}\p{N}]?\p{L}+: one leading non-letter, non-number code point
  // (a space, punctuation, not a line break) joins the letters after it.
  if (first != CharClass::Number && !isNewline(i) && i + size < n) {
    uint32_t nextSize;
    if (classAt(text, i + size, &nextSize) == CharClass::Letter)
      return runEnd(text, i + size, CharClass::Letter);
  }
  if (first == CharClass::Number) { // \p{N}{1,3}
    size_t end = i;
    for (int k = 0;
         k < 3 && end < n && classAt(text, end, &size) == CharClass::Number;
         ++k)
      end += size;
    return end;
  }
  // " ?[^\s\p{L}\p{N}]+[\r\n]*"
  size_t start = i;
  if (text[i] == ' ' && i + 1 < n) {
    uint32_t nextSize;
    if (classAt(text, i + 1, &nextSize) == CharClass::Other)
      start = i + 1;
  }
  if (classAt(text, start, &size) == CharClass::Other) {
    size_t end = runEnd(text, start, CharClass::Other);
    while (end < n && isNewline(end))
      ++end;
    return end;
  }
  // Whitespace from here on. \s*[\r\n]+: up to the run's last line break.
  size_t end = i, afterBreak = i, last = i;
  while (end < n && classAt(text, end, &size) == CharClass::Space) {
    last = end;
    if (isNewline(end))
      afterBreak = end + 1;
    end += size;
  }
  if (afterBreak > i)
    return afterBreak;
  // \s+(?!\S), then \s+, as in GPT-2's pattern.
  if (end == n || last == i)
    return end;
  return last;
}

// ---------------------------------------------------------------------------
// GPT-2's byte-to-unicode alphabet: printable Latin-1 bytes stand for
// themselves, the others (controls, space, 0x7F-0xA0, 0xAD) for U+0100.. in
// byte order.
const std::array<char32_t, 256> kByteToUnicode = [] {
  std::array<char32_t, 256> table{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable =
        (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    table[b] = printable ? char32_t(b) : next++;
  }
  return table;
}();

void appendUtf8(std::string &out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

/// A token for an error message: quoted, control bytes escaped.
std::string quote(std::string_view token) {
  std::string out = "'";
  for (char c : token) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "'";
}

/// tokenizer.json files of published models are tens of MB at most.
constexpr uint64_t kMaxTokenizerFileBytes = uint64_t(1) << 30;

std::string readFile(const std::string &path) {
  return readRegularFile(path, kMaxTokenizerFileBytes, "tokenizer file");
}

// ---------------------------------------------------------------------------
// vocab.json: one JSON object of token -> id, read with nlohmann-json's SAX
// parser. The grammar, escapes, surrogate pairs and UTF-8 are nlohmann's to
// check; the reader checks the shape (one flat object of ids in [0, 2^31))
// and streams the entries without building a document.
class VocabReader final : public nlohmann::json_sax<nlohmann::json> {
public:
  explicit VocabReader(const std::string &path) : path(path) {}

  std::vector<std::pair<std::string, int32_t>> read(std::string_view text) {
    nlohmann::json::sax_parse(text, this);
    return std::move(entries);
  }

  bool null() override { return wrongValue("null"); }
  bool boolean(bool) override { return wrongValue("a boolean"); }
  bool number_integer(number_integer_t) override {
    // Only negative integers arrive here; others are unsigned.
    if (!insideObject)
      return wrongValue("a number");
    fail("token " + quote(lastKey) + " has a negative id");
  }
  bool number_unsigned(number_unsigned_t id) override {
    if (!insideObject)
      return wrongValue("a number");
    if (id > uint64_t(std::numeric_limits<int32_t>::max()))
      fail("token " + quote(lastKey) + " has id " + std::to_string(id) +
           ", above 2^31-1");
    entries.emplace_back(std::move(lastKey), int32_t(id));
    return true;
  }
  bool number_float(number_float_t, const string_t &text) override {
    if (!insideObject)
      return wrongValue("a number");
    fail("token " + quote(lastKey) + ": ids must be integers, found " +
         quote(text));
  }
  bool string(string_t &) override { return wrongValue("a string"); }
  bool binary(binary_t &) override { return wrongValue("binary data"); }
  bool start_object(std::size_t) override {
    if (insideObject)
      return wrongValue("an object");
    insideObject = true;
    return true;
  }
  bool key(string_t &token) override {
    lastKey = std::move(token);
    return true;
  }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return wrongValue("an array"); }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string &,
                   const nlohmann::detail::exception &error) override {
    // nlohmann's message ("parse error at line L, column C: ..."), raw
    // bytes escaped.
    std::string message = quote(jsonErrorText(error));
    fail(message.substr(1, message.size() - 2));
  }

private:
  [[noreturn]] void fail(const std::string &problem) const {
    throw std::runtime_error(path + ": " + problem);
  }
  bool wrongValue(const char *found) const {
    if (!insideObject)
      fail(std::string("expected a JSON object of token -> id, found ") +
           found);
    fail("token " + quote(lastKey) + ": ids must be integers, found " + found);
  }

  const std::string &path;
  bool insideObject = false;
  std::string lastKey;
  std::vector<std::pair<std::string, int32_t>> entries;
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const {
    return std::hash<std::string_view>()(s);
  }
};

uint64_t pairKey(int32_t a, int32_t b) {
  return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
}

} // namespace

// ---------------------------------------------------------------------------
struct BpeTokenizer::Impl {
  struct Merge {
    int32_t rank, id;
  };
  std::array<int32_t, 256> byteIds{};         // byte -> its one-symbol token
  std::unordered_map<uint64_t, Merge> merges; // (left, right) -> merge
  std::vector<std::string> idBytes;           // id -> the bytes it spells
  std::vector<uint8_t> hasId;                 // id -> present in vocab.json
  /// Added tokens matched in the text before pre-tokenisation (tokenizer
  /// .json's added_tokens), longest first so that the longest wins at a
  /// position.
  std::vector<std::pair<std::string, int32_t>> addedTokens;
  /// The pre-tokenisation pattern: GPT-2's or LLaMA-3's.
  size_t (*pieceEndAt)(std::string_view, size_t) = pieceEnd;
  /// With ignore_merges (LLaMA-3): a piece that is a token as a whole is
  /// that token, merges or not. Keyed by the bytes it spells.
  std::unordered_map<std::string, int32_t> wholePieces;
  /// A template post-processor's special tokens around the whole text.
  std::vector<int32_t> prefixIds, suffixIds;
  /// SentencePiece's BPE (LLaMA-2, Mistral): no pre-tokenisation and no
  /// byte-level alphabet. Each piece between added tokens has its spaces
  /// replaced by U+2581 and one put in front (the normalizer); its code
  /// points are the symbols, a code point outside the vocabulary its bytes'
  /// <0xXX> tokens (byte fallback).
  bool sentencePiece = false;
  std::unordered_map<std::string, int32_t> symbolIds; // token -> id
  std::array<int32_t, 256> fallbackIds{};             // byte -> <0xXX>
  /// Leading spaces decode() drops from the whole text: the Strip(" ", n,
  /// 0) ending SentencePiece's decoder, which undoes the normalizer's
  /// U+2581 in front of the first piece.
  int64_t stripLeadingSpaces = 0;

  /// BPE as HuggingFace runs it on a word: the lowest-ranked adjacent pair,
  /// the leftmost of equal rank, until no pair has a rank; a heap over the
  /// pairs, O(n log n), since a SentencePiece piece is a whole text.
  void mergeByHeap(std::vector<int32_t> &word) const {
    const size_t n = word.size();
    if (n < 2)
      return;
    constexpr size_t kNone = SIZE_MAX;
    std::vector<size_t> prev(n), next(n);
    for (size_t i = 0; i < n; ++i) {
      prev[i] = i == 0 ? kNone : i - 1;
      next[i] = i + 1 == n ? kNone : i + 1;
    }
    struct Candidate {
      int32_t rank;
      size_t pos;
      int32_t left, right;
    };
    auto later = [](const Candidate &a, const Candidate &b) {
      return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
    };
    std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)>
        heap(later);
    auto consider = [&](size_t pos) {
      if (pos == kNone || next[pos] == kNone)
        return;
      auto it = merges.find(pairKey(word[pos], word[next[pos]]));
      if (it != merges.end())
        heap.push({it->second.rank, pos, word[pos], word[next[pos]]});
    };
    for (size_t i = 0; i + 1 < n; ++i)
      consider(i);
    std::vector<uint8_t> alive(n, 1);
    while (!heap.empty()) {
      const Candidate c = heap.top();
      heap.pop();
      // Stale: a neighbour merged since this pair was queued.
      if (!alive[c.pos] || word[c.pos] != c.left || next[c.pos] == kNone ||
          word[next[c.pos]] != c.right)
        continue;
      const size_t right = next[c.pos];
      word[c.pos] = merges.find(pairKey(c.left, c.right))->second.id;
      alive[right] = 0;
      next[c.pos] = next[right];
      if (next[right] != kNone)
        prev[next[right]] = c.pos;
      consider(prev[c.pos]);
      consider(c.pos);
    }
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i)
      if (alive[i])
        word[kept++] = word[i];
    word.resize(kept);
  }

  void encodeSentencePiece(std::string_view piece,
                           std::vector<int32_t> &out) const {
    if (piece.empty())
      return;
    static constexpr std::string_view kMetaspace = "\xE2\x96\x81"; // U+2581
    std::string text(kMetaspace);
    for (char c : piece)
      if (c == ' ')
        text += kMetaspace;
      else
        text += c;
    std::vector<int32_t> word;
    word.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
      const CodePoint point = decodeAt(text, i);
      auto it = symbolIds.find(text.substr(i, point.size));
      if (point.cp != kInvalid && it != symbolIds.end()) {
        word.push_back(it->second);
      } else {
        for (size_t k = 0; k < point.size; ++k)
          word.push_back(fallbackIds[static_cast<unsigned char>(text[i + k])]);
      }
      i += point.size;
    }
    mergeByHeap(word);
    out.insert(out.end(), word.begin(), word.end());
  }

  // Per-piece cache, shared by all encode() calls.
  static constexpr size_t kMaxCachedPiece = 64, kMaxCacheEntries = 1 << 18;
  mutable std::mutex cacheMutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash,
                             std::equal_to<>>
      cache;

  /// GPT-2's bpe(): merge the lowest-ranked adjacent pair, every occurrence
  /// left to right, until no adjacent pair has a rank.
  void mergePiece(std::string_view piece, std::vector<int32_t> &out) const {
    std::vector<int32_t> word(piece.size()), next;
    for (size_t i = 0; i < piece.size(); ++i)
      word[i] = byteIds[static_cast<unsigned char>(piece[i])];
    while (word.size() > 1) {
      const Merge *best = nullptr;
      int32_t left = 0, right = 0;
      for (size_t i = 0; i + 1 < word.size(); ++i) {
        auto it = merges.find(pairKey(word[i], word[i + 1]));
        if (it != merges.end() && (!best || it->second.rank < best->rank)) {
          best = &it->second;
          left = word[i];
          right = word[i + 1];
        }
      }
      if (!best)
        break;
      next.clear();
      for (size_t i = 0; i < word.size(); ++i) {
        if (i + 1 < word.size() && word[i] == left && word[i + 1] == right) {
          next.push_back(best->id);
          ++i;
        } else {
          next.push_back(word[i]);
        }
      }
      word.swap(next);
    }
    out.insert(out.end(), word.begin(), word.end());
  }

  void encodePiece(std::string_view piece, std::vector<int32_t> &out) const {
    if (!wholePieces.empty())
      if (auto it = wholePieces.find(std::string(piece));
          it != wholePieces.end()) {
        out.push_back(it->second);
        return;
      }
    if (piece.size() > kMaxCachedPiece) {
      mergePiece(piece, out);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(cacheMutex);
      auto it = cache.find(piece);
      if (it != cache.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    size_t start = out.size();
    mergePiece(piece, out);
    std::lock_guard<std::mutex> lock(cacheMutex);
    if (cache.size() >= kMaxCacheEntries)
      cache.clear();
    cache.emplace(std::string(piece),
                  std::vector<int32_t>(out.begin() + start, out.end()));
  }
};

BpeTokenizer::BpeTokenizer(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
BpeTokenizer::BpeTokenizer(BpeTokenizer &&) noexcept = default;
BpeTokenizer &BpeTokenizer::operator=(BpeTokenizer &&) noexcept = default;
BpeTokenizer::~BpeTokenizer() = default;

namespace {
/// One merge as a file gives it, and where (for errors).
struct MergeRule {
  std::string left, right, where;
};

/// A merge spelt "left right" (merges.txt, tokenizer.json before
/// tokenizers 0.20); `where` prefixes its error.
MergeRule parseMergeLine(std::string_view line, std::string where) {
  size_t space = line.find(' ');
  if (space == std::string_view::npos || space == 0 ||
      space + 1 == line.size() ||
      line.find(' ', space + 1) != std::string_view::npos)
    throw std::runtime_error(where +
                             "expected two tokens separated by one space, "
                             "got " +
                             quote(line));
  return {std::string(line.substr(0, space)),
          std::string(line.substr(space + 1)), std::move(where)};
}
} // namespace

/// Builds the tokenizer from what either file format holds.
struct BpeBuilder {
  /// The tokenizer of `entries` (token in the byte-to-unicode alphabet, id)
  /// and `rules` in priority order; `vocabSource` names the vocabulary in
  /// errors.
  /// With `sentencePiece`, the tokens are SentencePiece's (U+2581 for a
  /// space, <0xXX> for a byte, which all 256 need) instead.
  static std::unique_ptr<BpeTokenizer::Impl>
  build(std::vector<std::pair<std::string, int32_t>> entries,
        const std::vector<MergeRule> &rules, const std::string &vocabSource,
        bool sentencePiece = false);
  /// The post-processor: none, ByteLevel (offsets only), or a
  /// TemplateProcessing whose single-sequence template is special tokens
  /// around the sequence (LLaMA's BOS), alone or after a ByteLevel in a
  /// Sequence. Its special tokens go around the whole text.
  static void readTemplate(const std::string &path, const nlohmann::json &root,
                           BpeTokenizer::Impl &impl);
};

BpeTokenizer BpeTokenizer::load(const std::string &vocabJson,
                                const std::string &mergesTxt) {
  std::string vocabText = readFile(vocabJson);
  auto entries = VocabReader(vocabJson).read(vocabText);
  std::string mergesText = readFile(mergesTxt);
  std::string_view rest = mergesText;
  std::vector<MergeRule> rules;
  for (size_t lineNo = 1; !rest.empty(); ++lineNo) {
    size_t eol = rest.find('\n');
    std::string_view line = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? std::string_view()
                                         : rest.substr(eol + 1);
    if (!line.empty() && line.back() == '\r')
      line.remove_suffix(1);
    if (line.empty() || (lineNo == 1 && line.starts_with("#version")))
      continue;
    rules.push_back(parseMergeLine(line, mergesTxt + ": line " +
                                             std::to_string(lineNo) + ": "));
  }
  return BpeTokenizer(BpeBuilder::build(std::move(entries), rules, vocabJson));
}

std::unique_ptr<BpeTokenizer::Impl>
BpeBuilder::build(std::vector<std::pair<std::string, int32_t>> entries,
                  const std::vector<MergeRule> &rules,
                  const std::string &vocabJson, bool sentencePiece) {
  auto impl = std::make_unique<BpeTokenizer::Impl>();
  if (entries.empty())
    throw std::runtime_error(vocabJson + ": the vocabulary is empty");
  // Ids index a table: they may have holes, but not be mostly holes.
  int32_t maxId = 0;
  for (const auto &entry : entries)
    maxId = std::max(maxId, entry.second);
  if (size_t(maxId) >= 2 * entries.size() + 1024)
    throw std::runtime_error(vocabJson + ": the largest id is " +
                             std::to_string(maxId) + " for only " +
                             std::to_string(entries.size()) + " tokens");
  std::unordered_map<std::string, int32_t> vocab;
  std::vector<const std::string *> idTokens(size_t(maxId) + 1, nullptr);
  for (const auto &[token, id] : entries) {
    if (!vocab.emplace(token, id).second)
      throw std::runtime_error(vocabJson + ": token " + quote(token) +
                               " appears twice");
    if (idTokens[id])
      throw std::runtime_error(vocabJson + ": id " + std::to_string(id) +
                               " belongs to both " + quote(*idTokens[id]) +
                               " and " + quote(token));
    idTokens[id] = &token;
  }
  if (sentencePiece) {
    impl->sentencePiece = true;
    impl->symbolIds = vocab;
    impl->idBytes.resize(idTokens.size());
    impl->hasId.resize(idTokens.size(), 0);
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      auto it = vocab.find(name);
      if (it == vocab.end())
        throw std::runtime_error(
            vocabJson + ": byte fallback needs the token " + quote(name));
      impl->fallbackIds[b] = it->second;
    }
    // Each id's bytes: U+2581 stands for a space, <0xXX> for its byte.
    for (size_t id = 0; id < idTokens.size(); ++id) {
      if (!idTokens[id])
        continue;
      impl->hasId[id] = 1;
      const std::string &token = *idTokens[id];
      std::string &bytes = impl->idBytes[id];
      for (size_t at = 0; at < token.size();)
        if (token.compare(at, 3, "\xE2\x96\x81") == 0) {
          bytes += ' ';
          at += 3;
        } else {
          bytes += token[at++];
        }
    }
    for (int b = 0; b < 256; ++b)
      impl->idBytes[impl->fallbackIds[b]] = std::string(1, char(b));
  } else {
    std::unordered_map<char32_t, unsigned char> unicodeToByte;
    for (int b = 0; b < 256; ++b) {
      unicodeToByte[kByteToUnicode[b]] = static_cast<unsigned char>(b);
      std::string symbol;
      appendUtf8(symbol, kByteToUnicode[b]);
      auto it = vocab.find(symbol);
      if (it == vocab.end()) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02X", b);
        throw std::runtime_error(vocabJson +
                                 ": the vocabulary lacks the token " +
                                 quote(symbol) + " for byte " + hex);
      }
      impl->byteIds[b] = it->second;
    }
    // Each id's bytes: its characters mapped back through the alphabet; a
    // character outside it (only in tokens that BPE never produces, e.g. added
    // special tokens) stands for its own UTF-8 bytes.
    impl->idBytes.resize(idTokens.size());
    impl->hasId.resize(idTokens.size(), 0);
    for (size_t id = 0; id < idTokens.size(); ++id) {
      if (!idTokens[id])
        continue;
      impl->hasId[id] = 1;
      std::string_view token = *idTokens[id];
      std::string &bytes = impl->idBytes[id];
      for (size_t i = 0; i < token.size();) {
        CodePoint point = decodeAt(token, i);
        auto it = unicodeToByte.find(point.cp);
        if (it != unicodeToByte.end())
          bytes += static_cast<char>(it->second);
        else
          bytes.append(token.substr(i, point.size));
        i += point.size;
      }
    }
  }

  int32_t rank = 0;
  for (const MergeRule &rule : rules) {
    auto leftIt = vocab.find(rule.left), rightIt = vocab.find(rule.right);
    auto resultIt = vocab.find(rule.left + rule.right);
    if (leftIt == vocab.end() || rightIt == vocab.end())
      throw std::runtime_error(
          rule.where + quote(leftIt == vocab.end() ? rule.left : rule.right) +
          " is not in the vocabulary");
    if (resultIt == vocab.end())
      throw std::runtime_error(rule.where + "the merge result " +
                               quote(rule.left + rule.right) +
                               " is not in the vocabulary");
    // A repeated merge keeps its last rank, as GPT2Tokenizer's dict does.
    impl->merges[pairKey(leftIt->second, rightIt->second)] = {rank++,
                                                              resultIt->second};
  }
  return impl;
}

namespace {
/// Reads a tokenizer.json field, naming the file and the field's path in
/// its errors.
[[noreturn]] void unsupported(const std::string &path, const std::string &field,
                              const std::string &why) {
  throw std::runtime_error(path + ": " + field + " " + why);
}

/// A null, absent, false or empty value: a feature the file leaves off.
bool off(const nlohmann::json &object, const char *field) {
  auto it = object.find(field);
  return it == object.end() || it->is_null() ||
         (it->is_boolean() && !it->get<bool>()) ||
         (it->is_string() && it->get<std::string>().empty());
}
} // namespace

void BpeBuilder::readTemplate(const std::string &path,
                              const nlohmann::json &root,
                              BpeTokenizer::Impl &impl) {
  if (!root.contains("post_processor") || root["post_processor"].is_null())
    return;
  const nlohmann::json *processor = &root["post_processor"];
  auto type = [](const nlohmann::json &json) {
    return json.is_object() ? json.value("type", "") : std::string();
  };
  if (type(*processor) == "Sequence") {
    // ByteLevel steps (offsets only) and at most one template.
    if (!processor->contains("processors") ||
        !processor->at("processors").is_array())
      throw std::runtime_error(path + ": post_processor.processors must be "
                                      "an array");
    const nlohmann::json *found = nullptr;
    for (const nlohmann::json &step : processor->at("processors"))
      if (type(step) == "TemplateProcessing" && !found)
        found = &step;
      else if (type(step) != "ByteLevel")
        throw std::runtime_error(path + ": post_processor.processors may "
                                        "hold ByteLevel steps and one "
                                        "TemplateProcessing");
    if (!found)
      return;
    processor = found;
  }
  if (type(*processor) == "ByteLevel")
    return;
  if (type(*processor) != "TemplateProcessing")
    throw std::runtime_error(path +
                             ": post_processor must be ByteLevel or "
                             "TemplateProcessing (optionally after a "
                             "ByteLevel in a Sequence), got " +
                             quote(type(*processor)));
  const nlohmann::json &single = processor->value("single", nlohmann::json());
  const nlohmann::json &specials =
      processor->value("special_tokens", nlohmann::json());
  if (!single.is_array())
    throw std::runtime_error(path + ": post_processor.single must be an array");
  bool sawSequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const nlohmann::json &piece = single[i];
    const std::string where =
        path + ": post_processor.single[" + std::to_string(i) + "]";
    if (piece.is_object() && piece.contains("Sequence")) {
      if (sawSequence)
        throw std::runtime_error(where + ": a second sequence");
      sawSequence = true;
      continue;
    }
    if (!piece.is_object() || !piece.contains("SpecialToken") ||
        !piece["SpecialToken"].is_object() ||
        !piece["SpecialToken"].contains("id") ||
        !piece["SpecialToken"]["id"].is_string())
      throw std::runtime_error(where +
                               ": must be a Sequence or a SpecialToken");
    const std::string name = piece["SpecialToken"]["id"].get<std::string>();
    if (!specials.is_object() || !specials.contains(name) ||
        !specials[name].is_object() || !specials[name].contains("ids") ||
        !specials[name]["ids"].is_array())
      throw std::runtime_error(where + ": special token " + quote(name) +
                               " is not in post_processor.special_tokens");
    for (const nlohmann::json &id : specials[name]["ids"]) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
          size_t(id.get<int64_t>()) >= impl.hasId.size() ||
          !impl.hasId[size_t(id.get<int64_t>())])
        throw std::runtime_error(where + ": special token " + quote(name) +
                                 " has an id outside the vocabulary");
      (sawSequence ? impl.suffixIds : impl.prefixIds)
          .push_back(int32_t(id.get<int64_t>()));
    }
  }
  if (!sawSequence)
    throw std::runtime_error(path + ": post_processor.single has no Sequence");
}

namespace {
/// LLaMA-3's pre-tokenisation pattern as its tokenizer.json spells it.
const char *const kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
} // namespace

BpeTokenizer BpeTokenizer::loadTokenizerJson(const std::string &path) {
  std::string text = readFile(path);
  nlohmann::json root = nlohmann::json::parse(text, nullptr, false);
  if (root.is_discarded() || !root.is_object())
    throw std::runtime_error(path + ": not a JSON object (tokenizer.json)");
  const nlohmann::json &model =
      root.contains("model") ? root["model"] : nlohmann::json();
  if (!model.is_object() || model.value("type", "") != "BPE")
    unsupported(path, "model.type", "must be \"BPE\" (byte-level BPE)");
  // Byte fallback marks SentencePiece's BPE (LLaMA-2, Mistral): its
  // normalizer puts U+2581 for spaces and in front, and nothing splits the
  // text. Otherwise byte-level BPE, which has neither.
  const bool sentencePiece = !off(model, "byte_fallback");
  for (const char *field :
       {"dropout", "continuing_subword_prefix", "end_of_word_suffix"})
    if (!off(model, field))
      unsupported(path, std::string("model.") + field,
                  "is set; tpc reads plain BPE");
  if (!sentencePiece)
    for (const char *field : {"unk_token", "fuse_unk"})
      if (!off(model, field))
        unsupported(path, std::string("model.") + field,
                    "is set without byte_fallback; only byte-level BPE "
                    "(GPT-2's, LLaMA-3's) and SentencePiece's are read");
  const bool ignoreMerges = !off(model, "ignore_merges");
  if (sentencePiece && ignoreMerges)
    unsupported(path, "model.ignore_merges",
                "is set with byte_fallback; SentencePiece's BPE merges");
  size_t (*pattern)(std::string_view, size_t) = nullptr;
  const nlohmann::json &pre =
      root.contains("pre_tokenizer") ? root["pre_tokenizer"] : nlohmann::json();
  if (sentencePiece) {
    const nlohmann::json &normalizer =
        root.contains("normalizer") ? root["normalizer"] : nlohmann::json();
    const nlohmann::json &steps =
        normalizer.is_object() && normalizer.contains("normalizers")
            ? normalizer["normalizers"]
            : nlohmann::json();
    const std::string metaspace = "\xE2\x96\x81";
    const bool llama2 =
        normalizer.is_object() && normalizer.value("type", "") == "Sequence" &&
        steps.is_array() && steps.size() == 2 && steps[0].is_object() &&
        steps[0].value("type", "") == "Prepend" &&
        steps[0].value("prepend", "") == metaspace && steps[1].is_object() &&
        steps[1].value("type", "") == "Replace" &&
        steps[1].value("content", "") == metaspace &&
        steps[1].contains("pattern") && steps[1]["pattern"].is_object() &&
        steps[1]["pattern"].value("String", "") == " ";
    if (!llama2)
      unsupported(path, "normalizer",
                  "must be SentencePiece's (Prepend U+2581, then Replace "
                  "' ' by U+2581) with byte_fallback");
    if (!off(root, "pre_tokenizer"))
      unsupported(path, "pre_tokenizer",
                  "must be null with byte_fallback (SentencePiece's BPE)");
  } else if (!off(root, "normalizer")) {
    unsupported(path, "normalizer",
                "is set; byte-level BPE (GPT-2's, LLaMA-3's) has none");
  }
  // GPT-2: ByteLevel with its own pattern. LLaMA-3: its pattern as a Split,
  // then ByteLevel without one.
  auto byteLevel = [](const nlohmann::json &step, bool regex) {
    return step.is_object() && step.value("type", "") == "ByteLevel" &&
           !step.value("add_prefix_space", true) &&
           step.value("use_regex", !regex) == regex;
  };
  if (byteLevel(pre, true)) {
    pattern = pieceEnd;
  } else if (pre.is_object() && pre.value("type", "") == "Sequence" &&
             pre.contains("pretokenizers") && pre["pretokenizers"].is_array() &&
             pre["pretokenizers"].size() == 2) {
    const nlohmann::json &split = pre["pretokenizers"][0];
    if (split.is_object() && split.value("type", "") == "Split" &&
        split.value("behavior", "") == "Isolated" &&
        !split.value("invert", true) && split.contains("pattern") &&
        split["pattern"].is_object() &&
        split["pattern"].value("Regex", "") == kLlama3Pattern &&
        byteLevel(pre["pretokenizers"][1], false))
      pattern = llama3PieceEnd;
  }
  if (!pattern && !sentencePiece)
    unsupported(path, "pre_tokenizer",
                "must be GPT-2's (ByteLevel with use_regex, no prefix space) "
                "or LLaMA-3's (its Split pattern, then ByteLevel)");
  // Only decode() reads it: SentencePiece's is a Sequence (U+2581 to
  // spaces, bytes fused), which decode() does but for the leading space.
  if (!off(root, "decoder") &&
      !(root["decoder"].is_object() &&
        root["decoder"].value("type", "") ==
            (sentencePiece ? "Sequence" : "ByteLevel")))
    unsupported(path, "decoder",
                sentencePiece ? "must be a Sequence or null"
                              : "must be ByteLevel or null");
  int64_t stripLeadingSpaces = 0;
  if (sentencePiece && !off(root, "decoder"))
    for (const nlohmann::json &step :
         root["decoder"].value("decoders", nlohmann::json::array())) {
      if (!step.is_object() || step.value("type", "") != "Strip")
        continue;
      const nlohmann::json start = step.value("start", nlohmann::json(0)),
                           stop = step.value("stop", nlohmann::json(0));
      if (step.value("content", "") != " " || !start.is_number_integer() ||
          start.get<int64_t>() < 0 || stop != 0)
        unsupported(path, "decoder's Strip",
                    "must strip leading spaces only (content \" \", stop 0)");
      stripLeadingSpaces = start.get<int64_t>();
    }

  const nlohmann::json &vocab =
      model.contains("vocab") ? model["vocab"] : nlohmann::json();
  if (!vocab.is_object())
    unsupported(path, "model.vocab", "must be an object of token -> id");
  std::vector<std::pair<std::string, int32_t>> entries;
  for (const auto &[token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() > std::numeric_limits<int32_t>::max())
      unsupported(path, "model.vocab[" + quote(token) + "]",
                  "must be an id in 0..2^31-1");
    entries.emplace_back(token, int32_t(id.get<int64_t>()));
  }
  const nlohmann::json &merges =
      model.contains("merges") ? model["merges"] : nlohmann::json();
  if (!merges.is_array())
    unsupported(path, "model.merges", "must be an array");
  std::vector<MergeRule> rules;
  for (size_t i = 0; i < merges.size(); ++i) {
    // "left right" (tokenizers before 0.20) or ["left", "right"].
    std::string where = path + ": model.merges[" + std::to_string(i) + "]: ";
    const nlohmann::json &merge = merges[i];
    if (merge.is_string()) {
      rules.push_back(parseMergeLine(merge.get<std::string>(), where));
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      rules.push_back(
          {merge[0].get<std::string>(), merge[1].get<std::string>(), where});
    } else {
      throw std::runtime_error(where + "must be \"left right\" or "
                                       "[\"left\", \"right\"]");
    }
  }

  // Added tokens: matched whole in the text, before BPE. Their ids may
  // extend the vocabulary.
  std::vector<std::pair<std::string, int32_t>> added;
  if (root.contains("added_tokens") && !root["added_tokens"].is_null()) {
    const nlohmann::json &tokens = root["added_tokens"];
    if (!tokens.is_array())
      unsupported(path, "added_tokens", "must be an array");
    for (size_t i = 0; i < tokens.size(); ++i) {
      const nlohmann::json &token = tokens[i];
      const std::string field = "added_tokens[" + std::to_string(i) + "]";
      if (!token.is_object() || !token.contains("content") ||
          !token["content"].is_string() ||
          token["content"].get<std::string>().empty() ||
          !token.contains("id") || !token["id"].is_number_integer() ||
          token["id"].get<int64_t>() < 0 ||
          token["id"].get<int64_t>() > std::numeric_limits<int32_t>::max())
        unsupported(path, field, "needs a non-empty content and an id");
      for (const char *option : {"single_word", "lstrip", "rstrip"})
        if (!off(token, option))
          unsupported(path, field + "." + option,
                      "is set; only plain added tokens are read so far");
      added.emplace_back(token["content"].get<std::string>(),
                         int32_t(token["id"].get<int64_t>()));
    }
  }
  for (const auto &[content, id] : added) {
    auto same = std::find_if(entries.begin(), entries.end(),
                             [&](const auto &e) { return e.second == id; });
    if (same == entries.end())
      entries.emplace_back(content, id); // an id beyond the model's
    else if (same->first != content)
      unsupported(path, "added token " + quote(content),
                  "has id " + std::to_string(id) +
                      ", which model.vocab "
                      "gives to " +
                      quote(same->first));
  }
  std::unique_ptr<Impl> impl =
      BpeBuilder::build(std::move(entries), rules, path, sentencePiece);
  if (pattern)
    impl->pieceEndAt = pattern;
  if (ignoreMerges)
    for (const auto &[token, id] : vocab.items()) {
      (void)token;
      const int32_t tokenId = int32_t(id.get<int64_t>());
      impl->wholePieces.emplace(impl->idBytes[tokenId], tokenId);
    }
  BpeBuilder::readTemplate(path, root, *impl);
  impl->stripLeadingSpaces = stripLeadingSpaces;
  impl->addedTokens = std::move(added);
  // Two tokens of one length cannot both match at one position: the order
  // among them does not matter.
  std::sort(impl->addedTokens.begin(), impl->addedTokens.end(),
            [](const auto &a, const auto &b) {
              return a.first.size() > b.first.size();
            });
  // An added token spells its own text.
  for (const auto &[content, id] : impl->addedTokens)
    impl->idBytes[id] = content;
  return BpeTokenizer(std::move(impl));
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> tokens;
  tokens.reserve(text.size() / 3);
  tokens.insert(tokens.end(), impl_->prefixIds.begin(), impl_->prefixIds.end());
  auto encodeText = [&](std::string_view part) {
    if (impl_->sentencePiece)
      return impl_->encodeSentencePiece(part, tokens);
    for (size_t i = 0; i < part.size();) {
      size_t end = impl_->pieceEndAt(part, i);
      impl_->encodePiece(part.substr(i, end - i), tokens);
      i = end;
    }
  };
  // Added tokens split the text first: the leftmost occurrence of any, the
  // longest at that position (HuggingFace's added vocabulary).
  size_t done = 0;
  while (!impl_->addedTokens.empty()) {
    size_t at = std::string_view::npos;
    const std::pair<std::string, int32_t> *found = nullptr;
    for (const auto &token : impl_->addedTokens) {
      size_t where = text.find(token.first, done);
      if (where < at) { // longest first: a tie keeps the longer
        at = where;
        found = &token;
      }
    }
    if (!found)
      break;
    encodeText(text.substr(done, at - done));
    tokens.push_back(found->second);
    done = at + found->first.size();
  }
  encodeText(text.substr(done));
  tokens.insert(tokens.end(), impl_->suffixIds.begin(), impl_->suffixIds.end());
  return tokens;
}

std::string BpeTokenizer::decode(std::span<const int32_t> tokens) const {
  std::string out;
  for (int32_t id : tokens) {
    if (id < 0 || size_t(id) >= impl_->hasId.size() || !impl_->hasId[id])
      throw std::out_of_range("token id " + std::to_string(id) +
                              " is not in the vocabulary");
    out += impl_->idBytes[id];
  }
  size_t spaces = 0;
  while (int64_t(spaces) < impl_->stripLeadingSpaces && spaces < out.size() &&
         out[spaces] == ' ')
    ++spaces;
  return out.erase(0, spaces);
}

int64_t BpeTokenizer::vocabSize() const {
  return static_cast<int64_t>(impl_->hasId.size());
}

} // namespace tpc::runtime
