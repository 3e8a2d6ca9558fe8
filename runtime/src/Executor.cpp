#include "tpc/runtime/Executor.h"

#include "tpc/runtime/Comm.h"
#include "tpc/runtime/Init.h"
#include "tpc/runtime/Safetensors.h"
#include "tpc/runtime/cpu/Kernels.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace tpc::runtime {

using plan::OpKind;
using plan::Storage;

//===----------------------------------------------------------------------===//
// ParamStore
//===----------------------------------------------------------------------===//

ParamBlock paramBlock(const LoadedPlan &loaded, const plan::Param &param,
                      const std::vector<int64_t> &coords) {
  ParamBlock block;
  block.globalShape.assign(param.shape()->begin(), param.shape()->end());
  block.offset.assign(block.globalShape.size(), 0);
  block.shape = block.globalShape;
  if (!param.split())
    return block;
  const auto &grid = *loaded.plan().grid();
  for (size_t d = 0; d < param.split()->size(); ++d) {
    int64_t shards = 1, index = 0;
    for (int64_t axis : *param.split()->Get(d)->axes()) {
      int64_t coord = coords.empty() ? 0 : coords[axis];
      index = index * grid.Get(axis) + coord;
      shards *= grid.Get(axis);
    }
    block.shape[d] = block.globalShape[d] / shards;
    block.offset[d] = index * block.shape[d];
  }
  return block;
}

namespace {

/// A step's integer attributes; an absent vector (legal: the loader accepts
/// it where the op needs none, e.g. the permutation of a scalar) is empty.
std::span<const int64_t> stepInts(const plan::Step &step) {
  if (!step.ints())
    return {};
  return {step.ints()->data(), step.ints()->size()};
}

/// Copies `block` (block.shape, at block.offset) into the row-major `whole`
/// of block.globalShape; the inverse of cpu::slice.
void placeBlock(const float *blockData, const ParamBlock &block, float *whole) {
  const size_t rank = block.globalShape.size();
  if (rank == 0) {
    whole[0] = blockData[0];
    return;
  }
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < rank; ++d)
    rows *= block.shape[d];
  const int64_t rowLength = block.shape[rank - 1];
  std::vector<int64_t> index(rank, 0);
  for (int64_t row = 0; row < rows; ++row) {
    int64_t offset = 0;
    for (size_t d = 0; d < rank; ++d)
      offset = offset * block.globalShape[d] + block.offset[d] + index[d];
    std::memcpy(whole + offset, blockData + row * rowLength,
                sizeof(float) * size_t(rowLength));
    for (size_t d = rank - 1; d-- > 0;) {
      if (++index[d] < block.shape[d])
        break;
      index[d] = 0;
    }
  }
}

/// Gathers one parameter-shaped array from every rank's block.
std::vector<float> gatherParam(const LoadedPlan &plan, const plan::Param &param,
                               const std::vector<float> &local,
                               GridComm &comm) {
  if (!param.split())
    return local;
  std::vector<float> all(local.size() * size_t(comm.size()));
  comm.gatherState(local, all);
  ParamBlock whole = paramBlock(plan, param, {});
  int64_t count = 1;
  for (int64_t d : whole.globalShape)
    count *= d;
  std::vector<float> result(static_cast<size_t>(count));
  for (int rank = 0; rank < comm.size(); ++rank) {
    ParamBlock block =
        paramBlock(plan, param, GridComm::coordsOf(comm.shape(), rank));
    placeBlock(all.data() + size_t(rank) * local.size(), block, result.data());
  }
  return result;
}

} // namespace

std::vector<float> sliceBlock(const std::vector<float> &whole,
                              const ParamBlock &block) {
  if (block.shape == block.globalShape)
    return whole;
  int64_t count = 1;
  for (int64_t d : block.shape)
    count *= d;
  std::vector<float> local(static_cast<size_t>(count));
  cpu::slice(whole.data(), block.globalShape, block.offset, local.data(),
             block.shape);
  return local;
}

ParamStore ParamStore::initialise(const LoadedPlan &loaded,
                                  const std::vector<int64_t> &coords) {
  ParamStore store;
  for (const plan::Param *param : *loaded.plan().params()) {
    ParamBlock block = paramBlock(loaded, *param, coords);
    int64_t count = 1;
    for (int64_t d : block.shape)
      count *= d;
    std::vector<float> values(count);
    switch (param->init()) {
    case plan::Init::Zeros:
      break;
    case plan::Init::Ones:
      std::fill(values.begin(), values.end(), 1.0f);
      break;
    case plan::Init::Normal:
      fillNormal(values, block.globalShape, {block.offset, block.shape},
                 parameterKey(param->name()->str()),
                 static_cast<float>(param->init_std()));
      break;
    }
    store.values.push_back(std::move(values));
  }
  return store;
}

ParamStore ParamStore::fromSafetensors(const LoadedPlan &loaded,
                                       const std::string &path,
                                       const std::vector<int64_t> &coords) {
  SafetensorsFile file = SafetensorsFile::open(path);
  ParamStore store;
  for (const plan::Param *param : *loaded.plan().params()) {
    const std::string name = param->name()->str();
    const TensorInfo *info = file.find(name);
    if (!info)
      throw std::runtime_error(path + ": has no tensor '" + name +
                               "', which the plan needs");
    ParamBlock block = paramBlock(loaded, *param, coords);
    if (info->shape != fileShape(*param)) {
      auto str = [](const std::vector<int64_t> &s) {
        std::string r = "[";
        for (size_t i = 0; i < s.size(); ++i)
          r += (i ? "," : "") + std::to_string(s[i]);
        return r + "]";
      };
      throw std::runtime_error(path + ": tensor '" + name + "' has shape " +
                               str(info->shape) + ", the plan expects " +
                               str(fileShape(*param)));
    }
    store.values.push_back(sliceBlock(file.readAsF32(name), block));
  }
  return store;
}

ParamStore ParamStore::gathered(const LoadedPlan &plan, GridComm &comm) const {
  ParamStore whole;
  const auto &params = *plan.plan().params();
  bool moments = !moments1.empty();
  for (size_t i = 0; i < params.size(); ++i) {
    const plan::Param &param = *params.Get(i);
    whole.values.push_back(gatherParam(plan, param, values[i], comm));
    if (moments) {
      whole.moments1.push_back(gatherParam(plan, param, expAvg(i), comm));
      whole.moments2.push_back(gatherParam(plan, param, expAvgSq(i), comm));
    }
  }
  return whole;
}

void writeWholeParams(const LoadedPlan &plan, const ParamStore &params,
                      GridComm *comm,
                      const std::function<void(const ParamStore &)> &write) {
  if (!comm || comm->size() == 1)
    return write(params);
  ParamStore whole = params.gathered(plan, *comm);
  if (comm->rank() == 0)
    write(whole);
}

std::vector<float> &ParamStore::expAvg(size_t index) {
  return const_cast<std::vector<float> &>(
      static_cast<const ParamStore *>(this)->expAvg(index));
}
std::vector<float> &ParamStore::expAvgSq(size_t index) {
  return const_cast<std::vector<float> &>(
      static_cast<const ParamStore *>(this)->expAvgSq(index));
}
const std::vector<float> &ParamStore::expAvg(size_t index) const {
  moments1.resize(values.size());
  if (moments1[index].size() != values[index].size())
    moments1[index].assign(values[index].size(), 0.0f);
  return moments1[index];
}
const std::vector<float> &ParamStore::expAvgSq(size_t index) const {
  moments2.resize(values.size());
  if (moments2[index].size() != values[index].size())
    moments2[index].assign(values[index].size(), 0.0f);
  return moments2[index];
}

uint64_t ParamStore::bytes() const {
  uint64_t total = 0;
  for (const auto &v : values)
    total += v.size() * sizeof(float);
  for (const auto &v : moments1)
    total += v.size() * sizeof(float);
  for (const auto &v : moments2)
    total += v.size() * sizeof(float);
  return total;
}

//===----------------------------------------------------------------------===//
// ProgramRunner
//===----------------------------------------------------------------------===//

void ProgramRunner::FreeDeleter::operator()(void *p) const { std::free(p); }

ProgramRunner::ProgramRunner(const LoadedPlan &loaded, const std::string &name,
                             ParamStore &params, GridComm *comm)
    : program(loaded.program(name)), params(params), comm(comm) {
  if (!program)
    throw PlanError("the plan has no program '" + name + "'");
  uint64_t bytes = (program->arena_bytes() + 63) / 64 * 64;
  arena.reset(
      static_cast<std::byte *>(std::aligned_alloc(64, bytes ? bytes : 64)));
  if (!arena)
    throw std::runtime_error("cannot allocate an arena of " +
                             std::to_string(bytes) + " bytes");
  for (const plan::Tensor *t : *program->tensors())
    shapes.emplace_back(t->shape()->begin(), t->shape()->end());
  for (const plan::Input *input : *program->inputs()) {
    const plan::Tensor &t = *program->tensors()->Get(input->tensor());
    uint64_t bytes = elements(input->tensor()) * dtypeSize(t.dtype());
    inputs.emplace_back((bytes + 7) / 8, 0);
  }
}

std::span<const int64_t> ProgramRunner::shape(uint32_t tensor) const {
  return shapes[tensor];
}

int64_t ProgramRunner::elements(uint32_t tensor) const {
  int64_t count = 1;
  for (int64_t d : shapes[tensor])
    count *= d;
  return count;
}

float *ProgramRunner::floatData(uint32_t tensor) {
  const plan::Tensor &t = *program->tensors()->Get(tensor);
  switch (t.storage()) {
  case Storage::Param:
    return params[t.index()].data();
  case Storage::ExpAvg:
    return params.expAvg(t.index()).data();
  case Storage::ExpAvgSq:
    return params.expAvgSq(t.index()).data();
  case Storage::Input:
    return reinterpret_cast<float *>(inputs[t.index()].data());
  case Storage::Arena:
    break;
  }
  return reinterpret_cast<float *>(arena.get() + t.offset());
}

const int32_t *ProgramRunner::intData(uint32_t tensor) const {
  const plan::Tensor &t = *program->tensors()->Get(tensor);
  return reinterpret_cast<const int32_t *>(inputs[t.index()].data());
}

int64_t ProgramRunner::stepValue(uint32_t tensor) const {
  const plan::Tensor &t = *program->tensors()->Get(tensor);
  return static_cast<int64_t>(inputs[t.index()][0]);
}

bool ProgramRunner::hasInput(plan::InputKind kind) const {
  for (const plan::Input *input : *program->inputs())
    if (input->kind() == kind)
      return true;
  return false;
}

std::vector<int64_t> ProgramRunner::tokensShape() const {
  for (const plan::Input *input : *program->inputs())
    if (input->kind() == plan::InputKind::Tokens)
      return shapes[input->tensor()];
  throw PlanError("the program has no tokens input");
}

std::vector<uint64_t> &ProgramRunner::inputStorage(plan::InputKind kind,
                                                   size_t bytes) {
  for (size_t i = 0; i < program->inputs()->size(); ++i) {
    const plan::Input &input = *program->inputs()->Get(i);
    if (input.kind() != kind)
      continue;
    const plan::Tensor &t = *program->tensors()->Get(input.tensor());
    uint64_t expected = elements(input.tensor()) * dtypeSize(t.dtype());
    if (bytes != expected)
      throw std::runtime_error(
          std::string("input ") + plan::EnumNameInputKind(kind) + " holds " +
          std::to_string(bytes) + " bytes, the program expects " +
          std::to_string(expected));
    return inputs[i];
  }
  throw std::runtime_error(std::string("the program has no ") +
                           plan::EnumNameInputKind(kind) + " input");
}

void ProgramRunner::setInput(plan::InputKind kind,
                             std::span<const int32_t> values) {
  std::memcpy(inputStorage(kind, values.size_bytes()).data(), values.data(),
              values.size_bytes());
}

void ProgramRunner::setStep(int64_t step) {
  std::memcpy(inputStorage(plan::InputKind::Step, sizeof(step)).data(), &step,
              sizeof(step));
}

void ProgramRunner::setHyperparameters(const std::array<float, 5> &values) {
  std::memcpy(
      inputStorage(plan::InputKind::Hyperparameters, sizeof(values)).data(),
      values.data(), sizeof(values));
}

uint64_t ProgramRunner::inputBytes() const {
  uint64_t total = 0;
  for (const auto &input : inputs)
    total += input.size() * sizeof(uint64_t);
  return total;
}

size_t ProgramRunner::numResults() const { return program->results()->size(); }

std::span<const float> ProgramRunner::result(size_t index) const {
  uint32_t tensor = program->results()->Get(index);
  auto *self = const_cast<ProgramRunner *>(this);
  return {self->floatData(tensor), size_t(elements(tensor))};
}

std::vector<int64_t> ProgramRunner::resultShape(size_t index) const {
  return shapes[program->results()->Get(index)];
}

void ProgramRunner::run() {
  for (const plan::Step *step : *program->steps()) {
    auto start = std::chrono::steady_clock::now();
    execute(*step);
    std::chrono::duration<double> took =
        std::chrono::steady_clock::now() - start;
    OpStats &stats = opStats[opKindName(step->kind())];
    stats.count += 1;
    stats.seconds += took.count();
  }
}

/// Collectives on local shards. Group rank k holds shard k of the split
/// dimension (the grid axes are listed major to minor, as GridComm orders
/// its groups), so gathers and scatters reorder blocks around the
/// contiguous buffers MPI exchanges with transposes of reshaped views.
void ProgramRunner::collective(const plan::Step &step) {
  if (!comm)
    throw std::runtime_error("a collective step needs a communicator");
  const uint32_t inId = step.operands()->Get(0), outId = step.results()->Get(0);
  std::vector<int> axes(stepInts(step).begin(), stepInts(step).end());
  const float *in = floatData(inId);
  float *out = floatData(outId);
  std::vector<int64_t> inShape(shape(inId).begin(), shape(inId).end());
  const int64_t inCount = elements(inId), outCount = elements(outId);
  const int64_t n = comm->group(axes).size;
  // [outer, size(d), inner] around dimension d of `s`.
  auto around = [](const std::vector<int64_t> &s, int64_t d) {
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < d; ++i)
      outer *= s[i];
    for (size_t i = d + 1; i < s.size(); ++i)
      inner *= s[i];
    return std::array<int64_t, 3>{outer, s[d], inner};
  };
  const std::vector<int64_t> swap01 = {1, 0, 2, 3};
  switch (step.kind()) {
  case OpKind::AllReduce:
    if (out != in)
      std::memmove(out, in, inCount * sizeof(float));
    comm->allReduceSum(axes, {out, size_t(outCount)});
    return;
  case OpKind::AllGather: {
    // Gathered as [n, outer, s, inner]; the result is [outer, n, s, inner].
    auto [outer, size, inner] = around(inShape, step.dim());
    std::vector<float> gathered(n * inCount);
    comm->allGather(axes, {in, size_t(inCount)}, gathered);
    std::vector<int64_t> view = {n, outer, size, inner};
    cpu::transpose(gathered.data(), view, swap01, out);
    return;
  }
  case OpKind::ReduceScatter: {
    // The input [outer, n, s, inner] as [n, outer, s, inner] blocks.
    auto [outer, size, inner] = around(inShape, step.dim());
    std::vector<int64_t> view = {outer, n, size / n, inner};
    std::vector<float> blocks(inCount);
    cpu::transpose(in, view, swap01, blocks.data());
    comm->reduceScatterSum(axes, blocks, {out, size_t(outCount)});
    return;
  }
  case OpKind::LocalSplit: {
    std::vector<int64_t> offsets(inShape.size(), 0);
    std::span<const int64_t> outShape = shape(outId);
    offsets[step.dim()] = comm->group(axes).rank * outShape[step.dim()];
    cpu::slice(in, inShape, offsets, out, outShape);
    return;
  }
  case OpKind::AllToAll: {
    // Chunk k of the target dimension goes to group rank k; the chunk from
    // rank j lands at block j of the source dimension.
    const int64_t src = step.dim(), dst = step.target_dim();
    std::vector<int64_t> split = inShape; // target dim as [n, chunk]
    split[dst] /= n;
    split.insert(split.begin() + dst, n);
    std::vector<int64_t> toFront(split.size());
    toFront[0] = dst;
    for (int64_t i = 0, k = 1; i < int64_t(split.size()); ++i)
      if (i != dst)
        toFront[k++] = i;
    std::vector<float> send(inCount), received(inCount);
    cpu::transpose(in, split, toFront, send.data());
    comm->allToAll(axes, send, received);
    // received: [n (source rank), rest...] with rest = split without the
    // chunk axis; move the rank axis next to the source dimension.
    std::vector<int64_t> rest(split.size() - 1);
    for (int64_t i = 1; i < int64_t(split.size()); ++i)
      rest[i - 1] = split[toFront[i]];
    std::vector<int64_t> recvShape = {n};
    recvShape.insert(recvShape.end(), rest.begin(), rest.end());
    const int64_t srcInRest = src; // the chunk axis sat at dst, not src
    std::vector<int64_t> perm;
    for (int64_t i = 0; i < int64_t(rest.size()); ++i) {
      if (i == srcInRest)
        perm.push_back(0);
      perm.push_back(i + 1);
    }
    cpu::transpose(received.data(), recvShape, perm, out);
    return;
  }
  default:
    throw PlanError("not a collective");
  }
}

/// This rank's block of a vocabulary split over the step's grid axes (the
/// whole vocabulary when it names none): blocks are numbered over the axes
/// major to minor, as parameter blocks are, and hold `size` entries each.
ProgramRunner::VocabBlock ProgramRunner::vocabBlock(const plan::Step &step,
                                                    int64_t size) const {
  VocabBlock block;
  if (!step.ints() || !step.ints()->size())
    return block;
  if (!comm)
    throw std::runtime_error("a vocabulary-parallel step needs a communicator");
  int64_t index = 0;
  for (int64_t axis : *step.ints()) {
    index = index * comm->shape()[axis] + comm->coords()[axis];
    block.blocks *= comm->shape()[axis];
  }
  block.first = index * size;
  return block;
}

/// Per-token {max, sum of exps, target logit} of this rank's `vocab` logit
/// columns, all-gathered over the step's vocabulary axes: [blocks, tokens, 3]
/// in block order.
std::vector<float> ProgramRunner::gatheredCrossEntropyStats(
    const plan::Step &step, const VocabBlock &block, const float *logits,
    int64_t tokens, int64_t vocab) {
  std::vector<float> stats(size_t(3 * tokens)),
      gathered(size_t(3 * tokens * block.blocks));
  cpu::crossEntropyBlockStats(logits, tokens, vocab, block.first,
                              block.blocks * vocab,
                              intData(step.operands()->Get(1)), stats.data());
  std::vector<int> axes(stepInts(step).begin(), stepInts(step).end());
  comm->allGather(axes, stats, gathered);
  return gathered;
}

void ProgramRunner::execute(const plan::Step &step) {
  const auto &ops = *step.operands();
  const uint32_t out = step.results()->Get(0);
  auto in = [&](size_t i) { return floatData(ops.Get(i)); };
  auto inShape = [&](size_t i) { return shape(ops.Get(i)); };
  std::span<const int64_t> outShape = shape(out);
  const int64_t outCount = elements(out);
  switch (step.kind()) {
  case OpKind::Embedding: {
    auto table = inShape(0);
    VocabBlock block = vocabBlock(step, table[0]);
    cpu::embeddingBlock(in(0), block.first, table[0], block.blocks * table[0],
                        table[1], intData(ops.Get(1)), elements(ops.Get(1)),
                        floatData(out));
    return;
  }
  case OpKind::Matmul:
    cpu::matmul(in(0), inShape(0), step.transpose_lhs(), in(1), inShape(1),
                step.transpose_rhs(), floatData(out), outShape,
                /*accumulate=*/false, static_cast<float>(step.alpha()));
    return;
  case OpKind::Add:
  case OpKind::Sub:
  case OpKind::Mul:
  case OpKind::Div: {
    cpu::BinaryKind kind = step.kind() == OpKind::Add   ? cpu::BinaryKind::Add
                           : step.kind() == OpKind::Sub ? cpu::BinaryKind::Sub
                           : step.kind() == OpKind::Mul ? cpu::BinaryKind::Mul
                                                        : cpu::BinaryKind::Div;
    cpu::binary(kind, in(0), inShape(0), in(1), inShape(1), floatData(out),
                outShape);
    return;
  }
  case OpKind::Scale:
    cpu::scale(in(0), static_cast<float>(step.factor()), floatData(out),
               outCount);
    return;
  case OpKind::Gelu:
    cpu::gelu(in(0), floatData(out), outCount);
    return;
  case OpKind::Silu:
    cpu::silu(in(0), floatData(out), outCount);
    return;
  case OpKind::LayerNorm: {
    int64_t cols = outShape.back();
    cpu::layerNorm(in(0), in(1), in(2), floatData(out), outCount / cols, cols,
                   static_cast<float>(step.epsilon()));
    return;
  }
  case OpKind::RmsNorm: {
    int64_t cols = outShape.back();
    cpu::rmsNorm(in(0), in(1), floatData(out), outCount / cols, cols,
                 static_cast<float>(step.epsilon()));
    return;
  }
  case OpKind::Softmax: {
    int64_t cols = outShape.back();
    cpu::softmax(in(0), floatData(out), outCount / cols, cols, step.causal());
    return;
  }
  case OpKind::Rotary: {
    int64_t dim = outShape.back(), seq = outShape[outShape.size() - 2];
    cpu::rotary(in(0), floatData(out), outCount / (seq * dim), seq, dim,
                step.theta(), step.inverse());
    return;
  }
  case OpKind::Reshape: {
    float *src = in(0), *dst = floatData(out);
    if (src != dst)
      std::memmove(dst, src, outCount * sizeof(float));
    return;
  }
  case OpKind::Transpose:
    cpu::transpose(in(0), inShape(0), stepInts(step), floatData(out));
    return;
  case OpKind::Slice:
    cpu::slice(in(0), inShape(0), stepInts(step), floatData(out), outShape);
    return;
  case OpKind::ReduceSum:
  case OpKind::ReduceMean:
    cpu::reduce(in(0), inShape(0), stepInts(step),
                step.kind() == OpKind::ReduceMean, floatData(out));
    return;
  case OpKind::CrossEntropy: {
    int64_t vocab = inShape(0).back();
    int64_t tokens = elements(ops.Get(0)) / vocab;
    if (!step.ints() || !step.ints()->size()) {
      *floatData(out) =
          cpu::crossEntropy(in(0), tokens, vocab, intData(ops.Get(1)));
      return;
    }
    // Vocabulary-parallel: every block's statistics, combined alike on every
    // rank.
    VocabBlock block = vocabBlock(step, vocab);
    std::vector<float> stats =
        gatheredCrossEntropyStats(step, block, in(0), tokens, vocab);
    *floatData(out) =
        cpu::crossEntropyFromBlockStats(stats.data(), block.blocks, tokens);
    return;
  }
  case OpKind::EmbeddingGrad: {
    std::span<const int64_t> table = outShape;
    VocabBlock block = vocabBlock(step, table[0]);
    cpu::embeddingGradBlock(in(0), intData(ops.Get(1)), elements(ops.Get(1)),
                            block.first, table[0], block.blocks * table[0],
                            table[1], floatData(out));
    return;
  }
  case OpKind::GeluGrad:
    cpu::geluGrad(in(0), in(1), floatData(out), outCount);
    return;
  case OpKind::SiluGrad:
    cpu::siluGrad(in(0), in(1), floatData(out), outCount);
    return;
  case OpKind::LayerNormGrad: {
    int64_t cols = outShape.back();
    cpu::layerNormGrad(in(0), in(1), in(2), floatData(out),
                       floatData(step.results()->Get(1)),
                       floatData(step.results()->Get(2)), outCount / cols, cols,
                       static_cast<float>(step.epsilon()));
    return;
  }
  case OpKind::RmsNormGrad: {
    int64_t cols = outShape.back();
    cpu::rmsNormGrad(in(0), in(1), in(2), floatData(out),
                     floatData(step.results()->Get(1)), outCount / cols, cols,
                     static_cast<float>(step.epsilon()));
    return;
  }
  case OpKind::SoftmaxGrad: {
    int64_t cols = outShape.back();
    cpu::softmaxGrad(in(0), in(1), floatData(out), outCount / cols, cols);
    return;
  }
  case OpKind::CrossEntropyGrad: {
    int64_t vocab = outShape.back(), tokens = outCount / vocab;
    if (!step.ints() || !step.ints()->size()) {
      cpu::crossEntropyGrad(in(0), intData(ops.Get(1)), *in(2), tokens, vocab,
                            floatData(out));
      return;
    }
    // Vocabulary-parallel: the loss step's statistics, then the softmax of
    // this rank's columns.
    VocabBlock block = vocabBlock(step, vocab);
    std::vector<float> stats =
        gatheredCrossEntropyStats(step, block, in(0), tokens, vocab);
    cpu::crossEntropyGradFromBlockStats(
        in(0), intData(ops.Get(1)), *in(2), tokens, vocab, block.first,
        stats.data(), block.blocks, floatData(out));
    return;
  }
  case OpKind::Constant:
    cpu::fill(static_cast<float>(step.value()), floatData(out), outCount);
    return;
  case OpKind::Pad:
    cpu::pad(in(0), inShape(0), stepInts(step), floatData(out), outShape);
    return;
  case OpKind::NormSquared:
    *floatData(out) = cpu::normSquared(in(0), elements(ops.Get(0)));
    return;
  case OpKind::LrSchedule: {
    const float *h = in(1);
    *floatData(out) =
        cpu::learningRate(stepValue(ops.Get(0)), h[0], h[1], h[2], h[3]);
    return;
  }
  case OpKind::ClipScale:
    *floatData(out) = cpu::clipScale(*in(0), in(1)[4]);
    return;
  case OpKind::AllReduce:
  case OpKind::AllGather:
  case OpKind::ReduceScatter:
  case OpKind::AllToAll:
  case OpKind::LocalSplit:
    collective(step);
    return;
  case OpKind::AdamW:
    cpu::adamw(in(0), in(1), in(2), in(3), *in(4), stepValue(ops.Get(5)),
               *in(6), step.beta1(), step.beta2(), step.epsilon(),
               step.weight_decay(), floatData(out),
               floatData(step.results()->Get(1)),
               floatData(step.results()->Get(2)), outCount);
    return;
  }
}

} // namespace tpc::runtime
