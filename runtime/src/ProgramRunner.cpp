#include "tpc/runtime/ProgramRunner.h"

#include "tpc/runtime/DType.h"

#include "Staging.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <map>
#include <set>
#include <stdexcept>
#include <thread>

namespace tpc::runtime {

using plan::Storage;

ProgramRunner::ProgramRunner(const LoadedPlan &loaded, const std::string &name,
                             ParamStore &params, GridComm *comm,
                             Backend &backend)
    : plan(&loaded.plan()), inOrderProblem(loaded.inOrderTransferProblem()),
      // The rank's stage's program under the stage cut the parameters
      // are laid out for.
      program(loaded.program(
          name, loaded.stageOf(comm ? comm->coords() : std::vector<int64_t>()),
          params.blocks().cut())),
      params(params), comm(comm),
      hostChannel(comm ? std::make_unique<MpiChannel>(*comm) : nullptr),
      backend(backend) {
  if (!program)
    throw PlanError("the plan has no program '" + name + "'");
  // Creating a group's communicator is collective over the world, and a
  // pipeline stage's program uses other groups than its neighbours' (or
  // the same in another order): every rank creates those of every program
  // up front, in one order.
  // The backend's transport likewise (NCCL splits its communicators from
  // one over the world): the groups of the exchanges it may carry and the
  // routes of the transfers.
  if (comm) {
    std::set<std::vector<int>> groups, exchanges;
    std::set<TransferRoute> routes;
    for (const plan::Program *any : *loaded.plan().programs())
      for (const plan::Step *step : *any->steps()) {
        if (!stepUsesGrid(*step))
          continue;
        std::span<const int64_t> axes = stepInts(*step);
        groups.emplace(axes.begin(), axes.end());
        const plan::OpKind kind = step->kind();
        if (kind == plan::OpKind::SendStart)
          routes.insert({int(axes[0]), any->stage(), step->peer()});
        else if (kind == plan::OpKind::RecvStart)
          routes.insert({int(axes[0]), step->peer(), any->stage()});
        else if (stepExchanges(*step) && !isPipelineTransfer(kind))
          exchanges.emplace(axes.begin(), axes.end());
      }
    for (const std::vector<int> &axes : groups)
      comm->group(axes);
    if (CollectiveChannel *channel = backend.channel())
      channel->prepareGroups(
          std::vector<std::vector<int>>(exchanges.begin(), exchanges.end()),
          std::vector<TransferRoute>(routes.begin(), routes.end()));
  }
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
  std::vector<int32_t> stepPoints;
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
  timer = std::make_unique<StepTimer>(comm, std::move(stepPoints),
                                      capacityBlocks(loaded.plan()).size());
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
  for (const plan::Input *input : *program->inputs())
    readsCachedTables |= isCacheInput(input->kind());
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
  } else if (!std::all_of(
                 program->steps()->begin(), program->steps()->end(),
                 [&](const plan::Step *step) { return runsNatively(*step); })) {
    throw std::logic_error("backend '" + std::string(backend.name()) +
                           "' stages steps but its memory is the host's");
  }
}

ProgramRunner::~ProgramRunner() = default;

bool ProgramRunner::runsNatively(const plan::Step &step) const {
  if (!backend.runsNatively(step))
    return false;
  const CollectiveChannel *channel = backend.channel();
  return !isPipelineTransfer(step.kind()) || !channel ||
         channel->matchesTransfersByTag() || inOrderProblem.empty();
}

std::string ProgramRunner::transferPath() const {
  const auto *steps = program->steps();
  auto transfer =
      std::find_if(steps->begin(), steps->end(), [](const plan::Step *step) {
        return isPipelineTransfer(step->kind());
      });
  if (transfer == steps->end())
    return "";
  const CollectiveChannel *channel = backend.channel();
  if (!backend.runsNatively(**transfer) || !channel)
    return backend.collectivePath();
  if (channel->matchesTransfersByTag())
    return std::string(channel->transport());
  if (inOrderProblem.empty())
    return std::string(channel->transport()) +
           ", matched in order per pair of stages";
  return "MPI staged through the host (" + std::string(channel->transport()) +
         " would match them in order, and " + inOrderProblem + ")";
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

std::byte *ProgramRunner::storage(uint32_t tensor) {
  const plan::Tensor &t = *program->tensors()->Get(tensor);
  auto paramState = [&](ParamStore::State which) {
    // A cached embedding table is its cache, on any backend.
    if (params.cachedTable(t.index()))
      return params.cacheData(backend, t.index(), which);
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

bool ProgramRunner::hasInput(plan::InputKind kind) const {
  for (const plan::Input *input : *program->inputs())
    if (input->kind() == kind)
      return true;
  return false;
}

std::vector<int64_t> ProgramRunner::tokensShape() const {
  if (!hasInput(plan::InputKind::Tokens))
    throw PlanError("the program has no tokens input");
  return wholeInputShape(plan::InputKind::Tokens);
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

const std::vector<int64_t> &
ProgramRunner::wholeInputShape(plan::InputKind kind) const {
  return inputBlocks[inputIndex(kind)].globalShape;
}

void ProgramRunner::setInputBlock(plan::InputKind kind, plan::DType dtype,
                                  const std::byte *values, size_t count) {
  size_t i = inputIndex(kind);
  const ParamBlock &block = inputBlocks[i];
  const plan::Tensor &tensor =
      *program->tensors()->Get(program->inputs()->Get(i)->tensor());
  if (tensor.dtype() != dtype)
    throw std::runtime_error(
        std::string("input ") + plan::EnumNameInputKind(kind) + " holds " +
        dtypeName(tensor.dtype()) + " values, not " + dtypeName(dtype));
  int64_t whole = 1;
  for (int64_t d : block.globalShape)
    whole *= d;
  if (int64_t(count) != whole)
    throw std::runtime_error(
        std::string("input ") + plan::EnumNameInputKind(kind) + " holds " +
        std::to_string(count) + " values, the program expects " +
        std::to_string(whole));
  // This rank's block, one innermost run at a time.
  const size_t size = size_t(dtypeSize(dtype));
  const size_t rank = block.shape.size();
  const int64_t run = block.shape.back();
  int64_t runs = 1;
  for (size_t d = 0; d + 1 < rank; ++d)
    runs *= block.shape[d];
  auto *out = reinterpret_cast<std::byte *>(inputs[i].data());
  std::vector<int64_t> index(rank, 0);
  for (int64_t r = 0; r < runs; ++r) {
    int64_t from = 0;
    for (size_t d = 0; d < rank; ++d)
      from = from * block.globalShape[d] + block.offset[d] + index[d];
    std::memcpy(out + size_t(r * run) * size, values + size_t(from) * size,
                size * size_t(run));
    for (size_t d = rank - 1; d-- > 0;) {
      if (++index[d] < block.shape[d])
        break;
      index[d] = 0;
    }
  }
}

void ProgramRunner::setInput(plan::InputKind kind,
                             std::span<const int32_t> values) {
  setInputBlock(kind, plan::DType::I32, std::as_bytes(values).data(),
                values.size());
  if (kind == plan::InputKind::Tokens && readsCachedTables)
    wholeTokens.assign(values.begin(), values.end());
}

void ProgramRunner::setInput(plan::InputKind kind,
                             std::span<const float> values) {
  setInputBlock(kind, plan::DType::F32, std::as_bytes(values).data(),
                values.size());
}

void ProgramRunner::setNextTokens(std::span<const int32_t> values) {
  if (readsCachedTables)
    nextWholeTokens.assign(values.begin(), values.end());
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

Dispatch ProgramRunner::dispatchOf(const plan::Step &step, StepBindings &bound,
                                   bool native) const {
  // The loader checked the arity against the op table.
  const size_t numOperands = step.operands()->size(),
               numResults = step.results()->size();
  for (size_t i = 0; i < numOperands; ++i)
    bound.operands[i] = bindings[step.operands()->Get(i)];
  for (size_t i = 0; i < numResults; ++i)
    bound.results[i] = bindings[step.results()->Get(i)];
  CollectiveChannel *channel = hostChannel.get();
  if (native && backend.channel())
    channel = backend.channel();
  return {step,
          {bound.operands.data(), numOperands},
          {bound.results.data(), numResults},
          comm,
          /*bf16Products=*/false,
          channel};
}

bool ProgramRunner::runRecorded() {
  if (stepTiming || !staged ||
      !std::all_of(program->steps()->begin(), program->steps()->end(),
                   [&](const plan::Step *step) { return runsNatively(*step); }))
    return false;
  // The first untimed runs run step by step: the first allocates what the
  // steps need (moments, scratch). Later ones record once, then replay while
  // the tensors stay where they were recorded.
  if (untimedRuns++ < opByOpRuns)
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
        backend.enqueue(dispatchOf(*step, bound, /*native=*/true));
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
  timer->replayed(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count());
  ++replayCount;
  if (writesParams)
    params.markDeviceWritten();
  return true;
}

void ProgramRunner::prepareEmbeddingCaches() {
  if (!readsCachedTables)
    return;
  if (wholeTokens.empty())
    throw std::runtime_error("program '" + program->name()->str() +
                             "' reads a cached embedding table: it needs its "
                             "tokens before it runs");
  // Each table's rows first (every table has a map), then the inputs.
  for (const plan::Input *input : *program->inputs())
    if (input->kind() == plan::InputKind::CacheMap)
      params.prepareCache(input->param(), wholeTokens, backend);
  for (size_t i = 0; i < program->inputs()->size(); ++i) {
    const plan::Input &input = *program->inputs()->Get(i);
    if (!isCacheInput(input.kind()))
      continue;
    const CachedTable &cache = *params.cachedTable(input.param());
    const std::vector<int32_t> values =
        input.kind() == plan::InputKind::CacheMap
            ? cache.slotMap()
            : cache.batchSlots(elements(input.tensor()));
    std::memcpy(inputs[i].data(), values.data(),
                values.size() * sizeof(int32_t));
  }
}

namespace {
/// The embedding caches' lookahead on a thread of its own while a run's
/// steps go: joined by finish() (which rethrows what it threw) or, when a
/// step threw, by the destructor.
class CacheLookahead {
public:
  CacheLookahead(
      std::vector<std::pair<CachedTable *, std::array<float *, 3>>> tables,
      std::vector<int32_t> next)
      : tables(std::move(tables)), next(std::move(next)) {
    if (this->tables.empty() || this->next.empty())
      return;
    thread = std::thread([this] {
      try {
        for (auto &[table, host] : this->tables)
          table->planAhead(this->next, host);
      } catch (...) {
        error = std::current_exception();
      }
    });
  }
  ~CacheLookahead() {
    if (thread.joinable())
      thread.join();
  }
  void finish() {
    if (thread.joinable())
      thread.join();
    if (error)
      std::rethrow_exception(error);
  }

private:
  std::vector<std::pair<CachedTable *, std::array<float *, 3>>> tables;
  std::vector<int32_t> next;
  std::thread thread;
  std::exception_ptr error;
};
} // namespace

void ProgramRunner::run() {
  updateShapes();
  prepareEmbeddingCaches();
  bindTensors();
  for (size_t i = 0; i < deviceInputs.size(); ++i)
    backend.upload(deviceInputs[i]->data(), inputs[i].data(),
                   inputs[i].size() * sizeof(uint64_t));
  // The next run's rows, planned and gathered while this run's steps go.
  std::vector<std::pair<CachedTable *, std::array<float *, 3>>> cached;
  for (const plan::Input *input : *program->inputs())
    if (input->kind() == plan::InputKind::CacheMap)
      cached.emplace_back(params.cachedTable(input->param()),
                          params.cacheHost(input->param()));
  CacheLookahead lookahead(std::move(cached), std::move(nextWholeTokens));
  nextWholeTokens.clear();
  if (runRecorded()) {
    lookahead.finish();
    return;
  }
  timer->beginRun();
  const size_t steps = program->steps()->size();
  size_t stepIndex = 0;
  StepBindings bound;
  for (const plan::Step *step : *program->steps()) {
    const bool native = runsNatively(*step);
    const Dispatch dispatch = dispatchOf(*step, bound, native);
    // A device's own transport waits off the host: the step's time counts
    // as waiting (CollectiveChannel::waitsOnHost).
    const bool deviceExchange = dispatch.channel &&
                                !dispatch.channel->waitsOnHost() &&
                                stepExchanges(*step);
    timer->time(stepIndex++, steps, *step, deviceExchange, [&] {
      if (native) {
        backend.enqueue(dispatch);
        backend.synchronize();
      } else {
        staged->run(dispatch);
      }
    });
  }
  lookahead.finish();
  if (writesParams)
    params.markDeviceWritten();
}

} // namespace tpc::runtime
