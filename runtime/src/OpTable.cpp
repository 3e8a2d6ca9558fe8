#include "tpc/runtime/OpTable.h"

#include "tpc/runtime/OpShapes.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

namespace tpc::runtime {

using plan::OpKind;
using DT = plan::DType;

namespace {

/// NumPy broadcasting of two shapes; `ok` is false if they do not broadcast.
std::vector<int64_t> broadcast(const std::vector<int64_t> &a,
                               const std::vector<int64_t> &b, bool &ok) {
  size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank);
  ok = true;
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1)
      ok = false;
    out[rank - 1 - i] = std::max(da, db);
  }
  return out;
}

int64_t product(const std::vector<int64_t> &shape) {
  int64_t p = 1;
  for (int64_t d : shape)
    p *= d;
  return p;
}

//===----------------------------------------------------------------------===//
// Forward ops
//===----------------------------------------------------------------------===//

/// A cached table's slot map (the optional third operand): one slot per
/// row of the block, which the cache of `table[0]` rows cannot exceed.
void checkSlotMap(const StepCheck &c, const std::vector<int64_t> &table) {
  if (c.operands.size() < 3)
    return;
  c.requireRank(c.operands[2], 1, "slot_map");
  if (c.operands[2].shape.size() != 1 || c.operands[2].shape[0] < table[0])
    c.fail("slot_map " + shapeString(c.operands[2].shape) +
           " must list the block's rows, at least the cache's " +
           std::to_string(table[0]));
}

void checkEmbedding(const StepCheck &c) {
  const auto &table = c.operands[0].shape;
  if (table.size() != 2)
    c.fail("table must be [vocab, hidden]");
  c.gridAxes(/*allowNone=*/true, "vocabulary grid axes");
  checkSlotMap(c, table);
  std::vector<int64_t> shape = c.operands[1].shape;
  shape.push_back(table[1]);
  c.requireShape(c.results[0], shape, "result");
}

void checkMatmul(const StepCheck &c) {
  c.requireRank(c.operands[0], 2, "lhs");
  c.requireRank(c.operands[1], 2, "rhs");
  const auto &l = c.operands[0].shape, &r = c.operands[1].shape;
  const ProductSizes p =
      productSizes(l, c.step.transpose_lhs(), r, c.step.transpose_rhs());
  const int64_t m = p.m, n = p.n;
  c.requireFiniteF32(c.step.alpha(), "alpha");
  if (p.k != p.rhsK)
    c.fail("contraction sizes differ (" + shapeString(l) + " x " +
           shapeString(r) + ")");
  std::vector<int64_t> lb(l.begin(), l.end() - 2), rb(r.begin(), r.end() - 2);
  std::vector<int64_t> batch;
  if (lb.empty() || rb.empty()) {
    batch = lb.empty() ? rb : lb;
  } else {
    bool ok = lb.size() == rb.size();
    if (ok)
      batch = broadcast(lb, rb, ok);
    if (!ok)
      c.fail("batch dims of " + shapeString(l) + " and " + shapeString(r) +
             " do not broadcast");
  }
  batch.push_back(m);
  batch.push_back(n);
  c.requireShape(c.results[0], batch, "result");
}

void checkBinary(const StepCheck &c) {
  bool ok;
  std::vector<int64_t> shape =
      broadcast(c.operands[0].shape, c.operands[1].shape, ok);
  if (!ok)
    c.fail(shapeString(c.operands[0].shape) + " and " +
           shapeString(c.operands[1].shape) + " do not broadcast");
  c.requireShape(c.results[0], shape, "result");
}

void checkScale(const StepCheck &c) {
  c.requireFiniteF32(c.step.factor(), "factor");
  c.requireShape(c.results[0], c.operands[0].shape, "result");
}

void checkElementwise(const StepCheck &c) {
  c.requireShape(c.results[0], c.operands[0].shape, "result");
}

/// LayerNorm (input, gamma, beta) and RmsNorm (input, gamma).
void checkNorm(const StepCheck &c) {
  c.requireRank(c.operands[0], 1, "input");
  std::vector<int64_t> features = {c.operands[0].shape.back()};
  for (size_t i = 1; i < c.operands.size(); ++i)
    c.requireShape(c.operands[i], features, "gamma/beta");
  c.requireShape(c.results[0], c.operands[0].shape, "result");
  c.requirePositive(c.step.epsilon(), "epsilon");
  c.gridAxes(/*allowNone=*/true, "feature grid axes");
}

void checkSoftmax(const StepCheck &c) {
  c.requireRank(c.operands[0], c.step.causal() ? 2 : 1, "input");
  const auto &s = c.operands[0].shape;
  if (c.step.causal() && s[s.size() - 2] != s.back())
    c.fail("causal softmax needs square [queries, keys], got " +
           shapeString(s));
  c.requireShape(c.results[0], s, "result");
}

/// Attention's query [b..., Sq, D], key [kb..., Sk, D] and value [kb..., Sk,
/// Dv] (operands `first`..`first + 2`), each kb equal to b or 1; returns
/// the result shape [b..., Sq, Dv].
std::vector<int64_t> checkAttentionOperands(const StepCheck &c) {
  const size_t first = attentionQueryOperand(c.step.kind());
  const TensorType &q = c.operands[first], &k = c.operands[first + 1],
                   &v = c.operands[first + 2];
  c.requireRank(q, 2, "query");
  if (k.shape.size() != q.shape.size() || v.shape.size() != q.shape.size())
    c.fail("query " + shapeString(q.shape) + ", key " + shapeString(k.shape) +
           " and value " + shapeString(v.shape) + " differ in rank");
  const size_t rank = q.shape.size();
  for (size_t d = 0; d + 2 < rank; ++d)
    if (k.shape[d] != q.shape[d] && k.shape[d] != 1)
      c.fail("key " + shapeString(k.shape) + " does not broadcast over query " +
             shapeString(q.shape));
  if (!std::equal(k.shape.begin(), k.shape.end() - 1, v.shape.begin()))
    c.fail("value " + shapeString(v.shape) + " does not match key " +
           shapeString(k.shape));
  const AttentionSizes s = attentionSizes(q.shape, k.shape, v.shape);
  if (s.keyHeadDim != s.headDim)
    c.fail("query " + shapeString(q.shape) + " and key " +
           shapeString(k.shape) + " differ in features");
  if (c.step.causal() && s.queries != s.keys)
    c.fail("causal attention needs as many queries as keys, got " +
           shapeString(q.shape) + " and " + shapeString(k.shape));
  c.requireFiniteF32(c.step.alpha(), "alpha");
  std::vector<int64_t> result(s.batch.begin(), s.batch.end());
  result.push_back(s.queries);
  result.push_back(s.valueDim);
  return result;
}

/// A generation step's positions (operand `index`): [b0, S] for an input
/// [b0, ..., S, D].
void checkPositions(const StepCheck &c, size_t index,
                    const std::vector<int64_t> &input, const char *name) {
  if (input.size() < 3)
    c.fail(std::string(name) + " " + shapeString(input) +
           " needs rank 3 or more to take positions");
  c.requireShape(c.operands[index], {input.front(), input[input.size() - 2]},
                 "positions");
}

/// Attention: (query, key, value[, positions]) -> (result, logsumexp).
void checkAttention(const StepCheck &c) {
  std::vector<int64_t> result = checkAttentionOperands(c);
  if (c.operands.size() == 4) {
    if (c.step.causal())
      c.fail("attention takes either causal or positions, not both");
    checkPositions(c, 3, c.operands[0].shape, "query");
  }
  c.requireShape(c.results[0], result, "result");
  result.pop_back();
  c.requireShape(c.results[1], result, "logsumexp");
}

/// AttentionGrad: (result_grad, query, key, value, result, logsumexp) ->
/// (query_grad, key_grad, value_grad).
void checkAttentionGrad(const StepCheck &c) {
  std::vector<int64_t> result = checkAttentionOperands(c);
  c.requireShape(c.operands[0], result, "result_grad");
  c.requireShape(c.operands[4], result, "result");
  result.pop_back();
  c.requireShape(c.operands[5], result, "logsumexp");
  for (size_t i = 0; i < 3; ++i)
    c.requireShape(c.results[i], c.operands[1 + i].shape,
                   i == 0 ? "query_grad"
                          : (i == 1 ? "key_grad" : "value_grad"));
}

/// CacheWrite: (cache [b0, h..., S, D], update [b0, h..., T, D], positions
/// [b0, T]) -> the cache.
void checkCacheWrite(const StepCheck &c) {
  const std::vector<int64_t> &cache = c.operands[0].shape;
  if (cache.size() < 3)
    c.fail("cache " + shapeString(cache) + " needs rank 3 or more");
  std::vector<int64_t> update = cache;
  update[update.size() - 2] = c.operands[1].shape.size() == cache.size()
                                  ? c.operands[1].shape[cache.size() - 2]
                                  : -1;
  c.requireShape(c.operands[1], update, "update");
  checkPositions(c, 2, update, "update");
  c.requireShape(c.results[0], cache, "result");
}

void checkRotary(const StepCheck &c) {
  c.requireRank(c.operands[0], 2, "input");
  if (c.operands[0].shape.back() % 2 != 0)
    c.fail("rotary needs an even head dimension");
  if (c.operands.size() == 2)
    checkPositions(c, 1, c.operands[0].shape, "input");
  c.requirePositive(c.step.theta(), "theta");
  c.requireShape(c.results[0], c.operands[0].shape, "result");
}

/// The loss, and its vocabulary-parallel form when the step names grid axes.
void checkCrossEntropy(const StepCheck &c) {
  c.requireRank(c.operands[0], 1, "logits");
  const auto &logits = c.operands[0].shape;
  c.requireShape(c.operands[1], {logits.begin(), logits.end() - 1}, "targets");
  c.requireScalar(c.results[0], "loss");
  c.gridAxes(/*allowNone=*/true, "vocabulary grid axes");
}

//===----------------------------------------------------------------------===//
// Layout ops
//===----------------------------------------------------------------------===//

void checkReshape(const StepCheck &c) {
  if (product(c.operands[0].shape) != product(c.results[0].shape))
    c.fail("reshape changes the element count");
}

void checkTranspose(const StepCheck &c) {
  std::span<const int64_t> perm = c.ints();
  const auto &in = c.operands[0].shape;
  if (perm.size() != in.size())
    c.fail("permutation length differs from the rank");
  std::vector<bool> seen(perm.size(), false);
  std::vector<int64_t> shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= int64_t(perm.size()) || seen[p])
      c.fail("invalid permutation");
    seen[p] = true;
    shape.push_back(in[p]);
  }
  c.requireShape(c.results[0], shape, "result");
}

/// Slice reads a window of its operand; pad writes its operand as a window
/// of its result. The window lies at the step's offsets.
void checkWindow(const StepCheck &c, const std::vector<int64_t> &whole,
                 const std::vector<int64_t> &window, const char *what) {
  std::span<const int64_t> offsets = c.ints();
  if (offsets.size() != whole.size() || window.size() != whole.size())
    c.fail(std::string(what) + " offsets, input and result ranks differ");
  for (size_t d = 0; d < whole.size(); ++d)
    if (offsets[d] < 0 || offsets[d] > whole[d] ||
        window[d] > whole[d] - offsets[d])
      c.fail(std::string(what) + " of dimension " + std::to_string(d) +
             " is outside the " +
             (what == std::string("pad") ? "result" : "input"));
}

void checkSlice(const StepCheck &c) {
  checkWindow(c, c.operands[0].shape, c.results[0].shape, "slice");
}

void checkPad(const StepCheck &c) {
  checkWindow(c, c.results[0].shape, c.operands[0].shape, "pad");
}

void checkReduce(const StepCheck &c) {
  std::span<const int64_t> dims = c.ints();
  std::vector<int64_t> shape;
  const auto &in = c.operands[0].shape;
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] < 0 || dims[i] >= int64_t(in.size()) ||
        (i && dims[i] <= dims[i - 1]))
      c.fail("invalid reduced dimensions");
  for (size_t d = 0; d < in.size(); ++d)
    if (!std::count(dims.begin(), dims.end(), int64_t(d)))
      shape.push_back(in[d]);
  c.requireShape(c.results[0], shape, "result");
}

void checkConstant(const StepCheck &c) {
  c.requireFiniteF32(c.step.value(), "the constant");
}

//===----------------------------------------------------------------------===//
// Backward ops
//===----------------------------------------------------------------------===//

void checkEmbeddingGrad(const StepCheck &c) {
  const auto &table = c.results[0].shape;
  if (table.size() != 2)
    c.fail("table_grad must be [vocab, hidden]");
  c.gridAxes(/*allowNone=*/true, "vocabulary grid axes");
  checkSlotMap(c, table);
  std::vector<int64_t> shape = c.operands[1].shape;
  shape.push_back(table[1]);
  c.requireShape(c.operands[0], shape, "result_grad");
}

/// GeluGrad, SiluGrad (result_grad, input) and SoftmaxGrad (result_grad,
/// result).
void checkElementwiseGrad(const StepCheck &c) {
  c.requireShape(c.operands[0], c.operands[1].shape, "result_grad");
  c.requireShape(c.results[0], c.operands[1].shape, "input_grad");
}

/// LayerNormGrad (-> input, gamma and beta grads) and RmsNormGrad (-> input
/// and gamma grads), from (result_grad, input, gamma[, residual_grad]).
void checkNormGrad(const StepCheck &c) {
  const auto &input = c.operands[1].shape;
  c.requireRank(c.operands[1], 1, "input");
  std::vector<int64_t> features = {input.back()};
  c.requireShape(c.operands[0], input, "result_grad");
  c.requireShape(c.operands[2], features, "gamma");
  if (c.operands.size() == 4) {
    if (c.plan.version_minor() < kPlanBf16Minor)
      c.fail("a residual gradient operand needs plan format 1." +
             std::to_string(kPlanBf16Minor));
    c.requireShape(c.operands[3], input, "residual_grad");
  }
  c.requireShape(c.results[0], input, "input_grad");
  for (size_t r = 1; r < c.results.size(); ++r)
    c.requireShape(c.results[r], features, "gamma/beta grad");
  c.requirePositive(c.step.epsilon(), "epsilon");
  c.gridAxes(/*allowNone=*/true, "feature grid axes");
}

/// AddLayerNorm (input, residual, gamma, beta) and AddRmsNorm (input,
/// residual, gamma) -> (sum, result).
void checkAddNorm(const StepCheck &c) {
  const auto &input = c.operands[0].shape;
  c.requireRank(c.operands[0], 1, "input");
  std::vector<int64_t> features = {input.back()};
  c.requireShape(c.operands[1], input, "residual");
  for (size_t i = 2; i < c.operands.size(); ++i)
    c.requireShape(c.operands[i], features, "gamma/beta");
  c.requireShape(c.results[0], input, "sum");
  c.requireShape(c.results[1], input, "result");
  c.requirePositive(c.step.epsilon(), "epsilon");
  c.gridAxes(/*allowNone=*/true, "feature grid axes");
}

/// Swiglu (gate, up) -> result and SwigluGrad (result_grad, gate, up) ->
/// (gate_grad, up_grad): every tensor of one shape.
void checkSameShapes(const StepCheck &c) {
  const auto &shape = c.operands[0].shape;
  for (size_t i = 1; i < c.operands.size(); ++i)
    c.requireShape(c.operands[i], shape, "operand");
  for (const TensorType &result : c.results)
    c.requireShape(result, shape, "result");
}

/// The sizes of `lhs [b..., M, K] x rhs` with a 2-D rhs (`[K, N]`, or
/// `[N, K]` with transpose_rhs): the result shape [b..., M, N].
std::vector<int64_t> productShape(const StepCheck &c, const TensorType &lhs,
                                  const TensorType &rhs) {
  c.requireRank(lhs, 2, "lhs");
  if (rhs.shape.size() != 2)
    c.fail("the weight " + shapeString(rhs.shape) + " must be a matrix");
  const bool tr = c.step.transpose_rhs();
  const int64_t k = lhs.shape.back(), n = rhs.shape[tr ? 0 : 1];
  if (rhs.shape[tr ? 1 : 0] != k)
    c.fail("contraction sizes differ (" + shapeString(lhs.shape) + " x " +
           shapeString(rhs.shape) + ")");
  std::vector<int64_t> out(lhs.shape.begin(), lhs.shape.end() - 1);
  out.push_back(n);
  return out;
}

/// Linear (input, weight, bias) -> result [, preactivation, only with gelu].
void checkLinear(const StepCheck &c) {
  std::vector<int64_t> out = productShape(c, c.operands[0], c.operands[1]);
  c.requireShape(c.operands[2], {out.back()}, "bias");
  c.requireShape(c.results[0], out, "result");
  if (!c.step.gelu() && c.results.size() == 2)
    c.fail("only a GELU linear has a preactivation result");
  if (c.results.size() == 2)
    c.requireShape(c.results[1], out, "preactivation");
}

/// LinearGeluGrad (lhs, rhs, preactivation) -> (preactivation_grad,
/// bias_grad).
void checkLinearGeluGrad(const StepCheck &c) {
  std::vector<int64_t> out = productShape(c, c.operands[0], c.operands[1]);
  c.requireShape(c.operands[2], out, "preactivation");
  c.requireShape(c.results[0], out, "preactivation_grad");
  c.requireShape(c.results[1], {out.back()}, "bias_grad");
}

/// LinearCrossEntropy (input, weight, targets) -> loss, and its gradient
/// (..., loss_grad) -> (input_grad, weight_grad).
void checkLinearHead(const StepCheck &c) {
  const TensorType &input = c.operands[0], &weight = c.operands[1];
  c.requireRank(input, 1, "input");
  if (weight.shape.size() != 2)
    c.fail("the weight " + shapeString(weight.shape) + " must be a matrix");
  const bool tr = c.step.transpose_rhs();
  if (weight.shape[tr ? 1 : 0] != input.shape.back())
    c.fail("input " + shapeString(input.shape) + " and weight " +
           shapeString(weight.shape) + " differ in the hidden size");
  c.requireShape(c.operands[2], {input.shape.begin(), input.shape.end() - 1},
                 "targets");
  if (c.step.chunk() < 1)
    c.fail("chunk must be positive");
  c.gridAxes(/*allowNone=*/true, "vocabulary grid axes");
  if (c.operands.size() == 3) {
    c.requireScalar(c.results[0], "loss");
    return;
  }
  c.requireScalar(c.operands[3], "loss_grad");
  c.requireShape(c.results[0], input.shape, "input_grad");
  c.requireShape(c.results[1], weight.shape, "weight_grad");
}

void checkCrossEntropyGrad(const StepCheck &c) {
  c.requireRank(c.operands[0], 1, "logits");
  const auto &logits = c.operands[0].shape;
  c.requireShape(c.operands[1], {logits.begin(), logits.end() - 1}, "targets");
  c.requireScalar(c.operands[2], "loss_grad");
  c.requireShape(c.results[0], logits, "logits_grad");
  c.gridAxes(/*allowNone=*/true, "vocabulary grid axes");
}

//===----------------------------------------------------------------------===//
// Optimizer ops
//===----------------------------------------------------------------------===//

void checkNormSquared(const StepCheck &c) {
  c.requireScalar(c.results[0], "result");
}

/// LrSchedule (step, hyperparameters) and ClipScale (norm squared,
/// hyperparameters).
void checkHyperparameterScalar(const StepCheck &c) {
  c.requireScalar(c.operands[0], "scalar operand");
  c.requireShape(c.operands[1], {5}, "hyperparameters");
  c.requireScalar(c.results[0], "result");
}

/// AdamW (param, grad, exp_avg, exp_avg_sq, lr, step, grad_scale) and
/// AdamWRows, which lists the rows to update after the moments: the
/// gradient, moments and results shaped as the parameter, the settings in
/// their ranges.
void checkAdamWSteps(const StepCheck &c, bool listsRows) {
  const auto &param = c.operands[0].shape;
  if (listsRows && param.empty())
    c.fail("param must have rows");
  for (size_t i : {1, 2, 3})
    c.requireShape(c.operands[i], param, "grad/moment");
  if (listsRows && c.operands[4].shape.size() != 1)
    c.fail("rows must be a list [count]");
  const size_t scalars = listsRows ? 5 : 4;
  for (size_t i : {scalars, scalars + 1, scalars + 2})
    c.requireScalar(c.operands[i], "lr/step/grad_scale");
  for (const TensorType &type : c.results)
    c.requireShape(type, param, "result");
  const plan::Step &s = c.step;
  if (!(s.beta1() >= 0.0 && s.beta1() < 1.0 && s.beta2() >= 0.0 &&
        s.beta2() < 1.0))
    c.fail("betas must be in [0, 1)");
  if (!(s.weight_decay() >= 0.0 && s.weight_decay() < 1e6))
    c.fail("weight_decay must be >= 0");
  c.requirePositive(s.epsilon(), "epsilon");
}
void checkAdamW(const StepCheck &c) { checkAdamWSteps(c, false); }
void checkAdamWRows(const StepCheck &c) { checkAdamWSteps(c, true); }

void checkNormSquaredRows(const StepCheck &c) {
  if (c.operands[0].shape.empty())
    c.fail("input must have rows");
  if (c.operands[1].shape.size() != 1)
    c.fail("rows must be a list [count]");
  c.requireScalar(c.results[0], "result");
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

/// The group is the step's grid axes; its size scales the dims exchanged.
void checkCollective(const StepCheck &c) {
  const int64_t n = c.gridAxes(/*allowNone=*/false, "grid axes");
  const auto &in = c.operands[0].shape;
  const int64_t rank = int64_t(in.size());
  auto checkDim = [&](int64_t d) {
    if (d < 0 || d >= rank)
      c.fail("dimension " + std::to_string(d) + " is out of range");
  };
  std::vector<int64_t> expected = in;
  auto divide = [&](int64_t d) {
    if (expected[d] % n != 0)
      c.fail("dimension " + std::to_string(d) + " of " + shapeString(in) +
             " does not divide among " + std::to_string(n) + " ranks");
    expected[d] /= n;
  };
  switch (c.step.kind()) {
  case OpKind::AllGather:
    checkDim(c.step.dim());
    expected[c.step.dim()] *= n;
    break;
  case OpKind::ReduceScatter:
  case OpKind::LocalSplit:
    checkDim(c.step.dim());
    divide(c.step.dim());
    break;
  case OpKind::RingSlice:
    checkDim(c.step.dim());
    divide(c.step.dim());
    break;
  case OpKind::AllToAll:
    checkDim(c.step.dim());
    checkDim(c.step.target_dim());
    if (c.step.dim() == c.step.target_dim())
      c.fail("all-to-all source and target dimensions are the same");
    divide(c.step.target_dim());
    expected[c.step.dim()] *= n;
    break;
  default: // AllReduce and RingShiftStart keep the shape
    break;
  }
  c.requireShape(c.results[0], expected, "result");
  if (c.step.kind() == OpKind::RingSlice && c.step.ring_step() < 0)
    c.fail("ring step " + std::to_string(c.step.ring_step()) + " is negative");
}

/// RingShiftWait: the received block and the block sent, alike.
void checkRingShiftWait(const StepCheck &c) {
  c.requireShape(c.operands[1], c.operands[0].shape, "sent block");
  c.requireShape(c.results[0], c.operands[0].shape, "result");
}

/// RingInsert: (dest, block) -> dest, the block one of n along `dim`.
void checkRingInsert(const StepCheck &c) {
  const int64_t n = c.gridAxes(/*allowNone=*/false, "grid axes");
  const auto &dest = c.operands[0].shape;
  const int64_t dim = c.step.dim();
  if (dim < 0 || dim >= int64_t(dest.size()))
    c.fail("dimension " + std::to_string(dim) + " is out of range");
  if (dest[dim] % n != 0)
    c.fail("dimension " + std::to_string(dim) + " of " + shapeString(dest) +
           " does not divide among " + std::to_string(n) + " ranks");
  if (c.step.ring_step() < 0)
    c.fail("ring step " + std::to_string(c.step.ring_step()) + " is negative");
  // A view of a parameter could be written through otherwise.
  const uint32_t destId = c.step.operands()->Get(0);
  if (c.program.tensors()->Get(destId)->storage() != plan::Storage::Arena)
    c.fail("the destination must be an arena activation");
  std::vector<int64_t> block = dest;
  block[dim] /= n;
  c.requireShape(c.operands[1], block, "block");
  c.requireShape(c.results[0], dest, "result");
}

/// Transfers between pipeline stages: one grid axis, another coordinate on
/// it as the peer, a tag MPI can carry (the loader pairs sends with
/// receives across the stage programs, Plan.cpp).
void checkTransfer(const StepCheck &c) {
  if (c.ints().size() != 1)
    c.fail("a transfer names exactly one grid axis");
  c.gridAxes(/*allowNone=*/false, "grid axis");
  const int64_t axis = c.ints()[0], size = c.plan.grid()->Get(axis);
  if (c.step.peer() < 0 || c.step.peer() >= size)
    c.fail("peer " + std::to_string(c.step.peer()) +
           " is not a coordinate of " + "grid axis " + std::to_string(axis) +
           " (size " + std::to_string(size) + ")");
  if (c.step.tag() < 0 || c.step.tag() > kMaxTransferTag)
    c.fail("tag " + std::to_string(c.step.tag()) + " is outside [0, " +
           std::to_string(kMaxTransferTag) + "]");
}

/// RecvWait: the received value, in its own storage.
void checkRecvWait(const StepCheck &c) {
  c.requireShape(c.results[0], c.operands[0].shape, "result");
}

//===----------------------------------------------------------------------===//
// The table
//===----------------------------------------------------------------------===//

constexpr DT F = DT::F32, I32 = DT::I32, I64 = DT::I64;
constexpr auto kArena = ResultPlacement::Arena;

constexpr OpInfo op(OpKind kind, uint8_t numOperands, uint8_t numResults,
                    void (*check)(const StepCheck &),
                    std::array<DT, kMaxStepOperands> dtypes = {F, F, F, F, F, F,
                                                               F},
                    ResultPlacement placement = kArena,
                    std::array<uint8_t, kMaxStepResults> updated = {}) {
  return OpInfo{kind,      numOperands, numResults, dtypes,
                placement, updated,     check};
}

/// `info` whose last `count` operands may be absent.
constexpr OpInfo withOptionalOperands(OpInfo info, uint8_t count) {
  info.optionalOperands = count;
  return info;
}

/// `info` for a kind whose products may round their operands
/// (Step.precision).
constexpr OpInfo withPrecision(OpInfo info) {
  info.mixedPrecision = true;
  return info;
}

/// `info` whose float operands `stored` (bits) are read as stored, and
/// whose operands `operands` and results `results` (bits) must be f32.
constexpr OpInfo withPrecisions(OpInfo info, uint8_t stored, uint8_t operands,
                                uint8_t results) {
  info.storedOperands = stored;
  info.f32Operands = operands;
  info.f32Results = results;
  return info;
}

/// `info` whose last `count` results may be absent.
constexpr OpInfo withOptionalResults(OpInfo info, uint8_t count) {
  info.optionalResults = count;
  return info;
}

/// `info` for a kind plan format 1.`minor` added.
constexpr OpInfo since(OpInfo info, uint8_t minor) {
  info.sinceMinor = minor;
  return info;
}

/// `info` for a kind whose result has its operand 0's dtype.
constexpr OpInfo keepsDType(OpInfo info) {
  info.resultHasOperandDType = true;
  return info;
}

/// `info` for a kind that may move a block of token ids.
constexpr OpInfo movesIntegers(OpInfo info) {
  info.movesIntegers = true;
  return info;
}

/// `info` for a kind that uses the grid communicator.
constexpr OpInfo onGrid(OpInfo info, GridUse use,
                        AsyncRole role = AsyncRole::None) {
  info.grid = use;
  info.async = role;
  return info;
}
constexpr auto kAlways = GridUse::Always, kWithAxes = GridUse::WhenAxesNamed,
               kPlacement = GridUse::Placement,
               kPlacementWithAxes = GridUse::PlacementWhenAxesNamed;

// In enum order (checked below), so a kind indexes its entry.
constexpr std::array kOps = {
    // (1.14) A cached table's slot map as an optional third operand.
    onGrid(
        withOptionalOperands(withPrecisions(op(OpKind::Embedding, 3, 1,
                                               checkEmbedding, {F, I32, I32}),
                                            /*stored=*/0b1, 0, 0),
                             1),
        kPlacementWithAxes),
    onGrid(withOptionalOperands(op(OpKind::EmbeddingGrad, 3, 1,
                                   checkEmbeddingGrad, {F, I32, I32}),
                                1),
           kPlacementWithAxes),
    withPrecision(op(OpKind::Matmul, 2, 1, checkMatmul)),
    op(OpKind::Add, 2, 1, checkBinary),
    op(OpKind::Sub, 2, 1, checkBinary),
    op(OpKind::Mul, 2, 1, checkBinary),
    op(OpKind::Div, 2, 1, checkBinary),
    op(OpKind::Scale, 1, 1, checkScale),
    op(OpKind::Gelu, 1, 1, checkElementwise),
    op(OpKind::Silu, 1, 1, checkElementwise),
    op(OpKind::GeluGrad, 2, 1, checkElementwiseGrad),
    op(OpKind::SiluGrad, 2, 1, checkElementwiseGrad),
    // The gain and bias are read as stored (f32 masters).
    onGrid(withPrecisions(op(OpKind::LayerNorm, 3, 1, checkNorm), 0b110, 0, 0),
           kWithAxes),
    onGrid(withOptionalOperands(
               withPrecisions(op(OpKind::LayerNormGrad, 4, 3, checkNormGrad),
                              0b100, 0, 0),
               1),
           kWithAxes),
    onGrid(withPrecisions(op(OpKind::RmsNorm, 2, 1, checkNorm), 0b10, 0, 0),
           kWithAxes),
    onGrid(withOptionalOperands(
               withPrecisions(op(OpKind::RmsNormGrad, 4, 2, checkNormGrad),
                              0b100, 0, 0),
               1),
           kWithAxes),
    op(OpKind::Softmax, 1, 1, checkSoftmax),
    op(OpKind::SoftmaxGrad, 2, 1, checkElementwiseGrad),
    withOptionalOperands(op(OpKind::Rotary, 2, 1, checkRotary, {F, I32}), 1),
    keepsDType(op(OpKind::Reshape, 1, 1, checkReshape, {F},
                  ResultPlacement::AliasOperand)),
    keepsDType(op(OpKind::Transpose, 1, 1, checkTranspose)),
    movesIntegers(keepsDType(op(OpKind::Slice, 1, 1, checkSlice))),
    op(OpKind::ReduceSum, 1, 1, checkReduce),
    op(OpKind::ReduceMean, 1, 1, checkReduce),
    onGrid(withPrecisions(
               op(OpKind::CrossEntropy, 2, 1, checkCrossEntropy, {F, I32}), 0,
               0, /*f32 results=*/0b1),
           kWithAxes),
    onGrid(withPrecisions(op(OpKind::CrossEntropyGrad, 3, 1,
                             checkCrossEntropyGrad, {F, I32, F}),
                          0, /*f32 operands=*/0b100, 0),
           kWithAxes),
    // (param, grad, exp_avg, exp_avg_sq, lr, step, grad_scale) -> (param,
    // exp_avg, exp_avg_sq), each result updating its operand in place; all
    // f32 (master weights and their optimizer state).
    withPrecisions(op(OpKind::AdamW, 7, 3, checkAdamW, {F, F, F, F, F, I64, F},
                      ResultPlacement::UpdateInPlace, {0, 2, 3}),
                   0, 0b1011111, 0b111),
    op(OpKind::Constant, 0, 1, checkConstant),
    keepsDType(op(OpKind::Pad, 1, 1, checkPad)),
    withPrecisions(op(OpKind::NormSquared, 1, 1, checkNormSquared), 0, 0, 0b1),
    withPrecisions(
        op(OpKind::LrSchedule, 2, 1, checkHyperparameterScalar, {I64, F}), 0,
        0b10, 0b1),
    withPrecisions(op(OpKind::ClipScale, 2, 1, checkHyperparameterScalar), 0,
                   0b11, 0b1),
    keepsDType(onGrid(op(OpKind::AllReduce, 1, 1, checkCollective), kAlways)),
    keepsDType(onGrid(op(OpKind::AllGather, 1, 1, checkCollective), kAlways)),
    keepsDType(
        onGrid(op(OpKind::ReduceScatter, 1, 1, checkCollective), kAlways)),
    keepsDType(onGrid(op(OpKind::AllToAll, 1, 1, checkCollective), kAlways)),
    keepsDType(
        onGrid(op(OpKind::LocalSplit, 1, 1, checkCollective), kPlacement)),
    keepsDType(onGrid(op(OpKind::RingShiftStart, 1, 1, checkCollective),
                      kAlways, AsyncRole::Starts)),
    keepsDType(onGrid(op(OpKind::RingShiftWait, 2, 1, checkRingShiftWait,
                         {F, F}, ResultPlacement::AliasOperand),
                      kAlways, AsyncRole::Waits)),
    keepsDType(
        onGrid(op(OpKind::RingSlice, 1, 1, checkCollective), kPlacement)),
    keepsDType(onGrid(op(OpKind::RingInsert, 2, 1, checkRingInsert, {F, F},
                         ResultPlacement::AliasOperand),
                      kPlacement)),
    // The log-sum-exp is an f32 statistic whatever the activations' dtype.
    withPrecisions(
        withOptionalOperands(withPrecision(op(OpKind::Attention, 4, 2,
                                              checkAttention, {F, F, F, I32})),
                             1),
        0, 0, /*f32 results=*/0b10),
    withPrecisions(
        withPrecision(op(OpKind::AttentionGrad, 6, 3, checkAttentionGrad)), 0,
        /*f32 operands=*/0b100000, 0),
    keepsDType(op(OpKind::CacheWrite, 3, 1, checkCacheWrite, {F, F, I32},
                  ResultPlacement::UpdateInPlace, {0})),
    // Any float type to any other.
    since(
        withPrecisions(op(OpKind::Convert, 1, 1, checkElementwise), 0b1, 0, 0),
        10),
    since(op(OpKind::Swiglu, 2, 1, checkSameShapes), 10),
    since(op(OpKind::SwigluGrad, 3, 2, checkSameShapes), 10),
    since(onGrid(withPrecisions(op(OpKind::AddLayerNorm, 4, 2, checkAddNorm),
                                0b1100, 0, 0),
                 kWithAxes),
          10),
    since(onGrid(withPrecisions(op(OpKind::AddRmsNorm, 3, 2, checkAddNorm),
                                0b100, 0, 0),
                 kWithAxes),
          10),
    since(withOptionalResults(
              withPrecision(op(OpKind::Linear, 3, 2, checkLinear)), 1),
          10),
    since(withPrecision(op(OpKind::LinearGeluGrad, 3, 2, checkLinearGeluGrad)),
          10),
    since(
        onGrid(withPrecisions(withPrecision(op(OpKind::LinearCrossEntropy, 3, 1,
                                               checkLinearHead, {F, F, I32})),
                              0, 0, /*f32 results=*/0b1),
               kWithAxes),
        10),
    since(onGrid(withPrecisions(
                     withPrecision(op(OpKind::LinearCrossEntropyGrad, 4, 2,
                                      checkLinearHead, {F, F, I32, F})),
                     0, /*f32 operands=*/0b1000, 0),
                 kWithAxes),
          10),
    since(onGrid(op(OpKind::SendStart, 1, 0, checkTransfer), kAlways,
                 AsyncRole::Starts),
          12),
    since(onGrid(op(OpKind::SendWait, 1, 0, checkTransfer), kAlways,
                 AsyncRole::Waits),
          12),
    since(onGrid(op(OpKind::RecvStart, 0, 1, checkTransfer), kAlways,
                 AsyncRole::Starts),
          12),
    since(keepsDType(onGrid(op(OpKind::RecvWait, 1, 1, checkRecvWait, {F},
                               ResultPlacement::AliasOperand),
                            kAlways, AsyncRole::Waits)),
          12),
    // (param, grad, exp_avg, exp_avg_sq, rows, lr, step, grad_scale): AdamW
    // on the listed rows, in place.
    since(withPrecisions(op(OpKind::AdamWRows, 8, 3, checkAdamWRows,
                            {F, F, F, F, I32, F, I64, F},
                            ResultPlacement::UpdateInPlace, {0, 2, 3}),
                         0, 0b10101111, 0b111),
          14),
    since(withPrecisions(
              op(OpKind::NormSquaredRows, 2, 1, checkNormSquaredRows, {F, I32}),
              0, 0, 0b1),
          14),
    since(op(OpKind::Relu, 1, 1, checkElementwise), 15),
    since(op(OpKind::ReluGrad, 2, 1, checkElementwiseGrad), 15),
};

constexpr bool inEnumOrder() {
  for (size_t i = 0; i < kOps.size(); ++i)
    if (size_t(kOps[i].kind) != i)
      return false;
  return true;
}
static_assert(inEnumOrder(), "kOps must list the kinds in enum order");
static_assert(kOps.size() == size_t(OpKind::MAX) + 1,
              "every plan op kind needs an entry in kOps");

} // namespace

//===----------------------------------------------------------------------===//
// StepCheck
//===----------------------------------------------------------------------===//

void StepCheck::fail(const std::string &message) const {
  throw PlanError(where + ": " + message);
}

std::span<const int64_t> StepCheck::ints() const { return stepInts(step); }

void StepCheck::requireShape(const TensorType &type,
                             const std::vector<int64_t> &shape,
                             const char *name) const {
  if (type.shape != shape)
    fail(std::string(name) + " has shape " + shapeString(type.shape) +
         ", expected " + shapeString(shape));
}

void StepCheck::requireRank(const TensorType &type, size_t rank,
                            const char *name) const {
  if (type.shape.size() < rank)
    fail(std::string(name) + " " + shapeString(type.shape) +
         " must have rank >= " + std::to_string(rank));
}

void StepCheck::requirePositive(double value, const char *name) const {
  if (!(value > 0.0) || value > std::numeric_limits<float>::max())
    fail(std::string(name) + " must be positive and finite");
}

void StepCheck::requireFiniteF32(double value, const char *name) const {
  if (!std::isfinite(value) ||
      std::abs(value) > std::numeric_limits<float>::max())
    fail(std::string(name) + " must be a finite f32");
}

int64_t StepCheck::gridAxes(bool allowNone, const char *what) const {
  std::span<const int64_t> axes = ints();
  if (axes.empty() && !allowNone)
    fail("a collective needs grid axes");
  std::set<int64_t> seen;
  int64_t size = 1;
  for (int64_t axis : axes) {
    if (axis < 0 || axis >= int64_t(plan.grid()->size()) ||
        !seen.insert(axis).second)
      fail(std::string("invalid ") + what);
    size *= plan.grid()->Get(axis);
  }
  return size;
}

//===----------------------------------------------------------------------===//
// Lookup
//===----------------------------------------------------------------------===//

const OpInfo *findOpInfo(plan::OpKind kind) {
  size_t index = size_t(kind);
  return index < kOps.size() ? &kOps[index] : nullptr;
}

std::span<const OpInfo> opTable() { return kOps; }

bool isFloatDType(plan::DType dtype, uint32_t minor) {
  return dtype == DT::F32 || (dtype == DT::BF16 && minor >= kPlanBf16Minor);
}

bool stepUsesGrid(const plan::Step &step) {
  const OpInfo *info = findOpInfo(step.kind());
  switch (info ? info->grid : GridUse::None) {
  case GridUse::None:
    return false;
  case GridUse::PlacementWhenAxesNamed:
  case GridUse::WhenAxesNamed:
    return !stepInts(step).empty();
  case GridUse::Placement:
  case GridUse::Always:
    return true;
  }
  return true;
}

bool stepExchanges(const plan::Step &step) {
  const OpInfo *info = findOpInfo(step.kind());
  return stepUsesGrid(step) && info &&
         (info->grid == GridUse::WhenAxesNamed ||
          info->grid == GridUse::Always);
}

} // namespace tpc::runtime
