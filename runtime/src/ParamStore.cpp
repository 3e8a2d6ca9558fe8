#include "tpc/runtime/ParamStore.h"

#include "tpc/runtime/Comm.h"
#include "tpc/runtime/DType.h"
#include "tpc/runtime/Files.h"
#include "tpc/runtime/Init.h"
#include "tpc/runtime/Safetensors.h"

#include "Staging.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <unistd.h>

namespace tpc::runtime {

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

bool holdsParam(const LoadedPlan &loaded, const plan::Param &param,
                const std::vector<int64_t> &coords, int64_t cut) {
  const int64_t stage = paramStage(param, cut);
  return coords.empty() || stage < 0 || loaded.stageOf(coords) == stage;
}

std::vector<StoredBlock> storedBlocks(const LoadedPlan &loaded,
                                      const plan::Param &param,
                                      const std::vector<int64_t> &coords,
                                      const BlockAssignment &assignment) {
  if (!holdsParam(loaded, param, coords, assignment.cut()))
    return {};
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

/// The floats a rank that holds `param` stores of it: its even share, or
/// the capacity of a rebalanced one (the same on every such rank).
static int64_t storageElements(const LoadedPlan &loaded,
                               const plan::Param &param,
                               const std::vector<int64_t> &coords,
                               const std::vector<int64_t> &capacity) {
  return product(rebalanceDim(param) >= 0
                     ? paramLocalShape(loaded.plan(), param, capacity)
                     : paramBlock(loaded, param, coords).shape);
}

ParamStore ParamStore::allocate(const LoadedPlan &loaded,
                                const std::vector<int64_t> &coords) {
  ParamStore store;
  store.assignment = BlockAssignment::even(loaded.plan());
  store.coords_ = coords;
  const std::vector<int64_t> capacity = capacityBlocks(loaded.plan());
  std::vector<int64_t> sizes;
  uint64_t bytes = 0;
  for (const plan::Param *param : *loaded.plan().params()) {
    sizes.push_back(holdsParam(loaded, *param, coords, store.assignment.cut())
                        ? storageElements(loaded, *param, coords, capacity)
                        : 0);
    bytes += uint64_t(sizes.back()) * sizeof(float);
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
  for (int64_t size : sizes)
    store.values.emplace_back(size_t(size), 0.0f);
  // Cached embedding tables: the block stays here, a cache of some of its
  // rows on the device.
  const auto &params = *loaded.plan().params();
  store.caches.resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const plan::Param &param = *params.Get(i);
    if (param.cache_rows() == 0 || sizes[i] == 0)
      continue;
    const ParamBlock block = paramBlock(loaded, param, coords);
    const int64_t rowElements = sizes[i] / block.shape[0];
    store.caches[i] = std::make_unique<CachedTable>(
        block.globalShape[0], block.offset[0], block.shape[0],
        std::min(param.cache_rows(), block.shape[0]), rowElements);
  }
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
  const std::vector<int64_t> capacity = capacityBlocks(plan.plan());
  for (size_t i = 0; i < params.size(); ++i) {
    const plan::Param &param = *params.Get(i);
    const std::vector<int64_t> shape = wholeShape(param);
    // Every rank that holds a parameter stores as much of it (its even
    // share, or the capacity of a rebalanced one); a rank of another
    // pipeline stage holds none and sends as much padding.
    const size_t share =
        size_t(storageElements(plan, param, rankCoords[0], capacity));
    auto gather = [&](const std::vector<float> &local) {
      if (!param.split() && paramStage(param, assignment.cut()) < 0)
        return local;
      const std::vector<float> padding(local.empty() ? share : 0, 0.0f);
      std::vector<float> all(share * size_t(comm.size()));
      comm.gatherState(local.empty() ? padding : local, all);
      std::vector<float> result(size_t(product(shape)));
      for (int rank = 0; rank < comm.size(); ++rank)
        for (const StoredBlock &block :
             storedBlocks(plan, param, rankCoords[size_t(rank)], assignment))
          blockToWhole(all.data() + size_t(rank) * share, block, shape,
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

/// Sends each peer its packed `outgoing` floats and receives `incomingSizes`
/// floats from each (one GridComm::exchange; both sides pack in one order
/// they derive alike), counting the bytes into `cost`. Without `comm`
/// nothing may travel.
static std::map<int, std::vector<float>>
exchangePacked(GridComm *comm, std::map<int, std::vector<float>> &outgoing,
               const std::map<int, size_t> &incomingSizes, RelayoutCost &cost) {
  std::map<int, std::vector<float>> incoming;
  std::vector<GridComm::Transfer> sends, receives;
  for (auto &[peer, buffer] : outgoing) {
    sends.push_back({peer, buffer});
    cost.bytesSent += double(buffer.size() * sizeof(float));
  }
  for (const auto &[peer, count] : incomingSizes) {
    incoming[peer].resize(count);
    receives.push_back({peer, incoming[peer]});
    cost.bytesReceived += double(count * sizeof(float));
  }
  if (comm)
    comm->exchange(sends, receives);
  return incoming;
}

RelayoutCost ParamStore::relayout(const LoadedPlan &plan,
                                  const BlockAssignment &next, GridComm *comm) {
  if (next.cut() != assignment.cut()) {
    BlockAssignment blocksOnly = next;
    blocksOnly.setCut(assignment.cut());
    if (!(blocksOnly == assignment))
      throw std::invalid_argument("a relayout moves blocks or changes the "
                                  "stage cut, not both at once");
    return moveStages(plan, next.cut(), comm);
  }
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
  std::map<int, std::vector<float>> outgoing;
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
  std::map<int, size_t> incomingSizes;
  for (const auto &[peer, list] : unpacks) {
    for (const Unpack &u : list)
      incomingSizes[peer] += size_t(product(u.block->shape)) * states.size();
    cost.blocksReceived += int64_t(list.size());
  }
  std::map<int, std::vector<float>> incoming =
      exchangePacked(comm, outgoing, incomingSizes, cost);
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

RelayoutCost ParamStore::moveStages(const LoadedPlan &plan, int64_t cut,
                                    GridComm *comm) {
  auto start = std::chrono::steady_clock::now();
  if (cut < 0 || cut >= plan.numCuts())
    throw std::invalid_argument("stage cut " + std::to_string(cut) +
                                " is not one of the plan's " +
                                std::to_string(plan.numCuts()));
  if (!comm || coords_.empty())
    throw std::runtime_error("moving layers between stages needs ranks");
  RelayoutCost cost;
  const auto &params = *plan.plan().params();
  const std::vector<State> states =
      hasMoments()
          ? std::vector<State>{State::Value, State::ExpAvg, State::ExpAvgSq}
          : std::vector<State>{State::Value};
  const int64_t axis = plan.plan().pipeline()->axis();
  const int64_t mine = plan.stageOf(coords_);
  auto rankOfStage = [&](int64_t stage) {
    std::vector<int64_t> peer = coords_;
    peer[size_t(axis)] = stage;
    return int(GridComm::rankOf(comm->shape(), peer));
  };
  const std::vector<int64_t> capacity = capacityBlocks(plan.plan());
  // Packed per peer in parameter order, value then moments: both sides
  // derive the same order from the plan.
  std::map<int, std::vector<float>> outgoing;
  std::map<int, std::vector<size_t>> gained;
  std::vector<size_t> lost;
  for (size_t i = 0; i < params.size(); ++i) {
    const plan::Param &param = *params.Get(i);
    const int64_t from = paramStage(param, assignment.cut()),
                  to = paramStage(param, cut);
    if (from == to || from < 0 || to < 0)
      continue;
    if (from == mine) {
      std::vector<float> &buffer = outgoing[rankOfStage(to)];
      for (State which : states) {
        const std::vector<float> &array = state(i, which);
        buffer.insert(buffer.end(), array.begin(), array.end());
      }
      lost.push_back(i);
      ++cost.blocksSent;
    } else if (to == mine) {
      gained[rankOfStage(from)].push_back(i);
      ++cost.blocksReceived;
    }
  }
  // Each gained parameter's storage on this rank, as its old holder packs
  // it.
  std::map<size_t, size_t> gainedSize;
  std::map<int, size_t> incomingSizes;
  for (const auto &[peer, list] : gained)
    for (size_t i : list) {
      gainedSize[i] =
          size_t(storageElements(plan, *params.Get(i), coords_, capacity));
      incomingSizes[peer] += gainedSize[i] * states.size();
    }
  std::map<int, std::vector<float>> incoming =
      exchangePacked(comm, outgoing, incomingSizes, cost);
  for (const auto &[peer, list] : gained) {
    const float *cursor = incoming[peer].data();
    for (size_t i : list) {
      const size_t n = gainedSize[i];
      for (State which : states) {
        state(i, which).assign(cursor, cursor + n);
        cursor += n;
      }
    }
  }
  // What this stage gave away is no longer its to keep (nor to upload).
  for (size_t i : lost) {
    for (State which : states)
      std::vector<float>().swap(state(i, which));
    if (device)
      for (auto &buffer : device->buffers[i])
        buffer.reset();
  }
  assignment.setCut(cut);
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
  hostWillChange(index);
  return hostArray(index, which);
}

std::vector<float> &ParamStore::expAvg(size_t index) {
  hostWillChange(index);
  return hostArray(index, State::ExpAvg);
}
std::vector<float> &ParamStore::expAvgSq(size_t index) {
  hostWillChange(index);
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

std::array<float *, 3> ParamStore::cacheHost(size_t index) const {
  return {hostArray(index, State::Value).data(),
          hostArray(index, State::ExpAvg).data(),
          hostArray(index, State::ExpAvgSq).data()};
}

void ParamStore::syncHost() const {
  for (size_t i = 0; i < caches.size(); ++i)
    if (caches[i])
      caches[i]->writeBack(cacheHost(i));
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

void ParamStore::hostWillChange(size_t index) {
  if (CachedTable *cache = cachedTable(index)) {
    cache->writeBack(cacheHost(index));
    cache->hostChanged();
  }
  if (device)
    hostWillChange();
}

void ParamStore::hostWillChange() {
  syncHost();
  for (const auto &cache : caches)
    if (cache)
      cache->hostChanged();
  if (!device)
    return;
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
  for (const auto &cache : caches)
    if (cache)
      cache->deviceWritten();
  if (device)
    device->hostCurrent = false;
}

CachedTable &ParamStore::requireCache(size_t index) const {
  CachedTable *cache = cachedTable(index);
  if (!cache)
    throw std::logic_error("parameter " + std::to_string(index) +
                           " is no cached embedding table");
  return *cache;
}

void ParamStore::rankCachedRows(size_t index, IdFrequencies frequencies) {
  requireCache(index).rank(std::move(frequencies));
}

void ParamStore::prepareCache(size_t index, std::span<const int32_t> wholeIds,
                              Backend &backend) {
  requireCache(index).prepare(wholeIds, cacheHost(index), backend);
}

std::byte *ParamStore::cacheData(Backend &backend, size_t index, State which) {
  return requireCache(index).data(size_t(which), cacheHost(index), backend);
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

} // namespace tpc::runtime
