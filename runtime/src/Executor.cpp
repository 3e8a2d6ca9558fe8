#include "tpc/runtime/Executor.h"

#include "tpc/runtime/Comm.h"
#include "tpc/runtime/Init.h"
#include "tpc/runtime/OpTable.h"
#include "tpc/runtime/Safetensors.h"
#include "tpc/runtime/cpu/Kernels.h"

#include <chrono>
#include <cstring>
#include <stdexcept>

namespace tpc::runtime {

using plan::Storage;

//===----------------------------------------------------------------------===//
// ParamStore
//===----------------------------------------------------------------------===//

namespace {
using SplitAxes = flatbuffers::Vector<flatbuffers::Offset<plan::Axes>>;

/// The block at grid coordinates `coords` (empty: the first) of a tensor of
/// shape `globalShape` split as `split` (null or empty: whole).
ParamBlock blockOf(const LoadedPlan &loaded, std::vector<int64_t> globalShape,
                   const SplitAxes *split, const std::vector<int64_t> &coords) {
  ParamBlock block;
  block.globalShape = std::move(globalShape);
  block.offset.assign(block.globalShape.size(), 0);
  block.shape = block.globalShape;
  if (!split)
    return block;
  const auto &grid = *loaded.plan().grid();
  for (size_t d = 0; d < split->size(); ++d) {
    int64_t shards = 1, index = 0;
    for (int64_t axis : *split->Get(d)->axes()) {
      int64_t coord = coords.empty() ? 0 : coords[axis];
      index = index * grid.Get(axis) + coord;
      shards *= grid.Get(axis);
    }
    block.shape[d] = block.globalShape[d] / shards;
    block.offset[d] = index * block.shape[d];
  }
  return block;
}
} // namespace

ParamBlock paramBlock(const LoadedPlan &loaded, const plan::Param &param,
                      const std::vector<int64_t> &coords) {
  return blockOf(
      loaded,
      std::vector<int64_t>(param.shape()->begin(), param.shape()->end()),
      param.split(), coords);
}

namespace {

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
      throw std::runtime_error(path + ": tensor '" + name + "' has shape " +
                               shapeString(info->shape) +
                               ", the plan expects " +
                               shapeString(fileShape(*param)));
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

ProgramRunner::ProgramRunner(const LoadedPlan &loaded, const std::string &name,
                             ParamStore &params, GridComm *comm,
                             Backend &backend)
    : program(loaded.program(name)), params(params), comm(comm),
      backend(backend) {
  if (!program)
    throw PlanError("the plan has no program '" + name + "'");
  arena = backend.allocate(program->arena_bytes());
  for (const plan::Tensor *t : *program->tensors())
    shapes.emplace_back(t->shape()->begin(), t->shape()->end());
  std::vector<int64_t> coords;
  if (comm)
    coords = GridComm::coordsOf(comm->shape(), comm->rank());
  for (const plan::Input *input : *program->inputs()) {
    const plan::Tensor &t = *program->tensors()->Get(input->tensor());
    uint64_t bytes = elements(input->tensor()) * dtypeSize(t.dtype());
    inputs.emplace_back((bytes + 7) / 8, 0);
    // The whole input is the local block times the shards of each dim
    // (the loader checked the split against the input's rank).
    std::vector<int64_t> whole = shapes[input->tensor()];
    bool split = input->split() && input->split()->size() != 0;
    if (split && !comm)
      throw PlanError("the program's inputs are split over the grid; it "
                      "needs ranks to run on");
    for (size_t d = 0; split && d < whole.size(); ++d)
      for (int64_t axis : *input->split()->Get(d)->axes())
        whole[d] *= loaded.plan().grid()->Get(axis);
    inputBlocks.push_back(
        blockOf(loaded, std::move(whole), input->split(), coords));
  }
  bindings.resize(shapes.size());
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
  return reinterpret_cast<float *>(arena->data() + t.offset());
}

bool ProgramRunner::hasInput(plan::InputKind kind) const {
  for (const plan::Input *input : *program->inputs())
    if (input->kind() == kind)
      return true;
  return false;
}

std::vector<int64_t> ProgramRunner::tokensShape() const {
  if (!hasInput(plan::InputKind::Tokens))
    throw PlanError("the program has no tokens input");
  return inputBlocks[inputIndex(plan::InputKind::Tokens)].globalShape;
}

size_t ProgramRunner::inputIndex(plan::InputKind kind) const {
  for (size_t i = 0; i < program->inputs()->size(); ++i)
    if (program->inputs()->Get(i)->kind() == kind)
      return i;
  throw std::runtime_error(std::string("the program has no ") +
                           plan::EnumNameInputKind(kind) + " input");
}

std::vector<uint64_t> &ProgramRunner::inputStorage(plan::InputKind kind,
                                                   size_t bytes) {
  size_t i = inputIndex(kind);
  uint32_t tensor = program->inputs()->Get(i)->tensor();
  uint64_t expected =
      elements(tensor) * dtypeSize(program->tensors()->Get(tensor)->dtype());
  if (bytes != expected)
    throw std::runtime_error(
        std::string("input ") + plan::EnumNameInputKind(kind) + " holds " +
        std::to_string(bytes) + " bytes, the program expects " +
        std::to_string(expected));
  return inputs[i];
}

void ProgramRunner::setInput(plan::InputKind kind,
                             std::span<const int32_t> values) {
  size_t i = inputIndex(kind);
  const ParamBlock &block = inputBlocks[i];
  int64_t whole = 1;
  for (int64_t d : block.globalShape)
    whole *= d;
  if (int64_t(values.size()) != whole)
    throw std::runtime_error(
        std::string("input ") + plan::EnumNameInputKind(kind) + " holds " +
        std::to_string(values.size()) + " values, the program expects " +
        std::to_string(whole));
  // This rank's block, row by row (tokens and targets are [batch, seq]).
  auto *out = reinterpret_cast<int32_t *>(inputs[i].data());
  const int64_t rows = block.shape[0], columns = block.shape[1];
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out + r * columns,
                values.data() + (block.offset[0] + r) * block.globalShape[1] +
                    block.offset[1],
                sizeof(int32_t) * size_t(columns));
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

void ProgramRunner::bindTensors() {
  for (uint32_t i = 0; i < bindings.size(); ++i)
    bindings[i] = {reinterpret_cast<std::byte *>(floatData(i)), shapes[i],
                   elements(i)};
}

void ProgramRunner::run() {
  bindTensors();
  std::array<TensorBinding, kMaxStepOperands> operands;
  std::array<TensorBinding, kMaxStepResults> results;
  for (const plan::Step *step : *program->steps()) {
    // The loader checked the arity against the op table.
    const size_t numOperands = step->operands()->size(),
                 numResults = step->results()->size();
    for (size_t i = 0; i < numOperands; ++i)
      operands[i] = bindings[step->operands()->Get(i)];
    for (size_t i = 0; i < numResults; ++i)
      results[i] = bindings[step->results()->Get(i)];
    auto start = std::chrono::steady_clock::now();
    backend.enqueue({*step,
                     {operands.data(), numOperands},
                     {results.data(), numResults},
                     comm});
    backend.synchronize();
    std::chrono::duration<double> took =
        std::chrono::steady_clock::now() - start;
    OpStats &stats = opStats[opKindName(step->kind())];
    stats.count += 1;
    stats.seconds += took.count();
  }
}

} // namespace tpc::runtime
