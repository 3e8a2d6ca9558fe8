// The loader's checks of a pipelined plan (format 1.12; stage cuts 1.13;
// docs/pipeline.md):
// the Pipeline record, which stage runs each program and holds each
// parameter, and, across the stage programs of one name, that every send
// meets one receive of its type and that the programs cannot deadlock. A
// rank runs only its stage's program, so a plan that failed here would hang
// its ranks at run time instead of failing at load.
#include "PipelineCheck.h"

#include "tpc/runtime/OpTable.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <vector>

namespace tpc::runtime {

namespace {

[[noreturn]] void fail(const std::string &message) { throw PlanError(message); }

/// One message direction and tag: (from stage, to stage, tag).
using Channel = std::tuple<int64_t, int64_t, int64_t>;

/// What travels: dtype and shape of the tensor sent or received.
struct Payload {
  plan::DType dtype;
  std::vector<int64_t> shape;
  bool operator==(const Payload &other) const = default;
};

Payload payloadOf(const plan::Program &program, uint32_t tensor) {
  const plan::Tensor &t = *program.tensors()->Get(tensor);
  return {t.dtype(), toVector(t.shape())};
}

/// A collective whose group spans the stages: every stage must make the
/// same ones in the same order.
struct CrossStageCollective {
  plan::OpKind kind;
  std::vector<int64_t> axes;
  Payload payload;
  bool operator==(const CrossStageCollective &other) const = default;
};

/// Replays the stage programs of one name (each already checked alone):
/// starts never block; a send's wait needs its receive posted and a
/// receive's wait its send started (the k-th of a channel meets the k-th);
/// a collective over the stage axis waits for every stage to reach it.
void replay(const std::string &name,
            const std::vector<const plan::Program *> &stages, int64_t axis,
            const std::string &what) {
  const size_t n = stages.size();
  std::map<Channel, std::vector<Payload>> sent, received;
  std::vector<size_t> next(n, 0), collectivesDone(n, 0);
  std::vector<std::vector<CrossStageCollective>> collectives(n);
  auto stepAt = [&](size_t s, size_t i) -> const plan::Step & {
    return *stages[s]->steps()->Get(i);
  };
  auto describe = [&](size_t s) {
    const plan::Step &step = stepAt(s, next[s]);
    return "stage " + std::to_string(s) + " at step " +
           std::to_string(next[s]) + " (" + opKindName(step.kind()) + ")";
  };
  // Which send or receive of its channel a wait completes: the k-th start.
  std::vector<std::map<Channel, size_t>> sendsWaited(n), receivesWaited(n);
  std::vector<std::map<uint32_t, Channel>> receiveOf(n);
  auto spansStages = [&](const plan::Step &step) {
    const OpInfo *info = findOpInfo(step.kind());
    if (!info || info->grid != GridUse::Always ||
        isPipelineTransfer(step.kind()))
      return false;
    std::span<const int64_t> axes = stepInts(step);
    return std::find(axes.begin(), axes.end(), axis) != axes.end();
  };
  // The collectives over the stage axis each stage reaches in turn.
  for (size_t s = 0; s < n; ++s)
    for (const plan::Step *step : *stages[s]->steps())
      if (spansStages(*step))
        collectives[s].push_back(
            {step->kind(), toVector(step->ints()),
             payloadOf(*stages[s], step->operands()->Get(0))});
  for (size_t s = 1; s < n; ++s)
    if (collectives[s] != collectives[0])
      fail(what + ": the '" + name + "' programs of stages 0 and " +
           std::to_string(s) +
           " make different collectives over the stage axis (" +
           std::to_string(collectives[0].size()) + " and " +
           std::to_string(collectives[s].size()) +
           "), which would leave their ranks waiting");
  // Advances stage s as far as it can go; returns whether it moved.
  auto advance = [&](size_t s) {
    const plan::Program &program = *stages[s];
    bool moved = false;
    while (next[s] < program.steps()->size()) {
      const plan::Step &step = stepAt(s, next[s]);
      const int64_t self = int64_t(s);
      if (step.kind() == plan::OpKind::SendStart) {
        Channel channel{self, step.peer(), step.tag()};
        sent[channel].push_back(payloadOf(program, step.operands()->Get(0)));
      } else if (step.kind() == plan::OpKind::RecvStart) {
        Channel channel{step.peer(), self, step.tag()};
        receiveOf[s][step.results()->Get(0)] = channel;
        received[channel].push_back(payloadOf(program, step.results()->Get(0)));
      } else if (step.kind() == plan::OpKind::SendWait) {
        Channel channel{self, step.peer(), step.tag()};
        const size_t k = sendsWaited[s][channel];
        if (k >= sent[channel].size())
          fail(what + ": stage " + std::to_string(s) + " step " +
               std::to_string(next[s]) + " waits for a send to stage " +
               std::to_string(step.peer()) + " with tag " +
               std::to_string(step.tag()) + " that it never started");
        if (received[channel].size() <= k)
          break; // the receive is not posted yet
        ++sendsWaited[s][channel];
      } else if (step.kind() == plan::OpKind::RecvWait) {
        // The program check paired the wait with its start.
        const Channel channel = receiveOf[s].at(step.operands()->Get(0));
        const size_t k = receivesWaited[s][channel]++;
        if (sent[channel].size() <= k) {
          --receivesWaited[s][channel];
          break; // nothing sent yet
        }
      } else if (spansStages(step)) {
        const size_t j = collectivesDone[s];
        bool everyone = true;
        for (size_t t = 0; t < n; ++t)
          everyone = everyone && (collectivesDone[t] > j ||
                                  (next[t] < stages[t]->steps()->size() &&
                                   spansStages(stepAt(t, next[t])) &&
                                   collectivesDone[t] == j));
        if (!everyone)
          break;
        ++collectivesDone[s];
      }
      ++next[s];
      moved = true;
    }
    return moved;
  };
  for (bool moved = true; moved;) {
    moved = false;
    for (size_t s = 0; s < n; ++s)
      moved = advance(s) || moved;
  }
  std::string blocked;
  for (size_t s = 0; s < n; ++s)
    if (next[s] < stages[s]->steps()->size())
      blocked += (blocked.empty() ? "" : "; ") + describe(s);
  if (!blocked.empty())
    fail(what + ": the '" + name + "' stage programs deadlock: " + blocked);
  std::set<Channel> channels;
  for (const auto &[channel, payloads] : sent)
    channels.insert(channel);
  for (const auto &[channel, payloads] : received)
    channels.insert(channel);
  for (const Channel &channel : channels) {
    const auto &[from, to, tag] = channel;
    const std::vector<Payload> &out = sent[channel], &in = received[channel];
    std::string subject = what + ": '" + name + "' stage " +
                          std::to_string(from) + " to stage " +
                          std::to_string(to) + " tag " + std::to_string(tag);
    if (out.size() != in.size())
      fail(subject + ": " + std::to_string(out.size()) + " sends but " +
           std::to_string(in.size()) + " receives");
    for (size_t k = 0; k < out.size(); ++k)
      if (!(out[k] == in[k]))
        fail(subject + ": sends " + dtypeName(out[k].dtype) + " " +
             shapeString(out[k].shape) + " but receives " +
             dtypeName(in[k].dtype) + " " + shapeString(in[k].shape));
  }
}

/// Whether a transport that matches transfers by order per direction of
/// each pair of stages, whatever their tags (NCCL's point-to-point calls,
/// one queue per direction: CollectiveChannel::matchesTransfersByTag), can
/// carry the stage programs of one name, which passed `replay`: it can when
/// the k-th send from stage a to stage b has the tag of the k-th receive of
/// b from a (`replay` matched each tag's sends and receives, payloads
/// included). A queue then holds no transfer back past its peer's start:
/// the one before it was started earlier on both sides, so `replay`'s proof
/// that no order of starts and waits leaves ranks waiting holds for it too.
/// Returns why not, or "".
std::string orderMismatch(const std::string &name,
                          const std::vector<const plan::Program *> &stages) {
  struct Start {
    int64_t tag;
    size_t step;
  };
  // Per (from, to): the sends in the order `from` starts them, and the
  // receives in the order `to` starts them.
  std::map<std::pair<int64_t, int64_t>, std::vector<Start>> sends, receives;
  for (size_t s = 0; s < stages.size(); ++s) {
    const plan::Program &program = *stages[s];
    for (size_t i = 0; i < program.steps()->size(); ++i) {
      const plan::Step &step = *program.steps()->Get(i);
      if (step.kind() == plan::OpKind::SendStart)
        sends[{int64_t(s), step.peer()}].push_back({step.tag(), i});
      else if (step.kind() == plan::OpKind::RecvStart)
        receives[{step.peer(), int64_t(s)}].push_back({step.tag(), i});
    }
  }
  // `replay` counted both per tag: the totals agree.
  for (const auto &[route, out] : sends) {
    const std::vector<Start> &in = receives[route];
    for (size_t k = 0; k < out.size() && k < in.size(); ++k)
      if (out[k].tag != in[k].tag)
        return "'" + name + "' stage " + std::to_string(route.first) +
               "'s send " + std::to_string(k) + " to stage " +
               std::to_string(route.second) + " (tag " +
               std::to_string(out[k].tag) + ", step " +
               std::to_string(out[k].step) + ") would meet the receive of " +
               "tag " + std::to_string(in[k].tag) + " (step " +
               std::to_string(in[k].step) + ")";
  }
  return "";
}

} // namespace

std::vector<int64_t> toVector(const flatbuffers::Vector<int64_t> *v) {
  return v ? std::vector<int64_t>(v->begin(), v->end())
           : std::vector<int64_t>();
}

std::string checkPipeline(const plan::Plan &p, const std::string &what) {
  std::string mismatch;
  const plan::Pipeline *pipeline = p.pipeline();
  int64_t stages = 0, axis = -1;
  if (pipeline) {
    axis = pipeline->axis();
    if (axis < 0 || axis >= int64_t(p.grid()->size()))
      fail(what + ": the pipeline's axis " + std::to_string(axis) +
           " is not a grid axis");
    stages = pipeline->stages();
    if (stages != p.grid()->Get(axis))
      fail(what + ": the pipeline has " + std::to_string(stages) +
           " stages but its grid axis " + std::to_string(axis) + " has size " +
           std::to_string(p.grid()->Get(axis)));
    const std::string schedule = pipeline->schedule()->str();
    if (schedule != "gpipe" && schedule != "1f1b" && schedule != "interleaved")
      fail(what + ": unknown pipeline schedule '" + schedule + "'");
    if (pipeline->microbatches() < 1 || pipeline->chunks() < 1)
      fail(what + ": the pipeline needs at least one micro-batch and chunk");
    if (pipeline->layers() &&
        int64_t(pipeline->layers()->size()) != stages * pipeline->chunks())
      fail(what + ": the pipeline lists " +
           std::to_string(pipeline->layers()->size()) + " layer groups for " +
           std::to_string(stages) + " stages of " +
           std::to_string(pipeline->chunks()) + " chunks");
  }
  // Stage cuts (1.13): alternative layer cuts the runtime switches between.
  int64_t cuts = 1;
  const bool withCuts =
      pipeline && (pipeline->cuts() || pipeline->layer_seconds());
  if (withCuts && p.version_minor() < kPlanStageCutsMinor)
    fail(what + ": stage cuts are not in plan format 1." +
         std::to_string(p.version_minor()));
  if (pipeline && pipeline->layer_seconds()) {
    int64_t layers = 0;
    for (int64_t n : *pipeline->layers())
      layers += n;
    if (int64_t(pipeline->layer_seconds()->size()) != layers)
      fail(what + ": the pipeline gives " +
           std::to_string(pipeline->layer_seconds()->size()) +
           " layer times for " + std::to_string(layers) + " layers");
    for (double seconds : *pipeline->layer_seconds())
      if (!std::isfinite(seconds) || seconds < 0)
        fail(what + ": a layer's predicted time is " + std::to_string(seconds));
  }
  if (pipeline && pipeline->cuts()) {
    cuts = int64_t(pipeline->cuts()->size());
    if (cuts < 1)
      fail(what + ": the pipeline lists no stage cut");
    if (!pipeline->layers() || !pipeline->layer_seconds())
      fail(what + ": stage cuts need the pipeline's layers and layer times");
    const std::vector<int64_t> balanced = toVector(pipeline->layers());
    for (int64_t c = 0; c < cuts; ++c) {
      const std::vector<int64_t> layers =
          toVector(pipeline->cuts()->Get(size_t(c))->layers());
      int64_t total = 0, expected = 0;
      for (int64_t n : layers) {
        if (n < 1)
          fail(what + ": stage cut " + std::to_string(c) +
               " leaves a stage (or virtual stage) without layers");
        total += n;
      }
      for (int64_t n : balanced)
        expected += n;
      const int64_t groups = stages * pipeline->chunks();
      if (int64_t(layers.size()) != groups || total != expected)
        fail(what + ": stage cut " + std::to_string(c) + " gives " +
             std::to_string(total) + " layers to " +
             std::to_string(layers.size()) + " groups; the pipeline has " +
             std::to_string(expected) + " on " + std::to_string(groups));
      if (c == 0 && layers != balanced)
        fail(what + ": stage cut 0 must be the pipeline's layers");
    }
  }
  for (const plan::Param *param : *p.params()) {
    if (param->stage() != -1 &&
        (param->stage() < 0 || param->stage() >= stages))
      fail(what + ": parameter '" + param->name()->str() + "' is held by " +
           "stage " + std::to_string(param->stage()) + ", which the plan " +
           (pipeline ? "does not have" : "has no pipeline for"));
    if (!param->cut_stages())
      continue;
    if (p.version_minor() < kPlanStageCutsMinor)
      fail(what + ": stage cuts are not in plan format 1." +
           std::to_string(p.version_minor()));
    if (int64_t(param->cut_stages()->size()) != cuts ||
        param->cut_stages()->Get(0) != param->stage())
      fail(what + ": parameter '" + param->name()->str() + "' gives " +
           std::to_string(param->cut_stages()->size()) +
           " stages for the pipeline's " + std::to_string(cuts) +
           " cuts (the first its stage)");
    for (int32_t stage : *param->cut_stages())
      if (stage < 0 || stage >= stages)
        fail(what + ": parameter '" + param->name()->str() +
             "' is held by stage " + std::to_string(stage) +
             " under a cut; the plan has " + std::to_string(stages));
  }
  // Programs by name: one for every rank, or one per stage and cut.
  std::map<std::string, std::vector<const plan::Program *>> byName;
  for (const plan::Program *program : *p.programs()) {
    byName[program->name()->str()].push_back(program);
    if (!program->cuts())
      continue;
    if (p.version_minor() < kPlanStageCutsMinor)
      fail(what + ": stage cuts are not in plan format 1." +
           std::to_string(p.version_minor()));
    if (program->cuts()->size() == 0 || program->stage() < 0)
      fail(what + ": program '" + program->name()->str() +
           "' lists its cuts but is no stage's");
    for (uint32_t cut : *program->cuts())
      if (int64_t(cut) >= cuts)
        fail(what + ": program '" + program->name()->str() + "' serves cut " +
             std::to_string(cut) + "; the pipeline has " +
             std::to_string(cuts));
  }
  for (auto &[name, programs] : byName) {
    const bool staged = programs.front()->stage() >= 0;
    if (!staged) {
      for (const plan::Program *program : programs)
        if (program->stage() >= 0)
          fail(what + ": program '" + name +
               "' is given both for every rank and for a stage");
      if (programs.size() > 1)
        fail(what + ": program '" + name + "' appears twice");
      for (const plan::Step *step : *programs.front()->steps())
        if (isPipelineTransfer(step->kind()))
          fail(what + ": program '" + name +
               "' runs on every rank but transfers between stages");
      continue;
    }
    for (const plan::Program *program : programs) {
      const int64_t stage = program->stage();
      if (stage < 0)
        fail(what + ": program '" + name +
             "' is given both for every rank and for a stage");
      if (stage >= stages)
        fail(what + ": program '" + name + "' of stage " +
             std::to_string(stage) + ": the plan has " +
             (pipeline ? std::to_string(stages) + " stages" : "no pipeline"));
    }
    for (int64_t cut = 0; cut < cuts; ++cut) {
      const std::string ofCut =
          cuts > 1 ? " under cut " + std::to_string(cut) : "";
      std::vector<const plan::Program *> ordered(size_t(stages), nullptr);
      for (const plan::Program *program : programs) {
        if (!servesCut(*program, cut))
          continue;
        const size_t slot = size_t(program->stage());
        if (ordered[slot])
          fail(what + ": program '" + name + "' appears twice for stage " +
               std::to_string(slot) + ofCut);
        ordered[slot] = program;
      }
      for (size_t s = 0; s < ordered.size(); ++s) {
        if (!ordered[s])
          fail(what + ": program '" + name + "' has no program for stage " +
               std::to_string(s) + ofCut);
        const plan::Program &program = *ordered[s];
        for (const plan::Tensor *tensor : *program.tensors()) {
          if (tensor->storage() != plan::Storage::Param &&
              tensor->storage() != plan::Storage::ExpAvg &&
              tensor->storage() != plan::Storage::ExpAvgSq)
            continue;
          const plan::Param &param = *p.params()->Get(tensor->index());
          const int64_t holder = paramStage(param, cut);
          if (holder != int64_t(s) && holder != -1)
            fail(what + ": program '" + name + "' of stage " +
                 std::to_string(s) + ofCut + " uses parameter '" +
                 param.name()->str() + "', which stage " +
                 std::to_string(holder) + " holds");
        }
        for (const plan::Step *step : *program.steps())
          if (isPipelineTransfer(step->kind()) &&
              step->kind() != plan::OpKind::RecvWait &&
              (stepInts(*step)[0] != axis || step->peer() == int64_t(s)))
            fail(what + ": program '" + name + "' of stage " +
                 std::to_string(s) + " transfers over grid axis " +
                 std::to_string(stepInts(*step)[0]) + " to stage " +
                 std::to_string(step->peer()) +
                 ": transfers go between stages along the pipeline's axis");
      }
      replay(name, ordered, axis, what);
      if (mismatch.empty()) {
        mismatch = orderMismatch(name, ordered);
        if (!mismatch.empty() && cuts > 1)
          mismatch += ofCut;
      }
    }
  }
  return mismatch;
}

} // namespace tpc::runtime
