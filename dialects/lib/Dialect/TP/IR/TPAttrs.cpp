//===- TPAttrs.cpp - tp dialect attributes --------------------------------===//

#include "tpc/Dialect/TP/IR/TPAttrs.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "tpc/Dialect/TP/IR/TPDialect.h"
#include "tpc/Dialect/TP/IR/TPOps.h"
#include "llvm/ADT/SmallBitVector.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::tp;

#define GET_ATTRDEF_CLASSES
#include "tpc/Dialect/TP/IR/TPAttrs.cpp.inc"

void TPDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "tpc/Dialect/TP/IR/TPAttrs.cpp.inc"
      >();
}

DistAttr mlir::tp::getDistLayout(Type type) {
  auto tensorType = dyn_cast<RankedTensorType>(type);
  return tensorType ? dyn_cast_or_null<DistAttr>(tensorType.getEncoding())
                    : DistAttr();
}

bool mlir::tp::isSplitLayout(Type type) {
  DistAttr dist = getDistLayout(type);
  return dist && llvm::any_of(dist.getSplit(), [](DenseI64ArrayAttr axes) {
           return !axes.empty();
         });
}

bool mlir::tp::isPartialLayout(Type type) {
  DistAttr dist = getDistLayout(type);
  return dist && !dist.getPartial().empty();
}

SmallVector<int64_t> mlir::tp::splitAxesOf(Type type, int64_t dim) {
  DistAttr dist = getDistLayout(type);
  return dist ? SmallVector<int64_t>(dist.getSplitAxes(dim))
              : SmallVector<int64_t>();
}

Layout Layout::replicated(int64_t rank) {
  Layout layout;
  layout.split.resize(rank);
  return layout;
}

bool Layout::isReplicated() const {
  return partial.empty() &&
         llvm::all_of(split, [](const auto &axes) { return axes.empty(); });
}

SmallVector<int64_t> Layout::usedAxes() const {
  SmallVector<int64_t> axes(partial.begin(), partial.end());
  for (const auto &dimAxes : split)
    axes.append(dimAxes.begin(), dimAxes.end());
  return axes;
}

Layout mlir::tp::getLayout(RankedTensorType type) {
  Layout layout = Layout::replicated(type.getRank());
  if (DistAttr dist = getDistLayout(type)) {
    for (int64_t d = 0; d < type.getRank(); ++d)
      layout.split[d].assign(dist.getSplitAxes(d).begin(),
                             dist.getSplitAxes(d).end());
    layout.partial.assign(dist.getPartial().asArrayRef().begin(),
                          dist.getPartial().asArrayRef().end());
  }
  return layout;
}

RankedTensorType mlir::tp::withLayout(RankedTensorType type,
                                      FlatSymbolRefAttr grid,
                                      const Layout &layout) {
  if (layout.isReplicated())
    return RankedTensorType::get(type.getShape(), type.getElementType());
  MLIRContext *ctx = type.getContext();
  SmallVector<DenseI64ArrayAttr> split;
  for (const auto &axes : layout.split)
    split.push_back(DenseI64ArrayAttr::get(ctx, axes));
  auto dist = DistAttr::get(ctx, grid, split,
                            DenseI64ArrayAttr::get(ctx, layout.partial), {});
  return RankedTensorType::get(type.getShape(), type.getElementType(), dist);
}

bool DistAttr::isReplicated() const {
  return getPartial().empty() &&
         llvm::all_of(getSplit(),
                      [](DenseI64ArrayAttr axes) { return axes.empty(); });
}

//===----------------------------------------------------------------------===//
// Syntax: #tp.dist<@g, [[0], []] (, partial = [1])? (, sizes = [[3, 5], []])?>
//===----------------------------------------------------------------------===//

static ParseResult parseIntList(AsmParser &parser,
                                SmallVectorImpl<int64_t> &out) {
  return parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&]() {
    int64_t value;
    if (parser.parseInteger(value))
      return failure();
    out.push_back(value);
    return success();
  });
}

static ParseResult parseNestedIntList(AsmParser &parser,
                                      SmallVectorImpl<DenseI64ArrayAttr> &out) {
  return parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&]() {
    SmallVector<int64_t> inner;
    if (parseIntList(parser, inner))
      return failure();
    out.push_back(DenseI64ArrayAttr::get(parser.getContext(), inner));
    return success();
  });
}

Attribute DistAttr::parse(AsmParser &parser, Type) {
  FlatSymbolRefAttr grid;
  SmallVector<DenseI64ArrayAttr> split, sizes;
  SmallVector<int64_t> partial;
  if (parser.parseLess() || parser.parseAttribute(grid) ||
      parser.parseComma() || parseNestedIntList(parser, split))
    return {};
  while (succeeded(parser.parseOptionalComma())) {
    StringRef keyword;
    llvm::SMLoc loc = parser.getCurrentLocation();
    if (parser.parseKeyword(&keyword) || parser.parseEqual())
      return {};
    if (keyword == "partial" && partial.empty()) {
      if (parseIntList(parser, partial))
        return {};
    } else if (keyword == "sizes" && sizes.empty()) {
      if (parseNestedIntList(parser, sizes))
        return {};
    } else {
      parser.emitError(loc)
          << "expected 'partial' or 'sizes' (once each), got '" << keyword
          << "'";
      return {};
    }
  }
  if (parser.parseGreater())
    return {};
  // An all-even `sizes` list says nothing: drop it so equal layouts are equal.
  if (llvm::all_of(sizes, [](DenseI64ArrayAttr s) { return s.empty(); }))
    sizes.clear();
  return parser.getChecked<DistAttr>(
      parser.getContext(), grid, split,
      DenseI64ArrayAttr::get(parser.getContext(), partial), sizes);
}

static void printIntList(AsmPrinter &printer, ArrayRef<int64_t> values) {
  printer << '[';
  llvm::interleaveComma(values, printer);
  printer << ']';
}

static void printNestedIntList(AsmPrinter &printer,
                               ArrayRef<DenseI64ArrayAttr> lists) {
  printer << '[';
  llvm::interleaveComma(lists, printer, [&](DenseI64ArrayAttr list) {
    printIntList(printer, list.asArrayRef());
  });
  printer << ']';
}

void DistAttr::print(AsmPrinter &printer) const {
  printer << '<';
  printer.printAttribute(getGrid());
  printer << ", ";
  printNestedIntList(printer, getSplit());
  if (!getPartial().empty()) {
    printer << ", partial = ";
    printIntList(printer, getPartial().asArrayRef());
  }
  if (!getSizes().empty()) {
    printer << ", sizes = ";
    printNestedIntList(printer, getSizes());
  }
  printer << '>';
}

//===----------------------------------------------------------------------===//
// Verification
//===----------------------------------------------------------------------===//

LogicalResult DistAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               FlatSymbolRefAttr grid,
                               ArrayRef<DenseI64ArrayAttr> split,
                               DenseI64ArrayAttr partial,
                               ArrayRef<DenseI64ArrayAttr> sizes) {
  if (!grid)
    return emitError() << "#tp.dist needs a grid symbol";
  llvm::SmallDenseSet<int64_t> seen;
  auto checkAxis = [&](int64_t axis) -> LogicalResult {
    if (axis < 0)
      return emitError() << "#tp.dist grid axis " << axis << " is negative";
    if (!seen.insert(axis).second)
      return emitError() << "#tp.dist uses grid axis " << axis << " twice";
    return success();
  };
  for (DenseI64ArrayAttr axes : split)
    for (int64_t axis : axes.asArrayRef())
      if (failed(checkAxis(axis)))
        return failure();
  for (int64_t axis : partial.asArrayRef())
    if (failed(checkAxis(axis)))
      return failure();
  if (sizes.empty())
    return success();
  if (sizes.size() != split.size())
    return emitError() << "#tp.dist has sizes for " << sizes.size()
                       << " dimensions but splits " << split.size();
  for (auto [dim, dimSizes] : llvm::enumerate(sizes)) {
    if (dimSizes.empty())
      continue;
    if (split[dim].empty())
      return emitError() << "#tp.dist gives sizes for dimension " << dim
                         << ", which no grid axis splits";
    if (llvm::any_of(dimSizes.asArrayRef(), [](int64_t s) { return s < 0; }))
      return emitError() << "#tp.dist has a negative size in dimension " << dim;
  }
  return success();
}

LogicalResult
DistAttr::verifyEncoding(ArrayRef<int64_t> shape, Type,
                         function_ref<InFlightDiagnostic()> emitError) const {
  if (getSplit().size() != shape.size())
    return emitError() << "#tp.dist describes " << getSplit().size()
                       << " dimensions but the tensor has rank "
                       << shape.size();
  for (auto [dim, size] : llvm::enumerate(shape)) {
    ArrayRef<int64_t> dimSizes = getDimSizes(dim);
    if (dimSizes.empty() || ShapedType::isDynamic(size))
      continue;
    int64_t sum = 0;
    for (int64_t s : dimSizes)
      sum += s;
    if (sum != size)
      return emitError() << "#tp.dist sizes of dimension " << dim
                         << " add up to " << sum << ", not " << size;
  }
  return success();
}

LogicalResult
mlir::tp::verifyDistLayout(RankedTensorType type, GridOp grid,
                           function_ref<InFlightDiagnostic()> emitError,
                           StringRef what) {
  DistAttr dist = getDistLayout(type);
  ArrayRef<int64_t> gridShape = grid.getShape();
  auto checkAxis = [&](int64_t axis) -> LogicalResult {
    if (axis >= static_cast<int64_t>(gridShape.size()))
      return emitError() << what << " " << type << " names grid axis " << axis
                         << ", but grid @" << grid.getSymName() << " has "
                         << gridShape.size() << " axes";
    return success();
  };
  for (int64_t axis : dist.getPartial().asArrayRef())
    if (failed(checkAxis(axis)))
      return failure();
  for (int64_t dim = 0, rank = type.getRank(); dim < rank; ++dim) {
    int64_t shards = 1;
    for (int64_t axis : dist.getSplitAxes(dim)) {
      if (failed(checkAxis(axis)))
        return failure();
      shards *= gridShape[axis];
    }
    ArrayRef<int64_t> dimSizes = dist.getDimSizes(dim);
    if (!dimSizes.empty()) {
      if (static_cast<int64_t>(dimSizes.size()) != shards)
        return emitError() << what << " " << type << " gives "
                           << dimSizes.size() << " sizes for dimension " << dim
                           << ", which is split into " << shards << " shards";
      continue;
    }
    int64_t size = type.getDimSize(dim);
    if (!ShapedType::isDynamic(size) && size % shards != 0)
      return emitError() << what << " " << type << ": dimension " << dim
                         << " of size " << size
                         << " cannot be split evenly into " << shards
                         << " shards (give sizes for an uneven split)";
  }
  return success();
}

static LogicalResult verifyDistLayoutsOf(Operation *op, TypeRange types,
                                         StringRef kind,
                                         SymbolTableCollection &symbolTables) {
  for (auto [idx, type] : llvm::enumerate(types)) {
    DistAttr dist = getDistLayout(type);
    if (!dist)
      continue;
    auto grid =
        symbolTables.lookupNearestSymbolFrom<GridOp>(op, dist.getGrid());
    if (!grid)
      return op->emitOpError()
             << kind << " #" << idx << " " << type << " refers to "
             << dist.getGrid() << ", which is not a tp.grid";
    std::string what = (kind + " #" + Twine(idx)).str();
    if (failed(verifyDistLayout(
            cast<RankedTensorType>(type), grid,
            [&]() { return op->emitOpError(); }, what)))
      return failure();
  }
  return success();
}

LogicalResult mlir::tp::verifyDistLayouts(Operation *op,
                                          SymbolTableCollection &symbolTables) {
  if (auto func = dyn_cast<FunctionOpInterface>(op))
    return failure(failed(verifyDistLayoutsOf(op, func.getArgumentTypes(),
                                              "argument", symbolTables)) ||
                   failed(verifyDistLayoutsOf(op, func.getResultTypes(),
                                              "result", symbolTables)));
  return failure(failed(verifyDistLayoutsOf(op, op->getOperandTypes(),
                                            "operand", symbolTables)) ||
                 failed(verifyDistLayoutsOf(op, op->getResultTypes(), "result",
                                            symbolTables)));
}
