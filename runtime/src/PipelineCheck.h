// The loader's checks of pipeline stages (PipelineCheck.cpp).
#pragma once

#include "tpc/runtime/Plan.h"

#include <string>
#include <vector>

namespace tpc::runtime {

/// Checks Plan.pipeline, which stage runs each program and holds each
/// parameter, and replays each name's stage programs together: every send
/// meets one receive of its dtype and shape, and no order of their starts
/// and waits can leave ranks waiting on each other. Throws PlanError with
/// `what` leading the message. The programs were checked one by one before.
/// Returns why a transport matching transfers by order per direction of a
/// pair of stages, not by tag (NCCL's), could not carry the stage programs'
/// transfers, or "" when it can (or there are none):
/// LoadedPlan::inOrderTransferProblem.
std::string checkPipeline(const plan::Plan &plan, const std::string &what);

/// A plan's integer vector as a std::vector (empty when absent).
std::vector<int64_t> toVector(const flatbuffers::Vector<int64_t> *v);

} // namespace tpc::runtime
