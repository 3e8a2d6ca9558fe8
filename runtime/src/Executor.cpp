#include "tpc/runtime/Executor.h"

#include "tpc/runtime/Files.h"

#include "tpc/runtime/Comm.h"
#include "tpc/runtime/DType.h"
#include "tpc/runtime/Init.h"
#include "tpc/runtime/OpTable.h"
#include "tpc/runtime/Safetensors.h"

#include "Staging.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <stdexcept>
#include <thread>
#include <unistd.h>

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

int64_t product(std::span<const int64_t> shape) {
  int64_t count = 1;
  for (int64_t d : shape)
    count *= d;
  return count;
}

/// Copies the box `shape` at `fromOffset` of the row-major array `from` (of
/// `fromShape`) to `toOffset` of the row-major array `to` (of `toShape`).
void copyBox(const float *from, std::span<const int64_t> fromShape,
             std::span<const int64_t> fromOffset, float *to,
             std::span<const int64_t> toShape,
             std::span<const int64_t> toOffset,
             std::span<const int64_t> shape) {
  const size_t rank = shape.size();
  if (rank == 0) {
    to[0] = from[0];
    return;
  }
  const int64_t rows = product(shape.first(rank - 1)),
                rowLength = shape[rank - 1];
  if (rows == 0 || rowLength == 0)
    return;
  std::vector<int64_t> index(rank, 0);
  for (int64_t row = 0; row < rows; ++row) {
    int64_t source = 0, target = 0;
    for (size_t d = 0; d < rank; ++d) {
      source = source * fromShape[d] + fromOffset[d] + index[d];
      target = target * toShape[d] + toOffset[d] + index[d];
    }
    std::memcpy(to + target, from + source, sizeof(float) * size_t(rowLength));
    for (size_t d = rank - 1; d-- > 0;) {
      if (++index[d] < shape[d])
        break;
      index[d] = 0;
    }
  }
}

std::vector<int64_t> wholeShape(const plan::Param &param) {
  return {param.shape()->begin(), param.shape()->end()};
}

/// The dim of `param` holding a rebalance point's blocks, or -1 (the loader
/// allows at most one).
int64_t rebalanceDim(const plan::Param &param) {
  if (param.rebalance_dims())
    for (size_t d = 0; d < param.rebalance_dims()->size(); ++d)
      if (param.rebalance_dims()->Get(d) >= 0)
        return int64_t(d);
  return -1;
}

/// Copies one stored block between a rank's storage and the whole
/// parameter-shaped array.
void blockToWhole(const float *storage, const StoredBlock &block,
                  const std::vector<int64_t> &whole, float *wholeData) {
  copyBox(storage + block.base, block.regionShape, block.regionOffset,
          wholeData, whole, block.globalOffset, block.shape);
}
void wholeToBlock(const float *wholeData, const std::vector<int64_t> &whole,
                  const StoredBlock &block, float *storage) {
  copyBox(wholeData, whole, block.globalOffset, storage + block.base,
          block.regionShape, block.regionOffset, block.shape);
}

} // namespace

std::vector<float> readStoredBlock(const float *storage,
                                   const StoredBlock &block) {
  std::vector<float> values(size_t(product(block.shape)));
  const std::vector<int64_t> zeros(block.shape.size(), 0);
  copyBox(storage + block.base, block.regionShape, block.regionOffset,
          values.data(), block.shape, zeros, block.shape);
  return values;
}

void writeStoredBlock(const float *values, const StoredBlock &block,
                      float *storage) {
  const std::vector<int64_t> zeros(block.shape.size(), 0);
  copyBox(values, block.shape, zeros, storage + block.base, block.regionShape,
          block.regionOffset, block.shape);
}

std::vector<StoredBlock> storedBlocks(const LoadedPlan &loaded,
                                      const plan::Param &param,
                                      const std::vector<int64_t> &coords,
                                      const BlockAssignment &assignment) {
  ParamBlock even = paramBlock(loaded, param, coords);
  const int64_t dim = rebalanceDim(param);
  if (dim < 0)
    return {StoredBlock{0, even.shape, std::vector<int64_t>(even.shape.size()),
                        even.offset, even.shape}};
  const size_t point = size_t(param.rebalance_dims()->Get(size_t(dim)));
  const int64_t extent = even.globalShape[dim] / assignment.blocks(point);
  const int64_t member = assignment.memberAt(point, coords);
  std::span<const int64_t> held = assignment.held(point, member);
  const int64_t active = assignment.active(point, member);
  std::vector<int64_t> computedShape = even.shape, parkedShape = even.shape;
  computedShape[dim] = active * extent;
  parkedShape[dim] = (int64_t(held.size()) - active) * extent;
  std::vector<StoredBlock> blocks;
  for (int64_t j = 0; j < int64_t(held.size()); ++j) {
    const bool computed = j < active;
    StoredBlock block;
    block.base = computed ? 0 : product(computedShape);
    block.regionShape = computed ? computedShape : parkedShape;
    block.regionOffset.assign(even.shape.size(), 0);
    block.regionOffset[dim] = (computed ? j : j - active) * extent;
    block.globalOffset = even.offset;
    block.globalOffset[dim] = held[j] * extent;
    block.shape = even.shape;
    block.shape[dim] = extent;
    block.point = int64_t(point);
    block.id = held[j];
    blocks.push_back(std::move(block));
  }
  return blocks;
}

ParamStore ParamStore::allocate(const LoadedPlan &loaded,
                                const std::vector<int64_t> &coords) {
  ParamStore store;
  store.assignment = BlockAssignment::even(loaded.plan());
  store.coords_ = coords;
  const std::vector<int64_t> capacity = capacityBlocks(loaded.plan());
  std::vector<std::vector<int64_t>> shapes;
  uint64_t bytes = 0;
  for (const plan::Param *param : *loaded.plan().params()) {
    shapes.push_back(rebalanceDim(*param) >= 0
                         ? paramLocalShape(loaded.plan(), *param, capacity)
                         : paramBlock(loaded, *param, coords).shape);
    bytes += uint64_t(product(shapes.back())) * sizeof(float);
  }
  // A plan may ask for more than the machine has: say so in words before
  // the allocation fails (or the OOM killer comes).
  const uint64_t memory =
      uint64_t(::sysconf(_SC_PHYS_PAGES)) * uint64_t(::sysconf(_SC_PAGE_SIZE));
  if (bytes > memory)
    throw std::runtime_error(
        "the plan's parameters need " + formatBytes(bytes) +
        " on this rank, more than the " + formatBytes(memory) +
        " of memory this machine has (a larger grid splits them further)");
  for (const std::vector<int64_t> &shape : shapes)
    store.values.emplace_back(size_t(product(shape)), 0.0f);
  return store;
}

ParamStore ParamStore::initialise(const LoadedPlan &loaded,
                                  const std::vector<int64_t> &coords) {
  ParamStore store = allocate(loaded, coords);
  const auto &params = *loaded.plan().params();
  for (size_t i = 0; i < params.size(); ++i) {
    const plan::Param &param = *params.Get(i);
    if (param.init() == plan::Init::Zeros)
      continue;
    const std::vector<int64_t> whole = wholeShape(param);
    for (const StoredBlock &block :
         storedBlocks(loaded, param, coords, store.assignment)) {
      // Each block is drawn at its place in the whole parameter, so every
      // grid and every block assignment starts from the same weights.
      std::vector<float> values(size_t(product(block.shape)), 1.0f);
      if (param.init() == plan::Init::Normal)
        fillNormal(values, whole, {block.globalOffset, block.shape},
                   parameterKey(param.name()->str()),
                   static_cast<float>(param.init_std()));
      writeStoredBlock(values.data(), block, store.values[i].data());
    }
  }
  return store;
}

ParamStore ParamStore::fromSafetensors(const LoadedPlan &loaded,
                                       const std::string &path,
                                       const std::vector<int64_t> &coords) {
  SafetensorsFile file = SafetensorsFile::open(path);
  ParamStore store = allocate(loaded, coords);
  const auto &params = *loaded.plan().params();
  for (size_t i = 0; i < params.size(); ++i) {
    const plan::Param &param = *params.Get(i);
    const std::string name = param.name()->str();
    const TensorInfo *info = file.find(name);
    if (!info)
      throw std::runtime_error(path + ": has no tensor '" + name +
                               "', which the plan needs");
    if (info->shape != fileShape(param)) {
      throw std::runtime_error(path + ": tensor '" + name + "' has shape " +
                               shapeString(info->shape) +
                               ", the plan expects " +
                               shapeString(fileShape(param)));
    }
    store.setFromWhole(loaded, i, State::Value, file.readAsF32(name));
  }
  return store;
}

void ParamStore::setFromWhole(const LoadedPlan &loaded, size_t index,
                              State which, const std::vector<float> &whole) {
  const plan::Param &param = *loaded.plan().params()->Get(index);
  const std::vector<int64_t> shape = wholeShape(param);
  if (int64_t(whole.size()) != product(shape))
    throw std::invalid_argument("parameter '" + param.name()->str() +
                                "': a whole array of " +
                                std::to_string(whole.size()) +
                                " values, expected " + shapeString(shape));
  std::vector<float> &into = state(index, which);
  for (const StoredBlock &block :
       storedBlocks(loaded, param, coords_, assignment))
    wholeToBlock(whole.data(), shape, block, into.data());
}

ParamStore ParamStore::gathered(const LoadedPlan &plan, GridComm &comm) const {
  syncHost();
  ParamStore whole;
  const auto &params = *plan.plan().params();
  const bool moments = hasMoments();
  std::vector<std::vector<int64_t>> rankCoords;
  for (int rank = 0; rank < comm.size(); ++rank)
    rankCoords.push_back(GridComm::coordsOf(comm.shape(), rank));
  for (size_t i = 0; i < params.size(); ++i) {
    const plan::Param &param = *params.Get(i);
    const std::vector<int64_t> shape = wholeShape(param);
    // Every rank's storage of a parameter has the same size (its even
    // share, or the capacity of a rebalanced one).
    auto gather = [&](const std::vector<float> &local) {
      if (!param.split())
        return local;
      std::vector<float> all(local.size() * size_t(comm.size()));
      comm.gatherState(local, all);
      std::vector<float> result(size_t(product(shape)));
      for (int rank = 0; rank < comm.size(); ++rank)
        for (const StoredBlock &block :
             storedBlocks(plan, param, rankCoords[size_t(rank)], assignment))
          blockToWhole(all.data() + size_t(rank) * local.size(), block, shape,
                       result.data());
      return result;
    };
    whole.values.push_back(gather(values[i]));
    if (moments) {
      whole.moments1.push_back(gather(expAvg(i)));
      whole.moments2.push_back(gather(expAvgSq(i)));
    }
  }
  return whole;
}

RelayoutCost ParamStore::relayout(const LoadedPlan &plan,
                                  const BlockAssignment &next, GridComm *comm) {
  auto start = std::chrono::steady_clock::now();
  next.validate();
  RelayoutCost cost;
  const auto &params = *plan.plan().params();
  const std::vector<State> states =
      hasMoments()
          ? std::vector<State>{State::Value, State::ExpAvg, State::ExpAvgSq}
          : std::vector<State>{State::Value};
  // What goes to and comes from each other rank, packed in one order on
  // both sides: parameter, then block id, then value and moments.
  std::map<int, std::vector<float>> outgoing, incoming;
  struct Unpack {
    size_t param;
    const StoredBlock *block;
  };
  std::map<int, std::vector<Unpack>> unpacks;
  std::vector<std::vector<StoredBlock>> newLayouts(params.size());
  std::vector<std::vector<std::vector<float>>> newStorage(params.size());
  auto peerOf = [&](size_t point, int64_t member) {
    std::vector<int64_t> peer = coords_;
    peer[size_t(next.axis(point))] = member;
    return int(GridComm::rankOf(comm->shape(), peer));
  };
  for (size_t i = 0; i < params.size(); ++i) {
    const plan::Param &param = *params.Get(i);
    const int64_t dim = rebalanceDim(param);
    if (dim < 0)
      continue;
    // From the plan: a rank may hold no block before or after the move.
    const size_t point = size_t(param.rebalance_dims()->Get(size_t(dim)));
    std::vector<StoredBlock> before =
        storedBlocks(plan, param, coords_, assignment);
    newLayouts[i] = storedBlocks(plan, param, coords_, next);
    std::map<int64_t, const StoredBlock *> beforeById, afterById;
    for (const StoredBlock &b : before)
      beforeById[b.id] = &b;
    for (const StoredBlock &b : newLayouts[i])
      afterById[b.id] = &b;
    for (State which : states)
      newStorage[i].emplace_back(state(i, which).size(), 0.0f);
    // Blocks that stay: copied within the rank (they may change region).
    for (const auto &[id, after] : afterById) {
      if (auto it = beforeById.find(id); it != beforeById.end()) {
        for (size_t k = 0; k < states.size(); ++k)
          copyBox(state(i, states[k]).data() + it->second->base,
                  it->second->regionShape, it->second->regionOffset,
                  newStorage[i][k].data() + after->base, after->regionShape,
                  after->regionOffset, after->shape);
        continue;
      }
      if (!comm)
        throw std::runtime_error("moving rebalance blocks needs ranks");
      int from = peerOf(point, assignment.owner(point, id));
      unpacks[from].push_back({i, after});
    }
    // Blocks that leave: packed for their new rank.
    for (const auto &[id, was] : beforeById) {
      if (afterById.count(id))
        continue;
      if (!comm)
        throw std::runtime_error("moving rebalance blocks needs ranks");
      std::vector<float> &buffer =
          outgoing[peerOf(point, next.owner(point, id))];
      for (State which : states) {
        std::vector<float> piece =
            readStoredBlock(state(i, which).data(), *was);
        buffer.insert(buffer.end(), piece.begin(), piece.end());
      }
      ++cost.blocksSent;
    }
  }
  std::vector<GridComm::Transfer> sends, receives;
  for (auto &[peer, buffer] : outgoing) {
    sends.push_back({peer, buffer});
    cost.bytesSent += double(buffer.size() * sizeof(float));
  }
  for (const auto &[peer, list] : unpacks) {
    size_t count = 0;
    for (const Unpack &u : list)
      count += size_t(product(u.block->shape)) * states.size();
    incoming[peer].resize(count);
    receives.push_back({peer, incoming[peer]});
    cost.bytesReceived += double(count * sizeof(float));
    cost.blocksReceived += int64_t(list.size());
  }
  if (comm)
    comm->exchange(sends, receives);
  for (const auto &[peer, list] : unpacks) {
    const float *cursor = incoming[peer].data();
    for (const Unpack &u : list)
      for (size_t k = 0; k < states.size(); ++k) {
        writeStoredBlock(cursor, *u.block, newStorage[u.param][k].data());
        cursor += product(u.block->shape);
      }
  }
  for (size_t i = 0; i < params.size(); ++i)
    for (size_t k = 0; k < newStorage[i].size(); ++k)
      state(i, states[k]) = std::move(newStorage[i][k]);
  assignment = next;
  ++version;
  cost.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return cost;
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

std::vector<float> &ParamStore::state(size_t index, State which) {
  hostWillChange();
  return hostArray(index, which);
}

std::vector<float> &ParamStore::expAvg(size_t index) {
  hostWillChange();
  return hostArray(index, State::ExpAvg);
}
std::vector<float> &ParamStore::expAvgSq(size_t index) {
  hostWillChange();
  return hostArray(index, State::ExpAvgSq);
}
const std::vector<float> &ParamStore::expAvg(size_t index) const {
  syncHost();
  return hostArray(index, State::ExpAvg);
}
const std::vector<float> &ParamStore::expAvgSq(size_t index) const {
  syncHost();
  return hostArray(index, State::ExpAvgSq);
}

std::vector<float> &ParamStore::hostArray(size_t index, State which) const {
  if (which == State::Value)
    return values[index];
  auto &moments = which == State::ExpAvg ? moments1 : moments2;
  moments.resize(values.size());
  if (moments[index].size() != values[index].size())
    moments[index].assign(values[index].size(), 0.0f);
  return moments[index];
}

void ParamStore::syncHost() const {
  if (!device || device->hostCurrent)
    return;
  for (size_t i = 0; i < device->buffers.size(); ++i)
    for (size_t k = 0; k < 3; ++k)
      if (const auto &buffer = device->buffers[i][k]) {
        std::vector<float> &host = hostArray(i, State(k));
        device->backend->download(host.data(), buffer->data(),
                                  host.size() * sizeof(float));
      }
  device->hostCurrent = true;
}

void ParamStore::hostWillChange() {
  if (!device)
    return;
  syncHost();
  for (auto &current : device->current)
    current.fill(false);
}

std::byte *ParamStore::deviceData(Backend &backend, size_t index, State which) {
  if (!device) {
    device = std::make_unique<DeviceCopies>();
    device->backend = &backend;
    device->buffers.resize(values.size());
    device->current.resize(values.size());
  } else if (device->backend != &backend) {
    throw std::logic_error("parameters on two devices at once ('" +
                           std::string(device->backend->name()) + "' and '" +
                           std::string(backend.name()) + "')");
  }
  const size_t k = size_t(which);
  std::unique_ptr<Buffer> &buffer = device->buffers[index][k];
  // The host is behind only after a device run, and then every buffer in
  // use is current; a buffer made now starts from the host's values.
  if (!buffer || !device->current[index][k]) {
    std::vector<float> &host = hostArray(index, which);
    const uint64_t bytes = host.size() * sizeof(float);
    if (!buffer)
      buffer = backend.allocate(bytes);
    backend.upload(buffer->data(), host.data(), bytes);
    device->current[index][k] = true;
  }
  return buffer->data();
}

void ParamStore::markDeviceWritten() {
  if (device)
    device->hostCurrent = false;
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
    : plan(&loaded.plan()), program(loaded.program(name)), params(params),
      comm(comm), backend(backend) {
  if (!program)
    throw PlanError("the plan has no program '" + name + "'");
  arena = backend.allocate(program->arena_bytes());
  for (const plan::Tensor *t : *program->tensors()) {
    shapes.emplace_back(t->shape()->begin(), t->shape()->end());
    // A parameter viewed without its rebalance dims: the program assumes
    // the even split (it gathers or scatters the blocks).
    if ((t->storage() == Storage::Param || t->storage() == Storage::ExpAvg ||
         t->storage() == Storage::ExpAvgSq) &&
        rebalancePointOf(*t) < 0 &&
        loaded.plan().params()->Get(t->index())->rebalance_dims())
      needsEvenBlocks = true;
  }
  layoutVersion = params.layoutVersion() - 1;
  updateShapes();
  // The point whose blocks each step computes on, if any: its time scales
  // with the blocks the rank computes.
  pointTime.assign(capacityBlocks(loaded.plan()).size(), 0.0);
  for (const plan::Step *step : *program->steps()) {
    int32_t point = -1;
    auto scan = [&](const flatbuffers::Vector<uint32_t> &ids) {
      for (uint32_t id : ids)
        if (point < 0)
          point = rebalancePointOf(*program->tensors()->Get(id));
    };
    scan(*step->results());
    scan(*step->operands());
    stepPoints.push_back(point);
  }
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
  for (const plan::Step *step : *program->steps())
    for (uint32_t id : *step->results()) {
      Storage where = program->tensors()->Get(id)->storage();
      writesParams |= where == Storage::Param || where == Storage::ExpAvg ||
                      where == Storage::ExpAvgSq;
    }
  // Host copies of results the host cannot read in place (device memory,
  // or bf16 results widened to f32).
  resultCopies.resize(program->results()->size());
  if (!backend.hostVisible()) {
    for (const auto &input : inputs)
      deviceInputs.push_back(backend.allocate(input.size() * sizeof(uint64_t)));
    staged = std::make_unique<StagedSteps>(backend);
  } else if (!std::all_of(program->steps()->begin(), program->steps()->end(),
                          [&](const plan::Step *step) {
                            return backend.runsNatively(*step);
                          })) {
    throw std::logic_error("backend '" + std::string(backend.name()) +
                           "' stages steps but its memory is the host's");
  }
}

ProgramRunner::~ProgramRunner() = default;

std::span<const int64_t> ProgramRunner::shape(uint32_t tensor) const {
  return shapes[tensor];
}

int64_t ProgramRunner::elements(uint32_t tensor) const {
  int64_t count = 1;
  for (int64_t d : shapes[tensor])
    count *= d;
  return count;
}

std::byte *ProgramRunner::storage(uint32_t tensor) {
  const plan::Tensor &t = *program->tensors()->Get(tensor);
  auto paramState = [&](ParamStore::State which) {
    return backend.hostVisible() ? reinterpret_cast<std::byte *>(
                                       params.state(t.index(), which).data())
                                 : params.deviceData(backend, t.index(), which);
  };
  switch (t.storage()) {
  case Storage::Param:
    return paramState(ParamStore::State::Value);
  case Storage::ExpAvg:
    return paramState(ParamStore::State::ExpAvg);
  case Storage::ExpAvgSq:
    return paramState(ParamStore::State::ExpAvgSq);
  case Storage::Input:
    return backend.hostVisible()
               ? reinterpret_cast<std::byte *>(inputs[t.index()].data())
               : deviceInputs[t.index()]->data();
  case Storage::Cache:
    if (!caches)
      throw std::logic_error("program '" + program->name()->str() +
                             "' reads KV caches, but the runner has none");
    return caches->data(t.index());
  case Storage::Arena:
    break;
  }
  return arena->data() + t.offset();
}

void ProgramRunner::setCaches(KvCaches *kvCaches) { caches = kvCaches; }

KvCaches::KvCaches(const LoadedPlan &loaded, Backend &backend)
    : backend(backend) {
  if (const auto *table = loaded.plan().caches())
    for (const plan::Cache *cache : *table) {
      uint64_t count = 1;
      for (int64_t d : *cache->shape())
        count *= uint64_t(d);
      sizes.push_back(count * dtypeSize(cache->dtype()));
      buffers.push_back(backend.allocate(sizes.back()));
    }
  clear();
}

std::byte *KvCaches::data(size_t index) { return buffers.at(index)->data(); }

uint64_t KvCaches::bytes() const {
  uint64_t total = 0;
  for (uint64_t size : sizes)
    total += size;
  return total;
}

void KvCaches::clear() {
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (backend.hostVisible()) {
      std::memset(buffers[i]->data(), 0, sizes[i]);
    } else {
      std::vector<std::byte> zeros(sizes[i]);
      backend.upload(buffers[i]->data(), zeros.data(), sizes[i]);
    }
  }
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
  const size_t count = size_t(elements(tensor));
  const plan::DType dtype = program->tensors()->Get(tensor)->dtype();
  if (backend.hostVisible() && dtype == plan::DType::F32)
    return {reinterpret_cast<const float *>(self->storage(tensor)), count};
  std::vector<float> &copy = resultCopies[index];
  copy.resize(count);
  if (dtype == plan::DType::F32) {
    backend.download(copy.data(), self->storage(tensor), count * sizeof(float));
    return copy;
  }
  // A bf16 result (logits under mixed precision), widened exactly.
  std::vector<uint16_t> stored(count);
  if (backend.hostVisible())
    std::memcpy(stored.data(), self->storage(tensor), count * sizeof(uint16_t));
  else
    backend.download(stored.data(), self->storage(tensor),
                     count * sizeof(uint16_t));
  widenBf16(stored.data(), copy.data(), int64_t(count));
  return copy;
}

std::vector<int64_t> ProgramRunner::resultShape(size_t index) const {
  return shapes[program->results()->Get(index)];
}

void ProgramRunner::bindTensors() {
  for (uint32_t i = 0; i < bindings.size(); ++i)
    bindings[i] = {storage(i), shapes[i], elements(i),
                   program->tensors()->Get(i)->dtype()};
}

void ProgramRunner::updateShapes() {
  if (layoutVersion == params.layoutVersion())
    return;
  const BlockAssignment &blocks = params.blocks();
  if (needsEvenBlocks && !blocks.isEven())
    throw std::runtime_error(
        "program '" + program->name()->str() +
        "' runs only while the rebalance blocks are evenly spread, and they "
        "are not");
  // Kernels run on the blocks this rank computes: every shape rule must
  // hold at those shapes too (the loader checked them at capacity).
  std::vector<int64_t> active = blocks.activeBlocks(params.coords());
  if (active != capacityBlocks(*plan))
    checkProgramAt(*plan, *program, active);
  for (size_t i = 0; i < shapes.size(); ++i)
    shapes[i] = activeShape(*plan, *program->tensors()->Get(i), active);
  layoutVersion = params.layoutVersion();
}

Dispatch ProgramRunner::dispatchOf(const plan::Step &step,
                                   StepBindings &bound) const {
  // The loader checked the arity against the op table.
  const size_t numOperands = step.operands()->size(),
               numResults = step.results()->size();
  for (size_t i = 0; i < numOperands; ++i)
    bound.operands[i] = bindings[step.operands()->Get(i)];
  for (size_t i = 0; i < numResults; ++i)
    bound.results[i] = bindings[step.results()->Get(i)];
  return {step,
          {bound.operands.data(), numOperands},
          {bound.results.data(), numResults},
          comm};
}

bool ProgramRunner::runRecorded() {
  if (stepTiming || !staged ||
      !std::all_of(
          program->steps()->begin(), program->steps()->end(),
          [&](const plan::Step *step) { return backend.runsNatively(*step); }))
    return false;
  // The first untimed run runs step by step: it allocates what the steps
  // need (moments, scratch). Later ones record once, then replay while the
  // tensors stay where they were recorded.
  if (untimedRuns++ == 0)
    return false;
  std::vector<std::byte *> storage;
  for (const TensorBinding &binding : bindings)
    storage.push_back(binding.data);
  if (!recorded || storage != recordedStorage) {
    // Recording counts the collectives it queues but moves nothing: keep
    // what it counted for each submission instead.
    const std::map<std::string, CommStats> before =
        comm ? comm->stats() : std::map<std::string, CommStats>();
    recorded = backend.record([&] {
      StepBindings bound;
      for (const plan::Step *step : *program->steps())
        backend.enqueue(dispatchOf(*step, bound));
    });
    recordedStorage = std::move(storage);
    recordedTraffic.clear();
    if (comm) {
      for (const auto &[kind, after] : comm->stats()) {
        const CommStats was =
            before.count(kind) ? before.at(kind) : CommStats();
        recordedTraffic[kind] = {after.calls - was.calls,
                                 after.bytes - was.bytes};
      }
      comm->setStats(before);
    }
    if (!recorded)
      return false;
  }
  const auto start = std::chrono::steady_clock::now();
  recorded->submit();
  if (comm)
    comm->addStats(recordedTraffic);
  backend.synchronize();
  computeTime =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::fill(pointTime.begin(), pointTime.end(), 0.0);
  ++replayCount;
  if (writesParams)
    params.markDeviceWritten();
  return true;
}

void ProgramRunner::run() {
  updateShapes();
  bindTensors();
  for (size_t i = 0; i < deviceInputs.size(); ++i)
    backend.upload(deviceInputs[i]->data(), inputs[i].data(),
                   inputs[i].size() * sizeof(uint64_t));
  if (runRecorded())
    return;
  computeTime = 0;
  std::fill(pointTime.begin(), pointTime.end(), 0.0);
  size_t stepIndex = 0;
  StepBindings bound;
  for (const plan::Step *step : *program->steps()) {
    auto start = std::chrono::steady_clock::now();
    const double waitedBefore = comm ? comm->waitSeconds() : 0.0;
    const Dispatch dispatch = dispatchOf(*step, bound);
    const bool native = backend.runsNatively(*step);
    if (native) {
      backend.enqueue(dispatch);
      backend.synchronize();
    } else {
      staged->run(dispatch);
    }
    std::chrono::duration<double> took =
        std::chrono::steady_clock::now() - start;
    if (comm && native && backend.exchangesOutsideGrid() &&
        stepExchanges(*step))
      comm->addWaitSeconds(took.count() - (comm->waitSeconds() - waitedBefore));
    double computed =
        took.count() - ((comm ? comm->waitSeconds() : 0.0) - waitedBefore);
    if (stretch > 1.0) {
      // An emulated slower device: this rank's compute takes `stretch`
      // times as long. It sleeps (a rank sharing the core with others, as
      // under oversubscription, must not take their time), in pieces of at
      // least 200 us so that the sleep's own overhead stays small; the
      // last piece is paid at the end of the run.
      stretchDebt += (stretch - 1.0) * computed;
      const bool last = stepIndex + 1 == program->steps()->size();
      if (stretchDebt >= 200e-6 || last) {
        auto sleepStart = std::chrono::steady_clock::now();
        std::this_thread::sleep_for(std::chrono::duration<double>(stretchDebt));
        double slept = std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - sleepStart)
                           .count();
        stretchDebt -= slept;
        computed += slept;
      }
      took = std::chrono::steady_clock::now() - start;
    }
    computeTime += computed;
    if (int32_t point = stepPoints[stepIndex++]; point >= 0)
      pointTime[size_t(point)] += computed;
    OpStats &stats = opStats[opKindName(step->kind())];
    stats.count += 1;
    stats.seconds += took.count();
  }
  if (writesParams)
    params.markDeviceWritten();
}

} // namespace tpc::runtime
